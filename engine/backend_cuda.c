/* backend_cuda: the CUDA backend (engine/backend_impl.h). Every rank's shard is repacked at
 * load (engine/device_plan.h) and uploaded through pinned staging buffers, two at a time so the
 * host packs one while the other is copied; ranks of one process share one device and one
 * stream and meet in the local communicator (engine/cuda_comm.h). A step mirrors the CPU's
 * forward.c with device kernels (kernels/cuda/forward.h) over up to DEVICE_MAX_TOKENS tokens:
 * one for a decode step; a prefill runs in steps of that many (dense weights read once per 8
 * tokens, each chosen expert once per step), or, on the GEMM path, in steps of up to
 * DEVICE_PREFILL_TOKENS where no logits are asked (engine/device_plan.h device_step_tokens);
 * attention of several queries runs the prefill kernel (each staged cache chunk serves 16 query
 * rows). Routing,
 * expert choice and the weighted sum stay on the device, and the position lives in device
 * memory, so one captured CUDA graph per step shape (token count, with or without logits)
 * serves every step. Steps of DEVICE_GEMM_MIN_TOKENS tokens or more run the dense projections
 * (q_a, kv_a, q_b, o_proj, router, lm_head, the dense and shared MLPs) as BF16 tensor-core
 * GEMMs instead, exact weights times hi + lo activations so they round like the fp32 GEMV
 * (kernels/cuda/gemm.h; launched, not captured); KIMI_CUDA_PREFILL=steps keeps them on the
 * GEMV; in those steps an expert with DEVICE_EXPERT_GEMM_MIN_TOKENS tokens runs them as GEMMs
 * too (the host reads the per-expert counts once per MoE layer). KIMI_CUDA_PREFILL_TRACE=1
 * prints each prefill step's size and how its experts ran. The embedding rows are looked up on
 * the host (one row per token, so the 2.3 GB table never needs device memory). */
#include "engine/backend_impl.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda_comm.h"
#include "engine/device_plan.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/forward.h"
#include "kernels/cuda/gemm.h"

enum { MAX_RANKS = 8, STAGING_BYTES = 32 << 20 };
_Static_assert((int)DEVICE_MAX_TOKENS == (int)FORWARD_MAX_TOKENS,
               "the workspace plan and the kernels serve as many tokens");
_Static_assert((int)DEVICE_ATTENTION_ROWS == (int)MLA_PREFILL_ROWS,
               "the workspace plan knows the prefill attention's rows per block");

/* Bytes kept free for the CUDA runtime, graphs and the driver, per device. */
#define DEVICE_RESERVE_BYTES ((size_t)512 << 20)

typedef struct {
    weight_matrix q_a, kv_a, q_b, kv_b, o, router;
    float *input_norm, *post_norm, *q_a_norm, *kv_a_norm;
    float *router_bias;         /* NULL without a correction bias */
    int is_moe, has_shared;
    mlp_device *host_table;     /* [experts + 1]: [0] dense or shared MLP, [1 + e] expert e */
    mlp_device *table;          /* the same in device memory */
} layer_device;

typedef struct {
    tp_shard shard;
    int heads;
    uint8_t *arena;             /* weights, vectors and tables: one allocation */
    size_t arena_bytes, arena_used;
    layer_device *layers;
    weight_matrix lm_head;
    float *final_norm;
    uint16_t *cache;            /* [layers][capacity][kv_lora | rope] fp16 */
    float *ws;                  /* device_workspace */
    device_workspace layout;
    gemv_scratch gemv;
} rank_device;

struct cuda_backend {
    const model_weights *mw;
    const model_config *cfg;
    int tp, device, sm_count, splits, use_graphs;
    int prefill_gemm;           /* steps of DEVICE_GEMM_MIN_TOKENS or more project through GEMMs */
    int prefill_trace;          /* KIMI_CUDA_PREFILL_TRACE=1: one line per prefill step on stderr */
    long traced_gemm_experts, traced_gemm_slots;    /* of the step: experts run as GEMMs, their slots */
    gemm_context gemm;
    long capacity;
    size_t cache_row;
    cudaStream_t stream;
    cuda_comm *comm;
    rank_device ranks[MAX_RANKS];
    int *pos;                   /* device: the position of the step */
    double *inv_freq;           /* device: [rope / 2] */
    double cos_sin_scale;
    float softmax_scale;
    moe_routing_config routing;
    float *logits;              /* device [DEVICE_MAX_TOKENS][vocab]: rank 0's gathered logits */
    float *host_h;              /* pinned [DEVICE_PREFILL_TOKENS][hidden]: the embedding rows of the step */
    int *host_pos;              /* pinned: the step's first position */
    float *host_logits;         /* pinned [DEVICE_MAX_TOKENS][vocab] */
    uint8_t *staging[2];        /* pinned upload buffers */
    cudaEvent_t staged[2];      /* the copy out of staging[i] has finished */
    int next_staging;
    cudaGraphExec_t graph[DEVICE_MAX_TOKENS + 1][2]; /* [tokens][with logits] */
};

static int cuda_fail(kimi_err *err, cudaError_t status, const char *what)
{
    return kimi_fail(err, status == cudaErrorMemoryAllocation ? KIMI_ERR_NOMEM : KIMI_ERR_IO, "CUDA: %s: %s", what,
                     cudaGetErrorString(status));
}

#define CUDA_TRY(call, what)                                                                                \
    do {                                                                                                    \
        cudaError_t status_ = (cudaError_t)(call);                                                          \
        if (status_ != cudaSuccess)                                                                         \
            return cuda_fail(err, status_, (what));                                                         \
    } while (0)

static int device_pick(int *device, kimi_err *err)
{
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "--backend cuda: no CUDA device is available (%s)",
                         status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    *device = 0;
    CUDA_TRY(cudaSetDevice(0), "cudaSetDevice(0)");
    return 0;
}

static int plans_make(const model_weights *mw, int tp, int splits, device_rank_plan *plans, kimi_err *err)
{
    for (int r = 0; r < tp; r++)
        if (device_rank_plan_make(mw, tp, r, splits, &plans[r], err))
            return err->code;
    return 0;
}

static int sm_count_of(int device, int *sm_count, kimi_err *err)
{
    CUDA_TRY(cudaDeviceGetAttribute(sm_count, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
    return 0;
}

int cuda_backend_memory(const model_weights *mw, const backend_options *opt, size_t *rank_budget_bytes,
                        size_t *rank_fixed_bytes, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    int device, sm_count;
    size_t free_bytes, total_bytes;
    if (opt->tp < 1 || opt->tp > MAX_RANKS)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d: must be between 1 and %d", opt->tp, MAX_RANKS);
    if (device_pick(&device, err) || sm_count_of(device, &sm_count, err))
        return err->code;
    CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    device_rank_plan plans[MAX_RANKS];
    if (plans_make(mw, opt->tp, device_attention_splits(0x7FFFFFFFL, sm_count), plans, err))
        return err->code;
    size_t fixed = 0;
    for (int r = 0; r < opt->tp; r++) {
        size_t bytes = plans[r].weight_bytes + plans[r].workspace_bytes;
        fixed = bytes > fixed ? bytes : fixed;
    }
    /* the local communicator: all ranks on this one device */
    *rank_budget_bytes = free_bytes / (size_t)opt->tp;
    *rank_fixed_bytes = fixed + DEVICE_RESERVE_BYTES / (size_t)opt->tp;
    return 0;
}

/* ---- upload ---- */

static void *arena_take(rank_device *rd, size_t bytes)
{
    size_t at = (rd->arena_used + DEVICE_ALIGN - 1) / DEVICE_ALIGN * DEVICE_ALIGN;
    if (at + bytes > rd->arena_bytes)
        return NULL;
    rd->arena_used = at + bytes;
    return rd->arena + at;
}

typedef struct {
    struct cuda_backend *be;
    rank_device *rd;
    kimi_err *err;
} upload_ctx;

/* The next staging buffer, once the copy that last read it has finished. */
static int staging_next(struct cuda_backend *be, uint8_t **buffer, int *index, kimi_err *err)
{
    *index = be->next_staging;
    be->next_staging ^= 1;
    CUDA_TRY(cudaEventSynchronize(be->staged[*index]), "upload staging");
    *buffer = be->staging[*index];
    return 0;
}

/* Pack view into device memory at data/scale, through the staging buffers in row pieces. */
static int upload_packed(struct cuda_backend *be, const weight_matrix *view, const packed_layout *layout,
                         uint8_t *data, uint8_t *scale, kimi_err *err)
{
    size_t row_bytes = layout->data_pitch + layout->scale_pitch;
    int rows_per_piece = (int)(STAGING_BYTES / row_bytes);
    if (rows_per_piece < 1)
        return kimi_fail(err, KIMI_ERR_MODEL, "a weight row of %zu bytes exceeds the %d-byte upload buffer", row_bytes,
                         STAGING_BYTES);
    for (int first = 0; first < view->rows; first += rows_per_piece) {
        int count = view->rows - first < rows_per_piece ? view->rows - first : rows_per_piece;
        uint8_t *buffer = NULL;
        int index = 0;
        if (staging_next(be, &buffer, &index, err))
            return err->code;
        uint8_t *scale_part = buffer + (size_t)count * layout->data_pitch;
        packed_rows_write(view, layout, first, first + count, buffer, scale_part);
        CUDA_TRY(cudaMemcpyAsync(data + (size_t)first * layout->data_pitch, buffer, (size_t)count * layout->data_pitch,
                                 cudaMemcpyHostToDevice, be->stream),
                 "weight upload");
        if (view->format == WEIGHT_NVFP4)
            CUDA_TRY(cudaMemcpyAsync(scale + (size_t)first * layout->scale_pitch, scale_part,
                                     (size_t)count * layout->scale_pitch, cudaMemcpyHostToDevice, be->stream),
                     "weight scale upload");
        CUDA_TRY(cudaEventRecord(be->staged[index], be->stream), "upload event");
    }
    return 0;
}

static int upload_weight(void *arg, const device_weight *w)
{
    upload_ctx *u = arg;
    rank_device *rd = u->rd;
    kimi_err *err = u->err;
    packed_layout layout;
    packed_layout_of(&w->view, &layout);
    uint8_t *data = arena_take(rd, layout.data_bytes);
    uint8_t *scale = layout.scale_bytes ? arena_take(rd, layout.scale_bytes) : NULL;
    if (!data || (layout.scale_bytes && !scale))
        return kimi_fail(err, KIMI_ERR_NOMEM, "the device weight plan is short of %zu bytes", layout.bytes);
    if (upload_packed(u->be, &w->view, &layout, data, scale, err))
        return err->code;
    weight_matrix dev = packed_view(&w->view, &layout, data, scale);
    layer_device *ld = w->layer >= 0 ? &rd->layers[w->layer] : NULL;
    mlp_device *entry = ld ? &ld->host_table[w->expert >= 0 ? 1 + w->expert : 0] : NULL;
    switch (w->role) {
    case DW_Q_A: ld->q_a = dev; break;
    case DW_KV_A: ld->kv_a = dev; break;
    case DW_Q_B: ld->q_b = dev; break;
    case DW_KV_B: ld->kv_b = dev; break;
    case DW_O: ld->o = dev; break;
    case DW_ROUTER: ld->router = dev; break;
    case DW_DENSE_GATE: case DW_SHARED_GATE: case DW_EXPERT_GATE: entry->gate = dev; break;
    case DW_DENSE_UP: case DW_SHARED_UP: case DW_EXPERT_UP: entry->up = dev; break;
    case DW_DENSE_DOWN: case DW_SHARED_DOWN: case DW_EXPERT_DOWN: entry->down = dev; break;
    case DW_LM_HEAD: rd->lm_head = dev; break;
    }
    return 0;
}

/* A vector decoded to float into the arena (synchronous: small). */
static int upload_vector(rank_device *rd, const weight_vector *v, float **out, kimi_err *err)
{
    float *host = malloc((size_t)(v->n > 0 ? v->n : 1) * sizeof *host);
    if (!host)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for a vector of %d", v->n);
    weight_vector_decode(v, host);
    *out = arena_take(rd, (size_t)v->n * sizeof(float));
    cudaError_t status = *out ? cudaMemcpy(*out, host, (size_t)v->n * sizeof(float), cudaMemcpyHostToDevice)
                              : cudaErrorMemoryAllocation;
    free(host);
    if (status != cudaSuccess)
        return cuda_fail(err, status, "vector upload");
    return 0;
}

static int rank_open(struct cuda_backend *be, int rank, kimi_err *err)
{
    const model_config *c = be->cfg;
    const model_weights *mw = be->mw;
    rank_device *rd = &be->ranks[rank];
    device_rank_plan plan;
    if (device_rank_plan_make(mw, be->tp, rank, be->splits, &plan, err) ||
        tp_shard_plan(mw, be->tp, rank, &rd->shard, err))
        return err->code;
    rd->heads = rd->shard.heads.end - rd->shard.heads.begin;
    rd->layers = calloc((size_t)c->layers, sizeof *rd->layers);
    if (!rd->layers)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for %d layers", c->layers);
    for (int i = 0; i < c->layers; i++) {
        rd->layers[i].host_table = calloc((size_t)c->experts + 1, sizeof(mlp_device));
        if (!rd->layers[i].host_table)
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the expert table of layer %d", i);
        rd->layers[i].is_moe = mw->layers[i].is_moe;
        rd->layers[i].has_shared = mw->layers[i].is_moe && c->shared_experts > 0;
    }
    rd->arena_bytes = plan.weight_bytes;
    CUDA_TRY(cudaMalloc((void **)&rd->arena, rd->arena_bytes), "weights");
    upload_ctx u = {be, rd, err};
    if (device_weights_visit(mw, &rd->shard, upload_weight, &u))
        return err->code;
    for (int i = 0; i < c->layers; i++) {
        const layer_weights *lw = &mw->layers[i];
        layer_device *ld = &rd->layers[i];
        if (upload_vector(rd, &lw->input_norm, &ld->input_norm, err) ||
            upload_vector(rd, &lw->post_attn_norm, &ld->post_norm, err) ||
            upload_vector(rd, &lw->q_a_norm, &ld->q_a_norm, err) ||
            upload_vector(rd, &lw->kv_a_norm, &ld->kv_a_norm, err))
            return err->code;
        if (lw->is_moe && lw->router_bias.n > 0 && upload_vector(rd, &lw->router_bias, &ld->router_bias, err))
            return err->code;
        size_t table_bytes = ((size_t)c->experts + 1) * sizeof(mlp_device);
        if (!(ld->table = arena_take(rd, table_bytes)))
            return kimi_fail(err, KIMI_ERR_NOMEM, "the device weight plan is short of an expert table");
        CUDA_TRY(cudaMemcpyAsync(ld->table, ld->host_table, table_bytes, cudaMemcpyHostToDevice, be->stream),
                 "expert table upload");
    }
    if (upload_vector(rd, &mw->final_norm, &rd->final_norm, err))
        return err->code;

    size_t cache_elems = (size_t)c->layers * (size_t)be->capacity * be->cache_row;
    cudaError_t status = cudaMalloc((void **)&rd->cache, cache_elems * sizeof(uint16_t));
    if (status != cudaSuccess)
        return kimi_fail(err, KIMI_ERR_NOMEM, "CUDA: a KV cache of %ld positions (%zu MiB) does not fit on the device "
                         "for rank %d: %s", be->capacity, cache_elems * 2 >> 20, rank, cudaGetErrorString(status));
    CUDA_TRY(cudaMemsetAsync(rd->cache, 0, cache_elems * sizeof(uint16_t), be->stream), "cache clear");
    device_workspace_plan(c, &rd->shard, be->splits, &rd->layout);
    CUDA_TRY(cudaMalloc((void **)&rd->ws, rd->layout.total * sizeof(float)), "workspace");
    CUDA_TRY(cudaMemsetAsync(rd->ws, 0, rd->layout.total * sizeof(float), be->stream), "workspace clear");
    rd->gemv = (gemv_scratch){rd->ws + rd->layout.gemv_partials, (unsigned *)(rd->ws + rd->layout.gemv_counters),
                              device_max_gemv_rows(c, &rd->shard), be->sm_count};
    /* the host tables and staging buffers are read by queued copies: wait before they change */
    CUDA_TRY(cudaStreamSynchronize(be->stream), "upload");
    return 0;
}

static void rank_close(struct cuda_backend *be, rank_device *rd)
{
    if (rd->layers)
        for (int i = 0; i < be->cfg->layers; i++)
            free(rd->layers[i].host_table);
    free(rd->layers);
    cudaFree(rd->arena);
    cudaFree(rd->cache);
    cudaFree(rd->ws);
}

void cuda_backend_close(cuda_backend *be)
{
    if (!be)
        return;
    if (be->stream)
        cudaStreamSynchronize(be->stream);
    for (int t = 0; t <= DEVICE_MAX_TOKENS; t++)
        for (int i = 0; i < 2; i++)
            if (be->graph[t][i])
                cudaGraphExecDestroy(be->graph[t][i]);
    for (int i = 0; i < 2; i++) {
        if (be->staged[i])
            cudaEventDestroy(be->staged[i]);
        cudaFreeHost(be->staging[i]);
    }
    for (int r = 0; r < be->tp; r++)
        rank_close(be, &be->ranks[r]);
    cudaFree(be->pos);
    cudaFree(be->inv_freq);
    cudaFree(be->logits);
    cudaFreeHost(be->host_h);
    cudaFreeHost(be->host_pos);
    cudaFreeHost(be->host_logits);
    cuda_comm_close(be->comm);
    gemm_context_destroy(&be->gemm);
    if (be->stream)
        cudaStreamDestroy(be->stream);
    free(be);
}

static int backend_setup(struct cuda_backend *be, const backend_options *opt, kimi_err *err)
{
    const model_config *c = be->cfg;
    if (device_pick(&be->device, err) || sm_count_of(be->device, &be->sm_count, err))
        return err->code;
    be->splits = device_attention_splits(be->capacity, be->sm_count);
    if (c->kv_lora_rank > 1024 || c->qk_rope_dim > 256 || c->qk_rope_dim % 2)
        return kimi_fail(err, KIMI_ERR_MODEL, "config.json: kv_lora_rank %d / qk_rope_head_dim %d: the CUDA attention "
                         "takes kv_lora_rank <= 1024 and an even rope dim <= 256", c->kv_lora_rank, c->qk_rope_dim);

    /* Does the asked context fit next to every rank's weights and workspace? */
    size_t free_bytes, total_bytes;
    CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    device_rank_plan plans[MAX_RANKS];
    if (plans_make(be->mw, be->tp, be->splits, plans, err))
        return err->code;
    long fit = device_max_context(plans, be->tp, free_bytes, DEVICE_RESERVE_BYTES);
    if (be->capacity > fit)
        return kimi_fail(err, KIMI_ERR_NOMEM,
                         "max context %ld does not fit on the CUDA device: at most %ld positions (%.2f GiB free, tp %d "
                         "ranks on one device, %zu B of cache per position per rank)",
                         be->capacity, fit, (double)free_bytes / (1 << 30), be->tp, plans[0].cache_bytes_per_position);

    CUDA_TRY(cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking), "stream");
    for (int i = 0; i < 2; i++) {
        CUDA_TRY(cudaHostAlloc((void **)&be->staging[i], STAGING_BYTES, cudaHostAllocDefault), "pinned staging");
        CUDA_TRY(cudaEventCreateWithFlags(&be->staged[i], cudaEventDisableTiming), "event");
    }
    CUDA_TRY(cudaMalloc((void **)&be->pos, sizeof(int)), "position");
    size_t T = DEVICE_MAX_TOKENS;
    CUDA_TRY(cudaMalloc((void **)&be->logits, T * (size_t)c->vocab * sizeof(float)), "logits");
    CUDA_TRY(cudaHostAlloc((void **)&be->host_h, DEVICE_PREFILL_TOKENS * (size_t)c->hidden * sizeof(float),
                           cudaHostAllocDefault),
             "pinned");
    CUDA_TRY(cudaHostAlloc((void **)&be->host_pos, sizeof(int), cudaHostAllocDefault), "pinned");
    CUDA_TRY(cudaHostAlloc((void **)&be->host_logits, T * (size_t)c->vocab * sizeof(float), cudaHostAllocDefault),
             "pinned");

    rope_config rc = {c->qk_rope_dim, c->rope_theta, c->rope_yarn, c->rope_factor, c->rope_original_max,
                      c->rope_beta_fast, c->rope_beta_slow, c->rope_mscale, c->rope_mscale_all_dim};
    rope_table table;
    if (rope_table_init(&table, &rc))
        return kimi_fail(err, KIMI_ERR_MODEL, "config.json: qk_rope_head_dim %d must be even and at most %d",
                         c->qk_rope_dim, ROPE_MAX_DIM);
    be->cos_sin_scale = table.cos_sin_scale;
    be->softmax_scale = rope_softmax_scale(&rc, c->qk_nope_dim + c->qk_rope_dim);
    CUDA_TRY(cudaMalloc((void **)&be->inv_freq, (size_t)(c->qk_rope_dim / 2) * sizeof(double)), "rope table");
    CUDA_TRY(cudaMemcpy(be->inv_freq, table.inv_freq, (size_t)(c->qk_rope_dim / 2) * sizeof(double),
                        cudaMemcpyHostToDevice), "rope table");
    be->routing = (moe_routing_config){c->experts, c->experts_per_token, c->n_group, c->topk_group, c->norm_topk_prob,
                                       c->routed_scaling_factor};
    if (cuda_comm_open_local(&be->comm, be->tp, err))
        return err->code;
    for (int r = 0; r < be->tp; r++)
        if (rank_open(be, r, err))
            return kimi_err_prefix(err, err->code, "rank %d of %d", r, be->tp);
    const char *graphs = getenv("KIMI_CUDA_GRAPHS");
    be->use_graphs = !(graphs && !strcmp(graphs, "0"));
    const char *prefill = getenv("KIMI_CUDA_PREFILL");
    if (prefill && strcmp(prefill, "gemm") && strcmp(prefill, "steps"))
        return kimi_fail(err, KIMI_ERR_USAGE, "KIMI_CUDA_PREFILL=%s: must be gemm or steps", prefill);
    be->prefill_gemm = !(prefill && !strcmp(prefill, "steps"));
    const char *trace = getenv("KIMI_CUDA_PREFILL_TRACE");
    be->prefill_trace = trace && !strcmp(trace, "1");
    if (be->prefill_gemm) {
        int status = gemm_context_create(&be->gemm);
        if (status)
            return cuda_fail(err, (cudaError_t)status, "cuBLASLt handle");
    }
    (void)opt;
    return 0;
}

int cuda_backend_open(cuda_backend **out, const model_weights *mw, const backend_options *opt, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    *out = NULL;
    const model_config *c = &mw->cfg;
    if (opt->tp < 1 || opt->tp > MAX_RANKS)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d: must be between 1 and %d", opt->tp, MAX_RANKS);
    if (config_check_tp(c, opt->tp, err))
        return kimi_err_prefix(err, err->code, "--tp %d", opt->tp);
    if (opt->max_context < 1)
        return kimi_fail(err, KIMI_ERR_USAGE, "max context %ld: the KV cache needs at least one position",
                         opt->max_context);
    struct cuda_backend *be = calloc(1, sizeof *be);
    if (!be)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the CUDA backend");
    be->mw = mw;
    be->cfg = c;
    be->tp = opt->tp;
    be->capacity = opt->max_context;
    be->cache_row = (size_t)c->kv_lora_rank + (size_t)c->qk_rope_dim;
    if (backend_setup(be, opt, err)) {
        cuda_backend_close(be);
        return err->code;
    }
    *out = be;
    return 0;
}

long cuda_backend_capacity(const cuda_backend *be)
{
    return be->capacity;
}

/* ---- one decode step on every rank ---- */

#define STEP_TRY(call)                                                                                      \
    do {                                                                                                    \
        int status_ = (call);                                                                               \
        if (status_)                                                                                        \
            return status_;                                                                                 \
    } while (0)

static float *ws(rank_device *rd, size_t offset)
{
    return rd->ws + offset;
}

/* y[t] = W x[t] for the step's tokens (x rows of x_width floats, y rows of w->rows). */
static int gemv(rank_device *rd, const weight_matrix *w, const float *x, size_t x_width, float *y, int tokens,
                cudaStream_t s)
{
    return linear_gemv_tokens_cuda(w, w->rows, 1, 0, x, 0, x_width, y, 0, (size_t)w->rows, tokens, &rd->gemv, s);
}

/* y[t] = W x[t] as BF16 GEMMs when the step is long enough (device_gemm_plan_make), else the GEMV. */
static int project(struct cuda_backend *be, rank_device *rd, const weight_matrix *w, const float *x, size_t x_width,
                   float *y, int tokens, cudaStream_t s)
{
    const device_workspace *l = &rd->layout;
    device_gemm_plan p;
    if (!be->prefill_gemm || device_gemm_plan_make(w, tokens, (size_t)w->rows, l, &p))
        return gemv(rd, w, x, x_width, y, tokens, s);
    uint16_t *hi = (uint16_t *)ws(rd, l->gemm_x), *lo = hi + (size_t)tokens * p.ldb;
    uint16_t *tile = (uint16_t *)ws(rd, l->gemm_w);
    float alpha = w->format == WEIGHT_NVFP4 ? w->scale_2 : 1.0f;
    STEP_TRY(bf16_split_cuda(x, tokens, p.k, x_width, hi, lo, p.ldb, s));
    for (int first = 0; first < p.n; first += p.tile_rows) {
        int rows = p.n - first < p.tile_rows ? p.n - first : p.tile_rows;
        const uint16_t *a = (const uint16_t *)(w->data + (size_t)first * w->data_stride);
        if (p.dequantise) {
            STEP_TRY(bf16_dequantise_cuda(w, first, rows, tile, p.lda, s));
            a = tile;
        }
        for (int part = 0; part < 2; part++)
            STEP_TRY(gemm_bf16_cuda(&be->gemm, tokens, rows, p.k, alpha, a, p.lda, part ? lo : hi, p.ldb,
                                    part ? 1.0f : 0.0f, y + first, p.ldc, ws(rd, l->gemm_scratch),
                                    DEVICE_GEMM_SCRATCH_BYTES, s));
    }
    return 0;
}

/* The dense or shared MLP table[0] of T tokens as GEMMs (gate into act, up into gemm_up, then
 * silu(gate) * up and down into y); returns 1 when the step is too short for them (nothing done). */
static int mlp_gemm(struct cuda_backend *be, rank_device *rd, const mlp_device *m, const float *x, int T, float *act,
                    float *y, int *status)
{
    const model_config *c = be->cfg;
    const device_workspace *l = &rd->layout;
    device_gemm_plan p;
    if (!be->prefill_gemm || device_gemm_plan_make(&m->gate, T, (size_t)m->gate.rows, l, &p) ||
        device_gemm_plan_make(&m->up, T, (size_t)m->up.rows, l, &p) ||
        device_gemm_plan_make(&m->down, T, (size_t)m->down.rows, l, &p))
        return 1;
    int inter = m->gate.rows;
    float *up = ws(rd, l->gemm_up);
    *status = project(be, rd, &m->gate, x, (size_t)c->hidden, act, T, be->stream);
    if (!*status)
        *status = project(be, rd, &m->up, x, (size_t)c->hidden, up, T, be->stream);
    if (!*status)
        *status = silu_gate_cuda(act, up, act, (size_t)T * (size_t)inter, be->stream);
    if (!*status)
        *status = project(be, rd, &m->down, act, (size_t)inter, y, T, be->stream);
    return 0;
}

static uint16_t *layer_cache(struct cuda_backend *be, rank_device *rd, int layer)
{
    return rd->cache + (size_t)layer * (size_t)be->capacity * be->cache_row;
}

/* x = rmsnorm(h) -> partial = this rank's share of o_proj(attention(x)), cache rows written;
 * for the step's T tokens at positions *pos + t. */
static int attention_step(struct cuda_backend *be, rank_device *rd, int layer, int T)
{
    const model_config *c = be->cfg;
    const layer_device *ld = &rd->layers[layer];
    const device_workspace *l = &rd->layout;
    cudaStream_t s = be->stream;
    int q_width = c->qk_nope_dim + c->qk_rope_dim, kv_b_rows = c->qk_nope_dim + c->v_head_dim;
    size_t hidden = (size_t)c->hidden, heads = (size_t)rd->heads, kv_lora = (size_t)c->kv_lora_rank;
    float *x = ws(rd, l->x), *q_a = ws(rd, l->q_a), *q = ws(rd, l->q), *kv = ws(rd, l->kv);
    STEP_TRY(project(be, rd, &ld->q_a, x, hidden, q_a, T, s));
    STEP_TRY(project(be, rd, &ld->kv_a, x, hidden, kv, T, s));
    STEP_TRY(rmsnorm_cuda(q_a, q_a, ld->q_a_norm, T, c->q_lora_rank, c->rms_norm_eps, s));
    STEP_TRY(project(be, rd, &ld->q_b, q_a, (size_t)c->q_lora_rank, q, T, s));
    STEP_TRY(mla_kv_rope_cache_cuda(kv, c->kv_lora_rank, c->qk_rope_dim, ld->kv_a_norm, c->rms_norm_eps, q, rd->heads,
                                    c->qk_nope_dim, be->inv_freq, be->cos_sin_scale, be->pos,
                                    layer_cache(be, rd, layer), T, s));
    STEP_TRY(mla_absorb_q_cuda(&ld->kv_b, rd->heads, c->qk_nope_dim, c->v_head_dim, q, q_width, ws(rd, l->q_latent),
                               T, s));
    if (T == 1)
        STEP_TRY(mla_decode_cuda(ws(rd, l->q_latent), q, rd->heads, c->kv_lora_rank, c->qk_rope_dim, c->qk_nope_dim,
                                 be->softmax_scale, layer_cache(be, rd, layer), be->pos,
                                 device_attention_splits_for(be->splits, T), ws(rd, l->attn_partials),
                                 ws(rd, l->o_latent), T, s));
    else
        STEP_TRY(mla_prefill_cuda(ws(rd, l->q_latent), q, rd->heads, c->kv_lora_rank, c->qk_rope_dim, c->qk_nope_dim,
                                  be->softmax_scale, layer_cache(be, rd, layer), be->pos,
                                  device_prefill_attention_parts(be->splits, T, rd->heads), ws(rd, l->attn_partials),
                                  ws(rd, l->o_latent), T, s));
    /* W_UV per head: rows [nope, nope + v) of each head's kv_b rows */
    weight_matrix w_uv = ld->kv_b;
    w_uv.data += (size_t)c->qk_nope_dim * w_uv.data_stride;
    if (w_uv.scale)
        w_uv.scale += (size_t)c->qk_nope_dim * w_uv.scale_stride;
    STEP_TRY(linear_gemv_tokens_cuda(&w_uv, c->v_head_dim, rd->heads, kv_b_rows, ws(rd, l->o_latent), kv_lora,
                                     heads * kv_lora, ws(rd, l->attn), (size_t)c->v_head_dim,
                                     heads * (size_t)c->v_head_dim, T, &rd->gemv, s));
    return project(be, rd, &ld->o, ws(rd, l->attn), heads * (size_t)c->v_head_dim, ws(rd, l->partial), T, s);
}

/* The routed experts of a step of T tokens grouped by expert (offsets, order: device), on the
 * GEMM path (launched, never captured): the host reads the per-expert slot counts once per MoE
 * layer, a synchronisation a prefill step affords; experts with DEVICE_EXPERT_GEMM_MIN_TOKENS
 * slots or more run them as BF16 GEMMs (their tokens' rows gathered, results scattered to
 * their slots of routed_y), the rest the grouped GEMV, one launch pair per run of consecutive
 * experts (engine/device_plan.h device_moe_plan_make). */
static int experts_split_step(struct cuda_backend *be, rank_device *rd, const layer_device *ld, const int *offsets,
                              const int *order)
{
    const model_config *c = be->cfg;
    const device_workspace *l = &rd->layout;
    cudaStream_t s = be->stream;
    int experts = c->experts, k = c->experts_per_token, moe_inter = rd->shard.moe_inter.end - rd->shard.moe_inter.begin;
    size_t hidden = (size_t)c->hidden;
    int *host_offsets = malloc(((size_t)experts + 1) * sizeof *host_offsets);
    device_gemm_expert *gemm = malloc((size_t)experts * sizeof *gemm);
    device_expert_run *runs = malloc((size_t)experts * sizeof *runs);
    device_moe_plan plan = {0};
    int status = host_offsets && gemm && runs ? 0 : (int)cudaErrorMemoryAllocation;
    if (!status)
        status = (int)cudaMemcpyAsync(host_offsets, offsets, ((size_t)experts + 1) * sizeof *host_offsets,
                                      cudaMemcpyDeviceToHost, s);
    if (!status)
        status = (int)cudaStreamSynchronize(s);
    if (!status && device_moe_plan_make(host_offsets, experts, DEVICE_EXPERT_GEMM_MIN_TOKENS, gemm, runs, &plan))
        status = (int)cudaErrorInvalidValue;
    float *x = ws(rd, l->x), *gathered = ws(rd, l->expert_x), *act = ws(rd, l->expert_act);
    float *up = ws(rd, l->expert_up), *y = ws(rd, l->expert_y);
    for (int i = 0; i < plan.n_gemm && !status; i++) {
        const mlp_device *m = &ld->host_table[1 + gemm[i].expert];
        const int *slots = order + gemm[i].first;   /* slot t * k + j: token t */
        int n = gemm[i].rows;   /* count, padded: the last slot's token repeated */
        status = rows_gather_cuda(x, hidden, slots, gemm[i].count, k, n, (int)hidden, gathered, s);
        if (!status)
            status = project(be, rd, &m->gate, gathered, hidden, act, n, s);
        if (!status)
            status = project(be, rd, &m->up, gathered, hidden, up, n, s);
        if (!status)
            status = silu_gate_cuda(act, up, act, (size_t)n * (size_t)moe_inter, s);
        if (!status)
            status = project(be, rd, &m->down, act, (size_t)moe_inter, y, n, s);
        if (!status)
            status = rows_scatter_cuda(y, gemm[i].count, (int)hidden, slots, ws(rd, l->routed_y), hidden, s);
    }
    for (int i = 0; i < plan.n_runs && !status; i++) {
        const mlp_device *table = ld->table + 1 + runs[i].first;
        status = mlp_gate_up_grouped_cuda(table, offsets + runs[i].first, order, runs[i].count, k, x, c->hidden,
                                          moe_inter, ws(rd, l->act), s);
        if (!status)
            status = mlp_down_grouped_cuda(table, offsets + runs[i].first, order, runs[i].count, ws(rd, l->act),
                                           c->hidden, moe_inter, ws(rd, l->routed_y), s);
    }
    be->traced_gemm_experts += plan.n_gemm;
    be->traced_gemm_slots += plan.gemm_slots;
    free(host_offsets);
    free(gemm);
    free(runs);
    return status;
}

/* x = rmsnorm(h) -> partial = this rank's share of the dense MLP or the MoE of x, T tokens. */
static int mlp_step(struct cuda_backend *be, rank_device *rd, int layer, int T)
{
    const model_config *c = be->cfg;
    const layer_device *ld = &rd->layers[layer];
    const device_workspace *l = &rd->layout;
    cudaStream_t s = be->stream;
    float *x = ws(rd, l->x);
    int status = 0;
    if (!ld->is_moe) {
        if (!mlp_gemm(be, rd, &ld->host_table[0], x, T, ws(rd, l->act), ws(rd, l->partial), &status))
            return status;
        int inter = rd->shard.dense_inter.end - rd->shard.dense_inter.begin;
        STEP_TRY(mlp_gate_up_cuda(ld->table, NULL, T, 1, x, c->hidden, inter, ws(rd, l->act), s));
        return mlp_down_cuda(ld->table, NULL, T, ws(rd, l->act), c->hidden, inter, ws(rd, l->partial), s);
    }
    int k = c->experts_per_token, moe_inter = rd->shard.moe_inter.end - rd->shard.moe_inter.begin;
    int *chosen = (int *)ws(rd, l->chosen);
    STEP_TRY(project(be, rd, &ld->router, x, (size_t)c->hidden, ws(rd, l->router_logits), T, s));
    STEP_TRY(moe_route_cuda(&be->routing, ws(rd, l->router_logits), ld->router_bias, chosen, ws(rd, l->route_weights),
                            T, s));
    const float *shared_y = NULL;
    if (ld->has_shared) {
        int inter = rd->shard.shared_inter.end - rd->shard.shared_inter.begin;
        if (mlp_gemm(be, rd, &ld->host_table[0], x, T, ws(rd, l->shared_act), ws(rd, l->shared_y), &status)) {
            STEP_TRY(mlp_gate_up_cuda(ld->table, NULL, T, 1, x, c->hidden, inter, ws(rd, l->shared_act), s));
            STEP_TRY(mlp_down_cuda(ld->table, NULL, T, ws(rd, l->shared_act), c->hidden, inter, ws(rd, l->shared_y),
                                   s));
        }
        STEP_TRY(status);
        shared_y = ws(rd, l->shared_y);
    }
    /* slot t * k + j: token t's j-th choice; one token reads just its k experts, a longer step
     * groups its slots by expert so each chosen expert is read once */
    if (T == 1) {
        STEP_TRY(mlp_gate_up_cuda(ld->table + 1, chosen, k, k, x, c->hidden, moe_inter, ws(rd, l->act), s));
        STEP_TRY(mlp_down_cuda(ld->table + 1, chosen, k, ws(rd, l->act), c->hidden, moe_inter, ws(rd, l->routed_y), s));
    } else {
        int *offsets = (int *)ws(rd, l->moe_offsets), *order = (int *)ws(rd, l->moe_order);
        STEP_TRY(moe_group_cuda(chosen, T * k, c->experts, offsets, order, s));
        if (be->prefill_gemm && T >= DEVICE_GEMM_MIN_TOKENS) {
            STEP_TRY(experts_split_step(be, rd, ld, offsets, order));
        } else {
            STEP_TRY(mlp_gate_up_grouped_cuda(ld->table + 1, offsets, order, c->experts, k, x, c->hidden, moe_inter,
                                              ws(rd, l->act), s));
            STEP_TRY(mlp_down_grouped_cuda(ld->table + 1, offsets, order, c->experts, ws(rd, l->act), c->hidden,
                                           moe_inter, ws(rd, l->routed_y), s));
        }
    }
    return moe_combine_cuda(shared_y, ws(rd, l->routed_y), chosen, ws(rd, l->route_weights), k, c->hidden,
                            ws(rd, l->partial), T, s);
}

/* Every rank's partial summed (local communicator), then added to every rank's h, and x =
 * rmsnorm(h, the next norm) in the same launch (norm NULL: the add alone). norm_of(rank) picks
 * the rank's copy of the next norm's weights. */
typedef float *(*norm_of_rank)(struct cuda_backend *be, int rank, int layer);

static float *post_attention_norm(struct cuda_backend *be, int rank, int layer)
{
    return be->ranks[rank].layers[layer].post_norm;
}

static float *next_input_norm(struct cuda_backend *be, int rank, int layer)
{
    return layer + 1 < be->cfg->layers ? be->ranks[rank].layers[layer + 1].input_norm : NULL;
}

static float *final_norm(struct cuda_backend *be, int rank, int layer)
{
    (void)layer;
    return be->ranks[rank].final_norm;
}

static int reduce_into_h(struct cuda_backend *be, int T, norm_of_rank norm, int layer)
{
    const model_config *c = be->cfg;
    size_t n = (size_t)T * (size_t)c->hidden;
    for (int r = 0; r < be->tp; r++)
        STEP_TRY(cuda_comm_allreduce_sum(be->comm, r, ws(&be->ranks[r], be->ranks[r].layout.partial), n, be->stream));
    for (int r = 0; r < be->tp; r++) {
        rank_device *rd = &be->ranks[r];
        float *weight = norm ? norm(be, r, layer) : NULL, *h = ws(rd, rd->layout.h);
        const float *partial = ws(rd, rd->layout.partial);
        STEP_TRY(weight ? residual_rmsnorm_cuda(h, partial, ws(rd, rd->layout.x), weight, T, c->hidden, c->rms_norm_eps,
                                                be->stream)
                        : add_cuda(h, partial, n, be->stream));
    }
    return 0;
}

static int step_enqueue(struct cuda_backend *be, int T, int with_logits)
{
    const model_config *c = be->cfg;
    for (int r = 0; r < be->tp; r++) {
        rank_device *rd = &be->ranks[r];
        STEP_TRY(rmsnorm_cuda(ws(rd, rd->layout.x), ws(rd, rd->layout.h), rd->layers[0].input_norm, T, c->hidden,
                              c->rms_norm_eps, be->stream));
    }
    for (int layer = 0; layer < c->layers; layer++) {
        for (int r = 0; r < be->tp; r++)
            STEP_TRY(attention_step(be, &be->ranks[r], layer, T));
        STEP_TRY(reduce_into_h(be, T, post_attention_norm, layer));
        for (int r = 0; r < be->tp; r++)
            STEP_TRY(mlp_step(be, &be->ranks[r], layer, T));
        int last = layer + 1 == c->layers;
        STEP_TRY(reduce_into_h(be, T, last ? (with_logits ? final_norm : NULL) : next_input_norm, layer));
    }
    if (!with_logits)
        return 0;
    for (int r = 0; r < be->tp; r++) {
        rank_device *rd = &be->ranks[r];
        const device_workspace *l = &rd->layout;
        int part = rd->shard.vocab.end - rd->shard.vocab.begin;
        /* x = rmsnorm(h, final norm), from the last residual add */
        STEP_TRY(project(be, rd, &rd->lm_head, ws(rd, l->x), (size_t)c->hidden, ws(rd, l->logits_part), T,
                         be->stream));
        STEP_TRY(cuda_comm_gather(be->comm, r, ws(rd, l->logits_part), T, (size_t)part, be->logits, (size_t)c->vocab,
                                  (size_t)rd->shard.vocab.begin, be->stream));
    }
    return 0;
}

/* Runs the step, as the captured graph of its kind (captured at first use) or as launches. */
static int step_run(struct cuda_backend *be, int T, int with_logits, kimi_err *err)
{
    /* GEMM steps are launched: cuBLASLt picks its kernels per shape, outside any capture */
    if (!be->use_graphs || (be->prefill_gemm && T >= DEVICE_GEMM_MIN_TOKENS)) {
        int status = step_enqueue(be, T, with_logits);
        return status ? cuda_fail(err, (cudaError_t)status, "decode step") : 0;
    }
    cudaGraphExec_t *exec = &be->graph[T][with_logits];
    if (!*exec) {
        cudaGraph_t graph;
        CUDA_TRY(cudaStreamBeginCapture(be->stream, cudaStreamCaptureModeThreadLocal), "graph capture");
        int status = step_enqueue(be, T, with_logits);
        cudaError_t end = cudaStreamEndCapture(be->stream, &graph);
        if (status)
            return cuda_fail(err, (cudaError_t)status, "decode step (capture)");
        if (end != cudaSuccess)
            return cuda_fail(err, end, "graph capture");
        cudaError_t inst = cudaGraphInstantiate(exec, graph, 0);
        cudaGraphDestroy(graph);
        if (inst != cudaSuccess) {
            *exec = NULL;
            return cuda_fail(err, inst, "graph instantiate");
        }
    }
    CUDA_TRY(cudaGraphLaunch(*exec, be->stream), "graph launch");
    return 0;
}

int cuda_backend_forward(cuda_backend *be, const int32_t *tokens, int n, long start_pos, const int *logit_rows,
                         int n_logit_rows, float *logits, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    const model_config *c = be->cfg;
    CUDA_TRY(cudaSetDevice(be->device), "cudaSetDevice");
    size_t vocab = (size_t)c->vocab, hidden = (size_t)c->hidden;
    for (int first = 0, T; first < n; first += T) {
        T = device_step_tokens(first, n, logit_rows, n_logit_rows, be->prefill_gemm);
        int wanted = 0;
        for (int j = 0; j < n_logit_rows; j++)
            wanted += logit_rows[j] >= first && logit_rows[j] < first + T;
        for (int t = 0; t < T; t++)
            weight_matrix_decode_row(&be->mw->embed.w, tokens[first + t], be->host_h + (size_t)t * hidden);
        *be->host_pos = (int)(start_pos + first);
        CUDA_TRY(cudaMemcpyAsync(be->pos, be->host_pos, sizeof(int), cudaMemcpyHostToDevice, be->stream), "position");
        for (int r = 0; r < be->tp; r++)
            CUDA_TRY(cudaMemcpyAsync(ws(&be->ranks[r], be->ranks[r].layout.h), be->host_h,
                                     (size_t)T * hidden * sizeof(float), cudaMemcpyHostToDevice, be->stream),
                     "embedding");
        be->traced_gemm_experts = be->traced_gemm_slots = 0;
        if (step_run(be, T, wanted > 0, err))
            return err->code;
        if (wanted)
            CUDA_TRY(cudaMemcpyAsync(be->host_logits, be->logits, (size_t)T * vocab * sizeof(float),
                                     cudaMemcpyDeviceToHost, be->stream),
                     "logits");
        /* host_h and host_pos are read by the queued copies */
        CUDA_TRY(cudaStreamSynchronize(be->stream), "forward step");
        if (be->prefill_trace && T > 1) {
            long routed = 0;    /* slots of the step: tokens x top_k, every MoE layer and rank */
            for (int layer = 0; layer < c->layers; layer++)
                routed += be->ranks[0].layers[layer].is_moe ? (long)T * c->experts_per_token * be->tp : 0;
            fprintf(stderr, "KIMI_CUDA_PREFILL_TRACE: step of %d tokens at position %ld%s: %ld expert GEMMs over %ld "
                    "of its %ld routed slots\n", T, start_pos + first, wanted ? " with logits" : "",
                    be->traced_gemm_experts, be->traced_gemm_slots, routed);
        }
        for (int j = 0; j < n_logit_rows; j++)
            if (logit_rows[j] >= first && logit_rows[j] < first + T)
                memcpy(logits + (size_t)j * vocab, be->host_logits + (size_t)(logit_rows[j] - first) * vocab,
                       vocab * sizeof(float));
    }
    return 0;
}

int cuda_backend_read_kv(cuda_backend *be, long n_pos, uint16_t *out, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    const model_config *c = be->cfg;
    CUDA_TRY(cudaSetDevice(be->device), "cudaSetDevice");
    if (n_pos < 0 || n_pos > be->capacity)
        return kimi_fail(err, KIMI_ERR_STATE, "read_kv: %ld positions, the cache holds %ld", n_pos, be->capacity);
    for (int layer = 0; layer < c->layers; layer++)
        CUDA_TRY(cudaMemcpy(out + (size_t)layer * (size_t)n_pos * be->cache_row, layer_cache(be, &be->ranks[0], layer),
                            (size_t)n_pos * be->cache_row * sizeof(uint16_t), cudaMemcpyDeviceToHost),
                 "cache read");
    return 0;
}
