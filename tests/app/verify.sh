#!/usr/bin/env bash
# kimi-chat --verify on the demo model: CPU TP 2 against TP 1 passes (five PASS lines on stderr)
# and the chat goes on; a copy whose final norm is scaled by 2^14 makes logits of ~1e4 whose
# fp32 summation-order differences between TP 2 and TP 1 exceed the absolute 5e-2 bound: exit 1
# with the FAIL lines and no chat; --verify with --server is a usage error.
#   verify.sh KIMI_CHAT
set -uo pipefail
kimi_chat=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_DATA_HOME=$tmp/data XDG_STATE_HOME=$tmp/state XDG_CONFIG_HOME=$tmp/config
failed=0
fail() {
    echo "FAIL: $*"
    failed=$((failed + 1))
}

# run ARGS...: kimi-chat ARGS, stdout in $tmp/out, stderr in $tmp/err, status in $status
run() {
    status=0
    "$kimi_chat" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || status=$?
}

run --verify --tp 2 --prompt "What time is it?" --no-save --temperature 0
metric_lines=$(grep -c '^kimi-chat: verify: PASS \(logits\|top1\|top5\|kl\|cache\) ' "$tmp/err")
if [[ $status -ne 0 ]] || [[ $metric_lines -ne 5 ]] ||
    ! grep -q '^kimi-chat: verify: --backend cpu: the CPU at TP 2 against the CPU at TP 1' "$tmp/err" ||
    ! grep -q '^kimi-chat: verify: PASS: cpu tp 2 agrees with the CPU reference' "$tmp/err" || [[ ! -s "$tmp/out" ]]; then
    fail "--verify --tp 2 exited $status with $metric_lines PASS lines:"
    cat "$tmp/err" "$tmp/out"
else
    echo "ok: --verify --tp 2 passed and the chat answered: $(head -c 60 "$tmp/out")"
fi

cp -r "$root/app/demo/kimi-demo" "$tmp/scaled" && chmod -R u+w "$tmp/scaled"
python3 - "$tmp/scaled" <<'PY' || fail "could not scale the copy"
import json, struct, sys
folder = sys.argv[1]
name = "language_model.model.norm.weight"
shard = json.load(open(folder + "/model.safetensors.index.json"))["weight_map"][name]
with open(folder + "/" + shard, "r+b") as f:
    header_len = struct.unpack("<Q", f.read(8))[0]
    info = json.loads(f.read(header_len))[name]
    assert info["dtype"] == "BF16", info
    begin, end = info["data_offsets"]
    f.seek(8 + header_len + begin)
    values = struct.unpack("<%dH" % ((end - begin) // 2), f.read(end - begin))
    # x 2^14: 14 more in each normal bf16's exponent
    values = [v + (14 << 7) if (v & 0x7f80) not in (0, 0x7f80) else v for v in values]
    f.seek(8 + header_len + begin)
    f.write(struct.pack("<%dH" % len(values), *values))
PY
run --verify --model "$tmp/scaled" --tp 2 --prompt "What time is it?" --no-save
if [[ $status -ne 1 ]] || ! grep -q '^kimi-chat: verify: FAIL logits max |Δ| ' "$tmp/err" ||
    ! grep -q '^kimi-chat: verify: FAIL: [1-5] of 5 metrics outside tolerance: cpu tp 2 disagrees' "$tmp/err" ||
    [[ -s "$tmp/out" ]]; then
    fail "--verify on the scaled copy exited $status (want 1, FAIL lines, no chat):"
    cat "$tmp/err" "$tmp/out"
else
    echo "ok: exit 1: $(grep 'FAIL logits' "$tmp/err" | cut -c1-90)"
fi

run --verify --server http://localhost:9 --prompt hi
[[ $status -eq 2 ]] && grep -q '^kimi-chat: --verify checks the in-process engine, not a server' "$tmp/err" ||
    fail "--verify --server exited $status: $(cat "$tmp/err")"

[[ $failed -eq 0 ]] && echo "PASS kimi-chat --verify"
exit $((failed > 0))
