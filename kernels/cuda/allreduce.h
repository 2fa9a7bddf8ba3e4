/* allreduce (CUDA): the one-shot all-reduce over peer access, fused with the residual add and the
 * next RMSNorm (engine/backend/cuda_peer.h runs it). Every rank of one process runs on its own
 * device, and every pair of devices maps the other's memory (cudaDeviceEnablePeerAccess), so a
 * kernel stores straight into a peer's memory. One launch per rank and call: the rank pushes its
 * partial into its slot on every device, raises its arrival flag on every device, waits for every
 * peer's flag, then sums the slots of its own device in rank order (the CPU communicator's order:
 * every rank computes the same bits), adds the sum to h and writes x = rmsnorm(h) * weight.
 * The payload stays fp32: partials rounded to bf16 before the exchange (half the bytes) were
 * measured on the emulator (kimi-probe verify, tiny-k25, TP 2 on two devices) at logits max |d|
 * 0.0405 against fp32's 0.00134 (the tolerance is 0.05, at 4 layers of 61) and failed the latent
 * cache check (47 elements beyond 0.004 x rms).
 * Launchers return 0 or a cudaError_t code and never synchronise (graph-capturable). */
#ifndef KIMI_KERNELS_CUDA_ALLREDUCE_H
#define KIMI_KERNELS_CUDA_ALLREDUCE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { PEER_ALLREDUCE_MAX_RANKS = 8 };

/* One rank's view of the exchange (device pointers, each on the device named).
 *   slots[d]: device d's receive area, [2 parities][ranks][max_n] floats; a call of epoch e
 *             writes parity e & 1, so a rank that already runs its next call (which only waits
 *             for this call's flags) never overwrites what a slow peer still reads.
 *   flags[d]: device d's arrival epochs [ranks], by source rank (0 at open).
 *   epoch:    this rank's count of finished calls, on its device (0 at open); the kernel reads
 *             and advances it, so a captured graph replays with the right epoch.
 *   stop:     host-mapped pinned memory; the host writes nonzero when a step fails, and a kernel
 *             waiting for a peer that will never arrive gives up (the step has failed already). */
typedef struct {
    float *slots[PEER_ALLREDUCE_MAX_RANKS];
    unsigned *flags[PEER_ALLREDUCE_MAX_RANKS];
    unsigned *epoch;
    const int *stop;
    int ranks, rank;
    size_t max_n;
} peer_allreduce_view;

/* What follows a sublayer's output y [n] of one token (o_proj's, the MLP's down projection's),
 * run by the last block of the launch that computes y (kernels/cuda/forward.h
 * linear_gemv_residual_cuda, mlp_down_combine_cuda), one launch fewer than
 * peer_allreduce_residual_rmsnorm_cuda after it: with peer.ranks > 0, y is this rank's partial,
 * summed over the ranks as peer_allreduce_residual_rmsnorm_cuda sums it (each block pushes the
 * rows it finishes to every device; the last raises the flags, waits and sums); peer.ranks 0
 * (one rank): y itself. Then h [n] += the sum; weight not NULL: out [n] = rmsnorm(h) * weight;
 * flag not NULL: *flag = max(*flag, code) when any h is not finite. The same bits as
 * peer_allreduce_residual_rmsnorm_cuda, or residual_rmsnorm_flag_cuda at one rank. */
typedef struct {
    peer_allreduce_view peer;
    float *h, *out;
    const float *weight;
    float eps;
    int code;
    int *flag;
} residual_epilogue;

/* partial [rows][n] (this rank's; rows * n <= view->max_n) summed over the ranks; h [rows][n] +=
 * the sum; weight not NULL: out [rows][n] = rmsnorm(h row) * weight (the operations of
 * residual_rmsnorm_cuda, bit for bit); flag not NULL: *flag = max(*flag, code) when any h is NaN
 * or infinite after the add (nonfinite_flag_cuda's check). Every rank calls with the same rows and
 * n, in the same order. */
int peer_allreduce_residual_rmsnorm_cuda(const peer_allreduce_view *view, const float *partial, float *h, float *out,
                                         const float *weight, int rows, int n, float eps, int code, int *flag,
                                         void *stream);

#ifdef __cplusplus
}
#endif

#endif
