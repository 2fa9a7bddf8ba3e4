#!/usr/bin/env bash
# Checkpoints with one poisoned weight (kimi-mkmodel --poison): what a request does with each
# (issue 17). A NaN or inf that reaches the hidden state fails the request naming the first
# layer whose output held it (or the token embeddings); one that appears only in the final norm
# fails naming the final norm / lm_head; a huge latent saturates the fp16 cache to +-65504
# (counted in cache_clamps; the fp8 cache's fp16 reads too) and the answer stays finite; a NaN router score is never chosen, so
# the request answers.
#   poisoned.sh KIMI_PROBE KIMI_MKMODEL WORK_DIR
# Environment: KIMI_GOLDEN_BACKEND (cpu, the default, or cuda), KIMI_GOLDEN_DEVICES (cuda: --devices).
set -uo pipefail
probe=$1 mkmodel=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
backend=(--backend "${KIMI_GOLDEN_BACKEND:-cpu}")
[[ -n "${KIMI_GOLDEN_DEVICES:-}" ]] && backend+=(--devices "$KIMI_GOLDEN_DEVICES")
shape=(--hidden 256 --layers 3 --dense-layers 1 --heads 8 --experts 16 --top-k 4 --seed 5)
layers=language_model.model.layers
failed=0
kv_cache=()

# run NAME POISON EXPECT: make the checkpoint, generate 4 ids after a prompt holding token 0
# (whose embedding row holds element 0), and grep the output (stdout + stderr) for EXPECT.
run() {
    local name=$1 poison=$2 expect=$3 model=$work/$1
    if ! "$mkmodel" "${shape[@]}" --poison "$poison" --out "$model" > "$work/$name.mkmodel" 2>&1; then
        echo "FAIL $name: kimi-mkmodel --poison $poison:"; cat "$work/$name.mkmodel"; failed=1; return
    fi
    "$probe" generate --model "$model" --tokens 0,11,12,13,14,15,16,17,18,19 --n 4 --threads 1 "${backend[@]}" \
        ${kv_cache[@]+"${kv_cache[@]}"} \
        > "$work/$name.out" 2>&1
    if grep -qE -- "$expect" "$work/$name.out"; then
        echo "ok $name: $(tail -n 1 "$work/$name.out")"
    else
        echo "FAIL $name: --poison $poison: expected /$expect/, got:"; cat "$work/$name.out"; failed=1
    fi
}

run norm_nan "$layers.1.input_layernorm.weight=nan" "non-finite activations .* first in the output of layer 1,"
run norm_inf "$layers.2.post_attention_layernorm.weight=inf" "non-finite activations .* first in the output of layer 2,"
run embed_inf "language_model.model.embed_tokens.weight=-inf" "non-finite activations .* first in the token embeddings"
run final_nan "language_model.model.norm.weight=nan" "no finite logit at position 9: .*final norm or lm_head"
run latent_huge "$layers.0.self_attn.kv_a_layernorm.weight=1e30" '"stop_reason":"max_tokens",.*"cache_clamps":[1-9]'
# the fp8 cache holds a huge latent by its block scale, but reads it back as fp16: counted too
kv_cache=(--kv-cache fp8)
run latent_huge_fp8 "$layers.0.self_attn.kv_a_layernorm.weight=1e30" '"stop_reason":"max_tokens",.*"cache_clamps":[1-9]'
kv_cache=()
run router_nan "$layers.1.mlp.gate.weight=nan" '"stop_reason":"max_tokens"'
run router_bias_nan "$layers.2.mlp.gate.e_score_correction_bias=nan" '"stop_reason":"max_tokens"'
# a poison the checkpoint cannot hold, or a name it does not have, is a usage error
if "$mkmodel" "${shape[@]}" --poison "$layers.1.mlp.experts.0.gate_proj.weight=nan" --out "$work/bad" > /dev/null 2>&1 ||
   "$mkmodel" "${shape[@]}" --poison "no.such.tensor=1" --out "$work/bad2" > /dev/null 2>&1 ||
   "$mkmodel" "${shape[@]}" --poison "$layers.1.input_layernorm.weight" --out "$work/bad3" > /dev/null 2>&1; then
    echo "FAIL: kimi-mkmodel accepted a bad --poison"; failed=1
fi
exit $failed
