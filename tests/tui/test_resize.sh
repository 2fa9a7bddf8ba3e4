#!/usr/bin/env bash
# Resizing to 60x20 and to 200x50 while an answer streams leaves no garbage: the screen after the
# resize equals a full redraw of the same state (Ctrl-L), and every row fits the width. At 40
# and 50 columns the status bar drops whole fields, never cutting one.
. "$(dirname "$0")/lib.sh"

# same_after_redraw: capture, Ctrl-L, and wait until the redrawn screen equals the capture.
same_after_redraw() {
  local before after
  before=$(screen)
  tm send-keys -t "$PANE" C-l
  local end=$((SECONDS + 3))
  while [ $SECONDS -lt $end ]; do
    after=$(screen)
    [ "$after" = "$before" ] && return 0
    sleep 0.1
  done
  diff <(echo "$before") <(echo "$after") >&2 || true
  fail "the screen after $1 differs from a full redraw"
}

fits() {
  local w=$1
  screen | python3 -c "
import sys, unicodedata
def width(s):
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in 'WF' else 1 for c in s)
bad = [l for l in sys.stdin.read().split('\n') if width(l) > $w]
sys.exit(1 if bad else 0)" || fail "a row is wider than $w"
}

start main 80 24
wait_ready
tm send-keys -t "$PANE" 'What time is it?' Enter
tm resize-window -t "$PANE" -x 60 -y 20
wait_for '^─ run now\? \[y\] once'
[ "$(tm display -p -t "$PANE" '#{pane_width}x#{pane_height}')" = 60x20 ] || fail "not resized"
screen | tail -n 1 | grep -q '^ approve? y/a/n │' || fail "the status bar is not on the last row"
same_after_redraw "60x20"
fits 60

tm send-keys -t "$PANE" y
tm resize-window -t "$PANE" -x 200 -y 50
wait_for '│ → [0-9]{4}-'
wait_ready
same_after_redraw "200x50"
fits 200
# the separator spans the new width, right above the input row
screen | grep -Eq '^─{200}$' || fail "the separator does not span 200 columns"

# back to 80x24 mid-answer, with the help overlay open: closing it restores the screen
tm send-keys -t "$PANE" 'How many words are in /tmp/x/docs/summary.txt?' Enter
tm resize-window -t "$PANE" -x 80 -y 24
wait_for '^─ run word_count\? \[y\] once'
tm send-keys -t "$PANE" n
wait_ready
tm send-keys -t "$PANE" F1
wait_for 'kimi-chat keys'
tm send-keys -t "$PANE" Space
wait_gone 'kimi-chat keys'
same_after_redraw "the help overlay"
fits 80

for w in 40 50; do
  tm resize-window -t "$PANE" -x $w -y 12
  wait_for "^─{$w}\$"
  screen | tail -n 1 | grep -Eq '^ ready │ demo model · ctx [0-9.k]+/[0-9.k]+( · [0-9.]+ tok/s)?$' ||
    fail "at $w columns the status bar cuts a field"
done
echo PASS
