#!/usr/bin/env bash
# --no-alt-screen: after the chat, the scrollback holds what was there before, then the
# conversation, once: no stale frame of the view (its status bar, separator, the startup
# frame) between them. (Redraws clear the screen from the top left, which tmux and VTE push into
# the scrollback; inline, the view rewrites every line instead.)
. "$(dirname "$0")/lib.sh"
tm -f /dev/null new-session -d -s kc -n inline -x 80 -y 24 "env PS1='sh\$ ' sh"
PANE=kc:inline
wait_for '^sh\$' 10
tm send-keys -t "$PANE" "echo before-the-chat; env XDG_CONFIG_HOME=$TMP/config XDG_DATA_HOME=$TMP/data XDG_STATE_HOME=$TMP/state LANG=C.UTF-8 $BIN --temperature 0 --no-alt-screen; echo after-the-chat" Enter
wait_ready 30
tm send-keys -t "$PANE" 'Hello!' Enter
wait_for '^  you  Hello!'
wait_ready 30
tm send-keys -t "$PANE" C-d
wait_for '^after-the-chat' 20
screen -S - | sed -n '/^before-the-chat/,/^after-the-chat/p' > "$TMP/scrollback"
[ -s "$TMP/scrollback" ] || fail "no scrollback between the markers"
grep -q '^  you  Hello!' "$TMP/scrollback" || fail "the conversation is not in the scrollback"
[ "$(grep -c '^  you  Hello!' "$TMP/scrollback")" = 1 ] || fail "the question is in the scrollback twice"
if grep -Eq '^ (kimi-chat ·|ready │|waiting|thinking|answering)|^─────|^> ' "$TMP/scrollback"; then
  cat "$TMP/scrollback" >&2
  fail "a frame of the view (status bar, separator, input) was left in the scrollback"
fi
echo PASS
