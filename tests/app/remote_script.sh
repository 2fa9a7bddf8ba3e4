#!/usr/bin/env bash
# kimi-chat --server against a scripted OpenAI-compatible server on 127.0.0.1 (tests/remote/
# server.py replaying recorded vLLM streams): a script with /expect, a parallel tool-call round
# trip with the tools run locally, a JSON export that names the server's model, and the API
# key found nowhere on disk.
#   remote_script.sh KIMI_CHAT
set -euo pipefail
kimi_chat=$1
here=$(cd "$(dirname "$0")" && pwd)
remote=$(cd "$here/../remote" && pwd)
tmp=$(mktemp -d)
export XDG_DATA_HOME=$tmp/data XDG_STATE_HOME=$tmp/state XDG_CONFIG_HOME=$tmp/config
export NO_PROXY='*' no_proxy='*'
key="sk-test-$RANDOM$RANDOM-do-not-store"
export KIMI_TEST_KEY=$key

mkfifo "$tmp/keep"
python3 "$remote/server.py" --lifetime 60 < "$tmp/keep" > "$tmp/port" &
server=$!
exec 8> "$tmp/keep"                      # the server exits when this closes
trap 'exec 8>&-; wait $server 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do grep -q PORT "$tmp/port" 2>/dev/null && break; sleep 0.05; done
port=$(awk '/PORT/ {print $2}' "$tmp/port")
url=http://127.0.0.1:$port
queue() { curl -sf -X POST "$url/__next" -d "{\"fixture\": \"$1\", \"mode\": \"${2:-whole}\"}" > /dev/null; }
queue vllm_reasoning.sse
queue vllm_tool_calls.sse bytewise
queue vllm_tool_answer.sse

cat > "$tmp/tools.json" <<'JSON'
[{"type": "function",
  "function": {"name": "get_weather", "description": "The weather in a city.",
               "parameters": {"type": "object", "required": ["city"],
                              "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}}},
  "exec": {"argv": ["printf", "%s: sunny\n", "{city}"]}}]
JSON
cat > "$tmp/remote.kc" <<'KC'
Hello!
/expect contains How can I help?
What is the weather in Paris and Tokyo?
/expect tool get_weather
/expect contains Paris: 18
KC
"$kimi_chat" --server "$url" --api-key-env KIMI_TEST_KEY --tools "$tmp/tools.json" --allow-tools all \
    --script "$tmp/remote.kc" > "$tmp/out" 2> "$tmp/err" || {
    echo "remote_script: kimi-chat failed"; cat "$tmp/out" "$tmp/err"; exit 1; }
grep -q "model kimi-k2.5-test" "$tmp/err"
grep -q "Paris: sunny" "$tmp/err"         # the tool ran here, for the server's call
grep -q "東京: sunny" "$tmp/err"

session=$(ls "$tmp/data/kimi-chat/sessions/"*.json)
python3 - "$session" "$url" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
meta, messages = s['meta'], s['messages']
assert meta['model'] == 'kimi-k2.5-test', meta['model']
assert meta['backend'] == 'server ' + sys.argv[2], meta['backend']
roles = [m['role'] for m in messages]
assert roles == ['user', 'assistant', 'user', 'assistant', 'tool', 'tool', 'assistant'], roles
calls = messages[3]['tool_calls']
assert [c['id'] for c in calls] == [messages[4]['tool_call_id'], messages[5]['tool_call_id']]
assert messages[4]['content'] == 'Paris: sunny\n'
PY
# The second request sent the tool results back with the exact ids.
curl -sf "$url/__log" | python3 -c "
import json, sys
log = json.load(sys.stdin)
body = json.loads(log[-1]['body'])
tools = [m for m in body['messages'] if m['role'] == 'tool']
assert [m['tool_call_id'] for m in tools] == ['functions.get_weather:0', 'functions.get_weather:1'], tools
assert all(r['headers'].get('Authorization') == 'Bearer ' + '$key' for r in log)
"
if grep -rqF "$key" "$tmp/data" "$tmp/state" "$tmp/out" "$tmp/err" 2>/dev/null; then
    echo "remote_script: the API key was written to disk"; exit 1
fi
# Ill-formed UTF-8 piped in (issue 18): sent as U+FFFD, said once; before, the request failed
# as "out of memory building the body" and kimi-chat exited 0.
queue vllm_plain.sse
printf '\xff\xfe bad\n' | "$kimi_chat" --plain --server "$url" --api-key-env KIMI_TEST_KEY --no-save \
    > "$tmp/utf8.out" 2> "$tmp/utf8.err" || { echo "remote_script: invalid UTF-8 input failed"; cat "$tmp/utf8.err"; exit 1; }
grep -q "not valid UTF-8" "$tmp/utf8.err" && ! grep -q "out of memory" "$tmp/utf8.err" ||
    { echo "remote_script: invalid UTF-8 input"; cat "$tmp/utf8.err"; exit 1; }
curl -sf "$url/__log" | python3 -c "
import json, sys
body = json.loads(json.load(sys.stdin)[-1]['body'])
assert body['messages'][-1]['content'] == '\ufffd\ufffd bad', body['messages'][-1]
"
echo "remote_script: ok"
