#!/usr/bin/env bash
# Pasted text reaches the model as pasted: a tab stays a tab (shown to the next stop of 8, the
# cursor after it), and /edit and history recall put text back through the same cleaning, the
# cursor where the text ends; a paste the terminal does not bracket (a burst of input faster
# than typing) keeps its line breaks instead of sending the first line.
. "$(dirname "$0")/lib.sh"
start main 80 24
wait_ready
tm set-buffer -b kc $'tab\tT'
tm paste-buffer -p -b kc -t "$PANE"
wait_for '^> tab     T$'
[ "$(tm display -p -t "$PANE" '#{cursor_x}')" = 11 ] || fail "the cursor is not after the expanded tab"
tm send-keys -t "$PANE" Enter
wait_for '^  you  tab     T$'
wait_for 'ready .*saved'
grep -rqF 'tab\tT' "$TMP/data/kimi-chat/sessions" || fail "the tab was not sent as a tab: $(grep -rho '"tab[^"]*"' "$TMP/data/kimi-chat/sessions" | head -1)"
# /edit: back in the input with the tab shown as on screen and the cursor at the end
tm send-keys -t "$PANE" -l '/edit'
tm send-keys -t "$PANE" Enter
wait_for '^> tab     T$'
[ "$(tm display -p -t "$PANE" '#{cursor_x}')" = 11 ] || fail "/edit: the cursor is not at the end of the text"
# history: Up (past /edit) brings the same text back the same way
tm send-keys -t "$PANE" C-u
wait_for '^>$'
tm send-keys -t "$PANE" Up Up
wait_for '^> tab     T$'
[ "$(tm display -p -t "$PANE" '#{cursor_x}')" = 11 ] || fail "history: the cursor is not at the end of the text"
# an unbracketed paste: tmux sends the line breaks as Enter
tm send-keys -t "$PANE" C-u
wait_for '^>$'
tm set-buffer -b kc $'line one\nline two\nline three'
tm paste-buffer -b kc -t "$PANE"
wait_for '^  line three$'
screen | grep -q '^> line one$' || fail "the paste's first line is not in the input"
screen | grep -q '^  line two$' || fail "the paste's second line is not in the input"
screen | grep -q 'you  line one' && fail "a line of the paste was sent"
tm send-keys -t "$PANE" Enter
wait_for '^  you  line one$'
screen | grep -q '^       line two$' || fail "the paste was not sent as one message"
echo PASS
