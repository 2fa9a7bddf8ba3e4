#!/usr/bin/env python3
# A third-party check of the session export: the checkpoint's own chat_template.jinja, rendered
# by jinja2 as Hugging Face renders it (see chat_render_cases.py), on the "messages" of each
# exported session file must give exactly the text chat_render gives for the session in memory.
# No tools are declared (a session holds none), so the tool declaration is not involved.
#   session_template_check.py SESSION_RENDER_DUMP WORK_DIR
import json, os, shutil, subprocess, sys

import jinja2

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

here = os.path.dirname(os.path.abspath(__file__))
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=['jinja2.ext.loopcontrols'])
env.filters['tojson'] = tojson
with open(os.path.join(here, '../golden/fixtures/tiny-k25/chat_template.jinja')) as f:
    template = env.from_string(f.read())

dump, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
subprocess.run([dump, work], check=True)
names = sorted(n[:-5] for n in os.listdir(work) if n.endswith('.json'))
failed = 0
for name in names:
    with open(os.path.join(work, name + '.json'), encoding='utf-8') as f:
        session = json.load(f)
    with open(os.path.join(work, name + '.txt'), 'rb') as f:
        ours = f.read().decode('utf-8')
    theirs = template.render(messages=session['messages'], thinking=session['meta']['settings']['thinking'],
                             add_generation_prompt=True)
    if theirs == ours:
        print(f'PASS {name} ({len(session["messages"])} messages, {len(ours)} characters)')
    else:
        failed += 1
        at = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
        print(f'FAIL {name}: first difference at {at}: jinja2 {theirs[at:at + 60]!r}, chat_render {ours[at:at + 60]!r}')
print(f'{len(names) - failed} passed, {failed} failed')
sys.exit(1 if failed or len(names) < 8 else 0)
