/* config: the model's settings, read from config.json (kimi_k25 with text_config, or a plain
 * deepseek_v3 / kimi_k2 config), hf_quant_config.json, generation_config.json and the special
 * tokens of tokenizer_config.json, validated against what the math needs. */
#ifndef KIMI_CONFIG_H
#define KIMI_CONFIG_H

#include <stddef.h>

#include "engine/base/error.h"

typedef struct {
    int id;
    char *content;          /* e.g. "<|im_end|>"; owned */
} special_token;

typedef struct {
    /* text_config: the language model */
    char model_type[32];        /* "deepseek_v3" or "kimi_k2" */
    int hidden;                 /* hidden_size */
    int layers;                 /* num_hidden_layers */
    int heads;                  /* num_attention_heads */
    int q_lora_rank;            /* rank of q_a_proj */
    int kv_lora_rank;           /* latent width of the MLA cache (512 in Kimi) */
    int qk_nope_dim;            /* qk_nope_head_dim */
    int qk_rope_dim;            /* qk_rope_head_dim */
    int v_head_dim;
    int experts;                /* n_routed_experts */
    int experts_per_token;      /* num_experts_per_tok */
    int shared_experts;         /* n_shared_experts (one MLP of shared_experts x moe_intermediate) */
    int moe_intermediate;       /* moe_intermediate_size */
    int intermediate;           /* intermediate_size (dense layers) */
    int first_dense;            /* first_k_dense_replace */
    int moe_layer_freq;
    int n_group, topk_group;
    int norm_topk_prob;         /* bool */
    float routed_scaling_factor;
    float rms_norm_eps;
    double rope_theta;
    int rope_yarn;              /* rope_scaling.type == "yarn" */
    double rope_factor;         /* rope_scaling.factor (1 when no scaling) */
    int rope_original_max;      /* rope_scaling.original_max_position_embeddings */
    double rope_beta_fast, rope_beta_slow, rope_mscale, rope_mscale_all_dim;
    int max_position;           /* max_position_embeddings */
    int vocab;                  /* vocab_size */
    int tie_word_embeddings;
    int bos_id, eos_id;         /* -1 when absent */

    /* hf_quant_config.json (absent file: quant_algo "") */
    char quant_algo[32];        /* "NVFP4" */
    char kv_cache_quant_algo[32];  /* "FP8": ignored, the engine keeps an fp16 latent cache */
    int quant_group_size;       /* 16 */

    /* generation_config.json */
    int max_length;             /* 0 when absent */
    int gen_eos_ids[8];         /* eos_token_id (int or list) */
    int n_gen_eos_ids;

    /* tokenizer_config.json added_tokens_decoder, sorted by id */
    special_token *specials;
    int n_specials;
} model_config;

/* Read and validate everything in model_dir. On error nothing needs freeing. Absent optional
 * settings mean "off": n_shared_experts 0, first_k_dense_replace 0, moe_layer_freq 1,
 * n_group = topk_group = 1, routed_scaling_factor 1, norm_topk_prob false, no rope_scaling;
 * absent hf_quant_config / generation_config / tokenizer_config files leave their parts empty. */
int config_load(model_config *cfg, const char *model_dir, kimi_err *err);

/* Empty config: every id -1, no specials, nothing parsed yet. */
void config_init(model_config *cfg);
/* Parse one file of the model directory from memory into cfg (after config_init), with the
 * checks config_load makes on that file alone. file_name: "config.json", "hf_quant_config.json",
 * "generation_config.json" or "tokenizer_config.json". For tests and fuzzing; config_free after. */
int config_parse_text(model_config *cfg, const char *file_name, const char *text, size_t len, kimi_err *err);
/* Checks across files (NVFP4 K multiples of 16, special-token ids inside the vocabulary). */
int config_validate(const model_config *cfg, kimi_err *err);

/* Checks that depend on the tensor-parallel degree (heads, intermediate sizes divisible). */
int config_check_tp(const model_config *cfg, int tp, kimi_err *err);

/* Whether layer i is a MoE layer. */
int config_layer_is_moe(const model_config *cfg, int layer);

/* Id of a special token by name, or -1. */
int config_special_id(const model_config *cfg, const char *content);

void config_free(model_config *cfg);

#endif
