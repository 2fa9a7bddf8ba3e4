/* backend_cuda: the CUDA backend (engine/backend/backend_impl.h). One worker thread per rank owns the
 * rank's device (engine/backend/device_plan.h device_assign: its own device, or one device every rank
 * shares), stream, weights, cache and workspace, and runs its whole layer stack, meeting the
 * other ranks in the communicator (engine/backend/cuda_comm.h: NCCL, or the local one when all ranks
 * share a device and its stream); the thread that calls the backend drives the rank threads
 * through two barriers per job, like the CPU backend. At open every rank repacks its shard
 * (engine/backend/device_plan.h) and uploads it in parallel with the others, through its own two pinned
 * staging buffers (the host packs one while the other is copied, with readahead hints on the
 * mmap pieces that come next). A step mirrors the CPU's forward.c with device kernels
 * (kernels/cuda/forward.h) over up to DEVICE_MAX_TOKENS tokens: one for a decode step; a
 * prefill runs in steps of that many (dense weights read once per 8 tokens, each chosen expert
 * once per step), or, on the GEMM path, in steps of up to DEVICE_PREFILL_TOKENS where no logits
 * are asked (engine/backend/device_plan.h device_step_tokens); attention of several queries runs the
 * prefill kernel (each staged cache chunk serves 16 query rows). Routing, expert choice and the
 * weighted sum stay on the device, and the position lives in device memory, so one captured
 * CUDA graph per step shape (token count, with or without logits) serves every step: each NCCL
 * rank captures its own, the local ranks one together. Steps of DEVICE_GEMM_MIN_TOKENS tokens
 * or more run the dense projections (q_a, kv_a, q_b, o_proj, router, lm_head, the dense and
 * shared MLPs) as BF16 tensor-core GEMMs instead, exact weights times hi + lo activations so
 * they round like the fp32 GEMV (kernels/cuda/gemm.h; launched, not captured), and an expert
 * with DEVICE_EXPERT_GEMM_MIN_TOKENS tokens of the step runs them as GEMMs too (the host reads
 * the per-expert counts once per MoE layer); KIMI_CUDA_PREFILL=steps keeps all of them on the
 * GEMV. KIMI_CUDA_PREFILL_TRACE=1 prints each prefill step's size and how its experts ran. The
 * embedding rows are looked up on the host (one row per token, so the 2.3 GB table never needs
 * device memory). With --dcp N the latent cache is sharded by position over groups of N ranks
 * (engine/backend/kv_shard.h): each rank stores 1/N of the rows and the attention exchanges
 * queries and partial results within the group (sharded_attention, as the CPU's forward.c).
 * A verify step of speculative decoding (cuda_backend_decode_tokens, up to
 * BACKEND_DECODE_TOKENS_MAX tokens) runs every token as its one-token decode step would, bit
 * for bit, in one step: the GEMVs read each weight once per 8 tokens but split K as one token
 * does (linear_gemv_tokens_exact_cuda), the attention is the decode kernel per token (the
 * sharded attention's per-token parts with --dcp), never a GEMM; it has a graph per token count
 * of its own. */
#include "engine/backend/backend_impl.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/backend/cuda_comm.h"
#include "engine/backend/device_plan.h"
#include "engine/backend/kv_shard.h"
#include "engine/backend/spin_barrier.h"
#include "engine/base/cpu_count.h"
#include "engine/base/monotonic.h"
#include "kernels/attention_merge_math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/forward.h"
#include "kernels/cuda/gemm.h"

enum { MAX_RANKS = DEVICE_MAX_RANKS, STAGING_BYTES = 32 << 20 };
_Static_assert((int)DEVICE_MAX_TOKENS == (int)FORWARD_MAX_TOKENS,
               "the workspace plan and the kernels serve as many tokens");
_Static_assert((int)DEVICE_ATTENTION_ROWS == (int)MLA_PREFILL_ROWS,
               "the workspace plan knows the prefill attention's rows per block");

/* How often backend_open reports load progress (backend_options.on_load). */
#define LOAD_REPORT_SECONDS 0.1

typedef struct {
    weight_matrix q_a, kv_a, q_b, kv_b, o, router;
    float *input_norm, *post_norm, *q_a_norm, *kv_a_norm;
    float *router_bias;         /* NULL without a correction bias */
    int is_moe, has_shared;
    mlp_device *host_table;     /* [experts + 1]: [0] dense or shared MLP, [1 + e] expert e */
    mlp_device *table;          /* the same in device memory */
} layer_device;

typedef struct rank_device {
    struct cuda_backend *be;
    int rank, device;
    pthread_t thread;
    int started;
    int status;                 /* the rank's last job: 0, a KIMI_ERR_* (err says why) or BACKEND_STOPPED */
    kimi_err err;
    cudaStream_t stream;        /* its own (NCCL), or the backend's shared stream (local) */
    tp_shard shard;
    int heads;
    uint8_t *arena;             /* weights, vectors and tables: one allocation */
    size_t arena_bytes, arena_used;
    layer_device *layers;
    weight_matrix lm_head;
    float *final_norm;
    uint8_t *cache;             /* [layers][slots][cache_row bytes] (kernels/kv_format.h): the positions
                                   this rank stores (engine/backend/kv_shard.h; all of them at dcp 1) */
    int dcp_member;             /* this rank's member index in its group of dcp */
    float *dcp_ws;              /* dcp > 1: the sharded attention's buffers (device_dcp_workspace) */
    device_dcp_workspace dcp_layout;
    float *ws;                  /* device_workspace */
    device_workspace layout;
    gemv_scratch gemv;
    gemm_context gemm;          /* cuBLASLt plans are per thread: one per rank */
    int *pos;                   /* device: the position of the step */
    int *numerics;              /* device [2]: [0] cache values saturated (unsigned), [1] the first
                                   layer whose output was non-finite as layers - layer (0: none) */
    double *inv_freq;           /* device: [rope / 2] */
    float *logits;              /* rank 0, device [DEVICE_MAX_TOKENS * vocab]: the gathered logits,
                                   rank r's block [T][its vocab columns] at T * col_begin[r] */
    int *host_offsets;          /* [experts + 1]: the expert counts a GEMM prefill step reads (a copy into it
                                   may still be queued when a step gives up: freed with the rank) */
    uint8_t *staging[2];        /* pinned upload buffers (while loading) */
    cudaEvent_t staged[2];      /* the copy out of staging[i] has finished */
    int next_staging;
    atomic_size_t uploaded;     /* bytes of packed weights on the device so far */
    cudaGraphExec_t graph[DEVICE_MAX_TOKENS + 1][2]; /* [tokens][with logits]: NCCL, this rank's;
                                                        local, rank 0's holds every rank's step */
    cudaGraphExec_t verify_graph[BACKEND_DECODE_TOKENS_MAX + 1];   /* [tokens]: the verify steps, the same way */
    int *verify_pos;            /* device [BACKEND_DECODE_TOKENS_MAX]: a verify step's positions, *pos + t */
} rank_device;

typedef enum { JOB_OPEN, JOB_STEP, JOB_QUIT } rank_job;

struct cuda_backend {
    const model_weights *mw;
    const model_config *cfg;
    int tp, sm_count, splits, use_graphs;
    int prefill_gemm;           /* steps of DEVICE_GEMM_MIN_TOKENS or more project through GEMMs */
    int prefill_trace;          /* KIMI_CUDA_PREFILL_TRACE=1: one line per prefill step on stderr */
    atomic_long traced_gemm_experts, traced_gemm_slots;     /* of the step, every rank: experts run as
                                                               GEMMs, their slots */
    device_assignment devices;
    long capacity;
    int dcp;                    /* the cache is sharded by position over groups of dcp ranks (--dcp) */
    long slots;                 /* positions a rank stores: kv_shard_slots(capacity, dcp) */
    kv_cache_format cache_format;
    size_t cache_row;           /* bytes of one position's row in one layer */
    cuda_comm *comm;
    cudaStream_t shared_stream; /* local: the one stream of every rank */
    size_t col_begin[MAX_RANKS + 1];    /* rank r's logits are vocab columns [col_begin[r], col_begin[r + 1]) */
    double cos_sin_scale;
    float softmax_scale;
    rope_table rope;
    moe_routing_config routing;
    float *host_h;              /* pinned [DEVICE_PREFILL_TOKENS][hidden]: the embedding rows of the step */
    int *host_pos;              /* pinned: the step's first position */
    float *host_logits;         /* pinned [DEVICE_MAX_TOKENS * vocab], laid out as rank 0's logits */
    int *host_numerics;         /* pinned [2]: rank 0's numerics of the last step */
    long cache_clamps;          /* saturated cache values since backend_take_numerics */
    int broken;                 /* a failed step aborted the NCCL communicators */

    /* the rank threads and the job they run next (written by the calling thread before job_start) */
    int barriers;               /* job_start, job_done and ranks_meet are initialised */
    int threads;                /* rank threads started */
    spin_barrier job_start, job_done;   /* the rank threads and the calling thread */
    spin_barrier ranks_meet;            /* the rank threads, within a step */
    rank_device ranks[MAX_RANKS];
    rank_job job;
    int step_tokens, step_logits;
    int step_verify;            /* the step is cuda_backend_decode_tokens': every token as a one-token step */
    int verify_pos[BACKEND_DECODE_TOKENS_MAX];  /* its positions, copied to each rank's verify_pos */
    atomic_int enqueue_failed;  /* a rank of this step gave up before the meeting after its enqueue */
    atomic_int first_failed;    /* the rank that gave up first, -1 none */
    int capture_status;         /* local: rank 0's cudaStreamBeginCapture (read after a meeting) */
    atomic_int stop_load;       /* the load stops: on_load asked, or a rank failed */
    /* backend_options.on_layer: a prefill checks it after each step (the device runs a step's
     * layers without the host, so a cancel takes effect within one step, not one layer) */
    int (*on_layer)(void *user, double tokens_done);
    void *on_layer_user;
    atomic_int ranks_loaded;    /* ranks done with JOB_OPEN */

    /* the cache sized at open from a measurement (rank_cache_open), by rank: of its device */
    int fit_context;            /* backend_options.fit_context */
    size_t survey_free[MAX_RANKS];      /* free memory when backend_setup planned */
    size_t planned_fixed[MAX_RANKS];    /* the plan's weights + workspaces of every rank on the device */
    size_t device_position_bytes[MAX_RANKS];    /* the cache of every rank on the device, per position */
    size_t measured_free[MAX_RANKS];    /* free before the cache (set by the device's first rank) */
    long long overhead_bytes;   /* the largest measured_overhead over the devices */
    int overhead_device;
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

/* ---- devices and the memory plan ---- */

/* What the devices of this open look like: which device each rank gets, what each has free. */
typedef struct {
    device_assignment a;
    size_t free_bytes[DEVICE_MAX_ORDINAL + 1];  /* by ordinal; devices in use only */
    int sm_count;               /* the fewest multiprocessors of the devices in use */
} device_survey;

static int devices_survey(const backend_options *opt, device_survey *s, kimi_err *err)
{
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "--backend cuda: no CUDA device is available (%s)",
                         status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    count = count > DEVICE_MAX_ORDINAL + 1 ? DEVICE_MAX_ORDINAL + 1 : count;
    size_t total[DEVICE_MAX_ORDINAL + 1];
    for (int d = 0; d < count; d++) {
        struct cudaDeviceProp prop;
        CUDA_TRY(cudaGetDeviceProperties(&prop, d), "cudaGetDeviceProperties");
        total[d] = prop.totalGlobalMem;
    }
    if (device_assign(opt->tp, opt->devices, opt->n_devices, total, count, getenv("KIMI_CUDA_COMM"), &s->a, err))
        return err->code;
    /* Ranks on different models could round differently (cuBLASLt picks its GEMM per device),
     * and every rank routes its tokens from its own router logits: a near-tie decided two ways
     * would send the ranks' slices of one token to different experts. */
    struct cudaDeviceProp first, other;
    CUDA_TRY(cudaGetDeviceProperties(&first, s->a.device[0]), "cudaGetDeviceProperties");
    for (int r = 1; r < s->a.n_distinct; r++) {
        const struct cudaDeviceProp *p = &other;
        CUDA_TRY(cudaGetDeviceProperties(&other, s->a.device[r]), "cudaGetDeviceProperties");
        if (strcmp(p->name, first.name) || p->multiProcessorCount != first.multiProcessorCount ||
            p->major != first.major || p->minor != first.minor)
            return kimi_fail(err, KIMI_ERR_USAGE, "--devices: device %d is a %s (sm_%d%d, %d SMs), device %d a %s "
                             "(sm_%d%d, %d SMs); the ranks need GPUs of one model", s->a.device[r], p->name, p->major,
                             p->minor, p->multiProcessorCount, s->a.device[0], first.name, first.major, first.minor,
                             first.multiProcessorCount);
    }
    s->sm_count = 0;
    for (int r = 0; r < s->a.tp; r++) {
        int d = s->a.device[r], sm = 0;
        char what[64];
        snprintf(what, sizeof what, "device %d", d);
        CUDA_TRY(cudaSetDevice(d), what);
        CUDA_TRY(cudaMemGetInfo(&s->free_bytes[d], &total[d]), what);
        CUDA_TRY(cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, d), what);
        s->sm_count = s->sm_count == 0 || sm < s->sm_count ? sm : s->sm_count;
    }
    return 0;
}

static int plans_make(const model_weights *mw, int tp, int dcp, int splits, kv_cache_format cache_format,
                      device_rank_plan *plans, kimi_err *err)
{
    for (int r = 0; r < tp; r++)
        if (device_rank_plan_make(mw, tp, r, splits, cache_format, &plans[r], err) ||
            device_rank_plan_shard(&plans[r], mw, tp, r, dcp, splits, cache_format, err))
            return err->code;
    return 0;
}

int cuda_backend_memory(const model_weights *mw, const backend_options *opt, size_t *rank_budget_bytes,
                        size_t *rank_fixed_bytes, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    if (opt->tp < 1 || opt->tp > MAX_RANKS)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d: must be between 1 and %d", opt->tp, MAX_RANKS);
    device_survey s;
    device_rank_plan plans[MAX_RANKS];
    if (devices_survey(opt, &s, err) ||
        plans_make(mw, opt->tp, opt->dcp > 1 ? opt->dcp : 1, device_attention_splits(0x7FFFFFFFL, s.sm_count),
                   opt->kv_cache, plans, err))
        return err->code;
    device_memory_plan plan;
    device_memory_plan_make(plans, &s.a, s.free_bytes, DEVICE_RESERVE_BYTES, &plan);
    *rank_budget_bytes = plan.rank_budget_bytes;
    *rank_fixed_bytes = plan.rank_fixed_bytes;
    return 0;
}

/* ---- upload (on the rank's thread) ---- */

static void *arena_take(rank_device *rd, size_t bytes)
{
    size_t at = (rd->arena_used + DEVICE_ALIGN - 1) / DEVICE_ALIGN * DEVICE_ALIGN;
    if (at + bytes > rd->arena_bytes)
        return NULL;
    rd->arena_used = at + bytes;
    return rd->arena + at;
}

/* The next staging buffer, once the copy that last read it has finished. */
static int staging_next(rank_device *rd, uint8_t **buffer, int *index, kimi_err *err)
{
    *index = rd->next_staging;
    rd->next_staging ^= 1;
    CUDA_TRY(cudaEventSynchronize(rd->staged[*index]), "upload staging");
    *buffer = rd->staging[*index];
    return 0;
}

/* Ask the kernel to start reading rows [row_begin, row_end) of view from the checkpoint. */
static void readahead(const weight_matrix *view, int row_begin, int row_end)
{
    static long page;
    if (!page)
        page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    byte_span spans[2];
    packed_rows_source(view, row_begin < view->rows ? row_begin : view->rows,
                       row_end < view->rows ? row_end : view->rows, spans);
    for (int i = 0; i < 2; i++) {
        if (spans[i].begin == spans[i].end)
            continue;
        uintptr_t begin = (uintptr_t)spans[i].begin / (uintptr_t)page * (uintptr_t)page;
        /* a hint: a failure changes nothing but the speed */
        (void)posix_madvise((void *)begin, (size_t)((uintptr_t)spans[i].end - begin), POSIX_MADV_WILLNEED);
    }
}

/* Pack view into device memory at data/scale, through the staging buffers in row pieces. */
static int upload_packed(rank_device *rd, const weight_matrix *view, const packed_layout *layout, uint8_t *data,
                         uint8_t *scale, kimi_err *err)
{
    size_t row_bytes = layout->data_pitch + layout->scale_pitch, done = 0;
    int rows_per_piece = (int)(STAGING_BYTES / row_bytes);
    if (rows_per_piece < 1)
        return kimi_fail(err, KIMI_ERR_MODEL, "a weight row of %zu bytes exceeds the %d-byte upload buffer", row_bytes,
                         STAGING_BYTES);
    readahead(view, 0, rows_per_piece);
    for (int first = 0; first < view->rows; first += rows_per_piece) {
        if (atomic_load(&rd->be->stop_load))
            return BACKEND_STOPPED;
        int count = view->rows - first < rows_per_piece ? view->rows - first : rows_per_piece;
        readahead(view, first + count, first + count + rows_per_piece);
        uint8_t *buffer = NULL;
        int index = 0;
        if (staging_next(rd, &buffer, &index, err))
            return err->code;
        uint8_t *scale_part = buffer + (size_t)count * layout->data_pitch;
        packed_rows_write(view, layout, first, first + count, buffer, scale_part);
        CUDA_TRY(cudaMemcpyAsync(data + (size_t)first * layout->data_pitch, buffer, (size_t)count * layout->data_pitch,
                                 cudaMemcpyHostToDevice, rd->stream),
                 "weight upload");
        if (view->format == WEIGHT_NVFP4)
            CUDA_TRY(cudaMemcpyAsync(scale + (size_t)first * layout->scale_pitch, scale_part,
                                     (size_t)count * layout->scale_pitch, cudaMemcpyHostToDevice, rd->stream),
                     "weight scale upload");
        CUDA_TRY(cudaEventRecord(rd->staged[index], rd->stream), "upload event");
        /* counted when queued: the next staging_next waits for the copy before last */
        size_t piece = (size_t)count * row_bytes;
        atomic_fetch_add(&rd->uploaded, piece);
        done += piece;
    }
    atomic_fetch_add(&rd->uploaded, layout->bytes - done);   /* the alignment padding */
    return 0;
}

typedef struct {
    rank_device *rd;
    kimi_err *err;
} upload_ctx;

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
    int rc = upload_packed(rd, &w->view, &layout, data, scale, err);
    if (rc)
        return rc;
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

/* A vector decoded to float into the arena, through a staging buffer like the weights (the
 * rank's stream orders the copy; cudaMemcpy's legacy stream would not be waited for). */
static int upload_vector(rank_device *rd, const weight_vector *v, float **out, kimi_err *err)
{
    size_t bytes = (size_t)v->n * sizeof(float);
    if (bytes > STAGING_BYTES)
        return kimi_fail(err, KIMI_ERR_MODEL, "a vector of %d floats exceeds the %d-byte upload buffer", v->n,
                         STAGING_BYTES);
    if (!(*out = arena_take(rd, bytes)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "the device weight plan is short of a vector of %d floats", v->n);
    uint8_t *buffer = NULL;
    int index = 0;
    if (staging_next(rd, &buffer, &index, err))
        return err->code;
    weight_vector_decode(v, (float *)buffer);
    CUDA_TRY(cudaMemcpyAsync(*out, buffer, bytes, cudaMemcpyHostToDevice, rd->stream), "vector upload");
    CUDA_TRY(cudaEventRecord(rd->staged[index], rd->stream), "upload event");
    return 0;
}

static int rank_upload(struct cuda_backend *be, rank_device *rd, const device_rank_plan *plan, kimi_err *err)
{
    const model_config *c = be->cfg;
    const model_weights *mw = be->mw;
    rd->arena_bytes = plan->weight_bytes;
    CUDA_TRY(cudaMalloc((void **)&rd->arena, rd->arena_bytes), "weights");
    for (int i = 0; i < 2; i++) {
        CUDA_TRY(cudaHostAlloc((void **)&rd->staging[i], STAGING_BYTES, cudaHostAllocDefault), "pinned staging");
        CUDA_TRY(cudaEventCreateWithFlags(&rd->staged[i], cudaEventDisableTiming), "event");
    }
    upload_ctx u = {rd, err};
    int rc = device_weights_visit(mw, &rd->shard, upload_weight, &u);
    if (rc)
        return rc;
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
        CUDA_TRY(cudaMemcpyAsync(ld->table, ld->host_table, table_bytes, cudaMemcpyHostToDevice, rd->stream),
                 "expert table upload");
    }
    if (upload_vector(rd, &mw->final_norm, &rd->final_norm, err))
        return err->code;
    /* the host tables and staging buffers are read by queued copies: wait before they change */
    CUDA_TRY(cudaStreamSynchronize(rd->stream), "upload");
    for (int i = 0; i < 2; i++) {
        cudaEventDestroy(rd->staged[i]);
        cudaFreeHost(rd->staging[i]);
        rd->staged[i] = NULL;
        rd->staging[i] = NULL;
    }
    return 0;
}

/* The rank's place in its group of dcp and, when the cache is sharded, the sharded attention's
 * buffers (device_dcp_workspace). */
static int rank_open_sharding(struct cuda_backend *be, rank_device *rd, kimi_err *err)
{
    rd->dcp_member = rd->rank % be->dcp;
    if (be->dcp == 1)
        return 0;
    device_dcp_workspace_plan(be->cfg, rd->heads, be->dcp, be->splits, be->cache_format, &rd->dcp_layout);
    size_t bytes = rd->dcp_layout.total * sizeof(float);
    CUDA_TRY(cudaMalloc((void **)&rd->dcp_ws, bytes), "sharded attention buffers");
    CUDA_TRY(cudaMemsetAsync(rd->dcp_ws, 0, bytes, rd->stream), "sharded attention buffers clear");
    return 0;
}

/* Everything of one rank, on its thread (its device current): the shard, then the cache,
 * workspace and step state. */
static int rank_open(struct cuda_backend *be, rank_device *rd, kimi_err *err)
{
    const model_config *c = be->cfg;
    const model_weights *mw = be->mw;
    device_rank_plan plan;
    if (device_rank_plan_make(mw, be->tp, rd->rank, be->splits, be->cache_format, &plan, err) ||
        tp_shard_plan(mw, be->tp, rd->rank, &rd->shard, err))
        return err->code;
    rd->heads = rd->shard.heads.end - rd->shard.heads.begin;
    rd->layers = calloc((size_t)c->layers, sizeof *rd->layers);
    rd->host_offsets = malloc(((size_t)c->experts + 1) * sizeof *rd->host_offsets);
    if (!rd->layers || !rd->host_offsets)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for %d layers", c->layers);
    for (int i = 0; i < c->layers; i++) {
        rd->layers[i].host_table = calloc((size_t)c->experts + 1, sizeof(mlp_device));
        if (!rd->layers[i].host_table)
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the expert table of layer %d", i);
        rd->layers[i].is_moe = mw->layers[i].is_moe;
        rd->layers[i].has_shared = mw->layers[i].is_moe && c->shared_experts > 0;
    }
    if (be->shared_stream)
        rd->stream = be->shared_stream;
    else
        CUDA_TRY(cudaStreamCreateWithFlags(&rd->stream, cudaStreamNonBlocking), "stream");
    /* kernel attributes once per device here, never in a step a graph captures */
    int attention = mla_attention_setup_cuda(c->kv_lora_rank, c->qk_rope_dim);
    if (attention)
        return cuda_fail(err, (cudaError_t)attention, "attention shared memory limit");
    int rc = rank_upload(be, rd, &plan, err);
    if (rc)
        return rc;

    /* the sharded attention's buffers before the survey, like the workspace */
    if (rank_open_sharding(be, rd, err))
        return err->code;
    device_workspace_plan(c, &rd->shard, be->splits, &rd->layout);
    CUDA_TRY(cudaMalloc((void **)&rd->ws, rd->layout.total * sizeof(float)), "workspace");
    CUDA_TRY(cudaMemsetAsync(rd->ws, 0, rd->layout.total * sizeof(float), rd->stream), "workspace clear");
    rd->gemv = (gemv_scratch){rd->ws + rd->layout.gemv_partials, (unsigned *)(rd->ws + rd->layout.gemv_counters),
                              device_max_gemv_rows(c, &rd->shard), be->sm_count};
    CUDA_TRY(cudaMalloc((void **)&rd->pos, sizeof(int)), "position");
    CUDA_TRY(cudaMalloc((void **)&rd->verify_pos, BACKEND_DECODE_TOKENS_MAX * sizeof(int)), "verify positions");
    CUDA_TRY(cudaMalloc((void **)&rd->numerics, 2 * sizeof(int)), "numerics");
    CUDA_TRY(cudaMemsetAsync(rd->numerics, 0, 2 * sizeof(int), rd->stream), "numerics clear");
    size_t pairs = (size_t)(c->qk_rope_dim / 2);
    CUDA_TRY(cudaMalloc((void **)&rd->inv_freq, pairs * sizeof(double)), "rope table");
    CUDA_TRY(cudaMemcpyAsync(rd->inv_freq, be->rope.inv_freq, pairs * sizeof(double), cudaMemcpyHostToDevice,
                             rd->stream),
             "rope table");
    if (rd->rank == 0)
        CUDA_TRY(cudaMalloc((void **)&rd->logits, (size_t)DEVICE_MAX_TOKENS * (size_t)c->vocab * sizeof(float)),
                 "logits");
    if (be->prefill_gemm) {
        int gemm_status = gemm_context_create(&rd->gemm);
        if (gemm_status)
            return cuda_fail(err, (cudaError_t)gemm_status, "cuBLASLt handle");
    }
    CUDA_TRY(cudaStreamSynchronize(rd->stream), "clearing the workspace");
    return 0;
}

/* The first rank on rank r's device (the one that measures it). */
static int device_first_rank(const struct cuda_backend *be, int r)
{
    int q = 0;
    while (be->devices.device[q] != be->devices.device[r])
        q++;
    return q;
}

/* Positions the measured free memory holds next to DEVICE_RESERVE_BYTES (for the step graphs,
 * instantiated later, the modules loaded at first launch and the driver), on the tightest
 * device (*tightest, its first rank). */
static long measured_fit(const struct cuda_backend *be, int *tightest)
{
    long fit = -1;
    for (int r = 0; r < be->tp; r++) {
        if (device_first_rank(be, r) != r)
            continue;
        size_t free_bytes = be->measured_free[r];
        long here = free_bytes > DEVICE_RESERVE_BYTES
                        ? (long)((free_bytes - DEVICE_RESERVE_BYTES) / be->device_position_bytes[r]) : 0;
        if (fit < 0 || here < fit) {
            fit = here;
            *tightest = r;
        }
    }
    return fit;
}

/* The memory rank r's device took beyond the plan before the cache: free at the survey, less free
 * now, less the weights and workspaces the plan counted. */
static long long measured_overhead(const struct cuda_backend *be, int r)
{
    return (long long)be->survey_free[r] - (long long)be->measured_free[r] - (long long)be->planned_fixed[r];
}

/* After rank_open and rank_connect on every rank (status: this rank's result, in rd->status):
 * once every rank's weights, workspace, communicator buffers and cuBLASLt handle exist, each
 * device's free memory is measured again and the cache sized from it, the same on every rank:
 * the asked capacity, lowered to what fits when the context was the plan's fit
 * (backend_options.fit_context), else an error naming the numbers. cuda_backend_open keeps
 * the capacity. */
static int rank_cache_open(struct cuda_backend *be, rank_device *rd, int status)
{
    kimi_err *err = &rd->err;
    spin_barrier_wait(&be->ranks_meet);     /* every rank's allocations are made, its status written */
    for (int r = 0; r < be->tp; r++)
        if (be->ranks[r].status)
            return status;
    if (device_first_rank(be, rd->rank) == rd->rank) {
        size_t free_bytes = 0, total = 0;
        be->measured_free[rd->rank] = cudaMemGetInfo(&free_bytes, &total) == cudaSuccess ? free_bytes : 0;
    }
    spin_barrier_wait(&be->ranks_meet);     /* every device is measured */
    int tightest = 0;
    long fit = measured_fit(be, &tightest), capacity = be->capacity;
    if (fit < capacity && !be->fit_context)
        return kimi_fail(err, KIMI_ERR_NOMEM, "max context %ld does not fit on CUDA device %d once the runtime has "
                         "its memory: %.1f MiB free before the cache (%.1f MiB taken beyond the plan's weights and "
                         "workspaces: NCCL, cuBLASLt, the runtime), %zu MiB kept for graphs and the driver, %zu B of "
                         "cache per position: at most %ld positions", capacity, be->devices.device[tightest],
                         be->measured_free[tightest] / 1048576.0, measured_overhead(be, tightest) / 1048576.0,
                         DEVICE_RESERVE_BYTES >> 20, be->device_position_bytes[tightest], fit);
    if (fit < capacity)
        capacity = fit;
    if (capacity < 1)
        return kimi_fail(err, KIMI_ERR_NOMEM, "CUDA device %d holds no KV cache position once the runtime has its "
                         "memory: %.1f MiB free before the cache, %zu MiB kept for graphs and the driver",
                         be->devices.device[tightest], be->measured_free[tightest] / 1048576.0,
                         DEVICE_RESERVE_BYTES >> 20);
    /* a rank holds its share of the positions (kv_shard_slots; all of them at dcp 1) */
    size_t cache_bytes = (size_t)be->cfg->layers * (size_t)kv_shard_slots(capacity, be->dcp) * be->cache_row;
    cudaError_t allocated = cudaMalloc((void **)&rd->cache, cache_bytes);
    if (allocated != cudaSuccess)
        return kimi_fail(err, KIMI_ERR_NOMEM, "CUDA: a KV cache of %ld positions (%zu MiB) does not fit: %s",
                         capacity, cache_bytes >> 20, cudaGetErrorString(allocated));
    CUDA_TRY(cudaMemsetAsync(rd->cache, 0, cache_bytes, rd->stream), "cache clear");
    CUDA_TRY(cudaStreamSynchronize(rd->stream), "clearing the cache");
    return 0;
}

/* The rank's step graphs (on its thread); one still running is freed when it ends. */
static void rank_graphs_destroy(rank_device *rd)
{
    for (int t = 0; t <= DEVICE_MAX_TOKENS; t++)
        for (int i = 0; i < 2; i++)
            if (rd->graph[t][i]) {
                cudaGraphExecDestroy(rd->graph[t][i]);
                rd->graph[t][i] = NULL;
            }
    for (int t = 0; t <= BACKEND_DECODE_TOKENS_MAX; t++)
        if (rd->verify_graph[t]) {
            cudaGraphExecDestroy(rd->verify_graph[t]);
            rd->verify_graph[t] = NULL;
        }
}

/* Frees what rank_open made (on the rank's thread). */
static void rank_close(struct cuda_backend *be, rank_device *rd)
{
    if (rd->stream)
        cudaStreamSynchronize(rd->stream);
    rank_graphs_destroy(rd);
    for (int i = 0; i < 2; i++) {
        if (rd->staged[i])
            cudaEventDestroy(rd->staged[i]);
        cudaFreeHost(rd->staging[i]);
    }
    if (rd->layers)
        for (int i = 0; i < be->cfg->layers; i++)
            free(rd->layers[i].host_table);
    free(rd->layers);
    free(rd->host_offsets);
    cudaFree(rd->arena);
    cudaFree(rd->cache);
    cudaFree(rd->dcp_ws);
    cudaFree(rd->ws);
    cudaFree(rd->pos);
    cudaFree(rd->verify_pos);
    cudaFree(rd->numerics);
    cudaFree(rd->inv_freq);
    cudaFree(rd->logits);
    gemm_context_destroy(&rd->gemm);
    if (rd->stream && rd->stream != be->shared_stream)
        cudaStreamDestroy(rd->stream);
}

/* ---- one step of one rank ---- */

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
    if (rd->be->step_verify)
        return linear_gemv_tokens_exact_cuda(w, w->rows, 1, 0, x, 0, x_width, y, 0, (size_t)w->rows, tokens, &rd->gemv,
                                             s);
    return linear_gemv_tokens_cuda(w, w->rows, 1, 0, x, 0, x_width, y, 0, (size_t)w->rows, tokens, &rd->gemv, s);
}

/* y[t] = W x[t] as BF16 GEMMs when the step is long enough (device_gemm_plan_make), else the GEMV. */
static int project(struct cuda_backend *be, rank_device *rd, const weight_matrix *w, const float *x, size_t x_width,
                   float *y, int tokens, cudaStream_t s)
{
    const device_workspace *l = &rd->layout;
    device_gemm_plan p;
    if (!be->prefill_gemm || be->step_verify || device_gemm_plan_make(w, tokens, (size_t)w->rows, l, &p))
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
            STEP_TRY(gemm_bf16_cuda(&rd->gemm, tokens, rows, p.k, alpha, a, p.lda, part ? lo : hi, p.ldb,
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
    if (!be->prefill_gemm || be->step_verify || device_gemm_plan_make(&m->gate, T, (size_t)m->gate.rows, l, &p) ||
        device_gemm_plan_make(&m->up, T, (size_t)m->up.rows, l, &p) ||
        device_gemm_plan_make(&m->down, T, (size_t)m->down.rows, l, &p))
        return 1;
    int inter = m->gate.rows;
    float *up = ws(rd, l->gemm_up);
    *status = project(be, rd, &m->gate, x, (size_t)c->hidden, act, T, rd->stream);
    if (!*status)
        *status = project(be, rd, &m->up, x, (size_t)c->hidden, up, T, rd->stream);
    if (!*status)
        *status = silu_gate_cuda(act, up, act, (size_t)T * (size_t)inter, rd->stream);
    if (!*status)
        *status = project(be, rd, &m->down, act, (size_t)inter, y, T, rd->stream);
    return 0;
}

static uint8_t *layer_cache(struct cuda_backend *be, rank_device *rd, int layer)
{
    return rd->cache + (size_t)layer * (size_t)be->slots * be->cache_row;
}

/* A communicator's failure inside a step's launches: rd->err says it already (launch_fail). */
enum { STEP_COMM_FAILED = -1 };

/* Decode context parallelism (engine/backend/kv_shard.h), the CPU's forward.c sharded_attention
 * on the device: every query of the step attends as a decode step does (absorbed), over cache
 * positions spread across the group: the group's absorbed queries are gathered, each member takes
 * all of them over the positions it stores (split-K parts merged into one unnormalised part per
 * query and head), the parts go to the ranks whose heads they are (all-to-all), and each rank
 * merges the dcp parts of its heads exactly into o_latent (kernels/attention_merge_math.h).
 * Returns 0, a cudaError_t of a launcher, or STEP_COMM_FAILED. */
static int sharded_attention(struct cuda_backend *be, rank_device *rd, int layer, int T)
{
    const model_config *c = be->cfg;
    const device_dcp_workspace *d = &rd->dcp_layout;
    cudaStream_t s = rd->stream;
    int queries = be->dcp * T;
    size_t heads = (size_t)rd->heads, abs_width = (size_t)c->kv_lora_rank + (size_t)c->qk_rope_dim;
    float *q_abs = rd->dcp_ws + d->q_abs, *q_group = rd->dcp_ws + d->q_group;
    float *parts_send = rd->dcp_ws + d->parts_send, *parts_recv = rd->dcp_ws + d->parts_recv;
    STEP_TRY(mla_query_pack_cuda(ws(rd, rd->layout.q_latent), ws(rd, rd->layout.q), rd->heads, c->kv_lora_rank,
                                 c->qk_nope_dim, c->qk_rope_dim, q_abs, T, s));
    if (cuda_comm_group_all_gather(be->comm, rd->rank, be->dcp, q_abs, q_group, (size_t)T * heads * abs_width, s,
                                   &rd->err))
        return STEP_COMM_FAILED;
    STEP_TRY(mla_decode_shard_cuda(q_group, queries, T, rd->heads, c->kv_lora_rank, c->qk_rope_dim, be->softmax_scale,
                                   layer_cache(be, rd, layer), be->cache_format, rd->pos, be->dcp, rd->dcp_member,
                                   device_attention_splits_for(be->splits, queries), rd->dcp_ws + d->partials,
                                   parts_send, s));
    if (cuda_comm_group_all_to_all(be->comm, rd->rank, be->dcp, parts_send, parts_recv,
                                   (size_t)T * heads * ATTENTION_PART_FLOATS(c->kv_lora_rank), s, &rd->err))
        return STEP_COMM_FAILED;
    return mla_merge_shard_parts_cuda(parts_recv, be->dcp, rd->heads, c->kv_lora_rank, ws(rd, rd->layout.o_latent), T,
                                      s);
}

/* A verify step's attention: each token's query runs the decode kernel as a one-token step at
 * its position does (the same parts of its sequence, so the same sums), over the cache rows the
 * step has just written up to its own. As many tokens per launch as the decode partials hold,
 * each launch reading its first position from verify_pos. */
static int verify_attention(struct cuda_backend *be, rank_device *rd, int layer, int T)
{
    const model_config *c = be->cfg;
    const device_workspace *l = &rd->layout;
    int splits = device_attention_splits_for(be->splits, 1);
    int per_launch = (splits > DEVICE_MAX_TOKENS ? splits : DEVICE_MAX_TOKENS) / splits;
    size_t latent = (size_t)rd->heads * (size_t)c->kv_lora_rank;
    size_t q_row = (size_t)rd->heads * (size_t)(c->qk_nope_dim + c->qk_rope_dim);
    for (int first = 0; first < T; first += per_launch) {
        int count = T - first < per_launch ? T - first : per_launch;
        STEP_TRY(mla_decode_cuda(ws(rd, l->q_latent) + (size_t)first * latent, ws(rd, l->q) + (size_t)first * q_row,
                                 rd->heads, c->kv_lora_rank, c->qk_rope_dim, c->qk_nope_dim, be->softmax_scale,
                                 layer_cache(be, rd, layer), be->cache_format, rd->verify_pos + first, splits,
                                 ws(rd, l->attn_partials), ws(rd, l->o_latent) + (size_t)first * latent, count,
                                 rd->stream));
    }
    return 0;
}

/* x = rmsnorm(h) -> partial = this rank's share of o_proj(attention(x)), cache rows written;
 * for the step's T tokens at positions *pos + t. epilogue not NULL (one token): o_proj's launch
 * also runs the residual epilogue (reduce_into_h's work). */
static int attention_step(struct cuda_backend *be, rank_device *rd, int layer, int T,
                          const residual_epilogue *epilogue)
{
    const model_config *c = be->cfg;
    const layer_device *ld = &rd->layers[layer];
    const device_workspace *l = &rd->layout;
    cudaStream_t s = rd->stream;
    int q_width = c->qk_nope_dim + c->qk_rope_dim, kv_b_rows = c->qk_nope_dim + c->v_head_dim;
    size_t hidden = (size_t)c->hidden, heads = (size_t)rd->heads, kv_lora = (size_t)c->kv_lora_rank;
    float *x = ws(rd, l->x), *q_a = ws(rd, l->q_a), *q = ws(rd, l->q), *kv = ws(rd, l->kv);
    if (T == 1 && be->dcp == 1 && ld->q_a.format == ld->kv_a.format && ld->q_a.cols == ld->kv_a.cols) {
        /* decode: q_a + kv_a with their norms and the cache row in one launch, q_pe's rope with
         * the absorption (launches are a decode step's overhead: docs/CUDA.md); a sharded
         * cache's row goes to its owner, which the unfused cache write knows */
        mla_qkv_tail tail = {ld->q_a_norm, ld->kv_a_norm, c->rms_norm_eps, c->kv_lora_rank, c->qk_rope_dim,
                             rd->inv_freq, be->cos_sin_scale, rd->pos, layer_cache(be, rd, layer), be->cache_format,
                             (unsigned *)rd->numerics};
        STEP_TRY(mla_qkv_a_cuda(&ld->q_a, &ld->kv_a, x, q_a, kv, &tail, &rd->gemv, s));
        STEP_TRY(gemv(rd, &ld->q_b, q_a, (size_t)c->q_lora_rank, q, T, s));
        STEP_TRY(mla_absorb_q_rope_cuda(&ld->kv_b, rd->heads, c->qk_nope_dim, c->v_head_dim, c->qk_rope_dim, q, q_width,
                                        ws(rd, l->q_latent), rd->inv_freq, be->cos_sin_scale, rd->pos, T, s));
    } else {
        STEP_TRY(project(be, rd, &ld->q_a, x, hidden, q_a, T, s));
        STEP_TRY(project(be, rd, &ld->kv_a, x, hidden, kv, T, s));
        STEP_TRY(rmsnorm_cuda(q_a, q_a, ld->q_a_norm, T, c->q_lora_rank, c->rms_norm_eps, s));
        STEP_TRY(project(be, rd, &ld->q_b, q_a, (size_t)c->q_lora_rank, q, T, s));
        STEP_TRY(mla_kv_rope_cache_shard_cuda(kv, c->kv_lora_rank, c->qk_rope_dim, ld->kv_a_norm, c->rms_norm_eps, q,
                                              rd->heads, c->qk_nope_dim, rd->inv_freq, be->cos_sin_scale, rd->pos,
                                              layer_cache(be, rd, layer), be->cache_format, be->dcp, rd->dcp_member,
                                              rd->dcp_ws ? rd->dcp_ws + rd->dcp_layout.foreign : NULL,
                                              (unsigned *)rd->numerics, T, s));
        STEP_TRY(mla_absorb_q_cuda(&ld->kv_b, rd->heads, c->qk_nope_dim, c->v_head_dim, q, q_width,
                                   ws(rd, l->q_latent), T, s));
    }
    if (be->dcp > 1)
        STEP_TRY(sharded_attention(be, rd, layer, T));
    else if (be->step_verify && T > 1)
        STEP_TRY(verify_attention(be, rd, layer, T));
    else if (T == 1)
        STEP_TRY(mla_decode_cuda(ws(rd, l->q_latent), q, rd->heads, c->kv_lora_rank, c->qk_rope_dim, c->qk_nope_dim,
                                 be->softmax_scale, layer_cache(be, rd, layer), be->cache_format, rd->pos,
                                 device_attention_splits_for(be->splits, T), ws(rd, l->attn_partials),
                                 ws(rd, l->o_latent), T, s));
    else
        STEP_TRY(mla_prefill_cuda(ws(rd, l->q_latent), q, rd->heads, c->kv_lora_rank, c->qk_rope_dim, c->qk_nope_dim,
                                  be->softmax_scale, layer_cache(be, rd, layer), be->cache_format, rd->pos,
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
    if (epilogue)
        return linear_gemv_residual_cuda(&ld->o, ws(rd, l->attn), ws(rd, l->partial), epilogue, &rd->gemv, s);
    return project(be, rd, &ld->o, ws(rd, l->attn), heads * (size_t)c->v_head_dim, ws(rd, l->partial), T, s);
}

/* The host waits for the rank's stream in the middle of a step (experts_split_step's expert
 * counts). With NCCL the stream holds collectives that wait for the peers, and a peer that gave
 * up (its device or communicator failed, or it could not enqueue) never comes: so the rank
 * polls, as rank_wait does, and stops waiting once its own communicator reports an error or a
 * peer has given up; the step then ends on every rank and rank_settle aborts what is queued.
 * Returns the stream's cudaError_t, or -1 with rd->err saying why it stopped waiting (what NCCL
 * reports, or which peer failed), which launch_fail keeps. */
static int rank_stream_wait_in_step(struct cuda_backend *be, rank_device *rd)
{
    if (!cuda_comm_is_nccl(be->comm))
        return (int)cudaStreamSynchronize(rd->stream);
    for (;;) {
        cudaError_t query = cudaStreamQuery(rd->stream);
        if (query != cudaErrorNotReady)
            return (int)query;
        if (cuda_comm_check(be->comm, rd->rank, &rd->err))
            return -1;
        int failed = atomic_load(&be->first_failed);
        if (failed >= 0 && failed != rd->rank) {
            kimi_fail(&rd->err, KIMI_ERR_IO, "CUDA: the step stopped waiting: rank %d failed", failed);
            return -1;
        }
        sched_yield();
    }
}

/* The routed experts of a step of T tokens grouped by expert (offsets, order: device), on the
 * GEMM path (launched, never captured): the host reads the per-expert slot counts once per MoE
 * layer, a synchronisation a prefill step affords; experts with DEVICE_EXPERT_GEMM_MIN_TOKENS
 * slots or more run them as BF16 GEMMs (their tokens' rows gathered, results scattered to
 * their slots of routed_y), the rest the grouped GEMV, one launch pair per run of consecutive
 * experts (engine/backend/device_plan.h device_moe_plan_make). */
static int experts_split_step(struct cuda_backend *be, rank_device *rd, const layer_device *ld, int T,
                              const int *offsets, const int *order)
{
    const model_config *c = be->cfg;
    const device_workspace *l = &rd->layout;
    cudaStream_t s = rd->stream;
    int experts = c->experts, k = c->experts_per_token, moe_inter = rd->shard.moe_inter.end - rd->shard.moe_inter.begin;
    size_t hidden = (size_t)c->hidden;
    int *host_offsets = rd->host_offsets;
    device_gemm_expert *gemm = malloc((size_t)experts * sizeof *gemm);
    device_expert_run *runs = malloc((size_t)experts * sizeof *runs);
    device_moe_plan plan = {0};
    int status = gemm && runs ? 0 : (int)cudaErrorMemoryAllocation;
    if (!status)
        status = (int)cudaMemcpyAsync(host_offsets, offsets, ((size_t)experts + 1) * sizeof *host_offsets,
                                      cudaMemcpyDeviceToHost, s);
    if (!status)
        status = rank_stream_wait_in_step(be, rd);
    if (!status && device_moe_plan_make(host_offsets, experts, T, DEVICE_EXPERT_GEMM_MIN_TOKENS, gemm, runs, &plan))
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
    atomic_fetch_add(&be->traced_gemm_experts, plan.n_gemm);
    atomic_fetch_add(&be->traced_gemm_slots, plan.gemm_slots);
    free(gemm);
    free(runs);
    return status;
}

/* Whether a one-token step runs layer's MoE on the decode path of mlp_step (the shared expert as
 * a slot of the routed experts' launches needs their width). */
static int moe_decode_path(const rank_device *rd, const layer_device *ld)
{
    int shared_inter = rd->shard.shared_inter.end - rd->shard.shared_inter.begin;
    return !ld->has_shared || shared_inter == rd->shard.moe_inter.end - rd->shard.moe_inter.begin;
}

/* x = rmsnorm(h) -> partial = this rank's share of the dense MLP or the MoE of x, T tokens.
 * epilogue not NULL (one token, a dense layer or moe_decode_path): the down projection's launch
 * also runs the residual epilogue (reduce_into_h's work). */
static int mlp_step(struct cuda_backend *be, rank_device *rd, int layer, int T, const residual_epilogue *epilogue)
{
    const model_config *c = be->cfg;
    const layer_device *ld = &rd->layers[layer];
    const device_workspace *l = &rd->layout;
    cudaStream_t s = rd->stream;
    float *x = ws(rd, l->x);
    int status = 0;
    if (!ld->is_moe) {
        if (!mlp_gemm(be, rd, &ld->host_table[0], x, T, ws(rd, l->act), ws(rd, l->partial), &status))
            return status;
        int inter = rd->shard.dense_inter.end - rd->shard.dense_inter.begin;
        STEP_TRY(mlp_gate_up_cuda(ld->table, NULL, T, 1, x, c->hidden, inter, ws(rd, l->act), s));
        if (epilogue)   /* down's one slot summed in place: partial is its own y */
            return mlp_down_combine_cuda(ld->table, NULL, 0, 1, ws(rd, l->act), c->hidden, inter, ws(rd, l->partial),
                                         NULL, NULL, ws(rd, l->partial), epilogue, &rd->gemv, s);
        return mlp_down_cuda(ld->table, NULL, T, ws(rd, l->act), c->hidden, inter, ws(rd, l->partial), s);
    }
    int k = c->experts_per_token, moe_inter = rd->shard.moe_inter.end - rd->shard.moe_inter.begin;
    int *chosen = (int *)ws(rd, l->chosen);
    if (T == 1 && moe_decode_path(rd, ld)) {
        /* decode: the router with the routing, the shared expert as slot k of the routed experts'
         * launches, the weighted sum with down (launches are a decode step's overhead:
         * docs/CUDA.md); slot_table: the table entries of the slots (moe_order is unused by one
         * token) */
        int *slot_table = (int *)ws(rd, l->moe_order);
        STEP_TRY(moe_router_route_cuda(&ld->router, x, ws(rd, l->router_logits), &be->routing, ld->router_bias, chosen,
                                       ws(rd, l->route_weights), slot_table, &rd->gemv, s));
        int slots = k + (ld->has_shared ? 1 : 0);
        STEP_TRY(mlp_gate_up_cuda(ld->table, slot_table, slots, slots, x, c->hidden, moe_inter, ws(rd, l->act), s));
        return mlp_down_combine_cuda(ld->table, slot_table, k, ld->has_shared, ws(rd, l->act), c->hidden, moe_inter,
                                     ws(rd, l->routed_y), chosen, ws(rd, l->route_weights), ws(rd, l->partial),
                                     epilogue, &rd->gemv, s);
    }
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
        /* no expert can reach DEVICE_EXPERT_GEMM_MIN_TOKENS in a shorter step: skip the host read */
        if (be->prefill_gemm && T >= DEVICE_EXPERT_GEMM_MIN_TOKENS) {
            STEP_TRY(experts_split_step(be, rd, ld, T, offsets, order));
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

/* A launcher's failure as the rank's error; negative (STEP_COMM_FAILED, or the wait of
 * rank_stream_wait_in_step): rd->err says it already. */
static int launch_fail(rank_device *rd, int status, const char *what)
{
    if (status < 0)
        return rd->err.code;
    return cuda_fail(&rd->err, (cudaError_t)status, what);
}

#define LAUNCH_TRY(call, what)                                                                              \
    do {                                                                                                    \
        int status_ = (call);                                                                               \
        if (status_)                                                                                        \
            return launch_fail(rd, status_, (what));                                                        \
    } while (0)

/* Every rank's partial summed (the communicator), added to this rank's h, and x = rmsnorm(h,
 * norm) in the same launch (norm NULL: the add alone); flag_code > 0: h's non-finite check
 * with that code (nonfinite_flag_cuda), in the same launch when there is a norm. */
static int reduce_into_h(struct cuda_backend *be, rank_device *rd, int T, const float *norm, int flag_code)
{
    const model_config *c = be->cfg;
    size_t n = (size_t)T * (size_t)c->hidden;
    float *h = ws(rd, rd->layout.h), *partial = ws(rd, rd->layout.partial);
    if (cuda_comm_fuses_norm(be->comm, n))     /* the peer all-reduce: sum, add and norm in one launch */
        return cuda_comm_allreduce_norm(be->comm, rd->rank, partial, h, ws(rd, rd->layout.x), norm, T, c->hidden,
                                        c->rms_norm_eps, flag_code, flag_code > 0 ? rd->numerics + 1 : NULL,
                                        rd->stream, &rd->err);
    if (cuda_comm_allreduce_sum(be->comm, rd->rank, partial, n, rd->stream, &rd->err))
        return rd->err.code;
    if (norm && flag_code > 0) {
        LAUNCH_TRY(residual_rmsnorm_flag_cuda(h, partial, ws(rd, rd->layout.x), norm, T, c->hidden, c->rms_norm_eps,
                                              flag_code, rd->numerics + 1, rd->stream),
                   "residual add");
        return 0;
    }
    LAUNCH_TRY(norm ? residual_rmsnorm_cuda(h, partial, ws(rd, rd->layout.x), norm, T, c->hidden, c->rms_norm_eps,
                                            rd->stream)
                    : add_cuda(h, partial, n, rd->stream),
               "residual add");
    if (flag_code > 0)
        LAUNCH_TRY(nonfinite_flag_cuda(h, n, flag_code, rd->numerics + 1, rd->stream), "non-finite check");
    return 0;
}

/* Whether the launch that ends a sublayer of a one-token step runs reduce_into_h(norm,
 * flag_code)'s work itself, as its residual epilogue (kernels/cuda/allreduce.h): at one rank, or
 * over the peer all-reduce (two launches a layer fewer; NCCL and the local communicator keep
 * reduce_into_h). 1 with *e filled, 0 when reduce_into_h is to follow, or -1 with rd->err
 * filled. */
static int residual_fusion(struct cuda_backend *be, rank_device *rd, const float *norm, int flag_code,
                           residual_epilogue *e)
{
    const model_config *c = be->cfg;
    memset(e, 0, sizeof *e);
    if (be->tp > 1) {
        if (!cuda_comm_fuses_norm(be->comm, (size_t)c->hidden))
            return 0;
        if (cuda_comm_peer_view(be->comm, rd->rank, (size_t)c->hidden, &e->peer, &rd->err))
            return -1;
    }
    e->h = ws(rd, rd->layout.h);
    e->out = ws(rd, rd->layout.x);
    e->weight = norm;
    e->eps = c->rms_norm_eps;
    e->code = flag_code;
    e->flag = flag_code > 0 ? rd->numerics + 1 : NULL;
    return 1;
}

/* Every layer of one rank for the step's T tokens (h and pos already on the device), two
 * all-reduces per layer, then (with_logits) its lm_head rows gathered into rank 0's logits.
 * Returns 0 or a KIMI_ERR_* with rd->err filled. */
static int rank_step_enqueue(struct cuda_backend *be, rank_device *rd, int T, int with_logits)
{
    const model_config *c = be->cfg;
    const device_workspace *l = &rd->layout;
    LAUNCH_TRY(rmsnorm_cuda(ws(rd, l->x), ws(rd, l->h), rd->layers[0].input_norm, T, c->hidden, c->rms_norm_eps,
                            rd->stream),
               "input norm");
    for (int layer = 0; layer < c->layers; layer++) {
        const layer_device *ld = &rd->layers[layer];
        residual_epilogue e;
        int fused = T == 1 ? residual_fusion(be, rd, ld->post_norm, 0, &e) : 0;
        if (fused < 0)
            return rd->err.code;
        LAUNCH_TRY(attention_step(be, rd, layer, T, fused ? &e : NULL), "attention");
        if (!fused && reduce_into_h(be, rd, T, ld->post_norm, 0))
            return rd->err.code;
        int last = layer + 1 == c->layers;
        const float *next = last ? (with_logits ? rd->final_norm : NULL) : rd->layers[layer + 1].input_norm;
        int mlp_fuses = T == 1 && (!ld->is_moe || moe_decode_path(rd, ld));
        fused = mlp_fuses ? residual_fusion(be, rd, next, c->layers - layer, &e) : 0;
        if (fused < 0)
            return rd->err.code;
        LAUNCH_TRY(mlp_step(be, rd, layer, T, fused ? &e : NULL), "MLP");
        if (!fused && reduce_into_h(be, rd, T, next, c->layers - layer))
            return rd->err.code;
    }
    if (!with_logits)
        return 0;
    /* x = rmsnorm(h, final norm), from the last residual add */
    LAUNCH_TRY(project(be, rd, &rd->lm_head, ws(rd, l->x), (size_t)c->hidden, ws(rd, l->logits_part), T, rd->stream),
               "lm_head");
    return cuda_comm_gather(be->comm, rd->rank, ws(rd, l->logits_part), T, be->col_begin, be->ranks[0].logits,
                            rd->stream, &rd->err);
}

/* The graph of the step's shape on this rank (NCCL) or rank 0 (local): a verify step of T tokens
 * has its own, its attention being the decode kernel's. */
static cudaGraphExec_t *step_graph(struct cuda_backend *be, rank_device *rd, int T, int with_logits)
{
    return be->step_verify ? &rd->verify_graph[T] : &rd->graph[T][with_logits];
}

/* Captures this rank's step as a graph of its shape (NCCL: every rank its own, on its own
 * stream; the collectives are captured with it). */
static int rank_graph_capture(struct cuda_backend *be, rank_device *rd, int T, int with_logits)
{
    kimi_err *err = &rd->err;
    cudaGraph_t graph = NULL;
    CUDA_TRY(cudaStreamBeginCapture(rd->stream, cudaStreamCaptureModeRelaxed), "graph capture");
    int status = rank_step_enqueue(be, rd, T, with_logits);
    cudaError_t end = cudaStreamEndCapture(rd->stream, &graph);
    if (status || end != cudaSuccess) {
        /* a graph holding captured collectives keeps them alive: NCCL (2.26 on) destroys or
         * aborts a communicator only once no graph holds any */
        if (graph)
            cudaGraphDestroy(graph);
        return status ? status : cuda_fail(err, end, "graph capture");
    }
    cudaGraphExec_t *exec = step_graph(be, rd, T, with_logits);
    cudaError_t inst = cudaGraphInstantiate(exec, graph, 0);
    cudaGraphDestroy(graph);
    if (inst != cudaSuccess) {
        *exec = NULL;
        return cuda_fail(err, inst, "graph instantiate");
    }
    return 0;
}

/* The step's inputs on this rank's device: its position and embedding rows. */
static int rank_inputs(struct cuda_backend *be, rank_device *rd, int T)
{
    kimi_err *err = &rd->err;
    CUDA_TRY(cudaMemcpyAsync(rd->pos, be->host_pos, sizeof(int), cudaMemcpyHostToDevice, rd->stream), "position");
    if (be->step_verify)
        CUDA_TRY(cudaMemcpyAsync(rd->verify_pos, be->verify_pos, (size_t)T * sizeof(int), cudaMemcpyHostToDevice,
                                 rd->stream),
                 "verify positions");
    CUDA_TRY(cudaMemcpyAsync(ws(rd, rd->layout.h), be->host_h, (size_t)T * (size_t)be->cfg->hidden * sizeof(float),
                             cudaMemcpyHostToDevice, rd->stream),
             "embedding");
    return 0;
}

/* This rank cannot finish its step: the others must not wait for it in a collective, and the
 * first to give up is the one whose error the caller hears. */
static void rank_gives_up(struct cuda_backend *be, rank_device *rd)
{
    int none = -1;
    atomic_compare_exchange_strong(&be->first_failed, &none, rd->rank);
    atomic_store(&be->enqueue_failed, 1);
    cuda_comm_fail(be->comm);
}

/* The local ranks' step: every rank enqueues into the one shared stream, from its own thread.
 * Why the result is bit for bit the single-threaded one: each kernel's output depends only on
 * its inputs (no kernel reads another rank's buffers except the all-reduce and the gather),
 * and the stream runs kernels one after another in the order they were enqueued. A rank's own
 * launches keep their order (one thread). An all-reduce is a meeting (cuda_comm.h): rank 0
 * enqueues the sum only once every rank has returned from enqueuing the kernels that write its
 * partial, and no rank enqueues anything after the all-reduce before that launch; so the
 * stream runs the sum after every partial and before every use of the sum, and the sum adds
 * the ranks in rank order, as before. The gather meets after every rank's copy, so rank 0's
 * logits copy to the host follows all of them. How the ranks' launches interleave between two
 * meetings changes only when each kernel runs, never what it computes.
 * Graphs: rank 0 begins a capture of the shared stream (relaxed mode: other threads launch
 * into it), the ranks meet, each enqueues its step as above (the launches of every thread
 * land in the capture, in stream order), they meet again, and rank 0 ends the capture; the
 * graph is a chain in that same order, and rank 0 alone launches it from then on. */
static int local_step(struct cuda_backend *be, rank_device *rd, int T, int with_logits, int graphs, int status)
{
    kimi_err *err = &rd->err;
    int rank = rd->rank;
    cudaGraphExec_t *exec = step_graph(be, &be->ranks[0], T, with_logits);
    int capture = graphs && !*exec;     /* read before the meeting after which rank 0 may write it */
    if (status)
        rank_gives_up(be, rd);
    spin_barrier_wait(&be->ranks_meet);     /* every rank's inputs are enqueued (or it gave up) */
    if (!graphs) {
        if (!status && (status = rank_step_enqueue(be, rd, T, with_logits)))
            rank_gives_up(be, rd);
        return status;
    }
    if (capture) {
        if (rank == 0)
            be->capture_status = atomic_load(&be->enqueue_failed)
                                     ? -1 : (int)cudaStreamBeginCapture(rd->stream, cudaStreamCaptureModeRelaxed);
        spin_barrier_wait(&be->ranks_meet);     /* the capture has begun */
        if (!status && !be->capture_status && (status = rank_step_enqueue(be, rd, T, with_logits)))
            rank_gives_up(be, rd);
        spin_barrier_wait(&be->ranks_meet);     /* every rank's step is in the capture */
        if (rank > 0)
            return status;
        if (be->capture_status)     /* nothing was captured */
            return status || be->capture_status < 0 ? status
                                                    : cuda_fail(err, (cudaError_t)be->capture_status, "graph capture");
        cudaGraph_t graph = NULL;
        cudaError_t end = cudaStreamEndCapture(rd->stream, &graph);
        if (!status && !atomic_load(&be->enqueue_failed)) {
            cudaError_t inst = end != cudaSuccess ? end : cudaGraphInstantiate(exec, graph, 0);
            if (inst != cudaSuccess) {
                *exec = NULL;
                status = cuda_fail(err, inst, end != cudaSuccess ? "graph capture" : "graph instantiate");
            }
        }
        if (graph)
            cudaGraphDestroy(graph);
        if (status || atomic_load(&be->enqueue_failed))
            return status;
    } else if (rank > 0 || atomic_load(&be->enqueue_failed)) {
        return status;
    }
    cudaError_t launched = cudaGraphLaunch(*exec, rd->stream);
    return launched == cudaSuccess ? 0 : cuda_fail(err, launched, "graph launch");
}

/* JOB_STEP on one rank: inputs, the step (graph or launches), rank 0's logits to the host,
 * then wait for the device. */
/* NCCL after a failed step, called by every rank: each destroys its own graphs (NCCL 2.26 on
 * aborts a communicator only once no graph holds its collectives; a graph in flight is freed
 * once the abort has ended them), then rank 0 aborts the communicators and marks the backend
 * broken. */
static void ranks_abort(struct cuda_backend *be, rank_device *rd)
{
    rank_graphs_destroy(rd);
    spin_barrier_wait(&be->ranks_meet);
    if (rd->rank == 0) {
        cuda_comm_recover(be->comm, NULL);
        be->broken = 1;
    }
    spin_barrier_wait(&be->ranks_meet);
}

/* The end of a step: wait for the rank's stream. An NCCL rank polls instead of blocking: a
 * device that faults mid-step (or a peer NCCL reports lost) leaves the other ranks' collectives
 * waiting on their devices forever, so a rank whose stream fails or whose communicator reports
 * an asynchronous error gives up, and every rank stops waiting once one has; rank_step then
 * aborts the communicators, which ends the collectives still queued. */
static int rank_wait(struct cuda_backend *be, rank_device *rd, int status)
{
    kimi_err *err = &rd->err;
    if (!cuda_comm_is_nccl(be->comm) || be->broken) {    /* broken: aborted, nothing waits for a peer */
        cudaError_t done = cudaStreamSynchronize(rd->stream);
        return status || done == cudaSuccess ? status : cuda_fail(err, done, "step");
    }
    for (;;) {
        cudaError_t query = cudaStreamQuery(rd->stream);
        if (query == cudaSuccess)
            return status;
        if (query != cudaErrorNotReady || (!status && cuda_comm_check(be->comm, rd->rank, err))) {
            if (!status)
                status = query != cudaErrorNotReady ? cuda_fail(err, query, "step") : err->code;
            rank_gives_up(be, rd);
            return status;
        }
        int failed = atomic_load(&be->first_failed);
        if (failed >= 0 && failed != rd->rank)
            return status ? status
                          : kimi_fail(err, KIMI_ERR_IO, "CUDA: the step stopped waiting: rank %d failed", failed);
        sched_yield();
    }
}

/* The end of a job that enqueued collectives (a step, the warm-up at open), on every rank: status
 * is the rank's enqueue result (it has called rank_gives_up when not 0). Returns the rank's
 * result once its stream is done or it stopped waiting for a failed peer. */
static int rank_settle(struct cuda_backend *be, rank_device *rd, int status)
{
    /* Every rank has enqueued its step or given up. A rank that gave up leaves the others'
     * NCCL collectives waiting on their devices: abort them before anyone waits. */
    spin_barrier_wait(&be->ranks_meet);
    if (cuda_comm_is_nccl(be->comm) && atomic_load(&be->enqueue_failed))
        ranks_abort(be, rd);
    status = rank_wait(be, rd, status);
    /* A rank that failed while the others waited: the same abort, for the collectives still
     * queued on the healthy devices (every rank reads first_failed after the meeting). */
    spin_barrier_wait(&be->ranks_meet);
    if (cuda_comm_is_nccl(be->comm) && atomic_load(&be->first_failed) >= 0 && !be->broken) {
        ranks_abort(be, rd);
        cudaStreamSynchronize(rd->stream);  /* what the abort released; the error is said already */
    }
    return status;
}

/* NCCL connects lazily, at the first use of what a call needs (the collectives' rings and
 * trees, chosen by message size; a point-to-point connection per peer), and cannot do so inside
 * a stream capture, where every step but the GEMM prefill runs. So every collective a captured
 * step can make runs here once, uncaptured, on the rank's stream: for each step size T up to
 * DEVICE_MAX_TOKENS the all-reduce of T x hidden floats and the logits gather of T rows (rank 0
 * receiving from every peer). The workspace is clear: zeros are summed and gathered. */
static int rank_warm_up_enqueue(struct cuda_backend *be, rank_device *rd)
{
    const device_workspace *l = &rd->layout;
    for (int T = 1; T <= DEVICE_MAX_TOKENS; T++) {
        if (cuda_comm_allreduce_sum(be->comm, rd->rank, ws(rd, l->partial), (size_t)T * (size_t)be->cfg->hidden,
                                    rd->stream, &rd->err))
            return rd->err.code;
        if (cuda_comm_gather(be->comm, rd->rank, ws(rd, l->logits_part), T, be->col_begin, be->ranks[0].logits,
                             rd->stream, &rd->err))
            return rd->err.code;
    }
    return 0;
}

/* After rank_open on every rank (status: this rank's result, already in rd->status): NCCL ranks
 * warm their communicators up once every rank has opened; a failed or stopped open anywhere
 * leaves them alone, so no rank waits in a collective for a rank that will not come. */
static int rank_connect(struct cuda_backend *be, rank_device *rd, int status)
{
    if (!cuda_comm_is_nccl(be->comm))
        return status;
    spin_barrier_wait(&be->ranks_meet);     /* every rank's open has ended: its status is written */
    for (int r = 0; r < be->tp; r++)
        if (be->ranks[r].status)
            return status;
    status = rank_warm_up_enqueue(be, rd);
    if (status)
        rank_gives_up(be, rd);
    return rank_settle(be, rd, status);
}

static int rank_step(struct cuda_backend *be, rank_device *rd)
{
    kimi_err *err = &rd->err;
    int T = be->step_tokens, with_logits = be->step_logits;
    /* GEMM steps are launched: cuBLASLt picks its kernels per shape, outside any capture */
    int graphs = be->use_graphs && (be->step_verify || !(be->prefill_gemm && T >= DEVICE_GEMM_MIN_TOKENS));
    /* a launcher checks cudaGetLastError: clear what an earlier failed step left (its error has
     * been reported; a sticky device fault comes back from the next call anyway) */
    (void)cudaGetLastError();
    int status = rank_inputs(be, rd, T);
    if (!cuda_comm_is_nccl(be->comm)) {
        status = local_step(be, rd, T, with_logits, graphs, status);
    } else {
        if (!status && graphs && !*step_graph(be, rd, T, with_logits))
            status = rank_graph_capture(be, rd, T, with_logits);
        else if (!status && !graphs)
            status = rank_step_enqueue(be, rd, T, with_logits);
        if (!status && graphs) {
            cudaError_t launched = cudaGraphLaunch(*step_graph(be, rd, T, with_logits), rd->stream);
            if (launched != cudaSuccess)
                status = cuda_fail(err, launched, "graph launch");
        }
        if (status)
            rank_gives_up(be, rd);
    }
    if (!status && rd->rank == 0 && with_logits) {
        cudaError_t copied = cudaMemcpyAsync(be->host_logits, rd->logits,
                                             (size_t)T * (size_t)be->cfg->vocab * sizeof(float),
                                             cudaMemcpyDeviceToHost, rd->stream);
        if (copied != cudaSuccess) {
            status = cuda_fail(err, copied, "logits");
            rank_gives_up(be, rd);
        }
    }
    /* rank 0's numerics of the step to the host, then every rank's cleared for the next (ranks
     * hold the same h and encode every position's cache row, stored or not, so rank 0's say it
     * for all) */
    if (!status) {
        cudaError_t copied = rd->rank == 0 ? cudaMemcpyAsync(be->host_numerics, rd->numerics, 2 * sizeof(int),
                                                             cudaMemcpyDeviceToHost, rd->stream)
                                           : cudaSuccess;
        if (copied == cudaSuccess)
            copied = cudaMemsetAsync(rd->numerics, 0, 2 * sizeof(int), rd->stream);
        if (copied != cudaSuccess) {
            status = cuda_fail(err, copied, "numerics");
            rank_gives_up(be, rd);
        }
    }
    return rank_settle(be, rd, status);
}

/* ---- the rank threads ---- */

static void *rank_main(void *arg)
{
    rank_device *rd = arg;
    struct cuda_backend *be = rd->be;
    cudaError_t on_device = cudaSetDevice(rd->device);
    for (;;) {
        spin_barrier_wait(&be->job_start);
        if (be->job == JOB_QUIT)
            break;
        rd->err = (kimi_err){0};
        if (be->job == JOB_OPEN) {
            rd->status = on_device != cudaSuccess ? cuda_fail(&rd->err, on_device, "cudaSetDevice")
                                                  : rank_open(be, rd, &rd->err);
            rd->status = rank_connect(be, rd, rd->status);
            rd->status = rank_cache_open(be, rd, rd->status);
            if (rd->status)
                atomic_store(&be->stop_load, 1);    /* the other ranks need not go on */
            atomic_fetch_add(&be->ranks_loaded, 1);
        } else {
            rd->status = rank_step(be, rd);
        }
        spin_barrier_wait(&be->job_done);
    }
    if (on_device == cudaSuccess)
        rank_close(be, rd);
    return NULL;
}

/* Run a job on every rank thread and wait for all of them. */
static void run_job(struct cuda_backend *be, rank_job job)
{
    be->job = job;
    spin_barrier_wait(&be->job_start);
    spin_barrier_wait(&be->job_done);
}

static size_t uploaded_bytes(struct cuda_backend *be)
{
    size_t sum = 0;
    for (int r = 0; r < be->tp; r++)
        sum += atomic_load(&be->ranks[r].uploaded);
    return sum;
}

/* JOB_OPEN: every rank loads in parallel while this thread reports progress (on_load, about
 * ten times a second and once at the end) and stops the ranks when on_load says so. Returns
 * 0, BACKEND_STOPPED or the first failed rank's error. */
static int open_ranks(struct cuda_backend *be, const backend_options *opt, size_t bytes_total, kimi_err *err)
{
    int stopped = 0;
    be->job = JOB_OPEN;
    spin_barrier_wait(&be->job_start);
    double last = monotonic_seconds();
    size_t reported = 0;    /* the byte count of the last report: each report says more */
    int reports = 0;
    while (atomic_load(&be->ranks_loaded) < be->tp) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
        double now = monotonic_seconds();
        size_t done = uploaded_bytes(be);
        if (opt->on_load && !stopped && now - last >= LOAD_REPORT_SECONDS && done > reported) {
            last = now;
            reported = done;
            reports++;
            if (opt->on_load(opt->on_load_user, done, bytes_total)) {
                stopped = 1;
                atomic_store(&be->stop_load, 1);
            }
        }
    }
    spin_barrier_wait(&be->job_done);
    /* the rank whose warm-up failed first (rank_connect) before those that stopped waiting for it */
    int first = atomic_load(&be->first_failed) >= 0 ? atomic_load(&be->first_failed) : 0;
    for (int i = 0; i < be->tp; i++) {
        int r = (first + i) % be->tp;
        rank_device *rd = &be->ranks[r];
        if (rd->status && rd->status != BACKEND_STOPPED) {
            if (err)
                *err = rd->err;
            return kimi_err_prefix(err, rd->status, "rank %d of %d (device %d)", r, be->tp, rd->device);
        }
    }
    size_t done = uploaded_bytes(be);
    if (!stopped && opt->on_load && (done > reported || !reports) && opt->on_load(opt->on_load_user, done, bytes_total))
        stopped = 1;
    return stopped ? BACKEND_STOPPED : 0;
}

/* Stop and join the rank threads (each frees its rank), free everything. */
static void backend_free(struct cuda_backend *be)
{
    if (be->barriers) {
        be->job = JOB_QUIT;
        if (be->threads > 0)
            spin_barrier_wait(&be->job_start);
        for (int r = 0; r < be->threads; r++)
            pthread_join(be->ranks[r].thread, NULL);
        spin_barrier_destroy(&be->job_start);
        spin_barrier_destroy(&be->job_done);
        spin_barrier_destroy(&be->ranks_meet);
    }
    cuda_comm_close(be->comm);
    if (be->shared_stream) {
        cudaSetDevice(be->devices.device[0]);
        cudaStreamDestroy(be->shared_stream);
    }
    cudaFreeHost(be->host_h);
    cudaFreeHost(be->host_pos);
    cudaFreeHost(be->host_logits);
    cudaFreeHost(be->host_numerics);
    free(be);
}

void cuda_backend_close(cuda_backend *be)
{
    if (be)
        backend_free(be);
}

/* What rank_cache_open measures against: each rank's device's free memory at the survey, the
 * weights and workspaces the plan put on it, and its ranks' cache per position. */
static void survey_keep(struct cuda_backend *be, const device_survey *s, const device_rank_plan *plans)
{
    for (int r = 0; r < be->tp; r++) {
        int device = be->devices.device[r];
        be->survey_free[r] = s->free_bytes[device];
        be->planned_fixed[r] = be->device_position_bytes[r] = 0;
        for (int q = 0; q < be->tp; q++)
            if (be->devices.device[q] == device) {
                be->planned_fixed[r] += plans[q].weight_bytes + plans[q].workspace_bytes;
                be->device_position_bytes[r] += plans[q].cache_bytes_per_position;
            }
    }
}

/* Everything but the ranks: devices, the memory check, host buffers, the communicator. */
static int backend_setup(struct cuda_backend *be, const backend_options *opt, size_t *bytes_total, kimi_err *err)
{
    const model_config *c = be->cfg;
    if (c->kv_lora_rank > 1024 || c->qk_rope_dim > 256 || c->qk_rope_dim % 2)
        return kimi_fail(err, KIMI_ERR_MODEL, "config.json: kv_lora_rank %d / qk_rope_head_dim %d: the CUDA attention "
                         "takes kv_lora_rank <= 1024 and an even rope dim <= 256", c->kv_lora_rank, c->qk_rope_dim);
    device_survey s;
    if (devices_survey(opt, &s, err))
        return err->code;
    be->devices = s.a;
    be->sm_count = s.sm_count;
    size_t attention_shared = mla_attention_shared_bytes(c->kv_lora_rank, c->qk_rope_dim);
    for (int r = 0; r < be->tp; r++) {
        int limit = 0;
        CUDA_TRY(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, s.a.device[r]),
                 "shared memory per block");
        if (attention_shared > (size_t)limit)
            return kimi_fail(err, KIMI_ERR_MODEL, "config.json: kv_lora_rank %d + qk_rope_head_dim %d: the CUDA "
                             "attention needs %zu bytes of shared memory per block, device %d allows %d",
                             c->kv_lora_rank, c->qk_rope_dim, attention_shared, s.a.device[r], limit);
    }
    be->splits = device_attention_splits(be->capacity, be->sm_count);

    /* Does the asked context fit next to every rank's weights and workspace? */
    device_rank_plan plans[MAX_RANKS];
    if (plans_make(be->mw, be->tp, be->dcp, be->splits, be->cache_format, plans, err))
        return err->code;
    device_memory_plan plan;
    device_memory_plan_make(plans, &be->devices, s.free_bytes, DEVICE_RESERVE_BYTES, &plan);
    /* a sharded cache's plan counts whole groups of dcp positions (device_rank_plan_shard) */
    if (kv_shard_context(be->slots, be->dcp) > plan.max_context)
        return kimi_fail(err, KIMI_ERR_NOMEM,
                         "max context %ld does not fit on CUDA device %d: at most %ld positions (%.2f GiB free, %d "
                         "rank%s on it, %zu B of cache per position per rank)",
                         be->capacity, plan.tightest, plan.max_context, (double)plan.free_bytes / (1 << 30),
                         plan.ranks_on_tightest, plan.ranks_on_tightest > 1 ? "s" : "", plans[0].cache_bytes_per_position);
    *bytes_total = 0;
    for (int r = 0; r < be->tp; r++)
        *bytes_total += plans[r].packed_bytes;
    survey_keep(be, &s, plans);

    const char *graphs = getenv("KIMI_CUDA_GRAPHS");
    be->use_graphs = !(graphs && !strcmp(graphs, "0"));
    const char *prefill = getenv("KIMI_CUDA_PREFILL");
    if (prefill && strcmp(prefill, "gemm") && strcmp(prefill, "steps"))
        return kimi_fail(err, KIMI_ERR_USAGE, "KIMI_CUDA_PREFILL=%s: must be gemm or steps", prefill);
    be->prefill_gemm = !(prefill && !strcmp(prefill, "steps"));
    const char *trace = getenv("KIMI_CUDA_PREFILL_TRACE");
    be->prefill_trace = trace && !strcmp(trace, "1");

    rope_config rc = {c->qk_rope_dim, c->rope_theta, c->rope_yarn, c->rope_factor, c->rope_original_max,
                      c->rope_beta_fast, c->rope_beta_slow, c->rope_mscale, c->rope_mscale_all_dim};
    if (rope_table_init(&be->rope, &rc))
        return kimi_fail(err, KIMI_ERR_MODEL, "config.json: qk_rope_head_dim %d must be even and at most %d",
                         c->qk_rope_dim, ROPE_MAX_DIM);
    be->cos_sin_scale = be->rope.cos_sin_scale;
    be->softmax_scale = rope_softmax_scale(&rc, c->qk_nope_dim + c->qk_rope_dim);
    be->routing = (moe_routing_config){c->experts, c->experts_per_token, c->n_group, c->topk_group, c->norm_topk_prob,
                                       c->routed_scaling_factor};
    be->col_begin[0] = 0;
    for (int r = 0; r < be->tp; r++) {
        tp_shard shard;
        if (tp_shard_plan(be->mw, be->tp, r, &shard, err))
            return err->code;
        be->col_begin[r + 1] = (size_t)shard.vocab.end;
    }

    /* pinned host buffers every device's copies read or write */
    size_t T = DEVICE_MAX_TOKENS;
    CUDA_TRY(cudaHostAlloc((void **)&be->host_h, DEVICE_PREFILL_TOKENS * (size_t)c->hidden * sizeof(float),
                           cudaHostAllocPortable),
             "pinned");
    CUDA_TRY(cudaHostAlloc((void **)&be->host_pos, sizeof(int), cudaHostAllocPortable), "pinned");
    CUDA_TRY(cudaHostAlloc((void **)&be->host_logits, T * (size_t)c->vocab * sizeof(float), cudaHostAllocPortable),
             "pinned");
    CUDA_TRY(cudaHostAlloc((void **)&be->host_numerics, 2 * sizeof(int), cudaHostAllocPortable), "pinned");
    if (be->devices.comm == DEVICE_COMM_NCCL) {
        /* the peer all-reduce where the ranks' devices map each other (decode and verify steps:
         * up to BACKEND_DECODE_TOKENS_MAX rows), unless KIMI_CUDA_COMM=nccl; at TP 1 only when
         * asked (there is no peer to reach) */
        const char *request = getenv("KIMI_CUDA_COMM");
        int insist = request && !strcmp(request, "peer");
        int peer = insist || (be->tp > 1 && !(request && !strcmp(request, "nccl")));
        if ((peer ? cuda_comm_open_peer(&be->comm, be->tp, be->devices.device,
                                        (size_t)BACKEND_DECODE_TOKENS_MAX * (size_t)c->hidden, insist, err)
                  : cuda_comm_open_nccl(&be->comm, be->tp, be->devices.device, err)) ||
            cuda_comm_warm_groups(be->comm, be->dcp, err))
            return err->code;
    } else {
        if (cuda_comm_open_local(&be->comm, be->tp, err))
            return err->code;
        CUDA_TRY(cudaSetDevice(be->devices.device[0]), "cudaSetDevice");
        CUDA_TRY(cudaStreamCreateWithFlags(&be->shared_stream, cudaStreamNonBlocking), "stream");
    }
    return 0;
}

/* Start the rank threads (they wait for their first job). */
static int threads_start(struct cuda_backend *be, kimi_err *err)
{
    /* spinning only pays when every rank thread and the caller have a CPU of their own */
    int spin = cpu_spin_pays(CPU_SPIN_AUTO, be->tp + 1, cpu_usable_count());
    spin_barrier_init(&be->job_start, be->tp + 1, spin);
    spin_barrier_init(&be->job_done, be->tp + 1, spin);
    spin_barrier_init(&be->ranks_meet, be->tp, spin);
    be->barriers = 1;
    for (int r = 0; r < be->tp; r++) {
        rank_device *rd = &be->ranks[r];
        rd->be = be;
        rd->rank = r;
        rd->device = be->devices.device[r];
        if (pthread_create(&rd->thread, NULL, rank_main, rd)) {
            /* the started ones wait for tp + 1 at job_start: only they and this thread come */
            spin_barrier_resize(&be->job_start, r + 1);
            return kimi_fail(err, KIMI_ERR_NOMEM, "cannot start the thread of rank %d", r);
        }
        be->threads = r + 1;
    }
    return 0;
}

/* After every rank sized its cache (rank_cache_open): the capacity they chose, and the largest
 * overhead measured. */
static void measured_keep(struct cuda_backend *be)
{
    int tightest = 0;
    long fit = measured_fit(be, &tightest);
    be->capacity = fit < be->capacity ? fit : be->capacity;
    be->slots = kv_shard_slots(be->capacity, be->dcp);
    be->overhead_device = be->devices.device[0];
    be->overhead_bytes = measured_overhead(be, 0);
    for (int r = 1; r < be->tp; r++)
        if (device_first_rank(be, r) == r && measured_overhead(be, r) > be->overhead_bytes) {
            be->overhead_bytes = measured_overhead(be, r);
            be->overhead_device = be->devices.device[r];
        }
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
    if (kv_shard_check(opt->tp, opt->dcp > 1 ? opt->dcp : 1, err))
        return err->code;
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
    be->dcp = opt->dcp > 1 ? opt->dcp : 1;
    be->slots = kv_shard_slots(be->capacity, be->dcp);
    be->on_layer = opt->on_layer;
    be->on_layer_user = opt->on_layer_user;
    be->cache_format = opt->kv_cache;
    be->cache_row = kv_row_bytes(opt->kv_cache, c->kv_lora_rank, c->qk_rope_dim);
    be->fit_context = opt->fit_context;
    size_t bytes_total = 0;
    atomic_store(&be->first_failed, -1);     /* the warm-up at open settles as a step does */
    int rc = backend_setup(be, opt, &bytes_total, err);
    if (!rc)
        rc = threads_start(be, err);
    if (!rc)
        rc = open_ranks(be, opt, bytes_total, err);
    if (rc) {
        backend_free(be);
        return rc;
    }
    measured_keep(be);
    *out = be;
    return 0;
}

const char *cuda_backend_comm_description(const cuda_backend *be)
{
    return cuda_comm_describe(be->comm);
}

long long cuda_backend_runtime_overhead(const cuda_backend *be, int *device)
{
    *device = be->overhead_device;
    return be->overhead_bytes;
}

long cuda_backend_capacity(const cuda_backend *be)
{
    return be->capacity;
}

int cuda_backend_forward(cuda_backend *be, const int32_t *tokens, int n, long start_pos, const int *logit_rows,
                         int n_logit_rows, float *logits, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    const model_config *c = be->cfg;
    if (be->broken)
        return kimi_fail(err, KIMI_ERR_STATE, "CUDA: an earlier step failed and aborted the NCCL communicators of "
                         "devices %d..%d; the backend must be reopened", be->devices.device[0],
                         be->devices.device[be->tp - 1]);
    size_t vocab = (size_t)c->vocab, hidden = (size_t)c->hidden;
    for (int first = 0, T; first < n; first += T) {
        T = device_step_tokens(first, n, logit_rows, n_logit_rows, be->prefill_gemm);
        int wanted = 0;
        for (int j = 0; j < n_logit_rows; j++)
            wanted += logit_rows[j] >= first && logit_rows[j] < first + T;
        for (int t = 0; t < T; t++)
            weight_matrix_decode_row(&be->mw->embed.w, tokens[first + t], be->host_h + (size_t)t * hidden);
        for (size_t i = 0; i < (size_t)T * hidden; i++)   /* as the CPU ranks check theirs */
            if (!isfinite(be->host_h[i]))
                return backend_nonfinite_fail(err, -1, start_pos + first, T);
        *be->host_pos = (int)(start_pos + first);
        be->step_tokens = T;
        be->step_logits = wanted > 0;
        atomic_store(&be->enqueue_failed, 0);
        atomic_store(&be->first_failed, -1);
        atomic_store(&be->traced_gemm_experts, 0);
        atomic_store(&be->traced_gemm_slots, 0);
        run_job(be, JOB_STEP);
        int failed = atomic_load(&be->first_failed);
        for (int r = 0; r < be->tp && failed < 0; r++)
            failed = be->ranks[r].status ? r : -1;
        if (failed >= 0) {
            rank_device *rd = &be->ranks[failed];
            /* the local communicator is whole again once every rank is out of the step */
            if (!cuda_comm_is_nccl(be->comm))
                cuda_comm_recover(be->comm, NULL);
            *err = rd->err;
            return kimi_err_prefix(err, rd->status, "rank %d of %d (device %d)", failed, be->tp, rd->device);
        }
        be->cache_clamps += (long)(unsigned)be->host_numerics[0];
        if (be->host_numerics[1] > 0)
            return backend_nonfinite_fail(err, c->layers - be->host_numerics[1], start_pos + first, T);
        if (be->prefill_trace && T > 1 && !be->step_verify) {
            long routed = 0;    /* slots of the step: tokens x top_k, every MoE layer and rank */
            for (int layer = 0; layer < c->layers; layer++)
                routed += be->ranks[0].layers[layer].is_moe ? (long)T * c->experts_per_token * be->tp : 0;
            fprintf(stderr, "KIMI_CUDA_PREFILL_TRACE: step of %d tokens at position %ld%s: %ld expert GEMMs over %ld "
                    "of its %ld routed slots\n", T, start_pos + first, wanted ? " with logits" : "",
                    atomic_load(&be->traced_gemm_experts), atomic_load(&be->traced_gemm_slots), routed);
        }
        if (n > 1 && !be->step_verify && be->on_layer && be->on_layer(be->on_layer_user, (double)(first + T)))
            return BACKEND_STOPPED;
        /* rank r's logits of token t: T * col_begin[r] + t * (its columns) */
        for (int j = 0; j < n_logit_rows; j++) {
            int t = logit_rows[j] - first;
            if (t < 0 || t >= T)
                continue;
            for (int r = 0; r < be->tp; r++) {
                size_t cols = be->col_begin[r + 1] - be->col_begin[r];
                memcpy(logits + (size_t)j * vocab + be->col_begin[r],
                       be->host_logits + (size_t)T * be->col_begin[r] + (size_t)t * cols, cols * sizeof(float));
            }
        }
    }
    return 0;
}

int cuda_backend_decode_tokens(cuda_backend *be, const int32_t *tokens, int n, long start_pos, float *logits,
                               kimi_err *err)
{
    int rows[BACKEND_DECODE_TOKENS_MAX];
    for (int t = 0; t < n; t++) {
        rows[t] = t;
        be->verify_pos[t] = (int)(start_pos + t);
    }
    /* one token is a decode step as it is */
    be->step_verify = n > 1;
    int rc = cuda_backend_forward(be, tokens, n, start_pos, rows, n, logits, err);
    be->step_verify = 0;
    return rc;
}

long cuda_backend_take_clamps(cuda_backend *be)
{
    long clamps = be->cache_clamps;
    be->cache_clamps = 0;
    return clamps;
}

/* The cache rows of layer that hold positions [0, n_pos), from every member of group 0 (rank m
 * is member m): member m's rows [0, kv_shard_local_count) land at rows + m * per_member rows.
 * Each copy runs on its rank's stream (ordered after its steps, whatever stream the legacy one
 * would have waited for) and is waited for. */
static cudaError_t cache_layer_read(struct cuda_backend *be, int layer, long n_pos, long per_member, uint8_t *rows)
{
    for (int member = 0; member < be->dcp; member++) {
        rank_device *rd = &be->ranks[member];
        long count = kv_shard_local_count(n_pos, be->dcp, member);
        if (count == 0)
            continue;
        cudaError_t status = cudaSetDevice(rd->device);
        if (status == cudaSuccess)
            status = cudaMemcpyAsync(rows + (size_t)member * (size_t)per_member * be->cache_row,
                                     layer_cache(be, rd, layer), (size_t)count * be->cache_row,
                                     cudaMemcpyDeviceToHost, rd->stream);
        if (status == cudaSuccess)
            status = cudaStreamSynchronize(rd->stream);
        if (status != cudaSuccess)
            return status;
    }
    return cudaSuccess;
}

int cuda_backend_read_kv(cuda_backend *be, long n_pos, uint16_t *out, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    const model_config *c = be->cfg;
    if (n_pos < 0 || n_pos > be->capacity)
        return kimi_fail(err, KIMI_ERR_STATE, "read_kv: %ld positions, the cache holds %ld", n_pos, be->capacity);
    size_t row = (size_t)c->kv_lora_rank + (size_t)c->qk_rope_dim;
    /* each position from the member of group 0 that stores it (cache_layer_read) */
    long per_member = kv_shard_slots(n_pos, be->dcp);
    uint8_t *rows = malloc(n_pos > 0 ? (size_t)be->dcp * (size_t)per_member * be->cache_row : 1);
    if (!rows)
        return kimi_fail(err, KIMI_ERR_NOMEM, "read_kv: out of memory for %ld cache rows", n_pos);
    for (int layer = 0; layer < c->layers; layer++) {
        cudaError_t status = cache_layer_read(be, layer, n_pos, per_member, rows);
        if (status != cudaSuccess) {
            free(rows);
            return cuda_fail(err, status, "cache read");
        }
        for (long p = 0; p < n_pos; p++) {
            size_t at = (size_t)kv_shard_owner(p, be->dcp) * (size_t)per_member + (size_t)kv_shard_slot(p, be->dcp);
            kv_row_to_half(be->cache_format, rows + at * be->cache_row, c->kv_lora_rank, c->qk_rope_dim,
                           out + ((size_t)layer * (size_t)n_pos + (size_t)p) * row);
        }
    }
    free(rows);
    return 0;
}
