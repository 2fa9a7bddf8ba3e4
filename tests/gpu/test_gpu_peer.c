/* GPU test: the peer communicator's one-shot all-reduce fused with the residual add and RMSNorm
 * (engine/backend/cuda_comm.h cuda_comm_allreduce_norm, kernels/cuda/allreduce.cu), on 2 and 8
 * devices (the CPU emulation provides 8; a real box needs them, else the test is skipped):
 *   - against NCCL's all-reduce followed by residual_rmsnorm(_flag)_cuda / add_cuda +
 *     nonfinite_flag_cuda on the same inputs (the backend's path without the peer exchange):
 *     h, x and the non-finite flag bit for bit, on every rank, over 40 calls of 1..4 rows (the
 *     epochs' parities wrap many times, sizes with and without 16-byte vectors, no norm, a NaN
 *     that raises the flag);
 *   - captured graphs (one call per rank) replayed 6 times with new partials: the epochs live in
 *     device memory, so each replay waits for the right flags;
 *   - KIMI_EMU_PEER=0 (no two devices map each other): the communicator falls back to NCCL and
 *     says why, and KIMI_CUDA_COMM=peer's insist fails the open naming the devices;
 *   - the stop: rank 0 calls while rank 1 never does; its kernel waits until cuda_comm_fail,
 *     then ends without touching h, and later calls are refused;
 *   - the decode kernels that run the all-reduce in their own last block (residual_epilogue:
 *     linear_gemv_residual_cuda, mlp_down_combine_cuda with an epilogue) against their unfused
 *     launches followed by the reference: h, x, the flag and the partial bit for bit, calls
 *     interleaved with cuda_comm_allreduce_norm's (one epoch count), then captured and replayed;
 *     and at one rank (no exchange) against the unfused launch and residual_rmsnorm_flag_cuda.
 * Exits 77 (skipped) with fewer than two devices. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend/cuda_comm.h"
#include "engine/base/monotonic.h"
#include "kernels/cuda/forward.h"
#include "tests/gpu/gpu_test.h"

enum { MAX_RANKS = 8, MAX_ROWS = 4, N_CALLS = 40, N_REPLAYS = 6 };

#define EPS 1e-6f

typedef struct {
    cudaStream_t stream;
    float *partial, *h, *x;     /* [MAX_ROWS * n_max] */
    float *weight;              /* [n_max] */
    int *flag;
} rank_bufs;

static void set_device(int d)
{
    CUDA_CHECK(cudaSetDevice(d));
}

static void ranks_alloc(rank_bufs *rb, int ranks, int n_max)
{
    size_t bytes = (size_t)MAX_ROWS * n_max * sizeof(float);
    for (int r = 0; r < ranks; r++) {
        set_device(r);
        CUDA_CHECK(cudaStreamCreateWithFlags(&rb[r].stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaMalloc((void **)&rb[r].partial, bytes));
        CUDA_CHECK(cudaMalloc((void **)&rb[r].h, bytes));
        CUDA_CHECK(cudaMalloc((void **)&rb[r].x, bytes));
        CUDA_CHECK(cudaMalloc((void **)&rb[r].weight, (size_t)n_max * sizeof(float)));
        CUDA_CHECK(cudaMalloc((void **)&rb[r].flag, sizeof(int)));
    }
}

static void ranks_free(rank_bufs *rb, int ranks)
{
    for (int r = 0; r < ranks; r++) {
        set_device(r);
        CUDA_CHECK(cudaStreamSynchronize(rb[r].stream));
        cudaStreamDestroy(rb[r].stream);
        cudaFree(rb[r].partial);
        cudaFree(rb[r].h);
        cudaFree(rb[r].x);
        cudaFree(rb[r].weight);
        cudaFree(rb[r].flag);
    }
}

/* One call's inputs: each rank's partial (random: sums round, so the order of the sum shows),
 * the shared h and weight, the flag cleared. */
typedef struct {
    float *partial[MAX_RANKS];
    float *h, *weight;
} call_inputs;

static void inputs_make(call_inputs *in, int ranks, int count, int n, int nan_at)
{
    for (int r = 0; r < ranks; r++) {
        in->partial[r] = malloc((size_t)count * sizeof(float));
        for (int i = 0; i < count; i++)
            in->partial[r][i] = gpu_test_uniform() * (float)(1 + r);
    }
    if (nan_at >= 0)
        in->partial[ranks - 1][nan_at] = NAN;
    in->h = malloc((size_t)count * sizeof(float));
    in->weight = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < count; i++)
        in->h[i] = gpu_test_uniform() * 3.0f;
    for (int i = 0; i < n; i++)
        in->weight[i] = 0.5f + gpu_test_uniform();
}

static void inputs_free(call_inputs *in, int ranks)
{
    for (int r = 0; r < ranks; r++)
        free(in->partial[r]);
    free(in->h);
    free(in->weight);
}

/* The inputs onto every rank's device, on its stream (x poisoned, the flag cleared). */
static void inputs_upload(const call_inputs *in, rank_bufs *rb, int ranks, int count, int n)
{
    static const int zero = 0;
    for (int r = 0; r < ranks; r++) {
        set_device(r);
        CUDA_CHECK(cudaMemcpyAsync(rb[r].partial, in->partial[r], (size_t)count * sizeof(float),
                                   cudaMemcpyHostToDevice, rb[r].stream));
        CUDA_CHECK(cudaMemcpyAsync(rb[r].h, in->h, (size_t)count * sizeof(float), cudaMemcpyHostToDevice,
                                   rb[r].stream));
        CUDA_CHECK(cudaMemcpyAsync(rb[r].weight, in->weight, (size_t)n * sizeof(float), cudaMemcpyHostToDevice,
                                   rb[r].stream));
        CUDA_CHECK(cudaMemsetAsync(rb[r].x, 0xFF, (size_t)count * sizeof(float), rb[r].stream));
        CUDA_CHECK(cudaMemcpyAsync(rb[r].flag, &zero, sizeof zero, cudaMemcpyHostToDevice, rb[r].stream));
        CUDA_CHECK(cudaStreamSynchronize(rb[r].stream));   /* the host arrays may change after this */
    }
}

typedef struct {
    float *h, *x;       /* [count] */
    int flag;
} rank_result;

static void results_download(rank_bufs *rb, int ranks, int count, rank_result *out)
{
    for (int r = 0; r < ranks; r++) {
        set_device(r);
        out[r].h = malloc((size_t)count * sizeof(float));
        out[r].x = malloc((size_t)count * sizeof(float));
        CUDA_CHECK(cudaMemcpyAsync(out[r].h, rb[r].h, (size_t)count * sizeof(float), cudaMemcpyDeviceToHost,
                                   rb[r].stream));
        CUDA_CHECK(cudaMemcpyAsync(out[r].x, rb[r].x, (size_t)count * sizeof(float), cudaMemcpyDeviceToHost,
                                   rb[r].stream));
        CUDA_CHECK(cudaMemcpyAsync(&out[r].flag, rb[r].flag, sizeof(int), cudaMemcpyDeviceToHost, rb[r].stream));
        CUDA_CHECK(cudaStreamSynchronize(rb[r].stream));
    }
}

static void results_free(rank_result *res, int ranks)
{
    for (int r = 0; r < ranks; r++) {
        free(res[r].h);
        free(res[r].x);
    }
}

/* The backend's path without the peer exchange, on the NCCL communicator (its emulation sums in
 * rank order, as the CPU communicator does; NULL: one rank, nothing to sum). */
static void reference_enqueue(cuda_comm *nccl, rank_bufs *rb, int ranks, int rows, int n, int with_norm, int code)
{
    size_t count = (size_t)rows * n;
    for (int r = 0; r < ranks; r++) {
        set_device(r);
        kimi_err err = {0};
        CHECK_MSG(!nccl || !cuda_comm_allreduce_sum(nccl, r, rb[r].partial, count, rb[r].stream, &err), "nccl: %s",
                  err.msg);
        int e = 0;
        if (with_norm && code > 0)
            e = residual_rmsnorm_flag_cuda(rb[r].h, rb[r].partial, rb[r].x, rb[r].weight, rows, n, EPS, code,
                                           rb[r].flag, rb[r].stream);
        else if (with_norm)
            e = residual_rmsnorm_cuda(rb[r].h, rb[r].partial, rb[r].x, rb[r].weight, rows, n, EPS, rb[r].stream);
        else
            e = add_cuda(rb[r].h, rb[r].partial, count, rb[r].stream);
        if (!e && !with_norm && code > 0)
            e = nonfinite_flag_cuda(rb[r].h, count, code, rb[r].flag, rb[r].stream);
        CHECK_MSG(e == 0, "reference launch: %s", cudaGetErrorString((cudaError_t)e));
    }
}

static void peer_enqueue(cuda_comm *peer, rank_bufs *rb, int ranks, int rows, int n, int with_norm, int code)
{
    for (int r = 0; r < ranks; r++) {
        set_device(r);
        kimi_err err = {0};
        int rc = cuda_comm_allreduce_norm(peer, r, rb[r].partial, rb[r].h, rb[r].x, with_norm ? rb[r].weight : NULL,
                                          rows, n, EPS, code, code > 0 ? rb[r].flag : NULL, rb[r].stream, &err);
        CHECK_MSG(rc == 0, "peer rank %d: %s", r, err.msg);
    }
}

/* Every rank's h (and x with a norm) and flag equal to the reference's, bit for bit. */
static void compare(const rank_result *got, const rank_result *want, int ranks, int count, int with_norm,
                    const char *what)
{
    for (int r = 0; r < ranks; r++) {
        CHECK_MSG(!memcmp(got[r].h, want[r].h, (size_t)count * sizeof(float)), "%s: rank %d: h differs", what, r);
        if (with_norm)
            CHECK_MSG(!memcmp(got[r].x, want[r].x, (size_t)count * sizeof(float)), "%s: rank %d: x differs", what, r);
        CHECK_MSG(got[r].flag == want[r].flag, "%s: rank %d: flag %d, want %d", what, r, got[r].flag, want[r].flag);
        CHECK_MSG(!memcmp(got[r].h, got[0].h, (size_t)count * sizeof(float)), "%s: rank %d's h is not rank 0's",
                  what, r);
    }
}

static cuda_comm *open_peer(int ranks, size_t max_n, int insist)
{
    int devices[MAX_RANKS];
    for (int r = 0; r < ranks; r++)
        devices[r] = r;
    cuda_comm *c = NULL;
    kimi_err err = {0};
    int rc = cuda_comm_open_peer(&c, ranks, devices, max_n, insist, &err);
    CHECK_MSG(rc == 0, "open peer, %d ranks: %s", ranks, err.msg);
    return c;
}

/* One rank's decode kernel of check_fused: an F32 GEMV [n][FUSED_K] of x, or a token's MoE down
 * projections (FUSED_TOP_K routed slots + the shared one, each F32 [n][FUSED_INTER] of act) and
 * their weighted sum; both write the rank's partial [n]. */
enum { FUSED_K = 64, FUSED_INTER = 32, FUSED_TOP_K = 2, FUSED_SLOTS = FUSED_TOP_K + 1, FUSED_CALLS = 8 };

typedef struct {
    weight_matrix w;                /* the GEMV's */
    float *x;                       /* [FUSED_K] */
    mlp_device *table;              /* device [FUSED_SLOTS]: down only */
    int *slot_table, *chosen;       /* device [FUSED_SLOTS], [FUSED_TOP_K] */
    float *route_weights, *act, *y; /* device [FUSED_TOP_K], [FUSED_SLOTS][FUSED_INTER], [FUSED_SLOTS][n] */
    gemv_scratch scratch;
    void *allocations[FUSED_SLOTS + 1];
} fused_rank;

static float *random_device_floats(size_t count, float scale)
{
    float *host = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++)
        host[i] = gpu_test_uniform() * scale;
    float *device = gpu_test_upload(host, count * sizeof(float));
    free(host);
    return device;
}

static weight_matrix f32_matrix(const float *data, int rows, int cols)
{
    weight_matrix w = {WEIGHT_F32, rows, cols, (const uint8_t *)data, (size_t)cols * sizeof(float), NULL, 0, 1.0f};
    return w;
}

/* Rank r's weights and inputs on device r for hidden width n (the same for every call). */
static void fused_rank_make(fused_rank *f, int r, int n)
{
    set_device(r);
    float *w = random_device_floats((size_t)n * FUSED_K, 0.2f);
    f->allocations[0] = w;
    f->w = f32_matrix(w, n, FUSED_K);
    f->x = random_device_floats(FUSED_K, 1.0f);
    mlp_device table[FUSED_SLOTS];
    memset(table, 0, sizeof table);
    for (int e = 0; e < FUSED_SLOTS; e++) {
        float *down = random_device_floats((size_t)n * FUSED_INTER, 0.3f);
        f->allocations[1 + e] = down;
        table[e].down = f32_matrix(down, n, FUSED_INTER);
    }
    f->table = gpu_test_upload(table, sizeof table);
    /* routed experts 1 and 0 of the table's 1 + expert entries, then the shared one (entry 0) */
    int chosen[FUSED_TOP_K] = {1, 0}, slots[FUSED_SLOTS] = {2, 1, 0};
    f->chosen = gpu_test_upload(chosen, sizeof chosen);
    f->slot_table = gpu_test_upload(slots, sizeof slots);
    f->route_weights = random_device_floats(FUSED_TOP_K, 1.0f);
    f->act = random_device_floats((size_t)FUSED_SLOTS * FUSED_INTER, 1.0f);
    CUDA_CHECK(cudaMalloc((void **)&f->y, (size_t)FUSED_SLOTS * n * sizeof(float)));
    f->scratch.max_rows = 4096;
    f->scratch.sm_count = 8;
    CUDA_CHECK(cudaMalloc((void **)&f->scratch.partials, (size_t)f->scratch.max_rows * 16 * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&f->scratch.counters, (size_t)f->scratch.max_rows * sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(f->scratch.counters, 0, (size_t)f->scratch.max_rows * sizeof(unsigned)));
}

static void fused_rank_free(fused_rank *f, int r)
{
    set_device(r);
    for (int i = 0; i < FUSED_SLOTS + 1; i++)
        cudaFree(f->allocations[i]);
    cudaFree(f->x);
    cudaFree(f->table);
    cudaFree(f->slot_table);
    cudaFree(f->chosen);
    cudaFree(f->route_weights);
    cudaFree(f->act);
    cudaFree(f->y);
    cudaFree(f->scratch.partials);
    cudaFree(f->scratch.counters);
}

/* Rank r's decode kernel (moe: the down projections, else the GEMV) into its partial, with the
 * epilogue e or (NULL) alone. */
static int fused_launch(fused_rank *f, rank_bufs *b, int n, int moe, const residual_epilogue *e)
{
    if (moe)
        return mlp_down_combine_cuda(f->table, f->slot_table, FUSED_TOP_K, 1, f->act, n, FUSED_INTER, f->y, f->chosen,
                                     f->route_weights, b->partial, e, &f->scratch, b->stream);
    if (e)
        return linear_gemv_residual_cuda(&f->w, f->x, b->partial, e, &f->scratch, b->stream);
    return linear_gemv_cuda(&f->w, n, 1, 0, f->x, 0, b->partial, 0, &f->scratch, b->stream);
}

/* Rank r's fused launch on its stream (peer NULL: one rank, no exchange). */
static void fused_enqueue(cuda_comm *peer, fused_rank *f, rank_bufs *b, int r, int n, int moe, int with_norm, int code)
{
    set_device(r);
    residual_epilogue e;
    memset(&e, 0, sizeof e);
    kimi_err err = {0};
    CHECK_MSG(!peer || !cuda_comm_peer_view(peer, r, (size_t)n, &e.peer, &err), "peer view, rank %d: %s", r, err.msg);
    e.h = b->h;
    e.out = b->x;
    e.weight = with_norm ? b->weight : NULL;
    e.eps = EPS;
    e.code = code;
    e.flag = code > 0 ? b->flag : NULL;
    int rc = fused_launch(f, b, n, moe, &e);
    CHECK_MSG(rc == 0, "fused launch, rank %d: %s", r, cudaGetErrorString((cudaError_t)rc));
}

/* Each rank's partial (before any all-reduce, as the fused launch leaves it). */
static float *partial_download(rank_bufs *b, int r, int n)
{
    set_device(r);
    float *host = malloc((size_t)n * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(host, b->partial, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, b->stream));
    CUDA_CHECK(cudaStreamSynchronize(b->stream));
    return host;
}

/* FUSED_CALLS calls of both kernels, widths with and without 16-byte vectors, with and without a
 * norm and a flag, on check_calls' communicators and buffers (the emulator keeps every stream
 * thread's fiber stacks: new streams would run it out of mappings); peer and nccl NULL: rank 0
 * alone, no exchange (the one-rank epilogue). */
static void check_fused(cuda_comm *peer, cuda_comm *nccl, rank_bufs *rb, int ranks)
{
    fused_rank f[MAX_RANKS];
    for (int call = 0; call < FUSED_CALLS + 1; call++) {
        int n = call % 2 ? 1030 : 1024, moe = call / 2 % 2, with_norm = call != 5, code = call % 3 ? 1 + call : 0;
        int replay = call == FUSED_CALLS;   /* the last call: captured, then replayed with new inputs */
        for (int r = 0; r < ranks; r++)
            fused_rank_make(&f[r], r, n);
        call_inputs in;
        inputs_make(&in, ranks, n, n, -1);
        rank_result want[MAX_RANKS], got[MAX_RANKS];
        inputs_upload(&in, rb, ranks, n, n);
        for (int r = 0; r < ranks; r++) {
            set_device(r);
            int rc = fused_launch(&f[r], &rb[r], n, moe, NULL);
            CHECK_MSG(rc == 0, "unfused launch, rank %d: %s", r, cudaGetErrorString((cudaError_t)rc));
        }
        float *want_partial[MAX_RANKS];
        for (int r = 0; r < ranks; r++)
            want_partial[r] = partial_download(&rb[r], r, n);
        reference_enqueue(nccl, rb, ranks, 1, n, with_norm, code);
        results_download(rb, ranks, n, want);
        if (peer && call % 3 == 1) {  /* a plain peer call in between: the fused kernels share its epochs */
            inputs_upload(&in, rb, ranks, n, n);
            peer_enqueue(peer, rb, ranks, 1, n, with_norm, code);
            for (int r = 0; r < ranks; r++)
                CUDA_CHECK(cudaStreamSynchronize(rb[r].stream));
        }
        inputs_upload(&in, rb, ranks, n, n);
        if (replay) {
            cudaGraphExec_t exec[MAX_RANKS] = {0};
            for (int r = 0; r < ranks; r++) {
                set_device(r);
                cudaGraph_t graph = NULL;
                CUDA_CHECK(cudaStreamBeginCapture(rb[r].stream, cudaStreamCaptureModeRelaxed));
                fused_enqueue(peer, &f[r], &rb[r], r, n, moe, with_norm, code);
                CUDA_CHECK(cudaStreamEndCapture(rb[r].stream, &graph));
                CUDA_CHECK(cudaGraphInstantiate(&exec[r], graph, 0));
                cudaGraphDestroy(graph);
            }
            for (int launch = 0; launch < 3; launch++) {   /* the same inputs each time */
                inputs_upload(&in, rb, ranks, n, n);
                for (int r = 0; r < ranks; r++) {
                    set_device(r);
                    CUDA_CHECK(cudaGraphLaunch(exec[r], rb[r].stream));
                }
                for (int r = 0; r < ranks; r++)
                    CUDA_CHECK(cudaStreamSynchronize(rb[r].stream));
            }
            for (int r = 0; r < ranks; r++) {
                set_device(r);
                cudaGraphExecDestroy(exec[r]);
            }
        } else {
            for (int r = 0; r < ranks; r++)
                fused_enqueue(peer, &f[r], &rb[r], r, n, moe, with_norm, code);
        }
        results_download(rb, ranks, n, got);
        char what[96];
        snprintf(what, sizeof what, "%d ranks, fused %s call %d (%d wide)%s", ranks, moe ? "down" : "gemv", call, n,
                 replay ? ", graph replays" : "");
        compare(got, want, ranks, n, with_norm, what);
        for (int r = 0; r < ranks; r++) {
            float *partial = partial_download(&rb[r], r, n);
            CHECK_MSG(!memcmp(partial, want_partial[r], (size_t)n * sizeof(float)), "%s: rank %d's partial differs",
                      what, r);
            free(partial);
            free(want_partial[r]);
            fused_rank_free(&f[r], r);
        }
        results_free(want, ranks);
        results_free(got, ranks);
        inputs_free(&in, ranks);
    }
}

/* N_CALLS calls of varied shapes, each against the reference; then graph replays. */
static void check_calls(int ranks)
{
    int n_max = 1030;
    cuda_comm *peer = open_peer(ranks, (size_t)MAX_ROWS * n_max, 1);
    int devices[MAX_RANKS];
    for (int r = 0; r < ranks; r++)
        devices[r] = r;
    cuda_comm *nccl = NULL;
    kimi_err err = {0};
    CHECK_MSG(!cuda_comm_open_nccl(&nccl, ranks, devices, &err), "open nccl: %s", err.msg);
    if (!peer || !nccl)
        return;
    CHECK_MSG(cuda_comm_fuses_norm(peer, (size_t)MAX_ROWS * n_max) && !cuda_comm_fuses_norm(peer, MAX_ROWS * n_max + 1)
                  && !cuda_comm_fuses_norm(nccl, 1),
              "fuses_norm: the peer communicator up to max_n, NCCL never");
    CHECK_MSG(!strcmp(cuda_comm_describe(peer), "peer all-reduce (NCCL for the rest)"), "describe: %s",
              cuda_comm_describe(peer));
    rank_bufs rb[MAX_RANKS];
    ranks_alloc(rb, ranks, n_max);
    static const int sizes[] = {1024, 1030, 7, 512, 1001};
    for (int call = 0; call < N_CALLS; call++) {
        int rows = 1 + call % MAX_ROWS, n = sizes[call % 5], count = rows * n;
        int with_norm = call % 7 != 3, code = call % 3 == 0 ? 0 : 1 + call % 5;
        int nan_at = call == 17 || call == 24 ? count / 2 : -1;
        call_inputs in;
        inputs_make(&in, ranks, count, n, nan_at);
        rank_result want[MAX_RANKS], got[MAX_RANKS];
        inputs_upload(&in, rb, ranks, count, n);
        reference_enqueue(nccl, rb, ranks, rows, n, with_norm, code);
        results_download(rb, ranks, count, want);
        inputs_upload(&in, rb, ranks, count, n);
        peer_enqueue(peer, rb, ranks, rows, n, with_norm, code);
        results_download(rb, ranks, count, got);
        char what[64];
        snprintf(what, sizeof what, "%d ranks, call %d (%d x %d)", ranks, call, rows, n);
        compare(got, want, ranks, count, with_norm, what);
        if (nan_at >= 0 && code > 0)
            CHECK_MSG(got[0].flag == code, "%s: the NaN did not raise the flag", what);
        results_free(want, ranks);
        results_free(got, ranks);
        inputs_free(&in, ranks);
    }

    /* one call per rank captured, replayed with new inputs each time */
    int rows = 2, n = 1024, count = rows * n;
    cudaGraphExec_t exec[MAX_RANKS] = {0};
    for (int r = 0; r < ranks; r++) {
        set_device(r);
        cudaGraph_t graph = NULL;
        CUDA_CHECK(cudaStreamBeginCapture(rb[r].stream, cudaStreamCaptureModeRelaxed));
        int rc = cuda_comm_allreduce_norm(peer, r, rb[r].partial, rb[r].h, rb[r].x, rb[r].weight, rows, n, EPS, 2,
                                          rb[r].flag, rb[r].stream, &err);
        CHECK_MSG(rc == 0, "captured call, rank %d: %s", r, err.msg);
        CUDA_CHECK(cudaStreamEndCapture(rb[r].stream, &graph));
        CUDA_CHECK(cudaGraphInstantiate(&exec[r], graph, 0));
        cudaGraphDestroy(graph);
    }
    for (int replay = 0; replay < N_REPLAYS; replay++) {
        call_inputs in;
        inputs_make(&in, ranks, count, n, -1);
        rank_result want[MAX_RANKS], got[MAX_RANKS];
        inputs_upload(&in, rb, ranks, count, n);
        reference_enqueue(nccl, rb, ranks, rows, n, 1, 2);
        results_download(rb, ranks, count, want);
        inputs_upload(&in, rb, ranks, count, n);
        for (int r = 0; r < ranks; r++) {
            set_device(r);
            CUDA_CHECK(cudaGraphLaunch(exec[r], rb[r].stream));
        }
        results_download(rb, ranks, count, got);
        char what[64];
        snprintf(what, sizeof what, "%d ranks, graph replay %d", ranks, replay);
        compare(got, want, ranks, count, 1, what);
        results_free(want, ranks);
        results_free(got, ranks);
        inputs_free(&in, ranks);
    }
    for (int r = 0; r < ranks; r++) {
        set_device(r);
        cudaGraphExecDestroy(exec[r]);
    }
    check_fused(peer, nccl, rb, ranks);
    if (ranks == 2)
        check_fused(NULL, NULL, rb, 1);
    ranks_free(rb, ranks);
    cuda_comm_close(peer);
    cuda_comm_close(nccl);
}

/* KIMI_EMU_PEER=0: the fallback to NCCL, and the insisting open's error. */
static void check_fallback(void)
{
    setenv("KIMI_EMU_PEER", "0", 1);
    cuda_comm *c = open_peer(2, 1024, 0);
    if (c) {
        CHECK_MSG(!cuda_comm_fuses_norm(c, 16), "no peer access: nothing fused");
        CHECK_MSG(strstr(cuda_comm_describe(c), "NCCL (peer all-reduce off: ") &&
                      strstr(cuda_comm_describe(c), "device 0 cannot access device 1's memory"),
                  "describe: %s", cuda_comm_describe(c));
        cuda_comm_close(c);
    }
    int devices[2] = {0, 1};
    kimi_err err = {0};
    c = NULL;
    int rc = cuda_comm_open_peer(&c, 2, devices, 1024, 1, &err);
    CHECK_MSG(rc == KIMI_ERR_IO && !c && strstr(err.msg, "KIMI_CUDA_COMM=peer: ") &&
                  strstr(err.msg, "device 0 cannot access device 1"),
              "insisting without peer access: rc %d: %s", rc, err.msg);
    unsetenv("KIMI_EMU_PEER");
}

/* Rank 1 never calls: rank 0's kernel waits until the communicator fails, then ends with h as it
 * was; later calls are refused. */
static void check_stop(void)
{
    int n = 256;
    cuda_comm *c = open_peer(2, (size_t)n, 1);
    if (!c)
        return;
    rank_bufs rb[2];
    ranks_alloc(rb, 2, n);
    call_inputs in;
    inputs_make(&in, 2, n, n, -1);
    inputs_upload(&in, rb, 2, n, n);
    set_device(0);
    kimi_err err = {0};
    CHECK_MSG(!cuda_comm_allreduce_norm(c, 0, rb[0].partial, rb[0].h, rb[0].x, rb[0].weight, 1, n, EPS, 0, NULL,
                                        rb[0].stream, &err),
              "rank 0's call: %s", err.msg);
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    CHECK_MSG(cudaStreamQuery(rb[0].stream) == cudaErrorNotReady, "rank 0 waits for rank 1");
    cuda_comm_fail(c);
    double deadline = monotonic_seconds() + 60.0;
    cudaError_t e;
    while ((e = cudaStreamQuery(rb[0].stream)) == cudaErrorNotReady && monotonic_seconds() < deadline)
        nanosleep(&pause, NULL);
    CHECK_MSG(e == cudaSuccess, "rank 0's wait ended after the stop: %s", cudaGetErrorString(e));
    if (e == cudaSuccess) {
        rank_result got[2];
        results_download(rb, 1, n, got);
        CHECK_MSG(!memcmp(got[0].h, in.h, (size_t)n * sizeof(float)), "a stopped call leaves h alone");
        results_free(got, 1);
        CHECK_MSG(cuda_comm_allreduce_norm(c, 1, rb[1].partial, rb[1].h, rb[1].x, rb[1].weight, 1, n, EPS, 0, NULL,
                                           rb[1].stream, &err) == KIMI_ERR_STATE,
                  "a call after the failure is refused");
        ranks_free(rb, 2);
        cuda_comm_close(c);
    }
    inputs_free(&in, 2);
}

int main(void)
{
    gpu_test_require_device();
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (devices < 2) {
        printf("SKIPPED: the peer all-reduce needs two devices, %d visible\n", devices);
        return GPU_TEST_SKIPPED;
    }
    check_calls(2);
    if (devices >= 8)
        check_calls(8);
    check_fallback();
    check_stop();
    return check_finish();
}
