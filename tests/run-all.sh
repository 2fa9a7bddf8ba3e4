#!/usr/bin/env bash
# The README's test command: install the packages, build everything and run every test; build
# the libFuzzer targets (clang) and replay their corpora; run the threaded engine and backend
# tests under ThreadSanitizer (clang); then rebuild with AddressSanitizer + UBSan and run the
# tests again (all but gpu: that build has no CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
./tests/install-deps.sh
jobs="$(nproc)"

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
# The CUDA static check's table (written by the cuda_ptxas_report test when CUDA is built).
if [[ -f build/ptxas.txt ]]; then cat build/ptxas.txt; fi

cmake --preset fuzz >/dev/null
targets=(safetensors config encode parse render script session sse sampler)
cmake --build build-fuzz -j"$jobs" --target "${targets[@]/#/fuzz_}"
for name in "${targets[@]}"; do
  build-fuzz/tests/fuzz/fuzz_"$name" -runs=0 tests/fuzz/corpus/"$name" 2>&1 | tail -n 1
done

cmake --preset tsan >/dev/null
cmake --build build-tsan -j"$jobs" --target test_engine test_backend
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -R '^test_(engine|backend)$'

cmake --preset asan >/dev/null
cmake --build build-asan -j"$jobs"
ctest --test-dir build-asan --output-on-failure -j"$jobs"
