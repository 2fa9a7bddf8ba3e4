#!/usr/bin/env bash
# mutants.sh [SCRATCH]: evidence that the CPU emulation of CUDA (tests/emu) catches the bugs a
# GPU would expose. Copies the tree (tracked files as they are in the working tree) to SCRATCH
# (default: a new temporary directory), builds the cuemu preset there, then injects one bug at a
# time into kernels/cuda/*.cu or the NCCL communicator, rebuilds, and runs the emulated test
# that must fail on it. Prints one line per mutant; exits 1 when any mutant survives (its test
# passed), could not be applied (the source moved: update the table below) or does not compile.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
scratch="${1:-$(mktemp -d)}"
mkdir -p "$scratch/src"
(cd "$repo" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$scratch/src"
src="$scratch/src"
build="$scratch/build"
cmake -S "$src" -B "$build" -DKIMI_CUDA_EMU=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
jobs="$(nproc)"
cmake --build "$build" -j"$jobs" --target test_gpu_kernels kimi-probe >/dev/null || exit 1

kernels_test() { exec timeout 1200 "$build/tests/gpu/test_gpu_kernels"; }
# NCCL across two emulated devices, graphs on, steps prefill: the first step is captured
nccl_test() {
  cd "$src" && exec env KIMI_CUDA_PREFILL=steps KIMI_CUDA_COMM=nccl KIMI_CUDA_GRAPHS=1 timeout 1200 \
    "$build/app/kimi-probe" verify --model tests/golden/fixtures/tiny-k25 --backend cuda --tp 2 --devices 0,1
}
# Runs a test in the background; stops it at its first failure (1), or waits for its end (its
# exit status). A mutant that the forward schedule of CUDA threads hides (a thread 0 that writes
# a shared flag before the others read it) is run again in the reverse schedule. The tests run every case to the end otherwise, minutes under the emulator.
until_failure() {
  "$@" >"$scratch/test.log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if grep -qE 'CHECK failed|cuemu:|^FAIL' "$scratch/test.log"; then
      kill "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 1
    fi
    sleep 1
  done
  wait "$pid"
}

# file | line | text on that line | replacement | the bug | test
# (ops.cu:111, the barrier after kv_rope_cache's cos/sin tables, is not listed: removing it
# changes nothing, the two barriers of block_sum between the tables' writes and reads already
# order them.)
mutants=(
  "kernels/cuda/norm_core.cuh|25|0xFFFFFFFFu|0x0000FFFFu|block_sum: shuffle mask of a half warp|kernels_test"
  "kernels/cuda/norm_core.cuh|24|offset > 0|offset > 1|block_sum: butterfly one step short|kernels_test"
  "kernels/cuda/norm_core.cuh|54|i < n|i <= n|rmsnorm: store one past the row|kernels_test"
  "kernels/cuda/linear.cu|99|counters[blockIdx.x] = 0;|(void)0;|split-K GEMV: counter never reset|kernels_test"
  "engine/backend/backend_cuda.c|@= rank_warm_up_enqueue(be, rd);|status = rank_warm_up_enqueue(be, rd);|status = 0 && rank_warm_up_enqueue(be, rd);|NCCL: communicators not warmed up before the first capture|nccl_test"
  "engine/backend/backend_cuda.c|@if (cuda_comm_gather(be->comm, rd->rank, ws(rd, l->logits_part)|if (cuda_comm_gather(|if (0 && cuda_comm_gather(|NCCL: the logits gather's peers not connected before the first capture|nccl_test"
  "kernels/cuda/norm_core.cuh|30|__syncthreads();||block_sum: barrier after the warp partials are staged removed (rmsnorm, kv norm)|kernels_test"
  "kernels/cuda/linear.cu|83|__syncthreads();||split-K GEMV: barrier after is_last is staged removed|kernels_test"
  "kernels/cuda/mla.cu|272|__syncthreads();||mla_partial: barrier after a cache chunk is staged removed|kernels_test"
  "kernels/cuda/mla.cu|257|__syncthreads();||mla_partial: barrier before a chunk is restaged removed|kernels_test"
  "kernels/cuda/mla.cu|576|__syncthreads();||mla_prefill: barrier after a key chunk is staged removed|kernels_test"
  "kernels/cuda/ops.cu|301|__syncthreads();||route: barrier after the scores are staged removed|kernels_test"
  "kernels/cuda/ops.cu|275|__syncthreads();||block_arg_max: barrier after the warp bests are staged removed (route)|kernels_test"
  "kernels/cuda/ops.cu|480|__syncthreads();||moe_group: barrier after the per-expert counts removed|kernels_test"
)

survived=0
for m in "${mutants[@]}"; do
  IFS='|' read -r file line from to what test <<<"$m"
  cp "$src/$file" "$scratch/original"
  if ! python3 - "$src/$file" "$line" "$from" "$to" <<'PY'
import sys
path, line, old, new = sys.argv[1:5]
lines = open(path).read().split('\n')
if line.startswith('@'):
    hits = [i for i, l in enumerate(lines) if old in l]
    i = hits[0] if len(hits) == 1 else -1
else:
    i = int(line) - 1
if i < 0 or old not in lines[i]:
    sys.exit(1)
lines[i] = lines[i].replace(old, new, 1)
open(path, 'w').write('\n'.join(lines))
PY
  then
    echo "NOT APPLIED  $file:$line: $what"
    survived=1
    continue
  fi
  target=test_gpu_kernels
  [[ $test == nccl_test ]] && target=kimi-probe
  if ! cmake --build "$build" -j"$jobs" --target "$target" >"$scratch/build.log" 2>&1; then
    echo "INVALID (does not compile)  $file:$line: $what"
    survived=1
  elif until_failure "$test" && KIMI_EMU_SCHEDULE=reverse until_failure "$test"; then
    echo "SURVIVED  $file:$line: $what"
    survived=1
  else
    why="$(grep -m1 -E 'cuemu:|FAIL|CHECK failed|failed' "$scratch/test.log" | cut -c1-160)"
    echo "caught  $file:$line: $what -- ${why:-test failed}"
  fi
  cp "$scratch/original" "$src/$file"
done
cmake --build "$build" -j"$jobs" --target test_gpu_kernels kimi-probe >/dev/null
exit "$survived"
