#!/usr/bin/env bash
# The full screen at 80×24, 40×12, 20×10 and 200×60 (issue 21): the status bar and the reasoning
# header show whole fields only (a narrow window drops fields, never cuts one: not "ctx 413/" or
# "thought for 0.2 s · 3"); a tool box's "… +N lines" and every boxed row end on the box's right
# border; the focus marker stands left of the box, never over its corner; F1 help wraps (every
# line reachable by scrolling, none cut).
. "$(dirname "$0")/lib.sh"
# the demo's tools, with `now` printing 12 lines: a result that folds to "… +9 lines"
python3 - app/demo/kimi-demo/tools.json "$TMP/tools.json" <<'PY'
import json, sys
tools = json.load(open(sys.argv[1]))
tools[0]['exec']['argv'] = ['seq', '1', '12']
json.dump(tools, open(sys.argv[2], 'w'))
PY
status_re='^ (ready|waiting|thinking…|answering…|approve\? y/a/n|running a tool)( │ demo model( · cpu TP=1)?)?( [│·] ctx [0-9.k]+(/[0-9.k]+( · [0-9.]+ tok/s)?)?)?( · think(ing)? (on|off))?( · T [0-9.]+)?( · (saved|not saved|save failed))?( · [A-Za-z0-9._-]+)?( · F1 keys · /help commands)?( +↓ new)?$'
header_re='^(▌)? *(kimi )?▸ thought( for [0-9.]+ s( · [0-9]+ tokens)?)?$'

check_status() {
  local line
  line=$(screen | tail -n 1)
  echo "$line" | grep -Eq -- "$status_re" || fail "${W}x$H: the status bar cuts a field: '$line'"
}

for size in 80x24 40x12 20x10 200x60; do
  W=${size%x*} H=${size#*x}
  start "s$size" "$W" "$H" -- --tools "$TMP/tools.json"
  wait_for '^ ready( |$)'
  check_status
  tm send-keys -t "$PANE" 'What time is it?' Enter
  wait_for '^ approve\? y/a/n( |$)' 30
  check_status
  tm send-keys -t "$PANE" y
  wait_for '… \+9' 30
  wait_for '^ ready( |$)' 30
  check_status
  # the reasoning headers shown: whole fields
  headers=$(screen | grep '▸ thought' || true)
  [ -n "$headers" ] || fail "${size}: no reasoning header on the screen"
  while IFS= read -r h; do
    echo "$h" | grep -Eq -- "$header_re" || fail "${size}: the reasoning header cuts a field: '$h'"
  done <<< "$headers"
  # boxed rows end on the right border, the fold hint too
  screen | grep -q '│ … +9' || fail "${size}: no fold hint inside the box"
  bad=$(screen | grep -E '^(▌)? *(kimi )?│' | grep -v '│$' || true)
  [ -z "$bad" ] || fail "${size}: a boxed row overflows its border: '$bad'"
  # the focus marker on the tool box: left of the corner, not over it
  tm send-keys -t "$PANE" Tab
  wait_for '^─ transcript'
  for _ in 1 2 3 4; do
    screen | grep -q '^▌.*─ done' && break
    tm send-keys -t "$PANE" Up
    sleep 0.3
  done
  top=$(screen | grep '─ done' || true)
  echo "$top" | grep -Eq '^▌ *(kimi )?┌' || fail "${size}: the focus marker covers the box's corner: '$top'"
  tm send-keys -t "$PANE" Tab
  wait_gone '^─ transcript'
  # F1: page through the help; every word of it is there (as at 200×60, where nothing wraps)
  tm send-keys -t "$PANE" F1
  wait_for 'kimi-chat keys'
  : > "$TMP/pages.txt"
  for _ in $(seq 1 80); do
    screen >> "$TMP/pages.txt"
    echo '=====' >> "$TMP/pages.txt"
    screen | grep -q '↓─┘' || break
    tm send-keys -t "$PANE" PgDn
    sleep 0.2
  done
  python3 - "$TMP/pages.txt" > "$TMP/help.$size" <<'PY'
import sys
pages = open(sys.argv[1]).read().split('=====\n')
lines = []
def add_page(rows):
    # the last PgDn stops at the end of the help: its page repeats rows of the one before
    overlap = max((k for k in range(1, min(len(lines), len(rows)) + 1) if lines[-k:] == rows[:k]), default=0)
    lines.extend(rows[overlap:])
for page in pages:
    rows = page.split('\n')
    # the help's top border: the row above "kimi-chat keys", or (scrolled) the one with ↑
    top = next((i for i, r in enumerate(rows) if '┌' in r and i + 1 < len(rows)
                and ('kimi-chat keys' in rows[i + 1] or '↑─┐' in r)), None)
    if top is None:
        continue
    if '↑─┐' in rows[top]:
        left = rows[top].rindex('┌', 0, rows[top].index('↑─┐'))
    else:
        left = rows[top + 1].rindex('│', 0, rows[top + 1].index('kimi-chat keys'))
    right = rows[top].index('┐', left)
    page_rows = []
    for r in rows[top + 1:]:
        if len(r) <= right or r[left] != '│' or r[right] != '│':
            break
        page_rows.append(''.join(r[left + 1:right].split()))
    add_page(page_rows)
print('\n'.join(line for line in lines if line))
PY
  [ -s "$TMP/help.$size" ] || fail "${size}: no help box found"
  tm send-keys -t "$PANE" q
  wait_gone 'kimi-chat keys'
  tm send-keys -t "$PANE" C-d
  wait_file "$TMP/s$size.exit"
  [ "$(cat "$TMP/s$size.exit")" = 0 ] || fail "${size}: exit status $(cat "$TMP/s$size.exit")"
done
# 200×60 shows the help whole; the smaller windows wrap it: each of its lines is there, in
# order, once the spaces (where lines wrap) are taken out
python3 - "$TMP"/help.* <<'PY' || fail "F1 help: lines cut, not wrapped"
import sys
files = {f.rsplit('.', 1)[1]: open(f).read().split('\n') for f in sys.argv[1:]}
whole = [l for l in files['200x60'] if l]
assert any('reasoning' in l for l in whole), 'the 200x60 help was not read'
ok = True
for size, lines in files.items():
    text = ''.join(lines)
    for l in whole:
        if l not in text:
            print(f'{size}: F1 help lost "{l}"', file=sys.stderr)
            ok = False
sys.exit(0 if ok else 1)
PY
echo PASS
