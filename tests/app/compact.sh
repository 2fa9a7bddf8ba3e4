#!/usr/bin/env bash
# /compact end to end (issue 24): against a scripted OpenAI-compatible server (what the summary
# request and the next turn's request hold, a server error leaving the conversation as it was)
# and on the demo model (the mechanics: a summary marked in the session file, the whole
# conversation kept; the tiny model's summary says little).
#   compact.sh KIMI_CHAT
set -euo pipefail
kimi_chat=$1
here=$(cd "$(dirname "$0")" && pwd)
remote=$(cd "$here/../remote" && pwd)
tmp=$(mktemp -d)
export XDG_DATA_HOME=$tmp/data XDG_STATE_HOME=$tmp/state XDG_CONFIG_HOME=$tmp/config
export NO_PROXY='*' no_proxy='*' KIMI_TEST_KEY=sk-test

mkfifo "$tmp/keep"
python3 "$remote/server.py" --lifetime 100 < "$tmp/keep" > "$tmp/port" &
server=$!
exec 8> "$tmp/keep"
trap 'exec 8>&-; wait $server 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do grep -q PORT "$tmp/port" 2>/dev/null && break; sleep 0.05; done
url=http://127.0.0.1:$(awk '/PORT/ {print $2}' "$tmp/port")
queue() { curl -sf -X POST "$url/__next" -d "$1" > /dev/null; }
for _ in 1 2 3 4; do queue '{"fixture": "vllm_plain.sse"}'; done

cat > "$tmp/remote.kc" <<KC
first question
second question
/compact keep it short
third question
/export json $tmp/remote.json
KC
"$kimi_chat" --server "$url" --api-key-env KIMI_TEST_KEY --script "$tmp/remote.kc" > "$tmp/out" 2> "$tmp/err" || {
    echo "compact: the remote script failed"; cat "$tmp/out" "$tmp/err"; exit 1; }
grep -q "compacted: the model now sees a summary of 7 tokens" "$tmp/out" "$tmp/err" || {
    echo "compact: no note of the summary"; cat "$tmp/out" "$tmp/err"; exit 1; }
curl -sf "$url/__log" > "$tmp/log.json"
python3 - "$tmp/log.json" "$tmp/remote.json" <<'PY'
import json, sys
log = json.load(open(sys.argv[1]))
assert len(log) == 4, len(log)
ask = json.loads(log[2]['body'])
texts = [(m['role'], m.get('content')) for m in ask['messages']]
assert [r for r, _ in texts] == ['user', 'assistant', 'user'], texts
assert texts[0][1] == 'first question', texts
assert texts[2][1].startswith('Summarise our conversation so far') and texts[2][1].endswith('\n\nAlso: keep it short'), texts
assert 'tools' not in ask, ask.keys()
after = json.loads(log[3]['body'])
seen = [(m['role'], m.get('content')) for m in after['messages']]
assert [r for r, _ in seen] == ['user', 'user', 'assistant', 'user'], seen
assert seen[0][1].startswith('[Summary of the earlier conversation]') and 'Hello! 你好' in seen[0][1], seen
assert seen[1][1] == 'second question' and seen[3][1] == 'third question', seen
# the export keeps it all: the first exchange, the summary (marked), the rest
s = json.load(open(sys.argv[2]))
msgs, metas = s['messages'], s['meta']['messages']
assert [m['role'] for m in msgs] == ['user', 'assistant', 'user', 'user', 'assistant', 'user', 'assistant'], msgs
assert msgs[0]['content'] == 'first question'
assert metas[2] == {'summary': True}, metas[2]
assert not any(m and m.get('summary') for i, m in enumerate(metas) if i != 2), metas
PY

# A server error while it summarises: one line, exit 3 from the script, the session unchanged.
rm -rf "$tmp/data"
queue '{"fixture": "vllm_plain.sse"}'
queue '{"fixture": "vllm_plain.sse"}'
queue '{"fixture": "error_500.json", "mode": "status", "status": 500}'
printf 'one\ntwo\n/compact\n' > "$tmp/fail.kc"
rc=0
"$kimi_chat" --server "$url" --api-key-env KIMI_TEST_KEY --script "$tmp/fail.kc" > "$tmp/out" 2> "$tmp/err" || rc=$?
[ "$rc" = 3 ] || { echo "compact: a failed summary exited $rc, not 3"; cat "$tmp/out" "$tmp/err"; exit 1; }
grep -q "/compact: .*; the conversation is as it was" "$tmp/out" "$tmp/err" || {
    echo "compact: no one-line note of the failure"; cat "$tmp/out" "$tmp/err"; exit 1; }
python3 - "$tmp"/data/kimi-chat/sessions/*.json <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert [m['content'] for m in s['messages'] if m['role'] == 'user'] == ['one', 'two'], s['messages']
assert not any(m and m.get('summary') for m in s['meta']['messages']), s['meta']
PY

# The demo model: the mechanics on the real engine.
rm -rf "$tmp/data"
cat > "$tmp/demo.kc" <<KC
/set temperature 0
/think off
Hello!
What can you do?
/compact
Thank you.
/export json $tmp/demo.json
/export md $tmp/demo.md
KC
"$kimi_chat" --no-tools --script "$tmp/demo.kc" > "$tmp/out" 2> "$tmp/err" || {
    echo "compact: the demo script failed"; cat "$tmp/out" "$tmp/err"; exit 1; }
python3 - "$tmp/demo.json" "$tmp/demo.md" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
msgs, metas = s['messages'], s['meta']['messages']
users = [m['content'] for m in msgs if m['role'] == 'user']
assert users[0] == 'Hello!' and users[-1] == 'Thank you.', users
marked = [i for i, m in enumerate(metas) if m and m.get('summary')]
assert len(marked) == 1 and msgs[marked[0]]['content'].startswith('[Summary of'), (marked, msgs)
assert msgs[marked[0] + 1]['content'] == 'What can you do?', msgs
md = open(sys.argv[2]).read()
assert '### Summary (/compact)' in md and 'Hello!' in md, md[:400]
PY
# A context with room for a short summary but not for the cap of 1024 tokens after the prompt:
# the cap shrinks to the room (it was refused as "context full: prompt + max_new_tokens 1024").
rm -rf "$tmp/data"
head -n 5 "$tmp/demo.kc" > "$tmp/small.kc"
"$kimi_chat" --no-tools --max-context 400 --script "$tmp/small.kc" > "$tmp/out" 2> "$tmp/err" || {
    echo "compact: /compact in a 400-token context failed"; cat "$tmp/out" "$tmp/err"; exit 1; }
grep -q "compacted: the model now sees a summary of" "$tmp/out" "$tmp/err" || {
    echo "compact: no summary in a 400-token context"; cat "$tmp/out" "$tmp/err"; exit 1; }
echo "compact: ok"
