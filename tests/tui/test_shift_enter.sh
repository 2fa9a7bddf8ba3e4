#!/usr/bin/env bash
# Issue 24: Shift-Enter as terminals send it apart from Enter (CSI 13;2u, the kitty keyboard
# protocol; CSI 27;2;13~, xterm's modifyOtherKeys) is a new line in the input, and in a search
# the previous match (Enter the next one, as n and N).
. "$(dirname "$0")/lib.sh"
shift_enter_kitty() { tm send-keys -t "$PANE" -H 1b 5b 31 33 3b 32 75; }
shift_enter_xterm() { tm send-keys -t "$PANE" -H 1b 5b 32 37 3b 32 3b 31 33 7e; }
start main 100 40 -- --no-tools --max-tokens 48
wait_ready

# the input: a new line each, nothing sent, no stray bytes
tm send-keys -t "$PANE" 'apple one'
shift_enter_kitty
tm send-keys -t "$PANE" 'apple two'
shift_enter_xterm
tm send-keys -t "$PANE" 'apple three'
wait_for '^  apple three$'
screen | grep -q '^> apple one$' || fail "Shift-Enter (CSI 13;2u) did not break the line"
screen | grep -q '^  apple two$' || fail "Shift-Enter (CSI 27;2;13~) did not break the line"
screen | grep -Eq '13;2u|27;2;13|\^\[' && fail "a Shift-Enter sequence left bytes in the input"
screen | grep -q '^  you ' && fail "Shift-Enter sent the message"
tm send-keys -t "$PANE" Enter
wait_for '^  you  apple one$'
wait_ready 60
session=$(ls "$TMP"/data/kimi-chat/sessions/*.json)
python3 -c "
import json, sys
m = json.load(open(sys.argv[1]))['messages'][0]['content']
assert m == 'apple one\napple two\napple three', repr(m)" "$session" || fail "the message is not the three lines"
tm send-keys -t "$PANE" 'apple four' Enter
wait_for '^  you  apple four$'
wait_ready 60

# the search: Enter / Shift-Enter step like n / N
tm send-keys -t "$PANE" C-f apple Enter
wait_for '^─ search: apple · match ([0-9]+)/([0-9]+) · n/N next/previous'
total=$(screen | grep -Eo 'match [0-9]+/[0-9]+' | head -n 1 | cut -d/ -f2)
[ "$total" -ge 3 ] || fail "'apple' matched $total times"
wait_for "^─ search: apple · match $total/$total "
shift_enter_kitty
wait_for "^─ search: apple · match $((total - 1))/$total "
shift_enter_xterm
wait_for "^─ search: apple · match $((total - 2))/$total "
tm send-keys -t "$PANE" Enter
wait_for "^─ search: apple · match $((total - 1))/$total "
# while the query is typed, Shift-Enter ends the typing at the previous match
tm send-keys -t "$PANE" Escape
sleep 0.3
tm send-keys -t "$PANE" C-f apple
wait_for "^─ search: apple · match $total/$total · Enter"
shift_enter_kitty
wait_for "^─ search: apple · match $((total - 1))/$total · n/N"
tm send-keys -t "$PANE" Escape
wait_gone '^─ search:'
screen | grep -q '^> $' || screen | grep -q '^>$' || fail "the search left text in the input"
tm send-keys -t "$PANE" C-d
wait_file "$TMP/main.exit"
check_sane main
echo PASS
