/* cuda_peer: the buffers of the one-shot peer all-reduce on every device, its self-check and its
 * stop word (engine/backend/cuda_peer.h). */
#include "engine/backend/cuda_peer.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/monotonic.h"
#include "kernels/cuda/allreduce.h"
#include "kernels/forward_math.h"

enum { MAX_RANKS = PEER_ALLREDUCE_MAX_RANKS };

/* The self-check: rows x n, and how long its call may take before the waits are stopped. */
enum { CHECK_ROWS = 2, CHECK_N = 96 };
#define CHECK_SECONDS 20.0

struct cuda_peer {
    int ranks;
    int devices[MAX_RANKS];
    size_t max_n;
    peer_allreduce_view views[MAX_RANKS];   /* rank r's view: the same slots and flags, its epoch */
    volatile int *stop;                     /* host-mapped pinned word (cudaHostAllocMapped) */
};

static int peer_fail(kimi_err *err, cudaError_t e, const char *what, int device)
{
    return kimi_fail(err, e == cudaErrorMemoryAllocation ? KIMI_ERR_NOMEM : KIMI_ERR_IO,
                     "CUDA: peer all-reduce: %s on device %d: %s", what, device, cudaGetErrorString(e));
}

size_t cuda_peer_max_n(const cuda_peer *p)
{
    return p->max_n;
}

void cuda_peer_close(cuda_peer *p)
{
    if (!p)
        return;
    int previous = 0;
    cudaGetDevice(&previous);
    for (int r = 0; r < p->ranks; r++) {
        cudaSetDevice(p->devices[r]);
        cudaFree(p->views[0].slots[r]);
        cudaFree(p->views[0].flags[r]);
        cudaFree(p->views[r].epoch);
    }
    cudaSetDevice(previous);
    if (p->stop)
        cudaFreeHost((void *)p->stop);
    free(p);
}

/* Every device maps every other's memory (enabling twice is fine: a second backend in one
 * process finds it enabled). */
static int enable_peers(const cuda_peer *p, kimi_err *err)
{
    for (int i = 0; i < p->ranks; i++)
        for (int j = 0; j < p->ranks; j++) {
            if (i == j)
                continue;
            int can = 0;
            cudaError_t e = cudaDeviceCanAccessPeer(&can, p->devices[i], p->devices[j]);
            if (e != cudaSuccess)
                return peer_fail(err, e, "cudaDeviceCanAccessPeer", p->devices[i]);
            if (!can)
                return kimi_fail(err, KIMI_ERR_IO, "CUDA: device %d cannot access device %d's memory (no peer access "
                                 "between them)", p->devices[i], p->devices[j]);
            e = cudaSetDevice(p->devices[i]);
            if (e == cudaSuccess)
                e = cudaDeviceEnablePeerAccess(p->devices[j], 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled) {
                (void)cudaGetLastError();
                e = cudaSuccess;
            }
            if (e != cudaSuccess)
                return peer_fail(err, e, "enabling peer access", p->devices[i]);
        }
    return 0;
}

int cuda_peer_open(cuda_peer **out, int ranks, const int *devices, size_t max_n, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    *out = NULL;
    if (ranks < 1 || ranks > MAX_RANKS || max_n == 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "peer all-reduce: %d ranks of %zu floats", ranks, max_n);
    cuda_peer *p = calloc(1, sizeof *p);
    if (!p)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the peer all-reduce");
    p->ranks = ranks;
    p->max_n = (max_n + 3) & ~(size_t)3;    /* 16-byte slots: the kernel's vector stores */
    for (int r = 0; r < ranks; r++)
        p->devices[r] = devices[r];
    int previous = 0;
    cudaGetDevice(&previous);
    int status = enable_peers(p, err);
    void *stop = NULL, *stop_device = NULL;
    cudaError_t e = cudaSuccess;
    if (!status) {
        e = cudaHostAlloc(&stop, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable);
        if (e == cudaSuccess) {
            p->stop = stop;
            *p->stop = 0;
            e = cudaHostGetDevicePointer(&stop_device, stop, 0);
        }
        if (e != cudaSuccess)
            status = peer_fail(err, e, "the mapped stop word", devices[0]);
    }
    float *slots[MAX_RANKS] = {0};
    unsigned *flags[MAX_RANKS] = {0};
    size_t slot_bytes = 2 * (size_t)ranks * p->max_n * sizeof(float);
    for (int r = 0; r < ranks && !status; r++) {
        /* cleared on a stream of its own: the legacy stream would wait for every stream */
        cudaStream_t stream = NULL;
        const char *what = "cudaSetDevice";
        e = cudaSetDevice(devices[r]);
        if (e == cudaSuccess && (what = "slots", e = cudaMalloc((void **)&slots[r], slot_bytes)) == cudaSuccess &&
            (what = "flags", e = cudaMalloc((void **)&flags[r], ranks * sizeof(unsigned))) == cudaSuccess &&
            (what = "epoch", e = cudaMalloc((void **)&p->views[r].epoch, sizeof(unsigned))) == cudaSuccess &&
            (what = "a stream", e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) == cudaSuccess &&
            (what = "clearing the flags", e = cudaMemsetAsync(flags[r], 0, ranks * sizeof(unsigned), stream)) ==
                cudaSuccess &&
            (e = cudaMemsetAsync(p->views[r].epoch, 0, sizeof(unsigned), stream)) == cudaSuccess)
            e = cudaStreamSynchronize(stream);
        if (stream)
            cudaStreamDestroy(stream);
        if (e != cudaSuccess)
            status = peer_fail(err, e, what, devices[r]);
    }
    for (int r = 0; r < ranks; r++) {
        peer_allreduce_view *v = &p->views[r];
        memcpy(v->slots, slots, sizeof slots);
        memcpy(v->flags, flags, sizeof flags);
        v->stop = stop_device;
        v->ranks = ranks;
        v->rank = r;
        v->max_n = p->max_n;
    }
    cudaSetDevice(previous);
    if (status) {
        cuda_peer_close(p);
        return status;
    }
    *out = p;
    return 0;
}

void cuda_peer_stop(cuda_peer *p)
{
    if (p && p->stop)
        __atomic_store_n((int *)p->stop, 1, __ATOMIC_SEQ_CST);
}

int cuda_peer_allreduce_norm(cuda_peer *p, int rank, const float *partial, float *h, float *out, const float *weight,
                             int rows, int n, float eps, int code, int *flag, void *stream, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    if (rank < 0 || rank >= p->ranks || rows < 1 || n < 1 || (size_t)rows * (size_t)n > p->max_n)
        return kimi_fail(err, KIMI_ERR_STATE, "peer all-reduce: rank %d of %d, %d x %d floats (at most %zu)", rank,
                         p->ranks, rows, n, p->max_n);
    int e = peer_allreduce_residual_rmsnorm_cuda(&p->views[rank], partial, h, out, weight, rows, n, eps, code, flag,
                                                 stream);
    if (e)
        return peer_fail(err, (cudaError_t)e, "launch", p->devices[rank]);
    return 0;
}

int cuda_peer_view(const cuda_peer *p, int rank, size_t n, peer_allreduce_view *view, kimi_err *err)
{
    if (rank < 0 || rank >= p->ranks || n < 1 || n > p->max_n)
        return kimi_fail(err, KIMI_ERR_STATE, "peer all-reduce: rank %d of %d, %zu floats (at most %zu)", rank,
                         p->ranks, n, p->max_n);
    *view = p->views[rank];
    return 0;
}

/* ---- the self-check ---- */

/* The pattern: rank r's partial, h and the weight at element i of row `row`. Multiples of 1/8
 * below 2^10: every sum of them is exact, so each rank's h must match to the bit. */
static float check_partial(int rank, int row, int i)
{
    return (float)((rank + 1) * ((i * 7 + row * 3) % 13 + 1)) * 0.125f;
}
static float check_h(int row, int i)
{
    return (float)((i + row) % 9) - 4.0f;
}
static float check_weight(int i)
{
    return 1.0f + (float)(i % 3) * 0.5f;
}

typedef struct {
    cudaStream_t stream;
    float *partial, *h, *out, *weight;      /* [CHECK_ROWS * CHECK_N] each, weight [CHECK_N] */
} check_rank;

/* Rank r's buffers on its device, filled. */
static cudaError_t check_prepare(const cuda_peer *p, int r, check_rank *c)
{
    enum { COUNT = CHECK_ROWS * CHECK_N };
    float partial[COUNT], h[COUNT], weight[CHECK_N];
    for (int row = 0; row < CHECK_ROWS; row++)
        for (int i = 0; i < CHECK_N; i++) {
            partial[row * CHECK_N + i] = check_partial(r, row, i);
            h[row * CHECK_N + i] = check_h(row, i);
        }
    for (int i = 0; i < CHECK_N; i++)
        weight[i] = check_weight(i);
    cudaError_t e = cudaSetDevice(p->devices[r]);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    float **bufs[] = {&c->partial, &c->h, &c->out, &c->weight};
    for (int b = 0; b < 4 && e == cudaSuccess; b++)
        e = cudaMalloc((void **)bufs[b], COUNT * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(c->partial, partial, sizeof partial, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(c->h, h, sizeof h, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(c->weight, weight, sizeof weight, cudaMemcpyHostToDevice, c->stream);
    return e == cudaSuccess ? cudaStreamSynchronize(c->stream) : e;   /* the host arrays end here */
}

/* Rank r's results against the sums computed here: 0 or the error saying where they differ. */
static int check_compare(const cuda_peer *p, int r, const check_rank *c, kimi_err *err)
{
    enum { COUNT = CHECK_ROWS * CHECK_N };
    float h[COUNT], out[COUNT];
    cudaError_t e = cudaSetDevice(p->devices[r]);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(h, c->h, sizeof h, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(out, c->out, sizeof out, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return peer_fail(err, e, "reading the self-check", p->devices[r]);
    for (int row = 0; row < CHECK_ROWS; row++) {
        double squares = 0.0;
        for (int i = 0; i < CHECK_N; i++) {
            float sum = 0.0f;
            for (int q = 0; q < p->ranks; q++)
                sum += check_partial(q, row, i);
            float want = check_h(row, i) + sum, got = h[row * CHECK_N + i];
            squares += (double)want * want;
            if (got != want)
                return kimi_fail(err, KIMI_ERR_IO, "CUDA: peer all-reduce self-check: rank %d (device %d) summed %g "
                                 "where %g is right (row %d, element %d): the devices' peer writes do not arrive "
                                 "intact", r, p->devices[r], got, want, row, i);
        }
        float inverse_rms = rmsnorm_inverse_rms(squares, CHECK_N, 1e-6f);
        for (int i = 0; i < CHECK_N; i++) {
            float want = rmsnorm_element(h[row * CHECK_N + i], inverse_rms, check_weight(i));
            float got = out[row * CHECK_N + i];
            if (!(fabsf(got - want) <= 1e-5f * fabsf(want) + 1e-6f))
                return kimi_fail(err, KIMI_ERR_IO, "CUDA: peer all-reduce self-check: rank %d (device %d) normed %g "
                                 "where %g is right (row %d, element %d)", r, p->devices[r], got, want, row, i);
        }
    }
    return 0;
}

int cuda_peer_self_check(cuda_peer *p, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    int previous = 0;
    cudaGetDevice(&previous);
    check_rank ranks[MAX_RANKS];
    memset(ranks, 0, sizeof ranks);
    int status = 0;
    for (int r = 0; r < p->ranks && !status; r++) {
        cudaError_t e = check_prepare(p, r, &ranks[r]);
        if (e != cudaSuccess)
            status = peer_fail(err, e, "preparing the self-check", p->devices[r]);
    }
    /* every rank's call enqueued before any is waited for: they run at once, as in a step */
    int launched = 0;
    for (int r = 0; r < p->ranks && !status; r++, launched++) {
        cudaError_t e = cudaSetDevice(p->devices[r]);
        if (e != cudaSuccess)
            status = peer_fail(err, e, "cudaSetDevice", p->devices[r]);
        else
            status = cuda_peer_allreduce_norm(p, r, ranks[r].partial, ranks[r].h, ranks[r].out, ranks[r].weight,
                                              CHECK_ROWS, CHECK_N, 1e-6f, 0, NULL, ranks[r].stream, err);
    }
    if (status)
        cuda_peer_stop(p);      /* the ranks launched wait for one that never will */
    /* every stream polled until all are done: a rank whose device fails, or a wait that outlasts
     * the deadline, stops the others' waits (they would wait for it forever) */
    double deadline = monotonic_seconds() + CHECK_SECONDS;
    for (int busy = launched; busy > 0;) {
        busy = 0;
        for (int r = 0; r < launched; r++) {
            cudaError_t e = cudaStreamQuery(ranks[r].stream);
            if (e == cudaErrorNotReady) {
                busy++;
                if (monotonic_seconds() > deadline && !status) {
                    cuda_peer_stop(p);
                    status = kimi_fail(err, KIMI_ERR_IO, "CUDA: peer all-reduce self-check: rank %d (device %d) "
                                       "still waits for its peers after %.0f s: their writes do not arrive", r,
                                       p->devices[r], CHECK_SECONDS);
                }
            } else if (e != cudaSuccess && !status) {
                cuda_peer_stop(p);
                status = peer_fail(err, e, "the self-check's call", p->devices[r]);
            }
        }
        struct timespec pause = {0, 200000};
        if (busy)
            nanosleep(&pause, NULL);
    }
    for (int r = 0; r < p->ranks && !status; r++)
        status = check_compare(p, r, &ranks[r], err);
    for (int r = 0; r < p->ranks; r++) {
        cudaSetDevice(p->devices[r]);
        if (ranks[r].stream)
            cudaStreamDestroy(ranks[r].stream);
        cudaFree(ranks[r].partial);
        cudaFree(ranks[r].h);
        cudaFree(ranks[r].out);
        cudaFree(ranks[r].weight);
    }
    cudaSetDevice(previous);
    return status;
}
