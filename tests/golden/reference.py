#!/usr/bin/env python3
"""Independent float64 reference of the Kimi-K2.5 forward pass (MLA + MoE, NVFP4), written
from docs/MODEL_FORMAT.md alone, that makes golden reference directories for generated
checkpoints of any shape and checks itself against a shipped reference directory.

  reference.py --model DIR --out REFDIR [--prompt-tokens N] [--greedy N]
      write REFDIR/model_cases.json (+ .f32/.f16 files) in the layout of reference/tiny-k25
  reference.py --model DIR --check REFDIR [--max-tokens N]
      recompute every model case of REFDIR (up to N tokens) and print the agreement, with
      CONVENTIONS.md's tolerances (exit 1 if out of them)

Numerics: float64 activations, NVFP4 weights dequantized exactly, fp16 latent cache (the
normalised latent and the roped k_pe are rounded to fp16 when written and attention reads the
rounded values), sigmoid router on the float64 hidden state.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def e4m3_table():
    """All 256 F8_E4M3 (fn) byte values as float64: bias 7, subnormals, 0x7F/0xFF NaN."""
    table = np.empty(256, dtype=np.float64)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        exponent = (b >> 3) & 0xF
        mantissa = b & 0x7
        if exponent == 0xF and mantissa == 0x7:
            table[b] = np.nan
        elif exponent == 0:
            table[b] = sign * (mantissa / 8.0) * 2.0 ** -6
        else:
            table[b] = sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)
    return table


E4M3 = e4m3_table()


class Checkpoint:
    """Tensors of a safetensors checkpoint (one file or an index of shards), read with numpy."""

    SIZES = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1, "I8": 1}

    def __init__(self, directory):
        self.directory = directory
        self.tensors = {}  # name -> (path, dtype, shape, byte offset in file, byte length)
        index = os.path.join(directory, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        for name in files:
            self._read_header(os.path.join(directory, name))

    def _read_header(self, path):
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
        data_start = 8 + header_len
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            self.tensors[name] = (path, entry["dtype"], tuple(entry["shape"]), data_start + begin, end - begin)

    def has(self, name):
        return name in self.tensors

    def dtype(self, name):
        return self.tensors[name][1]

    def raw(self, name):
        path, dtype, shape, offset, length = self.tensors[name]
        count = int(np.prod(shape)) if shape else 1
        if count * self.SIZES[dtype] != length:
            raise ValueError(f"{name}: {dtype}{list(shape)} does not fill {length} bytes")
        storage = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32,
                   "U8": np.uint8, "F8_E4M3": np.uint8, "I8": np.int8}[dtype]
        return np.fromfile(path, dtype=storage, count=count, offset=offset).reshape(shape)

    def floats(self, name):
        """A BF16 / F16 / F32 / F8_E4M3 tensor as float64 (exact)."""
        dtype = self.dtype(name)
        raw = self.raw(name)
        if dtype == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        if dtype == "F8_E4M3":
            return E4M3[raw]
        if dtype in ("F16", "F32"):
            return raw.astype(np.float64)
        raise ValueError(f"{name}: dtype {dtype} is not a float tensor")

    def linear(self, name):
        """W[N, K] of a linear (name without '.weight'): NVFP4 iff U8 weight + both scales."""
        weight = name + ".weight"
        if (self.dtype(weight) == "U8" and self.has(name + ".weight_scale")
                and self.has(name + ".weight_scale_2")):
            packed = self.raw(weight)  # [N, K/2], element 2j = low nibble of byte j
            rows, half = packed.shape
            codes = np.empty((rows, half * 2), dtype=np.uint8)
            codes[:, 0::2] = packed & 0xF
            codes[:, 1::2] = packed >> 4
            scale = self.floats(name + ".weight_scale")  # [N, K/16]
            if scale.shape != (rows, half * 2 // 16):
                raise ValueError(f"{name}.weight_scale: shape {scale.shape} for weight {packed.shape}")
            scale_2 = float(self.floats(name + ".weight_scale_2").reshape(()))
            # e2m1 (2 significant bits) x e4m3 (4) x f32 (24) is exact in float64.
            return E2M1[codes] * np.repeat(scale, 16, axis=1) * scale_2
        return self.floats(weight)


def yarn_mscale(scale, mscale):
    return 0.1 * mscale * math.log(scale) + 1.0


class Model:
    def __init__(self, directory):
        with open(os.path.join(directory, "config.json")) as f:
            top = json.load(f)
        cfg = top.get("text_config", top)
        self.cfg = cfg
        self.ckpt = Checkpoint(directory)
        ck = self.ckpt
        embed = [n for n in ck.tensors if n.endswith("embed_tokens.weight") and "vision" not in n]
        if len(embed) != 1:
            raise ValueError(f"expected one embed_tokens.weight, found {embed}")
        prefix = embed[0][: -len("embed_tokens.weight")]
        head_prefix = prefix[: -len("model.")] if prefix == "model." or prefix.endswith(".model.") else prefix
        self.layers_n = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.nope = cfg["qk_nope_head_dim"]
        self.rope = cfg["qk_rope_head_dim"]
        self.vdim = cfg["v_head_dim"]
        self.kv_lora = cfg["kv_lora_rank"]
        self.q_lora = cfg.get("q_lora_rank")
        self.eps = cfg["rms_norm_eps"]
        self.vocab = cfg["vocab_size"]
        self.first_dense = cfg["first_k_dense_replace"]
        self.n_experts = cfg["n_routed_experts"]
        self.topk = cfg["num_experts_per_tok"]
        self.n_group = cfg.get("n_group") or 1
        self.topk_group = cfg.get("topk_group") or 1
        self.norm_topk = cfg.get("norm_topk_prob", True)
        self.routed_scale = cfg["routed_scaling_factor"]
        if cfg.get("scoring_func", "sigmoid") != "sigmoid":
            raise ValueError("only scoring_func sigmoid is implemented")

        self.embed = ck.floats(embed[0])
        self.norm = ck.floats(prefix + "norm.weight")
        self.lm_head = ck.linear(head_prefix + "lm_head")
        self.layers = []
        for i in range(self.layers_n):
            p = f"{prefix}layers.{i}."
            L = {
                "in_norm": ck.floats(p + "input_layernorm.weight"),
                "post_norm": ck.floats(p + "post_attention_layernorm.weight"),
                "q_a": ck.linear(p + "self_attn.q_a_proj"),
                "q_a_norm": ck.floats(p + "self_attn.q_a_layernorm.weight"),
                "q_b": ck.linear(p + "self_attn.q_b_proj"),
                "kv_a": ck.linear(p + "self_attn.kv_a_proj_with_mqa"),
                "kv_a_norm": ck.floats(p + "self_attn.kv_a_layernorm.weight"),
                "kv_b": ck.linear(p + "self_attn.kv_b_proj"),
                "o": ck.linear(p + "self_attn.o_proj"),
            }
            if i < self.first_dense:
                L["mlp"] = self._mlp(p + "mlp.")
            else:
                L["router"] = ck.linear(p + "mlp.gate")
                L["bias"] = ck.floats(p + "mlp.gate.e_score_correction_bias")
                L["experts"] = [self._mlp(f"{p}mlp.experts.{j}.") for j in range(self.n_experts)]
                L["shared"] = self._mlp(p + "mlp.shared_experts.") if cfg.get("n_shared_experts") else None
            self.layers.append(L)
        self._rope_setup(cfg)

    def _mlp(self, p):
        return tuple(self.ckpt.linear(p + n) for n in ("gate_proj", "up_proj", "down_proj"))

    def _rope_setup(self, cfg):
        d = self.rope
        theta = cfg["rope_theta"]
        inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)  # [d/2]
        rs = cfg.get("rope_scaling") or {}
        self.cos_sin_scale = 1.0
        self.softmax_scale = (self.nope + self.rope) ** -0.5
        if rs and rs.get("type", rs.get("rope_type")) == "yarn":
            f = rs["factor"]
            L = rs["original_max_position_embeddings"]
            bf, bs = rs.get("beta_fast", 32), rs.get("beta_slow", 1)

            def corr(r):
                return d * math.log(L / (r * 2 * math.pi)) / (2 * math.log(theta))

            low = max(math.floor(corr(bf)), 0)
            high = min(math.ceil(corr(bs)), d - 1)
            if low == high:
                high += 0.001
            ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0, 1)
            inv = inv / f * ramp + inv * (1 - ramp)
            mscale, mscale_all = rs.get("mscale", 1), rs.get("mscale_all_dim", 0)
            self.cos_sin_scale = yarn_mscale(f, mscale) / yarn_mscale(f, mscale_all)
            self.softmax_scale *= yarn_mscale(f, mscale_all) ** 2
        self.inv_freq = inv

    def rope_apply(self, x, positions):
        """Interleaved pairs (x[2i], x[2i+1]) of x[..., T, d] rotated by positions[T]*inv_freq[i]."""
        angle = np.asarray(positions, dtype=np.float64)[:, None] * self.inv_freq[None, :]  # [T, d/2]
        cos = np.cos(angle) * self.cos_sin_scale
        sin = np.sin(angle) * self.cos_sin_scale
        even, odd = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = even * cos - odd * sin
        out[..., 1::2] = even * sin + odd * cos
        return out

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    @staticmethod
    def mlp(x, weights):
        gate, up, down = weights
        g = x @ gate.T
        return ((g / (1 + np.exp(-g))) * (x @ up.T)) @ down.T

    def route(self, L, x):
        """Chosen experts [T, topk] (by biased score, best first), their weights [T, topk], and the
        smallest gap between a kept and a dropped score (group or expert) over the tokens."""
        s = 1.0 / (1.0 + np.exp(-(x @ L["router"].T)))  # [T, E]
        biased = s + L["bias"][None, :]
        T = x.shape[0]
        margin = math.inf
        if self.n_group > 1:
            per = self.n_experts // self.n_group
            grouped = biased.reshape(T, self.n_group, per)
            group_score = np.sort(grouped, axis=-1)[..., -2:].sum(-1)  # [T, G]: sum of top-2
            order = np.argsort(-group_score, axis=-1, kind="stable")
            keep = order[:, : self.topk_group]
            if self.topk_group < self.n_group:
                ranked = np.take_along_axis(group_score, order, -1)
                margin = float(np.min(ranked[:, self.topk_group - 1] - ranked[:, self.topk_group]))
            mask = np.zeros((T, self.n_group), dtype=bool)
            np.put_along_axis(mask, keep, True, axis=-1)
            biased = np.where(np.repeat(mask, per, axis=1), biased, -np.inf)
        order = np.argsort(-biased, axis=-1, kind="stable")
        chosen = order[:, : self.topk]
        if self.topk < self.n_experts:
            ranked = np.take_along_axis(biased, order, -1)
            margin = min(margin, float(np.min(ranked[:, self.topk - 1] - ranked[:, self.topk])))
        w = np.take_along_axis(s, chosen, -1)
        if self.norm_topk:
            w = w / w.sum(-1, keepdims=True)
        return chosen, w * self.routed_scale, margin

    def new_cache(self):
        return {"latent": [np.zeros((0, self.kv_lora)) for _ in range(self.layers_n)],
                "k_pe": [np.zeros((0, self.rope)) for _ in range(self.layers_n)], "tokens": []}

    @staticmethod
    def truncate(cache, n):
        cache["latent"] = [c[:n] for c in cache["latent"]]
        cache["k_pe"] = [c[:n] for c in cache["k_pe"]]
        cache["tokens"] = cache["tokens"][:n]

    def forward(self, tokens, cache, fp16_cache=True):
        """Run tokens after what cache holds; returns logits [T, vocab], routing, min margin."""
        start = len(cache["tokens"])
        T = len(tokens)
        positions = np.arange(start, start + T)
        H, dn, dr, dv = self.heads, self.nope, self.rope, self.vdim
        h = self.embed[np.asarray(tokens)]  # [T, hidden]
        routing = {}
        margin = math.inf
        causal = positions[:, None] >= np.arange(start + T)[None, :]  # [T, P]
        for i, L in enumerate(self.layers):
            x = self.rmsnorm(h, L["in_norm"])
            q = self.rmsnorm(x @ L["q_a"].T, L["q_a_norm"]) @ L["q_b"].T  # [T, H*(dn+dr)]
            q = q.reshape(T, H, dn + dr).transpose(1, 0, 2)  # [H, T, dn+dr]
            q_nope, q_pe = q[..., :dn], self.rope_apply(q[..., dn:], positions)
            kv = x @ L["kv_a"].T  # [T, kv_lora + dr]
            latent = self.rmsnorm(kv[:, : self.kv_lora], L["kv_a_norm"])
            k_pe = self.rope_apply(kv[:, self.kv_lora:], positions)
            if fp16_cache:
                latent = latent.astype(np.float16).astype(np.float64)
                k_pe = k_pe.astype(np.float16).astype(np.float64)
            cache["latent"][i] = np.concatenate([cache["latent"][i], latent])
            cache["k_pe"][i] = np.concatenate([cache["k_pe"][i], k_pe])
            c_all, pe_all = cache["latent"][i], cache["k_pe"][i]  # [P, kv_lora], [P, dr]
            kv_b = (c_all @ L["kv_b"].T).reshape(-1, H, dn + dv).transpose(1, 0, 2)  # [H, P, dn+dv]
            k_nope, v = kv_b[..., :dn], kv_b[..., dn:]
            score = (q_nope @ k_nope.transpose(0, 2, 1) + q_pe @ pe_all.T[None]) * self.softmax_scale
            score = np.where(causal[None], score, -np.inf)  # [H, T, P]
            score = np.exp(score - score.max(-1, keepdims=True))
            p = score / score.sum(-1, keepdims=True)
            out = (p @ v).transpose(1, 0, 2).reshape(T, H * dv)
            h = h + out @ L["o"].T
            x = self.rmsnorm(h, L["post_norm"])
            if "mlp" in L:
                h = h + self.mlp(x, L["mlp"])
                continue
            chosen, weights, m = self.route(L, x)
            margin = min(margin, m)
            routing[i] = chosen
            y = self.mlp(x, L["shared"]) if L["shared"] is not None else np.zeros_like(x)
            for e in np.unique(chosen):
                rows, slot = np.nonzero(chosen == e)
                y[rows] += weights[rows, slot][:, None] * self.mlp(x[rows], L["experts"][e])
            h = h + y
        cache["tokens"] = cache["tokens"] + list(tokens)
        logits = self.rmsnorm(h, self.norm) @ self.lm_head.T
        return logits, routing, margin

    def cache_array(self, cache):
        """The cache as [layer][position][latent | k_pe] float16."""
        return np.stack([np.concatenate([c, pe], axis=1) for c, pe in zip(cache["latent"], cache["k_pe"])]).astype(np.float16)

    def greedy(self, tokens, steps):
        cache = self.new_cache()
        logits, _, margin = self.forward(tokens, cache)
        step_logits, generated = [], []
        row = logits[-1]
        for s in range(steps):
            step_logits.append(row)
            generated.append(int(np.argmax(row)))
            if s + 1 < steps:
                logits, _, step_margin = self.forward([generated[-1]], cache)
                row, margin = logits[-1], min(margin, step_margin)
        return generated, np.stack(step_logits), margin


def top1_margin(rows):
    top2 = np.sort(rows, axis=-1)[:, -2:]
    return float(np.min(top2[:, 1] - top2[:, 0]))


# ---------------------------------------------------------------- generating a reference


def special_ids(model_dir):
    with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
        added = json.load(f)["added_tokens_decoder"]
    by_name = {v["content"]: int(k) for k, v in added.items()}
    need = ["<|im_system|>", "<|im_middle|>", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<think>", "</think>"]
    missing = [n for n in need if n not in by_name]
    if missing:
        raise ValueError(f"{model_dir}/tokenizer_config.json: no added token named {missing[0]}")
    return {n: by_name[n] for n in need}, min(by_name.values())


class Draw:
    """A fixed 64-bit LCG, so the drawn prompts never depend on numpy's generators."""

    def __init__(self, seed):
        self.state = seed

    def below(self, n):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % 2 ** 64
        return (self.state >> 33) % n


def chat_like(sp, draw, plain_ids, n):
    """n ids shaped like a rendered chat: system, user, assistant header and <think>, after one
    drawn id (a fixed first token would give every drawn prompt the same first-token routing,
    so a near tie there could never be drawn away)."""
    def words(k):
        return [int(draw.below(plain_ids)) for _ in range(k)]

    body = n - 15  # 9 special ids + 6 words of role names and the opener
    first = body // 2
    return (words(1) + [sp["<|im_system|>"]] + words(3) + [sp["<|im_middle|>"]] + words(first) + [sp["<|im_end|>"]]
            + [sp["<|im_user|>"]] + words(2) + [sp["<|im_middle|>"]] + words(body - first) + [sp["<|im_end|>"]]
            + [sp["<|im_assistant|>"], sp["<|im_middle|>"], sp["<think>"]])


def build_cases(model, sp, plain_ids, seed, prompt_tokens, greedy_steps):
    """The four cases for one drawn prompt: (cases, files {name: array}, margins)."""
    draw = Draw(seed)
    prompt = chat_like(sp, draw, plain_ids, prompt_tokens)
    files, margins = {}, {}
    cache = model.new_cache()
    logits, routing, margins["routing prefill"] = model.forward(prompt, cache)
    exact = model.forward(prompt, model.new_cache(), fp16_cache=False)[0]
    files["prefill_prompt.f32"] = logits
    prefill = {
        "name": "prefill_prompt", "kind": "prefill", "tokens": prompt,
        "positions": list(range(len(prompt))),
        "logits": {"file": "prefill_prompt.f32", "shape": [len(prompt), model.vocab]},
        "fp16_cache_effect_max_abs": float(np.max(np.abs(logits - exact))),
        "routing": [{"layer": i, "experts": routing[i].tolist()} for i in sorted(routing)],
    }
    kv = model.cache_array(cache)
    files["kv_prompt.f16"] = kv
    kv_case = {
        "name": "kv_prompt", "kind": "kv", "tokens": prompt,
        "kv": {"file": "kv_prompt.f16", "shape": list(kv.shape), "dtype": "float16",
               "layout": "[layer][position][kv_lora_rank latent | qk_rope_head_dim k_pe]"},
    }
    generated, step_logits, margins["routing greedy"] = model.greedy(prompt, greedy_steps)
    margins["top-1 greedy"] = top1_margin(step_logits)
    files["greedy_prompt.f32"] = step_logits
    greedy = {
        "name": "greedy_prompt", "kind": "greedy", "tokens": prompt, "generated": generated,
        "min_top1_margin": margins["top-1 greedy"],
        "step_logits": {"file": "greedy_prompt.f32", "shape": [greedy_steps, model.vocab]},
    }
    first = prompt + generated
    second = prompt + [sp["</think>"]] + [int(draw.below(plain_ids)) for _ in range(6)] + [
        sp["<|im_end|>"], sp["<|im_user|>"], sp["<|im_middle|>"]] + [
        int(draw.below(plain_ids)) for _ in range(5)] + [sp["<|im_end|>"], sp["<|im_assistant|>"], sp["<|im_middle|>"]]
    common = next((k for k, (a, b) in enumerate(zip(first, second)) if a != b), min(len(first), len(second)))
    turn_cache = model.new_cache()
    model.forward(first, turn_cache)
    model.truncate(turn_cache, common)
    turn_logits, _, margins["routing turns"] = model.forward(second[common:], turn_cache)
    files["turns_second_prompt.f32"] = turn_logits[-1:]
    turns = {
        "name": "turns_second_prompt", "kind": "turns", "first": first, "tokens": second,
        "positions": [len(second) - 1], "common_prefix": common,
        "note": "run first (prefill+cache), then tokens reusing the longest common cached prefix",
        "logits": {"file": "turns_second_prompt.f32", "shape": [1, model.vocab]},
    }
    return [prefill, kv_case, greedy, turns], files, margins


# An fp32 engine must make the same discrete choices as this float64 run: the k-th and
# (k+1)-th biased router scores must be this far apart at every token, and greedy top-1
# logits this far above top-2 (CONVENTIONS.md compares free-running ids from 0.01 on).
MIN_ROUTING_MARGIN = 1e-4
MIN_TOP1_MARGIN = 0.02


def generate(model_dir, out_dir, prompt_tokens, greedy_steps):
    model = Model(model_dir)
    sp, first_special = special_ids(model_dir)
    plain_ids = min(first_special, model.vocab)
    best = None
    for attempt in range(32):
        seed = 0x4B494D49 + attempt
        cases, files, margins = build_cases(model, sp, plain_ids, seed, prompt_tokens, greedy_steps)
        routing = min(v for k, v in margins.items() if k.startswith("routing"))
        slack = min(routing / MIN_ROUTING_MARGIN, margins["top-1 greedy"] / MIN_TOP1_MARGIN)
        if best is None or slack > best[0]:
            best = (slack, seed, cases, files, margins)
        if slack >= 1:
            break
    slack, seed, cases, files, margins = best
    if slack < 1:
        print(f"reference.py: warning: no prompt with clear margins found; using seed {seed:#x}: {margins}",
              file=sys.stderr)
    os.makedirs(out_dir, exist_ok=True)
    for name, array in files.items():
        array.astype("<f2" if name.endswith(".f16") else "<f4").tofile(os.path.join(out_dir, name))
    head = {
        "checkpoint": os.path.basename(os.path.normpath(model_dir)),
        "vocab_size": model.vocab,
        "kv_cache": "fp16 latent (normalised kv_lora latent and roped k_pe rounded to fp16 on write)",
        "compute": "float64 activations, NVFP4 weights dequantized exactly (tests/golden/reference.py)",
        "seed": seed,
        "margins": margins,
    }
    with open(os.path.join(out_dir, "model_cases.json"), "w") as f:
        f.write(json.dumps(head)[:-1] + ',\n "cases": [\n  ' + ",\n  ".join(json.dumps(c) for c in cases) + "\n ]\n}\n")
    print(f"{out_dir}: {len(cases)} cases, seed {seed:#x}, prompt {prompt_tokens} tokens, "
          f"greedy {cases[2]['generated']}, " + ", ".join(f"min {k} margin {v:.2e}" for k, v in margins.items())
          + f", fp16 cache effect {cases[0]['fp16_cache_effect_max_abs']:.2e}")


# ---------------------------------------------------------------- checking a reference


def check(model_dir, ref_dir, max_tokens):
    model = Model(model_dir)
    with open(os.path.join(ref_dir, "model_cases.json")) as f:
        doc = json.load(f)
    ok = True

    def load(spec, dtype):
        return np.fromfile(os.path.join(ref_dir, spec["file"]), dtype=dtype).reshape(spec["shape"]).astype(np.float64)

    def report(name, got, want):
        nonlocal ok
        err = np.abs(got - want)
        good = err.max() <= 1e-2 and err.mean() <= 1e-3
        ok &= bool(good)
        print(f"{'PASS' if good else 'FAIL'} {name}: max |err| {err.max():.3e} mean {err.mean():.3e}")

    for case in doc["cases"]:
        name, kind = case["name"], case["kind"]
        if max_tokens and len(case["tokens"]) > max_tokens:
            print(f"---- {name}: not run ({len(case['tokens'])} tokens > --max-tokens {max_tokens})")
            continue
        if kind == "prefill":
            logits, routing, _ = model.forward(case["tokens"], model.new_cache())
            report(name, logits[case["positions"]], load(case["logits"], "<f4"))
            for r in case.get("routing", []):
                same = routing[r["layer"]].tolist() == r["experts"]
                sets = sum(set(a) != set(b) for a, b in zip(routing[r["layer"]].tolist(), r["experts"]))
                ok &= sets == 0
                print(f"{'PASS' if sets == 0 else 'FAIL'} {name} routing layer {r['layer']}: "
                      f"{'same order' if same else 'same sets, other order' if sets == 0 else f'{sets} tokens differ'}")
        elif kind == "kv":
            cache = model.new_cache()
            model.forward(case["tokens"], cache)
            got = model.cache_array(cache).astype(np.float64)
            want = load(case["kv"], "<f2")
            rel = np.abs(got - want) / np.sqrt(np.mean(want * want, axis=-1, keepdims=True))
            good = rel.mean() <= 1e-4 and rel.max() <= 4e-3
            ok &= bool(good)
            print(f"{'PASS' if good else 'FAIL'} {name}: rel err mean {rel.mean():.3e} max {rel.max():.3e}, "
                  f"{int(np.count_nonzero(got != want))} of {got.size} fp16 values differ")
        elif kind == "greedy":
            generated, step_logits, _ = model.greedy(case["tokens"], len(case["generated"]))
            report(name + " free-running step logits", step_logits, load(case["step_logits"], "<f4"))
            same = generated == case["generated"]
            ok &= same
            print(f"{'PASS' if same else 'FAIL'} {name} ids: {'equal' if same else generated}"
                  f" (min top-1 margin {top1_margin(step_logits):.4f})")
        elif kind == "turns":
            cache = model.new_cache()
            model.forward(case["first"], cache)
            model.truncate(cache, case["common_prefix"])
            logits, _, _ = model.forward(case["tokens"][case["common_prefix"]:], cache)
            rows = [p - case["common_prefix"] for p in case["positions"]]
            report(name, logits[rows], load(case["logits"], "<f4"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint directory")
    ap.add_argument("--out", help="reference directory to write")
    ap.add_argument("--check", help="reference directory to recompute and compare")
    ap.add_argument("--prompt-tokens", type=int, default=40)
    ap.add_argument("--greedy", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=0,
                    help="with --check: leave out cases longer than this (numpy without BLAS is slow)")
    args = ap.parse_args()
    if bool(args.out) == bool(args.check):
        ap.error("give exactly one of --out and --check")
    try:
        if args.out:
            if args.prompt_tokens < 20 or args.greedy < 1:
                ap.error("--prompt-tokens must be >= 20 and --greedy >= 1")
            generate(args.model, args.out, args.prompt_tokens, args.greedy)
            return 0
        return 0 if check(args.model, args.check, args.max_tokens) else 1
    except (OSError, ValueError, KeyError) as e:
        print(f"reference.py: {args.model}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
