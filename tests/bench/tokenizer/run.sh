#!/usr/bin/env bash
# Tokenizer encode throughput (a benchmark, not a test): our tokenizer against the npm tiktoken
# package (tiktoken's Rust core compiled to WASM) on the same ~10 MB of mixed English, code and
# CJK text, with the same vocabulary, special tokens and Kimi regex, in the same run; once with
# tiny-k25's 2048-rank vocabulary and once with o200k_base's 199998 ranks (close to Kimi's
# 163584). Also checks that both encoders give identical ids on the whole text.
#   tests/bench/tokenizer/run.sh [BUILD_DIR]      (default: build)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
work="$build/bench-tokenizer"
tiny="$root/tests/golden/fixtures/tiny-k25"

cmake --build "$build" --target bench_tokenizer >/dev/null
[[ -d "$here/node_modules/tiktoken" ]] || (cd "$here" && npm install --no-package-lock --no-audit --no-fund >/dev/null)
mkdir -p "$work"
[[ -f "$work/text.txt" ]] || python3 "$here/gen_text.py" "$work/text.txt"
[[ -f "$work/o200k/tiktoken.model" ]] || node "$here/make_vocab.cjs" o200k_base "$tiny" "$work/o200k"

printf '%-9s %-34s %10s %10s %9s\n' vocab encoder tokens seconds MB/s
for entry in "tiny-k25:$tiny" "o200k:$work/o200k"; do
    name=${entry%%:*} dir=${entry#*:}
    ours=$("$build/tests/bench/bench_tokenizer" "$dir" "$work/text.txt" 5 "$work/ours.ids")
    theirs=$(node "$here/tiktoken_ref.cjs" "$dir" bench "$work/text.txt" 3)
    node "$here/tiktoken_ref.cjs" "$dir" ids "$work/text.txt" >"$work/theirs.ids"
    same=$(cmp -s "$work/ours.ids" "$work/theirs.ids" && echo "identical ids" || echo "IDS DIFFER")
    for json in "$ours" "$theirs"; do
        python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%-9s %-34s %10d %10.3f %9.2f" % (sys.argv[2], r["encoder"], r["tokens"], r["best_s"], r["mb_s"]))' "$json" "$name"
    done
    echo "          ($same on $(stat -c %s "$work/text.txt") bytes)"
done
