#!/usr/bin/env bash
# A time question shows the tool-call box and the approval prompt; y runs the tool and its
# result and the final answer appear; n on a second call shows it denied. Tab focus, fold and
# OSC 52 copy; the input history across runs, Up and Ctrl-R; Esc at the approval prompt cancels
# the call and the status bar is ready again.
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
screen | grep -Eq '^       [^ │┌└▸▾].*[0-9]{2}:[0-9]{2}' || fail "no final answer with the time"
tm send-keys -t "$PANE" 'How many words are in /tmp/x/docs/summary.txt?' Enter
wait_for '┌ word_count +functions\.word_count:[0-9]+ ─ waiting for approval'
wait_for '^─ run word_count\? \[y\] once'
tm send-keys -t "$PANE" n
wait_for '┌ word_count +functions\.word_count:[0-9]+ ─ denied'
wait_ready
screen | grep -q 'run word_count?' && fail "the prompt stayed"

# Tab focus: y copies the focused block with OSC 52 (tmux keeps it as a paste buffer),
# Up selects the block above, Enter unfolds it, Tab gives the keys back to the input
tm set-option -g set-clipboard on
tm send-keys -t "$PANE" Tab
wait_for '^─ transcript: ↑↓ select'
tm send-keys -t "$PANE" y
wait_for 'copied [0-9]+ bytes to the clipboard'
copied=$(tm show-buffer)
[ ${#copied} -ge 20 ] && screen | grep -qF -- "${copied:0:20}" || fail "y did not copy the answer shown: '$copied'"
# the note goes like every other hint (FLASH_MS, 4 s), the focus hint comes back
wait_gone 'copied [0-9]+ bytes to the clipboard' 10
screen | grep -q '^─ transcript: ↑↓ select' || fail "the focus hint did not come back after the copy note"
tm send-keys -t "$PANE" Up
tm send-keys -t "$PANE" Enter
wait_for '^▌ +▾ thought for'
tm send-keys -t "$PANE" Tab
wait_gone '^─ transcript: ↑↓ select'
tm send-keys -t "$PANE" C-d
check_sane main

# the input history is kept (the plain REPL's file): Up brings the last question back, Ctrl-R
# finds an older one
grep -qx 'What time is it?' "$TMP/state/kimi-chat/history" || fail "no history file"
start again 80 30
wait_ready
tm send-keys -t "$PANE" Up
wait_for '^> How many words are in /tmp/x/docs/summary\.txt\?$'
tm send-keys -t "$PANE" C-u C-r
tm send-keys -t "$PANE" -l 'time'
wait_for 'reverse history search: time'
wait_for '^> What time is it\?$'
tm send-keys -t "$PANE" Enter
wait_gone 'reverse history search'
tm send-keys -t "$PANE" Enter
wait_for '^  you  What time is it\?'
wait_for '^─ run now\? \[y\] once'
tm send-keys -t "$PANE" Escape
wait_for '┌ now +functions\.now:0 ─ cancelled'
wait_ready 5
echo PASS
