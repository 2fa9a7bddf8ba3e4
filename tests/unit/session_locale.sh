#!/bin/sh
# Runs test_session under de_DE.UTF-8 (decimal comma), built here with localedef, so that the
# session files are shown to be the same whatever LC_NUMERIC the program runs with.
#   session_locale.sh TEST_SESSION WORK_DIR
set -eu
rm -rf "$2"
mkdir -p "$2"
localedef -i de_DE -f UTF-8 "$2/de_DE.UTF-8"
LOCPATH="$2" exec "$1" --locale de_DE.UTF-8
