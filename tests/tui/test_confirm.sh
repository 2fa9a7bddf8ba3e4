#!/usr/bin/env bash
# Commands that change the view say so in one line (issue 21 point 15): --load on the full
# screen ("loaded FILE (1 message)"), /tools expanded|folded, /reasoning collapsed|expanded|hidden.
. "$(dirname "$0")/lib.sh"
printf '{"messages": [{"role": "user", "content": "from the file"}]}\n' > "$TMP/one.json"
start main 100 30 -- --load "$TMP/one.json"
wait_ready
wait_for "^ +loaded $TMP/one\.json \(1 message\)$"
screen | grep -qE '^  you  from the file$' || fail "--load does not show the loaded conversation"
for cmd in 'tools expanded:tool results expanded' 'tools folded:tool results folded' \
           'reasoning expanded:reasoning expanded' 'reasoning hidden:reasoning hidden' \
           'reasoning collapsed:reasoning collapsed'; do
  tm send-keys -t "$PANE" -l "/${cmd%%:*}"
  tm send-keys -t "$PANE" Enter
  wait_for "^ +${cmd#*:}$"
done
tm send-keys -t "$PANE" C-d
wait_file "$TMP/main.exit"
echo PASS
