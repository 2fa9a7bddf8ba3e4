#!/usr/bin/env bash
# The first screen says what this is and what to do, not the memory plan: one line with the
# model, backend and context; one with what the demo can do and that tools ask first; "F1 keys ·
# /help commands", also in the status bar while the input is empty. The plan (ranks, GiB per
# rank, bytes per position, the FP8 note) is in /stats, and on screen with --verbose; the plain
# REPL on a terminal does not print it either.
. "$(dirname "$0")/lib.sh"
PLAN='threads per rank|GiB per rank|B per position|FP8 KV cache'
start main 80 24
wait_ready
wait_for '^       kimi-chat · demo model · cpu TP=1 · context [0-9]+ tokens$'
screen | grep -q 'it can tell the time' || fail "no line of what the demo can do"
screen | grep -q 'every tool call asks first' || fail "the first screen does not say tools ask first"
screen | grep -q '^       F1 keys · /help commands$' || fail "no 'F1 keys · /help commands' line"
screen | grep -Eq -- "$PLAN" && fail "the memory plan is on the first screen"
notes=$(screen | sed -n '/^─/q;p' | grep -c .)
[ "$notes" -le 5 ] || fail "the first screen has $notes lines of notes"
screen | tail -n 1 | grep -q 'F1 keys · /help commands$' || fail "the status bar does not say F1 keys while the input is empty"
tm send-keys -t "$PANE" x
wait_for '^> x$'
screen | tail -n 1 | grep -q 'F1 keys' && fail "the status bar keeps the hint while typing"
tm send-keys -t "$PANE" C-u
wait_for 'F1 keys · /help commands$'
tm send-keys -t "$PANE" -l '/stats'
tm send-keys -t "$PANE" Enter
wait_for 'threads per rank'
screen | grep -q 'FP8 KV cache' || fail "/stats does not have the KV-cache note"
tm send-keys -t "$PANE" C-d
wait_file "$TMP/main.exit"

start verbose 80 24 -- --verbose
wait_ready
screen | grep -Eq -- "$PLAN" || fail "--verbose does not show the memory plan"

# the plain REPL on a terminal: no plan; with stderr a file, the plan is there (logs)
start plain 80 24 -- --plain
wait_for '^you> ?$' 30
screen | grep -Eq -- "$PLAN" && fail "the plain REPL on a terminal prints the memory plan"
tm send-keys -t "$PANE" C-d
wait_file "$TMP/plain.exit"
env XDG_CONFIG_HOME="$TMP/config" XDG_DATA_HOME="$TMP/data" XDG_STATE_HOME="$TMP/state" \
  "$BIN" --plain --no-save -p hi > /dev/null 2> "$TMP/stderr" < /dev/null || fail "kimi-chat -p failed"
grep -Eq -- "$PLAN" "$TMP/stderr" || fail "plain mode's stderr (a file) lost the memory plan"
echo PASS
