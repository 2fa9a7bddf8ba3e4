#!/usr/bin/env bash
# The full screen while a large checkpoint loads (issue 11): with --verbose (issue 21: else they
# are in /stats) the plan and the FP8 note are on screen before the load ends, the progress says GB, GB/s and the ETA; keys typed and pasted
# meanwhile wait for the input; Ctrl-C stops the load: exit 130, "loading cancelled", the
# terminal sane; kimi-chat --verify's verdict is on the full screen, not only in the scrollback.
#   test_load.sh KIMI_CHAT KIMI_MKMODEL
. "$(dirname "$0")/lib.sh"
MKMODEL=${2:?usage: $0 path/to/kimi-chat path/to/kimi-mkmodel}
# 1.6 GB of holes in sparse files: nothing on disk, seconds of loading; one for each run, so
# that the second does not find the first's pages in the page cache
"$MKMODEL" --preset bench --holes --out "$TMP/big" > /dev/null
"$MKMODEL" --preset bench --holes --out "$TMP/big2" > /dev/null

start typed 100 24 -- --model "$TMP/big" --verbose
wait_for 'loading [0-9.]+/1\.6 GB · [0-9.]+ [MG]B/s · ETA [0-9]+(s|m[0-9]{2}s)'
# the plan, word-wrapped: its lines joined
screen | sed 's/^ *//' | tr '\n' ' ' | grep -Eq 'weights read in by [0-9]+ threads( into 2 MiB pages| \([^)]*\)); context [0-9]+ positions' ||
    fail "the plan is not on screen while loading"
screen | grep -q 'the checkpoint asks for an FP8 KV cache' || fail "the FP8 note is not on screen while loading"
tm send-keys -t "$PANE" 'typed while loading'
# a Ctrl-C byte inside a paste is text, not a stop
printf ' and\003pasted' > "$TMP/paste.txt"
tm load-buffer -b p "$TMP/paste.txt"
tm paste-buffer -p -b p -t "$PANE"
wait_ready 30
wait_for '^> typed while loading and.?pasted$'
tm send-keys -t "$PANE" C-u C-d
wait_file "$TMP/typed.exit"
[ "$(cat "$TMP/typed.exit")" = 0 ] || fail "exit status $(cat "$TMP/typed.exit") after the load"

start cancelled 100 24 -- --model "$TMP/big2"
wait_for 'loading [0-9.]+/1\.6 GB'
tm send-keys -t "$PANE" C-c
wait_file "$TMP/cancelled.exit" 5
[ "$(cat "$TMP/cancelled.exit")" = 130 ] || fail "exit status $(cat "$TMP/cancelled.exit") after Ctrl-C, want 130"
wait_for '^kimi-chat: loading cancelled after [0-9.]+ of 1\.6 GB$'
check_sane cancelled
[ -z "$(find "$TMP/data" -type f)" ] || fail "a cancelled load wrote $(find "$TMP/data" -type f)"

# --verify runs before the full screen starts; its verdict is on the screen once it has
start verified 110 24 -- --verify --tp 2
wait_for '^ +verify: PASS: cpu tp 2 agrees with the CPU reference on this checkpoint \(max \|Δ logit\|'
wait_ready 30
tm send-keys -t "$PANE" C-d
wait_file "$TMP/verified.exit"
[ "$(cat "$TMP/verified.exit")" = 0 ] || fail "exit status $(cat "$TMP/verified.exit") after --verify"
echo "ok: the load on the full screen: plan first, progress, typed-ahead keys kept, Ctrl-C stops it; the --verify verdict on screen"
