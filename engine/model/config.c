/* config: parse the model directory's JSON files into model_config and check every value the
 * math depends on, naming the file and field in each message. */
#include "engine/model/config.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/file_io.h"

/* Where a field is read from, for messages: "config.json: text_config.hidden_size ...". */
typedef struct {
    const char *file;
    const char *scope;      /* "text_config." or "" */
    json_t *obj;
    kimi_err *err;
} field_reader;

static int get_int(const field_reader *r, const char *key, int required, long def, long lo, long hi, int *out)
{
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %s%s is missing", r->file, r->scope, key);
        *out = (int)def;
        return 0;
    }
    if (!json_is_integer(v))
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %s%s must be an integer", r->file, r->scope, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %s%s = %lld is outside [%ld, %ld]", r->file, r->scope, key,
                         (long long)x, lo, hi);
    *out = (int)x;
    return 0;
}

/* A number (integer or real) that must be finite and > 0 unless allow_zero. */
static int get_number(const field_reader *r, const char *key, int required, double def, int allow_zero, double *out)
{
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %s%s is missing", r->file, r->scope, key);
        *out = def;
        return 0;
    }
    if (!json_is_number(v))
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %s%s must be a number", r->file, r->scope, key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < 0 || (x == 0 && !allow_zero))
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %s%s = %g must be %s", r->file, r->scope, key, x,
                         allow_zero ? "finite and >= 0" : "finite and > 0");
    *out = x;
    return 0;
}

static int get_bool(const field_reader *r, const char *key, int def, int *out)
{
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %s%s must be true or false", r->file, r->scope, key);
    *out = json_is_true(v);
    return 0;
}

/* An optional string that, when present, must be one of the comma-separated accepted values. */
static int check_choice(const field_reader *r, const char *key, const char *accepted)
{
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %s%s must be a string", r->file, r->scope, key);
    const char *s = json_string_value(v);
    size_t len = strlen(s);
    for (const char *p = accepted; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == len && !strncmp(p, s, n))
            return 0;
        if (!comma)
            break;
        p = comma + 1;
    }
    return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %s%s '%s' is not supported (expected %s)", r->file, r->scope, key,
                     s, accepted);
}

/* A token id: an integer, the first integer of a list, or null/absent (-1). */
static int get_token_id(const field_reader *r, const char *key, int *out)
{
    json_t *v = json_object_get(r->obj, key);
    if (json_is_array(v))
        v = json_array_get(v, 0);
    if (!v || json_is_null(v)) {
        *out = -1;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT_MAX)
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %s%s must be a non-negative integer token id", r->file,
                         r->scope, key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int parse_rope_scaling(const field_reader *text, model_config *cfg)
{
    json_t *rs = json_object_get(text->obj, "rope_scaling");
    cfg->rope_yarn = 0;
    cfg->rope_factor = 1;
    cfg->rope_original_max = 0;
    cfg->rope_beta_fast = cfg->rope_beta_slow = 0;
    cfg->rope_mscale = 1;
    cfg->rope_mscale_all_dim = 0;
    if (!rs || json_is_null(rs))
        return 0;
    char scope[64];
    snprintf(scope, sizeof scope, "%srope_scaling.", text->scope);
    field_reader r = {text->file, scope, rs, text->err};
    if (!json_is_object(rs))
        return kimi_fail(text->err, KIMI_ERR_MODEL, "%s: %srope_scaling must be an object or null", text->file,
                         text->scope);
    json_t *type = json_object_get(rs, "type");
    if (!type)
        type = json_object_get(rs, "rope_type");
    if (!json_is_string(type))
        return kimi_fail(text->err, KIMI_ERR_MODEL, "%s: %stype is missing or not a string", text->file, scope);
    if (strcmp(json_string_value(type), "yarn"))
        return kimi_fail(text->err, KIMI_ERR_MODEL, "%s: %stype '%s' is not supported (yarn or no rope_scaling)",
                         text->file, scope, json_string_value(type));
    cfg->rope_yarn = 1;
    /* Defaults are those of DeepSeek-V3's reference YaRN code. */
    if (get_number(&r, "factor", 1, 1, 0, &cfg->rope_factor) ||
        get_int(&r, "original_max_position_embeddings", 1, 0, 1, INT_MAX, &cfg->rope_original_max) ||
        get_number(&r, "beta_fast", 0, 32, 0, &cfg->rope_beta_fast) ||
        get_number(&r, "beta_slow", 0, 1, 0, &cfg->rope_beta_slow) ||
        get_number(&r, "mscale", 0, 1, 1, &cfg->rope_mscale) ||
        get_number(&r, "mscale_all_dim", 0, 0, 1, &cfg->rope_mscale_all_dim))
        return text->err->code;
    if (cfg->rope_factor < 1)
        return kimi_fail(text->err, KIMI_ERR_MODEL, "%s: %sfactor = %g must be >= 1", text->file, scope,
                         cfg->rope_factor);
    return 0;
}

/* The MoE routing and shapes must be computable: every check names its field. */
static int check_text_config(const field_reader *r, const model_config *c)
{
    const char *f = r->file, *s = r->scope;
    if (c->qk_rope_dim % 2)
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %sqk_rope_head_dim = %d must be even (RoPE rotates pairs)", f, s,
                         c->qk_rope_dim);
    if (c->experts_per_token > c->experts)
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %snum_experts_per_tok = %d exceeds n_routed_experts = %d", f, s,
                         c->experts_per_token, c->experts);
    if (c->experts % c->n_group)
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %sn_routed_experts = %d is not divisible by n_group = %d", f, s,
                         c->experts, c->n_group);
    if (c->topk_group > c->n_group)
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %stopk_group = %d exceeds n_group = %d", f, s, c->topk_group,
                         c->n_group);
    if (c->n_group > 1 && c->experts / c->n_group < 2)
        return kimi_fail(r->err, KIMI_ERR_MODEL,
                         "%s: %sn_group = %d leaves fewer than 2 experts per group (groups are scored by their top 2)",
                         f, s, c->n_group);
    if ((long)c->experts_per_token > (long)c->topk_group * (c->experts / c->n_group))
        return kimi_fail(r->err, KIMI_ERR_MODEL,
                         "%s: %snum_experts_per_tok = %d exceeds the %d experts in the topk_group = %d kept groups", f,
                         s, c->experts_per_token, c->topk_group * (c->experts / c->n_group), c->topk_group);
    if ((long)c->shared_experts * c->moe_intermediate > INT_MAX / 2)
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %sn_shared_experts x moe_intermediate_size is too large", f, s);
    return 0;
}

static int parse_text_config(model_config *cfg, const field_reader *r, json_t *top)
{
    json_t *type = json_object_get(r->obj, "model_type");
    if (!json_is_string(type))
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %smodel_type is missing or not a string", r->file, r->scope);
    const char *t = json_string_value(type);
    if (strcmp(t, "deepseek_v3") && strcmp(t, "kimi_k2"))
        return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %smodel_type '%s' is not deepseek_v3 or kimi_k2", r->file,
                         r->scope, t);
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", t);
    const long DIM = 1 << 20, HEAD_DIM = 1 << 16;
    if (get_int(r, "hidden_size", 1, 0, 1, DIM, &cfg->hidden) ||
        get_int(r, "num_hidden_layers", 1, 0, 1, 4096, &cfg->layers) ||
        get_int(r, "num_attention_heads", 1, 0, 1, 4096, &cfg->heads) ||
        get_int(r, "q_lora_rank", 1, 0, 1, DIM, &cfg->q_lora_rank) ||
        get_int(r, "kv_lora_rank", 1, 0, 1, DIM, &cfg->kv_lora_rank) ||
        get_int(r, "qk_nope_head_dim", 1, 0, 1, HEAD_DIM, &cfg->qk_nope_dim) ||
        get_int(r, "qk_rope_head_dim", 1, 0, 2, HEAD_DIM, &cfg->qk_rope_dim) ||
        get_int(r, "v_head_dim", 1, 0, 1, HEAD_DIM, &cfg->v_head_dim) ||
        get_int(r, "n_routed_experts", 1, 0, 1, 1 << 16, &cfg->experts) ||
        get_int(r, "num_experts_per_tok", 1, 0, 1, 1 << 16, &cfg->experts_per_token) ||
        get_int(r, "n_shared_experts", 0, 0, 0, 64, &cfg->shared_experts) ||
        get_int(r, "moe_intermediate_size", 1, 0, 1, 1 << 24, &cfg->moe_intermediate) ||
        get_int(r, "intermediate_size", 1, 0, 1, 1 << 24, &cfg->intermediate) ||
        get_int(r, "first_k_dense_replace", 0, 0, 0, cfg->layers, &cfg->first_dense) ||
        get_int(r, "moe_layer_freq", 0, 1, 1, cfg->layers, &cfg->moe_layer_freq) ||
        get_int(r, "n_group", 0, 1, 1, cfg->experts, &cfg->n_group) ||
        get_int(r, "topk_group", 0, 1, 1, 1 << 16, &cfg->topk_group) ||
        get_bool(r, "norm_topk_prob", 0, &cfg->norm_topk_prob) ||
        get_int(r, "max_position_embeddings", 1, 0, 1, INT_MAX, &cfg->max_position) ||
        get_int(r, "vocab_size", 1, 0, 1, 1 << 28, &cfg->vocab))
        return r->err->code;
    double scaling, eps;
    if (get_number(r, "routed_scaling_factor", 0, 1, 0, &scaling) || get_number(r, "rms_norm_eps", 1, 0, 0, &eps) ||
        get_number(r, "rope_theta", 1, 0, 0, &cfg->rope_theta))
        return r->err->code;
    cfg->routed_scaling_factor = (float)scaling;
    cfg->rms_norm_eps = (float)eps;
    /* both are used as floats: a double that rounds to 0 or infinity there is refused */
    const struct { const char *key; double value; float as_float; } floats[] = {
        {"routed_scaling_factor", scaling, cfg->routed_scaling_factor},
        {"rms_norm_eps", eps, cfg->rms_norm_eps},
    };
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (!isfinite(floats[i].as_float) || floats[i].as_float <= 0)
            return kimi_fail(r->err, KIMI_ERR_MODEL, "%s: %s%s = %g is outside the range of a float", r->file,
                             r->scope, floats[i].key, floats[i].value);
    if (check_choice(r, "topk_method", "noaux_tc") || check_choice(r, "scoring_func", "sigmoid") ||
        check_choice(r, "hidden_act", "silu") || parse_rope_scaling(r, cfg))
        return r->err->code;

    /* The wrapper's settings apply where text_config leaves them out. */
    field_reader outer = {r->file, "", top, r->err};
    int tie = 0;
    if (get_bool(&outer, "tie_word_embeddings", 0, &tie) || get_bool(r, "tie_word_embeddings", tie, &cfg->tie_word_embeddings))
        return r->err->code;
    if (get_token_id(r, "bos_token_id", &cfg->bos_id) || get_token_id(r, "eos_token_id", &cfg->eos_id))
        return r->err->code;
    if ((cfg->bos_id < 0 && get_token_id(&outer, "bos_token_id", &cfg->bos_id)) ||
        (cfg->eos_id < 0 && get_token_id(&outer, "eos_token_id", &cfg->eos_id)))
        return r->err->code;
    return check_text_config(r, cfg);
}

/* config.json also carries ModelOpt's quantization_config; hf_quant_config.json overrides it. */
static void read_quantization_config(model_config *cfg, json_t *top)
{
    json_t *algo = json_object_get(json_object_get(top, "quantization_config"), "quant_algo");
    if (json_is_string(algo) && !cfg->quant_algo[0]) {
        snprintf(cfg->quant_algo, sizeof cfg->quant_algo, "%s", json_string_value(algo));
        cfg->quant_group_size = 16;
    }
}

static int parse_config_json(model_config *cfg, json_t *root, const char *file, kimi_err *err)
{
    if (!json_is_object(root))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: not a JSON object", file);
    json_t *type = json_object_get(root, "model_type");
    json_t *text = json_object_get(root, "text_config");
    if (type && !json_is_string(type))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: model_type must be a string", file);
    int wrapped = text != NULL || (type && !strcmp(json_string_value(type), "kimi_k25"));
    if (wrapped && !json_is_object(text))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: text_config is missing or not an object", file);
    field_reader r = {file, wrapped ? "text_config." : "", wrapped ? text : root, err};
    if (parse_text_config(cfg, &r, root))
        return err->code;
    read_quantization_config(cfg, root);
    return 0;
}

static int parse_hf_quant_config(model_config *cfg, json_t *root, const char *file, kimi_err *err)
{
    json_t *q = json_object_get(root, "quantization");
    if (!json_is_object(q))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: quantization is missing or not an object", file);
    field_reader r = {file, "quantization.", q, err};
    json_t *algo = json_object_get(q, "quant_algo");
    json_t *kv = json_object_get(q, "kv_cache_quant_algo");
    if (!json_is_string(algo))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: quantization.quant_algo is missing or not a string", file);
    if (kv && !json_is_null(kv) && !json_is_string(kv))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: quantization.kv_cache_quant_algo must be a string or null", file);
    if (get_int(&r, "group_size", 0, 16, 1, 1 << 16, &cfg->quant_group_size))
        return err->code;
    snprintf(cfg->quant_algo, sizeof cfg->quant_algo, "%s", json_string_value(algo));
    snprintf(cfg->kv_cache_quant_algo, sizeof cfg->kv_cache_quant_algo, "%s", json_is_string(kv) ? json_string_value(kv) : "");
    if (!strcmp(cfg->quant_algo, "NVFP4") && cfg->quant_group_size != 16)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: quantization.group_size = %d, NVFP4 uses blocks of 16", file,
                         cfg->quant_group_size);
    return 0;
}

static int parse_generation_config(model_config *cfg, json_t *root, const char *file, kimi_err *err)
{
    if (!json_is_object(root))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: not a JSON object", file);
    field_reader r = {file, "", root, err};
    if (get_int(&r, "max_length", 0, 0, 0, INT_MAX, &cfg->max_length))
        return err->code;
    json_t *eos = json_object_get(root, "eos_token_id");
    cfg->n_gen_eos_ids = 0;
    if (!eos || json_is_null(eos))
        return 0;
    size_t n = json_is_array(eos) ? json_array_size(eos) : 1;
    if (n > sizeof cfg->gen_eos_ids / sizeof cfg->gen_eos_ids[0])
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: eos_token_id lists %zu ids (at most 8 supported)", file, n);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_array(eos) ? json_array_get(eos, i) : eos;
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT_MAX)
            return kimi_fail(err, KIMI_ERR_MODEL, "%s: eos_token_id must be a token id or a list of them", file);
        cfg->gen_eos_ids[cfg->n_gen_eos_ids++] = (int)json_integer_value(v);
    }
    return 0;
}

static int compare_specials(const void *a, const void *b)
{
    const special_token *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* bos_token / eos_token: a string or an AddedToken object {"content": ...}. */
static const char *token_content(json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int parse_tokenizer_config(model_config *cfg, json_t *root, const char *file, kimi_err *err)
{
    if (!json_is_object(root))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: not a JSON object", file);
    json_t *added = json_object_get(root, "added_tokens_decoder");
    if (added && !json_is_object(added))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: added_tokens_decoder must be an object", file);
    size_t n = json_object_size(added);
    special_token *specials = calloc(n ? n : 1, sizeof *specials);
    if (!specials)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", file);
    int count = 0, rc = 0;
    const char *key;
    json_t *entry;
    json_object_foreach(added, key, entry) {
        char *end;
        errno = 0;
        long id = strtol(key, &end, 10);
        json_t *content = json_object_get(entry, "content");
        if (key[0] < '0' || key[0] > '9' || *end || errno || id > INT_MAX) {
            rc = kimi_fail(err, KIMI_ERR_MODEL, "%s: added_tokens_decoder key '%s' is not a token id", file, key);
            break;
        }
        if (!json_is_string(content)) {
            rc = kimi_fail(err, KIMI_ERR_MODEL, "%s: added_tokens_decoder[\"%s\"].content is missing or not a string",
                           file, key);
            break;
        }
        specials[count].id = (int)id;
        specials[count].content = strdup(json_string_value(content));
        if (!specials[count++].content) {
            rc = kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", file);
            break;
        }
    }
    qsort(specials, (size_t)count, sizeof *specials, compare_specials);
    for (int i = 1; !rc && i < count; i++)
        if (specials[i].id == specials[i - 1].id)
            rc = kimi_fail(err, KIMI_ERR_MODEL, "%s: added_tokens_decoder names token id %d twice", file, specials[i].id);
    for (int i = 0; i < cfg->n_specials; i++)
        free(cfg->specials[i].content);
    free(cfg->specials);
    cfg->specials = specials;
    cfg->n_specials = count;
    if (rc)
        return rc;
    /* config.json's ids win; the tokenizer's named bos/eos fill in what it leaves out. */
    const char *bos = token_content(json_object_get(root, "bos_token"));
    const char *eos = token_content(json_object_get(root, "eos_token"));
    if (cfg->bos_id < 0 && bos)
        cfg->bos_id = config_special_id(cfg, bos);
    if (cfg->eos_id < 0 && eos)
        cfg->eos_id = config_special_id(cfg, eos);
    return 0;
}

void config_init(model_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->bos_id = cfg->eos_id = -1;
    cfg->moe_layer_freq = 1;
    cfg->n_group = cfg->topk_group = 1;
    cfg->rope_factor = 1;
}

int config_parse_text(model_config *cfg, const char *file_name, const char *text, size_t len, kimi_err *err)
{
    /* The field parsers below read their status back from the error they filled. */
    kimi_err unused;
    err = err ? err : &unused;
    const char *base = strrchr(file_name, '/');
    base = base ? base + 1 : file_name;
    /* tokenizer_config.json holds integers past 64 bits (model_max_length 1e30) and no integer
     * this parser reads, so its numbers are decoded as doubles. */
    size_t flags = JSON_REJECT_DUPLICATES | (!strcmp(base, "tokenizer_config.json") ? JSON_DECODE_INT_AS_REAL : 0);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, flags, &jerr);
    if (!root)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: not valid JSON: %s (line %d, column %d)", file_name, jerr.text,
                         jerr.line, jerr.column);
    int rc;
    if (!strcmp(base, "config.json"))
        rc = parse_config_json(cfg, root, file_name, err);
    else if (!strcmp(base, "hf_quant_config.json"))
        rc = parse_hf_quant_config(cfg, root, file_name, err);
    else if (!strcmp(base, "generation_config.json"))
        rc = parse_generation_config(cfg, root, file_name, err);
    else if (!strcmp(base, "tokenizer_config.json"))
        rc = parse_tokenizer_config(cfg, root, file_name, err);
    else
        rc = kimi_fail(err, KIMI_ERR_USAGE, "%s: not one of the model directory's JSON files", file_name);
    json_decref(root);
    return rc;
}

int config_validate(const model_config *cfg, kimi_err *err)
{
    if (!strcmp(cfg->quant_algo, "NVFP4")) {
        int has_dense = 0, has_moe = 0;
        for (int l = 0; l < cfg->layers; l++) {
            has_dense |= !config_layer_is_moe(cfg, l);
            has_moe |= config_layer_is_moe(cfg, l);
        }
        const struct { const char *field; int k, used; } ks[] = {
            {"hidden_size", cfg->hidden, 1},
            {"intermediate_size", cfg->intermediate, has_dense},
            {"moe_intermediate_size", cfg->moe_intermediate, has_moe},
        };
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
            if (ks[i].used && ks[i].k % 16)
                return kimi_fail(err, KIMI_ERR_MODEL, "config.json: %s = %d is not a multiple of 16 (an NVFP4 K)",
                                 ks[i].field, ks[i].k);
    }
    for (int i = 0; i < cfg->n_specials; i++)
        if (cfg->specials[i].id >= cfg->vocab)
            return kimi_fail(err, KIMI_ERR_MODEL, "tokenizer_config.json: special token %d (%s) is outside vocab_size %d",
                             cfg->specials[i].id, cfg->specials[i].content, cfg->vocab);
    if (cfg->bos_id >= cfg->vocab || cfg->eos_id >= cfg->vocab)
        return kimi_fail(err, KIMI_ERR_MODEL, "config.json: bos_token_id %d / eos_token_id %d outside vocab_size %d",
                         cfg->bos_id, cfg->eos_id, cfg->vocab);
    return 0;
}

int config_load(model_config *cfg, const char *model_dir, kimi_err *err)
{
    static const struct { const char *name; int required; } files[] = {
        {"config.json", 1},
        {"hf_quant_config.json", 0},
        {"generation_config.json", 0},
        {"tokenizer_config.json", 0},
    };
    config_init(cfg);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        char *text;
        size_t len = 0;
        snprintf(path, sizeof path, "%s/%s", model_dir, files[i].name);
        if (!files[i].required && access(path, F_OK) != 0 && errno == ENOENT)
            continue;
        int rc = file_read_all(path, &text, &len, err);
        if (rc) {
            config_free(cfg);
            return rc;
        }
        rc = config_parse_text(cfg, path, text, len, err);
        free(text);
        if (rc) {
            config_free(cfg);
            return rc;
        }
    }
    int rc = config_validate(cfg, err);
    if (rc)
        config_free(cfg);
    return rc;
}

int config_check_tp(const model_config *cfg, int tp, kimi_err *err)
{
    if (tp < 1)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d: the tensor-parallel degree must be >= 1", tp);
    int has_dense = 0, has_moe = 0;
    for (int l = 0; l < cfg->layers; l++) {
        has_dense |= !config_layer_is_moe(cfg, l);
        has_moe |= config_layer_is_moe(cfg, l);
    }
    if (cfg->heads % tp)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d does not divide num_attention_heads = %d", tp, cfg->heads);
    if (has_dense && cfg->intermediate % tp)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d does not divide intermediate_size = %d", tp, cfg->intermediate);
    if (has_moe && cfg->moe_intermediate % tp)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d does not divide moe_intermediate_size = %d", tp,
                         cfg->moe_intermediate);
    if (has_moe && cfg->shared_experts > 0 && (cfg->shared_experts * cfg->moe_intermediate) % tp)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d does not divide the shared experts' width n_shared_experts x moe_intermediate_size = %d",
                         tp, cfg->shared_experts * cfg->moe_intermediate);
    return 0;
}

int config_layer_is_moe(const model_config *cfg, int layer)
{
    return layer >= cfg->first_dense && layer % cfg->moe_layer_freq == 0;
}

int config_special_id(const model_config *cfg, const char *content)
{
    for (int i = 0; i < cfg->n_specials; i++)
        if (!strcmp(cfg->specials[i].content, content))
            return cfg->specials[i].id;
    return -1;
}

void config_free(model_config *cfg)
{
    for (int i = 0; i < cfg->n_specials; i++)
        free(cfg->specials[i].content);
    free(cfg->specials);
    cfg->specials = NULL;
    cfg->n_specials = 0;
}
