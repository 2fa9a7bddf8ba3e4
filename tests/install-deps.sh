#!/usr/bin/env bash
# Installs the Debian packages kimi-chat builds and tests with (no-op when all are present).
# The single list: each entry is "package: the programs the tests run from it". Programs of
# Debian's base system (tests/deps_check.py names them) are not listed; the deps_check test
# keeps this true by finding the programs every test script calls.
set -euo pipefail
entries=(
  "build-essential: cc gcc make c++filt"
  "cmake: cmake ctest"
  "pkg-config: pkg-config"
  "libjansson-dev:"
  "libutf8proc-dev:"
  "libncurses-dev:"
  "libreadline-dev:"
  "libcurl4-openssl-dev:"
  "tmux: tmux"
  "clang: clang"
  "python3: python3"
  "python3-numpy:"
  "python3-jinja2:"
  "locales: locale-gen localedef"
  "curl: curl"
  "git: git"
  "groff-base: groff"
  "man-db: man"
)
if [[ ${1:-} == --programs ]]; then      # the programs, one a line (for tests/deps_check.py)
  for e in "${entries[@]}"; do for p in ${e#*:}; do echo "$p"; done; done
  exit 0
fi
missing=()
for e in "${entries[@]}"; do
  p=${e%%:*}
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing: ${missing[*]}"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
