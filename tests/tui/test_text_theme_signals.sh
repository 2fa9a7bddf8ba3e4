#!/usr/bin/env bash
# A CJK + emoji + combining-mark message lines up (every row within the width, continuation rows
# at the gutter, nothing lost); NO_COLOR paints without colours; /theme light changes the colours;
# kill -TERM, kill -HUP and a crash signal (SIGSEGV) give the terminal back (stty sane, the shell answers);
# TERM=dumb runs the plain REPL.
. "$(dirname "$0")/lib.sh"

sgr_params() { # the SGR parameters the screen uses, one per line, sorted
  screen -e | grep -o $'\e\\[[0-9;]*m' | tr -d '\033[m' | tr ';' '\n' | sort -u
}

start main 80 24
wait_ready
msg='東京の天気は？ 😀 café naïve 中文字符 👍🏽 日本語のテキスト ok'
tm send-keys -t "$PANE" -l "$msg $msg $msg"
tm send-keys -t "$PANE" Enter
wait_for '^  you  東京'
wait_ready
screen | MSG="$msg $msg $msg" python3 -c "
import os, sys, unicodedata
def width(s):
    w = 0
    for c in s:
        if unicodedata.combining(c) or c in '\u200d\ufe0f' or 0x1f3fb <= ord(c) <= 0x1f3ff:
            continue
        w += 2 if unicodedata.east_asian_width(c) in 'WF' else 1
    return w
lines = sys.stdin.read().split('\n')
start = next(i for i, l in enumerate(lines) if l.startswith('  you  '))
block = [lines[start]]
for l in lines[start + 1:]:
    if not l.startswith('       ') or l.startswith('  kimi') or not l.strip():
        break
    block.append(l)
for l in block:
    assert width(l) <= 80, ('too wide', width(l), l)
    assert l[7] != ' ', ('not at the gutter', l)
assert len(block) >= 2, 'the message did not wrap'
text = ''.join(''.join(l[7:].split()) for l in block)
want = ''.join(os.environ['MSG'].split())
assert unicodedata.normalize('NFC', text) == unicodedata.normalize('NFC', want), (text, want)
sep = [l for l in lines if l.startswith('─')]
assert sep and sep[0] == '─' * 80, 'the separator moved'
" || fail "the CJK/emoji message does not line up"

# /theme light: other colours
before=$(sgr_params)
tm send-keys -t "$PANE" '/theme light' Enter
wait_for 'theme light'
after=$(sgr_params)
[ "$before" != "$after" ] || fail "/theme light did not change the colours"
tm send-keys -t "$PANE" '/theme nosuch' Enter
wait_for "no(t| theme).*nosuch|nosuch.*(not found|found nowhere)"

# kill -TERM: exit status 130, the terminal sane
pid=$(chat_pid)
[ -n "$pid" ] || fail "no kimi-chat process"
kill -TERM "$pid"
wait_file "$TMP/main.exit"
[ "$(cat "$TMP/main.exit")" = 130 ] || fail "SIGTERM: exit status $(cat "$TMP/main.exit")"
check_sane main

# kill -HUP (the terminal went away) takes the same way out
start hup 80 24
wait_ready
kill -HUP "$(chat_pid)"
wait_file "$TMP/hup.exit"
[ "$(cat "$TMP/hup.exit")" = 130 ] || fail "SIGHUP: exit status $(cat "$TMP/hup.exit")"
check_sane hup

# NO_COLOR: attributes only
start mono 80 24 NO_COLOR=1 --
wait_ready
tm send-keys -t "$PANE" 'Hello!' Enter
wait_for '▸ thought for'
wait_ready
bad=$(sgr_params | grep -Ev '^(0|1|2|3|4|7|22|23|24|27|39|49)?$' || true)
[ -z "$bad" ] || fail "NO_COLOR: colour codes on screen: $bad"

# a crash signal: the handler restores the terminal and dies of the signal
pid=$(chat_pid)
kill -SEGV "$pid"
wait_file "$TMP/mono.exit"
[ "$(cat "$TMP/mono.exit")" = 139 ] || fail "SIGSEGV: exit status $(cat "$TMP/mono.exit")"
check_sane mono

# TERM=dumb: the plain REPL instead
start dumb 80 24 TERM=dumb --
wait_for '^you>'
tm send-keys -t "$PANE" '/quit' Enter
wait_file "$TMP/dumb.exit"
[ "$(cat "$TMP/dumb.exit")" = 0 ] || fail "TERM=dumb: exit status $(cat "$TMP/dumb.exit")"
echo PASS
