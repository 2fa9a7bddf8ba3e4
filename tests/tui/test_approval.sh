#!/usr/bin/env bash
# The approval prompt owns the keyboard (issue 18): typing "Cancel" while "run now?" waits
# answers nothing (it used to approve "always" with its a) and types nothing; Enter says what
# the question wants; a asks once more and a second a allows it; /tools shows the grant and
# /tools ask takes it back. What the tool saw: `now` here runs env, with an API key in the app's
# environment, and the key is not in its output. The history file is 0600 in a 0700 folder;
# /export refuses to replace a file.
. "$(dirname "$0")/lib.sh"
python3 - "$(pwd)/app/demo/kimi-demo/tools.json" "$TMP/tools.json" <<'PY'
import json, sys
tools = json.load(open(sys.argv[1]))
tools[0]['exec']['argv'] = ['env']
json.dump(tools, open(sys.argv[2], 'w'))
PY
key=sk-tui-$RANDOM$RANDOM-secret
echo "my notes" > "$TMP/mine.md"
start main 100 30 OPENAI_API_KEY=$key KIMI_STRAY_TOKEN=stray -- --tools "$TMP/tools.json"
wait_ready 60
tm send-keys -t "$PANE" 'What time is it?' Enter
wait_for '^─ run now\? \[y\] once · \[a\] always for now · \[n\] deny' 60
tm send-keys -t "$PANE" -l 'Cancel'
wait_for '^─ answer y, a or n'
screen | grep -q '┌ now .*waiting for approval' || fail "a typed word answered the question"
screen | grep -Eq '^> *$' || fail "the typed word reached the input"
wait_gone '^─ answer y, a or n'   # the hint goes after 4 s: the keys were all taken, long ago
tm send-keys -t "$PANE" Enter
wait_for '^─ answer y, a or n'
screen | grep -q '┌ now .*waiting for approval' || fail "Enter answered the question"
screen | grep -Eq '^> *$' || fail "Enter reached the input"
wait_gone '^─ answer y, a or n'
tm send-keys -t "$PANE" a
wait_for '^─ a again to allow now for this session'
screen | grep -q '┌ now .*waiting for approval' || fail "one a allowed the tool"
tm send-keys -t "$PANE" a
wait_for '┌ now +functions\.now:0 ─ done' 60
wait_ready 90   # the answer after the tool (slow when every test runs at once)
tm send-keys -t "$PANE" '/tools' Enter
wait_for '^ *now +on +always \(a\)'
tm send-keys -t "$PANE" '/tools ask now' Enter
wait_for 'now asks before every call again'
tm send-keys -t "$PANE" '/tools' Enter
wait_for '^ *now +on +asks '
tm send-keys -t "$PANE" "/export $TMP/mine.md" Enter
wait_for 'mine.md exists \(/export md '
grep -qx 'my notes' "$TMP/mine.md" || fail "/export replaced an existing file"
tm send-keys -t "$PANE" C-c C-d
check_sane main

session=$(ls "$TMP/data/kimi-chat/sessions/"*.json | head -1)
python3 - "$session" "$key" <<'PY' || fail "the tool saw what it should not"
import json, sys
s = json.load(open(sys.argv[1]))
env = [m['content'] for m in s['messages'] if m['role'] == 'tool'][0]
assert 'PATH=' in env, env
assert sys.argv[2] not in env and 'KIMI_STRAY_TOKEN' not in env, env
PY
[ "$(stat -c %a "$TMP/state/kimi-chat/history")" = 600 ] || fail "history is $(stat -c %a "$TMP/state/kimi-chat/history")"
[ "$(stat -c %a "$TMP/state/kimi-chat")" = 700 ] || fail "the state folder is $(stat -c %a "$TMP/state/kimi-chat")"
echo PASS
