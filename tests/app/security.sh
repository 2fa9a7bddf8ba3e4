#!/usr/bin/env bash
# What tools see and what reaches the terminal, in the plain modes (issue 18), against the
# scripted server (tests/remote/server.py) with a hostile model: a tool call whose id carries
# "\r\e[2K" (rewriting the approval line) and an answer with OSC 0 (window title) and OSC 52
# (clipboard) sequences; the tool dumps its environment.
#   --prompt, --script, --plain on a pipe: the tool sees no API key and no stray variable;
#     answers to a file are byte-exact, the call line on stderr is cleaned.
#   --prompt, --plain and --script on a terminal (script(1) gives them a pty): none of the
#     model's escape sequences reaches it (a failed /expect quoting the answer included).
#   --plain on a pipe and --prompt without --allow-tools: not asked (the next line is the next
#     message, not an answer), and told what --allow-tools would allow.
#   --plain on a terminal without --allow-tools: the call asked about is shown cleaned.
#   The sessions and the readline history are 0600 in folders made 0700.
#   security.sh KIMI_CHAT
set -euo pipefail
kimi_chat=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
remote=$(cd "$here/../remote" && pwd)
tmp=$(mktemp -d)
export XDG_DATA_HOME=$tmp/data XDG_STATE_HOME=$tmp/state XDG_CONFIG_HOME=$tmp/config
export NO_PROXY='*' no_proxy='*'
key="sk-test-$RANDOM$RANDOM-secret"
export KIMI_TEST_KEY=$key OPENAI_API_KEY=$key-openai KIMI_STRAY_TOKEN=stray-$RANDOM

mkfifo "$tmp/keep"
python3 "$remote/server.py" --lifetime 400 < "$tmp/keep" > "$tmp/port" &
server=$!
exec 8> "$tmp/keep"
trap 'exec 8>&-; wait $server 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do grep -q PORT "$tmp/port" 2>/dev/null && break; sleep 0.05; done
url=http://127.0.0.1:$(awk '/PORT/ {print $2}' "$tmp/port")

# The two replies of a round trip: a call of dump_env with a hostile id, then a hostile answer.
python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def event(delta, finish=None):
    return "data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"
call = event({"role": "assistant", "content": ""}) + event({"tool_calls": [{"index": 0,
    "id": "call\r\x1b[2Krun now? (harmless)", "type": "function",
    "function": {"name": "dump_env", "arguments": "{\"note\": \"hi\"}"}}]}) \
    + event({}, "tool_calls") + "data: [DONE]\n\n"
answer = event({"role": "assistant", "content": "Done.\x1b]0;pwned-title\x07 "}) \
    + event({"content": "\x1b]52;c;cHduZWQ=\x07tab\there\r\nend"}) + event({}, "stop") + "data: [DONE]\n\n"
open(tmp + "/call.sse", "w").write(call)
open(tmp + "/answer.sse", "w").write(answer)
PY
cat > "$tmp/tools.json" <<'JSON'
[{"type": "function",
  "function": {"name": "dump_env", "description": "The environment.",
               "parameters": {"type": "object", "properties": {"note": {"type": "string"}}}},
  "exec": {"argv": ["env"], "env": ["KIMI_TEST_KEY"]}}]
JSON
# (python's urllib, not curl: nothing beyond tests/install-deps.sh)
queue() {
    python3 -c 'import json, sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/__next", json.dumps({"fixture": sys.argv[2]}).encode()).read()' "$url" "$1"
}
round() { queue "$tmp/call.sse"; queue "$tmp/answer.sse"; }
fail() { echo "security: $*"; exit 1; }
chat() { "$kimi_chat" --server "$url" --api-key-env KIMI_TEST_KEY --tools "$tmp/tools.json" "$@"; }
latest_session() { ls -t "$tmp/data/kimi-chat/sessions/"*.json | head -1; }

# The tool's output as the session file keeps it: the default variables, none of the others.
check_env() {
    local mode=$1 session
    session=$(latest_session)
    python3 - "$session" "$key" "$mode" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
out = [m['content'] for m in s['messages'] if m['role'] == 'tool']
assert out, (sys.argv[3], 'the tool did not run', s['messages'])
env = out[0]
assert 'PATH=' in env, (sys.argv[3], env)
for bad in (sys.argv[2], 'KIMI_STRAY_TOKEN', 'OPENAI_API_KEY'):
    assert bad not in env, (sys.argv[3], 'the tool saw ' + bad, env)
PY
    rm -f "$tmp/data/kimi-chat/sessions/"*.json
}

# Bytes that must never reach a terminal: the model's CR + erase line, OSC 0 and OSC 52.
no_escapes() {
    python3 - "$1" "$2" <<'PY'
import sys
data = open(sys.argv[1], 'rb').read()
for bad in (b'\r\x1b[2K', b'\x1b]0;', b'\x1b]52', b'\x07'):
    assert bad not in data, (sys.argv[2], bad, data[-600:])
assert b'^[]0;pwned-title^G' in data, (sys.argv[2], 'the cleaned form is missing', data[-600:])
PY
}

# --prompt to files: the tool's environment, the answer byte for byte, the call line cleaned.
round
chat --allow-tools dump_env -p "dump it" > "$tmp/out" 2> "$tmp/err" || fail "-p failed: $(cat "$tmp/err")"
check_env prompt
printf 'Done.\033]0;pwned-title\007 \033]52;c;cHduZWQ=\007tab\there\r\nend\n' | cmp - "$tmp/out" ||
    fail "-p > file: the answer is not byte-exact"
grep -qF 'call^M^[[2Krun now? (harmless)' "$tmp/err" || fail "-p: the call line is not shown cleaned: $(cat "$tmp/err")"
if grep -q $'\033' "$tmp/err"; then fail "-p: an escape sequence reached stderr"; fi

# --script and --plain on a pipe.
printf 'dump it\n' > "$tmp/s.kc"
round
chat --allow-tools dump_env --script "$tmp/s.kc" > "$tmp/out" 2> "$tmp/err" || fail "--script failed: $(cat "$tmp/err")"
check_env script
grep -qF $'\033]0;pwned-title' "$tmp/out" || fail "--script > file: the answer was changed"
if grep -q $'\033' "$tmp/err"; then fail "--script: an escape sequence reached stderr"; fi
round
printf 'dump it\n' | chat --plain --allow-tools dump_env > "$tmp/out" 2> "$tmp/err" || fail "--plain failed"
check_env plain
if grep -q $'\033' "$tmp/err"; then fail "--plain: an escape sequence reached stderr"; fi

# On a terminal (script(1): stdin, stdout and stderr on a pty).
round
script -qec "$(printf '%q ' "$kimi_chat" --server "$url" --api-key-env KIMI_TEST_KEY --tools "$tmp/tools.json" \
    --allow-tools dump_env -p 'dump it')" /dev/null > "$tmp/tty" < /dev/null || fail "-p on a terminal failed: $(cat "$tmp/tty")"
check_env prompt-tty
no_escapes "$tmp/tty" "-p on a terminal"
grep -qF 'call^M^[[2Krun now? (harmless)' "$tmp/tty" || fail "-p on a terminal: no cleaned call line"
grep -qP 'tab\there' "$tmp/tty" || fail "-p on a terminal: the tab was not kept"
mkdir -p "$tmp/state/kimi-chat" && echo "an older history" > "$tmp/state/kimi-chat/history"
chmod 0644 "$tmp/state/kimi-chat/history"
round
{ sleep 1; printf 'dump it\n'; sleep 4; printf '\004'; } |
    script -qec "$(printf '%q ' "$kimi_chat" --plain --server "$url" --api-key-env KIMI_TEST_KEY \
        --tools "$tmp/tools.json" --allow-tools dump_env)" /dev/null > "$tmp/tty" || fail "--plain on a terminal failed"
check_env plain-tty
no_escapes "$tmp/tty" "--plain on a terminal"
# The approval question on a terminal shows the call as it is, cleaned: the id cannot rewrite
# the line the user answers.
round
{ sleep 1; printf 'dump it\n'; sleep 3; printf 'n\n'; sleep 3; printf '\004'; } |
    script -qec "$(printf '%q ' "$kimi_chat" --plain --server "$url" --api-key-env KIMI_TEST_KEY \
        --tools "$tmp/tools.json")" /dev/null > "$tmp/tty" || fail "--plain asking on a terminal failed"
no_escapes "$tmp/tty" "--plain asking on a terminal"
grep -qF '→ dump_env {"note": "hi"}  (call^M^[[2Krun now? (harmless))' "$tmp/tty" ||
    fail "--plain on a terminal: the call asked about is not shown cleaned: $(cat -v "$tmp/tty")"
grep -q 'run dump_env? \[y\]es once' "$tmp/tty" || fail "--plain on a terminal did not ask"
grep -q 'The user denied this call to dump_env' "$tmp/tty" || fail "--plain on a terminal: n did not deny"
rm -f "$tmp/data/kimi-chat/sessions/"*.json
# (a failed /expect quotes the answer: cleaned too)
round
printf 'dump it\n/expect contains no such text\n' > "$tmp/s.kc"
code=0
script -qec "$(printf '%q ' "$kimi_chat" --server "$url" --api-key-env KIMI_TEST_KEY --tools "$tmp/tools.json" \
    --allow-tools dump_env --script "$tmp/s.kc")" /dev/null > "$tmp/tty" < /dev/null || code=$?
[ $code = 1 ] || fail "--script on a terminal: exit $code, not the failed /expect's 1: $(cat "$tmp/tty")"
check_env script-tty
no_escapes "$tmp/tty" "--script on a terminal"
grep -qF 'the last answer was: Done.^[]0;pwned-title^G' "$tmp/tty" || fail "--script: the quoted answer is not cleaned"

# No --allow-tools and nobody to ask: not run, the note says what would allow it, and on a pipe
# the next line is the next message (it used to be read as the y/a/n answer).
round
printf 'dump it\nsecond question\n' | chat --plain > "$tmp/out" 2> "$tmp/err" || fail "--plain (not allowed) failed"
grep -qF -- '--allow-tools dump_env would allow it' "$tmp/err" || fail "--plain on a pipe: no note: $(cat "$tmp/err")"
if grep -q 'run dump_env?' "$tmp/err"; then fail "--plain on a pipe asked for approval"; fi
python3 -c "
import json, sys, urllib.request
body = json.loads(json.load(urllib.request.urlopen('$url/__log'))[-1]['body'])
users = [m['content'] for m in body['messages'] if m['role'] == 'user']
assert users[-1] == 'second question', users
tool = [m['content'] for m in body['messages'] if m['role'] == 'tool'][0]
assert 'nobody could be asked' in tool and 'PATH=' not in tool, tool
" || fail "--plain on a pipe: the second line was not sent as a message"
round
chat -p "dump it" > "$tmp/out" 2> "$tmp/err" || fail "-p (not allowed) failed"
grep -qF -- '--allow-tools dump_env would allow it' "$tmp/err" || fail "-p: no note: $(cat "$tmp/err")"
if grep -q 'The user denied' "$tmp/err"; then fail "-p: says the user denied a call nobody was asked about"; fi

# Every file that holds conversation text is 0600 (the sessions, the readline history, which was
# 0644 when an older kimi-chat made it), in folders made 0700.
grep -q "dump it" "$tmp/state/kimi-chat/history" || fail "the plain REPL kept no history"
bad=$(find "$tmp/data" "$tmp/state" -mindepth 1 \( -type f ! -perm 0600 \) -o \( -type d ! -perm 0700 \))
[ -z "$bad" ] || fail "readable by others: $(ls -ld $bad)"
[ -n "$(ls "$tmp/data/kimi-chat/sessions/"*.json)" ] || fail "no session was saved"
echo "security: ok"
