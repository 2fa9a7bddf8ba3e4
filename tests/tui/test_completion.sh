#!/usr/bin/env bash
# Issue 24: Tab on a slash command completes it and its arguments (command names, theme names,
# tool names, session names, file paths), listing the candidates in the rule when there are
# several (capture-pane drops the space a completion adds); the status bar names a loaded
# session; /permissions lists and changes; Tab on a plain input still moves the focus to the
# transcript.
. "$(dirname "$0")/lib.sh"
start main 100 30
wait_ready
tm send-keys -t "$PANE" '/th' Tab
wait_for '^─ Tab: /theme /think '
screen | grep -q '^> /th$' || fail "the input changed with two candidates"
tm send-keys -t "$PANE" e Tab
wait_for '^> /theme$'
tm send-keys -t "$PANE" l Tab
wait_for '^> /theme light$'
tm send-keys -t "$PANE" Enter
wait_for 'theme light'
tm send-keys -t "$PANE" '/tools enable ' Tab
wait_for '^─ Tab: list_dir now word_count '
tm send-keys -t "$PANE" w Tab
wait_for '^> /tools enable word_count$'
tm send-keys -t "$PANE" C-u 'Hello!' Enter      # an empty conversation is no session to load
wait_for '^  you  Hello!'
wait_ready 20
tm send-keys -t "$PANE" '/save garden-notes' Enter
wait_for 'saved to .*garden-notes\.json'
tm send-keys -t "$PANE" '/load gar' Tab
wait_for '^> /load garden-notes$'
# the status bar names the session loaded
tm send-keys -t "$PANE" Enter
wait_for 'loaded .*garden-notes\.json'
wait_for '^ ready │ .* · garden-notes( · F1 keys · \/help commands)?$'
tm send-keys -t "$PANE" C-u '/export json tests/tu' Tab
wait_for '^> /export json tests/tui/$'
tm send-keys -t "$PANE" C-u '/zz' Tab
wait_for '^─ Tab: nothing to complete here'
# /permissions: listed, changed (completed with Tab), and the next call runs without asking
tm send-keys -t "$PANE" C-u '/permissions' Enter
wait_for '^ +now +ask$'
tm send-keys -t "$PANE" '/permissions n' Tab 'al' Tab Enter
wait_for 'now: always \(runs without asking in this conversation\)'
tm send-keys -t "$PANE" 'What time is it?' Enter
wait_for '┌ now +functions\.now:0 ─ done'
screen | grep -q 'run now?' && fail "the call asked although /permissions said always"
wait_ready 20
# a plain input: Tab is the transcript focus, as before
tm send-keys -t "$PANE" C-u 'hello' Tab
wait_for '^─ transcript: ↑↓ select'
tm send-keys -t "$PANE" Tab C-u C-d
wait_file "$TMP/main.exit"
check_sane main
echo PASS
