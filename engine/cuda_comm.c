/* cuda_comm: the local communicator (all ranks on one device, one stream). */
#include "engine/cuda_comm.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "kernels/cuda/forward.h"

enum { MAX_RANKS = 8 };

struct cuda_comm {
    int ranks;
    int next;                   /* the rank whose call comes next */
    size_t n;                   /* this collective's element count */
    rank_buffers bufs;          /* the buffers recorded so far */
};

int cuda_comm_open_local(cuda_comm **out, int ranks, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    *out = NULL;
    if (ranks < 1 || ranks > MAX_RANKS)
        return kimi_fail(err, KIMI_ERR_USAGE, "tp %d: must be between 1 and %d", ranks, MAX_RANKS);
    cuda_comm *c = calloc(1, sizeof *c);
    if (!c)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the communicator");
    c->ranks = ranks;
    *out = c;
    return 0;
}

void cuda_comm_close(cuda_comm *c)
{
    free(c);
}

int cuda_comm_allreduce_sum(cuda_comm *c, int rank, float *buf, size_t n, void *stream)
{
    if (rank != c->next || (rank > 0 && n != c->n)) {
        c->next = 0;
        return (int)cudaErrorInvalidValue;
    }
    c->n = n;
    c->bufs.bufs[rank] = buf;
    if (rank < c->ranks - 1) {
        c->next = rank + 1;
        return 0;
    }
    c->next = 0;
    return allreduce_sum_local_cuda(c->bufs, c->ranks, n, stream);
}

int cuda_comm_gather(cuda_comm *c, int rank, const float *part, int rows, size_t part_cols, float *root_out,
                     size_t root_cols, size_t col_offset, void *stream)
{
    if (rank < 0 || rank >= c->ranks || rows < 0 || col_offset + part_cols > root_cols)
        return (int)cudaErrorInvalidValue;
    if (rows == 0)
        return 0;
    return (int)cudaMemcpy2DAsync(root_out + col_offset, root_cols * sizeof(float), part, part_cols * sizeof(float),
                                  part_cols * sizeof(float), (size_t)rows, cudaMemcpyDeviceToDevice,
                                  (cudaStream_t)stream);
}
