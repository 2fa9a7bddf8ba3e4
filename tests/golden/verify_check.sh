#!/usr/bin/env bash
# kimi-probe verify on the tiny checkpoint: CPU TP 2 and TP 8 against TP 1 pass with a small
# logit difference; a candidate checkpoint with one weight tensor altered fails (exit 1, FAIL
# lines for the logits and the cache); bad flags are one-line usage errors (exit 2), a missing
# model folder a model error (exit 3).
#   verify_check.sh KIMI_PROBE WORK_DIR
set -uo pipefail
probe=$1 work=$2
here="$(cd "$(dirname "$0")" && pwd)"
model="$here/fixtures/tiny-k25"
rm -rf "$work"
mkdir -p "$work"
failed=0
fail() {
    echo "FAIL: $*" >&2
    failed=1
}

# run ARGS...: kimi-probe verify ARGS, stdout in $work/out, stderr in $work/err, status in $status
run() {
    status=0
    "$probe" verify "$@" >"$work/out" 2>"$work/err" || status=$?
}

# the metric value after "max |Δ| " on the logits line
logit_max() {
    sed -n 's/^PASS logits max |Δ| \([^ ]*\) .*/\1/p' "$work/out"
}

for tp in 2 8; do
    run --model "$model" --tp "$tp" --threads 1
    if [[ $status -ne 0 ]] || [[ $(grep -c '^PASS ' "$work/out") -ne 5 ]] || ! grep -qx '5 passed, 0 failed' "$work/out"; then
        fail "cpu tp $tp against tp 1 exited $status:"
        cat "$work/out" "$work/err" >&2
        continue
    fi
    # Two CPU runs differ only in summation order: far inside the 5e-2 bound (the CPU golden
    # contract against float64 is 1e-2 each).
    python3 -c "import sys; d = float(sys.argv[1]); sys.exit(0 if 0 <= d <= 1e-2 else 1)" "$(logit_max)" ||
        fail "cpu tp $tp: logits max |Δ| $(logit_max) is not within 1e-2"
    grep -q "^kimi-probe: verify: [0-9]* prompt tokens (the fixed prompt, rendered) + 8 decode steps, reference cpu tp 1, candidate cpu tp $tp" "$work/err" ||
        fail "cpu tp $tp: the header line on stderr: $(head -n 1 "$work/err")"
    echo "ok   cpu tp $tp: logits max |Δ| $(logit_max)"
done

# --tokens and --prompt reach the backends as given: the decode steps and prompt sizes show.
run --model "$model" --tp 2 --tokens 5,17,300,2047 --decode 3
[[ $status -eq 0 ]] && grep -q "verify: 4 prompt tokens (--tokens) + 3 decode steps" "$work/err" &&
    grep -q "over 7 positions" "$work/out" || fail "--tokens 5,17,300,2047 --decode 3 (exit $status): $(cat "$work/out" "$work/err")"
run --model "$model" --tp 4 --ref-tp 2 --prompt "Hello there" --decode 0
[[ $status -eq 0 ]] && grep -q "prompt tokens (--prompt, rendered) + 0 decode steps, reference cpu tp 2, candidate cpu tp 4" "$work/err" ||
    fail "--prompt with --ref-tp 2 (exit $status): $(cat "$work/out" "$work/err")"

# A candidate checkpoint whose layer-1 kv_a projection has the sign of its first 8 rows flipped:
# the cache of layers 1.. and the logits move far past the tolerances.
cp -r "$model" "$work/altered"
chmod -R u+w "$work/altered"
python3 - "$work/altered" <<'PY' || fail "could not alter the copy"
import json, struct, sys
folder = sys.argv[1]
name = "language_model.model.layers.1.self_attn.kv_a_proj_with_mqa.weight"
shard = json.load(open(folder + "/model.safetensors.index.json"))["weight_map"][name]
with open(folder + "/" + shard, "r+b") as f:
    header_len = struct.unpack("<Q", f.read(8))[0]
    info = json.loads(f.read(header_len))[name]
    assert info["dtype"] == "BF16", info
    rows, cols = info["shape"]
    begin = 8 + header_len + info["data_offsets"][0]
    f.seek(begin)
    data = bytearray(f.read(8 * cols * 2))
    for i in range(1, len(data), 2):      # the high byte of each little-endian bf16: its sign
        data[i] ^= 0x80
    f.seek(begin)
    f.write(data)
PY
run --model "$model" --candidate-model "$work/altered" --tp 2
if [[ $status -ne 1 ]] || ! grep -q '^FAIL logits ' "$work/out" || ! grep -q '^FAIL cache ' "$work/out" ||
    ! grep -qE '^[0-4] passed, [1-5] failed$' "$work/out"; then
    fail "the altered candidate exited $status (want 1 with FAIL logits and FAIL cache):"
    cat "$work/out" "$work/err" >&2
else
    echo "ok   altered candidate: exit 1, $(tail -n 1 "$work/out")"
fi
# The same copy as its own reference and candidate agrees with itself: the failure above comes
# from the altered bytes, not from loading a second checkpoint.
run --model "$work/altered" --candidate-model "$work/altered" --tp 2
[[ $status -eq 0 ]] || fail "the altered copy against itself exited $status: $(cat "$work/out")"

# expect CODE NEEDLE ARGS...: exit CODE and exactly one stderr line, containing NEEDLE
expect() {
    local code=$1 needle=$2
    shift 2
    run "$@"
    if [[ $status -ne $code ]] || [[ $(wc -l <"$work/err") -ne 1 ]] || ! grep -qF -- "$needle" "$work/err"; then
        fail "verify $* exited $status (want $code, one line with '$needle'): $(cat "$work/err")"
    else
        echo "ok   $code $(cat "$work/err")"
    fi
}
expect 2 "--tokens: '1,x,3' is not a comma-separated list of integers" --model "$model" --tokens 1,x,3
expect 2 "--tokens: id 99999 is outside the vocabulary [0, 2304)" --model "$model" --tokens 1,99999
expect 2 "--prompt: verify: the prompt renders to" --model "$model" --prompt "$(python3 -c 'print("many words " * 3000)')"
expect 2 "--decode: -1 is outside [0, 256]" --model "$model" --decode -1
expect 2 "missing required flag '--model VALUE'" --tokens 1,2,3
expect 2 "give at most one of --tokens 1,2,3 and --prompt TEXT" --model "$model" --tokens 1 --prompt hi
expect 2 "--devices: only with --backend cuda" --model "$model" --devices 0
expect 2 "--devices: 3 devices for --tp 2" --model "$model" --backend cuda --tp 2 --devices 0,1,2
expect 2 "--backend: 'tpu' is not cpu or cuda" --model "$model" --backend tpu
expect 2 "unknown flag '--bogus'" --model "$model" --bogus 1
expect 3 "config.json" --model "$work/nowhere"
mkdir -p "$work/small"
cp "$model"/* "$work/small/"
sed 's/"num_hidden_layers": 4/"num_hidden_layers": 3/' "$model/config.json" >"$work/small/config.json"
expect 3 "the candidate checkpoint has layers 3, the reference's 4" --model "$model" --candidate-model "$work/small"

[[ $failed -eq 0 ]] && echo "PASS probe verify"
exit $failed
