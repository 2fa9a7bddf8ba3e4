/* test_cuda_comm: the local communicator's bookkeeping, which needs no device: ranks must call
 * a collective in rank order with one element count (any other sequence is an error and starts
 * over), a gather outside the root buffer is refused, and only the last rank's call enqueues
 * work (on a machine without a device that call reports the missing device instead). */
#include <cuda_runtime_api.h>

#include "engine/cuda_comm.h"
#include "tests/unit/check.h"

int main(void)
{
    kimi_err err = {0};
    cuda_comm *c = NULL;
    CHECK_INT(cuda_comm_open_local(&c, 9, &err), KIMI_ERR_USAGE);
    CHECK_INT(cuda_comm_open_local(&c, 4, &err), 0);
    float a[4], b[4];
    /* in order: ranks 0..2 only record their buffers */
    CHECK_INT(cuda_comm_allreduce_sum(c, 0, a, 4, NULL), 0);
    CHECK_INT(cuda_comm_allreduce_sum(c, 1, b, 4, NULL), 0);
    /* a different count, or a rank out of turn, is refused and the collective starts over */
    CHECK_INT(cuda_comm_allreduce_sum(c, 2, a, 3, NULL), cudaErrorInvalidValue);
    CHECK_INT(cuda_comm_allreduce_sum(c, 1, a, 4, NULL), cudaErrorInvalidValue);
    CHECK_INT(cuda_comm_allreduce_sum(c, 0, a, 4, NULL), 0);
    CHECK_INT(cuda_comm_allreduce_sum(c, 1, b, 4, NULL), 0);
    CHECK_INT(cuda_comm_allreduce_sum(c, 2, a, 4, NULL), 0);
    int devices = 0;
    int have_device = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
    if (have_device) /* never launch on host buffers: end the collective by a call out of turn */
        CHECK_INT(cuda_comm_allreduce_sum(c, 0, a, 4, NULL), cudaErrorInvalidValue);
    else /* the last rank launches the reduction, which reports the missing device */
        CHECK(cuda_comm_allreduce_sum(c, 3, b, 4, NULL) != 0);
    /* after the last rank, rank 0 starts the next collective */
    CHECK_INT(cuda_comm_allreduce_sum(c, 0, a, 4, NULL), 0);
    CHECK_INT(cuda_comm_gather(c, 4, a, 1, 4, b, 8, 0, NULL), cudaErrorInvalidValue);
    CHECK_INT(cuda_comm_gather(c, 1, a, 1, 4, b, 8, 5, NULL), cudaErrorInvalidValue);
    CHECK_INT(cuda_comm_gather(c, 1, a, 0, 4, b, 8, 4, NULL), 0);
    cuda_comm_close(c);
    return check_finish();
}
