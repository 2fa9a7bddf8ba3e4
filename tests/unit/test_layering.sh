#!/bin/sh
# The dependency direction of the tree (README "Code map"): app/main.c and app/script_run ->
# ui -> app/chat -> engine -> kernels, with app/probe beside app/chat, and inside engine:
# base <- model <- {text, backend} <- runtime. Fails, naming the file and the include, when a
# file includes a header of a layer above it (or a sibling it must not know).
# usage: test_layering.sh ROOT          check the tree at ROOT
#        test_layering.sh --self-test   plant one upward include in a scratch tree: must fail
set -eu

check() {
  root=$1
  bad=0
  # dir|forbidden include prefixes (regex alternatives)
  for rule in \
    'kernels|engine/|app/|ui/' \
    'engine/base|engine/(model|text|backend|runtime)/|app/|ui/' \
    'engine/model|engine/(text|backend|runtime)/|app/|ui/' \
    'engine/text|engine/(backend|runtime)/|app/|ui/' \
    'engine/backend|engine/(text|runtime)/|app/|ui/' \
    'engine/runtime|app/|ui/' \
    'app/chat|app/(probe|main|script_run)|ui/' \
    'app/probe|app/(chat|main|script_run)|ui/' \
    'ui|app/(probe|main|script_run)'; do
    dir=${rule%%|*}
    forbidden=${rule#*|}
    [ -d "$root/$dir" ] || { echo "FAIL no folder $dir under $root"; bad=1; continue; }
    hits=$(find "$root/$dir" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
             -exec grep -HnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"($forbidden)" {} + || true)
    if [ -n "$hits" ]; then
      echo "FAIL $dir includes a layer above it:"
      echo "$hits" | sed "s#^$root/##"
      bad=1
    fi
  done
  return $bad
}

if [ "${1:-}" = "--self-test" ]; then
  src=$(cd "$(dirname "$0")/../.." && pwd)
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  for d in kernels engine app ui; do cp -r "$src/$d" "$scratch/"; done
  echo '#include "engine/runtime/engine.h"' >> "$scratch/engine/model/config.c"
  if check "$scratch" >/dev/null; then
    echo "FAIL the check passed a tree where engine/model includes engine/runtime"
    exit 1
  fi
  echo "PASS an upward include is found"
  exit 0
fi

check "${1:?usage: test_layering.sh ROOT | --self-test}"
echo "PASS no include runs upward"
