/* decode_table: see decode_table.h. */
#include "tests/gpu/decode_table.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/backend/device_census.h"
#include "engine/backend/device_plan.h"
#include "kernels/cuda/forward.h"
#include "kernels/kv_format.h"
#include "tests/gpu/bench_device.h"
#include "tests/gpu/gpu_test.h"

/* The box the projection is for: 8x NVIDIA RTX PRO 6000 Blackwell (Server Edition), PCIe.
 * - 1.8 TB/s: its GDDR7 bandwidth, 1792 GB/s in NVIDIA's datasheet, standing in for its copy
 *   bandwidth (a bandwidth-bound item's time is scaled by this device's measured copy bandwidth
 *   over it: it assumes the kernels reach the same fraction of the copy bandwidth there, and
 *   that its copy bandwidth is its datasheet figure, which flatters it by the copy/spec gap);
 * - 188 SMs (datasheet): the count the attention's splits are planned for there
 *   (device_attention_splits), printed with the projection; its waves cannot be measured here;
 * - a kernel launch inside a graph: this device's measured empty kernel (no figure for that box
 *   is published; the graph's per-node cost is the front end's, not the memory's);
 * - an all-reduce of `hidden` fp32 over 8 GPUs on PCIe: 10 us for the one-shot all-reduce over
 *   peer access the issue plans (8-12 us published for this size on 8 PCIe GPUs, docs/CUDA.md),
 *   and 24 us for NCCL there (the review, docs/CUDA.md), printed as the alternative. */
#define RTX_BYTES_S 1.8e12
#define RTX_SMS 188
#define RTX_ONE_SHOT_ALLREDUCE_S 10e-6
#define RTX_NCCL_ALLREDUCE_S 24e-6
#define GOAL_TOK_S 150.0        /* issue 20 */
#define SEEDS_TOK_S 60.0        /* the seed deployment on that box (NVFP4, issue 20: 53-55 published) */

static const long contexts[DECODE_TABLE_CONTEXTS] = {0, 32768, 131072};

static const struct {
    const char *key, *what;
} items[DECODE_TABLE_ITEMS] = {
    [ITEM_MERGE] = {"merge", "MLA split merge: decode attention over 1 key, splits for the capacity"},
    [ITEM_ATTENTION] = {"attention", "decode attention: cache read (at the context, less the merge)"},
    [ITEM_ABSORB] = {"absorb_q", "absorb_q with q_pe's rope (W_UK)"},
    [ITEM_PROJECTIONS] = {"bf16_proj", "BF16 GEMVs: q_a+kv_a (norms, rope, cache row), q_b, W_UV, o_proj"},
    [ITEM_ROUTER] = {"router", "router GEMV + routing"},
    [ITEM_EXPERTS] = {"nvfp4_moe", "NVFP4 GEMV: routed + shared experts, gate/up then down + combine"},
    [ITEM_DENSE] = {"nvfp4_dense", "NVFP4 GEMV: dense MLP slice"},
    [ITEM_NORMS] = {"norms", "residual add + rmsnorm (2 per layer, + the input norm)"},
    [ITEM_LM_HEAD] = {"lm_head", "lm_head rows (BF16 GEMV)"},
};

int decode_table_count(const model_config *cfg, decode_table_item item, int with_logits)
{
    int moe = 0;
    for (int i = 0; i < cfg->layers; i++)
        moe += config_layer_is_moe(cfg, i) != 0;
    switch (item) {
    case ITEM_MERGE: case ITEM_ATTENTION: case ITEM_ABSORB: case ITEM_PROJECTIONS:
        return cfg->layers;
    case ITEM_ROUTER: case ITEM_EXPERTS:
        return moe;
    case ITEM_DENSE:
        return cfg->layers - moe;
    case ITEM_NORMS:
        return 2 * cfg->layers + 1;
    case ITEM_LM_HEAD:
        return with_logits ? 1 : 0;
    case DECODE_TABLE_ITEMS:
        break;
    }
    return 0;
}

/* ---- what the items run ----------------------------------------------------------------- */

typedef struct {
    weight_matrix q_a, kv_a, q_b, kv_b, o;
} attention_weights;

typedef struct {
    const model_config *cfg;
    int heads, moe_inter, dense_inter, vocab_rows, top_k;
    device_workspace l;
    float *ws;
    gemv_scratch gemv;
    int *pos;                   /* 0: the position the projections write and rope at */
    int *decode_pos;            /* the attention's position */
    double *inv_freq;
    unsigned *clamps;
    float *norm, *bias;         /* [max(hidden, q_lora, kv_lora)] ones-ish; [experts] */
    void *row_cache;            /* one cache row (position 0) for mla_qkv_a_cuda */
    moe_routing_config routing;
    int copies;                 /* weight copies of the item being timed: instance i uses i % copies */
    attention_weights *attn;    /* [copies] */
    weight_matrix *single;      /* [copies]: router, lm_head */
    mlp_device *tables;         /* device: [copies] dense tables, or [1 + experts] (entry 0: shared) */
    int *slot_tables;           /* device: [instances][top_k + 1] experts' table entries */
    int *chosen;                /* device: [instances][top_k] */
    void **caches;              /* [copies] latent caches */
    int splits;
} table_ctx;

static float *ws(const table_ctx *c, size_t offset)
{
    return c->ws + offset;
}

/* n floats of the workspace at offset: bench_device_floats' values. */
static void ws_fill(table_ctx *c, size_t offset, size_t n, float value)
{
    float *d = bench_device_floats(n, value);
    CUDA_CHECK(cudaMemcpy(c->ws + offset, d, n * sizeof *d, cudaMemcpyDeviceToDevice));
    cudaFree(d);
}

typedef int (*instance_fn)(table_ctx *c, int i, cudaStream_t s);

/* The smallest launch forward.h has (one block adding one float): a graph node's own cost. */
static int run_empty(table_ctx *c, int i, cudaStream_t s)
{
    (void)i;
    return add_cuda(ws(c, c->l.h), ws(c, c->l.partial), 1, s);
}

static int run_attention(table_ctx *c, int i, cudaStream_t s)
{
    const model_config *m = c->cfg;
    return mla_decode_cuda(ws(c, c->l.q_latent), ws(c, c->l.q), c->heads, m->kv_lora_rank, m->qk_rope_dim,
                           m->qk_nope_dim, 0.1f, c->caches[i % c->copies], KV_CACHE_FP16, c->decode_pos, c->splits,
                           ws(c, c->l.attn_partials), ws(c, c->l.o_latent), 1, s);
}

static int run_absorb(table_ctx *c, int i, cudaStream_t s)
{
    const model_config *m = c->cfg;
    return mla_absorb_q_rope_cuda(&c->attn[i % c->copies].kv_b, c->heads, m->qk_nope_dim, m->v_head_dim,
                                  m->qk_rope_dim, ws(c, c->l.q), m->qk_nope_dim + m->qk_rope_dim,
                                  ws(c, c->l.q_latent), c->inv_freq, 1.0, c->pos, 1, s);
}

/* The attention's projections as backend_cuda.c's decode step runs them. */
static int run_projections(table_ctx *c, int i, cudaStream_t s)
{
    const model_config *m = c->cfg;
    const attention_weights *w = &c->attn[i % c->copies];
    size_t heads = (size_t)c->heads, kv_lora = (size_t)m->kv_lora_rank;
    mla_qkv_tail tail = {c->norm, c->norm, m->rms_norm_eps, m->kv_lora_rank, m->qk_rope_dim, c->inv_freq, 1.0,
                         c->pos, c->row_cache, KV_CACHE_FP16, c->clamps};
    int rc = mla_qkv_a_cuda(&w->q_a, &w->kv_a, ws(c, c->l.x), ws(c, c->l.q_a), ws(c, c->l.kv), &tail, &c->gemv, s);
    if (!rc)
        rc = linear_gemv_tokens_cuda(&w->q_b, w->q_b.rows, 1, 0, ws(c, c->l.q_a), 0, (size_t)m->q_lora_rank,
                                     ws(c, c->l.q), 0, (size_t)w->q_b.rows, 1, &c->gemv, s);
    weight_matrix w_uv = w->kv_b;   /* rows [nope, nope + v) of each head's kv_b rows */
    w_uv.data += (size_t)m->qk_nope_dim * w_uv.data_stride;
    if (w_uv.scale)
        w_uv.scale += (size_t)m->qk_nope_dim * w_uv.scale_stride;
    if (!rc)
        rc = linear_gemv_tokens_cuda(&w_uv, m->v_head_dim, c->heads, m->qk_nope_dim + m->v_head_dim,
                                     ws(c, c->l.o_latent), kv_lora, heads * kv_lora, ws(c, c->l.attn),
                                     (size_t)m->v_head_dim, heads * (size_t)m->v_head_dim, 1, &c->gemv, s);
    if (!rc)
        rc = linear_gemv_tokens_cuda(&w->o, w->o.rows, 1, 0, ws(c, c->l.attn), 0, heads * (size_t)m->v_head_dim,
                                     ws(c, c->l.partial), 0, (size_t)w->o.rows, 1, &c->gemv, s);
    return rc;
}

static int run_router(table_ctx *c, int i, cudaStream_t s)
{
    return moe_router_route_cuda(&c->single[i % c->copies], ws(c, c->l.x), ws(c, c->l.router_logits), &c->routing,
                                 c->bias, (int *)ws(c, c->l.chosen), ws(c, c->l.route_weights),
                                 (int *)ws(c, c->l.moe_order), &c->gemv, s);
}

/* Instance i's top_k + 1 slots read experts no other of the graph's first instances read (the
 * shared expert's slot too: it has the routed experts' shape), so the weights come from memory. */
static int run_experts(table_ctx *c, int i, cudaStream_t s)
{
    const model_config *m = c->cfg;
    int k = c->top_k, slots = k + 1;
    const int *slot_table = c->slot_tables + (size_t)i * (size_t)slots;
    int rc = mlp_gate_up_cuda(c->tables, slot_table, slots, slots, ws(c, c->l.x), m->hidden, c->moe_inter,
                              ws(c, c->l.act), s);
    if (!rc)
        rc = mlp_down_combine_cuda(c->tables, slot_table, k, 1, ws(c, c->l.act), m->hidden, c->moe_inter,
                                   ws(c, c->l.routed_y), c->chosen + (size_t)i * (size_t)k, ws(c, c->l.route_weights),
                                   ws(c, c->l.partial), NULL, &c->gemv, s);
    return rc;
}

static int run_dense(table_ctx *c, int i, cudaStream_t s)
{
    const model_config *m = c->cfg;
    const mlp_device *table = c->tables + i % c->copies;
    int rc = mlp_gate_up_cuda(table, NULL, 1, 1, ws(c, c->l.x), m->hidden, c->dense_inter, ws(c, c->l.act), s);
    if (!rc)
        rc = mlp_down_cuda(table, NULL, 1, ws(c, c->l.act), m->hidden, c->dense_inter, ws(c, c->l.partial), s);
    return rc;
}

static int run_norms(table_ctx *c, int i, cudaStream_t s)
{
    (void)i;
    const model_config *m = c->cfg;
    return residual_rmsnorm_cuda(ws(c, c->l.h), ws(c, c->l.partial), ws(c, c->l.x), c->norm, 1, m->hidden,
                                 m->rms_norm_eps, s);
}

static int run_lm_head(table_ctx *c, int i, cudaStream_t s)
{
    const model_config *m = c->cfg;
    const weight_matrix *w = &c->single[i % c->copies];
    return linear_gemv_tokens_cuda(w, w->rows, 1, 0, ws(c, c->l.x), 0, (size_t)m->hidden, ws(c, c->l.logits_part), 0,
                                   (size_t)w->rows, 1, &c->gemv, s);
}

/* kv_b (W_UK then W_UV per head) of a rank's heads; with `all`, q_a, kv_a, q_b and o_proj too. */
static void attention_weights_alloc(const model_config *m, int heads, int all, attention_weights *w)
{
    size_t b;
    w->kv_b = bench_device_matrix(WEIGHT_BF16, heads * (m->qk_nope_dim + m->v_head_dim), m->kv_lora_rank, &b);
    if (!all)
        return;
    w->q_a = bench_device_matrix(WEIGHT_BF16, m->q_lora_rank, m->hidden, &b);
    w->kv_a = bench_device_matrix(WEIGHT_BF16, m->kv_lora_rank + m->qk_rope_dim, m->hidden, &b);
    w->q_b = bench_device_matrix(WEIGHT_BF16, heads * (m->qk_nope_dim + m->qk_rope_dim), m->q_lora_rank, &b);
    w->o = bench_device_matrix(WEIGHT_BF16, m->hidden, heads * m->v_head_dim, &b);
}

/* ---- timing ------------------------------------------------------------------------------- */

/* Kernels the graph runs: counted by the emulator's census on a replay (it has no graph
 * introspection), by the graph's kernel nodes on a device. */
static double graph_kernels(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t s)
{
#ifdef KIMI_CUDA_EMU
    (void)graph;
    kimi_err err = {0};
    device_census census;
    if (device_census_begin(&err))
        return -1;
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (device_census_end(0, &census, &err))
        return -1;
    return (double)census.launches;
#else
    (void)exec;
    (void)s;
    size_t n = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph, NULL, &n));
    cudaGraphNode_t *nodes = malloc((n ? n : 1) * sizeof *nodes);
    CUDA_CHECK(cudaGraphGetNodes(graph, nodes, &n));
    size_t kernels = 0;
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType type;
        CUDA_CHECK(cudaGraphNodeGetType(nodes[i], &type));
        kernels += type == cudaGraphNodeTypeKernel;
    }
    free(nodes);
    return (double)kernels;
#endif
}

/* Seconds of one instance: `instances` captured back to back in one graph, the best of `replays`
 * replays (after one off the clock) over instances; *launches: kernels per instance. */
static double time_instances(table_ctx *c, instance_fn fn, int instances, int replays, double *launches)
{
    cudaStream_t s;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    int rc = 0;
    for (int i = 0; i < instances && !rc; i++)
        rc = fn(c, i, s);
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    CUDA_CHECK(rc);
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    *launches = graph_kernels(graph, exec, s) / instances;   /* the replay off the clock, on the emulator */
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    float best = 1e30f;
    for (int r = 0; r < replays; r++) {
        float ms;
        CUDA_CHECK(cudaEventRecord(start, s));
        CUDA_CHECK(cudaGraphLaunch(exec, s));
        CUDA_CHECK(cudaEventRecord(stop, s));
        CUDA_CHECK(cudaEventSynchronize(stop));
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        best = ms < best ? ms : best;
    }
    /* the events before their stream (the emulator's event refers to it) */
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    return best * 1e-3 / instances;
}

/* Weight copies an item's instances cycle through, and *instances, the instances in its graph
 * (at least base, at most 128), so that together they read at least twice the L2 cache: its
 * weights then come from memory, as a decode step's do. */
static int copies_for(double bytes, int base, double l2_bytes, int *instances)
{
    int copies = bytes > 0 ? (int)ceil(2.0 * l2_bytes / bytes) : 1;
    copies = copies < 1 ? 1 : copies > 128 ? 128 : copies;
    *instances = copies > base ? copies : base;
    return copies;
}

/* ---- shapes and bytes ------------------------------------------------------------------- */

static double nvfp4_bytes(int rows, int cols)
{
    return (double)rows * ((double)cols / 2 + (double)cols / 16);
}

static double bf16_bytes(int rows, int cols)
{
    return 2.0 * rows * (double)cols;
}

/* One instance's floor bytes at context ctx: the weights (and cache rows, or partials) it must
 * read; the norms' activations (h read and written, delta, weight, out). Activations of the
 * GEMVs are left out (under 0.1% of their weights). */
static void floor_bytes(const model_config *m, decode_table *t)
{
    int heads = t->heads, nope = m->qk_nope_dim, rope = m->qk_rope_dim, v = m->v_head_dim;
    int kv_lora = m->kv_lora_rank, hidden = m->hidden;
    double row = (double)kv_row_bytes(KV_CACHE_FP16, kv_lora, rope);
    for (int x = 0; x < DECODE_TABLE_CONTEXTS; x++) {
        long ctx = t->contexts[x];
        /* a merge of the splits with work: as many as a cache of the current length plans */
        int needed = device_attention_splits(ctx > 0 ? ctx : 1, t->sm_count);
        double b[DECODE_TABLE_ITEMS] = {
            [ITEM_MERGE] = (double)needed * heads * (kv_lora + 2) * 4.0,
            [ITEM_ATTENTION] = row * (double)ctx,
            [ITEM_ABSORB] = bf16_bytes(heads * nope, kv_lora),
            [ITEM_PROJECTIONS] = bf16_bytes(m->q_lora_rank + kv_lora + rope, hidden) +
                                 bf16_bytes(heads * (nope + rope), m->q_lora_rank) + bf16_bytes(heads * v, kv_lora) +
                                 bf16_bytes(hidden, heads * v),
            [ITEM_ROUTER] = bf16_bytes(m->experts, hidden),
            [ITEM_EXPERTS] = (m->experts_per_token + 1) * 3 * nvfp4_bytes(t->moe_inter, hidden),
            [ITEM_DENSE] = 3 * nvfp4_bytes(t->dense_inter, hidden),
            [ITEM_NORMS] = 5.0 * hidden * 4,
            [ITEM_LM_HEAD] = bf16_bytes(t->vocab_rows, hidden),
        };
        for (int i = 0; i < DECODE_TABLE_ITEMS; i++)
            t->bytes[i][x] = b[i];
    }
}

/* ---- the table ------------------------------------------------------------------------------ */

static void print_table(const model_config *m, const decode_table *t, const decode_table_options *opt)
{
    double scale = opt->copy_bandwidth / RTX_BYTES_S;
    double launch_rtx = t->empty_s;
    int layers = m->layers, allreduces = 2 * layers;
    const char *emulated = t->emulated ? " [emulated, not GPU times]" : "";
    printf("\n== decode table, one token on rank 0 of TP %d: %s; %d layers (%d dense + %d MoE)%s\n", opt->tp,
           opt->source, layers, decode_table_count(m, ITEM_DENSE, 0), decode_table_count(m, ITEM_EXPERTS, 0),
           emulated);
    printf("copy bandwidth %.3f GB/s; empty kernel in a graph %.3f us; %d SMs, %d attention splits (capacity %ld)%s\n",
           opt->copy_bandwidth / 1e9, t->empty_s * 1e6, t->sm_count, t->splits, contexts[DECODE_TABLE_CONTEXTS - 1] + 1,
           emulated);
    printf("projection (8x RTX PRO 6000 Blackwell, a projection until measured on that box): %.0f GB/s "
           "(bandwidth-bound time x %.4f), %d SMs (%d splits there), launch %.3f us (this device's), all-reduce "
           "%.0f us one-shot (NCCL: %.0f us)\n", RTX_BYTES_S / 1e9, scale, RTX_SMS,
           device_attention_splits(contexts[DECODE_TABLE_CONTEXTS - 1] + 1, RTX_SMS), launch_rtx * 1e6,
           RTX_ONE_SHOT_ALLREDUCE_S * 1e6, RTX_NCCL_ALLREDUCE_S * 1e6);
    double launches_per_token = 0;
    for (int i = 0; i < DECODE_TABLE_ITEMS; i++)
        launches_per_token += decode_table_count(m, i, 1) * t->launches[i];
    double launch_goal = 10.0 * layers + 16;   /* issue 20: <= 10 launches per layer + 16 */
    for (int x = 0; x < DECODE_TABLE_CONTEXTS; x++) {
        double measured = 0, floor = 0, rtx = 0;
        printf("context %ld positions%s\n", t->contexts[x], emulated);
        printf("  %-12s %6s %8s %12s %12s %10s %8s %12s  %s\n", "item", "count", "kernels", "bytes", "measured_us",
               "floor_us", "ratio", "rtx_us", "what");
        for (int i = 0; i < DECODE_TABLE_ITEMS; i++) {
            int n = decode_table_count(m, i, 1);
            double sec = t->seconds[i][x], bytes = t->bytes[i][x] * n;
            double item_s = n * sec, floor_s = bytes / opt->copy_bandwidth;
            double launch_s = t->launches[i] * t->empty_s;
            double streaming = sec > launch_s ? sec - launch_s : 0;
            double item_rtx = n * (streaming * scale + t->launches[i] * launch_rtx);
            char ratio[32] = "-";
            if (floor_s > 0)
                snprintf(ratio, sizeof ratio, "%.2f", item_s / floor_s);
            printf("  %-12s %6d %8.0f %12.0f %12.3f %10.3f %8s %12.3f  %s\n", items[i].key, n, n * t->launches[i], bytes,
                   item_s * 1e6, floor_s * 1e6, ratio, item_rtx * 1e6, items[i].what);
            measured += item_s;
            floor += floor_s;
            rtx += item_rtx;
        }
        /* inside the items' times (each kernel's graph node), so not added again */
        printf("  %-12s %6s %8.0f %12s %12.3f %10.3f %8.2f %12.3f  %s\n", "launches", "-", launches_per_token, "-",
               launches_per_token * t->empty_s * 1e6, launch_goal * t->empty_s * 1e6, launches_per_token / launch_goal,
               launches_per_token * launch_rtx * 1e6,
               "kernel launches x empty kernel (inside the items above; floor: the goal of 10 per layer + 16)");
        double ar_rtx = allreduces * RTX_ONE_SHOT_ALLREDUCE_S;
        if (opt->allreduce_s > 0) {
            printf("  %-12s %6d %8s %12.0f %12.3f %10s %8s %12.3f  %s over %d GPUs (NCCL, measured)\n", "allreduce",
                   allreduces, "-", 4.0 * m->hidden * allreduces, allreduces * opt->allreduce_s * 1e6, "-", "-",
                   ar_rtx * 1e6, "all-reduces of hidden fp32", opt->allreduce_ranks);
            measured += allreduces * opt->allreduce_s;
        } else {
            printf("  %-12s %6d %8s %12.0f %12s %10s %8s %12.3f  %s\n", "allreduce", allreduces, "-",
                   4.0 * m->hidden * allreduces, "-", "-", "-", ar_rtx * 1e6,
                   "all-reduces of hidden fp32: not measurable on one device (projection: one-shot)");
        }
        rtx += ar_rtx;
        printf("  %-12s %6s %8s %12s %12s %10s %8s %12s  %s\n", "waves", "-", "-", "-", "-", "-", "-", "-",
               "uneven waves: not separable, inside the GEMV items' ratios (grids vs SMs)");
        printf("  total: measured %.3f ms/token (%.1f tok/s)%s, floor %.3f ms; projection %.3f ms/token "
               "(%.1f tok/s) [goal >= %.0f tok/s: %s; seeds ~%.0f tok/s]%s\n",
               measured * 1e3, 1.0 / measured, opt->allreduce_s > 0 ? "" : " without all-reduces", floor * 1e3,
               rtx * 1e3, 1.0 / rtx, GOAL_TOK_S, 1.0 / rtx >= GOAL_TOK_S ? "met" : "not met", SEEDS_TOK_S, emulated);
        printf("  projection with NCCL all-reduces (%.0f us): %.3f ms/token (%.1f tok/s)\n",
               RTX_NCCL_ALLREDUCE_S * 1e6, (rtx - ar_rtx + allreduces * RTX_NCCL_ALLREDUCE_S) * 1e3,
               1.0 / (rtx - ar_rtx + allreduces * RTX_NCCL_ALLREDUCE_S));
        if (x == 0)
            continue;
        /* docs/CUDA.md: at long context the step is bound by the empty step plus the cache read */
        double empty_rtx = 0, cache_bytes = t->bytes[ITEM_ATTENTION][x] * decode_table_count(m, ITEM_ATTENTION, 1);
        for (int i = 0; i < DECODE_TABLE_ITEMS; i++) {
            int n = decode_table_count(m, i, 1);
            double launch_s = t->launches[i] * t->empty_s, sec = t->seconds[i][0];
            empty_rtx += n * ((sec > launch_s ? sec - launch_s : 0) * scale + t->launches[i] * launch_rtx);
        }
        empty_rtx += ar_rtx;
        double bound = empty_rtx + cache_bytes / RTX_BYTES_S;
        printf("  cache-read bound (projection at 0 + %.0f cache bytes at %.0f GB/s): %.3f ms; projection / bound "
               "%.3f [goal at 128k: <= 1.10]\n", cache_bytes, RTX_BYTES_S / 1e9, bound * 1e3, rtx / bound);
    }
}

int decode_table_run(const model_config *m, const decode_table_options *opt, decode_table *t)
{
    memset(t, 0, sizeof *t);
    memcpy(t->contexts, contexts, sizeof contexts);
    int tp = opt->tp;
    if (tp < 1 || m->heads % tp || m->moe_intermediate % tp || m->intermediate % tp || m->vocab % tp ||
        m->shared_experts * m->moe_intermediate % tp) {
        printf("decode table: %s does not split over %d ranks\n", opt->source, tp);
        return 1;
    }
    if (m->shared_experts != 1 || m->experts_per_token + 1 > m->experts) {
        /* the decode step runs the shared expert as slot top_k of the routed launches only then */
        printf("decode table: %s: needs one shared expert of the routed width and more experts than top_k\n",
               opt->source);
        return 1;
    }
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    t->emulated = !strncmp(prop.name, "cuemu", 5);
    double l2 = 0;
#ifndef KIMI_CUDA_EMU
    int l2_int = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&l2_int, cudaDevAttrL2CacheSize, 0));
    l2 = l2_int;
#endif
    t->hidden = m->hidden;
    t->q_lora = m->q_lora_rank;
    t->kv_lora = m->kv_lora_rank;
    t->experts = m->experts;
    t->heads = m->heads / tp;
    t->moe_inter = m->moe_intermediate / tp;
    t->dense_inter = m->intermediate / tp;
    t->vocab_rows = m->vocab / tp;
    t->sm_count = prop.multiProcessorCount;
    t->splits = device_attention_splits_for(device_attention_splits(contexts[DECODE_TABLE_CONTEXTS - 1] + 1,
                                                                    t->sm_count), 1);
    floor_bytes(m, t);

    table_ctx c = {.cfg = m, .heads = t->heads, .moe_inter = t->moe_inter, .dense_inter = t->dense_inter,
                   .vocab_rows = t->vocab_rows, .top_k = m->experts_per_token, .splits = t->splits};
    tp_shard shard = {.tp = tp, .rank = 0, .heads = {0, t->heads}, .dense_inter = {0, t->dense_inter},
                      .moe_inter = {0, t->moe_inter}, .shared_inter = {0, t->moe_inter}, .vocab = {0, t->vocab_rows}};
    device_workspace_plan(m, &shard, t->splits, &c.l);
    CUDA_CHECK(cudaMalloc((void **)&c.ws, c.l.total * sizeof(float)));
    CUDA_CHECK(cudaMemset(c.ws, 0, c.l.total * sizeof(float)));
    /* activations the kernels read: small finite values */
    ws_fill(&c, c.l.x, (size_t)m->hidden, 0.5f);
    c.gemv = (gemv_scratch){c.ws + c.l.gemv_partials, (unsigned *)(c.ws + c.l.gemv_counters),
                            device_max_gemv_rows(m, &shard), t->sm_count};
    int zero = 0;
    c.pos = gpu_test_upload(&zero, sizeof zero);
    c.clamps = gpu_test_upload(&zero, sizeof zero);
    int widest = m->hidden > m->q_lora_rank ? m->hidden : m->q_lora_rank;
    c.norm = bench_device_floats((size_t)widest, 1.0f);
    c.bias = bench_device_floats((size_t)m->experts, 0.0f);
    double *freq = malloc((size_t)(m->qk_rope_dim / 2) * sizeof *freq);
    for (int i = 0; i < m->qk_rope_dim / 2; i++)
        freq[i] = pow(m->rope_theta, -2.0 * i / m->qk_rope_dim);
    c.inv_freq = gpu_test_upload(freq, (size_t)(m->qk_rope_dim / 2) * sizeof *freq);
    free(freq);
    size_t row = kv_row_bytes(KV_CACHE_FP16, m->kv_lora_rank, m->qk_rope_dim);
    CUDA_CHECK(cudaMalloc(&c.row_cache, row));
    c.routing = (moe_routing_config){m->experts, m->experts_per_token, m->n_group, m->topk_group, m->norm_topk_prob,
                                     m->routed_scaling_factor};

    int base = opt->quick ? 2 : 8, replays = opt->quick ? 1 : 5, instances;
    double launches;
    t->empty_s = time_instances(&c, run_empty, 8 * base, replays, &launches);

    /* attention at each context (the merge: over one key) */
    CUDA_CHECK(mla_attention_setup_cuda(m->kv_lora_rank, m->qk_rope_dim));
    long most = contexts[DECODE_TABLE_CONTEXTS - 1];
    c.copies = copies_for((double)row * (double)contexts[1], base, l2, &instances);   /* the shortest read */
    c.caches = malloc((size_t)c.copies * sizeof *c.caches);
    for (int i = 0; i < c.copies; i++) {
        CUDA_CHECK(cudaMalloc(&c.caches[i], row * (size_t)most));
        CUDA_CHECK(cudaMemset(c.caches[i], 0x11, row * (size_t)most));
    }
    ws_fill(&c, c.l.q_latent, (size_t)t->heads * (size_t)m->kv_lora_rank, 0.01f);
    ws_fill(&c, c.l.q, (size_t)t->heads * (size_t)(m->qk_nope_dim + m->qk_rope_dim), 0.01f);
    c.decode_pos = gpu_test_upload(&zero, sizeof zero);
    double merge = time_instances(&c, run_attention, instances, replays, &t->launches[ITEM_MERGE]);
    t->launches[ITEM_ATTENTION] = 0;    /* the same launches as the merge's, counted there */
    for (int x = 0; x < DECODE_TABLE_CONTEXTS; x++) {
        t->seconds[ITEM_MERGE][x] = merge;
        if (contexts[x] == 0)
            continue;
        int pos = (int)contexts[x] - 1;
        CUDA_CHECK(cudaMemcpy(c.decode_pos, &pos, sizeof pos, cudaMemcpyHostToDevice));
        double whole = time_instances(&c, run_attention, instances, replays, &launches);
        t->seconds[ITEM_ATTENTION][x] = whole > merge ? whole - merge : 0;
    }
    for (int i = 0; i < c.copies; i++)
        cudaFree(c.caches[i]);
    free(c.caches);

    /* the attention's weights (BF16): W_UK's small reads on copies of kv_b alone first */
    double absorb = 0, projections = 0;
    for (int phase = 0; phase < 2; phase++) {
        c.copies = copies_for(t->bytes[phase ? ITEM_PROJECTIONS : ITEM_ABSORB][0], base, l2, &instances);
        c.attn = calloc((size_t)c.copies, sizeof *c.attn);
        for (int i = 0; i < c.copies; i++)
            attention_weights_alloc(m, t->heads, phase, &c.attn[i]);
        if (phase)
            projections = time_instances(&c, run_projections, instances, replays, &t->launches[ITEM_PROJECTIONS]);
        else
            absorb = time_instances(&c, run_absorb, instances, replays, &t->launches[ITEM_ABSORB]);
        for (int i = 0; i < c.copies; i++) {
            const weight_matrix *all[5] = {&c.attn[i].q_a, &c.attn[i].kv_a, &c.attn[i].q_b, &c.attn[i].kv_b,
                                           &c.attn[i].o};
            for (int j = 0; j < 5; j++)
                cudaFree((void *)all[j]->data);
        }
        free(c.attn);
    }

    /* router, then lm_head: one matrix each */
    size_t b;
    double single[2];
    instance_fn single_fn[2] = {run_router, run_lm_head};
    decode_table_item single_item[2] = {ITEM_ROUTER, ITEM_LM_HEAD};
    for (int k = 0; k < 2; k++) {
        decode_table_item item = single_item[k];
        c.copies = copies_for(t->bytes[item][0], base, l2, &instances);
        c.single = malloc((size_t)c.copies * sizeof *c.single);
        for (int i = 0; i < c.copies; i++)
            c.single[i] = item == ITEM_ROUTER ? bench_device_matrix(WEIGHT_BF16, m->experts, m->hidden, &b)
                                              : bench_device_matrix(WEIGHT_BF16, t->vocab_rows, m->hidden, &b);
        single[k] = time_instances(&c, single_fn[k], instances, replays, &t->launches[item]);
        for (int i = 0; i < c.copies; i++)
            cudaFree((void *)c.single[i].data);
        free(c.single);
    }

    /* the experts: entry 0 the shared expert, 1 + e routed expert e (the backend's table); each
     * instance's slots take the next top_k + 1 experts in turn */
    int k = m->experts_per_token, entries = m->experts + 1;
    copies_for(t->bytes[ITEM_EXPERTS][0], base, l2, &instances);
    mlp_device *table = malloc((size_t)entries * sizeof *table);
    for (int e = 0; e < entries; e++) {
        table[e].gate = bench_device_matrix(WEIGHT_NVFP4, t->moe_inter, m->hidden, &b);
        table[e].up = bench_device_matrix(WEIGHT_NVFP4, t->moe_inter, m->hidden, &b);
        table[e].down = bench_device_matrix(WEIGHT_NVFP4, m->hidden, t->moe_inter, &b);
    }
    c.tables = gpu_test_upload(table, (size_t)entries * sizeof *table);
    int *slots = malloc((size_t)instances * (size_t)(k + 1) * sizeof *slots);
    int *chosen = malloc((size_t)instances * (size_t)k * sizeof *chosen);
    for (int i = 0; i < instances; i++)
        for (int j = 0; j <= k; j++) {
            int expert = (i * (k + 1) + j) % m->experts;
            slots[i * (k + 1) + j] = 1 + expert;
            if (j < k)
                chosen[i * k + j] = expert;
        }
    c.slot_tables = gpu_test_upload(slots, (size_t)instances * (size_t)(k + 1) * sizeof *slots);
    c.chosen = gpu_test_upload(chosen, (size_t)instances * (size_t)k * sizeof *chosen);
    ws_fill(&c, c.l.route_weights, (size_t)k, 0.1f);
    double experts = time_instances(&c, run_experts, instances, replays, &t->launches[ITEM_EXPERTS]);
    free(slots);
    free(chosen);
    cudaFree(c.slot_tables);
    cudaFree(c.chosen);
    for (int e = 0; e < entries; e++) {
        cudaFree((void *)table[e].gate.data);
        cudaFree((void *)table[e].up.data);
        cudaFree((void *)table[e].down.data);
    }
    cudaFree(c.tables);
    free(table);

    /* the dense MLP slice */
    c.copies = copies_for(t->bytes[ITEM_DENSE][0], base, l2, &instances);
    table = malloc((size_t)c.copies * sizeof *table);
    for (int i = 0; i < c.copies; i++) {
        table[i].gate = bench_device_matrix(WEIGHT_NVFP4, t->dense_inter, m->hidden, &b);
        table[i].up = bench_device_matrix(WEIGHT_NVFP4, t->dense_inter, m->hidden, &b);
        table[i].down = bench_device_matrix(WEIGHT_NVFP4, m->hidden, t->dense_inter, &b);
    }
    c.tables = gpu_test_upload(table, (size_t)c.copies * sizeof *table);
    double dense = time_instances(&c, run_dense, instances, replays, &t->launches[ITEM_DENSE]);
    for (int i = 0; i < c.copies; i++) {
        cudaFree((void *)table[i].gate.data);
        cudaFree((void *)table[i].up.data);
        cudaFree((void *)table[i].down.data);
    }
    cudaFree(c.tables);
    free(table);

    double norms = time_instances(&c, run_norms, base, replays, &t->launches[ITEM_NORMS]);
    for (int x = 0; x < DECODE_TABLE_CONTEXTS; x++) {
        t->seconds[ITEM_ABSORB][x] = absorb;
        t->seconds[ITEM_PROJECTIONS][x] = projections;
        t->seconds[ITEM_ROUTER][x] = single[0];
        t->seconds[ITEM_LM_HEAD][x] = single[1];
        t->seconds[ITEM_EXPERTS][x] = experts;
        t->seconds[ITEM_DENSE][x] = dense;
        t->seconds[ITEM_NORMS][x] = norms;
    }
    cudaFree(c.ws);
    cudaFree(c.pos);
    cudaFree(c.decode_pos);
    cudaFree(c.clamps);
    cudaFree(c.norm);
    cudaFree(c.bias);
    cudaFree(c.inv_freq);
    cudaFree(c.row_cache);
    print_table(m, t, opt);
    return 0;
}

void decode_table_compare(const decode_table *t, const model_config *model, const double step_s[DECODE_TABLE_CONTEXTS])
{
    if (model->hidden != t->hidden || model->heads != t->heads || model->q_lora_rank != t->q_lora ||
        model->kv_lora_rank != t->kv_lora || model->experts != t->experts || model->moe_intermediate != t->moe_inter ||
        model->intermediate != t->dense_inter || model->vocab != t->vocab_rows) {
        printf("decode table: the checkpoint's shapes are not the table's rank shapes: no comparison\n");
        return;
    }
    printf("decode step of the checkpoint (%d layers: %d dense + %d MoE, TP 1, graphs on, no logits) against the "
           "items at its counts%s\n", model->layers, decode_table_count(model, ITEM_DENSE, 0),
           decode_table_count(model, ITEM_EXPERTS, 0), t->emulated ? " [emulated, not GPU times]" : "");
    for (int x = 0; x < DECODE_TABLE_CONTEXTS; x++) {
        double items_s = 0;
        for (int i = 0; i < DECODE_TABLE_ITEMS; i++)
            items_s += decode_table_count(model, i, 0) * t->seconds[i][x];
        printf("  context %6ld: step %.3f ms, items %.3f ms, unexplained remainder %.3f ms (%.1f%% of the step)\n",
               t->contexts[x], step_s[x] * 1e3, items_s * 1e3, (step_s[x] - items_s) * 1e3,
               100.0 * (step_s[x] - items_s) / step_s[x]);
    }
}
