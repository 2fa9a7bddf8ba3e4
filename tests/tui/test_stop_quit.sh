#!/usr/bin/env bash
# A bracketed paste keeps its newlines; Ctrl-C on idle input clears it; Esc stops a generation
# (the long pasted question is still being read or answered) and keeps what came; Ctrl-Up
# jumps to the question; Ctrl-C stops
# one too; Ctrl-D quits with exit status 0 and the terminal sane.
. "$(dirname "$0")/lib.sh"
start main 80 24
wait_ready
printf 'first pasted line\nsecond pasted line' > "$TMP/paste.txt"
tm load-buffer -b p "$TMP/paste.txt"
tm paste-buffer -p -b p -t "$PANE"
wait_for '^> first pasted line$'
screen | grep -q '^  second pasted line$' || fail "the pasted newline was lost"
screen | grep -q 'you  first pasted' && fail "the paste was sent"
tm send-keys -t "$PANE" C-c
wait_gone 'pasted line'

# a long question: reading it and answering takes a while
python3 -c "print(' '.join(['please count the words of the notes about the garden project'] * 40), end='')" > "$TMP/long.txt"
tm load-buffer -b l "$TMP/long.txt"
tm paste-buffer -p -b l -t "$PANE"
wait_for 'the garden project$'
tm send-keys -t "$PANE" Enter Escape
wait_for 'stopped; the answer so far is kept'
wait_ready
# Ctrl-Up puts the user's message at the top; Ctrl-End follows the bottom again
tm send-keys -t "$PANE" C-Up
wait_for '^  you  please count the words'
screen | head -n 1 | grep -q '^  you  please count' || fail "Ctrl-Up did not put the question at the top"
tm send-keys -t "$PANE" C-End
wait_for 'stopped; the answer so far is kept'
screen | grep -q 'run [a-z_]*?' && fail "a tool call was asked for after the stop"

tm send-keys -t "$PANE" 'What time is it?' Enter C-c
wait_for '^  you  What time is it\?'
wait_ready
[ "$(screen | grep -c 'stopped; the answer so far is kept')" -ge 2 ] || fail "Ctrl-C did not stop the answer"
tm send-keys -t "$PANE" C-d
wait_file "$TMP/main.exit"
[ "$(cat "$TMP/main.exit")" = 0 ] || fail "exit status $(cat "$TMP/main.exit")"
check_sane main
# the conversation stays on the normal screen
screen -S -200 | grep -q 'you  What time is it?' || fail "the transcript was not printed on quit"
echo PASS
