/* fuzz_config: the first byte picks one of the model directory's JSON files, the rest is its
 * text. A config that parses and validates must satisfy what the engine relies on (shapes
 * positive, the MoE routing computable, RoPE pairs whole, scalars finite and positive as floats,
 * special ids sorted, unique and inside the vocabulary); a refusal must have a message that
 * starts with the file and names the field (or says the whole document is not usable). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/model/config.h"

/* A failed expectation crashes the target, which is how libFuzzer (and the replay) learns of it. */
#define REQUIRE(cond)         \
    do {                      \
        if (!(cond))          \
            __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const files[] = {"config.json", "hf_quant_config.json", "generation_config.json",
                                    "tokenizer_config.json"};

/* Every field a refusal may name, and the phrases of whole-document refusals. */
static const char *const named[] = {
    "model_type", "text_config", "hidden_size", "num_hidden_layers", "num_attention_heads", "q_lora_rank",
    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
    "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size", "intermediate_size",
    "first_k_dense_replace", "moe_layer_freq", "n_group", "topk_group", "norm_topk_prob",
    "max_position_embeddings", "vocab_size", "routed_scaling_factor", "rms_norm_eps", "rope_theta",
    "topk_method", "scoring_func", "hidden_act", "rope_scaling", "factor", "original_max_position_embeddings",
    "beta_fast", "beta_slow", "mscale", "tie_word_embeddings", "bos_token_id", "eos_token_id", "quantization",
    "group_size", "max_length", "added_tokens_decoder", "special token", "not valid JSON", "not a JSON object",
};

static void check_refusal(const kimi_err *err)
{
    REQUIRE(err->code != 0 && err->msg[0]);
    int starts_with_file = 0;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        size_t n = strlen(files[f]);
        starts_with_file |= !strncmp(err->msg, files[f], n) && !strncmp(err->msg + n, ": ", 2);
    }
    REQUIRE(starts_with_file);
    int names_field = 0;
    for (size_t k = 0; k < sizeof named / sizeof named[0]; k++)
        names_field |= strstr(err->msg, named[k]) != NULL;
    REQUIRE(names_field);
}

static int positive_float(float x) { return isfinite(x) && x > 0; }

/* What the engine relies on once config_parse_text and config_validate accepted the file. */
static void check_loaded(const model_config *c, int file)
{
    REQUIRE(c->bos_id >= -1 && c->eos_id >= -1);
    REQUIRE(c->bos_id < c->vocab && c->eos_id < c->vocab);
    for (int i = 0; i < c->n_specials; i++) {
        REQUIRE(c->specials[i].id >= 0 && c->specials[i].id < c->vocab && c->specials[i].content);
        REQUIRE(i == 0 || c->specials[i - 1].id < c->specials[i].id);
        REQUIRE(config_special_id(c, c->specials[i].content) >= 0);
    }
    REQUIRE(c->n_gen_eos_ids >= 0 && c->n_gen_eos_ids <= 8 && c->max_length >= 0);
    for (int i = 0; i < c->n_gen_eos_ids; i++)
        REQUIRE(c->gen_eos_ids[i] >= 0);
    if (!strcmp(c->quant_algo, "NVFP4"))
        REQUIRE(c->quant_group_size == 16);
    if (file != 0)
        return;
    REQUIRE(!strcmp(c->model_type, "deepseek_v3") || !strcmp(c->model_type, "kimi_k2"));
    REQUIRE(c->hidden >= 1 && c->layers >= 1 && c->heads >= 1 && c->q_lora_rank >= 1 && c->kv_lora_rank >= 1);
    REQUIRE(c->qk_nope_dim >= 1 && c->v_head_dim >= 1 && c->qk_rope_dim >= 2 && c->qk_rope_dim % 2 == 0);
    REQUIRE(c->max_position >= 1 && c->vocab >= 1 && c->intermediate >= 1 && c->moe_intermediate >= 1);
    REQUIRE(c->experts >= 1 && c->experts_per_token >= 1 && c->experts_per_token <= c->experts);
    REQUIRE(c->n_group >= 1 && c->experts % c->n_group == 0 && c->topk_group >= 1 && c->topk_group <= c->n_group);
    REQUIRE(c->n_group == 1 || c->experts / c->n_group >= 2);
    REQUIRE((long)c->experts_per_token <= (long)c->topk_group * (c->experts / c->n_group));
    REQUIRE(c->shared_experts >= 0 && (long)c->shared_experts * c->moe_intermediate <= INT32_MAX / 2);
    REQUIRE(c->first_dense >= 0 && c->first_dense <= c->layers);
    REQUIRE(c->moe_layer_freq >= 1 && c->moe_layer_freq <= c->layers);
    REQUIRE(positive_float(c->routed_scaling_factor) && positive_float(c->rms_norm_eps));
    REQUIRE(isfinite(c->rope_theta) && c->rope_theta > 0);
    REQUIRE(isfinite(c->rope_factor) && c->rope_factor >= 1);
    if (c->rope_yarn)
        REQUIRE(c->rope_original_max >= 1 && isfinite(c->rope_mscale) && isfinite(c->rope_mscale_all_dim));
    if (!strcmp(c->quant_algo, "NVFP4"))
        REQUIRE(c->hidden % 16 == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int file = data[0] % 4;
    model_config cfg;
    kimi_err err = {0};
    config_init(&cfg);
    int rc = config_parse_text(&cfg, files[file], (const char *)data + 1, size - 1, &err);
    if (rc == 0)
        rc = config_validate(&cfg, &err);
    if (rc)
        check_refusal(&err);
    else
        check_loaded(&cfg, file);
    config_free(&cfg);
    return 0;
}
