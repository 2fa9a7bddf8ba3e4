/* cuda_comm: the local communicator (rank threads meeting on the host, one device, one
 * stream) and the NCCL one (built when CMake finds NCCL: KIMI_HAVE_NCCL). */
#include "engine/backend/cuda_comm.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef KIMI_HAVE_NCCL
#include <nccl.h>
#endif

#include "engine/backend/cuda_peer.h"
#include "kernels/cuda/forward.h"

enum { MAX_RANKS = 8 };

struct cuda_comm {
    int ranks;
    int nccl;
    atomic_int failed;          /* a rank called cuda_comm_fail */

    /* local: the meeting of the rank threads */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int arrived;                /* ranks waiting in this round */
    unsigned round;             /* bumped when the last rank arrives */
    rank_buffers bufs;          /* the collective's buffers, by rank */
    size_t n[MAX_RANKS];        /* the element count each rank passed */
    int status;                 /* rank 0's launch status (cudaError_t), read after the meeting */
    const float *group_send[MAX_RANKS];     /* a group exchange's buffers, by rank */
    float *group_recv[MAX_RANKS];

#ifdef KIMI_HAVE_NCCL
    ncclComm_t comms[MAX_RANKS];
    int aborted;
#endif
    int devices[MAX_RANKS];
    cuda_peer *peer;            /* the peer all-reduce (cuda_comm_open_peer), or NULL */
    char description[600];      /* cuda_comm_describe's answer (holds a kimi_err message) */
};

static int comm_alloc(cuda_comm **out, int ranks, kimi_err *err)
{
    *out = NULL;
    if (ranks < 1 || ranks > MAX_RANKS)
        return kimi_fail(err, KIMI_ERR_USAGE, "tp %d: must be between 1 and %d", ranks, MAX_RANKS);
    cuda_comm *c = calloc(1, sizeof *c);
    if (!c)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the communicator");
    c->ranks = ranks;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    *out = c;
    return 0;
}

int cuda_comm_open_local(cuda_comm **out, int ranks, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    return comm_alloc(out, ranks, err ? err : &local_err);
}

static const char *devices_text(const int *devices, int n, char *text, size_t cap)
{
    size_t used = 0;
    text[0] = 0;
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(text + used, cap - used, i ? ",%d" : "%d", devices[i]);
    return text;
}

int cuda_comm_open_nccl(cuda_comm **out, int ranks, const int *devices, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    *out = NULL;
#ifdef KIMI_HAVE_NCCL
    cuda_comm *c;
    if (comm_alloc(&c, ranks, err))
        return err->code;
    c->nccl = 1;
    for (int r = 0; r < ranks; r++)
        c->devices[r] = devices[r];
    ncclResult_t status = ncclCommInitAll(c->comms, ranks, c->devices);
    if (status != ncclSuccess) {
        char list[MAX_RANKS * 6];
        for (int r = 0; r < ranks; r++)
            c->comms[r] = NULL;
        cuda_comm_close(c);
        return kimi_fail(err, KIMI_ERR_IO, "NCCL: cannot make the communicator of devices %s (%d ranks): %s",
                         devices_text(devices, ranks, list, sizeof list), ranks, ncclGetErrorString(status));
    }
    *out = c;
    return 0;
#else
    (void)ranks, (void)devices, (void)devices_text;
    return kimi_fail(err, KIMI_ERR_USAGE, "this build has no NCCL; --devices with one device runs all ranks locally");
#endif
}

int cuda_comm_open_peer(cuda_comm **out, int ranks, const int *devices, size_t max_n, int insist, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    cuda_comm *c;
    if (cuda_comm_open_nccl(&c, ranks, devices, err))
        return err->code;
    kimi_err peer_err = {0};
    if (!cuda_peer_open(&c->peer, ranks, devices, max_n, &peer_err) && cuda_peer_self_check(c->peer, &peer_err)) {
        cuda_peer_close(c->peer);
        c->peer = NULL;
    }
    if (!c->peer) {
        if (insist) {
            cuda_comm_close(c);
            *out = NULL;
            return kimi_fail(err, peer_err.code, "KIMI_CUDA_COMM=peer: %s", peer_err.msg);
        }
        snprintf(c->description, sizeof c->description, "NCCL (peer all-reduce off: %s)", peer_err.msg);
    } else {
        snprintf(c->description, sizeof c->description, "peer all-reduce (NCCL for the rest)");
    }
    *out = c;
    return 0;
}

const char *cuda_comm_describe(const cuda_comm *c)
{
    if (c->description[0])
        return c->description;
    return c->nccl ? "NCCL" : "local";
}

int cuda_comm_fuses_norm(const cuda_comm *c, size_t n)
{
    return c->peer && n <= cuda_peer_max_n(c->peer);
}

int cuda_comm_allreduce_norm(cuda_comm *c, int rank, const float *partial, float *h, float *x, const float *weight,
                             int rows, int n, float eps, int code, int *flag, void *stream, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    if (!c->peer)
        return kimi_fail(err, KIMI_ERR_STATE, "all-reduce with norm: rank %d: the communicator has no peer exchange",
                         rank);
    if (atomic_load(&c->failed))
        return kimi_fail(err, KIMI_ERR_STATE, "rank %d: all-reduce abandoned: another rank failed", rank);
    return cuda_peer_allreduce_norm(c->peer, rank, partial, h, x, weight, rows, n, eps, code, flag, stream, err);
}

int cuda_comm_peer_view(cuda_comm *c, int rank, size_t n, peer_allreduce_view *view, kimi_err *err)
{
    if (!c->peer)
        return kimi_fail(err, KIMI_ERR_STATE, "all-reduce with norm: rank %d: the communicator has no peer exchange",
                         rank);
    if (atomic_load(&c->failed))
        return kimi_fail(err, KIMI_ERR_STATE, "rank %d: all-reduce abandoned: another rank failed", rank);
    return cuda_peer_view(c->peer, rank, n, view, err);
}

void cuda_comm_close(cuda_comm *c)
{
    if (!c)
        return;
    cuda_peer_close(c->peer);
#ifdef KIMI_HAVE_NCCL
    for (int r = 0; r < c->ranks; r++)
        if (c->comms[r])
            ncclCommDestroy(c->comms[r]);
#endif
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int cuda_comm_is_nccl(const cuda_comm *c)
{
    return c->nccl;
}

void cuda_comm_fail(cuda_comm *c)
{
    atomic_store(&c->failed, 1);
    cuda_peer_stop(c->peer);
    pthread_mutex_lock(&c->lock);
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
}

int cuda_comm_check(cuda_comm *c, int rank, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
#ifdef KIMI_HAVE_NCCL
    if (c->nccl && !c->aborted && rank >= 0 && rank < c->ranks && c->comms[rank]) {
        ncclResult_t async = ncclSuccess, got = ncclCommGetAsyncError(c->comms[rank], &async);
        if (got != ncclSuccess)
            async = got;
        if (async != ncclSuccess && async != ncclInProgress)
            return kimi_fail(err, KIMI_ERR_IO, "NCCL: rank %d (device %d): %s", rank, c->devices[rank],
                             ncclGetErrorString(async));
    }
#endif
    (void)c, (void)rank;
    return 0;
}

int cuda_comm_recover(cuda_comm *c, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
#ifdef KIMI_HAVE_NCCL
    if (c->nccl) {
        if (!c->aborted)
            for (int r = 0; r < c->ranks; r++) {
                ncclCommAbort(c->comms[r]);
                c->comms[r] = NULL;
            }
        c->aborted = 1;
        return kimi_fail(err, KIMI_ERR_STATE, "NCCL: the communicators were aborted after a failed step");
    }
#endif
    pthread_mutex_lock(&c->lock);
    c->arrived = 0;
    atomic_store(&c->failed, 0);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* Wait until every rank has arrived; -1 when a rank failed first. */
static int meet(cuda_comm *c)
{
    pthread_mutex_lock(&c->lock);
    unsigned round = c->round;
    if (!atomic_load(&c->failed)) {
        if (++c->arrived == c->ranks) {
            c->arrived = 0;
            c->round++;
            pthread_cond_broadcast(&c->wake);
        } else {
            while (c->round == round && !atomic_load(&c->failed))
                pthread_cond_wait(&c->wake, &c->lock);
        }
    }
    int met = c->round != round;
    pthread_mutex_unlock(&c->lock);
    return met ? 0 : -1;
}

static int abandoned(int rank, const char *what, kimi_err *err)
{
    return kimi_fail(err, KIMI_ERR_STATE, "rank %d: %s abandoned: another rank failed", rank, what);
}

int cuda_comm_allreduce_sum(cuda_comm *c, int rank, float *buf, size_t n, void *stream, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    if (rank < 0 || rank >= c->ranks)
        return kimi_fail(err, KIMI_ERR_STATE, "all-reduce: rank %d of %d", rank, c->ranks);
    if (atomic_load(&c->failed))
        return abandoned(rank, "all-reduce", err);
#ifdef KIMI_HAVE_NCCL
    if (c->nccl) {
        ncclResult_t status = ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->comms[rank], (cudaStream_t)stream);
        if (status != ncclSuccess)
            return kimi_fail(err, KIMI_ERR_IO, "NCCL: all-reduce of %zu floats on rank %d (device %d): %s", n, rank,
                             c->devices[rank], ncclGetErrorString(status));
        return 0;
    }
#endif
    c->bufs.bufs[rank] = buf;
    c->n[rank] = n;
    if (meet(c))
        return abandoned(rank, "all-reduce", err);
    if (rank == 0) {
        c->status = cudaSuccess;
        for (int r = 1; r < c->ranks; r++)
            if (c->n[r] != n)
                c->status = cudaErrorInvalidValue;
        if (!c->status)
            c->status = allreduce_sum_local_cuda(c->bufs, c->ranks, n, stream);
    }
    if (meet(c))
        return abandoned(rank, "all-reduce", err);
    if (c->status == cudaErrorInvalidValue)
        return kimi_fail(err, KIMI_ERR_STATE, "all-reduce: the ranks passed different element counts (rank %d: %zu)",
                         rank, n);
    if (c->status)
        return kimi_fail(err, c->status == cudaErrorMemoryAllocation ? KIMI_ERR_NOMEM : KIMI_ERR_IO,
                         "CUDA: local all-reduce of %zu floats: %s", n, cudaGetErrorString((cudaError_t)c->status));
    return 0;
}

int cuda_comm_gather(cuda_comm *c, int rank, const float *part, int rows, const size_t *col_begin, float *root_out,
                     void *stream, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    if (rank < 0 || rank >= c->ranks || rows < 0 || col_begin[rank + 1] < col_begin[rank])
        return kimi_fail(err, KIMI_ERR_STATE, "gather: rank %d of %d, %d rows", rank, c->ranks, rows);
    if (atomic_load(&c->failed))
        return abandoned(rank, "gather", err);
    size_t count = (size_t)rows * (col_begin[rank + 1] - col_begin[rank]);
    float *block = root_out + (size_t)rows * col_begin[rank];
#ifdef KIMI_HAVE_NCCL
    if (c->nccl) {
        ncclResult_t status = ncclSuccess;
        cudaError_t copied = cudaSuccess;
        if (rank > 0) {
            status = ncclSend(part, count, ncclFloat, 0, c->comms[rank], (cudaStream_t)stream);
        } else {
            copied = cudaMemcpyAsync(block, part, count * sizeof(float), cudaMemcpyDeviceToDevice,
                                     (cudaStream_t)stream);
            status = ncclGroupStart();
            for (int r = 1; r < c->ranks && status == ncclSuccess; r++)
                status = ncclRecv(root_out + (size_t)rows * col_begin[r],
                                  (size_t)rows * (col_begin[r + 1] - col_begin[r]), ncclFloat, r, c->comms[0],
                                  (cudaStream_t)stream);
            ncclResult_t ended = ncclGroupEnd();
            status = status != ncclSuccess ? status : ended;
        }
        if (copied != cudaSuccess)
            return kimi_fail(err, KIMI_ERR_IO, "CUDA: gather on rank 0 (device %d): %s", c->devices[0],
                             cudaGetErrorString(copied));
        if (status != ncclSuccess)
            return kimi_fail(err, KIMI_ERR_IO, "NCCL: gather of %zu floats on rank %d (device %d): %s", count, rank,
                             c->devices[rank], ncclGetErrorString(status));
        return 0;
    }
#endif
    cudaError_t copied = count ? cudaMemcpyAsync(block, part, count * sizeof(float), cudaMemcpyDeviceToDevice,
                                                 (cudaStream_t)stream)
                               : cudaSuccess;
    if (copied != cudaSuccess)
        return kimi_fail(err, KIMI_ERR_IO, "CUDA: gather on rank %d: %s", rank, cudaGetErrorString(copied));
    if (meet(c))
        return abandoned(rank, "gather", err);
    return 0;
}

/* ---- exchanges within groups of ranks (decode context parallelism) ---- */

/* Where slot s of rank r's recv comes from: the send of member s of r's group, at element
 * offset (all-gather: 0; all-to-all: r's member index times n). */
static size_t group_source_offset(int all_to_all, int rank, int group_size, size_t n)
{
    return all_to_all ? (size_t)(rank % group_size) * n : 0;
}

#ifdef KIMI_HAVE_NCCL
/* Rank's slots exchanged with the other members as one NCCL group of sends and receives (its
 * own slot copied on its stream). */
static int nccl_group_exchange(cuda_comm *c, int rank, int group_size, int all_to_all, const float *send, float *recv,
                               size_t n, cudaStream_t stream, const char *what, kimi_err *err)
{
    int first = rank / group_size * group_size, member = rank % group_size;
    cudaError_t copied = cudaMemcpyAsync(recv + (size_t)member * n, send + group_source_offset(all_to_all, rank,
                                                                                                group_size, n),
                                         n * sizeof(float), cudaMemcpyDeviceToDevice, stream);
    if (copied != cudaSuccess)
        return kimi_fail(err, KIMI_ERR_IO, "CUDA: %s on rank %d (device %d): %s", what, rank, c->devices[rank],
                         cudaGetErrorString(copied));
    ncclResult_t status = ncclGroupStart();
    for (int s = 0; s < group_size && status == ncclSuccess; s++) {
        if (s == member)
            continue;
        /* what member s receives from this rank: all-gather, the whole send; all-to-all, slot s */
        status = ncclSend(send + (all_to_all ? (size_t)s * n : 0), n, ncclFloat, first + s, c->comms[rank], stream);
        if (status == ncclSuccess)
            status = ncclRecv(recv + (size_t)s * n, n, ncclFloat, first + s, c->comms[rank], stream);
    }
    ncclResult_t ended = ncclGroupEnd();
    status = status != ncclSuccess ? status : ended;
    if (status != ncclSuccess)
        return kimi_fail(err, KIMI_ERR_IO, "NCCL: %s of %zu floats on rank %d (device %d): %s", what, n, rank,
                         c->devices[rank], ncclGetErrorString(status));
    return 0;
}
#endif

/* Local: the ranks meet; rank 0 enqueues every rank's copies on the shared stream (after every
 * rank's kernels that wrote its send) and the ranks meet again before any enqueues more, so no
 * send is overwritten before it is copied (as the all-reduce). */
static int group_exchange(cuda_comm *c, int rank, int group_size, int all_to_all, const float *send, float *recv,
                          size_t n, void *stream, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    const char *what = all_to_all ? "group all-to-all" : "group all-gather";
    if (rank < 0 || rank >= c->ranks || group_size < 1 || c->ranks % group_size)
        return kimi_fail(err, KIMI_ERR_STATE, "%s: rank %d of %d in groups of %d", what, rank, c->ranks, group_size);
    if (atomic_load(&c->failed))
        return abandoned(rank, what, err);
#ifdef KIMI_HAVE_NCCL
    if (c->nccl)
        return nccl_group_exchange(c, rank, group_size, all_to_all, send, recv, n, (cudaStream_t)stream, what, err);
#endif
    c->group_send[rank] = send;
    c->group_recv[rank] = recv;
    c->n[rank] = n;
    if (meet(c))
        return abandoned(rank, what, err);
    if (rank == 0) {
        c->status = cudaSuccess;
        for (int r = 1; r < c->ranks; r++)
            if (c->n[r] != n)
                c->status = cudaErrorInvalidValue;
        for (int r = 0; r < c->ranks && !c->status; r++)
            for (int s = 0; s < group_size && !c->status; s++) {
                int source = r / group_size * group_size + s;
                c->status = (int)cudaMemcpyAsync(c->group_recv[r] + (size_t)s * n,
                                                 c->group_send[source] +
                                                     group_source_offset(all_to_all, r, group_size, n),
                                                 n * sizeof(float), cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
            }
    }
    if (meet(c))
        return abandoned(rank, what, err);
    if (c->status == cudaErrorInvalidValue)
        return kimi_fail(err, KIMI_ERR_STATE, "%s: the ranks passed different element counts (rank %d: %zu)", what,
                         rank, n);
    if (c->status)
        return kimi_fail(err, KIMI_ERR_IO, "CUDA: local %s of %zu floats: %s", what, n,
                         cudaGetErrorString((cudaError_t)c->status));
    return 0;
}

int cuda_comm_group_all_gather(cuda_comm *c, int rank, int group_size, const float *send, float *recv, size_t n,
                               void *stream, kimi_err *err)
{
    return group_exchange(c, rank, group_size, 0, send, recv, n, stream, err);
}

int cuda_comm_group_all_to_all(cuda_comm *c, int rank, int group_size, const float *send, float *recv, size_t n,
                               void *stream, kimi_err *err)
{
    return group_exchange(c, rank, group_size, 1, send, recv, n, stream, err);
}

int cuda_comm_warm_groups(cuda_comm *c, int group_size, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
#ifdef KIMI_HAVE_NCCL
    if (!c->nccl || group_size < 2)
        return 0;
    /* one all-to-all of one float per pair, every rank from this thread, outside any capture */
    float *buf[MAX_RANKS] = {0};
    int previous = 0;
    cudaError_t cuda = cudaGetDevice(&previous);
    for (int r = 0; r < c->ranks && cuda == cudaSuccess; r++) {
        cuda = cudaSetDevice(c->devices[r]);
        if (cuda == cudaSuccess)
            cuda = cudaMalloc((void **)&buf[r], 2 * (size_t)group_size * sizeof(float));
        if (cuda == cudaSuccess)
            cuda = cudaMemset(buf[r], 0, 2 * (size_t)group_size * sizeof(float));
    }
    ncclResult_t status = ncclSuccess;
    if (cuda == cudaSuccess) {
        status = ncclGroupStart();
        for (int r = 0; r < c->ranks && status == ncclSuccess; r++) {
            int first = r / group_size * group_size;
            cudaSetDevice(c->devices[r]);
            for (int s = 0; s < group_size && status == ncclSuccess; s++) {
                if (first + s == r)
                    continue;
                status = ncclSend(buf[r] + s, 1, ncclFloat, first + s, c->comms[r], NULL);
                if (status == ncclSuccess)
                    status = ncclRecv(buf[r] + group_size + s, 1, ncclFloat, first + s, c->comms[r], NULL);
            }
        }
        ncclResult_t ended = ncclGroupEnd();
        if (status == ncclSuccess)
            status = ended;
    }
    for (int r = 0; r < c->ranks; r++) {
        cudaSetDevice(c->devices[r]);
        cudaError_t done = cudaDeviceSynchronize();
        if (cuda == cudaSuccess)
            cuda = done;
        cudaFree(buf[r]);
    }
    cudaSetDevice(previous);
    if (cuda != cudaSuccess)
        return kimi_fail(err, KIMI_ERR_IO, "NCCL: warming up the exchanges of groups of %d: %s", group_size,
                         cudaGetErrorString(cuda));
    if (status != ncclSuccess)
        return kimi_fail(err, KIMI_ERR_IO, "NCCL: warming up the exchanges of groups of %d: %s", group_size,
                         ncclGetErrorString(status));
#else
    (void)c, (void)group_size;
#endif
    return 0;
}
