#!/usr/bin/env python3
"""decode_table_check: runs bench_gpu's decode table (--quick --table-only) for a model config at
TP N and checks its structure and arithmetic, never its timings: every item of issue 20's table
present in each context block (0 / 32k / 128k), counts per token from the config, each floor equal
to the bytes computed here from the config's shapes over the printed copy bandwidth, the ratios,
the launches' sum, the projection's all-reduce row from its stated constant, and the totals equal
to the sums of their rows.
usage: decode_table_check.py BENCH_GPU CONFIG_DIR TP [--emulated]   (exit 77: no device)"""
import json
import os
import re
import subprocess
import sys

CONTEXTS = [0, 32768, 131072]
KERNEL_ITEMS = ["merge", "attention", "absorb_q", "bf16_proj", "router", "nvfp4_moe", "nvfp4_dense", "norms",
                "lm_head"]
ONE_SHOT_US = 10.0      # the projection's all-reduce (decode_table.c RTX_ONE_SHOT_ALLREDUCE_S)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def close(a, b, rel=2e-3, abs_tol=2e-3):
    return abs(a - b) <= max(abs_tol, rel * max(abs(a), abs(b)))


def attention_splits(capacity, sms):
    """engine/backend/device_plan.c device_attention_splits, written again."""
    splits = ((capacity + 15) // 16 + 3) // 4
    return max(1, min(splits, 2 * max(sms, 1)))


def expected_bytes(c, tp, sms):
    """One instance's floor bytes per item and context, from the config's shapes at TP tp."""
    hidden, heads = c["hidden_size"], c["num_attention_heads"] // tp
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    q_lora, kv_lora = c["q_lora_rank"], c["kv_lora_rank"]
    moe_inter, dense_inter = c["moe_intermediate_size"] // tp, c["intermediate_size"] // tp
    bf16 = lambda rows, cols: 2 * rows * cols
    nvfp4 = lambda rows, cols: rows * (cols // 2 + cols // 16)
    out = []
    for ctx in CONTEXTS:
        out.append({
            "merge": attention_splits(max(ctx, 1), sms) * heads * (kv_lora + 2) * 4,
            "attention": (kv_lora + rope) * 2 * ctx,
            "absorb_q": bf16(heads * nope, kv_lora),
            "bf16_proj": bf16(q_lora + kv_lora + rope, hidden) + bf16(heads * (nope + rope), q_lora)
                         + bf16(heads * v, kv_lora) + bf16(hidden, heads * v),
            "router": bf16(c["n_routed_experts"], hidden),
            "nvfp4_moe": (c["num_experts_per_tok"] + 1) * 3 * nvfp4(moe_inter, hidden),
            "nvfp4_dense": 3 * nvfp4(dense_inter, hidden),
            "norms": 5 * hidden * 4,
            "lm_head": bf16(c["vocab_size"] // tp, hidden),
        })
    return out


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    bench, config_dir, tp = sys.argv[1], sys.argv[2], int(sys.argv[3])
    emulated = "--emulated" in sys.argv[4:]
    run = subprocess.run([bench, "--quick", "--table-only", "--table-config", config_dir, "--tp", str(tp)],
                         capture_output=True, text=True)
    text = run.stdout
    if run.returncode == 77:
        print(text.strip())
        return 77
    print(text)
    check(run.returncode == 0, f"bench_gpu exited {run.returncode}: {run.stderr.strip()[-500:]}")
    with open(os.path.join(config_dir, "config.json")) as f:
        c = json.load(f)
    c = c.get("text_config", c)
    layers, dense = c["num_hidden_layers"], c.get("first_k_dense_replace", 0)
    moe = sum(1 for i in range(layers) if i >= dense and i % c.get("moe_layer_freq", 1) == 0)
    counts = {"merge": layers, "attention": layers, "absorb_q": layers, "bf16_proj": layers, "router": moe,
              "nvfp4_moe": moe, "nvfp4_dense": layers - moe, "norms": 2 * layers + 1, "lm_head": 1}

    head = re.search(r"^== decode table, one token on rank 0 of TP (\d+): .*; (\d+) layers \((\d+) dense \+ (\d+) MoE\)"
                     r"(.*)$", text, re.M)
    check(head is not None, "no decode table header")
    if head:
        check(int(head.group(1)) == tp and int(head.group(2)) == layers and int(head.group(3)) == layers - moe
              and int(head.group(4)) == moe, f"header's TP and layer counts: {head.group(0)}")
        check(("emulated, not GPU times" in head.group(5)) == emulated,
              f"the emulated label {'missing' if emulated else 'on a device'}: {head.group(0)}")
    bw = re.search(r"^copy bandwidth ([\d.]+) GB/s; empty kernel in a graph ([\d.]+) us; (\d+) SMs", text, re.M)
    check(bw is not None, "no copy bandwidth / launch / SM line")
    if failures:
        return report()
    bandwidth, empty_us, sms = float(bw.group(1)) * 1e9, float(bw.group(2)), int(bw.group(3))
    scale = re.search(r"\(bandwidth-bound time x ([\d.]+)\)", text)
    check(scale is not None and close(float(scale.group(1)), bandwidth / 1.8e12, rel=1e-3, abs_tol=1e-4),
          "the projection's bandwidth scale is not the copy bandwidth over 1.8 TB/s")
    expected = expected_bytes(c, tp, sms)

    blocks = re.split(r"^context (\d+) positions.*$", text, flags=re.M)
    found = [int(blocks[i]) for i in range(1, len(blocks), 2)]
    check(found == CONTEXTS, f"context blocks {found}, not {CONTEXTS}")
    for x, ctx in enumerate(found[:len(CONTEXTS)]):
        body = blocks[2 + 2 * x]
        rows = {}
        for line in body.splitlines():
            f = line.split()
            if len(f) >= 9 and f[0] in KERNEL_ITEMS + ["launches", "allreduce", "waves"]:
                rows[f[0]] = f[1:9]
        for key in KERNEL_ITEMS + ["launches", "allreduce", "waves"]:
            check(key in rows, f"context {ctx}: item {key} missing")
        if any(k not in rows for k in KERNEL_ITEMS + ["launches", "allreduce"]):
            continue
        measured = floor = rtx = kernels = 0.0
        for key in KERNEL_ITEMS:
            n, k, nbytes, m_us, f_us, ratio, r_us = rows[key][:7]
            check(int(n) == counts[key], f"context {ctx}: {key} count {n}, the config gives {counts[key]}")
            want = expected[x][key] * counts[key]
            check(float(nbytes) == want, f"context {ctx}: {key} bytes {nbytes}, computed {want}")
            check(close(float(f_us), want / bandwidth * 1e6), f"context {ctx}: {key} floor {f_us} us, "
                  f"computed {want / bandwidth * 1e6:.3f} us")
            if want > 0:
                check(close(float(ratio), float(m_us) / float(f_us), rel=1e-2),
                      f"context {ctx}: {key} ratio {ratio} is not measured / floor")
            else:
                check(ratio == "-" and float(m_us) == 0, f"context {ctx}: {key} has no bytes but a ratio or a time")
            check(float(m_us) >= 0 and float(r_us) >= 0, f"context {ctx}: {key} negative time")
            # the projection: the time less its launches scaled by bandwidth, the launches at the empty kernel's
            streaming = max(0.0, float(m_us) - float(k) * empty_us)
            want_rtx = streaming * bandwidth / 1.8e12 + float(k) * empty_us
            # to the printing's precision: times 0.001 us, the bandwidth 0.001 GB/s
            check(close(float(r_us), want_rtx, rel=3e-4, abs_tol=0.002 + float(k) * 6e-4),
                  f"context {ctx}: {key} projection {r_us} us, computed {want_rtx:.3f} us")
            measured += float(m_us)
            floor += float(f_us)
            rtx += float(r_us)
            kernels += float(k)
        launches = rows["launches"]
        check(close(float(launches[1]), kernels, abs_tol=0.6), f"context {ctx}: launches {launches[1]} are not "
              f"the items' kernels {kernels}")
        check(close(float(launches[3]), float(launches[1]) * empty_us, rel=5e-3),
              f"context {ctx}: launches' time is not launches x the empty kernel")
        check(close(float(launches[4]), (10 * layers + 16) * empty_us, rel=5e-3),
              f"context {ctx}: launches' floor is not the goal (10 per layer + 16) x the empty kernel")
        ar = rows["allreduce"]
        check(int(ar[0]) == 2 * layers and float(ar[2]) == 2 * layers * 4 * c["hidden_size"],
              f"context {ctx}: all-reduce count or bytes")
        check(close(float(ar[6]), 2 * layers * ONE_SHOT_US), f"context {ctx}: all-reduce projection {ar[6]}")
        if ar[3] != "-":
            measured += float(ar[3])
        rtx += float(ar[6])
        total = re.search(r"total: measured ([\d.]+) ms/token \(([\d.]+) tok/s\).*floor ([\d.]+) ms; "
                          r"projection ([\d.]+) ms/token \(([\d.]+) tok/s\)", body)
        check(total is not None, f"context {ctx}: no total line")
        if not total:
            continue
        tm, tt, tf, tr, trt = (float(g) for g in total.groups())
        # totals are printed to 0.001 ms, rows to 0.001 us
        tol = 0.5 + (len(KERNEL_ITEMS) + 1) * 1e-3
        check(close(tm * 1e3, measured, abs_tol=tol), f"context {ctx}: measured total {tm} ms, rows {measured} us")
        check(close(tf * 1e3, floor, abs_tol=tol), f"context {ctx}: floor total {tf} ms, rows {floor} us")
        check(close(tr * 1e3, rtx, abs_tol=tol), f"context {ctx}: projection total {tr} ms, rows {rtx} us")
        check(close(trt, 1e3 / tr, rel=2e-3, abs_tol=0.06), f"context {ctx}: projection tok/s {trt} is not 1 / {tr} ms")
        check(close(tt, 1e3 / tm, rel=2e-3, abs_tol=0.06), f"context {ctx}: measured tok/s {tt} is not 1 / {tm} ms")
    return report()


def report():
    for f in failures:
        print("FAIL:", f)
    print("decode_table_check:", "ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
