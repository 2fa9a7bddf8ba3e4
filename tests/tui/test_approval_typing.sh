#!/usr/bin/env bash
# A key typed just before the approval question appears does not answer it: someone typing
# (or queueing) a message while the model answers goes on typing when "run now?" comes up, and
# a "y" of theirs must not run the tool (review of issue 24's queue). Here y is typed every
# 50 ms from before the question until after it: every y stays typing (the call still waits),
# and a y after a pause answers it.
. "$(dirname "$0")/lib.sh"
start main 100 30
wait_ready 60
tm send-keys -t "$PANE" 'What time is it?' Enter
asked=0
for _ in $(seq 1 1200); do
    tm send-keys -t "$PANE" -l y
    if screen | grep -Eq '^─ (run now\?|answer y, a or n)'; then asked=1; break; fi
    sleep 0.05
done
[ "$asked" = 1 ] || fail "the approval question never came"
for _ in 1 2 3 4; do tm send-keys -t "$PANE" -l y; sleep 0.05; done
sleep 1
screen | grep -q '┌ now .*waiting for approval' || fail "a y typed with the question's arrival answered it"
tm send-keys -t "$PANE" y
wait_for '┌ now +functions\.now:0 ─ done' 60
wait_ready 90
tm send-keys -t "$PANE" C-c C-d
check_sane main
echo PASS
