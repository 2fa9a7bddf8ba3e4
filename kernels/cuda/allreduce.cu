/* allreduce (CUDA): the one-shot all-reduce over peer access with the residual add and RMSNorm
 * in its epilogue (kernels/cuda/allreduce.h). One block per rank and call: T rows of a decode or
 * verify step are a few tens of KB, and one block can wait for its peers without needing any
 * other block of its grid to be resident (a multi-block grid whose blocks wait on each other
 * could deadlock where blocks are not all scheduled at once, as on the CPU emulation).
 *
 * Memory ordering, per call of epoch e (parity p = e & 1), rank r, peer q:
 *   1. every thread of r stores its share of the partial into slot [p][r] of every device
 *      (remote stores into q's memory, over NVLink/PCIe);
 *   2. __syncthreads: all those stores happen before thread 0's next instructions (CTA scope);
 *      thread 0 then runs __threadfence_system (fence.sc.sys, cumulative: the stores it has
 *      observed through the barrier are ordered before what it stores next, at system scope)
 *      and stores e into flags[q][r] with a volatile (st.volatile) store on every device;
 *   3. thread q waits until a volatile load of r's own flags[r][q] reaches e, then runs
 *      __threadfence_system (so no later load of this thread is satisfied before the flag was
 *      seen), and __syncthreads hands that order to the whole block (CTA scope again);
 *   4. the slot loads use __ldcg (L2, the device's coherence point for what peers store into
 *      its memory; never a stale L1 line from the call two epochs ago).
 * The emulator runs blocks as real threads with sequentially consistent fences, so it cannot
 * find a missing fence here (docs/CUDA_EMULATION.md): this reasoning is the check.
 *
 * Why a slot is never overwritten while read: rank q stores into r's slot [p] at its call e + 2
 * only after its call e + 1 saw r's flag reach e + 1, which r raises in its call e + 1, which its
 * stream starts only after its call e (the one reading slot [p]) has ended. Flags only grow, and
 * a peer can be at most one call ahead (it waits for this rank's next flag), so "flag >= e"
 * (compared modulo 2^32) is the arrival test. */
#include <stdint.h>

#include "kernels/cuda/allreduce.h"
#include "kernels/cuda/allreduce_core.cuh"

namespace {

/* A block of kThreads moves and sums the slots (one block has to carry the whole call, so it is as
 * wide as a block gets); the first kPeerNormThreads of them form the sums of squares
 * (kernels/cuda/allreduce_core.cuh). */
constexpr int kThreads = 1024;

/* Steps 1 and 2: this rank's partial [count] into slot [parity][rank] of every device, then its
 * flag raised to epoch on every device. */
__device__ void publish(const peer_allreduce_view &v, const float *partial, size_t count, unsigned epoch)
{
    size_t offset = ((size_t)(epoch & 1u) * (size_t)v.ranks + (size_t)v.rank) * v.max_n;
    bool vectors = count % 4 == 0 && v.max_n % 4 == 0 && ((uintptr_t)partial & 15u) == 0;
    for (int d = 0; d < v.ranks; d++) {
        float *slot = v.slots[d] + offset;
        if (vectors) {
            for (size_t i = threadIdx.x; i < count / 4; i += kThreads)
                ((float4 *)slot)[i] = ((const float4 *)partial)[i];  /* 16-byte stores: PCIe/NVLink writes */
        } else {
            for (size_t i = threadIdx.x; i < count; i += kThreads)
                slot[i] = partial[i];
        }
    }
    __syncthreads();
    peer_raise_flags(v, epoch);
}

__global__ void __launch_bounds__(kThreads) peer_allreduce_norm_kernel(peer_allreduce_view v, const float *partial,
                                                                       float *h, float *out, const float *weight,
                                                                       int rows, int n, float eps, int code, int *flag)
{
    /* every thread reads the epoch before the barriers below; thread 0 advances it at the end */
    unsigned epoch = peer_next_epoch(v);
    publish(v, partial, (size_t)rows * (size_t)n, epoch);
    if (peer_wait_for_peers(v, epoch))
        return;     /* the step failed elsewhere; its results are not used */
    const float *slots = v.slots[v.rank] + (size_t)(epoch & 1u) * (size_t)v.ranks * v.max_n;
    for (int r = 0; r < rows; r++)
        peer_residual_norm_row(&v, slots + (size_t)r * n, nullptr, h + (size_t)r * n,
                               out ? out + (size_t)r * n : nullptr, weight, n, eps, code, flag);
    if (threadIdx.x == 0)
        *v.epoch = epoch;
}

} // namespace

extern "C" int peer_allreduce_residual_rmsnorm_cuda(const peer_allreduce_view *view, const float *partial, float *h,
                                                    float *out, const float *weight, int rows, int n, float eps,
                                                    int code, int *flag, void *stream)
{
    if (rows <= 0 || n <= 0 || view->ranks < 1 || view->ranks > PEER_ALLREDUCE_MAX_RANKS ||
        (size_t)rows * (size_t)n > view->max_n)
        return (int)cudaErrorInvalidValue;
    peer_allreduce_norm_kernel<<<1, kThreads, 0, (cudaStream_t)stream>>>(*view, partial, h, out, weight, rows, n, eps,
                                                                         code, flag);
    return (int)cudaGetLastError();
}
