#!/usr/bin/env bash
# The status bar names the session by its file name, which the user or a --load argument chose:
# control characters in it must not reach the terminal (a backspace moved the cursor back over
# the bar, an ESC showed as ^[): they show as one space, as every one-line text quoted from
# outside does (utf8_one_line), and a long name is cut at a character with "…".
. "$(dirname "$0")/lib.sh"
dir=$TMP/data/kimi-chat/sessions
mkdir -p "$dir"
name=$'a\b\bXY\e[2Jz'
python3 - "$dir/$name.json" <<'PY'
import json, sys
json.dump({'messages': [{'role': 'user', 'content': 'hello'}, {'role': 'assistant', 'content': 'hi'}]},
          open(sys.argv[1], 'w'))
PY
long=$(printf 'é%.0s' $(seq 1 40))
cp "$dir/$name.json" "$dir/$long.json"
start main 120 20 -- --no-tools --load "$dir/$name.json"
wait_ready 60
screen | tail -n 1 | grep -q 'a XY \[2Jz' || fail "the status bar does not show the name 'a XY [2Jz'"
tm send-keys -t "$PANE" C-d
check_sane main
start long 160 20 -- --no-tools --load "$dir/$long.json"
wait_ready 60
bar=$(screen | tail -n 1)
grep -q "$(printf 'é%.0s' $(seq 1 24))…" <<<"$bar" || fail "a long name is not cut at a character with …: $bar"
tm send-keys -t "$PANE" C-d
check_sane long
echo PASS
