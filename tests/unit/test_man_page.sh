#!/bin/sh
# test_man_page: app/kimi-chat.1 renders with groff (and man, where installed) without a single
# warning. Usage: test_man_page.sh GROFF PAGE
set -u
groff="$1" page="$2"
out=$("$groff" -man -ww -z "$page" 2>&1) || { echo "groff failed on $page"; exit 1; }
[ -z "$out" ] || { printf 'groff warns on %s:\n%s\n' "$page" "$out"; exit 1; }
# The full rendering at 80 columns, where lines that cannot be adjusted would show.
out=$(MANWIDTH=80 "$groff" -man -ww -Tutf8 -rLL=80n "$page" 2>&1 >/dev/null)
[ -z "$out" ] || { printf 'groff -Tutf8 warns on %s:\n%s\n' "$page" "$out"; exit 1; }
if command -v man >/dev/null 2>&1; then
  out=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
  [ -z "$out" ] || { printf 'man warns on %s:\n%s\n' "$page" "$out"; exit 1; }
fi
echo "$page renders without warnings"
