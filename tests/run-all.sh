#!/usr/bin/env bash
# The README's test command: install the packages, build everything and run every test; build
# the libFuzzer targets (clang) and replay their corpora; run the threaded engine and backend
# tests under ThreadSanitizer (clang); then rebuild with AddressSanitizer + UBSan and run the
# tests again (all but gpu: that build has no CUDA). The gpu tests run on the CPU emulation of
# CUDA in a build of their own, beside those stages (see below).
set -euo pipefail
cd "$(dirname "$0")/.."
./tests/install-deps.sh
jobs="$(nproc)"
# Each stage's wall time, printed as it ends, so a slow CI run says where its time went.
stage_started=$SECONDS
stage_done() { echo "run-all: stage '$1' took $((SECONDS - stage_started)) s (total $SECONDS s)"; stage_started=$SECONDS; }
stage_done install-deps

# Every gpu-labelled test on the CPU emulation of CUDA (tests/emu, the cuemu preset) in the
# forward schedule; then, in a random schedule whose seed is printed (rerun a failure with
# KIMI_EMU_SCHEDULE=random KIMI_EMU_SEED=<seed>), the tests where the order of CUDA threads and
# blocks matters most within CI's budget: the kernels at the real per-rank shapes, and the
# whole backend at TP 8 with graphs on and off. The build is of the programs those tests run
# (tests/emu/test_targets.py reads them off the tests' commands), not of the whole tree again.
cuemu_stage() {
  cmake --preset cuemu >/dev/null
  local targets
  targets="$(tests/emu/test_targets.py build-cuemu -L gpu)"
  # shellcheck disable=SC2086  # one target name a line
  cmake --build build-cuemu -j"$jobs" --target $targets
  stage_done cuemu-build
  # Left out here (they run on a GPU, and under `ctest -L gpu` on the emulator when asked), about
  # 170 of the stage's CPU seconds: the sharded goldens at DCP 2 and at DCP 4 with fp8 (DCP 8 runs
  # with both caches, and test_gpu_dcp) and TP 1 over NCCL without graphs (cuda_graphs_on_off
  # runs graphs off).
  KIMI_EMU_SCHEDULE=forward ctest --test-dir build-cuemu --output-on-failure -j"$jobs" -L gpu \
    -E '^(golden_cuda_tp8_dcp2|golden_cuda_fp8_tp8_dcp4|golden_cuda_nccl_tp1_graphs0)$'
  seed="${KIMI_EMU_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
  echo "cuemu: random schedule, KIMI_EMU_SEED=$seed"
  KIMI_EMU_SCHEDULE=random KIMI_EMU_SEED="$seed" ctest --test-dir build-cuemu --output-on-failure -j"$jobs" -L gpu \
    -R '^(test_gpu_kernels|test_gpu_nvfp4|test_gpu_gemm|golden_cuda_tp8|cuda_graphs_on_off)$'
  stage_done cuemu
}
# The emulated stage shares no build tree with the others, so it runs beside them: the two
# cores stay busy through each stage's serial parts (configure, the last links, the longest
# tests at the end of a ctest run, the one-at-a-time fuzz replays) instead of idling. Its output
# goes to a log, printed when it ends; a failure of either side fails the run.
mkdir -p build-ci-logs
cuemu_log=build-ci-logs/cuemu.log
set -m      # the stage in a process group of its own, so that a failure here ends all of it
( stage_started=$SECONDS; cuemu_stage ) >"$cuemu_log" 2>&1 &
cuemu_pid=$!
set +m
trap 'kill -- -"$cuemu_pid" 2>/dev/null || true' EXIT

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
# The CUDA static check's table (written by the cuda_ptxas_report test when CUDA is built).
if [[ -f build/ptxas.txt ]]; then cat build/ptxas.txt; fi
stage_done build+ctest

cmake --preset fuzz >/dev/null
targets=(safetensors config encode parse render script session sse sampler)
cmake --build build-fuzz -j"$jobs" --target "${targets[@]/#/fuzz_}"
for name in "${targets[@]}"; do
  build-fuzz/tests/fuzz/fuzz_"$name" -runs=0 tests/fuzz/corpus/"$name" 2>&1 | tail -n 1
done
stage_done fuzz

cmake --preset tsan >/dev/null
cmake --build build-tsan -j"$jobs" --target test_engine test_backend
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -R '^test_(engine|backend)$'
stage_done tsan

cmake --preset asan >/dev/null
cmake --build build-asan -j"$jobs"
# Under the sanitizers, the larger configurations of code a smaller test already runs there are
# left out (about 440 of 1,360 CPU seconds): the K2.5-shaped plan (test_probe_plan's rules run),
# golden at TP 4 (TP 2 and 8 run), the sharded goldens but fp8 at DCP 4 (test_backend_dcp and
# test_engine_dcp2/8 run the sharding), the speculation variants but the plain one, and the int8
# activations' golden at TP 8 (TP 1 and test_linear_int8 run the int8 path). Each of them runs in
# the first stage.
ctest --test-dir build-asan --output-on-failure -j"$jobs" \
  -E '^(test_probe_plan_k25|golden_model_tp4|golden_model_tp8_dcp[248]|golden_model_fp8_tp8_dcp8|golden_model_int8_tp8|test_engine_speculate_(fp8|dcp|dcp_fp8))$'
stage_done asan

cuemu_status=0
wait "$cuemu_pid" || cuemu_status=$?
trap - EXIT
echo "run-all: the emulated CUDA stage, which ran beside the others (its log, $cuemu_log):"
cat "$cuemu_log"
if [[ $cuemu_status -ne 0 ]]; then
  echo "run-all: the emulated CUDA stage failed (exit $cuemu_status)"
  exit "$cuemu_status"
fi
echo "run-all: all stages passed (total $SECONDS s)"
