#!/bin/sh
# test_probe_plan: kimi-probe plan (the CUDA memory plan over devices given on the command line)
# on tiny-k25: the largest context is what the tightest device holds after its ranks' weights,
# workspaces and the reserve, recomputed here from the plan's own per-rank numbers; the device
# rules are usage errors (exit 2) of one line naming the flag. Then the plan for Kimi-K2.5 itself
# (kimi-mkmodel --holes with K2.5's shapes: 590 GB of sparse files, a few hundred MB on disk) at
# TP 8 on 96 GB (94.5 GiB free, 188 SMs) and 141 GB (139.5 GiB free, 132 SMs) devices, against
# figures derived here by hand from the shapes (not by the plan code) and against the README's
# table (minutes under load: the loader reads every tensor's first page, so it is a test apart),
# and kimi-probe info --dcp 8 on it: 8 times the replicated context fits by memory.
# Usage (from the repository root): test_probe_plan.sh rules PATH-TO-kimi-probe
#                                   test_probe_plan.sh k25 PATH-TO-kimi-probe PATH-TO-kimi-mkmodel
mode=$1 probe=$2 mkmodel=${3:-}
case "$mode" in
rules) ;;
k25) [ -x "$mkmodel" ] || { echo "usage: test_probe_plan.sh k25 PROBE MKMODEL"; exit 2; } ;;
*) echo "usage: test_probe_plan.sh rules|k25 PROBE [MKMODEL]"; exit 2 ;;
esac
model=tests/golden/fixtures/tiny-k25
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect CODE NEEDLE COMMAND...: exit status CODE, one stderr line containing NEEDLE.
expect() {
    code=$1 needle=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne "$code" ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -qF -- "$needle" "$tmp/err"; then
        echo "FAIL (exit $rc, want $code, '$needle'): $*"
        cat "$tmp/err"
        failed=1
    else
        echo "ok   $code $(cat "$tmp/err")"
    fi
}

# check_plan FREE_GIB... -- PLAN ARGS: the JSON plan's context is the tightest device's fit
check_plan() {
    "$probe" plan --model "$model" --json "$@" >"$tmp/plan.json" || { echo "FAIL plan $*"; failed=1; return; }
    python3 - "$tmp/plan.json" "$*" <<'PY' || failed=1
import json, sys
p = json.load(open(sys.argv[1]))
fits = {}
for d in set(p["devices"]):
    ranks = [r for r, dev in enumerate(p["devices"]) if dev == d]
    free = p["free_bytes"][ranks[0]]
    fixed = p["reserve_bytes"] + sum(p["rank_weight_bytes"][r] + p["rank_workspace_bytes"][r] for r in ranks)
    fits[d] = max(0, (free - fixed) // (len(ranks) * p["cache_bytes_per_position"]))
order = list(dict.fromkeys(p["devices"]))      # devices by their first rank: ties go to the first
tightest = min(order, key=lambda d: fits[d])
want = min(fits[tightest], p["max_position"])
ok = p["max_context_by_memory"] == fits[tightest] and p["max_context"] == want and p["tightest_device"] == tightest
print(("ok  " if ok else "FAIL") + " plan %s: context %d on device %d (recomputed %d on %d)"
      % (sys.argv[2], p["max_context"], p["tightest_device"], want, tightest))
sys.exit(0 if ok else 1)
PY
}

if [ "$mode" = rules ]; then
    check_plan --tp 2 --device-memory 0.6
    check_plan --tp 8 --device-memory 0.7 --devices 0
    check_plan --tp 4 --device-memory 0.6 --devices 3,1,2,0
    check_plan --tp 1 --device-memory 0.6
    "$probe" plan --model "$model" --tp 2 --device-memory 0.6 >"$tmp/human" || { echo "FAIL plan (text)"; failed=1; }
    grep -q "^max context" "$tmp/human" || { echo "FAIL plan (text) has no max context line"; failed=1; }

    expect 2 "--tp 8 needs 8 devices, 2 visible; --devices 0 runs all 8 ranks on device 0" \
        "$probe" plan --model "$model" --tp 8 --device-memory 0.6,0.6
    expect 2 "--devices 0,1: device 1 has" "$probe" plan --model "$model" --tp 2 --device-memory 0.6,0.7
    expect 2 "--devices 0,1,1,2: device 1 is listed twice" \
        "$probe" plan --model "$model" --tp 4 --device-memory 0.6 --devices 0,1,1,2
    expect 2 "--devices 0,5: device 5 is not visible" "$probe" plan --model "$model" --tp 2 --device-memory 0.6,0.6 --devices 0,5
    expect 2 "--devices 0,1,2: 3 devices for --tp 8" "$probe" plan --model "$model" --tp 8 --device-memory 0.6 --devices 0,1,2
    expect 2 "--devices 0,x: not a list of device ordinals" "$probe" plan --model "$model" --tp 2 --device-memory 0.6 --devices 0,x
    expect 2 "--device-memory 0.6,,: not a list of sizes" "$probe" plan --model "$model" --tp 2 --device-memory 0.6,,
    expect 2 "--tp 3" "$probe" plan --model "$model" --tp 3 --device-memory 0.6
    expect 5 "device 0: the weights and workspace of its 8 ranks" \
        "$probe" plan --model "$model" --tp 8 --device-memory 0.52 --devices 0
    exit $failed
fi

# ---- Kimi-K2.5 at TP 8, figures by hand ----
k25="$tmp/k25"
if ! "$mkmodel" --holes --out "$k25" --hidden 7168 --layers 61 --dense-layers 1 --heads 64 --q-lora 1536 \
        --kv-lora 512 --nope 128 --rope 64 --v-head 128 --experts 384 --top-k 8 --moe-inter 2048 --inter 18432 \
        --shared 1 --vocab 163584 --single-file >/dev/null; then
    echo "FAIL kimi-mkmodel (K2.5 shapes)"
    exit 1
fi
"$probe" plan --model "$k25" --tp 8 --device-memory 94.5 --sms 188 --json >"$tmp/k25_96.json" &&
"$probe" plan --model "$k25" --tp 8 --device-memory 139.5 --sms 132 --json >"$tmp/k25_141.json" ||
    { echo "FAIL plan (K2.5)"; exit 1; }
# kimi-probe info --dcp 8 (the cache sharded over the 8 ranks) at the default 90 GiB per rank
"$probe" info --model "$k25" --tp 8 --dcp 8 --json >"$tmp/k25_dcp8.json" &&
"$probe" info --model "$k25" --tp 8 --dcp 8 >"$tmp/k25_dcp8.txt" || { echo "FAIL info --dcp 8 (K2.5)"; exit 1; }
rm -rf "$k25"
grep -E "^(kv |max context|replicated)" "$tmp/k25_dcp8.txt"
python3 - "$tmp/k25_dcp8.json" "$tmp/k25_dcp8.txt" <<'PY' || failed=1
import json, sys
p = json.load(open(sys.argv[1]))
cache = 61 * (512 + 64) * 2                          # 70,272 B per position, replicated
replicated = (int(90 * (1 << 30)) - p["bytes_per_rank"]) // cache
want = {"dcp": 8, "kv_bytes_per_token": cache, "kv_bytes_per_token_per_rank": cache // 8,
        "max_context_replicated": min(replicated, 262144), "max_context_by_memory": 8 * replicated,
        "max_context": min(8 * replicated, 262144)}
bad = [k for k, v in want.items() if p.get(k) != v]
# the text says the memory holds 8x, even where max_position_embeddings caps what is opened
line = "replicated    %d positions fit by memory with the cache on every rank (dcp 1); dcp 8: %d (8.00x)" \
    % (replicated, 8 * replicated)
if line not in open(sys.argv[2]).read():
    bad.append("text line '%s'" % line)
    want[bad[-1]] = "present"
print(("FAIL" if bad else "ok  ") + " K2.5 info --dcp 8: %d positions by memory, %d replicated (%s)"
      % (p["max_context_by_memory"], replicated, ", ".join("%s = %s, by hand %s" % (k, p.get(k), want[k]) for k in bad)))
sys.exit(1 if bad else 0)
PY
python3 - "$tmp/k25_96.json" "$tmp/k25_141.json" README.md <<'PY' || failed=1
import json, sys

GiB, MiB = 1 << 30, 1 << 20
def up(x, m): return -(-x // m) * m

# Kimi-K2.5's text config; TP 8 splits heads, every MLP's intermediate width and lm_head's vocabulary.
H, L, DENSE, HEADS, Q_LORA, KV_LORA, NOPE, ROPE, V = 7168, 61, 1, 64, 1536, 512, 128, 64, 128
E, TOPK, MOE_I, DENSE_I, SHARED, VOCAB, MAX_POS, TP = 384, 8, 2048, 18432, 1, 163840, 262144, 8
heads, moe_i, shared_i, dense_i, vocab = HEADS // TP, MOE_I // TP, SHARED * MOE_I // TP, DENSE_I // TP, VOCAB // TP

# Packed on the device: rows padded to 16 bytes, each block (data, scales) to 256 bytes. BF16: 2 B
# a weight; NVFP4: half a byte a weight and one E4M3 scale per 16 weights.
def bf16(rows, cols): return up(rows * up(cols * 2, 16), 256)
def nvfp4(rows, cols):
    pitch = up(cols // 2, 16)
    return up(rows * pitch, 256) + up(rows * up(pitch // 16 * 2, 16), 256)
def mlp(inter): return 2 * nvfp4(inter, H) + nvfp4(H, inter)   # gate, up [inter][H]; down [H][inter]

# The checkpoint (nvidia/Kimi-K2.5-NVFP4): attention, router and lm_head BF16; every MLP NVFP4.
attention = bf16(Q_LORA, H) + bf16(KV_LORA + ROPE, H) + bf16(heads * (NOPE + ROPE), Q_LORA) \
    + bf16(heads * (NOPE + V), KV_LORA) + bf16(H, heads * V)
moe_layer = bf16(E, H) + mlp(shared_i) + E * mlp(moe_i)        # each rank holds a slice of every expert
packed = L * attention + DENSE * mlp(dense_i) + (L - DENSE) * moe_layer + bf16(vocab, H)
# float vectors (2 norms, q_a and kv_a norms, a router bias slot per layer; the final norm), the
# expert tables (3 matrices of 56 B per expert and layer, and the dense/shared entry) and 256 B of
# alignment for each of 6 allocations per layer and the final norm
vectors = up((L * (2 * H + Q_LORA + KV_LORA + E) + H) * 4, 256)
tables = up(L * (E + 1) * 3 * 56, 256)
weights = packed + vectors + tables + (L * 6 + 1) * 256

# The workspace: a prefill step of T = 512 tokens, in floats, each buffer rounded up to 64 floats.
def workspace(sms):
    T, latent_part = 512, KV_LORA + 2
    splits = 2 * sms                                  # decode attention: two blocks per multiprocessor
    gemv_rows = max(Q_LORA, KV_LORA + ROPE, heads * (NOPE + ROPE), H, E, vocab, NOPE + V)
    buffers = [
        T * H, T * H, T * Q_LORA, T * heads * (NOPE + ROPE), T * (KV_LORA + ROPE),      # h, x, q_a, q, kv
        T * heads * KV_LORA, T * heads * KV_LORA, T * heads * V, T * H,                 # q/o latent, attn, partial
        T * E, T * TOPK, T * TOPK, T * max(TOPK * moe_i, dense_i), T * TOPK * H,        # routing, act, routed y
        T * shared_i, T * H, 64 * vocab, E + 1, T * TOPK,                               # shared, logits, moe order
        max(max(splits, 64) * heads, 16 * splits) * latent_part,                        # attention partials
        gemv_rows * 16, gemv_rows,                                                      # split-K partials, counters
        T * H,                          # BF16 hi/lo activations of the widest K (hidden): 2 halves a float
        min(vocab * H, 8 << 20) // 2,   # one dequantised BF16 tile, at most 8M weights (lm_head's is bigger)
        (16 << 20) // 4,                # the cuBLASLt workspace
        T * max(dense_i, shared_i), T * H, T * H, T * moe_i, T * moe_i,                # GEMM MLP, one GEMM expert
    ]
    return sum(up(b, 64) for b in buffers) * 4

cache = L * (KV_LORA + ROPE) * 2                      # fp16 latent and k_pe per position, every rank
reserve = 512 * MiB
failed = False
readme = open(sys.argv[3]).read()
rows = {}
for path, free_gib, sms in ((sys.argv[1], 94.5, 188), (sys.argv[2], 139.5, 132)):
    p = json.load(open(path))
    free = int(free_gib * GiB)
    ws = workspace(sms)
    fit = (free - reserve - weights - ws) // cache
    want = {"rank_weight_bytes": [weights] * TP, "rank_workspace_bytes": [ws] * TP, "free_bytes": [free] * TP,
            "reserve_bytes": reserve, "cache_bytes_per_position": cache, "max_context_by_memory": fit,
            "max_position": MAX_POS, "max_context": min(fit, MAX_POS)}
    for key, value in want.items():
        if p.get(key) != value:
            print("FAIL K2.5 %.1f GiB: %s = %s, by hand %s" % (free_gib, key, p.get(key), value))
            failed = True
    rows.setdefault("weights", []).append("%.2f GiB" % (weights / GiB))
    rows.setdefault("workspace", []).append("%.1f MiB" % (ws / MiB))
    rows.setdefault("fit", []).append("{:,} tokens".format(fit))
    print("K2.5 TP 8, %.1f GiB free, %d SMs: weights %d B, workspace %d B, %d positions fit" % (free_gib, sms, weights, ws, fit))
# The README's table states the same figures.
for name, (a, b) in rows.items():
    if "| %s | %s |" % (a, b) not in readme:
        print("FAIL README's table has no row '| %s | %s |'" % (a, b))
        failed = True
if "| {:,} B | {:,} B |".format(cache, cache) not in readme:
    print("FAIL README's table has no cache row of %d B" % cache)
    failed = True
print("FAIL" if failed else "ok   K2.5 plans match the figures by hand and the README")
sys.exit(1 if failed else 0)
PY
exit $failed
