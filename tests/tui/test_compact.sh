#!/usr/bin/env bash
# Issue 24: /compact in the full screen: the summary shows as a note before the last exchange,
# the status bar's context figure drops, and the next answer follows; a failed /compact (here:
# nothing to compact yet) is one line and changes nothing.
. "$(dirname "$0")/lib.sh"
start main 100 40 -- --no-tools
wait_ready
ctx() { screen | tail -n 1 | grep -Eo 'ctx [0-9.k]+' | grep -Eo '[0-9.]+k?' | head -n 1; }
tm send-keys -t "$PANE" '/think off' Enter
wait_for 'thinking off'
tm send-keys -t "$PANE" '/compact' Enter
wait_for '/compact: nothing to compact'
tm send-keys -t "$PANE" 'Hello!' Enter
wait_ready 20
tm send-keys -t "$PANE" 'What can you do?' Enter
wait_for '^  you  What can you do\?'
wait_ready 20
before=$(ctx)
tm send-keys -t "$PANE" '/compact' Enter
wait_for 'compacted: the model now sees a summary of [0-9]+ tokens' 30
wait_ready 20
wait_for '\[Summary of the earlier conversation\]'
after=$(ctx)
python3 -c "
import sys
n = lambda s: float(s[:-1]) * 1000 if s.endswith('k') else float(s)
sys.exit(0 if n('$after') < n('$before') else 1)" || fail "the context figure did not drop ($before -> $after)"
# the summary sits before the last exchange, and the conversation goes on
screen | awk '/\[Summary of the earlier conversation\]/ {s = NR} /you  What can you do\?/ {q = NR} END {exit !(s && q && s < q)}' ||
  fail "the summary is not before the last exchange"
tm send-keys -t "$PANE" 'Thank you.' Enter
wait_for '^  you  Thank you\.'
wait_ready 20
tm send-keys -t "$PANE" C-d
wait_file "$TMP/main.exit"
check_sane main
echo PASS
