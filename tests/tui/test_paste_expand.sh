#!/usr/bin/env bash
# Issue 24: Ctrl-O shows a folded paste ("[pasted 30 lines, N KB]") whole in the input and
# folds it again; sent while shown whole it is still sent whole and the history keeps its first
# line and the marker; a paste edited while shown whole stays as text (sent as it reads).
. "$(dirname "$0")/lib.sh"
python3 -c "
for i in range(1, 31):
    print(f'row {i} of the pasted table', end='\n' if i < 30 else '')" > "$TMP/paste.txt"
kb=$(( ($(stat -c %s "$TMP/paste.txt") + 1023) / 1024 ))
marker="\\[pasted 30 lines, $kb KB\\]"
start main 100 30 -- --no-tools --max-tokens 48
wait_ready
tm load-buffer -b p "$TMP/paste.txt"
tm send-keys -t "$PANE" 'Sum up: '
tm paste-buffer -p -b p -t "$PANE"
wait_for "^> Sum up: $marker\$"
wait_for 'Ctrl-O shows it whole'
# shown whole: the marker goes, the rows are there (the input shows its end, the cursor's place)
tm send-keys -t "$PANE" C-o
wait_for '^  row 30 of the pasted table$'
screen | grep -q 'pasted 30 lines' && fail "the marker is still shown"
wait_for 'Ctrl-O folds it again'
# folded again
tm send-keys -t "$PANE" C-o
wait_for "^> Sum up: $marker\$"
screen | grep -q 'row 30 of the pasted table' && fail "the paste did not fold again"
# sent while shown whole: whole, and the history keeps the first line and the marker
tm send-keys -t "$PANE" C-o
wait_for '^  row 30 of the pasted table$'
tm send-keys -t "$PANE" Enter
wait_for '^       row 30 of the pasted table$'
wait_ready 60
session=$(ls "$TMP"/data/kimi-chat/sessions/*.json)
python3 - "$session" <<'PY' || fail "the message sent is not the whole paste"
import json, sys
lines = json.load(open(sys.argv[1]))['messages'][0]['content'].split('\n')
assert len(lines) == 30 and lines[0] == 'Sum up: row 1 of the pasted table', lines[:2]
assert lines[29] == 'row 30 of the pasted table', lines[-1]
PY

# edited while shown whole: it stays text when folding, and is sent as it reads
tm send-keys -t "$PANE" 'Again: '
tm paste-buffer -p -b p -t "$PANE"
wait_for "^> Again: $marker\$"
tm send-keys -t "$PANE" C-o
wait_for '^  row 30 of the pasted table$'
tm send-keys -t "$PANE" Up C-e ' EDITED'
wait_for '^  row 29 of the pasted table EDITED$'
tm send-keys -t "$PANE" C-o
wait_for 'folded; 1 edited paste stays as text'
screen | grep -q 'pasted 30 lines' && fail "an edited paste folded into its marker"
tm send-keys -t "$PANE" C-o
wait_for 'no folded paste in the input'
tm send-keys -t "$PANE" Enter
wait_for '^       row 29 of the pasted table EDITED$'
wait_ready 60
python3 - "$session" <<'PY' || fail "the edited paste was not sent as it reads"
import json, sys
msgs = [m for m in json.load(open(sys.argv[1]))['messages'] if m['role'] == 'user']
lines = msgs[1]['content'].split('\n')
assert len(lines) == 30 and lines[28] == 'row 29 of the pasted table EDITED', lines[27:]
PY
tm send-keys -t "$PANE" C-d
wait_file "$TMP/main.exit"
grep -qxF "Sum up: row 1 of the pasted table [pasted 30 lines, $kb KB]" "$TMP/state/kimi-chat/history" ||
  { cat "$TMP/state/kimi-chat/history" >&2; fail "the history does not keep the first line and the marker"; }
check_sane main
echo PASS
