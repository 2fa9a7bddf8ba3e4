#!/usr/bin/env bash
# Every signal whose default action ends the process gives the terminal back before it does:
# kill -QUIT, -USR1 and -ALRM end kimi-chat (with --mouse) dead of that signal, out of the
# alternate screen, mouse reporting and bracketed paste off, the terminal modes the shell's.
. "$(dirname "$0")/lib.sh"
for sig in QUIT USR1 ALRM; do
  name=sig$sig
  start "$name" 80 24 -- --mouse
  wait_ready
  [ "$(tm display -p -t "$PANE" '#{alternate_on}')" = 1 ] || fail "$sig: not in the alternate screen to begin with"
  kill "-$sig" "$(chat_pid)"
  wait_file "$TMP/$name.exit"
  want=$((128 + $(kill -l "$sig")))
  [ "$(cat "$TMP/$name.exit")" = "$want" ] || fail "SIG$sig: exit status $(cat "$TMP/$name.exit"), want $want"
  check_sane "$name"
  [ "$(tm display -p -t "$PANE" '#{alternate_on}')" = 0 ] || fail "SIG$sig: the alternate screen is still on"
  [ "$(tm display -p -t "$PANE" '#{mouse_any_flag}')" = 0 ] || fail "SIG$sig: mouse reporting is still on"
  [ "$(tm display -p -t "$PANE" '#{mouse_standard_flag}')" = 0 ] || fail "SIG$sig: mouse reporting is still on"
done
echo PASS
