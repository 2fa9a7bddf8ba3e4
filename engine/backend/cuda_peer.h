/* cuda_peer: the one-shot all-reduce over peer access (kernels/cuda/allreduce.h), fused with the
 * residual add and the next RMSNorm: one launch per rank where NCCL's all-reduce and the norm
 * kernel took two, and no NCCL protocol on the way (NCCL: ~24 us per 28 KB call over PCIe; a
 * one-shot push ~8-12 us). kimi-chat runs every rank in one process, rank r on device r, so once
 * every pair of devices has peer access enabled a raw device pointer works on every device: no
 * IPC handles. The receive slots, flags and epochs live in device memory and the kernel advances
 * the epoch itself, so captured graphs replay it; a host-mapped stop word ends the waits of a
 * failed step (cuda_peer_stop). Used by cuda_comm (the "peer" communicator); calls from each
 * rank's thread on its own stream, every rank the same calls in the same order. */
#ifndef KIMI_CUDA_PEER_H
#define KIMI_CUDA_PEER_H

#include <stddef.h>

#include "engine/base/error.h"
#include "kernels/cuda/allreduce.h"

typedef struct cuda_peer cuda_peer;

/* Ranks (1..8) on devices[r] (distinct), calls of up to max_n floats. Peer access enabled for
 * every ordered pair; KIMI_ERR_IO naming the pair when two devices cannot map each other, or
 * the CUDA call that failed. */
int cuda_peer_open(cuda_peer **out, int ranks, const int *devices, size_t max_n, kimi_err *err);
void cuda_peer_close(cuda_peer *p);
size_t cuda_peer_max_n(const cuda_peer *p);

/* One call of a known pattern on every rank at once, outside any capture, compared with the sums
 * computed here (a box whose peer writes do not arrive, or arrive late, must not run on wrong
 * sums): 0, or KIMI_ERR_IO saying which rank saw what (or that the call did not end within
 * seconds: its waits are then stopped and the exchange stays unusable). Every rank's epoch
 * advances by one, as by any call. */
int cuda_peer_self_check(cuda_peer *p, kimi_err *err);

/* This rank's partial [rows][n] summed over the ranks into h [rows][n] (h += sum), then, with a
 * weight, out = rmsnorm(h) * weight per row; flag not NULL: *flag = max(*flag, code) when any h
 * is not finite (kernels/cuda/allreduce.h). rows * n <= max_n. Enqueued on stream. */
int cuda_peer_allreduce_norm(cuda_peer *p, int rank, const float *partial, float *h, float *out, const float *weight,
                             int rows, int n, float eps, int code, int *flag, void *stream, kimi_err *err);

/* Rank's view of the exchange for a kernel that runs the all-reduce of n floats in its own
 * epilogue (kernels/cuda/allreduce.h residual_epilogue): 0 with *view filled, or KIMI_ERR_STATE
 * naming the rank when n is beyond max_n. */
int cuda_peer_view(const cuda_peer *p, int rank, size_t n, peer_allreduce_view *view, kimi_err *err);

/* A step failed: every kernel waiting for a peer (now or later) stops waiting and ends without
 * writing its results. Permanent: the exchange is unusable afterwards. */
void cuda_peer_stop(cuda_peer *p);

#endif
