/* probe_model: kimi-probe info (architecture and memory plan of a checkpoint) and
 * kimi-probe weights (dequantized float32 rows of one linear). */
#include "app/probe.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/probe_args.h"
#include "engine/weights.h"
#include "kernels/cpu/numeric.h"

/* Without --mem-gib the plan assumes one 96 GB RTX PRO 6000 (the deployment target) less
 * about 6 GiB for the CUDA context, activations and workspaces. */
#define DEFAULT_MEM_GIB 90.0

#define GIB (1024.0 * 1024.0 * 1024.0)

typedef struct {
    tp_shard *shards;           /* [tp] each rank's slices and the weight bytes it reads */
    size_t max_rank_bytes;
    long memory_context;        /* positions that fit beside the largest rank's weights */
    long max_context;           /* usable: memory_context capped at max_position_embeddings */
} memory_plan;

static int plan_memory(const model_weights *mw, int tp, double mem_gib, memory_plan *plan, kimi_err *err)
{
    plan->shards = calloc((size_t)tp, sizeof *plan->shards);
    if (!plan->shards)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    plan->max_rank_bytes = 0;
    for (int r = 0; r < tp; r++) {
        if (tp_shard_plan(mw, tp, r, &plan->shards[r], err)) {
            free(plan->shards);
            return err->code;
        }
        if (plan->shards[r].weight_bytes > plan->max_rank_bytes)
            plan->max_rank_bytes = plan->shards[r].weight_bytes;
    }
    plan->memory_context = max_context_for_budget(&mw->cfg, plan->max_rank_bytes, (size_t)(mem_gib * GIB));
    plan->max_context = plan->memory_context < mw->cfg.max_position ? plan->memory_context : mw->cfg.max_position;
    return 0;
}

static int dense_layer_count(const model_config *c)
{
    int n = 0;
    for (int l = 0; l < c->layers; l++)
        n += !config_layer_is_moe(c, l);
    return n;
}

/* [{"heads": [b, e], "dense_inter": …, "moe_inter": …, "shared_inter": …, "vocab": …, "bytes": n}]:
 * the half-open ranges each rank slices. */
static json_t *shards_json(const tp_shard *shards, int tp)
{
    json_t *list = json_array();
    for (int r = 0; r < tp; r++) {
        const tp_shard *sh = &shards[r];
        const struct { const char *key; index_range range; } ranges[] = {
            {"heads", sh->heads}, {"dense_inter", sh->dense_inter}, {"moe_inter", sh->moe_inter},
            {"shared_inter", sh->shared_inter}, {"vocab", sh->vocab},
        };
        json_t *o = json_object();
        for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
            json_object_set_new(o, ranges[i].key, json_pack("[i, i]", ranges[i].range.begin, ranges[i].range.end));
        json_object_set_new(o, "bytes", json_integer((json_int_t)sh->weight_bytes));
        json_array_append_new(list, o);
    }
    return list;
}

static void print_json(const model_weights *mw, int tp, double mem_gib, const memory_plan *plan)
{
    const model_config *c = &mw->cfg;
    json_t *o = json_object(), *linears = json_object(), *ranks = json_array();
    const struct { const char *key; long long value; } ints[] = {
        {"layers", c->layers}, {"dense_layers", dense_layer_count(c)}, {"hidden", c->hidden},
        {"heads", c->heads}, {"q_lora_rank", c->q_lora_rank}, {"kv_lora_rank", c->kv_lora_rank},
        {"qk_nope_head_dim", c->qk_nope_dim}, {"qk_rope_head_dim", c->qk_rope_dim}, {"v_head_dim", c->v_head_dim},
        {"experts", c->experts}, {"experts_per_token", c->experts_per_token}, {"shared_experts", c->shared_experts},
        {"moe_intermediate", c->moe_intermediate}, {"intermediate", c->intermediate}, {"n_group", c->n_group},
        {"topk_group", c->topk_group}, {"vocab", c->vocab}, {"max_position", c->max_position},
        {"weight_bytes", (long long)mw->weight_bytes}, {"kv_bytes_per_token", (long long)kv_bytes_per_token(c)},
        {"tp", tp}, {"bytes_per_rank", (long long)plan->max_rank_bytes}, {"max_context", plan->max_context},
        {"max_context_by_memory", plan->memory_context},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        json_object_set_new(o, ints[i].key, json_integer(ints[i].value));
    json_object_set_new(linears, "nvfp4", json_integer(mw->n_nvfp4_linears));
    json_object_set_new(linears, "bf16", json_integer(mw->n_dense_linears));
    json_object_set_new(o, "linears", linears);
    for (int r = 0; r < tp; r++)
        json_array_append_new(ranks, json_integer((json_int_t)plan->shards[r].weight_bytes));
    json_object_set_new(o, "bytes_by_rank", ranks);
    json_object_set_new(o, "shards", shards_json(plan->shards, tp));
    json_object_set_new(o, "model_type", json_string(c->model_type));
    json_object_set_new(o, "prefix", json_string(mw->prefix));
    json_object_set_new(o, "quant_algo", json_string(c->quant_algo));
    json_object_set_new(o, "mem_gib", json_real(mem_gib));
    json_object_set_new(o, "load_seconds", json_real(mw->load_seconds));
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    puts(text ? text : "{}");
    free(text);
    json_decref(o);
}

static void print_human(const char *dir, const model_weights *mw, int tp, double mem_gib, int mem_given,
                        const memory_plan *plan)
{
    const model_config *c = &mw->cfg;
    int dense = dense_layer_count(c);
    printf("model         %s (%s, tensors under \"%s\")\n", dir, c->model_type, mw->prefix);
    printf("layers        %d (%d dense, %d MoE), hidden %d, vocab %d\n", c->layers, dense, c->layers - dense,
           c->hidden, c->vocab);
    printf("attention     MLA, %d heads, q_lora %d, kv_lora %d, qk %d nope + %d rope, v %d\n", c->heads, c->q_lora_rank,
           c->kv_lora_rank, c->qk_nope_dim, c->qk_rope_dim, c->v_head_dim);
    printf("experts       %d routed (%d per token, n_group %d, topk_group %d) x %d wide, %d shared; dense MLP %d wide\n",
           c->experts, c->experts_per_token, c->n_group, c->topk_group, c->moe_intermediate, c->shared_experts,
           c->intermediate);
    printf("linears       %d NVFP4, %d BF16/F16/F32 (embedding not counted)\n", mw->n_nvfp4_linears,
           mw->n_dense_linears);
    printf("weights       %zu bytes (%.3f GiB)\n", mw->weight_bytes, mw->weight_bytes / GIB);
    printf("kv cache      %zu bytes per token (fp16 latent %d + k_pe %d, %d layers)\n", kv_bytes_per_token(c),
           c->kv_lora_rank, c->qk_rope_dim, c->layers);
    for (int r = 0; r < tp; r++) {
        char label[32];
        const tp_shard *sh = &plan->shards[r];
        snprintf(label, sizeof label, "rank %d/%d", r, tp);
        printf("%-14s%zu weight bytes (%.3f GiB): heads [%d,%d), dense [%d,%d), expert [%d,%d), shared [%d,%d), "
               "vocab [%d,%d)\n", label, sh->weight_bytes, sh->weight_bytes / GIB, sh->heads.begin, sh->heads.end,
               sh->dense_inter.begin, sh->dense_inter.end, sh->moe_inter.begin, sh->moe_inter.end,
               sh->shared_inter.begin, sh->shared_inter.end, sh->vocab.begin, sh->vocab.end);
    }
    printf("budget        %g GiB per rank%s\n", mem_gib,
           mem_given ? "" : " (assumed: a 96 GB RTX PRO 6000 less ~6 GiB for runtime; set --mem-gib)");
    if (plan->memory_context > c->max_position)
        printf("max context   %ld positions: max_position_embeddings (memory would fit %ld)\n", plan->max_context,
               plan->memory_context);
    else
        printf("max context   %ld positions fit after the largest rank's weights (max_position_embeddings %d)\n",
               plan->max_context, c->max_position);
    printf("loaded in     %.3f s\n", mw->load_seconds);
}

int probe_info(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    const char *dir;
    long tp;
    double mem_gib;
    if (probe_args_parse(&a, argc, argv, "model,tp,mem-gib,json", &err) ||
        probe_arg_required(&a, "model", &dir, &err) || probe_arg_int(&a, "tp", 1, 1024, 1, &tp, &err) ||
        probe_arg_double(&a, "mem-gib", DEFAULT_MEM_GIB, &mem_gib, &err))
        return probe_report(&err);
    if (!(mem_gib > 0 && mem_gib < 1e9)) {
        kimi_fail(&err, KIMI_ERR_USAGE, "--mem-gib: %g is not a positive size in GiB", mem_gib);
        return probe_report(&err);
    }
    const char *json = probe_arg(&a, "json");
    if (json && *json) {
        kimi_fail(&err, KIMI_ERR_USAGE, "--json takes no value (got '%s')", json);
        return probe_report(&err);
    }
    model_weights mw;
    if (weights_load(&mw, dir, &err))
        return probe_report(&err);
    memory_plan plan = {0};
    if (plan_memory(&mw, (int)tp, mem_gib, &plan, &err)) {
        weights_free(&mw);
        return probe_report(&err);
    }
    if (json)
        print_json(&mw, (int)tp, mem_gib, &plan);
    else
        print_human(dir, &mw, (int)tp, mem_gib, probe_arg(&a, "mem-gib") != NULL, &plan);
    free(plan.shards);
    weights_free(&mw);
    return 0;
}

static int write_rows(const linear *l, const int *rows, int n_rows, const char *path, kimi_err *err)
{
    float *row = malloc((size_t)l->w.cols * sizeof *row);     /* [cols] */
    if (!row)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for a row of %d floats", l->w.cols);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(row);
        return kimi_fail(err, KIMI_ERR_IO, "%s: cannot create", path);
    }
    int ok = 1;
    for (int i = 0; i < n_rows && ok; i++) {
        weight_matrix_decode_row(&l->w, rows[i], row);
        ok = fwrite(row, sizeof *row, (size_t)l->w.cols, f) == (size_t)l->w.cols;
    }
    ok &= fclose(f) == 0;
    free(row);
    return ok ? 0 : kimi_fail(err, KIMI_ERR_IO, "%s: write failed", path);
}

int probe_weights(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    const char *dir, *name, *rows_text, *out;
    int *rows = NULL, n_rows = 0;
    if (probe_args_parse(&a, argc, argv, "model,linear,rows,out", &err) ||
        probe_arg_required(&a, "model", &dir, &err) || probe_arg_required(&a, "linear", &name, &err) ||
        probe_arg_required(&a, "rows", &rows_text, &err) || probe_arg_required(&a, "out", &out, &err) ||
        probe_parse_int_list("rows", rows_text, &rows, &n_rows, &err))
        return probe_report(&err);
    model_weights mw;
    if (weights_load(&mw, dir, &err)) {
        free(rows);
        return probe_report(&err);
    }
    const linear *l = weights_find_linear(&mw, name);
    int rc = 0;
    if (!l)
        rc = kimi_fail(&err, KIMI_ERR_USAGE, "--linear: no linear named '%s' (a checkpoint name without \".weight\", e.g. %slayers.0.self_attn.q_a_proj)",
                       name, mw.prefix);
    for (int i = 0; !rc && i < n_rows; i++)
        if (rows[i] < 0 || rows[i] >= l->w.rows)
            rc = kimi_fail(&err, KIMI_ERR_USAGE, "--rows: row %d is outside [0, %d) of %s", rows[i], l->w.rows, name);
    if (!rc)
        rc = write_rows(l, rows, n_rows, out, &err);
    free(rows);
    weights_free(&mw);
    return rc ? probe_report(&err) : 0;
}
