#!/usr/bin/env bash
# Ctrl-Z suspends and fg brings kimi-chat back intact, under a job-control shell (dash -i, which
# leaves the terminal modes as the stopped job left them): the full screen (--mouse) leaves the
# alternate screen with mouse reporting off and the shell's terminal modes, and on fg comes back
# in the alternate screen, redrawn, taking keys; the plain REPL gives the terminal back
# (canonical input, echo) and on fg readline edits again (Up recalls history, not ^[[A).
. "$(dirname "$0")/lib.sh"
tm -f /dev/null new-session -d -s kc -n job -x 80 -y 24 "env PS1='sh\$ ' sh -i"
PANE=kc:job
wait_for '^sh\$' 10
envs="XDG_CONFIG_HOME=$TMP/config XDG_DATA_HOME=$TMP/data XDG_STATE_HOME=$TMP/state LANG=C.UTF-8"

# suspended: the shell's prompt, the terminal as the shell wants it
check_suspended() {
  local what=$1
  wait_for '^sh\$ ?$' 10
  rm -f "$TMP/z.stty"
  tm send-keys -t "$PANE" "stty -a > $TMP/z.stty" Enter
  wait_file "$TMP/z.stty"
  grep -Eq '(^| )icanon( |$)' "$TMP/z.stty" || fail "$what: icanon is off while suspended"
  grep -Eq '(^| )echo( |$)' "$TMP/z.stty" || fail "$what: echo is off while suspended"
  tm send-keys -t "$PANE" 'echo sane-$((40+2))' Enter
  wait_for '^sane-42' 10
}

# the full screen
tm send-keys -t "$PANE" "env $envs $BIN --temperature 0 --mouse" Enter
wait_ready
tm send-keys -t "$PANE" 'before'
wait_for '^> before$'
tm send-keys -t "$PANE" C-z
check_suspended "full screen"
[ "$(tm display -p -t "$PANE" '#{alternate_on}')" = 0 ] || fail "full screen: the alternate screen is still on while suspended"
[ "$(tm display -p -t "$PANE" '#{mouse_any_flag}')" = 0 ] || fail "full screen: mouse reporting is still on while suspended"
tm send-keys -t "$PANE" clear Enter
tm send-keys -t "$PANE" fg Enter
wait_ready
[ "$(tm display -p -t "$PANE" '#{alternate_on}')" = 1 ] || fail "full screen: not back in the alternate screen"
screen | grep -q '^> before$' || fail "full screen: the input was not redrawn after fg"
[ "$(tm display -p -t "$PANE" '#{mouse_any_flag}')" = 1 ] || fail "full screen: mouse reporting is not back after fg"
screen | grep -q 'sane-42' && fail "full screen: the shell's text shows through after fg"
tm send-keys -t "$PANE" ' after'
wait_for '^> before after$'
tm send-keys -t "$PANE" C-u C-d
wait_for '^sh\$ ?$' 20

# the plain REPL
tm send-keys -t "$PANE" clear Enter
tm send-keys -t "$PANE" "env $envs $BIN --temperature 0 --plain 2>/dev/null" Enter
wait_for '^you> ?$' 30
tm send-keys -t "$PANE" '/help' Enter
wait_for '^you> ?$'
tm send-keys -t "$PANE" C-z
check_suspended "plain"
tm send-keys -t "$PANE" clear Enter
tm send-keys -t "$PANE" fg Enter
sleep 0.5
tm send-keys -t "$PANE" Up
wait_for '^you> /help$' 10
tm send-keys -t "$PANE" C-a Right 'x'
wait_for '^you> /xhelp$' 10
screen | grep -q '\^\[\[A' && fail "plain: Up printed ^[[A after fg"
tm send-keys -t "$PANE" C-e C-u C-d
wait_for '^sh\$ ?$' 20
echo PASS
