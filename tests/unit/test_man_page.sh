#!/bin/sh
# test_man_page: app/kimi-chat.1 renders with groff and man without a single warning. Both are
# required (groff-base and man-db in tests/install-deps.sh): a missing one fails the test.
# Usage: test_man_page.sh PAGE
set -u
page="$1"
for tool in groff man; do
  command -v "$tool" >/dev/null 2>&1 || { echo "$tool is not installed (tests/install-deps.sh installs it)"; exit 1; }
done
out=$(groff -man -ww -z "$page" 2>&1) || { echo "groff failed on $page"; exit 1; }
[ -z "$out" ] || { printf 'groff warns on %s:\n%s\n' "$page" "$out"; exit 1; }
# The full rendering at 80 columns, where lines that cannot be adjusted would show.
out=$(MANWIDTH=80 groff -man -ww -Tutf8 -rLL=80n "$page" 2>&1 >/dev/null)
[ -z "$out" ] || { printf 'groff -Tutf8 warns on %s:\n%s\n' "$page" "$out"; exit 1; }
out=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
[ -z "$out" ] || { printf 'man warns on %s:\n%s\n' "$page" "$out"; exit 1; }
# Rendered, the page has its sections (an empty or truncated rendering is no pass).
text=$(MANWIDTH=80 man -l "$page" 2>/dev/null)
for section in NAME SYNOPSIS DESCRIPTION; do
  printf '%s\n' "$text" | grep -q "^$section" || { echo "$page: no $section section when rendered"; exit 1; }
done
echo "$page renders without warnings"
