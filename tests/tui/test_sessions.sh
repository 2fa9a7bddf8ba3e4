#!/usr/bin/env bash
# Issue 24: /sessions in the full screen opens a picker of the saved sessions, newest first
# (name, date, number of messages, first user line); Enter loads one as /load does; d asks
# "delete NAME? y/n" and deletes only on y, only that file, never the conversation's own file
# nor one another kimi-chat continues; Esc closes; an empty folder says so; 20x10 works; the
# plain modes keep the text listing.
. "$(dirname "$0")/lib.sh"
dir=$TMP/data/kimi-chat/sessions
mkdir -p "$dir"
# mk NAME FIRST_LINE EXCHANGES AGE_S: an OpenAI-style session file, modified AGE_S seconds ago
mk() {
  python3 - "$dir/$1.json" "$2" "$3" <<'PY'
import json, sys
msgs = []
for i in range(int(sys.argv[3])):
    msgs.append({'role': 'user', 'content': sys.argv[2] if i == 0 else f'more {i}'})
    msgs.append({'role': 'assistant', 'content': f'answer {i} to {sys.argv[2].split()[0]}'})
json.dump({'messages': msgs}, open(sys.argv[1], 'w'))
PY
  touch -d "@$(( $(date +%s) - $4 ))" "$dir/$1.json"
}
mk alpha 'Alpha question about ducks' 1 300
mk beta 'Beta question about geese' 2 200
mk gamma 'Gamma question about swans' 1 100

start main 110 30 -- --no-tools
wait_ready
tm send-keys -t "$PANE" /sessions Enter
wait_for '─ sessions \(3\) ─'
# newest first, with the date, the number of messages and the first line
order=$(screen | grep -Eo '(alpha|beta|gamma) +[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}' | cut -d' ' -f1 | tr '\n' ' ')
[ "$order" = "gamma beta alpha " ] || fail "the list is not newest first: '$order'"
screen | grep -Eq 'beta   [-0-9: ]+    4 messages  Beta question about geese' || fail "beta's row is wrong"
screen | grep -q 'Enter load · d delete · Esc close' || fail "no key hint under the list"
# Down, Enter: beta loads as /load does
tm send-keys -t "$PANE" Down Enter
wait_for '^  you  Beta question about geese'
wait_for 'loaded .*beta\.json'
wait_gone '─ sessions \('
# d then n: not deleted
tm send-keys -t "$PANE" /sessions Enter
wait_for '─ sessions \(3\) ─'
tm send-keys -t "$PANE" End d
wait_for 'delete alpha\? y/n'
tm send-keys -t "$PANE" n
wait_for ' not deleted '
[ -f "$dir/alpha.json" ] || fail "n deleted alpha"
# d then y: only alpha goes (and no lock file of it stays)
tm send-keys -t "$PANE" d
wait_for 'delete alpha\? y/n'
tm send-keys -t "$PANE" y
wait_for ' deleted alpha '
wait_for '─ sessions \(2\) ─'
[ ! -e "$dir/alpha.json" ] || fail "alpha.json is still there"
left=$(cd "$dir" && ls -A | tr '\n' ' ')
[ "$left" = ".beta.json.lock beta.json gamma.json " ] || fail "the folder holds '$left'"
# the conversation's own file is not deleted
tm send-keys -t "$PANE" End d y
wait_for "beta: this conversation's file"
[ -f "$dir/beta.json" ] || fail "the conversation's own file was deleted"
# nor one another kimi-chat continues
start other 110 30 -- --no-tools --max-tokens 48 --load "$dir/gamma.json"
wait_for '^  you  Gamma question about swans'
wait_ready
other_pane=$PANE
PANE=kc:main
tm send-keys -t "$PANE" Home d y
wait_for 'gamma: open in another kimi-chat \(pid [0-9]+\); not deleted'
[ -f "$dir/gamma.json" ] || fail "a session another kimi-chat holds was deleted"
# Esc closes; the other kimi-chat continues its session undisturbed
tm send-keys -t "$PANE" Escape
wait_gone '─ sessions \('
PANE=$other_pane
tm send-keys -t "$PANE" 'Hello there' Enter
wait_for '^  you  Hello there'
wait_ready 60
python3 -c "
import json, sys
m = json.load(open(sys.argv[1]))['messages']
assert m[0]['content'] == 'Gamma question about swans' and m[2]['content'] == 'Hello there', m" \
  "$dir/gamma.json" || fail "gamma.json lost the other kimi-chat's turn"
tm send-keys -t "$PANE" C-d
wait_file "$TMP/other.exit"

# while a turn runs (a tool that takes 6 s) the picker opens, but loading is refused with a note
python3 - "$(dirname "$0")/../../app/demo/kimi-demo/tools.json" "$TMP/tools.json" <<'PY'
import json, sys
tools = json.load(open(sys.argv[1]))
tools[0]['exec']['argv'] = ['sleep', '6']
json.dump(tools, open(sys.argv[2], 'w'))
PY
start busy 110 30 -- --tools "$TMP/tools.json" --allow-tools now
wait_ready
tm send-keys -t "$PANE" 'What time is it?' Enter
wait_for '┌ now +functions\.now:0 ─ running'
tm send-keys -t "$PANE" /sessions Enter
wait_for '─ sessions \([23]\) ─'
tm send-keys -t "$PANE" Enter
wait_for 'an answer is still coming: wait, or stop it first'
screen | grep -q 'loaded ' && fail "a session loaded while a turn ran"
wait_for '┌ now +functions\.now:0 ─ done' 30
wait_for '^ ready( |$)' 60
tm send-keys -t "$PANE" Enter
wait_for 'loaded .*\.json \([0-9]+ messages\)'
tm send-keys -t "$PANE" C-d
wait_file "$TMP/busy.exit"

# 20x10: every key of the picker, and a resize while it is open
start small 20 10 -- --no-tools
wait_ready
tm send-keys -t "$PANE" /sessions Enter
wait_for '─ sessions'
tm send-keys -t "$PANE" Down PageDown End PageUp Home d n Up
tm resize-window -t "$PANE" -x 12 -y 5
sleep 0.5
tm resize-window -t "$PANE" -x 20 -y 10
wait_for '─ sessions'
tm send-keys -t "$PANE" Escape
wait_gone '─ sessions'
wait_ready
tm send-keys -t "$PANE" C-d
wait_file "$TMP/small.exit"
[ "$(cat "$TMP/small.exit")" = 0 ] || fail "kimi-chat at 20x10 exited with $(cat "$TMP/small.exit")"

# an empty folder says so
start empty 80 24 XDG_DATA_HOME="$TMP/empty" -- --no-tools
wait_ready
tm send-keys -t "$PANE" /sessions Enter
wait_for '─ sessions \(0\) ─'
wait_for 'no saved sessions in '
tm send-keys -t "$PANE" Enter d Escape
wait_gone '─ sessions'
tm send-keys -t "$PANE" C-d
wait_file "$TMP/empty.exit"

# the plain modes keep the text listing (beta, gamma and the busy window's conversation)
PANE=kc:main
tm send-keys -t "$PANE" C-d
wait_file "$TMP/main.exit"
check_sane main
out=$(printf '/sessions\n' | env XDG_CONFIG_HOME="$TMP/config" XDG_DATA_HOME="$TMP/data" \
  XDG_STATE_HOME="$TMP/state" "$BIN" --no-tools --script - 2>&1)
grep -q '3 saved sessions in .*(newest first; /load NAME):' <<<"$out" || { echo "$out" >&2; fail "the script's /sessions is no text listing"; }
echo PASS
