#!/usr/bin/env bash
# The README's test command: install the packages, build everything, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! dpkg -s build-essential cmake pkg-config libjansson-dev libutf8proc-dev libncurses-dev libreadline-dev tmux clang >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential cmake pkg-config \
    libjansson-dev libutf8proc-dev libncurses-dev libreadline-dev tmux clang >/dev/null
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
