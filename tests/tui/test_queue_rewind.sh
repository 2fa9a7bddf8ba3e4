#!/usr/bin/env bash
# Issue 24: Enter while the model works queues the message (shown dimmed in the rule, sent when
# the turn ends); Esc takes a queued message back into the input; a stopped turn hands the
# queue back to the input; Tab + e on one of your messages rewinds to it (its text in the
# input, the rest cut off), the resend says what the cache reused, and /undo brings the cut
# part back; Esc Esc rewinds to the last message.
. "$(dirname "$0")/lib.sh"
# the clock tool takes 8 s: the turn is busy long enough to type into, even on a loaded machine
python3 - "$(dirname "$0")/../../app/demo/kimi-demo/tools.json" "$TMP/tools.json" <<'PY'
import json, sys
tools = json.load(open(sys.argv[1]))
tools[0]['exec']['argv'] = ['sh', '-c', 'sleep 8; date "+%Y-%m-%d %H:%M:%S"']
json.dump(tools, open(sys.argv[2], 'w'))
PY
start main 100 40 -- --tools "$TMP/tools.json" --allow-tools now
wait_ready
tm send-keys -t "$PANE" 'What time is it?' Enter
wait_for '┌ now +functions\.now:0 ─ running'
tm send-keys -t "$PANE" 'Thank you!' Enter
wait_for '^─ queued: Thank you! · sent when the answer ends · Esc takes it back'
screen | grep -q '^> Thank you' && fail "the queued message stayed in the input"
wait_for '^  you  Thank you!' 40
wait_ready
screen | grep -q 'queued:' && fail "the queue is still shown"

# Esc takes a queued message back (the answer goes on); Esc again stops it
tm send-keys -t "$PANE" 'What time is it now?' Enter
wait_for '┌ now +functions\.now:[0-9]+ ─ running'
tm send-keys -t "$PANE" 'Never mind' Enter
wait_for '^─ queued: Never mind'
tm send-keys -t "$PANE" Escape
wait_for '^> Never mind$'
wait_gone 'queued:'
screen | grep -q '^ (ready|stopping)' && fail "the first Esc stopped the answer"
# queued again, then the turn is stopped: the message comes back to the input, not lost
tm send-keys -t "$PANE" Enter
wait_for '^─ queued: Never mind'
tm send-keys -t "$PANE" C-c
wait_for '^> Never mind$'
wait_ready
screen | grep -q '^  you  Never mind' && fail "the queued message was sent after a stop"
tm send-keys -t "$PANE" C-u

# Tab, select the first question, e: it goes back into the input, the rest is cut off
tm send-keys -t "$PANE" C-Home
for _ in $(seq 40); do
  screen | grep -q '^  you  What time is it?$' && break
  tm send-keys -t "$PANE" PPage; sleep 0.1
done
tm send-keys -t "$PANE" Tab
for _ in $(seq 60); do
  screen | grep -Eq '^▌ +you  What time is it\?$' && break
  tm send-keys -t "$PANE" Up; sleep 0.05
done
screen | grep -Eq '^▌ +you  What time is it\?$' || fail "could not select the first question"
tm send-keys -t "$PANE" e
wait_for '^> What time is it\?$'
wait_for 'rewound: [0-9]+ messages cut off \(/undo brings them back\)'
screen | grep -q 'you  Thank you!' && fail "the cut-off part is still shown"
# /undo brings it all back
tm send-keys -t "$PANE" C-u '/undo' Enter
wait_for 'brought back the [0-9]+ messages the rewind cut off'
wait_for '^  you  Thank you!'
# Esc Esc: the last message back into the input; Enter resends it, the cache saves the rest
tm send-keys -t "$PANE" Escape Escape
wait_for '^> What time is it now\?$'
tm send-keys -t "$PANE" Enter
wait_for 'after the rewind: [0-9]+ of [0-9]+ prompt positions reused from the cache' 20
reused=$(screen | grep -Eo 'after the rewind: [0-9]+ of' | grep -Eo '[0-9]+' | head -n 1)
[ "$reused" -gt 100 ] || fail "the resend reused only $reused positions"
wait_ready 20
tm send-keys -t "$PANE" C-d
wait_file "$TMP/main.exit"
check_sane main
echo PASS
