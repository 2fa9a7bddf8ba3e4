/* cuda_comm: the tensor-parallel communicator of the CUDA backend. Each rank calls
 * allreduce_sum / gather with its own device buffer, in the call sequence a one-process-per-
 * GPU NCCL communicator takes (every rank, in rank order, once per collective). The "local"
 * communicator serves N ranks living on one device and one stream: it records each rank's
 * buffer and, at the last rank's call, enqueues one kernel that sums the buffers in rank order
 * (the CPU communicator's order) into every one of them. Calls only enqueue work, so they can
 * be captured in a CUDA graph. */
#ifndef KIMI_CUDA_COMM_H
#define KIMI_CUDA_COMM_H

#include <stddef.h>

#include "engine/error.h"

typedef struct cuda_comm cuda_comm;

int cuda_comm_open_local(cuda_comm **out, int ranks, kimi_err *err);
void cuda_comm_close(cuda_comm *c);

/* buf [n] floats in device memory; returns 0 or a cudaError_t code (cudaErrorInvalidValue when
 * ranks call out of order or with different n). */
int cuda_comm_allreduce_sum(cuda_comm *c, int rank, float *buf, size_t n, void *stream);

/* part [rows][part_cols] floats of this rank land in columns [col_offset, col_offset +
 * part_cols) of root_out [rows][root_cols] (rank 0's device buffer, passed by every rank). */
int cuda_comm_gather(cuda_comm *c, int rank, const float *part, int rows, size_t part_cols, float *root_out,
                     size_t root_cols, size_t col_offset, void *stream);

#endif
