/* cuda_comm: the tensor-parallel communicator of the CUDA backend: one interface, two
 * implementations. Each rank's thread calls allreduce_sum / gather with its own device buffer
 * and stream; every rank makes the same collectives in the same order.
 *   - local: every rank on one device, sharing one stream (how TP 2/8 run on one GPU). A
 *     collective is a meeting of the rank threads on the host: once all have arrived, rank 0
 *     enqueues one kernel that sums the buffers in rank order (the CPU communicator's order)
 *     into every one of them, and no rank goes on before that launch. The shared stream then
 *     runs every rank's kernels before the sum and the sum before any rank's next kernel.
 *   - NCCL: each rank its own device, one clique made in this process (ncclCommInitAll);
 *     ncclAllReduce in place, the gather as sends to rank 0.
 *   - peer: NCCL, plus the one-shot all-reduce over peer access (engine/backend/cuda_peer.h) for
 *     the calls small enough for it (decode and verify steps), fused with the residual add and
 *     the next RMSNorm (cuda_comm_allreduce_norm); NCCL keeps the larger all-reduces, the gather
 *     and the group exchanges.
 * Calls only enqueue device work (plus the local meeting), so a stream capture records them. */
#ifndef KIMI_CUDA_COMM_H
#define KIMI_CUDA_COMM_H

#include <stddef.h>

#include "engine/base/error.h"
#include "kernels/cuda/allreduce.h"

typedef struct cuda_comm cuda_comm;

/* ranks (1..8) threads on one device. */
int cuda_comm_open_local(cuda_comm **out, int ranks, kimi_err *err);
/* Rank r on devices[r] (distinct). A build without NCCL answers KIMI_ERR_USAGE saying so; a
 * failed initialisation names the devices. NCCL connects lazily: the caller runs each kind and
 * size of collective once outside any stream capture before capturing one (backend_cuda.c
 * rank_warm_up_enqueue). */
int cuda_comm_open_nccl(cuda_comm **out, int ranks, const int *devices, kimi_err *err);
/* NCCL as cuda_comm_open_nccl, and the peer all-reduce for calls of up to max_n floats, checked
 * at once on every rank (cuda_peer_self_check). When the devices cannot map each other or the
 * check fails: insist (KIMI_CUDA_COMM=peer) fails the open with that error; otherwise the
 * communicator stays NCCL alone and cuda_comm_describe says why. */
int cuda_comm_open_peer(cuda_comm **out, int ranks, const int *devices, size_t max_n, int insist, kimi_err *err);
void cuda_comm_close(cuda_comm *c);
/* Which communicator runs the all-reduces, in a few words for the user ("NCCL", "peer all-reduce
 * (NCCL for the rest)", "NCCL (peer all-reduce off: <why>)", "local"). */
const char *cuda_comm_describe(const cuda_comm *c);
int cuda_comm_is_nccl(const cuda_comm *c);

/* buf [n] floats on the rank's device; on completion (in stream order) every rank's buf holds
 * the sum over ranks. Returns 0 or a KIMI_ERR_* with err naming the rank. */
int cuda_comm_allreduce_sum(cuda_comm *c, int rank, float *buf, size_t n, void *stream, kimi_err *err);

/* part [rows][cols_r] floats of this rank (cols_r = col_begin[rank + 1] - col_begin[rank];
 * col_begin [ranks + 1], the same on every rank) lands as one block at root_out + rows *
 * col_begin[rank]: root_out, rank 0's device buffer [rows * col_begin[ranks]], holds the blocks
 * in rank order (NCCL reads root_out on rank 0 only). Returns once every rank's part is
 * enqueued ahead of whatever rank 0 enqueues next. */
/* True when cuda_comm_allreduce_norm takes a call of n floats (the peer communicator, n within
 * what it was opened for); the same answer on every rank. */
int cuda_comm_fuses_norm(const cuda_comm *c, size_t n);
/* The peer all-reduce of partial [rows][n] fused with its consumers: h += the sum over ranks, then
 * with a weight x = rmsnorm(h) * weight, and flag (not NULL) raised to code when h is not finite
 * (residual_rmsnorm_flag_cuda's contract); one launch on stream. Returns 0 or a KIMI_ERR_*. */
int cuda_comm_allreduce_norm(cuda_comm *c, int rank, const float *partial, float *h, float *x, const float *weight,
                             int rows, int n, float eps, int code, int *flag, void *stream, kimi_err *err);

/* For a launch that runs cuda_comm_allreduce_norm's work of n floats itself (a decode kernel's
 * residual epilogue, kernels/cuda/allreduce.h): rank's view of the peer exchange, where
 * cuda_comm_fuses_norm(c, n). 0, or a KIMI_ERR_* as cuda_comm_allreduce_norm's. */
int cuda_comm_peer_view(cuda_comm *c, int rank, size_t n, peer_allreduce_view *view, kimi_err *err);

int cuda_comm_gather(cuda_comm *c, int rank, const float *part, int rows, const size_t *col_begin, float *root_out,
                     void *stream, kimi_err *err);

/* Decode context parallelism: groups of group_size consecutive ranks (group_size divides the
 * ranks; every rank calls, each with the same group_size and n), as tp_comm_group_*: all-gather,
 * recv [group_size][n] receives slot s = the send [n] of member s of this rank's group;
 * all-to-all, send [group_size][n] holds slot j for member j and recv slot s receives what member
 * s sent this rank. Device buffers of the rank; recv must not alias send. Local: the copies are
 * enqueued on the shared stream between two meetings; NCCL: one group of sends and receives
 * with the other members (the rank's own slot a device copy). Returns 0 or a KIMI_ERR_*. */
int cuda_comm_group_all_gather(cuda_comm *c, int rank, int group_size, const float *send, float *recv, size_t n,
                               void *stream, kimi_err *err);
int cuda_comm_group_all_to_all(cuda_comm *c, int rank, int group_size, const float *send, float *recv, size_t n,
                               void *stream, kimi_err *err);
/* NCCL connects a pair of ranks lazily at their first send/receive, which must not be inside a
 * stream capture: one exchange of one float between every pair of each group here, outside any
 * capture (nothing to do for the local communicator or groups of one). */
int cuda_comm_warm_groups(cuda_comm *c, int group_size, kimi_err *err);

/* A rank that cannot go on says so here, so that the others do not wait for it: from now on
 * every collective fails at once (nothing more is enqueued), and peer all-reduces already on the
 * devices stop waiting for their peers (cuda_peer_stop; the peer exchange stays off). */
void cuda_comm_fail(cuda_comm *c);
/* NCCL: 0 while rank's communicator is healthy, else KIMI_ERR_IO with err saying what NCCL
 * reports (ncclCommGetAsyncError: a peer or a device lost, a transport fault); the local
 * communicator has nothing to report (0). Made for polling while the rank's collectives run. */
int cuda_comm_check(cuda_comm *c, int rank, kimi_err *err);
/* After a failed step, with no rank inside a collective: the local communicator is ready
 * again (0); NCCL communicators are aborted, which ends collectives already queued on the
 * devices that wait for the failed rank, and stay unusable (KIMI_ERR_STATE). */
int cuda_comm_recover(cuda_comm *c, kimi_err *err);

#endif
