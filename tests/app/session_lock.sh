#!/usr/bin/env bash
# session_lock: two kimi-chat processes on one session (issue 18). A holds the session it
# resumed; B, resuming the same one meanwhile, says "session X is open in another kimi-chat
# (pid A); continuing in Y" and writes Y, never X; A's later turns stay in X. Nothing of either
# conversation is lost, and no lock file is left once both have quit.
#   session_lock.sh KIMI_CHAT
set -uo pipefail
kimi_chat=$1
tmp=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
export XDG_DATA_HOME=$tmp/data XDG_STATE_HOME=$tmp/state XDG_CONFIG_HOME=$tmp/config
sessions=$tmp/data/kimi-chat/sessions
fail() { echo "FAIL: $*"; for f in "$tmp"/*.err; do echo "--- $f"; cat "$f"; done; exit 1; }

"$kimi_chat" --prompt "first question" --temperature 0 > /dev/null 2> "$tmp/first.err" < /dev/null ||
    fail "the first session"
x=$(ls "$sessions"/*.json)
[[ $(echo "$x" | wc -l) -eq 1 ]] || fail "want one session file, got: $x"

# A: the plain REPL on the resumed session, kept open by a FIFO.
mkfifo "$tmp/a.in"
"$kimi_chat" --plain --resume --temperature 0 < "$tmp/a.in" > "$tmp/a.out" 2> "$tmp/a.err" &
pid=$!
exec 8> "$tmp/a.in"
for _ in $(seq 200); do grep -q "^resumed " "$tmp/a.err" 2>/dev/null && break; sleep 0.05; done
grep -q "^resumed $x" "$tmp/a.err" || fail "A did not resume $x"

# B while A holds it: a new file, said so.
"$kimi_chat" --resume --prompt "second question" --temperature 0 > /dev/null 2> "$tmp/b.err" < /dev/null ||
    fail "B"
grep -qF "session $x is open in another kimi-chat (pid $pid); continuing in $sessions/" "$tmp/b.err" ||
    fail "B did not say the session is taken"
y=$(grep -oE "continuing in [^ ]+\.json" "$tmp/b.err" | cut -d' ' -f3)
[[ -n $y && $y != "$x" && -f $y ]] || fail "B's new file '$y'"

# A goes on, then quits.
echo "third question" >&8
exec 8>&-
wait "$pid" || fail "A exited with $?"
pid=

python3 - "$x" "$y" <<'PY' || fail "the conversations"
import json, sys
def users(path):
    return [m['content'] for m in json.load(open(path))['messages'] if m['role'] == 'user']
x, y = users(sys.argv[1]), users(sys.argv[2])
assert x == ['first question', 'third question'], x
assert y == ['first question', 'second question'], y
PY
leftover=$(ls -A "$sessions" | grep -v '\.json$' || true)
[[ -z $leftover ]] || fail "left in the sessions folder: $leftover"
echo "ok: two processes on one session, nothing lost"
