#!/usr/bin/env bash
# Editing the input: a line ending in \ continues on a new line with the text before it kept,
# and the lines are sent together; /edit puts that message back into the input (and drops the
# exchange); a command that fails leaves the input empty (the next command is not glued to it)
# and Up brings it back to be corrected.
. "$(dirname "$0")/lib.sh"
start main 80 24
wait_ready
tm send-keys -t "$PANE" -l 'hello world\'
tm send-keys -t "$PANE" Enter
wait_for '^> hello world$'
screen | grep -q 'you  ' && fail "the line ending in \\ was sent"
tm send-keys -t "$PANE" -l 'second line'
wait_for '^  second line$'
tm send-keys -t "$PANE" Enter
wait_for '^  you  hello world$'
screen | grep -q '^       second line$' || fail "the continued line was not sent with the first"
wait_for '^─ run [a-z_]+\? \[y\] once'
tm send-keys -t "$PANE" n
wait_ready
tm send-keys -t "$PANE" -l '/edit'
tm send-keys -t "$PANE" Enter
wait_for '^> hello world$'
screen | grep -q '^  second line$' || fail "/edit did not bring back the second line"
screen | grep -q 'you  hello world' && fail "/edit kept the exchange"
tm send-keys -t "$PANE" C-u C-u C-h C-u
wait_for '^>$'
tm send-keys -t "$PANE" -l '/set temperature hot'
tm send-keys -t "$PANE" Enter
wait_for 'must be a number'
wait_for '^>$'
tm send-keys -t "$PANE" -l '/reasoning sideways'
tm send-keys -t "$PANE" Enter
wait_for 'sideways'
wait_for '^>$'
screen | grep -q 'hot/reasoning' && fail "the next command was glued to the failed one"
tm send-keys -t "$PANE" Up Up
wait_for '^> /set temperature hot$'
echo PASS
