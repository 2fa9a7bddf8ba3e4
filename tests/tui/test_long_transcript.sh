#!/usr/bin/env bash
# The conversation printed to the scrollback on quit is the whole one, however long (issue 18:
# render_model caps a frame at 4000 rows, and a 1501-exchange session ended at "question
# number 1333"): every question of a loaded 1501-exchange session is in the scrollback, in
# order, the last one included. And the status bar shows the temperature of the flag, not the
# session's; scrolled up, the rule says how many lines are below.
. "$(dirname "$0")/lib.sh"
python3 - "$TMP/long.json" <<'PY'
import json, sys
messages = []
for i in range(1, 1502):
    messages.append({"role": "user", "content": f"question number {i}"})
    messages.append({"role": "assistant", "content": f"answer number {i}\n\nwith a second paragraph"})
json.dump({"messages": messages}, open(sys.argv[1], "w"))
PY
# a scrollback that holds it all (tmux keeps 2000 lines unless told)
tm -f /dev/null new-session -d -s kc -n idle -x 120 -y 24 "sleep 600"
tm set-option -g history-limit 100000 >/dev/null
start long 120 24 -- --load "$TMP/long.json" --no-save
wait_ready 60
# the flag (lib.sh starts every run with --temperature 0) wins over the loaded session's 1
screen | tail -n 1 | grep -q '· T 0 ' || fail "the status bar does not show --temperature 0 over the loaded session"
# scrolled up and idle, the rule says how far the end is (issue 24); Ctrl-End returns
below() { screen | grep -Eo '↑ [0-9]+ lines above the end · Ctrl-End returns' | grep -Eo '[0-9]+'; }
tm send-keys -t "$PANE" PPage
wait_for '^─ ↑ [0-9]+ lines above the end · Ctrl-End returns'
one=$(below)
tm send-keys -t "$PANE" PPage
wait_for "^─ ↑ $((one + 20)) lines above the end"   # a page of 21 rows keeps one
tm send-keys -t "$PANE" C-End
wait_gone 'lines above the end'
tm send-keys -t "$PANE" C-d
wait_file "$TMP/long.exit" 60
[ "$(cat "$TMP/long.exit")" = 0 ] || fail "exit status $(cat "$TMP/long.exit")"
screen -S - | grep -oE 'question number [0-9]+$' > "$TMP/questions"
seq 1 1501 | sed 's/^/question number /' > "$TMP/want"
cmp -s "$TMP/questions" "$TMP/want" ||
    fail "the scrollback has $(wc -l < "$TMP/questions") questions, the last: $(tail -n 1 "$TMP/questions")"
echo PASS
