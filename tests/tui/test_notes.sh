#!/usr/bin/env bash
# Notes are not messages: /retry, /undo and /system redraw the conversation from the session, and
# the startup notes and command output (/stats) stay on screen, in order, with the exchange each
# command keeps shown once. /new and /load start another conversation: the view starts clean
# (the old notes, errors and /stats output go), with the command's confirmation.
. "$(dirname "$0")/lib.sh"
STARTUP='^       kimi-chat · demo model'
STATS='^       session: [0-9]+ messages?, [0-9]+ answers?'
QUESTION='^  you  hi there$'
start main 80 40
wait_ready
wait_for "$STARTUP"
tm send-keys -t "$PANE" -l 'hi there'
tm send-keys -t "$PANE" Enter
wait_for "$QUESTION"
wait_ready 60
tm send-keys -t "$PANE" -l '/stats'
tm send-keys -t "$PANE" Enter
wait_for "$STATS"

# the line number of the first line matching REGEX, or fail
line_of() { screen | grep -nE -- "$1" | head -n 1 | cut -d: -f1 | grep . || fail "$2"; }
# the startup note, the question, then the /stats output, each once
in_order() {
  local what=$1
  [ "$(screen | grep -cE -- "$QUESTION")" = 1 ] || fail "after $what the question is not shown once"
  local s q t
  s=$(line_of "$STARTUP" "$what dropped the startup note")
  q=$(line_of "$QUESTION" "$what dropped the question")
  t=$(line_of "$STATS" "$what dropped the /stats output")
  [ "$s" -lt "$q" ] && [ "$q" -lt "$t" ] || fail "after $what the notes moved: startup $s, question $q, stats $t"
}

tm send-keys -t "$PANE" -l '/retry'
tm send-keys -t "$PANE" Enter
# until the new answer is below the /stats output and the core is idle again
end=$((SECONDS + 60))
until screen | awk -v stats="$STATS" '$0 ~ stats { s = 1 } s && /^  kimi ▸ thought for/ { a = 1 }
                                      /^ ready │/ { r = 1 } END { exit !(a && r) }'; do
  [ $SECONDS -lt $end ] || fail "/retry showed no new answer below the /stats output"
  sleep 0.1
done
in_order /retry

tm send-keys -t "$PANE" -l '/system Be terse.'
tm send-keys -t "$PANE" Enter
wait_for '^       system prompt set$'
in_order /system
line_of '^       system prompt: Be terse\.$' "/system does not show the prompt" >/dev/null

tm send-keys -t "$PANE" -l '/undo'
tm send-keys -t "$PANE" Enter
wait_for '^       dropped the last exchange$'
screen | grep -qE -- "$QUESTION" && fail "/undo kept the exchange"
line_of "$STARTUP" "/undo dropped the startup note" >/dev/null
line_of "$STATS" "/undo dropped the /stats output" >/dev/null

# /new: nothing of the old conversation stays on screen
tm send-keys -t "$PANE" -l '/bogus'
tm send-keys -t "$PANE" Enter
wait_for 'bogus'
tm send-keys -t "$PANE" -l 'hi again'
tm send-keys -t "$PANE" Enter
wait_for '^  you  hi again$'
wait_ready 60
tm send-keys -t "$PANE" -l '/save keep'
tm send-keys -t "$PANE" Enter
wait_for 'saved'
tm send-keys -t "$PANE" -l '/new'
tm send-keys -t "$PANE" Enter
wait_for '^       new conversation$'
for old in "$STATS" "$STARTUP" 'bogus' 'hi again'; do
  screen | grep -qE -- "$old" && fail "/new left '$old' on screen"
done
# /load: the loaded conversation and its confirmation, nothing said before
tm send-keys -t "$PANE" -l '/stats'
tm send-keys -t "$PANE" Enter
wait_for "$STATS"
tm send-keys -t "$PANE" -l '/load keep'
tm send-keys -t "$PANE" Enter
wait_for '^       loaded .*keep'
screen | grep -qE -- '^  you  hi again$' || fail "/load does not show the loaded conversation"
screen | grep -qE -- "$STATS" && fail "/load left the /stats output on screen"
screen | grep -qE -- 'new conversation' && fail "/load left the /new note on screen"
echo PASS
