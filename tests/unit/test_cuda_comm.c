/* test_cuda_comm: the communicator with real rank threads. The local one: an all-reduce sums
 * every rank's buffer in rank order into all of them (checked on a device when one exists; on
 * a machine without one, the launch failure reaches every rank instead of a hang), ranks that
 * pass different counts all fail, a rank that gives up (cuda_comm_fail) releases the others
 * with an error, and after cuda_comm_recover the ranks meet again. NCCL: opening it names the
 * devices when it cannot be made, and a build without NCCL (this file built with
 * KIMI_TEST_NO_NCCL, cuda_comm.c compiled without it) says how to run instead. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/cuda_comm.h"
#include "tests/unit/check.h"

enum { RANKS = 4, N = 1000 };

typedef enum { SUM, UNEQUAL_COUNTS, RANK_2_FAILS, EMPTY_GATHER } scenario;

typedef struct {
    cuda_comm *comm;
    scenario what;
    int rank;
    float *buf;                 /* device [N] when a device exists, else host */
    int rc;
    kimi_err err;
} rank_call;

static void *rank_main(void *arg)
{
    rank_call *call = arg;
    size_t col_begin[RANKS + 1] = {0, 0, 0, 0, 0};
    switch (call->what) {
    case SUM:
        call->rc = cuda_comm_allreduce_sum(call->comm, call->rank, call->buf, N, NULL, &call->err);
        break;
    case UNEQUAL_COUNTS:
        call->rc = cuda_comm_allreduce_sum(call->comm, call->rank, call->buf, call->rank == 1 ? N - 1 : N, NULL,
                                           &call->err);
        break;
    case RANK_2_FAILS:
        if (call->rank == 2) {
            cuda_comm_fail(call->comm);
            call->rc = 0;
        } else {
            call->rc = cuda_comm_allreduce_sum(call->comm, call->rank, call->buf, N, NULL, &call->err);
        }
        break;
    case EMPTY_GATHER:
        call->rc = cuda_comm_gather(call->comm, call->rank, call->buf, 0, col_begin, call->buf, NULL, &call->err);
        break;
    }
    return NULL;
}

static void run_ranks(cuda_comm *comm, scenario what, float **bufs, rank_call *calls)
{
    pthread_t threads[RANKS];
    for (int r = 0; r < RANKS; r++) {
        calls[r] = (rank_call){comm, what, r, bufs[r], -1, {0}};
        CHECK_INT(pthread_create(&threads[r], NULL, rank_main, &calls[r]), 0);
    }
    for (int r = 0; r < RANKS; r++)
        pthread_join(threads[r], NULL);
}

static void check_local(int have_device)
{
    kimi_err err = {0};
    cuda_comm *comm = NULL;
    CHECK_INT(cuda_comm_open_local(&comm, 9, &err), KIMI_ERR_USAGE);
    CHECK_INT(cuda_comm_open_local(&comm, RANKS, &err), 0);
    CHECK(!cuda_comm_is_nccl(comm));
    for (int r = 0; r < RANKS; r++)     /* the local communicator has no asynchronous faults */
        CHECK_INT(cuda_comm_check(comm, r, &err), 0);
    static float host[RANKS][N];
    float *bufs[RANKS];
    for (int r = 0; r < RANKS; r++) {
        for (int i = 0; i < N; i++)
            host[r][i] = (float)(r + 1) * 0.1f + (float)i * 1e-3f * (float)(r % 3);
        bufs[r] = host[r];
        if (have_device) {
            CHECK_INT(cudaMalloc((void **)&bufs[r], N * sizeof(float)), cudaSuccess);
            CHECK_INT(cudaMemcpy(bufs[r], host[r], N * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
        }
    }
    rank_call calls[RANKS];

    run_ranks(comm, SUM, bufs, calls);
    if (have_device) {
        CHECK_INT(cudaDeviceSynchronize(), cudaSuccess);
        static float got[N];
        for (int r = 0; r < RANKS; r++) {
            CHECK_MSG(calls[r].rc == 0, "rank %d: %s", r, calls[r].err.msg);
            CHECK_INT(cudaMemcpy(got, bufs[r], sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
            int exact = 1;
            for (int i = 0; i < N; i++) {
                float want = host[0][i];
                for (int q = 1; q < RANKS; q++)
                    want += host[q][i];     /* rank order: the bits the CPU communicator gives */
                exact &= !memcmp(&want, &got[i], sizeof want);
            }
            CHECK_MSG(exact, "rank %d: the sum differs from the rank-order sum", r);
        }
    } else {
        /* rank 0's launch fails (no device): every rank hears of it */
        for (int r = 0; r < RANKS; r++)
            CHECK_MSG(calls[r].rc != 0 && strstr(calls[r].err.msg, "CUDA"), "rank %d: rc %d '%s'", r, calls[r].rc,
                      calls[r].err.msg);
    }

    run_ranks(comm, UNEQUAL_COUNTS, bufs, calls);
    for (int r = 0; r < RANKS; r++)
        CHECK_MSG(calls[r].rc == KIMI_ERR_STATE && strstr(calls[r].err.msg, "different element counts"),
                  "rank %d: rc %d '%s'", r, calls[r].rc, calls[r].err.msg);

    run_ranks(comm, RANK_2_FAILS, bufs, calls);
    for (int r = 0; r < RANKS; r++)
        if (r != 2)
            CHECK_MSG(calls[r].rc == KIMI_ERR_STATE && strstr(calls[r].err.msg, "abandoned: another rank failed"),
                      "rank %d: rc %d '%s'", r, calls[r].rc, calls[r].err.msg);
    /* still failed until recovered; then the ranks meet again */
    CHECK_INT(cuda_comm_allreduce_sum(comm, 0, bufs[0], N, NULL, &err), KIMI_ERR_STATE);
    CHECK_INT(cuda_comm_recover(comm, &err), 0);
    run_ranks(comm, EMPTY_GATHER, bufs, calls);
    for (int r = 0; r < RANKS; r++)
        CHECK_MSG(calls[r].rc == 0, "rank %d: %s", r, calls[r].err.msg);

    size_t col_begin[RANKS + 1] = {0, 4, 8, 12, 16};
    CHECK_INT(cuda_comm_gather(comm, RANKS, bufs[0], 1, col_begin, bufs[0], NULL, &err), KIMI_ERR_STATE);
    CHECK_INT(cuda_comm_gather(comm, 0, bufs[0], -1, col_begin, bufs[0], NULL, &err), KIMI_ERR_STATE);
    cuda_comm_close(comm);
    if (have_device)
        for (int r = 0; r < RANKS; r++)
            cudaFree(bufs[r]);
}

static void check_nccl_open(int n_visible)
{
    kimi_err err = {0};
    cuda_comm *comm = NULL;
    int devices[2] = {0, 1};
    int rc = cuda_comm_open_nccl(&comm, 2, devices, &err);
#ifdef KIMI_TEST_NO_NCCL
    (void)n_visible;
    CHECK_INT(rc, KIMI_ERR_USAGE);
    CHECK_STR(err.msg, "this build has no NCCL; --devices with one device runs all ranks locally");
    CHECK(comm == NULL);
#else
    if (n_visible >= 2) {
        CHECK_MSG(rc == 0, "two visible devices: %s", err.msg);
        CHECK(comm && cuda_comm_is_nccl(comm));
        cuda_comm_close(comm);
    } else {
        /* device 1 does not exist here: the error names the devices */
        CHECK_MSG(rc != 0 && (strstr(err.msg, "devices 0,1") || strstr(err.msg, "no NCCL")), "rc %d: %s", rc,
                  err.msg);
        CHECK(comm == NULL);
    }
#endif
}

int main(void)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess)
        devices = 0;
    check_local(devices > 0);
    check_nccl_open(devices);
    return check_finish();
}
