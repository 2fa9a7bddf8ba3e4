#!/usr/bin/env bash
# graphs_check.sh KIMI_PROBE WORK_DIR: the CUDA backend with graphs on and off (KIMI_CUDA_GRAPHS)
# gives the same logits and the same fp16 cache, bit for bit, at TP 1 and 2 (a prefill runs
# as decode steps, so every position goes through the captured graph: KIMI_CUDA_PREFILL=steps,
# as GEMM steps are never captured).
set -euo pipefail
probe=$1 work=$2
export KIMI_CUDA_PREFILL=steps
model="$(cd "$(dirname "$0")/../golden/fixtures/tiny-k25" && pwd)"
mkdir -p "$work"
tokens=1,17,200,33,1000,5,77,2100,9,12,400,401,402,3,8,1999
status=0
for tp in 1 2; do
    for graphs in 1 0; do
        KIMI_CUDA_GRAPHS=$graphs "$probe" logits --model "$model" --tokens $tokens --positions 0,7,15 \
            --backend cuda --tp $tp --devices 0 --out "$work/logits-$tp-$graphs.f32"
        KIMI_CUDA_GRAPHS=$graphs "$probe" kv --model "$model" --tokens $tokens --backend cuda --tp $tp --devices 0 \
            --out "$work/kv-$tp-$graphs.f16"
    done
    for kind in logits-$tp kv-$tp; do
        ext=f32; [[ $kind == kv-* ]] && ext=f16
        if cmp -s "$work/$kind-1.$ext" "$work/$kind-0.$ext"; then
            echo "PASS $kind: graphs on and off agree bit for bit"
        else
            echo "FAIL $kind: graphs on and off differ"
            status=1
        fi
    done
done
exit $status
