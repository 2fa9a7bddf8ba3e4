#!/usr/bin/env bash
# A time question shows the tool-call box and the approval prompt; y runs the tool and its
# result and the final answer appear; n on a second call shows it denied.
. "$(dirname "$0")/lib.sh"
mkdir -p /tmp/x/docs
start main 80 30
wait_ready
tm send-keys -t "$PANE" 'What time is it?' Enter
wait_for '┌ now +functions\.now:0 ─ waiting for approval'
wait_for '^─ run now\? \[y\] once · \[a\] always for now · \[n\] deny'
screen | grep -q '^ approve? y/a/n │' || fail "the status bar does not ask"
tm send-keys -t "$PANE" y
wait_for '┌ now +functions\.now:0 ─ done [0-9.]+ s'
wait_for '│ → [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}'
wait_ready
screen | grep -Eq "^       (It's|The time|It is).*[0-9]{2}:[0-9]{2}" || fail "no final answer with the time"
tm send-keys -t "$PANE" 'How many words are in /tmp/x/docs/summary.txt?' Enter
wait_for '┌ word_count +functions\.word_count:[0-9]+ ─ waiting for approval'
wait_for '^─ run word_count\? \[y\] once'
tm send-keys -t "$PANE" n
wait_for '┌ word_count +functions\.word_count:[0-9]+ ─ denied'
wait_ready
screen | grep -q 'run word_count?' && fail "the prompt stayed"
tm send-keys -t "$PANE" C-d
check_sane main
echo PASS
