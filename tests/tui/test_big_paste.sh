#!/usr/bin/env bash
# Issue 24: a big paste shows folded in the input as "[pasted 200 lines, N KB]", is sent whole
# (the session has every line), and the input history keeps its first line and the marker, not
# the paste; a small paste stays as typed.
. "$(dirname "$0")/lib.sh"
start main 100 30 -- --no-tools
wait_ready
python3 -c "
for i in range(1, 201):
    print(f'line {i} of the pasted log: status ok', end='\n' if i < 200 else '')" > "$TMP/big.txt"
kb=$(( ($(stat -c %s "$TMP/big.txt") + 1023) / 1024 ))
tm load-buffer -b big "$TMP/big.txt"
tm send-keys -t "$PANE" 'Summarise this: '
tm paste-buffer -p -b big -t "$PANE"
wait_for "^> Summarise this: \\[pasted 200 lines, $kb KB\\]\$"
screen | grep -q 'line 2 of the pasted log' && fail "the paste is not folded"
tm send-keys -t "$PANE" Enter
wait_for '^       line 200 of the pasted log: status ok$'
wait_ready 60
session=$(ls "$TMP"/data/kimi-chat/sessions/*.json)
python3 - "$session" <<'PY' || fail "the message sent is not the whole paste"
import json, sys
m = json.load(open(sys.argv[1]))['messages'][0]['content']
lines = m.split('\n')
assert len(lines) == 200 and lines[0] == 'Summarise this: line 1 of the pasted log: status ok', lines[:2]
assert lines[199] == 'line 200 of the pasted log: status ok', lines[-1]
PY
# the history: the first line and the marker
tm send-keys -t "$PANE" C-d
wait_file "$TMP/main.exit"
grep -qxF "Summarise this: line 1 of the pasted log: status ok [pasted 200 lines, $kb KB]" "$TMP/state/kimi-chat/history" ||
  { cat "$TMP/state/kimi-chat/history" >&2; fail "the history does not keep the first line and the marker"; }
grep -q 'line 2 of the pasted log' "$TMP/state/kimi-chat/history" && fail "the history keeps the whole paste"
check_sane main

# a small paste stays as typed
start small 100 30 -- --no-tools
wait_ready
printf 'one\ntwo' > "$TMP/small.txt"
tm load-buffer -b small "$TMP/small.txt"
tm paste-buffer -p -b small -t "$PANE"
wait_for '^> one$'
screen | grep -q '^  two$' || fail "a small paste was folded"
echo PASS
