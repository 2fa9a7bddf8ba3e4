/* bench_gpu: what tests/gpu/run.sh prints (speed is measured here, never asserted):
 *   - the device's copy bandwidth (cudaMemcpy device to device, read + write bytes per second);
 *   - each decode kernel at one rank's Kimi-K2.5 shapes (TP 8): bytes it must move / time, as a
 *     fraction of that bandwidth (goals: NVFP4 GEMV and the MoE step >= 0.8, attention at
 *     32k/128k context >= 0.7); the prefill attention of a 512-token step at 1k and 8k positions
 *     of context: the cache's bytes (read once per block of 16 query rows, mostly from L2) per
 *     second and its arithmetic rate (scores and weighted sums, 2 flops a multiply-add);
 *   - with --model (the `kimi-mkmodel --preset rank` checkpoint): decode time per layer with
 *     graphs on and off at 0, 32k and 128k positions of context, prefill tok/s at 1k and 8k
 *     tokens on both prefill paths (KIMI_CUDA_PREFILL=gemm, the default: steps of up to 512
 *     tokens, experts with 64+ tokens as GEMMs; =steps: steps of 64 on the decode kernels), and
 *     the projection for 8x RTX PRO 6000 (per-layer time scaled by bandwidth to
 *     1.8 TB/s, 61 layers, plus 122 all-reduces at a stated cost) next to the seeds' ~60 tok/s;
 *   - the decode table (tests/gpu/decode_table.h): per item of issue 20's table, one rank's
 *     measured us per token at 0/32k/128k context next to its floor, and the projection for 8x
 *     RTX PRO 6000, for Kimi-K2.5 at TP 8 (the config built in below) or --table-config DIR at
 *     --tp N; with --model, the items against the checkpoint's measured decode step;
 *   - with --model and --nccl N (N visible devices): one NCCL all-reduce of `hidden` floats over
 *     devices 0..N-1 (issued from one thread, as the backend's ranks issue theirs in parallel),
 *     the decode step of the model at TP N over NCCL (graphs on), and the all-reduces' share of
 *     that step (two per layer).
 * usage: bench_gpu [--model DIR] [--quick] [--nccl N] [--table-config DIR] [--tp N] [--table-only]
 *   --quick: fewer steps and instances, a 64 MiB copy; --table-only: the copy bandwidth and the
 *   decode table alone (exit 77 without a device) */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend/backend.h"
#include "engine/backend/device_plan.h"
#include "engine/model/weights.h"
#include "kernels/cuda/forward.h"
#include "tests/gpu/bench_device.h"
#include "tests/gpu/decode_table.h"
#include "tests/gpu/gpu_test.h"

#ifdef KIMI_HAVE_NCCL
#include <nccl.h>
#endif

#define RTX_PRO_6000_BYTES_S 1.8e12
#define NCCL_PCIE_ALLREDUCE_S 24e-6
#define ONE_SHOT_ALLREDUCE_S 10e-6
#define SEEDS_TOK_S 60.0

static double copy_bandwidth;   /* bytes / s */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void measure_copy_bandwidth(int quick)
{
    size_t bytes = quick ? (size_t)64 << 20 : (size_t)2 << 30;
    void *a = NULL, *b = NULL;
    CUDA_CHECK(cudaMalloc(&a, bytes));
    CUDA_CHECK(cudaMalloc(&b, bytes));
    CUDA_CHECK(cudaMemset(a, 1, bytes));
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    float best = 1e30f;
    for (int i = 0; i < (quick ? 2 : 6); i++) {
        cudaEventRecord(start, NULL);
        cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(stop, NULL);
        cudaEventSynchronize(stop);
        float ms;
        cudaEventElapsedTime(&ms, start, stop);
        best = ms < best ? ms : best;
    }
    copy_bandwidth = 2.0 * (double)bytes / (best * 1e-3);
    printf("copy bandwidth (device to device, read + write): %.0f GB/s\n", copy_bandwidth / 1e9);
    cudaFree(a);
    cudaFree(b);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
}

typedef int (*kernel_fn)(void *ctx);

/* Best time of `repeats` runs of fn (captured in a graph, so launch gaps are not measured). */
static double time_kernel(kernel_fn fn, void *ctx, int repeats)
{
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    *(cudaStream_t *)ctx = s;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    int rc = fn(ctx);
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    CHECK_INT(rc, 0);
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    float best = 1e30f;
    for (int i = 0; i < repeats; i++) {
        cudaEventRecord(start, s);
        cudaGraphLaunch(exec, s);
        cudaEventRecord(stop, s);
        cudaEventSynchronize(stop);
        float ms;
        cudaEventElapsedTime(&ms, start, stop);
        best = ms < best ? ms : best;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return best * 1e-3;
}

static void report(const char *what, double bytes, double seconds, double goal)
{
    double ratio = bytes / seconds / copy_bandwidth;
    printf("%-44s %9.1f us %8.1f GB/s  %.2f of copy bandwidth (goal %.1f)%s\n", what, seconds * 1e6,
           bytes / seconds / 1e9, ratio, goal, goal > 0 && ratio < goal ? "  BELOW GOAL" : "");
}

typedef struct {
    cudaStream_t stream;
    weight_matrix w;
    float *x, *y;
    gemv_scratch scratch;
} gemv_ctx;

static int run_gemv(void *arg)
{
    gemv_ctx *g = arg;
    return linear_gemv_cuda(&g->w, g->w.rows, 1, 0, g->x, 0, g->y, 0, &g->scratch, g->stream);
}

static void bench_gemv(const char *what, weight_format format, int rows, int cols, int sm)
{
    size_t bytes;
    gemv_ctx g = {0};
    g.w = bench_device_matrix(format, rows, cols, &bytes);
    g.x = bench_device_floats((size_t)cols, 1.0f);
    g.y = bench_device_floats((size_t)rows, 0.0f);
    g.scratch.partials = bench_device_floats((size_t)rows * 16, 0.0f);
    CUDA_CHECK(cudaMalloc((void **)&g.scratch.counters, (size_t)rows * 4));
    CUDA_CHECK(cudaMemset(g.scratch.counters, 0, (size_t)rows * 4));
    g.scratch.max_rows = rows;
    g.scratch.sm_count = sm;
    double t = time_kernel(run_gemv, &g, 20);
    report(what, (double)bytes + cols * 4.0 + rows * 4.0, t, format == WEIGHT_NVFP4 ? 0.8 : 0.0);
    cudaFree((void *)g.w.data);
    cudaFree(g.x);
    cudaFree(g.y);
    cudaFree(g.scratch.partials);
    cudaFree(g.scratch.counters);
}

typedef struct {
    cudaStream_t stream;
    moe_routing_config c;
    weight_matrix router;
    mlp_device *table;
    float *x, *logits, *weights, *act, *y, *shared_act, *shared_y, *out;
    int *chosen;
    int hidden, inter;
    gemv_scratch scratch;
} moe_ctx;

static int run_moe(void *arg)
{
    moe_ctx *m = arg;
    int k = m->c.top_k, rc;
    if ((rc = linear_gemv_cuda(&m->router, m->router.rows, 1, 0, m->x, 0, m->logits, 0, &m->scratch, m->stream)) ||
        (rc = moe_route_cuda(&m->c, m->logits, NULL, m->chosen, m->weights, 1, m->stream)) ||
        (rc = mlp_gate_up_cuda(m->table, NULL, 1, 1, m->x, m->hidden, m->inter, m->shared_act, m->stream)) ||
        (rc = mlp_down_cuda(m->table, NULL, 1, m->shared_act, m->hidden, m->inter, m->shared_y, m->stream)) ||
        (rc = mlp_gate_up_cuda(m->table + 1, m->chosen, k, k, m->x, m->hidden, m->inter, m->act, m->stream)) ||
        (rc = mlp_down_cuda(m->table + 1, m->chosen, k, m->act, m->hidden, m->inter, m->y, m->stream)))
        return rc;
    return moe_combine_cuda(m->shared_y, m->y, m->chosen, m->weights, k, m->hidden, m->out, 1, m->stream);
}

/* The MoE step of one rank: router (BF16 384 x 7168), routing, shared + 8 of 384 experts of
 * width 256 (NVFP4), weighted sum. Bytes: the router and the 9 experts' slices. */
static void bench_moe(int sm)
{
    moe_ctx m = {0};
    int experts = 384, hidden = 7168, inter = 256;
    m.c = (moe_routing_config){experts, 8, 1, 1, 1, 2.827f};
    m.hidden = hidden;
    m.inter = inter;
    size_t router_bytes, expert_bytes = 0, b;
    m.router = bench_device_matrix(WEIGHT_BF16, experts, hidden, &router_bytes);
    mlp_device *table = malloc((size_t)(experts + 1) * sizeof *table);
    for (int e = 0; e <= experts; e++) {
        table[e].gate = bench_device_matrix(WEIGHT_NVFP4, inter, hidden, &b);
        table[e].up = bench_device_matrix(WEIGHT_NVFP4, inter, hidden, &b);
        table[e].down = bench_device_matrix(WEIGHT_NVFP4, hidden, inter, &b);
    }
    expert_bytes = 3 * b; /* all three have the same byte count */
    m.table = gpu_test_upload(table, (size_t)(experts + 1) * sizeof *table);
    /* router logits favour no one: the choice still costs what it costs */
    m.x = bench_device_floats((size_t)hidden, 1.0f);
    m.logits = bench_device_floats((size_t)experts, 0.0f);
    m.weights = bench_device_floats(8, 0.0f);
    m.act = bench_device_floats((size_t)8 * inter, 0.0f);
    m.y = bench_device_floats((size_t)8 * hidden, 0.0f);
    m.shared_act = bench_device_floats((size_t)inter, 0.0f);
    m.shared_y = bench_device_floats((size_t)hidden, 0.0f);
    m.out = bench_device_floats((size_t)hidden, 0.0f);
    CUDA_CHECK(cudaMalloc((void **)&m.chosen, 8 * sizeof(int)));
    m.scratch.partials = bench_device_floats((size_t)experts * 16, 0.0f);
    CUDA_CHECK(cudaMalloc((void **)&m.scratch.counters, (size_t)experts * 4));
    CUDA_CHECK(cudaMemset(m.scratch.counters, 0, (size_t)experts * 4));
    m.scratch.max_rows = experts;
    m.scratch.sm_count = sm;
    double t = time_kernel(run_moe, &m, 20);
    report("MoE step (router + 8 of 384 + shared)", (double)router_bytes + 9.0 * (double)expert_bytes, t, 0.8);
    for (int e = 0; e <= experts; e++) {
        cudaFree((void *)table[e].gate.data);
        cudaFree((void *)table[e].up.data);
        cudaFree((void *)table[e].down.data);
    }
    free(table);
    cudaFree(m.table);
    cudaFree((void *)m.router.data);
}

/* The decode GEMVs of issue 20 at one rank's TP 8 shapes, each over enough distinct copies of its
 * weights (one graph) that no copy is still in L2 when it comes round again (H200: 50 MB, RTX
 * PRO 6000: 128 MB): the experts' gate/up (2 x 256 x 7168) and down (7168 x 256) slices, 9
 * experts a launch as a decode step runs them, q_b (1536 x 1536), o_proj (7168 x 1024) and the
 * W_UK absorption (8 heads of 128 x 512 rows of kv_b), BF16 as the checkpoint has them. */
enum { DECODE_EXPERTS = 144, DECODE_EXPERT_SLOTS = 9, DECODE_COPIES = 48, DECODE_ABSORB_COPIES = 192 };

typedef struct {
    cudaStream_t stream;
    mlp_device *table;
    int *index;                 /* [DECODE_EXPERTS]: launch l takes slots index[9 l .. 9 l + 9) */
    weight_matrix *copies;      /* [copies_n] (host array of device views) */
    int copies_n, rows, heads;
    float *x, *act, *y;
} decode_gemv_ctx;

static int run_expert_gate_up(void *arg)
{
    decode_gemv_ctx *d = arg;
    int rc = 0;
    for (int l = 0; l < DECODE_EXPERTS / DECODE_EXPERT_SLOTS && !rc; l++)
        rc = mlp_gate_up_cuda(d->table, d->index + l * DECODE_EXPERT_SLOTS, DECODE_EXPERT_SLOTS, DECODE_EXPERT_SLOTS,
                              d->x, 7168, 256, d->act, d->stream);
    return rc;
}

static int run_expert_down(void *arg)
{
    decode_gemv_ctx *d = arg;
    int rc = 0;
    for (int l = 0; l < DECODE_EXPERTS / DECODE_EXPERT_SLOTS && !rc; l++)
        rc = mlp_down_cuda(d->table, d->index + l * DECODE_EXPERT_SLOTS, DECODE_EXPERT_SLOTS, d->act, 7168, 256, d->y,
                           d->stream);
    return rc;
}

static int run_copies_gemv(void *arg)
{
    decode_gemv_ctx *d = arg;
    int rc = 0;
    for (int i = 0; i < d->copies_n && !rc; i++)
        rc = linear_gemv_cuda(&d->copies[i], d->rows, 1, 0, d->x, 0, d->y, 0, NULL, d->stream);
    return rc;
}

static int run_copies_absorb(void *arg)
{
    decode_gemv_ctx *d = arg;
    int rc = 0;
    for (int i = 0; i < d->copies_n && !rc; i++)
        rc = mla_absorb_q_cuda(&d->copies[i], d->heads, 128, 128, d->x, 192, d->y, 1, d->stream);
    return rc;
}

/* `copies` device copies of a rows x cols matrix, their views in d->copies; the bytes of one. */
static size_t decode_copies_make(decode_gemv_ctx *d, weight_format format, int rows, int cols, int copies)
{
    size_t bytes = 0;
    d->copies = malloc((size_t)copies * sizeof *d->copies);
    for (int i = 0; i < copies; i++)
        d->copies[i] = bench_device_matrix(format, rows, cols, &bytes);
    d->copies_n = copies;
    return bytes;
}

static void decode_copies_free(decode_gemv_ctx *d)
{
    for (int i = 0; i < d->copies_n; i++)
        cudaFree((void *)d->copies[i].data);
    free(d->copies);
    d->copies = NULL;
}

static void bench_decode_gemvs(void)
{
    decode_gemv_ctx d = {0};
    size_t b = 0;
    mlp_device *table = malloc(DECODE_EXPERTS * sizeof *table);
    int index[DECODE_EXPERTS];
    for (int e = 0; e < DECODE_EXPERTS; e++) {
        table[e].gate = bench_device_matrix(WEIGHT_NVFP4, 256, 7168, &b);
        table[e].up = bench_device_matrix(WEIGHT_NVFP4, 256, 7168, &b);
        table[e].down = bench_device_matrix(WEIGHT_NVFP4, 7168, 256, &b);
        index[e] = e;
    }
    d.table = gpu_test_upload(table, DECODE_EXPERTS * sizeof *table);
    d.index = gpu_test_upload(index, sizeof index);
    d.x = bench_device_floats(7168, 1.0f); /* also q [8 heads][192] for the absorption */
    d.act = bench_device_floats((size_t)DECODE_EXPERT_SLOTS * 256, 1.0f);
    d.y = bench_device_floats((size_t)DECODE_EXPERT_SLOTS * 7168, 0.0f);
    double t = time_kernel(run_expert_gate_up, &d, 10);
    report("NVFP4 experts gate+up, 9 x 2 x [256 x 7168]", 2.0 * DECODE_EXPERTS * (double)b, t, 0.8);
    t = time_kernel(run_expert_down, &d, 10);
    report("NVFP4 experts down, 9 x [7168 x 256]", DECODE_EXPERTS * (double)b, t, 0.8);
    for (int e = 0; e < DECODE_EXPERTS; e++) {
        cudaFree((void *)table[e].gate.data);
        cudaFree((void *)table[e].up.data);
        cudaFree((void *)table[e].down.data);
    }
    free(table);
    cudaFree(d.table);
    cudaFree(d.index);
    d.rows = 1536;
    b = decode_copies_make(&d, WEIGHT_BF16, 1536, 1536, DECODE_COPIES);
    t = time_kernel(run_copies_gemv, &d, 10);
    report("BF16 GEMV q_b [1536 x 1536]", DECODE_COPIES * (double)b, t, 0.8);
    decode_copies_free(&d);
    d.rows = 7168;
    b = decode_copies_make(&d, WEIGHT_BF16, 7168, 1024, DECODE_COPIES);
    t = time_kernel(run_copies_gemv, &d, 10);
    report("BF16 GEMV o_proj [7168 x 1024]", DECODE_COPIES * (double)b, t, 0.8);
    decode_copies_free(&d);
    /* kv_b of 8 heads (256 rows each: 128 W_UK, 128 W_UV); the absorption reads the W_UK half */
    d.heads = 8;
    b = decode_copies_make(&d, WEIGHT_BF16, 8 * 256, 512, DECODE_ABSORB_COPIES);
    t = time_kernel(run_copies_absorb, &d, 10);
    report("BF16 W_UK absorption, 8 x [128 x 512]", DECODE_ABSORB_COPIES * (double)b / 2, t, 0.8);
    decode_copies_free(&d);
    cudaFree(d.x);
    cudaFree(d.act);
    cudaFree(d.y);
}

typedef struct {
    cudaStream_t stream;
    float *q_latent, *q, *partials, *out;
    uint16_t *cache;
    int *pos, splits;
} attn_ctx;

static int run_attention(void *arg)
{
    attn_ctx *a = arg;
    return mla_decode_cuda(a->q_latent, a->q, 8, 512, 64, 128, 0.1447f, a->cache, KV_CACHE_FP16, a->pos, a->splits,
                           a->partials, a->out, 1, a->stream);
}

static void bench_attention(long positions, int sm)
{
    attn_ctx a = {0};
    CUDA_CHECK(mla_attention_setup_cuda(512, 64));
    size_t cache_elems = (size_t)positions * 576;
    CUDA_CHECK(cudaMalloc((void **)&a.cache, cache_elems * 2));
    CUDA_CHECK(cudaMemset(a.cache, 0x11, cache_elems * 2));
    a.q_latent = bench_device_floats(8 * 512, 0.01f);
    a.q = bench_device_floats(8 * 192, 0.01f);
    a.splits = device_attention_splits(positions, sm);
    a.partials = bench_device_floats(mla_decode_partial_floats(a.splits, 8, 512), 0.0f);
    a.out = bench_device_floats(8 * 512, 0.0f);
    int pos = (int)positions - 1;
    a.pos = gpu_test_upload(&pos, sizeof pos);
    double t = time_kernel(run_attention, &a, 20);
    char what[96];
    snprintf(what, sizeof what, "MLA decode attention, %ldk context (8 heads)", positions / 1024);
    report(what, (double)cache_elems * 2, t, 0.7);
    cudaFree(a.cache);
    cudaFree(a.q_latent);
    cudaFree(a.q);
    cudaFree(a.partials);
    cudaFree(a.out);
    cudaFree(a.pos);
}

typedef struct {
    cudaStream_t stream;
    float *q_latent, *q, *partials, *out;
    uint16_t *cache;
    int *pos, tokens, parts;
} prefill_attn_ctx;

static int run_prefill_attention(void *arg)
{
    prefill_attn_ctx *a = arg;
    return mla_prefill_cuda(a->q_latent, a->q, 8, 512, 64, 128, 0.1447f, a->cache, KV_CACHE_FP16, a->pos, a->parts,
                            a->partials, a->out, a->tokens, a->stream);
}

/* The prefill attention of one rank (8 heads) for a step of `tokens` queries after `context`
 * cached positions, parts as the backend plans them. */
static void bench_prefill_attention(long context, int tokens, int sm)
{
    prefill_attn_ctx a = {0};
    CUDA_CHECK(mla_attention_setup_cuda(512, 64));
    long positions = context + tokens;
    size_t cache_elems = (size_t)positions * 576;
    CUDA_CHECK(cudaMalloc((void **)&a.cache, cache_elems * 2));
    CUDA_CHECK(cudaMemset(a.cache, 0x11, cache_elems * 2));
    a.tokens = tokens;
    a.q_latent = bench_device_floats((size_t)tokens * 8 * 512, 0.01f);
    a.q = bench_device_floats((size_t)tokens * 8 * 192, 0.01f);
    a.parts = device_prefill_attention_parts(device_attention_splits(positions, sm), tokens, 8);
    a.partials = bench_device_floats(mla_prefill_partial_floats(a.parts, tokens, 8, 512) + 1, 0.0f);
    a.out = bench_device_floats((size_t)tokens * 8 * 512, 0.0f);
    int pos = (int)context;
    a.pos = gpu_test_upload(&pos, sizeof pos);
    double t = time_kernel(run_prefill_attention, &a, 10);
    char what[96];
    snprintf(what, sizeof what, "MLA prefill attention, %d queries at %ldk", tokens, context / 1024);
    report(what, (double)cache_elems * 2, t, 0.0);
    /* each query row scores and sums its visible keys: (576 + 512) multiply-adds per key and head */
    double keys = (double)tokens * (double)context + (double)tokens * (tokens + 1) / 2.0;
    printf("%-44s %9.1f TFLOP/s (%d parts per block of rows)\n", "  arithmetic", keys * 8 * 1088 * 2 / t / 1e12,
           a.parts);
    cudaFree(a.cache);
    cudaFree(a.q_latent);
    cudaFree(a.q);
    cudaFree(a.partials);
    cudaFree(a.out);
    cudaFree(a.pos);
}

/* Seconds per decode step at position `pos` (average of `steps`), with or without logits. */
static double step_seconds(backend *be, long pos, int steps, int vocab, int with_logits)
{
    kimi_err err = {0};
    float *logits = malloc((size_t)vocab * sizeof *logits);
    int32_t token = 7;
    int zero = 0;
    /* one step first: captures the graph off the clock */
    if (backend_forward(be, &token, 1, pos, &zero, with_logits, logits, &err)) {
        fprintf(stderr, "bench_gpu: %s\n", err.msg);
        free(logits);
        return -1;
    }
    double t0 = now();
    for (int i = 0; i < steps; i++)
        if (backend_forward(be, &token, 1, pos + i, &zero, with_logits, logits, &err)) {
            fprintf(stderr, "bench_gpu: %s\n", err.msg);
            free(logits);
            return -1;
        }
    double t = (now() - t0) / steps;
    free(logits);
    return t;
}

/* Prefill tok/s at 1k and 8k tokens on one prefill path (KIMI_CUDA_PREFILL, read at open). */
static void bench_prefill(const model_weights *mw, const char *path)
{
    const model_config *c = &mw->cfg;
    kimi_err err = {0};
    setenv("KIMI_CUDA_PREFILL", path, 1);
    backend *be = NULL;
    backend_options opt = {.kind = BACKEND_CUDA, .tp = 1, .max_context = 8192};
    if (backend_open(&be, mw, &opt, &err)) {
        printf("bench_gpu: %s\n", err.msg);
        CHECK(0);
        unsetenv("KIMI_CUDA_PREFILL");
        return;
    }
    int lengths[2] = {1024, 8192};
    for (int i = 0; i < 2; i++) {
        int n = lengths[i];
        int32_t *tokens = malloc((size_t)n * sizeof *tokens);
        float *logits = malloc((size_t)c->vocab * sizeof *logits);
        for (int j = 0; j < n; j++)
            tokens[j] = (int32_t)((j * 7919) % c->vocab);
        int last = n - 1;
        double p0 = now();
        if (backend_forward(be, tokens, n, 0, &last, 1, logits, &err)) {
            printf("bench_gpu: %s\n", err.msg);
            CHECK(0);
        } else {
            printf("prefill %5d tokens: %8.1f tok/s (KIMI_CUDA_PREFILL=%s, steps of up to %d tokens)\n", n,
                   n / (now() - p0), path, strcmp(path, "steps") ? DEVICE_PREFILL_TOKENS : DEVICE_MAX_TOKENS);
        }
        free(tokens);
        free(logits);
    }
    backend_close(be);
    unsetenv("KIMI_CUDA_PREFILL");
}

static void bench_model(const char *dir, int quick, const decode_table *table)
{
    model_weights mw;
    kimi_err err = {0};
    if (weights_load(&mw, dir, &err)) {
        printf("bench_gpu: %s\n", err.msg);
        CHECK(0);
        return;
    }
    const model_config *c = &mw.cfg;
    long contexts[3] = {0, 32768, 131072};
    int steps = quick ? 4 : 16;
    long capacity = contexts[2] + steps + 2;
    double per_layer[2][3] = {{0}};
    double lm_head_s = 0;
    printf("\nrank model %s: %d layers (%d dense), hidden %d, %d heads, %d experts top %d, vocab %d\n", dir, c->layers,
           c->first_dense, c->hidden, c->heads, c->experts, c->experts_per_token, c->vocab);
    for (int graphs = 1; graphs >= 0; graphs--) {
        setenv("KIMI_CUDA_GRAPHS", graphs ? "1" : "0", 1);
        backend *be = NULL;
        backend_options opt = {.kind = BACKEND_CUDA, .tp = 1, .max_context = capacity};
        double t0 = now();
        if (backend_open(&be, &mw, &opt, &err)) {
            printf("bench_gpu: %s\n", err.msg);
            CHECK(0);
            break;
        }
        if (graphs)
            printf("load (upload + repack) %.1f s\n", now() - t0);
        for (int i = 0; i < 3; i++) {
            double t = step_seconds(be, contexts[i], steps, c->vocab, 0);
            per_layer[graphs][i] = t / c->layers;
            printf("decode step, graphs %-3s, %6ld positions of context: %8.3f ms per step, %7.1f us per layer\n",
                   graphs ? "on" : "off", contexts[i], t * 1e3, t / c->layers * 1e6);
        }
        if (graphs)
            lm_head_s = step_seconds(be, 0, steps, c->vocab, 1) - per_layer[1][0] * c->layers;
        backend_close(be);
    }
    unsetenv("KIMI_CUDA_GRAPHS");
    if (table && per_layer[1][0] > 0) {
        double step_s[DECODE_TABLE_CONTEXTS];
        for (int i = 0; i < DECODE_TABLE_CONTEXTS; i++)
            step_s[i] = per_layer[1][i] * c->layers;
        decode_table_compare(table, c, step_s);
    }
    bench_prefill(&mw, "gemm");
    bench_prefill(&mw, "steps");
    if (per_layer[1][0] > 0) {
        double ratio = per_layer[1][2] / per_layer[1][0];
        /* 128k of replicated cache per layer vs the layer's weights: the bound of docs/CUDA.md */
        double layer_bytes = 5.5e9 / 61, cache_bytes = 131072.0 * 1152;
        double bound = (layer_bytes + cache_bytes) / layer_bytes;
        printf("128k vs empty context: %.2fx slower (bytes bound %.2fx; goal: within 10%% of it)\n", ratio, bound);
        double scale = copy_bandwidth / RTX_PRO_6000_BYTES_S;
        double layer_rtx = per_layer[1][0] * scale, head_rtx = (lm_head_s > 0 ? lm_head_s : 0) * scale;
        double compute = 61 * layer_rtx + head_rtx;
        printf("projection, 8x RTX PRO 6000 (1.8 TB/s, per-layer time x %.2f, 61 layers + lm_head): %.2f ms of kernels\n",
               scale, compute * 1e3);
        printf("  + 122 all-reduces at %.0f us (NCCL, PCIe): %.1f tok/s;  at %.0f us (one-shot): %.1f tok/s;  seeds: ~%.0f tok/s\n",
               NCCL_PCIE_ALLREDUCE_S * 1e6, 1.0 / (compute + 122 * NCCL_PCIE_ALLREDUCE_S), ONE_SHOT_ALLREDUCE_S * 1e6,
               1.0 / (compute + 122 * ONE_SHOT_ALLREDUCE_S), SEEDS_TOK_S);
    }
    weights_free(&mw);
}

#ifdef KIMI_HAVE_NCCL
/* Seconds per NCCL all-reduce of n floats over devices 0..ranks-1 (best of three rounds of 50). */
static double nccl_allreduce_seconds(int ranks, size_t n)
{
    ncclComm_t comms[8];
    int devices[8] = {0};
    float *bufs[8];
    cudaStream_t streams[8];
    for (int d = 0; d < ranks; d++)
        devices[d] = d;
    if (ncclCommInitAll(comms, ranks, devices) != ncclSuccess) {
        printf("bench_gpu: ncclCommInitAll over %d devices failed\n", ranks);
        return -1;
    }
    for (int d = 0; d < ranks; d++) {
        CUDA_CHECK(cudaSetDevice(d));
        CUDA_CHECK(cudaMalloc((void **)&bufs[d], n * sizeof(float)));
        CUDA_CHECK(cudaMemset(bufs[d], 0, n * sizeof(float)));
        CUDA_CHECK(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking));
    }
    double best = 1e30;
    for (int round = 0; round < 4; round++) {
        double t0 = now();
        for (int i = 0; i < 50; i++) {
            ncclGroupStart();
            for (int d = 0; d < ranks; d++)
                ncclAllReduce(bufs[d], bufs[d], n, ncclFloat, ncclSum, comms[d], streams[d]);
            ncclGroupEnd();
        }
        for (int d = 0; d < ranks; d++) {
            CUDA_CHECK(cudaSetDevice(d));
            CUDA_CHECK(cudaStreamSynchronize(streams[d]));
        }
        double t = (now() - t0) / 50;
        best = round > 0 && t < best ? t : best;    /* round 0 warms up */
    }
    for (int d = 0; d < ranks; d++) {
        cudaSetDevice(d);
        cudaFree(bufs[d]);
        cudaStreamDestroy(streams[d]);
        ncclCommDestroy(comms[d]);
    }
    cudaSetDevice(0);
    return best;
}
#endif

/* The decode step at TP ranks over NCCL (devices 0..ranks-1) and the all-reduces' share of it. */
static void bench_nccl(const char *dir, int ranks)
{
#ifdef KIMI_HAVE_NCCL
    model_weights mw;
    kimi_err err = {0};
    if (weights_load(&mw, dir, &err)) {
        printf("bench_gpu: %s\n", err.msg);
        CHECK(0);
        return;
    }
    const model_config *c = &mw.cfg;
    double allreduce = nccl_allreduce_seconds(ranks, (size_t)c->hidden);
    int devices[8];
    for (int d = 0; d < ranks; d++)
        devices[d] = d;
    backend *be = NULL;
    backend_options opt = {.kind = BACKEND_CUDA, .tp = ranks, .max_context = 64, .devices = devices,
                           .n_devices = ranks};
    if (allreduce < 0 || backend_open(&be, &mw, &opt, &err)) {
        printf("bench_gpu: NCCL decode at TP %d: %s\n", ranks, allreduce < 0 ? "no communicator" : err.msg);
        CHECK(0);
        weights_free(&mw);
        return;
    }
    double step = step_seconds(be, 0, 16, c->vocab, 0);
    backend_close(be);
    int per_step = 2 * c->layers;
    printf("\nNCCL over %d GPUs: all-reduce of %d floats %.1f us; decode step at TP %d (graphs on) %.3f ms, "
           "%.1f us per layer\n", ranks, c->hidden, allreduce * 1e6, ranks, step * 1e3, step / c->layers * 1e6);
    printf("NCCL share of the decode step: %.0f%% (%d all-reduces x %.1f us of %.3f ms)\n",
           100.0 * per_step * allreduce / step, per_step, allreduce * 1e6, step * 1e3);
    weights_free(&mw);
#else
    (void)dir;
    printf("bench_gpu --nccl %d: this build has no NCCL\n", ranks);
#endif
}

/* Kimi-K2.5's language model (the text_config of moonshotai/Kimi-K2.5's config.json): the
 * decode table's default shapes and layer counts. */
static const char k25_config[] =
    "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 7168, \"num_hidden_layers\": 61,"
    " \"num_attention_heads\": 64, \"num_key_value_heads\": 64, \"q_lora_rank\": 1536, \"kv_lora_rank\": 512,"
    " \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"n_routed_experts\": 384,"
    " \"n_shared_experts\": 1, \"num_experts_per_tok\": 8, \"moe_intermediate_size\": 2048,"
    " \"intermediate_size\": 18432, \"first_k_dense_replace\": 1, \"moe_layer_freq\": 1, \"n_group\": 1,"
    " \"topk_group\": 1, \"topk_method\": \"noaux_tc\", \"scoring_func\": \"sigmoid\", \"norm_topk_prob\": true,"
    " \"routed_scaling_factor\": 2.827, \"rms_norm_eps\": 1e-05, \"rope_theta\": 50000.0,"
    " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 64.0, \"original_max_position_embeddings\": 4096,"
    " \"beta_fast\": 32.0, \"beta_slow\": 1.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0},"
    " \"max_position_embeddings\": 262144, \"tie_word_embeddings\": false, \"vocab_size\": 163840}";

/* The decode table for the config in dir (NULL: Kimi-K2.5) at tp ranks; 0 or 1. */
static int bench_table(const char *dir, int tp, int quick, decode_table *table)
{
    model_config cfg;
    kimi_err err = {0};
    config_init(&cfg);
    int rc = dir ? config_load(&cfg, dir, &err)
                 : config_parse_text(&cfg, "config.json", k25_config, sizeof k25_config - 1, &err);
    if (rc) {
        printf("bench_gpu: %s\n", err.msg);
        config_free(&cfg);
        return 1;
    }
    char source[300];
    snprintf(source, sizeof source, "%s", dir ? dir : "Kimi-K2.5 (built-in config)");
    decode_table_options opt = {.source = source, .tp = tp, .copy_bandwidth = copy_bandwidth, .quick = quick};
#ifdef KIMI_HAVE_NCCL
    int visible = 0;
    CUDA_CHECK(cudaGetDeviceCount(&visible));
    if (visible > 1) {
        opt.allreduce_ranks = visible < 8 ? visible : 8;
        opt.allreduce_s = nccl_allreduce_seconds(opt.allreduce_ranks, (size_t)cfg.hidden);
    }
#endif
    rc = decode_table_run(&cfg, &opt, table);
    config_free(&cfg);
    return rc;
}

int main(int argc, char **argv)
{
    gpu_test_require_device();
    const char *model = NULL, *table_config = NULL;
    int quick = 0, nccl_ranks = 0, tp = 8, table_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--nccl") && i + 1 < argc)
            nccl_ranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--table-config") && i + 1 < argc)
            table_config = argv[++i];
        else if (!strcmp(argv[i], "--tp") && i + 1 < argc)
            tp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--table-only"))
            table_only = 1;
        else {
            printf("bench_gpu: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (nccl_ranks) {
        int visible = 0;
        CUDA_CHECK(cudaGetDeviceCount(&visible));
        if (nccl_ranks < 2 || nccl_ranks > 8 || nccl_ranks > visible || !model) {
            printf("bench_gpu: --nccl %d needs --model and 2..8 visible devices (%d visible)\n", nccl_ranks, visible);
            return 2;
        }
        bench_nccl(model, nccl_ranks);
        return check_finish();
    }
    int sm = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, 0));
    measure_copy_bandwidth(quick);
    decode_table table;
    if (table_only) {
        CHECK_INT(bench_table(table_config, tp, quick, &table), 0);
        return check_finish();
    }
    bench_gemv("NVFP4 GEMV dense gate slice [2304 x 7168]", WEIGHT_NVFP4, 2304, 7168, sm);
    bench_gemv("NVFP4 GEMV down slice [7168 x 2304]", WEIGHT_NVFP4, 7168, 2304, sm);
    bench_gemv("BF16 GEMV q_a [1536 x 7168]", WEIGHT_BF16, 1536, 7168, sm);
    bench_gemv("BF16 GEMV kv_a [576 x 7168]", WEIGHT_BF16, 576, 7168, sm);
    bench_gemv("BF16 GEMV lm_head slice [20480 x 7168]", WEIGHT_BF16, 20480, 7168, sm);
    bench_moe(sm);
    bench_decode_gemvs();
    bench_attention(32768, sm);
    bench_attention(131072, sm);
    bench_prefill_attention(1024, 512, sm);
    bench_prefill_attention(8192, 512, sm);
    int have_table = !bench_table(table_config, tp, quick, &table);
    CHECK(have_table);
    if (model)
        bench_model(model, quick, have_table ? &table : NULL);
    return check_finish();
}
