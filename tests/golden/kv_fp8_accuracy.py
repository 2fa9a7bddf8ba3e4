#!/usr/bin/env python3
"""kv_fp8_accuracy: what the fp8 latent cache (issue 22, kernels/kv_format.h) costs, measured
against the fp16 cache on the same backend: logits max / mean |difference|, top-1 agreement and
KL(fp16 || fp8) per position, on the golden cases and on a greedy continuation of a prompt
(its positions run as one teacher-forced pass); greedy ids of both caches side by side; and the
cache's own quantisation error (relative to each latent vector's rms) with a scale per 128 values
(the layout used) against one scale per position, computed from the fp16 cache.

usage: kv_fp8_accuracy.py PROBE MODEL [--reference DIR] [--prompt TEXT] [--gen N]
Prints a table; exits 0 (a measurement, not a test: tests/golden/CMakeLists.txt holds the tests)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def logits(probe, model, tokens, kv, vocab, tmp, positions=None):
    out = os.path.join(tmp, "logits.f32")
    cmd = [probe, "logits", "--model", model, "--tokens", ",".join(map(str, tokens)), "--kv-cache", kv, "--out", out]
    if positions is not None:
        cmd += ["--positions", ",".join(map(str, positions))]
    run(cmd)
    return np.fromfile(out, dtype=np.float32).reshape(-1, vocab)


def compare(a, b):
    """rows of fp16-cache logits a vs fp8-cache logits b"""
    d = np.abs(a.astype(np.float64) - b)
    la = a - a.max(1, keepdims=True)
    lb = b - b.max(1, keepdims=True)
    pa = np.exp(la) / np.exp(la).sum(1, keepdims=True)
    log_pa = la - np.log(np.exp(la).sum(1, keepdims=True))
    log_pb = lb - np.log(np.exp(lb).sum(1, keepdims=True))
    kl = (pa * (log_pa - log_pb)).sum(1)
    top1 = (a.argmax(1) == b.argmax(1)).mean()
    spread = a.std(1).mean()
    return d.max(), d.mean(), top1, kl.mean(), kl.max(), spread


E4M3 = np.array(sorted({m * 2.0 ** (e - 7) * (1 + f / 8) if e else f / 8 * 2.0 ** -6
                        for e in range(16) for f in range(8) for m in (1,)
                        if not (e == 15 and f == 7)}))


def e4m3(x):
    """round |x| <= 448 to the nearest e4m3 value (ties: either; a measurement, not the codec)"""
    s = np.sign(x)
    i = np.clip(np.searchsorted(E4M3, np.abs(x)), 1, len(E4M3) - 1)
    lo, hi = E4M3[i - 1], E4M3[i]
    return s * np.where(np.abs(x) - lo <= hi - np.abs(x), lo, hi)


def quant_error(latent, block):
    """mean and max |q(x) - x| / rms(x) over latent vectors [n][kv_lora] with a scale per block"""
    n, w = latent.shape
    blocks = latent.reshape(n, w // block, block)
    scale = np.abs(blocks).max(2, keepdims=True) / 448.0
    scale[scale == 0] = 1
    q = (e4m3(blocks / scale) * scale).reshape(n, w)
    rel = np.abs(q - latent) / np.sqrt((latent ** 2).mean(1, keepdims=True))
    return rel.mean(), rel.max()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("probe")
    ap.add_argument("model")
    ap.add_argument("--reference")
    ap.add_argument("--prompt", default="The history of the latent cache, told in short sentences:")
    ap.add_argument("--gen", type=int, default=256)
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    text = cfg.get("text_config", cfg)
    vocab, kv_lora, rope = text["vocab_size"], text["kv_lora_rank"], text["qk_rope_head_dim"]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"model {a.model}: kv_lora {kv_lora}, rope {rope}, layers {text['num_hidden_layers']}, vocab {vocab}")
        print(f"{'case':40s} {'rows':>5s} {'max|d|':>8s} {'mean|d|':>8s} {'top1':>6s} {'KL mean':>9s} "
              f"{'KL max':>9s} {'logit sd':>8s}")
        if a.reference:
            cases = json.load(open(os.path.join(a.reference, "model_cases.json")))["cases"]
            for c in cases:
                if "tokens" not in c:
                    continue
                toks = c["tokens"]
                x, y = (logits(a.probe, a.model, toks, kv, vocab, tmp) for kv in ("fp16", "fp8"))
                r = compare(x, y)
                print(f"{c['name']:40s} {len(x):5d} {r[0]:8.3g} {r[1]:8.3g} {r[2]:6.3f} {r[3]:9.3g} {r[4]:9.3g} "
                      f"{r[5]:8.3g}")
        prompt = json.loads(subprocess.run([a.probe, "tokenize", "--model", a.model], input=json.dumps(
            {"text": a.prompt}) + "\n", check=True, capture_output=True, text=True).stdout)["ids"]
        gen = {}
        for kv in ("fp16", "fp8"):
            out = run([a.probe, "generate", "--model", a.model, "--tokens", ",".join(map(str, prompt)), "--n",
                       str(a.gen), "--speculate", "off", "--kv-cache", kv])
            gen[kv] = json.loads(out)["ids"]
        same = next((i for i, (p, q) in enumerate(zip(gen["fp16"], gen["fp8"])) if p != q), len(gen["fp16"]))
        seq = prompt + gen["fp16"]
        rows = list(range(len(prompt) - 1, len(seq) - 1))
        x, y = (logits(a.probe, a.model, seq, kv, vocab, tmp, rows) for kv in ("fp16", "fp8"))
        r = compare(x, y)
        print(f"{'continuation (' + str(len(rows)) + ' greedy steps)':40s} {len(x):5d} {r[0]:8.3g} {r[1]:8.3g} "
              f"{r[2]:6.3f} {r[3]:9.3g} {r[4]:9.3g} {r[5]:8.3g}")
        print(f"greedy ids: fp8 equals fp16 for the first {same} of {len(gen['fp16'])}, "
              f"{sum(p == q for p, q in zip(gen['fp16'], gen['fp8']))} equal in all")
        kv_out = os.path.join(tmp, "kv.f16")
        run([a.probe, "kv", "--model", a.model, "--tokens", ",".join(map(str, seq)), "--out", kv_out])
        cache = np.fromfile(kv_out, dtype=np.float16).astype(np.float64).reshape(text["num_hidden_layers"], len(seq),
                                                                                  kv_lora + rope)
        latent = cache[:, :, :kv_lora].reshape(-1, kv_lora)
        for block, name in ((min(128, kv_lora), "per 128 values (used)"), (kv_lora, "per position")):
            m, x = quant_error(latent, block)
            print(f"cache quantisation, scale {name:22s}: |error| / rms mean {m:.4f} max {x:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
