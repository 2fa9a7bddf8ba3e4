#!/usr/bin/env bash
# Bytes typed into the full screen that are not UTF-8 (a terminal in Latin-1, a binary paste the
# terminal does not bracket) become U+FFFD, one for each maximal ill-formed subpart as in pasted
# text, and nothing typed after them is lost; well-formed characters, whole or arriving byte by
# byte, stay themselves; a sequence cut short at the end of the input is one U+FFFD. What is
# sent is what the input showed.
. "$(dirname "$0")/lib.sh"
start main 80 24
wait_ready
R=$'\xef\xbf\xbd'
tm send-keys -t "$PANE" -l 'a'
# ff: never UTF-8; c3 28: a lead byte then ASCII; e2 82 43: a 3-byte sequence cut by ASCII;
# e0 80: a lead whose second byte is out of its range (two subparts); f0 9f 91 8d: a whole emoji
tm send-keys -t "$PANE" -H ff 41 c3 28 42 e2 82 43 e0 80 44 f0 9f 91 8d
tm send-keys -t "$PANE" -l 'z'
wait_for "^> a${R}A${R}\(B${R}C${R}${R}D👍z\$"
# the emoji again, its bytes one key event at a time
tm send-keys -t "$PANE" -H f0
tm send-keys -t "$PANE" -H 9f
tm send-keys -t "$PANE" -H 91 8d
wait_for "D👍z👍\$"
# a lead byte with nothing after it: one U+FFFD once the escape delay has passed
tm send-keys -t "$PANE" -H e2
wait_for "D👍z👍${R}\$"
tm send-keys -t "$PANE" -l 'end'
wait_for "D👍z👍${R}end\$"
tm send-keys -t "$PANE" Enter
wait_for 'ready .*saved'
grep -rqF "a${R}A${R}(B${R}C${R}${R}D👍z👍${R}end" "$TMP/data/kimi-chat/sessions" ||
  fail "the message sent is not the one shown: $(grep -rho '"content": *"a[^"]*"' "$TMP/data/kimi-chat/sessions" | head -1)"
echo PASS
