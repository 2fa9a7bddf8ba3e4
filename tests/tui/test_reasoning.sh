#!/usr/bin/env bash
# A question streams; its reasoning folds to one line when the answer starts; Ctrl-T unfolds
# every reasoning block and folds it back. --mouse: the wheel scrolls, a click folds.
# --no-alt-screen keeps the session on the normal screen.
. "$(dirname "$0")/lib.sh"
start main 80 24
wait_ready
tm send-keys -t "$PANE" 'Hello! Who are you?' Enter
wait_for '^  you  Hello! Who are you\?'
wait_ready
screen | grep -Eq '^  kimi ▸ thought for [0-9.]+ s · [0-9]+ tokens$' || fail "no folded reasoning line"
# folded: one line of reasoning, the answer right below it
folded=$(screen | grep -n '▸ thought for' | cut -d: -f1)
answer_line=$(screen | sed -n "$((folded + 1))p")
[ -n "${answer_line// /}" ] || fail "nothing under the folded reasoning"
tm send-keys -t "$PANE" C-t
wait_for '^  kimi ▾ thought for'
unfolded=$(screen | sed -n "$((folded + 1))p")
[ "$unfolded" != "$answer_line" ] || fail "Ctrl-T did not show the reasoning text"
tm send-keys -t "$PANE" C-t
wait_for '^  kimi ▸ thought for'
[ "$(screen | sed -n "$((folded + 1))p")" = "$answer_line" ] || fail "Ctrl-T did not fold it back"
tm send-keys -t "$PANE" C-d
check_sane main
[ "$(cat "$TMP/main.exit")" = 0 ] || fail "exit status $(cat "$TMP/main.exit")"

# --mouse: the wheel scrolls (3 rows), a click on the folded reasoning unfolds it (X10 reports,
# as tmux-256color's kmous reads them: ESC [ M, button+32, column+33, row+33)
start mouse 80 10 -- --mouse
wait_ready
tm send-keys -t "$PANE" 'Hello! Who are you?' Enter
wait_for '▸ thought for'
wait_ready
before=$(screen)
tm send-keys -t "$PANE" -l $'\e[M`!!'
end=$((SECONDS + 5))
while [ "$(screen)" = "$before" ]; do [ $SECONDS -lt $end ] || fail "--mouse: the wheel did not scroll"; sleep 0.1; done
screen | tail -n 1 | grep -q '↓ new' && fail "--mouse: '↓ new' with nothing new"
row=$(screen | grep -n '▸ thought for' | head -n 1 | cut -d: -f1)
[ -n "$row" ] || fail "--mouse: the folded reasoning scrolled away"
y=$(printf "\\$(printf '%03o' $((32 + row)))")
tm send-keys -t "$PANE" -l $'\e[M !'"$y"$'\e[M#!'"$y"
wait_for '▾ thought for'
tm send-keys -t "$PANE" C-d
check_sane mouse

# --no-alt-screen: the view runs on the normal screen; on quit the conversation replaces it,
# and no stale frame (status bar, separator) is left in the scrollback
start inline 80 24 -- --no-alt-screen
wait_ready
[ "$(tm display -p -t "$PANE" '#{alternate_on}')" = 0 ] || fail "--no-alt-screen: on the alternate screen"
tm send-keys -t "$PANE" 'Hello! Who are you?' Enter
wait_for '▸ thought for'
wait_ready
tm send-keys -t "$PANE" C-d
wait_file "$TMP/inline.exit"
check_sane inline
all=$(screen -S -1000)
echo "$all" | grep -q '^  you  Hello! Who are you?' || fail "--no-alt-screen: the conversation was not printed"
echo "$all" | grep -q '│ demo model' && fail "--no-alt-screen: a stale status bar in the scrollback"
echo PASS
