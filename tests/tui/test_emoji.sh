#!/usr/bin/env bash
# Emoji sequences reach the terminal whole and in their place, at 80x24, 40x12, 20x10 and
# 200x60: a skin tone, a ZWJ family, VS16 and VS15, a flag, a combining mark and CJK each keep
# every code point (in the bytes kimi-chat writes, and on tmux's screen as far as tmux keeps
# them: tmux 3.3 holds at most 21 bytes in a cell, so the 4-member family is checked in the
# bytes only), the text around them stays in its columns (nothing after them is overwritten or
# pushed off the row), and a wide glyph that would take the last column moves to the next row.
. "$(dirname "$0")/lib.sh"

family4='👨‍👩‍👧‍👦'
pieces=('A👍🏽B' 'C👨‍👩‍👧D' 'E❤️F' 'G❤︎H' 'I🇫🇷J' 'Ke̊L' 'M中N' 'O😀P' "Q${family4}R")
msg="${pieces[*]} end"

check_size() {
  local name=$1 w=$2 h=$3
  start "$name" "$w" "$h"
  tm pipe-pane -O -t "$PANE" "cat > $TMP/$name.raw"
  wait_ready
  tm send-keys -t "$PANE" -l "$msg"
  tm send-keys -t "$PANE" Enter
  # sent and answered, the message at the top (Ctrl-Up: the answer may push it out of a small
  # window)
  local end=$((SECONDS + 40))
  until screen > "$TMP/$name.screen" && grep -Eq '^(  you  | )A👍' "$TMP/$name.screen" &&
        tail -n 1 "$TMP/$name.screen" | grep -Eq '^ ready( |$)'; do
    [ $SECONDS -lt $end ] || fail "$name: the message was not sent and answered"
    tm send-keys -t "$PANE" C-Up
    sleep 0.3
  done
  # the bytes: every cluster whole, the 4-member family too
  for p in "${pieces[@]}"; do
    grep -qF -- "${p:1:${#p}-2}" "$TMP/$name.raw" || fail "$name: '$p' never reached the terminal whole"
  done
  # the screen: the message's rows, gutter cut, joined, equal the message (rows break at spaces
  # or between wide clusters, so the comparison leaves the spaces out). A capture can land
  # while a redraw is on its way to tmux (CI once caught the family as its first person alone,
  # the next capture whole), so the screen gets 3 s to settle before it counts as wrong.
  local tries=10
  until W=$w MSG="$msg" FAMILY4="$family4" python3 -c "
import os, sys, unicodedata
w = int(os.environ['W'])
lines = sys.stdin.read().split('\n')
start = next(i for i, l in enumerate(lines) if 'A\U0001F44D' in l)
g = 7 if lines[start].startswith('  you  ') else 1  # a narrow window: the focus marker's column
block = [lines[start][g:]]
for l in lines[start + 1:]:
    if not l.startswith(' ' * g) or not l.strip() or l.lstrip().startswith(('kimi', '\u25b8')):
        break
    block.append(l[g:])
got = unicodedata.normalize('NFC', ''.join(''.join(block).split()))
f4 = os.environ['FAMILY4']
want = unicodedata.normalize('NFC', ''.join(os.environ['MSG'].split())).replace(f4, f4[:-1]) # tmux's cell limit
assert got == want, (got, want)
sep = [l for l in lines if l.startswith('─')]
assert sep and len(sep[0]) == w and sep[0].endswith('─'), 'the separator moved'  # it may say '↑ N lines above the end'
" < "$TMP/$name.screen" 2> "$TMP/$name.mismatch"; do
    tries=$((tries - 1))
    if [ $tries -eq 0 ]; then
      cat "$TMP/$name.mismatch"
      fail "$name: the message is not on screen as sent"
    fi
    sleep 0.3
    screen > "$TMP/$name.screen"
  done
}

check_size big 200 60
check_size main 80 24
check_size mid 40 12
check_size small 20 10

# a wide glyph that would take the last column goes to the next row: 33 columns of text at 40
start edge 40 12
wait_ready
tm send-keys -t "$PANE" -l "$(printf 'x%.0s' $(seq 32))中y"
tm send-keys -t "$PANE" Enter
wait_for '^  you  x{32}$'
wait_for '^       中y'
echo PASS
