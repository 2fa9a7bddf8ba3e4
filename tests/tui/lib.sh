# lib.sh: what the tmux-driven TUI tests share (sourced): a private tmux server, private XDG
# folders, kimi-chat started in a pane under a shell that records its exit status and the
# terminal modes afterwards, and waits that poll the screen until a deadline.
set -euo pipefail
BIN=${1:?usage: $0 path/to/kimi-chat}
SOCK=kc-$$
TMP=$(mktemp -d)
mkdir -p "$TMP/config" "$TMP/data" "$TMP/state"
export LANG=C.UTF-8
cleanup() {
  local socket
  socket=$(tmux -L "$SOCK" display -p '#{socket_path}' 2>/dev/null || true)
  tmux -L "$SOCK" kill-server 2>/dev/null || true
  [ -n "$socket" ] && rm -f "$socket"
  rm -rf "$TMP" 2>/dev/null || { sleep 1; rm -rf "$TMP"; }
}
trap cleanup EXIT

tm() { tmux -L "$SOCK" "$@"; }
fail() { echo "FAIL: $*" >&2; echo "--- screen:" >&2; tm capture-pane -p -t "${PANE:-kc}" >&2 || true; exit 1; }

# start NAME WIDTH HEIGHT [ENV=VALUE ...] -- [kimi-chat args]: a window NAME running kimi-chat;
# when it ends the shell writes $TMP/NAME.exit and $TMP/NAME.stty and waits for commands.
start() {
  local name=$1 w=$2 h=$3; shift 3
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  local cmd="env XDG_CONFIG_HOME=$TMP/config XDG_DATA_HOME=$TMP/data XDG_STATE_HOME=$TMP/state"
  cmd+=" LANG=C.UTF-8 ${envs[*]:-} $BIN --temperature 0 $*"
  local shell="ulimit -c 0; $cmd; echo \$? > $TMP/$name.exit; stty -a > $TMP/$name.stty; PS1='sh\$ ' exec sh"
  if tm has-session 2>/dev/null; then
    tm new-window -d -n "$name" "$shell"
  else
    tm -f /dev/null new-session -d -s kc -n "$name" -x "$w" -y "$h" "$shell"
    tm set-option -g remain-on-exit off >/dev/null
  fi
  tm resize-window -t "kc:$name" -x "$w" -y "$h" 2>/dev/null || true
  PANE="kc:$name"
}

screen() { tm capture-pane -p -t "$PANE" "$@"; }

# wait_for REGEX [SECONDS]: poll the screen until a line matches (extended regex).
wait_for() {
  local re=$1 limit=${2:-20}
  local end=$((SECONDS + limit))
  while [ $SECONDS -lt $end ]; do
    screen | grep -Eq -- "$re" && return 0
    sleep 0.1
  done
  fail "no line matching '$re' within ${limit}s"
}

# wait_gone REGEX [SECONDS]: until no line matches.
wait_gone() {
  local re=$1 limit=${2:-20}
  local end=$((SECONDS + limit))
  while [ $SECONDS -lt $end ]; do
    screen | grep -Eq -- "$re" || return 0
    sleep 0.1
  done
  fail "a line still matches '$re' after ${limit}s"
}

# wait_file PATH [SECONDS]
wait_file() {
  local end=$((SECONDS + ${2:-20}))
  while [ $SECONDS -lt $end ]; do [ -s "$1" ] && return 0; sleep 0.1; done
  fail "$1 did not appear"
}

# The status bar says the core is idle (the last screen line; a narrow one may say only that).
wait_ready() { wait_for '^ ready( |$)' "${1:-20}"; }

# The terminal modes after kimi-chat ended are the shell's (canonical input, echo) and the
# shell answers.
check_sane() {
  local name=$1
  wait_file "$TMP/$name.stty"
  grep -Eq '(^| )icanon( |$)' "$TMP/$name.stty" || fail "$name: icanon is off after exit"
  grep -Eq '(^| )echo( |$)' "$TMP/$name.stty" || fail "$name: echo is off after exit"
  tm send-keys -t "$PANE" 'echo sane-$((40+2))' Enter
  wait_for '^sane-42' 10
}

# The pid of kimi-chat in the pane (the shell's child).
chat_pid() {
  local shell_pid
  shell_pid=$(tm display -p -t "$PANE" '#{pane_pid}')
  for pid in $(cat "/proc/$shell_pid/task/$shell_pid/children"); do
    [ "$(cat "/proc/$pid/comm")" = kimi-chat ] && { echo "$pid"; return; }
  done
}
