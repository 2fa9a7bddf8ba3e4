/* kimi-mkmodel: writes a complete checkpoint directory in the nvidia/Kimi-K2.5-NVFP4 layout
 * (configs, tokenizer files, sharded safetensors + index) with deterministic random weights
 * scaled like an initialised network, for tests and benchmarks. Its safetensors writer is
 * independent of the engine's loader, so each checks the other. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app/probe/probe_args.h"
#include "engine/base/error.h"
#include "kernels/cpu/numeric.h"
#include "kernels/tensor.h"
#include "tests/bench/nvfp4_encode.h"

/* ---- the architecture and the output ---------------------------------------------------- */

typedef struct {
    int hidden, layers, dense_layers, heads, q_lora, kv_lora, nope, rope, v_head;
    int experts, top_k, n_group, topk_group, moe_inter, inter, shared;
    int vocab;                  /* base vocabulary (specials follow); 0 = the tokenizer's own */
    int shards;
    int recipe_k26;             /* layer-0 dense MLP and shared experts in BF16 */
    int router_bias_f32;
    int single_file;
    int holes;                  /* every tensor zero, left as a hole (but 4-byte scalars) */
    double mscale, mscale_all_dim, rope_factor;
    unsigned long seed;
    const char *out_dir, *tokenizer_dir;
    const char *poison_name;    /* --poison NAME=VALUE: element 0 of this tensor is poison_value */
    float poison_value;
    int poisoned;               /* the tensor was found and written */
} model_spec;

/* The tiny-k25 fixture's architecture. */
static const model_spec tiny_spec = {
    .hidden = 256, .layers = 4, .dense_layers = 1, .heads = 8, .q_lora = 128, .kv_lora = 64,
    .nope = 32, .rope = 16, .v_head = 32, .experts = 16, .top_k = 4, .n_group = 1, .topk_group = 1,
    .moe_inter = 128, .inter = 512, .shared = 1, .shards = 3,
    .mscale = 1, .mscale_all_dim = 1, .rope_factor = 64,
};

/* Kimi-K2.5 with the real head, latent and rope dims and routing, at a quarter of the width
 * and 12 of 61 layers: about 1.58 GB (11 MoE layers of 138 MB, a 42 MB dense layer, 19 MB of
 * embeddings with the fixture's 2304-token vocabulary). */
static const model_spec bench_spec = {
    .hidden = 2048, .layers = 12, .dense_layers = 1, .heads = 16, .q_lora = 768, .kv_lora = 512,
    .nope = 128, .rope = 64, .v_head = 128, .experts = 64, .top_k = 8, .n_group = 1, .topk_group = 1,
    .moe_inter = 512, .inter = 5632, .shared = 1, .shards = 4,
    .mscale = 1, .mscale_all_dim = 1, .rope_factor = 64,
};

/* One rank's slice of Kimi-K2.5 at TP 8 as a TP=1 checkpoint (docs/CUDA.md): hidden 7168, 8
 * heads with the real MLA dims, 384 experts top-8 of width 256 (2048 / 8), shared 256, dense
 * 2304 (18432 / 8), vocabulary 20480 (163840 / 8: 20224 base ids + the 256 specials), and 3
 * layers (1 dense + 2 MoE, about 2.9 GB), so a GPU benchmark reads exactly the bytes one rank
 * reads per layer. */
static const model_spec rank_spec = {
    .hidden = 7168, .layers = 3, .dense_layers = 1, .heads = 8, .q_lora = 1536, .kv_lora = 512,
    .nope = 128, .rope = 64, .v_head = 128, .experts = 384, .top_k = 8, .n_group = 1, .topk_group = 1,
    .moe_inter = 256, .inter = 2304, .shared = 1, .vocab = 20224, .shards = 8,
    .mscale = 1, .mscale_all_dim = 1, .rope_factor = 64,
};

static const struct {
    const char *flag;
    size_t offset;
    long low, high;
} int_flags[] = {
    {"hidden", offsetof(model_spec, hidden), 16, 1 << 16},
    {"layers", offsetof(model_spec, layers), 1, 1024},
    {"dense-layers", offsetof(model_spec, dense_layers), 0, 1024},
    {"heads", offsetof(model_spec, heads), 1, 1024},
    {"q-lora", offsetof(model_spec, q_lora), 1, 1 << 16},
    {"kv-lora", offsetof(model_spec, kv_lora), 1, 1 << 16},
    {"nope", offsetof(model_spec, nope), 1, 4096},
    {"rope", offsetof(model_spec, rope), 2, 4096},
    {"v-head", offsetof(model_spec, v_head), 1, 4096},
    {"experts", offsetof(model_spec, experts), 0, 4096},
    {"top-k", offsetof(model_spec, top_k), 1, 4096},
    {"n-group", offsetof(model_spec, n_group), 1, 4096},
    {"topk-group", offsetof(model_spec, topk_group), 1, 4096},
    {"moe-inter", offsetof(model_spec, moe_inter), 16, 1 << 18},
    {"inter", offsetof(model_spec, inter), 16, 1 << 18},
    {"shared", offsetof(model_spec, shared), 0, 64},
    {"vocab", offsetof(model_spec, vocab), 256, 1 << 22},
    {"shards", offsetof(model_spec, shards), 1, 99999},
};

static const char usage[] =
    "usage: kimi-mkmodel --out DIR [--preset tiny|bench|rank] [--seed N] [--tokenizer DIR]\n"
    "  [--hidden N] [--layers N] [--dense-layers N] [--heads N] [--q-lora N] [--kv-lora N]\n"
    "  [--nope N] [--rope N] [--v-head N] [--experts N] [--top-k N] [--n-group N]\n"
    "  [--topk-group N] [--moe-inter N] [--inter N] [--shared N] [--vocab N (base, specials follow)]\n"
    "  [--recipe k25|k26] [--router-bias-dtype bf16|f32] [--mscale X] [--mscale-all-dim X]\n"
    "  [--rope-factor X] [--single-file | --shards N] [--holes] [--poison TENSOR=VALUE]\n"
    "  --holes: every tensor is zero, left as a hole of a sparse file (but scalars; NVFP4 scale_2\n"
    "  = 1): a checkpoint of any size in a moment, for tests of loading (its answers mean nothing)\n"
    "  --poison: element 0 of the named BF16/F32 tensor (a norm, router, embedding or BF16 linear\n"
    "  weight, or an NVFP4 weight_scale_2 / input_scale) becomes VALUE: inf, -inf, nan or a number\n"
    "  (1e30: huge), for tests of what a broken weight does\n";

static int parse_spec(int argc, char **argv, model_spec *spec, kimi_err *err)
{
    probe_args args;
    if (probe_args_parse(&args, argc, argv,
                         "out,preset,seed,tokenizer,hidden,layers,dense-layers,heads,q-lora,kv-lora,nope,"
                         "rope,v-head,experts,top-k,n-group,topk-group,moe-inter,inter,shared,vocab,"
                         "recipe,router-bias-dtype,mscale,mscale-all-dim,rope-factor,single-file,shards,holes,poison,help",
                         err))
        return err->code;
    if (probe_arg(&args, "help"))
        return kimi_fail(err, KIMI_ERR_USAGE, "help requested");
    const char *preset = probe_arg(&args, "preset");
    if (!preset || !strcmp(preset, "tiny"))
        *spec = tiny_spec;
    else if (!strcmp(preset, "bench"))
        *spec = bench_spec;
    else if (!strcmp(preset, "rank"))
        *spec = rank_spec;
    else
        return kimi_fail(err, KIMI_ERR_USAGE, "--preset: '%s' is not tiny, bench or rank", preset);
    if (probe_arg_required(&args, "out", &spec->out_dir, err))
        return err->code;
    spec->tokenizer_dir = probe_arg(&args, "tokenizer") ? probe_arg(&args, "tokenizer") : KIMI_DEFAULT_TOKENIZER_DIR;
    long value;
    for (size_t i = 0; i < sizeof int_flags / sizeof int_flags[0]; i++) {
        int *field = (int *)((char *)spec + int_flags[i].offset);
        if (probe_arg_int(&args, int_flags[i].flag, int_flags[i].low, int_flags[i].high, *field, &value, err))
            return err->code;
        *field = (int)value;
    }
    if (probe_arg_int(&args, "seed", 0, LONG_MAX, 0, &value, err))
        return err->code;
    spec->seed = (unsigned long)value;
    if (probe_arg_double(&args, "mscale", spec->mscale, &spec->mscale, err) ||
        probe_arg_double(&args, "mscale-all-dim", spec->mscale_all_dim, &spec->mscale_all_dim, err) ||
        probe_arg_double(&args, "rope-factor", spec->rope_factor, &spec->rope_factor, err))
        return err->code;
    const char *recipe = probe_arg(&args, "recipe");
    if (recipe && strcmp(recipe, "k25") && strcmp(recipe, "k26"))
        return kimi_fail(err, KIMI_ERR_USAGE, "--recipe: '%s' is not k25 or k26", recipe);
    spec->recipe_k26 = recipe && !strcmp(recipe, "k26");
    const char *bias = probe_arg(&args, "router-bias-dtype");
    if (bias && strcmp(bias, "bf16") && strcmp(bias, "f32"))
        return kimi_fail(err, KIMI_ERR_USAGE, "--router-bias-dtype: '%s' is not bf16 or f32", bias);
    spec->router_bias_f32 = bias && !strcmp(bias, "f32");
    spec->single_file = probe_arg(&args, "single-file") != NULL;
    spec->holes = probe_arg(&args, "holes") != NULL;
    const char *poison = probe_arg(&args, "poison");
    if (poison) {
        const char *eq = strchr(poison, '=');
        char *end = NULL;
        if (eq)
            spec->poison_value = strtof(eq + 1, &end);
        if (!eq || eq == poison || end == eq + 1 || *end)
            return kimi_fail(err, KIMI_ERR_USAGE, "--poison: '%s' is not TENSOR=VALUE (VALUE: inf, -inf, nan or a "
                             "number)", poison);
        spec->poison_name = strndup(poison, (size_t)(eq - poison));
    }
    if (spec->single_file && probe_arg(&args, "shards"))
        return kimi_fail(err, KIMI_ERR_USAGE, "--single-file and --shards exclude each other");
    return 0;
}

static int check_spec(const model_spec *s, kimi_err *err)
{
    if (s->hidden % 16 || s->inter % 16 || s->moe_inter % 16)
        return kimi_fail(err, KIMI_ERR_USAGE, "--hidden, --inter and --moe-inter must be multiples of 16 (NVFP4 blocks)");
    if (s->rope % 2)
        return kimi_fail(err, KIMI_ERR_USAGE, "--rope: %d is odd (RoPE rotates pairs)", s->rope);
    if (s->dense_layers > s->layers)
        return kimi_fail(err, KIMI_ERR_USAGE, "--dense-layers %d exceeds --layers %d", s->dense_layers, s->layers);
    if (s->dense_layers < s->layers) {
        if (s->experts < 1 || s->top_k > s->experts)
            return kimi_fail(err, KIMI_ERR_USAGE, "--top-k %d needs at least that many --experts (%d)", s->top_k, s->experts);
        if (s->experts % s->n_group || s->topk_group > s->n_group)
            return kimi_fail(err, KIMI_ERR_USAGE, "--n-group %d must divide --experts %d and be >= --topk-group %d",
                             s->n_group, s->experts, s->topk_group);
        if (s->top_k > s->topk_group * (s->experts / s->n_group))
            return kimi_fail(err, KIMI_ERR_USAGE, "--top-k %d exceeds the experts in %d kept groups", s->top_k, s->topk_group);
    }
    if (!(s->rope_factor >= 1) || !(s->mscale >= 0) || !(s->mscale_all_dim >= 0))
        return kimi_fail(err, KIMI_ERR_USAGE, "--rope-factor must be >= 1 and --mscale/--mscale-all-dim >= 0");
    return 0;
}

/* ---- deterministic randomness: one stream per tensor, seeded by (seed, tensor name) -------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t stream_seed(uint64_t seed, const char *name)
{
    uint64_t hash = 0xCBF29CE484222325ull; /* FNV-1a */
    for (const char *p = name; *p; p++)
        hash = (hash ^ (uint8_t)*p) * 0x100000001B3ull;
    uint64_t state = seed ^ hash;
    return splitmix64(&state);
}

/* Approximately standard normal: the sum of four 16-bit uniforms (Irwin-Hall), one 64-bit draw
 * per value, which keeps a 1.5 GB model well under a minute. Bounded at about +-3.46. */
static float random_normal(uint64_t *state)
{
    uint64_t r = splitmix64(state);
    uint32_t sum = (uint32_t)(r & 0xFFFF) + (uint32_t)((r >> 16) & 0xFFFF) + (uint32_t)((r >> 32) & 0xFFFF) +
                   (uint32_t)(r >> 48);
    return ((float)sum - 131070.0f) * (1.0f / 37837.23f); /* mean 4 * 32767.5, std 65536 / sqrt(3) */
}

static float random_uniform(uint64_t *state)
{
    return (float)(splitmix64(state) >> 40) * 0x1p-24f;
}

/* ---- the tensor plan ---------------------------------------------------------------------- */

typedef enum {
    FILL_NORMAL,        /* param = std */
    FILL_NORM_WEIGHT,   /* 1 + param * normal */
    FILL_SCALAR,        /* one F32 = param */
    FILL_NVFP4_WEIGHT,  /* parts of NVFP4 linear `linear` */
    FILL_NVFP4_SCALE,
    FILL_NVFP4_SCALE_2,
} fill_kind;

typedef struct {
    char *name;
    dtype type;
    int ndim;
    int64_t shape[4];
    uint64_t bytes;
    fill_kind fill;
    float param;
    int linear;         /* index into plan.linears for NVFP4 parts */
    int shard;
} tensor_plan;

typedef struct {
    char *name;         /* "...gate_proj" */
    int rows, cols;
} nvfp4_linear;

typedef struct {
    tensor_plan *tensors;
    int n_tensors, cap_tensors;
    nvfp4_linear *linears;
    int n_linears, cap_linears;
    int n_shards;
    uint64_t total_bytes;
    uint64_t seed;
} model_plan;

static void *grow(void *array, int *cap, int need, size_t item)
{
    if (need <= *cap)
        return array;
    int new_cap = *cap ? *cap * 2 : 256;
    void *grown = realloc(array, (size_t)new_cap * item);
    if (!grown) {
        fprintf(stderr, "kimi-mkmodel: out of memory\n");
        exit(5);
    }
    *cap = new_cap;
    return grown;
}

static char *format_name(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format_name(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *name = NULL;
    if (vasprintf(&name, fmt, ap) < 0) {
        fprintf(stderr, "kimi-mkmodel: out of memory\n");
        exit(5);
    }
    va_end(ap);
    return name;
}

static tensor_plan *plan_add(model_plan *plan, char *name, dtype type, fill_kind fill, float param, int ndim, ...)
{
    plan->tensors = grow(plan->tensors, &plan->cap_tensors, plan->n_tensors + 1, sizeof *plan->tensors);
    tensor_plan *t = &plan->tensors[plan->n_tensors++];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->type = type;
    t->fill = fill;
    t->param = param;
    t->ndim = ndim;
    t->linear = -1;
    va_list ap;
    va_start(ap, ndim);
    uint64_t elements = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = va_arg(ap, int);
        elements *= (uint64_t)t->shape[i];
    }
    va_end(ap);
    t->bytes = elements * dtype_size(type);
    plan->total_bytes += t->bytes;
    return t;
}

static float scalar_from_name(const model_plan *plan, const char *name, float low, float high)
{
    uint64_t state = stream_seed(plan->seed, name);
    return low + (high - low) * random_uniform(&state);
}

/* A linear W[rows][cols]: NVFP4 (weight, weight_scale, weight_scale_2, input_scale) or BF16. */
static void plan_linear(model_plan *plan, const char *prefix, int rows, int cols, int nvfp4)
{
    float std = 1.0f / sqrtf((float)cols);
    if (!nvfp4) {
        plan_add(plan, format_name("%s.weight", prefix), DTYPE_BF16, FILL_NORMAL, std, 2, rows, cols);
        return;
    }
    plan->linears = grow(plan->linears, &plan->cap_linears, plan->n_linears + 1, sizeof *plan->linears);
    int index = plan->n_linears++;
    plan->linears[index] = (nvfp4_linear){format_name("%s", prefix), rows, cols};
    plan_add(plan, format_name("%s.weight", prefix), DTYPE_U8, FILL_NVFP4_WEIGHT, 0, 2, rows, cols / 2)->linear = index;
    plan_add(plan, format_name("%s.weight_scale", prefix), DTYPE_F8_E4M3, FILL_NVFP4_SCALE, 0, 2, rows, cols / 16)->linear = index;
    plan_add(plan, format_name("%s.weight_scale_2", prefix), DTYPE_F32, FILL_NVFP4_SCALE_2, 0, 0)->linear = index;
    char *input_scale = format_name("%s.input_scale", prefix);
    /* ModelOpt's activation scale: activation amax / (6 * 448), amax about 0.5..2. */
    plan_add(plan, input_scale, DTYPE_F32, FILL_SCALAR, scalar_from_name(plan, input_scale, 0.5f, 2.0f) / 2688.0f, 0);
}

static void plan_mlp(model_plan *plan, const char *prefix, int inter, int hidden, int nvfp4)
{
    char *name = format_name("%s.gate_proj", prefix);
    plan_linear(plan, name, inter, hidden, nvfp4);
    free(name);
    name = format_name("%s.up_proj", prefix);
    plan_linear(plan, name, inter, hidden, nvfp4);
    free(name);
    name = format_name("%s.down_proj", prefix);
    plan_linear(plan, name, hidden, inter, nvfp4);
    free(name);
}

static void build_plan(const model_spec *s, int vocab_total, model_plan *plan)
{
    const char *lm = "language_model.model";
    const int h = s->hidden;
    plan->seed = s->seed;
    plan_add(plan, format_name("%s.embed_tokens.weight", lm), DTYPE_BF16, FILL_NORMAL, 1.0f, 2, vocab_total, h);
    for (int i = 0; i < s->layers; i++) {
        char *layer = format_name("%s.layers.%d", lm, i);
        plan_add(plan, format_name("%s.input_layernorm.weight", layer), DTYPE_BF16, FILL_NORM_WEIGHT, 0.1f, 1, h);
        plan_add(plan, format_name("%s.post_attention_layernorm.weight", layer), DTYPE_BF16, FILL_NORM_WEIGHT, 0.1f, 1, h);
        char *attn = format_name("%s.self_attn", layer);
        char *name = format_name("%s.q_a_proj", attn);
        plan_linear(plan, name, s->q_lora, h, 0);
        free(name);
        plan_add(plan, format_name("%s.q_a_layernorm.weight", attn), DTYPE_BF16, FILL_NORM_WEIGHT, 0.1f, 1, s->q_lora);
        name = format_name("%s.q_b_proj", attn);
        plan_linear(plan, name, s->heads * (s->nope + s->rope), s->q_lora, 0);
        free(name);
        name = format_name("%s.kv_a_proj_with_mqa", attn);
        plan_linear(plan, name, s->kv_lora + s->rope, h, 0);
        free(name);
        plan_add(plan, format_name("%s.kv_a_layernorm.weight", attn), DTYPE_BF16, FILL_NORM_WEIGHT, 0.1f, 1, s->kv_lora);
        name = format_name("%s.kv_b_proj", attn);
        plan_linear(plan, name, s->heads * (s->nope + s->v_head), s->kv_lora, 0);
        free(name);
        name = format_name("%s.o_proj", attn);
        plan_linear(plan, name, h, s->heads * s->v_head, 0);
        free(name);
        name = format_name("%s.k_proj.k_scale", attn);
        plan_add(plan, name, DTYPE_F32, FILL_SCALAR, scalar_from_name(plan, name, 0.02f, 0.06f), 0);
        name = format_name("%s.v_proj.v_scale", attn);
        plan_add(plan, name, DTYPE_F32, FILL_SCALAR, scalar_from_name(plan, name, 0.02f, 0.06f), 0);
        free(attn);

        char *mlp = format_name("%s.mlp", layer);
        if (i < s->dense_layers) {
            plan_mlp(plan, mlp, s->inter, h, !s->recipe_k26);
        } else {
            plan_add(plan, format_name("%s.gate.weight", mlp), DTYPE_BF16, FILL_NORMAL, 1.0f / sqrtf((float)h), 2,
                     s->experts, h);
            plan_add(plan, format_name("%s.gate.e_score_correction_bias", mlp), s->router_bias_f32 ? DTYPE_F32 : DTYPE_BF16,
                     FILL_NORMAL, 0.1f, 1, s->experts);
            for (int e = 0; e < s->experts; e++) {
                name = format_name("%s.experts.%d", mlp, e);
                plan_mlp(plan, name, s->moe_inter, h, 1);
                free(name);
            }
            if (s->shared) {
                name = format_name("%s.shared_experts", mlp);
                plan_mlp(plan, name, s->shared * s->moe_inter, h, !s->recipe_k26);
                free(name);
            }
        }
        free(mlp);
        free(layer);
    }
    plan_add(plan, format_name("%s.norm.weight", lm), DTYPE_BF16, FILL_NORM_WEIGHT, 0.1f, 1, h);
    /* std 3/sqrt(hidden): logits of a unit-rms hidden state spread with std about 3. */
    plan_add(plan, format_name("language_model.lm_head.weight"), DTYPE_BF16, FILL_NORMAL, 3.0f / sqrtf((float)h), 2,
             vocab_total, h);
    /* A few vision tensors, as in the real checkpoint (skipped by a text engine). */
    const int vision = 32, merged = 4 * vision;
    plan_add(plan, format_name("vision_tower.patch_embed.proj.weight"), DTYPE_BF16, FILL_NORMAL, 0.02f, 4, vision, 3, 14, 14);
    plan_add(plan, format_name("vision_tower.patch_embed.proj.bias"), DTYPE_BF16, FILL_NORMAL, 0.02f, 1, vision);
    plan_add(plan, format_name("vision_tower.encoder.final_layernorm.weight"), DTYPE_BF16, FILL_NORM_WEIGHT, 0.1f, 1, vision);
    plan_add(plan, format_name("mm_projector.proj.0.weight"), DTYPE_BF16, FILL_NORMAL, 0.02f, 2, merged, merged);
    plan_add(plan, format_name("mm_projector.proj.2.weight"), DTYPE_BF16, FILL_NORMAL, 0.02f, 2, h, merged);

    /* Consecutive runs of about total / shards bytes; a shard closes once it reaches its share. */
    int shards = s->single_file ? 1 : s->shards;
    uint64_t target = (plan->total_bytes + (uint64_t)shards - 1) / (uint64_t)shards, in_shard = 0;
    int shard = 0;
    for (int i = 0; i < plan->n_tensors; i++) {
        plan->tensors[i].shard = shard;
        in_shard += plan->tensors[i].bytes;
        if (in_shard >= target && shard < shards - 1 && i < plan->n_tensors - 1) {
            shard++;
            in_shard = 0;
        }
    }
    plan->n_shards = shard + 1;
}

static void free_plan(model_plan *plan)
{
    for (int i = 0; i < plan->n_tensors; i++)
        free(plan->tensors[i].name);
    for (int i = 0; i < plan->n_linears; i++)
        free(plan->linears[i].name);
    free(plan->tensors);
    free(plan->linears);
}

/* ---- writing ------------------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} text_buffer;

static void text_append(text_buffer *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_append(text_buffer *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n >= 0 && b->data && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *grown = realloc(b->data, cap);
        if (n < 0 || !grown) {
            fprintf(stderr, "kimi-mkmodel: out of memory\n");
            exit(5);
        }
        b->data = grown;
        b->cap = cap;
    }
}

static void text_append_bytes(text_buffer *b, const void *data, size_t len)
{
    if (b->cap - b->len <= len) {
        size_t cap = (b->cap + len + 1) * 2;
        char *grown = realloc(b->data, cap);
        if (!grown) {
            fprintf(stderr, "kimi-mkmodel: out of memory\n");
            exit(5);
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = 0;
}

static char *join_path(const char *dir, const char *file)
{
    return format_name("%s/%s", dir, file);
}

static int write_file(const char *dir, const char *file, const void *data, size_t len, kimi_err *err)
{
    char *path = join_path(dir, file);
    FILE *f = fopen(path, "wb");
    int failed = !f || fwrite(data, 1, len, f) != len;
    if (f && fclose(f))
        failed = 1;
    if (failed)
        kimi_fail(err, KIMI_ERR_IO, "%s: %s", path, strerror(errno));
    free(path);
    return failed ? err->code : 0;
}

static int read_file(const char *dir, const char *file, char **data, size_t *len, kimi_err *err)
{
    char *path = join_path(dir, file);
    FILE *f = fopen(path, "rb");
    text_buffer b = {0};
    text_append(&b, "%s", "");
    char chunk[65536];
    size_t n;
    while (f && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        text_append_bytes(&b, chunk, n);
    int failed = !f || ferror(f);
    if (f)
        fclose(f);
    if (failed) {
        kimi_fail(err, KIMI_ERR_IO, "%s: %s", path, strerror(errno));
        free(b.data);
    }
    free(path);
    if (failed)
        return err->code;
    *data = b.data;
    *len = b.len;
    return 0;
}

/* Python's repr() of a float, as json.dumps writes it: shortest round-trip digits, ".0" on whole
 * numbers, exponent form below 1e-4 and from 1e16. */
static void append_json_number(text_buffer *b, double value)
{
    char digits[64];
    int precision = 1;
    for (; precision < 17; precision++) {
        snprintf(digits, sizeof digits, "%.*e", precision - 1, value);
        if (strtod(digits, NULL) == value)
            break;
    }
    snprintf(digits, sizeof digits, "%.*e", precision - 1, value);
    int exponent = atoi(strchr(digits, 'e') + 1);
    if (exponent < -4 || exponent >= 16) {
        text_append(b, "%s", digits);
        return;
    }
    int decimals = precision - 1 - exponent;
    snprintf(digits, sizeof digits, "%.*f", decimals > 0 ? decimals : 0, value);
    text_append(b, "%s%s", digits, strchr(digits, '.') ? "" : ".0");
}

/* ---- tokenizer files ------------------------------------------------------------------------- */

typedef struct {
    char *model_text;           /* tiktoken.model as read */
    size_t model_len;
    int base;                   /* its number of ranks */
    char *config_text;          /* tokenizer_config.json as read */
    size_t config_len;
    json_t *added_tokens;       /* tokenizer_config's added_tokens_decoder */
    int special_first, special_count;
} tokenizer_source;

static int load_tokenizer(const char *dir, tokenizer_source *t, kimi_err *err)
{
    if (read_file(dir, "tiktoken.model", &t->model_text, &t->model_len, err) ||
        read_file(dir, "tokenizer_config.json", &t->config_text, &t->config_len, err))
        return err->code;
    for (size_t i = 0; i < t->model_len; i++) {
        if (t->model_text[i] != '\n')
            continue;
        const char *space = memrchr(t->model_text, ' ', i);
        if (!space || atoi(space + 1) != t->base)
            return kimi_fail(err, KIMI_ERR_MODEL, "%s/tiktoken.model: line %d is not \"<base64> %d\"", dir,
                             t->base + 1, t->base);
        t->base++;
    }
    json_error_t json_err;
    json_t *config = json_loadb(t->config_text, t->config_len, JSON_DECODE_INT_AS_REAL, &json_err);
    json_t *added = config ? json_object_get(config, "added_tokens_decoder") : NULL;
    if (!json_is_object(added)) {
        json_decref(config);
        return kimi_fail(err, KIMI_ERR_MODEL, "%s/tokenizer_config.json: no added_tokens_decoder (%s)", dir,
                         config ? "missing" : json_err.text);
    }
    t->added_tokens = json_incref(added);
    json_decref(config);
    t->special_first = INT_MAX;
    const char *key;
    json_t *value;
    json_object_foreach(t->added_tokens, key, value) {
        int id = atoi(key);
        if (id < t->special_first)
            t->special_first = id;
        t->special_count++;
    }
    if (t->special_first != t->base)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: special tokens start at %d, not right after the %d ranks of tiktoken.model",
                         dir, t->special_first, t->base);
    return 0;
}

static void free_tokenizer(tokenizer_source *t)
{
    free(t->model_text);
    free(t->config_text);
    json_decref(t->added_tokens);
}

/* The id a special token gets in the written vocabulary (specials follow `vocab` base ranks). */
static int special_id(const tokenizer_source *t, int vocab, const char *content, kimi_err *err)
{
    const char *key;
    json_t *value;
    json_object_foreach(t->added_tokens, key, value) {
        const char *text = json_string_value(json_object_get(value, "content"));
        if (text && !strcmp(text, content))
            return vocab + atoi(key) - t->special_first;
    }
    return -kimi_fail(err, KIMI_ERR_MODEL, "tokenizer_config.json: no special token \"%s\"", content);
}

static const char base64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t base64_decode(const char *text, size_t len, uint8_t *out)
{
    uint32_t bits = 0;
    int have = 0;
    size_t n = 0;
    for (size_t i = 0; i < len && text[i] != '='; i++) {
        const char *p = strchr(base64_alphabet, text[i]);
        if (!p || !text[i])
            break;
        bits = (bits << 6) | (uint32_t)(p - base64_alphabet);
        have += 6;
        if (have >= 8) {
            have -= 8;
            out[n++] = (uint8_t)(bits >> have);
        }
    }
    return n;
}

static void base64_append(text_buffer *b, const uint8_t *data, size_t len)
{
    for (size_t i = 0; i < len; i += 3) {
        uint32_t chunk = (uint32_t)data[i] << 16 | (i + 1 < len ? (uint32_t)data[i + 1] << 8 : 0) |
                         (i + 2 < len ? data[i + 2] : 0);
        text_append(b, "%c%c%c%c", base64_alphabet[chunk >> 18], base64_alphabet[(chunk >> 12) & 63],
                    i + 1 < len ? base64_alphabet[(chunk >> 6) & 63] : '=', i + 2 < len ? base64_alphabet[chunk & 63] : '=');
    }
}

enum { MAX_TOKEN_BYTES = 16 };

typedef struct {
    uint8_t bytes[MAX_TOKEN_BYTES];
    uint8_t len;
} token_bytes;

static uint64_t token_hash(const token_bytes *t)
{
    uint64_t hash = 0xCBF29CE484222325ull;
    for (int i = 0; i < t->len; i++)
        hash = (hash ^ t->bytes[i]) * 0x100000001B3ull;
    return hash ^ t->len;
}

/* Inserts into an open-addressing set of token indices; returns 0 if an equal token is there. */
static int token_set_insert(int *slots, size_t mask, const token_bytes *tokens, int index)
{
    for (size_t slot = token_hash(&tokens[index]) & mask;; slot = (slot + 1) & mask) {
        if (slots[slot] < 0) {
            slots[slot] = index;
            return 1;
        }
        const token_bytes *other = &tokens[slots[slot]];
        if (other->len == tokens[index].len && !memcmp(other->bytes, tokens[index].bytes, other->len))
            return 0;
    }
}

/* tiktoken.model with `vocab` ranks: the source's first `vocab` lines, or all of them followed
 * by new merges (two random existing tokens joined, at most 16 bytes, never a duplicate). */
static int write_tiktoken(const model_spec *s, const tokenizer_source *t, int vocab, kimi_err *err)
{
    if (vocab <= t->base) {
        size_t end = 0;
        for (int line = 0; line < vocab; line++)
            end = (size_t)((const char *)memchr(t->model_text + end, '\n', t->model_len - end) - t->model_text) + 1;
        return write_file(s->out_dir, "tiktoken.model", t->model_text, end, err);
    }
    token_bytes *tokens = calloc((size_t)vocab, sizeof *tokens);
    size_t mask = 1;
    while (mask < (size_t)vocab * 2)
        mask <<= 1;
    int *slots = malloc(mask * sizeof *slots);
    if (!tokens || !slots) {
        free(tokens);
        free(slots);
        return kimi_fail(err, KIMI_ERR_NOMEM, "tiktoken.model: out of memory for %d tokens", vocab);
    }
    memset(slots, 0xFF, mask * sizeof *slots);
    mask--;
    const char *line = t->model_text;
    for (int i = 0; i < t->base; i++) {
        const char *space = strchr(line, ' ');
        uint8_t decoded[256];
        size_t len = (size_t)(space - line) * 3 / 4 <= sizeof decoded ? base64_decode(line, (size_t)(space - line), decoded) : 0;
        tokens[i].len = (uint8_t)(len <= MAX_TOKEN_BYTES ? len : 0); /* long tokens are never joined */
        memcpy(tokens[i].bytes, decoded, tokens[i].len);
        if (tokens[i].len)
            token_set_insert(slots, mask, tokens, i);
        line = strchr(line, '\n') + 1;
    }
    text_buffer out = {0};
    text_append_bytes(&out, t->model_text, t->model_len);
    uint64_t state = stream_seed(s->seed, "tiktoken.model");
    for (int i = t->base; i < vocab;) {
        const token_bytes *a = &tokens[splitmix64(&state) % (uint64_t)i];
        const token_bytes *b = &tokens[splitmix64(&state) % (uint64_t)i];
        if (!a->len || !b->len || a->len + b->len > MAX_TOKEN_BYTES)
            continue;
        tokens[i].len = (uint8_t)(a->len + b->len);
        memcpy(tokens[i].bytes, a->bytes, a->len);
        memcpy(tokens[i].bytes + a->len, b->bytes, b->len);
        if (!token_set_insert(slots, mask, tokens, i))
            continue;
        base64_append(&out, tokens[i].bytes, tokens[i].len);
        text_append(&out, " %d\n", i);
        i++;
    }
    int status = write_file(s->out_dir, "tiktoken.model", out.data, out.len, err);
    free(out.data);
    free(tokens);
    free(slots);
    return status;
}

/* tokenizer_config.json as it is, with each special token's id (the "ID": keys and the number in
 * "<|reserved_token_ID|>") moved so the specials follow `vocab` base ranks: byte for byte the
 * source when `vocab` is its own. */
static int write_tokenizer_config(const model_spec *s, const tokenizer_source *t, int vocab, kimi_err *err)
{
    text_buffer out = {0};
    const char *text = t->config_text, *end = text + t->config_len;
    static const char *const prefixes[] = {"\"", "reserved_token_"};
    static const char *const suffixes[] = {"\":", "|"};
    while (text < end) {
        int moved = 0;
        for (int k = 0; k < 2 && !moved; k++) {
            size_t prefix_len = strlen(prefixes[k]);
            if ((size_t)(end - text) <= prefix_len || strncmp(text, prefixes[k], prefix_len))
                continue;
            const char *digits = text + prefix_len, *after = digits;
            while (after < end && *after >= '0' && *after <= '9')
                after++;
            size_t suffix_len = strlen(suffixes[k]);
            if (after == digits || (size_t)(end - after) < suffix_len || strncmp(after, suffixes[k], suffix_len))
                continue;
            long id = strtol(digits, NULL, 10);
            if (id < t->special_first || id >= t->special_first + t->special_count)
                continue;
            text_append(&out, "%s%ld%s", prefixes[k], id - t->special_first + vocab, suffixes[k]);
            text = after + suffix_len;
            moved = 1;
        }
        if (!moved)
            text_append(&out, "%c", *text++);
    }
    int status = write_file(s->out_dir, "tokenizer_config.json", out.data, out.len, err);
    free(out.data);
    return status;
}

static int copy_file(const model_spec *s, const char *file, kimi_err *err)
{
    char *data;
    size_t len;
    if (read_file(s->tokenizer_dir, file, &data, &len, err))
        return err->code;
    int status = write_file(s->out_dir, file, data, len, err);
    free(data);
    return status;
}

/* ---- configs -------------------------------------------------------------------------------- */

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ModelOpt's ignore list: everything not quantized, as sorted prefix wildcards. */
static char **ignore_list(const model_spec *s, int *count)
{
    char **list = calloc((size_t)(2 * s->layers + 3), sizeof *list);
    if (!list) {
        fprintf(stderr, "kimi-mkmodel: out of memory\n");
        exit(5);
    }
    int n = 0;
    list[n++] = format_name("language_model.lm_head");
    for (int i = 0; i < s->layers; i++) {
        list[n++] = format_name("language_model.model.layers.%d.self_attn*", i);
        if (s->recipe_k26 && i < s->dense_layers)
            list[n++] = format_name("language_model.model.layers.%d.mlp*", i);
        else if (s->recipe_k26 && s->shared)
            list[n++] = format_name("language_model.model.layers.%d.mlp.shared_experts*", i);
    }
    list[n++] = format_name("mm_projector*");
    list[n++] = format_name("vision_tower*");
    qsort(list, (size_t)n, sizeof *list, compare_strings);
    *count = n;
    return list;
}

static void append_string_list(text_buffer *b, char **list, int count, const char *indent)
{
    for (int i = 0; i < count; i++)
        text_append(b, "%s\"%s\"%s\n", indent, list[i], i + 1 < count ? "," : "");
}

static int write_configs(const model_spec *s, const tokenizer_source *t, int vocab, kimi_err *err)
{
    int bos = special_id(t, vocab, "[BOS]", err), eos = special_id(t, vocab, "[EOS]", err);
    int pad = special_id(t, vocab, "[PAD]", err), media = special_id(t, vocab, "<|media_pad|>", err);
    if (bos < 0 || eos < 0 || pad < 0 || media < 0)
        return err->code;
    int n_ignore;
    char **ignore = ignore_list(s, &n_ignore);

    text_buffer c = {0};
    text_append(&c,
                "{\n  \"architectures\": [\n    \"KimiK25ForConditionalGeneration\"\n  ],\n"
                "  \"model_type\": \"kimi_k25\",\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n"
                "  \"pad_token_id\": %d,\n  \"media_placeholder_token_id\": %d,\n  \"ignore_index\": -100,\n"
                "  \"dtype\": \"bfloat16\",\n  \"tie_word_embeddings\": false,\n  \"use_unified_vision_chunk\": true,\n"
                "  \"video_placeholder\": \"<|kimi_k25_video_placeholder|>\",\n  \"text_config\": {\n"
                "    \"architectures\": [\n      \"DeepseekV3ForCausalLM\"\n    ],\n    \"model_type\": \"deepseek_v3\",\n",
                bos, eos, pad, media);
    text_append(&c,
                "    \"hidden_size\": %d,\n    \"num_hidden_layers\": %d,\n    \"num_attention_heads\": %d,\n"
                "    \"num_key_value_heads\": %d,\n    \"q_lora_rank\": %d,\n    \"kv_lora_rank\": %d,\n"
                "    \"qk_nope_head_dim\": %d,\n    \"qk_rope_head_dim\": %d,\n    \"v_head_dim\": %d,\n"
                "    \"n_routed_experts\": %d,\n    \"n_shared_experts\": %d,\n    \"num_experts_per_tok\": %d,\n"
                "    \"moe_intermediate_size\": %d,\n    \"intermediate_size\": %d,\n    \"first_k_dense_replace\": %d,\n"
                "    \"moe_layer_freq\": 1,\n    \"n_group\": %d,\n    \"topk_group\": %d,\n"
                "    \"topk_method\": \"noaux_tc\",\n    \"scoring_func\": \"sigmoid\",\n    \"norm_topk_prob\": true,\n"
                "    \"routed_scaling_factor\": 2.827,\n    \"seq_aux\": true,\n    \"aux_loss_alpha\": 0.001,\n"
                "    \"ep_size\": 1,\n    \"hidden_act\": \"silu\",\n    \"attention_bias\": false,\n"
                "    \"attention_dropout\": 0.0,\n    \"rms_norm_eps\": 1e-05,\n    \"rope_theta\": 50000.0,\n"
                "    \"rope_scaling\": {\n      \"type\": \"yarn\",\n      \"factor\": ",
                s->hidden, s->layers, s->heads, s->heads, s->q_lora, s->kv_lora, s->nope, s->rope, s->v_head,
                s->experts, s->shared, s->top_k, s->moe_inter, s->inter, s->dense_layers, s->n_group, s->topk_group);
    append_json_number(&c, s->rope_factor);
    text_append(&c, ",\n      \"original_max_position_embeddings\": 4096,\n      \"beta_fast\": 32.0,\n"
                    "      \"beta_slow\": 1.0,\n      \"mscale\": ");
    append_json_number(&c, s->mscale);
    text_append(&c, ",\n      \"mscale_all_dim\": ");
    append_json_number(&c, s->mscale_all_dim);
    text_append(&c,
                "\n    },\n    \"max_position_embeddings\": 262144,\n    \"num_nextn_predict_layers\": 0,\n"
                "    \"tie_word_embeddings\": false,\n    \"pretraining_tp\": 1,\n    \"initializer_range\": 0.02,\n"
                "    \"use_cache\": true,\n    \"dtype\": \"bfloat16\",\n    \"vocab_size\": %d,\n"
                "    \"bos_token_id\": %d,\n    \"eos_token_id\": %d,\n    \"pad_token_id\": %d\n  },\n"
                "  \"vision_config\": {\n    \"patch_size\": 14,\n    \"vt_hidden_size\": 32,\n"
                "    \"vt_num_hidden_layers\": 0,\n    \"mm_hidden_size\": 32,\n    \"text_hidden_size\": %d,\n"
                "    \"merge_kernel_size\": [\n      2,\n      2\n    ]\n  },\n"
                "  \"quantization_config\": {\n    \"config_groups\": {\n      \"group_0\": {\n"
                "        \"input_activations\": {\n          \"dynamic\": false,\n          \"num_bits\": 4,\n"
                "          \"type\": \"float\",\n          \"group_size\": 16\n        },\n"
                "        \"weights\": {\n          \"dynamic\": false,\n          \"num_bits\": 4,\n"
                "          \"type\": \"float\",\n          \"group_size\": 16\n        },\n"
                "        \"targets\": [\n          \"Linear\"\n        ]\n      }\n    },\n    \"ignore\": [\n",
                vocab + t->special_count, bos, eos, pad, s->hidden);
    append_string_list(&c, ignore, n_ignore, "      ");
    text_append(&c, "    ],\n    \"quant_algo\": \"NVFP4\",\n    \"kv_cache_scheme\": {\n      \"dynamic\": false,\n"
                    "      \"num_bits\": 8,\n      \"type\": \"float\"\n    },\n    \"producer\": {\n"
                    "      \"name\": \"modelopt\",\n      \"version\": \"0.41.0\"\n    },\n"
                    "    \"quant_method\": \"modelopt\"\n  },\n  \"transformers_version\": \"4.57.1\"\n}");

    text_buffer q = {0};
    text_append(&q, "{\n  \"producer\": {\n    \"name\": \"modelopt\",\n    \"version\": \"0.41.0\"\n  },\n"
                    "  \"quantization\": {\n    \"quant_algo\": \"NVFP4\",\n    \"kv_cache_quant_algo\": \"FP8\",\n"
                    "    \"group_size\": 16,\n    \"exclude_modules\": [\n");
    append_string_list(&q, ignore, n_ignore, "      ");
    text_append(&q, "    ]\n  }\n}");

    text_buffer g = {0};
    text_append(&g, "{\n  \"max_length\": 262144,\n  \"eos_token_id\": %d\n}", eos);

    int status = write_file(s->out_dir, "config.json", c.data, c.len, err) ||
                 write_file(s->out_dir, "hf_quant_config.json", q.data, q.len, err) ||
                 write_file(s->out_dir, "generation_config.json", g.data, g.len, err);
    free(c.data);
    free(q.data);
    free(g.data);
    for (int i = 0; i < n_ignore; i++)
        free(ignore[i]);
    free(ignore);
    return status ? err->code : 0;
}

/* ---- safetensors ----------------------------------------------------------------------------- */

static char *shard_file_name(const model_plan *plan, int shard)
{
    return format_name("model-%05d-of-%05d.safetensors", shard + 1, plan->n_shards);
}

/* The quantized form of the NVFP4 linear being written (its three tensors are consecutive). */
typedef struct {
    int linear;
    float *values;      /* [rows][cols] */
    uint8_t *packed;    /* [rows][cols/2] */
    uint8_t *scales;    /* [rows][cols/16] */
    float scale_2;
    size_t capacity;    /* elements */
} quantized_linear;

static int quantize_linear(const model_plan *plan, int index, quantized_linear *q, kimi_err *err)
{
    if (q->linear == index)
        return 0;
    const nvfp4_linear *l = &plan->linears[index];
    size_t count = (size_t)l->rows * (size_t)l->cols;
    if (count > q->capacity) {
        free(q->values);
        free(q->packed);
        free(q->scales);
        q->values = malloc(count * sizeof(float));
        q->packed = malloc(count / 2);
        q->scales = malloc(count / 16);
        q->capacity = count;
        if (!q->values || !q->packed || !q->scales) {
            q->capacity = 0;
            return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory for %zu weights", l->name, count);
        }
    }
    char *weight_name = format_name("%s.weight", l->name);
    uint64_t state = stream_seed(plan->seed, weight_name);
    free(weight_name);
    float std = 1.0f / sqrtf((float)l->cols);
    for (size_t i = 0; i < count; i++)
        q->values[i] = std * random_normal(&state);
    q->scale_2 = nvfp4_global_scale(q->values, count);
    for (int r = 0; r < l->rows; r++)
        nvfp4_quantize_row(q->values + (size_t)r * l->cols, l->cols, q->scale_2, q->packed + (size_t)r * l->cols / 2,
                           q->scales + (size_t)r * l->cols / 16);
    q->linear = index;
    return 0;
}

static void store_float(dtype type, float value, uint8_t *out)
{
    if (type == DTYPE_F32) {
        memcpy(out, &value, 4);
    } else {
        uint16_t bits = bf16_from_float(value);
        memcpy(out, &bits, 2);
    }
}

static int write_tensor_data(FILE *f, const model_plan *plan, const tensor_plan *t, quantized_linear *q,
                             model_spec *s, kimi_err *err)
{
    size_t written;
    int holes = s->holes;
    int poison = s->poison_name && !strcmp(s->poison_name, t->name);
    if (poison && t->type != DTYPE_F32 && t->type != DTYPE_BF16)
        return kimi_fail(err, KIMI_ERR_USAGE, "--poison: %s is %s, not BF16 or F32", t->name, dtype_name(t->type));
    if (poison && (holes || t->fill == FILL_NVFP4_SCALE_2 || t->fill == FILL_SCALAR)) {
        uint8_t first[4];
        store_float(t->type, s->poison_value, first);
        s->poisoned = 1;
        size_t element = dtype_size(t->type);
        written = fwrite(first, 1, element, f);
        if (t->bytes > element && fseeko(f, (off_t)(t->bytes - element), SEEK_CUR) == 0)
            written = t->bytes;   /* (holes) the rest stays zero */
        if (written != t->bytes)
            return kimi_fail(err, KIMI_ERR_IO, "writing %s: %s", t->name, strerror(errno));
        return 0;
    }
    if (holes && t->fill != FILL_SCALAR) {
        const float one = 1.0f;
        if (t->fill == FILL_NVFP4_SCALE_2)  /* the linear is zero whatever its (finite) scale */
            written = fwrite(&one, 1, 4, f);
        else
            written = fseeko(f, (off_t)t->bytes, SEEK_CUR) ? 0 : t->bytes;
        if (written != t->bytes)
            return kimi_fail(err, KIMI_ERR_IO, "writing %s: %s", t->name, strerror(errno));
        return 0;
    }
    switch (t->fill) {
    case FILL_NVFP4_WEIGHT:
    case FILL_NVFP4_SCALE:
    case FILL_NVFP4_SCALE_2:
        if (quantize_linear(plan, t->linear, q, err))
            return err->code;
        if (t->fill == FILL_NVFP4_WEIGHT)
            written = fwrite(q->packed, 1, t->bytes, f);
        else if (t->fill == FILL_NVFP4_SCALE)
            written = fwrite(q->scales, 1, t->bytes, f);
        else
            written = fwrite(&q->scale_2, 1, 4, f);
        break;
    case FILL_SCALAR:
        written = fwrite(&t->param, 1, 4, f);
        break;
    default: {
        uint64_t state = stream_seed(plan->seed, t->name);
        size_t element = dtype_size(t->type), count = t->bytes / element;
        uint8_t chunk[1 << 16];
        written = 0;
        for (size_t done = 0; done < count;) {
            size_t n = count - done < sizeof chunk / element ? count - done : sizeof chunk / element;
            for (size_t i = 0; i < n; i++) {
                float noise = random_normal(&state) * t->param;
                store_float(t->type, t->fill == FILL_NORM_WEIGHT ? 1.0f + noise : noise, chunk + i * element);
            }
            if (poison && done == 0) {
                store_float(t->type, s->poison_value, chunk);
                s->poisoned = 1;
            }
            written += fwrite(chunk, 1, n * element, f);
            done += n;
        }
        break;
    }
    }
    if (written != t->bytes)
        return kimi_fail(err, KIMI_ERR_IO, "writing %s: %s", t->name, strerror(errno));
    return 0;
}

static void append_header_entry(text_buffer *h, const tensor_plan *t, uint64_t offset)
{
    text_append(h, "\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name, dtype_name(t->type));
    for (int d = 0; d < t->ndim; d++)
        text_append(h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    text_append(h, "],\"data_offsets\":[%llu,%llu]},", (unsigned long long)offset,
                (unsigned long long)(offset + t->bytes));
}

static int write_shard(model_spec *s, const model_plan *plan, int shard, const char *file, quantized_linear *q,
                       kimi_err *err)
{
    text_buffer header = {0};
    text_append(&header, "{");
    uint64_t offset = 0;
    for (int i = 0; i < plan->n_tensors; i++) {
        if (plan->tensors[i].shard != shard)
            continue;
        append_header_entry(&header, &plan->tensors[i], offset);
        offset += plan->tensors[i].bytes;
    }
    text_append(&header, "\"__metadata__\":{\"format\":\"pt\"}}");
    while ((8 + header.len) % 8)
        text_append(&header, " ");

    char *path = join_path(s->out_dir, file);
    FILE *f = fopen(path, "wb");
    if (!f) {
        kimi_fail(err, KIMI_ERR_IO, "%s: %s", path, strerror(errno));
        free(path);
        free(header.data);
        return err->code;
    }
    static char stream_buffer[1 << 22];
    setvbuf(f, stream_buffer, _IOFBF, sizeof stream_buffer);
    uint8_t length[8];
    for (int i = 0; i < 8; i++)
        length[i] = (uint8_t)((uint64_t)header.len >> (8 * i));
    int status = 0;
    if (fwrite(length, 1, 8, f) != 8 || fwrite(header.data, 1, header.len, f) != header.len)
        status = kimi_fail(err, KIMI_ERR_IO, "%s: %s", path, strerror(errno));
    for (int i = 0; i < plan->n_tensors && !status; i++)
        if (plan->tensors[i].shard == shard)
            status = write_tensor_data(f, plan, &plan->tensors[i], q, s, err);
    /* a hole at the end is not in the file until its size says so */
    if (!status && s->holes && (fflush(f) || ftruncate(fileno(f), (off_t)(8 + header.len + offset))))
        status = kimi_fail(err, KIMI_ERR_IO, "%s: %s", path, strerror(errno));
    if (fclose(f) && !status)
        status = kimi_fail(err, KIMI_ERR_IO, "%s: %s", path, strerror(errno));
    free(path);
    free(header.data);
    return status;
}

static int compare_tensor_names(const void *a, const void *b)
{
    return strcmp((*(const tensor_plan *const *)a)->name, (*(const tensor_plan *const *)b)->name);
}

static int write_index(const model_spec *s, const model_plan *plan, kimi_err *err)
{
    const tensor_plan **sorted = malloc((size_t)plan->n_tensors * sizeof *sorted);
    if (!sorted)
        return kimi_fail(err, KIMI_ERR_NOMEM, "model.safetensors.index.json: out of memory");
    for (int i = 0; i < plan->n_tensors; i++)
        sorted[i] = &plan->tensors[i];
    qsort(sorted, (size_t)plan->n_tensors, sizeof *sorted, compare_tensor_names);
    text_buffer b = {0};
    text_append(&b, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {\n",
                (unsigned long long)plan->total_bytes);
    for (int i = 0; i < plan->n_tensors; i++) {
        char *file = shard_file_name(plan, sorted[i]->shard);
        text_append(&b, "    \"%s\": \"%s\"%s\n", sorted[i]->name, file, i + 1 < plan->n_tensors ? "," : "");
        free(file);
    }
    text_append(&b, "  }\n}");
    int status = write_file(s->out_dir, "model.safetensors.index.json", b.data, b.len, err);
    free(b.data);
    free(sorted);
    return status;
}

static int write_weights(model_spec *s, const model_plan *plan, kimi_err *err)
{
    quantized_linear q = {.linear = -1};
    int status = 0;
    for (int shard = 0; shard < plan->n_shards && !status; shard++) {
        char *file = s->single_file ? format_name("model.safetensors") : shard_file_name(plan, shard);
        status = write_shard(s, plan, shard, file, &q, err);
        free(file);
    }
    free(q.values);
    free(q.packed);
    free(q.scales);
    if (!status && !s->single_file)
        status = write_index(s, plan, err);
    return status;
}

/* ---- main ------------------------------------------------------------------------------------ */

static double seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) * 1e-9;
}

static int make_model(model_spec *s, kimi_err *err)
{
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    tokenizer_source tokenizer = {0};
    model_plan plan = {0};
    int status = load_tokenizer(s->tokenizer_dir, &tokenizer, err);
    if (!status && mkdir(s->out_dir, 0755) && errno != EEXIST)
        status = kimi_fail(err, KIMI_ERR_IO, "--out %s: %s", s->out_dir, strerror(errno));
    int vocab = s->vocab ? s->vocab : tokenizer.base;
    if (!status)
        status = write_configs(s, &tokenizer, vocab, err);
    if (!status)
        status = write_tokenizer_config(s, &tokenizer, vocab, err);
    if (!status)
        status = write_tiktoken(s, &tokenizer, vocab, err);
    if (!status)
        status = copy_file(s, "chat_template.jinja", err);
    if (!status) {
        build_plan(s, vocab + tokenizer.special_count, &plan);
        status = write_weights(s, &plan, err);
    }
    if (!status && s->poison_name && !s->poisoned)
        status = kimi_fail(err, KIMI_ERR_USAGE, "--poison: the checkpoint has no tensor named %s", s->poison_name);
    if (!status)
        printf("kimi-mkmodel: %s: %d layers (%d dense), hidden %d, %d heads, %d experts top-%d (%d groups, %d kept), "
               "vocab %d + %d, %s, %d tensors (%d NVFP4 linears), %.2f GB in %d file%s, %.1f s\n",
               s->out_dir, s->layers, s->dense_layers, s->hidden, s->heads, s->experts, s->top_k, s->n_group,
               s->topk_group, vocab, tokenizer.special_count, s->recipe_k26 ? "K2.6 recipe" : "K2.5 recipe",
               plan.n_tensors, plan.n_linears, (double)plan.total_bytes / 1e9, plan.n_shards,
               plan.n_shards > 1 ? "s" : "", seconds_since(&start));
    free_plan(&plan);
    free_tokenizer(&tokenizer);
    return status;
}

int main(int argc, char **argv)
{
    kimi_err err = {0};
    model_spec spec;
    if (parse_spec(argc - 1, argv + 1, &spec, &err) || check_spec(&spec, &err)) {
        fprintf(stderr, "kimi-mkmodel: %s\n%s", err.msg, usage);
        return err.code;
    }
    int status = make_model(&spec, &err);
    if (status)
        fprintf(stderr, "kimi-mkmodel: %s\n", err.msg);
    free((char *)spec.poison_name);
    return status;
}
