#!/usr/bin/env bash
# run.sh: one short run on a GPU machine: configure and build the CUDA configuration, run the
# gpu-labelled tests, run the benchmark when kimi-probe has one, and print a short table.
# The benchmark runs on the tiny fixture and on the bench model of tests/bench/run-bench.sh
# (generated once by kimi-mkmodel --preset bench, ~1.6 GB), with the cpu and cuda backends.
# Environment: KIMI_GPU_BUILD (build dir, default build-gpu), KIMI_CUDA_ARCHS (e.g. "90" to
# build only the local architecture, faster), KIMI_JOBS (default nproc), KIMI_BENCH_MODEL (passed
# on to run-bench.sh), KIMI_BENCH_TIMEOUT (seconds per bench run, default 300).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${KIMI_GPU_BUILD:-$root/build-gpu}"
jobs="${KIMI_JOBS:-$(nproc)}"
bench_timeout="${KIMI_BENCH_TIMEOUT:-300}"
cd "$root"

configure=(cmake -S . -B "$build" -DKIMI_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
[[ -n "${KIMI_CUDA_ARCHS:-}" ]] && configure+=("-DCMAKE_CUDA_ARCHITECTURES=${KIMI_CUDA_ARCHS}")
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

echo "== gpu tests"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "(nvidia-smi not available)"
ctest --test-dir "$build" -L gpu -V >"$build/gpu-tests.log" 2>&1
tests_rc=$?
cat "$build/gpu-tests.log"

probe="$build/app/kimi-probe"
bench_rows=()
# One bench run: label, then the command; its JSON (or why it failed) becomes a summary row.
run_bench() {
    local label="$1"
    shift
    echo "== bench $label"
    local out rc
    out="$(timeout "$bench_timeout" "$@" 2>"$build/bench.err")"
    rc=$?
    if [[ $rc -ne 0 ]]; then
        tail -3 "$build/bench.err"
        bench_rows+=("$label|failed (exit $rc: $(tail -1 "$build/bench.err" | head -c 100))")
    else
        echo "$out"
        local fields=() key value
        for key in load_s prefill_tok_s decode_tok_s effective_gb_s bandwidth_ratio peak_rss_mb; do
            value="$(grep -o "\"$key\": *[-0-9.eE+]*" <<<"$out" | head -1 | sed 's/.*: *//')"
            [[ -n "$value" ]] && fields+=("$key=$value")
        done
        bench_rows+=("$label|${fields[*]:-$(tr -d '\n' <<<"$out" | head -c 200)}")
    fi
}
if [[ -x "$probe" ]]; then
    for backend in cpu cuda; do
        run_bench "tiny-k25 $backend" "$probe" bench --model "$root/tests/golden/fixtures/tiny-k25" --backend "$backend"
    done
    for backend in cpu cuda; do
        run_bench "bench-model $backend" env KIMI_BUILD="$build" "$root/tests/bench/run-bench.sh" --backend "$backend"
    done
fi

echo
echo "== summary"
printf '%-28s %s\n' "build (s)" "$build_s"
grep -E "Test +#[0-9]+:" "$build/gpu-tests.log" |
    sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) [.* ]+([A-Za-z*]+.*)$/\1|\2/' |
    while IFS='|' read -r name result; do printf '%-28s %s\n' "$name" "$result"; done
for row in "${bench_rows[@]}"; do
    printf '%-28s %s\n' "bench ${row%%|*}" "${row#*|}"
done
[[ -x "$probe" ]] || echo "bench                        (kimi-probe not built)"
exit $tests_rc
