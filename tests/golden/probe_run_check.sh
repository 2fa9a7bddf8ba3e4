#!/usr/bin/env bash
# kimi-probe logits and kv on the tiny checkpoint: the files they write match the reference
# (prefill_sys_user logits at two positions, the kv_sys_user fp16 cache), and bad flags are
# clear errors with the usage exit code.
#   probe_run_check.sh KIMI_PROBE WORK_DIR
set -euo pipefail
probe=$1 work=$2
here="$(cd "$(dirname "$0")" && pwd)"
model="$here/fixtures/tiny-k25" reference="$here/reference/tiny-k25"
mkdir -p "$work"
tokens=$(python3 -c 'import json,sys; c=[c for c in json.load(open(sys.argv[1]))["cases"] if c["name"]=="prefill_sys_user"][0]; print(",".join(map(str,c["tokens"])))' "$reference/model_cases.json")

"$probe" logits --model "$model" --tokens "$tokens" --positions 45,0 --tp 2 --threads 1 --out "$work/logits.f32"
"$probe" kv --model "$model" --tokens "$tokens" --tp 4 --out "$work/kv.f16"
python3 - "$work" "$reference" <<'PY'
import array, sys
work, ref = sys.argv[1], sys.argv[2]
vocab = 2304
def f32(path):
    a = array.array("f"); a.frombytes(open(path, "rb").read()); return a
def f16(path):
    data = open(path, "rb").read()
    import struct
    return struct.unpack("<%de" % (len(data) // 2), data)
got, want = f32(work + "/logits.f32"), f32(ref + "/prefill_sys_user.f32")
assert len(got) == 2 * vocab, "logits file holds %d floats, expected %d" % (len(got), 2 * vocab)
errors = [abs(got[j * vocab + i] - want[p * vocab + i]) for j, p in enumerate((45, 0)) for i in range(vocab)]
print("logits: max %.3g mean %.3g" % (max(errors), sum(errors) / len(errors)))
assert max(errors) <= 1e-2 and sum(errors) / len(errors) <= 1e-3
got, want = f16(work + "/kv.f16"), f16(ref + "/kv_sys_user.f16")
assert len(got) == len(want), "cache file holds %d halves, expected %d" % (len(got), len(want))
worst = max(abs(a - b) for a, b in zip(got, want))
print("kv: max abs error %.3g over %d halves" % (worst, len(got)))
assert worst <= 2e-2
PY

expect_usage_error() {
    local status=0
    "$probe" "$@" 2>"$work/stderr" >/dev/null || status=$?
    if [[ $status -ne 2 ]] || ! grep -q "kimi-probe: " "$work/stderr"; then
        echo "FAIL: kimi-probe $* exited $status: $(cat "$work/stderr")" >&2
        exit 1
    fi
}
expect_usage_error logits --model "$model" --tokens 1,2,3 --tp 3 --out "$work/x.f32"
expect_usage_error logits --model "$model" --tokens 1,2,3 --positions 3 --out "$work/x.f32"
expect_usage_error kv --model "$model" --tokens 1,2 --out "$work/x.f16" --bogus 1
status=0
"$probe" logits --model "$model" --tokens 1,99999 --out "$work/x.f32" 2>"$work/stderr" || status=$?
[[ $status -ne 0 ]] && grep -q "outside the vocabulary" "$work/stderr" || { echo "FAIL: token 99999 accepted" >&2; exit 1; }
echo "PASS probe logits/kv"
