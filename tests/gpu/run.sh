#!/usr/bin/env bash
# run.sh: one short run on a GPU machine (at most ~8 minutes on one H200, no network): configure
# and build the CUDA configuration for the local architecture only, run the gpu-labelled tests
# (every kernel against its CPU counterpart, kimi-probe golden --backend cuda at TP 1/2/8 on
# tiny-k25 and the generated variants, kimi-probe verify --backend cuda at TP 1/2/8, the engine's
# prefix reuse and cancel, graphs on/off bit for bit), generate the `rank` benchmark checkpoint
# once (one rank's slice of Kimi-K2.5 at TP 8, 3 layers, ~2.9 GB) and run bench_gpu on it: each
# kernel's bandwidth as a fraction of the measured copy bandwidth (and the prefill attention's
# arithmetic rate), decode time per layer with graphs on/off at 0/32k/128k context, prefill tok/s
# at 1k/8k on both prefill paths (GEMM: steps of up to 512 tokens; steps: 64), and the 8x RTX PRO
# 6000 projection; the decode table (per item of issue 20's table, one TP 8 rank's measured us per
# token at 0/32k/128k next to its floor and the 8x RTX PRO 6000 projection, and the items against
# the rank checkpoint's decode step); then kimi-probe load --backend cuda on the rank checkpoint (the load's GB/s
# next to the storage's own read). Where more than one GPU is visible: kimi-probe golden at TP 2/4/8 over NCCL (a
# device per rank) and the NCCL share of the decode step (bench_gpu --nccl). Ends with a short
# summary.
# Environment: KIMI_GPU_BUILD (build dir, default build-gpu), KIMI_CUDA_ARCHS (default: native,
# the local GPU), KIMI_JOBS (default nproc), KIMI_RANK_MODEL (checkpoint to bench; default
# $KIMI_GPU_BUILD/rank-model, generated when missing), KIMI_BENCH_TIMEOUT (seconds, default 300).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${KIMI_GPU_BUILD:-$root/build-gpu}"
jobs="${KIMI_JOBS:-$(nproc)}"
archs="${KIMI_CUDA_ARCHS:-native}"
bench_timeout="${KIMI_BENCH_TIMEOUT:-300}"
rank_model="${KIMI_RANK_MODEL:-$build/rank-model}"
cd "$root"
start=$SECONDS

configure=(cmake -S . -B "$build" -DKIMI_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CUDA_ARCHITECTURES=$archs")
echo "== configure: ${configure[*]}"
mkdir -p "$build"
"${configure[@]}" >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; echo "run.sh: configure failed"; exit 1; }
echo "== build (-j$jobs)"
build_start=$SECONDS
if ! cmake --build "$build" -j"$jobs" >"$build/build.log" 2>&1; then
    grep -E "error|Error" "$build/build.log" | head -40
    echo "run.sh: build failed (full log: $build/build.log)"
    exit 1
fi
build_s=$((SECONDS - build_start))

# The rank checkpoint is written in the background while the tests run (CPU work).
mkmodel_pid=
if [[ ! -f "$rank_model/model.safetensors.index.json" ]]; then
    echo "== generating the rank checkpoint in $rank_model (background)"
    rm -rf "$rank_model.partial"
    ( "$build/tests/bench/kimi-mkmodel" --preset rank --out "$rank_model.partial" >"$build/mkmodel.log" 2>&1 &&
      mv "$rank_model.partial" "$rank_model" ) &
    mkmodel_pid=$!
fi

echo "== gpu tests"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "(nvidia-smi not available)"
ctest --test-dir "$build" -L gpu --output-on-failure --timeout 240 >"$build/gpu-tests.log" 2>&1
tests_rc=$?
cat "$build/gpu-tests.log"

if [[ -n "$mkmodel_pid" ]]; then
    wait "$mkmodel_pid" || { cat "$build/mkmodel.log"; echo "run.sh: kimi-mkmodel --preset rank failed"; }
fi
echo "== bench_gpu"
bench_args=()
[[ -f "$rank_model/model.safetensors.index.json" ]] && bench_args=(--model "$rank_model")
timeout "$bench_timeout" "$build/tests/gpu/bench_gpu" "${bench_args[@]}" | tee "$build/bench-gpu.log"
bench_rc=${PIPESTATUS[0]}

# The load against the storage's own read (kimi-probe load: O_DIRECT sample, then the engine's
# CUDA load of the rank checkpoint from a dropped page cache).
load_line="kimi-probe load: no rank checkpoint"
if [[ -f "$rank_model/model.safetensors.index.json" ]]; then
    echo "== kimi-probe load --backend cuda"
    timeout 90 "$build/app/kimi-probe" load --model "$rank_model" --backend cuda --sample-gib 1 \
        >"$build/probe-load.log" 2>&1
    cat "$build/probe-load.log"
    load_line="$(grep -E '^ratio' "$build/probe-load.log" || tail -n 1 "$build/probe-load.log")"
fi

# Multi-GPU (only where more than one device is visible): golden at TP 2/4/8 with a device per
# rank (NCCL), and the NCCL share of the decode step on the rank checkpoint.
n_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
multi_lines=()
if (( n_gpus > 1 )); then
    echo "== multi-GPU: $n_gpus devices"
    for tp in 2 4 8; do
        (( tp <= n_gpus )) || continue
        devices=$(seq -s, 0 $((tp - 1)))
        log="$build/golden-nccl-tp$tp.log"
        "$build/app/kimi-probe" golden --model tests/golden/fixtures/tiny-k25 \
            --reference tests/golden/reference/tiny-k25 --only kv,model --backend cuda --tp $tp \
            --devices "$devices" >"$log" 2>&1 || tests_rc=1
        multi_lines+=("golden NCCL TP $tp (devices $devices): $(tail -n 1 "$log")")
    done
    nccl_ranks=$(( n_gpus < 8 ? n_gpus : 8 ))
    if [[ -f "$rank_model/model.safetensors.index.json" ]]; then
        timeout "$bench_timeout" "$build/tests/gpu/bench_gpu" --model "$rank_model" --nccl $nccl_ranks |
            tee "$build/bench-nccl.log"
        multi_lines+=("$(grep -E "NCCL share" "$build/bench-nccl.log")")
    fi
else
    multi_lines+=("multi-GPU section skipped: $n_gpus device visible (NCCL golden and bench need 2 or more)")
    echo "== ${multi_lines[0]}"
fi

echo
echo "== summary"
printf '%-36s %s\n' "build (s)" "$build_s"
grep -E "Test +#[0-9]+:" "$build/gpu-tests.log" |
    sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) [.* ]+([A-Za-z*]+.*)$/\1|\2/' |
    while IFS='|' read -r name result; do printf '%-36s %s\n' "$name" "$result"; done
case $bench_rc in
    0) bench_state=ok ;;
    77) bench_state="skipped (no CUDA device)" ;;
    *) bench_state="failed (exit $bench_rc)" ;;
esac
printf '%-36s %s\n' "bench_gpu" "$bench_state"
grep -E "of copy bandwidth|TFLOP/s|per layer|tok/s|slower|projection|^context|cache-read bound|unexplained" \
    "$build/bench-gpu.log" | sed 's/^/  /'
printf '%s\n' "load: $load_line"
for line in "${multi_lines[@]}"; do printf '%s\n' "$line"; done
printf '%-36s %s\n' "wall (s)" "$((SECONDS - start))"
exit $tests_rc
