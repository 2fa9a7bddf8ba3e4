/* probe_model: kimi-probe info (architecture and memory plan of a checkpoint), kimi-probe plan
 * (the CUDA backend's memory plan over devices described on the command line, no GPU needed)
 * and kimi-probe weights (dequantized float32 rows of one linear). */
#include "app/probe/probe.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/probe/probe_args.h"
#include "engine/backend/device_plan.h"
#include "engine/backend/kv_shard.h"
#include "engine/model/weights.h"
#include "engine/runtime/kv_cache.h"
#include "kernels/cpu/numeric.h"

/* Without --mem-gib the plan assumes one 96 GB RTX PRO 6000 (the deployment target) less
 * about 6 GiB for the CUDA context, activations and workspaces. */
#define DEFAULT_MEM_GIB 90.0

#define GIB (1024.0 * 1024.0 * 1024.0)

typedef struct {
    tp_shard *shards;           /* [tp] each rank's slices and the weight bytes it reads */
    size_t max_rank_bytes;
    kv_cache_format kv_cache;   /* the cache format asked for (--kv-cache) */
    int dcp;                    /* ranks the cache is sharded over */
    long replicated_context;    /* positions that fit beside the largest rank's weights, in that format, cache replicated */
    long memory_context;        /* the same with the cache sharded over dcp ranks (dcp x replicated) */
    long max_context;           /* usable: memory_context capped at max_position_embeddings */
    long max_context_by_format[2]; /* max_context with KV_CACHE_FP16, KV_CACHE_FP8 */
    long memory_context_by_format[2]; /* memory_context with each */
} memory_plan;

static int plan_memory(const model_weights *mw, int tp, int dcp, double mem_gib, kv_cache_format kv_cache,
                       memory_plan *plan, kimi_err *err)
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
    plan->dcp = dcp;
    for (int f = KV_CACHE_FP16; f <= KV_CACHE_FP8; f++) {
        long replicated = max_context_for_budget(&mw->cfg, (kv_cache_format)f, plan->max_rank_bytes,
                                                 (size_t)(mem_gib * GIB));
        long fit = kv_shard_context(replicated, dcp);
        plan->memory_context_by_format[f] = fit;
        plan->max_context_by_format[f] = fit < mw->cfg.max_position ? fit : mw->cfg.max_position;
        if (f == (int)kv_cache) {
            plan->replicated_context = replicated;
            plan->memory_context = fit;
        }
    }
    plan->kv_cache = kv_cache;
    plan->max_context = plan->max_context_by_format[kv_cache];
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
        {"weight_bytes", (long long)mw->weight_bytes}, {"kv_bytes_per_token", (long long)kv_bytes_per_token(c, plan->kv_cache)},
        {"tp", tp}, {"bytes_per_rank", (long long)plan->max_rank_bytes}, {"max_context", plan->max_context},
        {"max_context_by_memory", plan->memory_context}, {"dcp", plan->dcp},
        {"kv_bytes_per_token_per_rank", (long long)(kv_bytes_per_token(c, plan->kv_cache) / (size_t)plan->dcp)},
        {"max_context_replicated", plan->replicated_context < c->max_position ? plan->replicated_context
                                                                              : c->max_position},
        {"max_context_fp16", plan->max_context_by_format[KV_CACHE_FP16]},
        {"max_context_fp8", plan->max_context_by_format[KV_CACHE_FP8]},
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
    json_object_set_new(o, "kv_cache", json_string(kv_cache_format_name(plan->kv_cache)));
    json_object_set_new(o, "kv_cache_quant_algo", json_string(c->kv_cache_quant_algo));
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
    printf("kv cache      %s (--kv-cache; the checkpoint asks for %s): %zu bytes per token (%s latent %d + k_pe %d, %d "
           "layers); fp16 %zu, fp8 %zu\n", kv_cache_format_name(plan->kv_cache),
           c->kv_cache_quant_algo[0] ? c->kv_cache_quant_algo : "nothing", kv_bytes_per_token(c, plan->kv_cache),
           plan->kv_cache == KV_CACHE_FP8 ? "e4m3 with a scale per 128" : "fp16", c->kv_lora_rank, c->qk_rope_dim,
           c->layers, kv_bytes_per_token(c, KV_CACHE_FP16), kv_bytes_per_token(c, KV_CACHE_FP8));
    if (plan->dcp > 1)
        printf("kv sharding   dcp %d: position p on rank p %% %d of each group of %d ranks, %zu B per position per "
               "rank in the %s cache (replicated: %zu)\n", plan->dcp, plan->dcp, plan->dcp,
               kv_bytes_per_token(c, plan->kv_cache) / (size_t)plan->dcp, kv_cache_format_name(plan->kv_cache),
               kv_bytes_per_token(c, plan->kv_cache));
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
    printf("by cache      memory holds %ld positions with --kv-cache fp16, %ld with fp8 (%s in use%s)\n",
           plan->memory_context_by_format[KV_CACHE_FP16], plan->memory_context_by_format[KV_CACHE_FP8],
           kv_cache_format_name(plan->kv_cache), plan->dcp > 1 ? ", the cache sharded" : "");
    if (plan->dcp > 1)
        printf("replicated    %ld positions fit by memory with the cache on every rank (dcp 1); dcp %d: %ld (%.2fx)\n",
               plan->replicated_context, plan->dcp, plan->memory_context,
               plan->replicated_context > 0 ? (double)plan->memory_context / (double)plan->replicated_context : 0.0);
    printf("loaded in     %.3f s\n", mw->load_seconds);
}

int probe_info(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    const char *dir;
    long tp, dcp;
    double mem_gib;
    kv_cache_format kv_cache;
    if (probe_args_parse(&a, argc, argv, "model,tp,dcp,mem-gib,json,kv-cache", &err) ||
        probe_arg_required(&a, "model", &dir, &err) || probe_arg_int(&a, "tp", 1, 1024, 1, &tp, &err) ||
        probe_arg_kv_cache(&a, &kv_cache, &err) ||
        probe_arg_int(&a, "dcp", 1, KV_SHARD_MAX, 1, &dcp, &err) || kv_shard_check((int)tp, (int)dcp, &err) ||
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
    if (plan_memory(&mw, (int)tp, (int)dcp, mem_gib, kv_cache, &plan, &err)) {
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

/* The devices --device-memory describes: one free size in GiB for all (as many devices as the
 * ranks or --devices need), or one per device 0, 1, ... */
static int plan_devices(const probe_args *a, int tp, const int *devices, int n_devices, size_t *bytes, int *n_visible,
                        kimi_err *err)
{
    const char *text;
    if (probe_arg_required(a, "device-memory", &text, err))
        return err->code;
    *n_visible = 0;
    for (const char *p = text; *p;) {
        char *end;
        double gib = strtod(p, &end);
        if (end == p || !(gib > 0 && gib < 1e6) || (*end && *end != ',') || *n_visible == DEVICE_MAX_ORDINAL + 1)
            return kimi_fail(err, KIMI_ERR_USAGE, "--device-memory %s: not a list of sizes in GiB like 94.5 or 94.5,94.5",
                             text);
        bytes[(*n_visible)++] = (size_t)(gib * GIB);
        p = *end ? end + 1 : end;
    }
    if (*n_visible == 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "--device-memory: empty list");
    if (*n_visible == 1) {
        int want = tp;
        for (int i = 0; i < n_devices; i++)
            want = devices[i] + 1 > want ? devices[i] + 1 : want;
        for (int d = 1; d < want; d++)
            bytes[d] = bytes[0];
        *n_visible = want;
    }
    return 0;
}

static void print_plan_json(const model_config *c, const device_assignment *da, const device_rank_plan *plans,
                            const size_t *free_bytes, const device_memory_plan *p, long max_context,
                            kv_cache_format kv_cache)
{
    json_t *o = json_object(), *devices = json_array(), *free_list = json_array(), *weights = json_array();
    json_t *workspaces = json_array();
    for (int r = 0; r < da->tp; r++) {
        json_array_append_new(devices, json_integer(da->device[r]));
        json_array_append_new(free_list, json_integer((json_int_t)free_bytes[da->device[r]]));
        json_array_append_new(weights, json_integer((json_int_t)plans[r].weight_bytes));
        json_array_append_new(workspaces, json_integer((json_int_t)plans[r].workspace_bytes));
    }
    json_object_set_new(o, "tp", json_integer(da->tp));
    json_object_set_new(o, "communicator", json_string(da->comm == DEVICE_COMM_NCCL ? "nccl" : "local"));
    json_object_set_new(o, "devices", devices);
    json_object_set_new(o, "free_bytes", free_list);
    json_object_set_new(o, "rank_weight_bytes", weights);
    json_object_set_new(o, "rank_workspace_bytes", workspaces);
    json_object_set_new(o, "reserve_bytes", json_integer((json_int_t)DEVICE_RESERVE_BYTES));
    json_object_set_new(o, "cache_bytes_per_position", json_integer((json_int_t)plans[0].cache_bytes_per_position));
    json_object_set_new(o, "kv_cache", json_string(kv_cache_format_name(kv_cache)));
    json_object_set_new(o, "tightest_device", json_integer(p->tightest));
    json_object_set_new(o, "max_context_by_memory", json_integer(p->max_context));
    json_object_set_new(o, "max_position", json_integer(c->max_position));
    json_object_set_new(o, "max_context", json_integer(max_context));
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    puts(text ? text : "{}");
    free(text);
    json_decref(o);
}

static void print_plan_human(const model_config *c, const device_assignment *da, const device_rank_plan *plans,
                             const size_t *free_bytes, const device_memory_plan *p, long max_context, int sms,
                             kv_cache_format kv_cache)
{
    printf("ranks         %d on %s\n", da->tp,
           da->comm == DEVICE_COMM_NCCL ? "a device each (NCCL)" : "one device (the local communicator)");
    for (int r = 0; r < da->tp; r++)
        printf("rank %d/%d      device %d (%.2f GiB free): weights %.3f GiB (%zu B), workspace %.1f MiB\n", r, da->tp,
               da->device[r], free_bytes[da->device[r]] / GIB, plans[r].weight_bytes / GIB, plans[r].weight_bytes,
               plans[r].workspace_bytes / (1024.0 * 1024.0));
    printf("cache         %s (--kv-cache): %zu B per position per rank (latent %d + k_pe %d, %d layers); workspace "
           "planned for %d multiprocessors\n", kv_cache_format_name(kv_cache), plans[0].cache_bytes_per_position,
           c->kv_lora_rank, c->qk_rope_dim, c->layers, sms);
    printf("tightest      device %d: %.2f GiB free, %.3f GiB fixed (weights and workspace of %d rank%s + %.2f GiB "
           "reserve)\n", p->tightest, p->free_bytes / GIB, p->fixed_bytes / GIB, p->ranks_on_tightest,
           p->ranks_on_tightest > 1 ? "s" : "", DEVICE_RESERVE_BYTES / GIB);
    if (p->max_context > c->max_position)
        printf("max context   %ld positions: max_position_embeddings (memory would fit %ld)\n", max_context,
               p->max_context);
    else
        printf("max context   %ld positions fit on the tightest device (max_position_embeddings %d)\n", max_context,
               c->max_position);
}

int probe_plan(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    const char *dir;
    long tp, sms;
    int devices[DEVICE_MAX_RANKS], n_devices = 0, n_visible = 0;
    static size_t free_bytes[DEVICE_MAX_ORDINAL + 1];
    kv_cache_format kv_cache;
    if (probe_args_parse(&a, argc, argv, "model,tp,devices,device-memory,sms,json,kv-cache", &err) ||
        probe_arg_kv_cache(&a, &kv_cache, &err) ||
        probe_arg_required(&a, "model", &dir, &err) || probe_arg_int(&a, "tp", 1, DEVICE_MAX_RANKS, 1, &tp, &err) ||
        probe_arg_int(&a, "sms", 1, 4096, 132, &sms, &err) || probe_arg_devices(&a, devices, &n_devices, &err) ||
        plan_devices(&a, (int)tp, devices, n_devices, free_bytes, &n_visible, &err))
        return probe_report(&err);
    const char *json = probe_arg(&a, "json");
    if (json && *json) {
        kimi_fail(&err, KIMI_ERR_USAGE, "--json takes no value (got '%s')", json);
        return probe_report(&err);
    }
    /* the devices as given: what they have free is what they hold (a device's total memory
     * only has to match the others') */
    device_assignment da;
    if (device_assign((int)tp, n_devices ? devices : NULL, n_devices, free_bytes, n_visible, NULL, &da, &err))
        return probe_report(&err);
    model_weights mw;
    if (weights_load(&mw, dir, &err))
        return probe_report(&err);
    device_rank_plan plans[DEVICE_MAX_RANKS];
    int rc = config_check_tp(&mw.cfg, (int)tp, &err);
    for (int r = 0; !rc && r < tp; r++)
        rc = device_rank_plan_make(&mw, (int)tp, r, device_attention_splits(0x7FFFFFFFL, (int)sms), kv_cache, &plans[r],
                                   &err);
    if (rc) {
        weights_free(&mw);
        return probe_report(&err);
    }
    device_memory_plan p;
    device_memory_plan_make(plans, &da, free_bytes, DEVICE_RESERVE_BYTES, &p);
    long max_context = p.max_context < mw.cfg.max_position ? p.max_context : mw.cfg.max_position;
    if (json)
        print_plan_json(&mw.cfg, &da, plans, free_bytes, &p, max_context, kv_cache);
    else
        print_plan_human(&mw.cfg, &da, plans, free_bytes, &p, max_context, (int)sms, kv_cache);
    weights_free(&mw);
    if (p.max_context > 0)
        return 0;
    kimi_fail(&err, KIMI_ERR_NOMEM, "device %d: the weights and workspace of its %d rank%s (%.3f GiB with the reserve) "
              "leave no room for a cache in %.2f GiB", p.tightest, p.ranks_on_tightest,
              p.ranks_on_tightest > 1 ? "s" : "", p.fixed_bytes / GIB, p.free_bytes / GIB);
    return probe_report(&err);
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
