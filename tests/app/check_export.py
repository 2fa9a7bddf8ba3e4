#!/usr/bin/env python3
# Checks a real kimi-chat session export (demo_tools.sh): structure, tool output carried into
# the answers, prefix reuse, the JSON rendered by the checkpoint's own chat_template.jinja
# (jinja2, a third-party consumer of the OpenAI format) equal to kimi-chat's rendering, every
# generated id rendered back exactly, user-typed special-token text kept plain, and the
# Markdown export's structure.
#   check_export.py KIMI_PROBE MODEL_DIR EXPORT.json EXPORT.md
import json, re, subprocess, sys

import jinja2

probe, model, json_path, md_path = sys.argv[1:5]
failures = []
def check(cond, what):
    if not cond:
        failures.append(what)

with open(json_path, encoding='utf-8') as f:
    export = json.load(f)
messages, meta = export['messages'], export['meta']
check(meta['format'] == 'kimi-chat-session' and meta['version'] == 1, 'meta format/version')
check(meta['model'] == 'demo model' and meta['backend'].startswith('cpu'), 'meta model/backend')
check(len(meta['messages']) == len(messages), 'one meta entry per message')
roles = [m['role'] for m in messages]
check(roles == ['user', 'assistant', 'tool', 'assistant'] * 3 + ['user', 'assistant'] +
      ['user', 'assistant', 'tool', 'assistant'], 'roles: %s' % roles)

# Each tool message answers the call before it, and its output reaches the answer after it.
expected_tools = ['now', 'word_count', 'list_dir']
for turn in range(3):
    call_msg, tool_msg, answer = messages[4 * turn + 1], messages[4 * turn + 2], messages[4 * turn + 3]
    calls = call_msg.get('tool_calls') or []
    check(len(calls) == 1 and calls[0]['function']['name'] == expected_tools[turn], 'turn %d calls %s' % (turn, calls))
    if not calls:
        continue
    check(tool_msg['tool_call_id'] == calls[0]['id'], 'turn %d tool_call_id' % turn)
    check(meta['messages'][4 * turn + 2]['tool']['state'] == 'done', 'turn %d tool state' % turn)
    output = tool_msg['content'].strip()
    content = answer['content'] or ''
    if expected_tools[turn] == 'word_count':
        check(output.split()[0] in content, 'word count %r in answer %r' % (output, content))
    else:
        for line in output.splitlines():
            check(line in content, 'tool output %r in answer %r' % (line, content))


# kimi-chat's rendering (kimi-probe render) against the checkpoint's template in jinja2.
with open(model + '/tools.json') as f:
    tools = [{k: v for k, v in t.items() if k != 'exec'} for t in json.load(f)]
request = {'messages': messages, 'tools': tools, 'thinking': True, 'add_generation_prompt': False}
out = subprocess.run([probe, 'render', '--model', model], input=json.dumps(request) + '\n',
                     capture_output=True, text=True, check=True)
ours = json.loads(out.stdout)
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=['jinja2.ext.loopcontrols'])
env.filters['tojson'] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: \
    json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
# Hugging Face's tokenizer passes the TypeScript declaration as tools_ts_str; that text is
# checked against the upstream encoder by the golden chat cases, so it is taken from ours here.
head = '<|im_system|>tool_declare<|im_middle|>'
tools_ts = ours['text'][len(head):ours['text'].index('<|im_end|>')] if ours['text'].startswith(head) else None
with open(model + '/chat_template.jinja') as f:
    theirs = env.from_string(f.read()).render(messages=messages, tools=tools, tools_ts_str=tools_ts,
                                              add_generation_prompt=False)
check(theirs == ours['text'], 'jinja2 template text differs from kimi-chat render')

# Special ids by name; every generated id after </think> comes back in the rendering.
with open(model + '/tokenizer_config.json') as f:
    specials = {v['content']: int(k) for k, v in json.load(f)['added_tokens_decoder'].items()}
ids = ours['ids']
def contains(hay, needle):
    return any(hay[i:i + len(needle)] == needle for i in range(len(hay) - len(needle) + 1))
checked = 0
for i, m in enumerate(meta['messages']):
    gen = (m or {}).get('ids')
    if not gen:
        continue
    # the history rule drops the reasoning, so what is rendered back is what followed it
    tail = gen[gen.index(specials['</think>']) + 1:] if specials['</think>'] in gen else gen[-1:]
    check(contains(ids, tail), 'message %d: its generated ids are not rendered back' % i)
    checked += 1
check(checked == 9, '%d assistant messages with ids' % checked)

# Prefix reuse: each answer's prompt is the rendering of the messages before it, and the engine
# reused exactly the longest prefix it shares with the cache (the previous prompt and the ids
# generated after it, the stop id not included), all but the last token at most. A follow-up
# question thus prefills only what changed: the new question, plus the previous turn's
# messages whose reasoning the template's history rule now drops.
prefixes = [{'messages': messages[:i], 'tools': tools, 'thinking': True, 'add_generation_prompt': True}
            for i, m in enumerate(meta['messages']) if m and 'stats' in m]
out = subprocess.run([probe, 'render', '--model', model], input=''.join(json.dumps(r) + '\n' for r in prefixes),
                     capture_output=True, text=True, check=True)
prompts = [json.loads(line)['ids'] for line in out.stdout.splitlines()]
answers = [m for m in meta['messages'] if m and 'stats' in m]
cache = []
for k, (prompt, m) in enumerate(zip(prompts, answers)):
    stats = m['stats']
    check(stats['prompt_tokens'] == len(prompt), 'answer %d: prompt %d tokens, rendering %d' % (k, stats['prompt_tokens'], len(prompt)))
    lcp = 0
    while lcp < min(len(cache), len(prompt)) and cache[lcp] == prompt[lcp]:
        lcp += 1
    check(stats['reused_tokens'] == min(lcp, len(prompt) - 1),
          'answer %d: reused %d, expected %d' % (k, stats['reused_tokens'], min(lcp, len(prompt) - 1)))
    cache = prompt + m['ids'][:-1]
reuse = [(m['stats']['reused_tokens'], m['stats']['prompt_tokens']) for m in answers]
print('check_export: reused/prompt tokens per answer:', reuse)
check(ids.count(specials['<|im_end|>']) == len(messages) + 1,  # + the tool declaration
      '<|im_end|> typed by the user must stay plain text')
check('<|im_end|>' in messages[12]['content'], 'the typed text is kept')
check('<|im_end|>.txt' in messages[16]['content'], 'a tool result that spells special tokens is kept as text')

with open(md_path, encoding='utf-8') as f:
    md = f.read()
check(md.count('### You') == 5 and md.count('### Kimi') >= 4, 'markdown turns')
check('<details><summary>Thinking' in md and '```json' in md and 'functions.now:0' in md, 'markdown reasoning/tool call')
check(re.search(r'<details><summary>Result of functions\.list_dir:\d', md) is not None, 'markdown tool result')
check(re.search(r'tok/s', md) is not None and 'Model: demo model' in md, 'markdown stats/header')

for f in failures:
    print('check_export: FAIL', f)
print('check_export: %d failed' % len(failures))
sys.exit(1 if failures else 0)
