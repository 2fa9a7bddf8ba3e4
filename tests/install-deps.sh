#!/usr/bin/env bash
# Installs the Debian packages kimi-chat builds and tests with (no-op when all are present).
set -euo pipefail
packages=(build-essential cmake pkg-config libjansson-dev libutf8proc-dev libncurses-dev
          libreadline-dev libcurl4-openssl-dev tmux clang python3 python3-numpy python3-jinja2 locales
          groff-base man-db)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing: ${missing[*]}"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
