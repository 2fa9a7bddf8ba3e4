#!/usr/bin/env bash
# Editing the input: a line ending in \ continues on a new line with the text before it kept,
# and the lines are sent together.
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
echo PASS
