#!/bin/sh
# run-bench: generate the benchmark model (tests/bench/models/bench, ~1.6 GB, git-ignored) with
# kimi-mkmodel if it is missing, then run `kimi-probe bench` on it: one JSON object on stdout.
#
# usage: tests/bench/run-bench.sh [kimi-probe bench flags: --backend cpu|cuda --tp N --threads N
#                                  --prompt N --gen N --ctx N --read-mib N]
# env:   KIMI_BUILD  build directory holding kimi-probe and kimi-mkmodel (default: build); the
#                    two targets are built there when missing.
#        KIMI_BENCH_MODEL  model directory to use instead of the generated one.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${KIMI_BUILD:-$root/build}
case $build in /*) ;; *) build=$root/$build ;; esac
probe=$build/app/kimi-probe
mkmodel=$build/tests/bench/kimi-mkmodel

if [ ! -x "$probe" ] || [ ! -x "$mkmodel" ]; then
    echo "run-bench: building kimi-probe and kimi-mkmodel in $build" >&2
    cmake --build "$build" --target kimi-probe kimi-mkmodel -j "$(nproc)" >&2
fi

model=${KIMI_BENCH_MODEL:-$root/tests/bench/models/bench}
if [ ! -f "$model/model.safetensors.index.json" ]; then
    if [ -n "${KIMI_BENCH_MODEL:-}" ]; then
        echo "run-bench: KIMI_BENCH_MODEL=$model holds no checkpoint" >&2
        exit 2
    fi
    echo "run-bench: generating the benchmark model in $model (once)" >&2
    # Written beside the final place and renamed, so an interrupted run never leaves half a model.
    partial=$model.partial
    rm -rf "$partial"
    mkdir -p "$(dirname "$model")"
    trap 'rm -rf "$partial"' EXIT
    trap 'exit 130' INT TERM HUP
    "$mkmodel" --preset bench --out "$partial" >&2
    mv "$partial" "$model"
    trap - EXIT INT TERM HUP
fi

exec "$probe" bench --model "$model" "$@"
