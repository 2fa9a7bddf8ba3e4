/* allreduce_core: the device side of the one-shot peer all-reduce with the residual add and
 * RMSNorm in its epilogue (kernels/cuda/allreduce.h), shared by its own kernel (allreduce.cu)
 * and by the decode kernels that run it in their last block (residual_epilogue: o_proj's GEMV,
 * the MLPs' down projection). The memory-ordering argument is allreduce.cu's; a fused kernel
 * pushes its rows as its blocks finish them, each pushing thread fencing at system scope before
 * its block counts itself done, so the last block's flags come after every block's stores. */
#ifndef KIMI_KERNELS_CUDA_ALLREDUCE_CORE_CUH
#define KIMI_KERNELS_CUDA_ALLREDUCE_CORE_CUH

#include <cuda_runtime.h>
#include <math.h>

#include "kernels/cuda/allreduce.h"
#include "kernels/cuda/norm_core.cuh"
#include "kernels/forward_math.h"

/* The threads that form the sums of squares, as residual_rmsnorm_kernel's block of 256 does
 * (kernels/cuda/norm_core.cuh), so every fused variant has the same bits; blocks are at least
 * this wide. */
constexpr int kPeerNormThreads = 256;

/* This call's epoch: one more than the rank's finished calls (read by every block before it
 * counts itself done, and again by the last block; that block advances it at the end). */
static __device__ __forceinline__ unsigned peer_next_epoch(const peer_allreduce_view &v)
{
    return *v.epoch + 1u;
}

/* Element i of this rank's partial into slot [parity][rank] of every device (one thread). */
static __device__ __forceinline__ void peer_push_value(const peer_allreduce_view &v, unsigned epoch, size_t i,
                                                       float value)
{
    size_t offset = ((size_t)(epoch & 1u) * (size_t)v.ranks + (size_t)v.rank) * v.max_n + i;
    for (int d = 0; d < v.ranks; d++)
        v.slots[d][offset] = value;
}

/* Elements [first, first + count) of this rank's partial (src: element first) into its slot of
 * every device, by the whole block (consecutive threads, consecutive elements). */
static __device__ __forceinline__ void peer_push_range(const peer_allreduce_view &v, unsigned epoch, const float *src,
                                                       size_t first, int count)
{
    size_t offset = ((size_t)(epoch & 1u) * (size_t)v.ranks + (size_t)v.rank) * v.max_n + first;
    for (int d = 0; d < v.ranks; d++)
        for (int i = threadIdx.x; i < count; i += blockDim.x)
            v.slots[d][offset + i] = src[i];
}

/* Every store of this block into the slots is done (a __syncthreads before, or each storing
 * thread's own __threadfence_system before a barrier): thread 0 raises this rank's flag to epoch
 * on every device, then the block meets again (on the emulator a waiting thread holds its worker
 * until the wait ends, so the flags are up before any thread of this block waits). */
static __device__ __forceinline__ void peer_raise_flags(const peer_allreduce_view &v, unsigned epoch)
{
    if (threadIdx.x == 0) {
        __threadfence_system();
        for (int d = 0; d < v.ranks; d++)
            ((volatile unsigned *)v.flags[d])[v.rank] = epoch;
    }
    __syncthreads();
}

/* Thread q < ranks waits for peer q's flag to reach epoch, or for the host's stop. True in every
 * thread when the host stopped the wait. */
static __device__ __forceinline__ bool peer_wait_for_peers(const peer_allreduce_view &v, unsigned epoch)
{
    int stopped = 0;
    if ((int)threadIdx.x < v.ranks && (int)threadIdx.x != v.rank) {
        const volatile unsigned *arrived = (const volatile unsigned *)v.flags[v.rank] + threadIdx.x;
        const volatile int *stop = (const volatile int *)v.stop;
        /* the stop word is host memory, a PCIe round trip away: read every 64th turn only, so a
         * flag that arrives is seen within a local load and a short sleep */
        for (unsigned turn = 1; (int)(*arrived - epoch) < 0; turn++) {
            if (turn % 64 == 0 && *stop) {
                stopped = 1;
                break;
            }
            __nanosleep(100);
        }
        __threadfence_system();
    }
    return __syncthreads_or(stopped) != 0;
}

/* Row r of rows [rows][n]: h += `add` (the slots of every rank in rank order, or one rank's row
 * `own`), then with a weight out = rmsnorm(h) * weight; flag not NULL: *flag = max(*flag, code)
 * when h is not finite. The whole block (at least kPeerNormThreads threads). */
static inline __device__ void peer_residual_norm_row(const peer_allreduce_view *v, const float *slots,
                                                     const float *own, float *row, float *dst, const float *weight,
                                                     int n, float eps, int code, int *flag)
{
    int bad = 0;
    bool vectors = n % 4 == 0 && ((uintptr_t)row & 15u) == 0 &&
                   (v ? v->max_n % 4 == 0 && ((uintptr_t)slots & 15u) == 0 : ((uintptr_t)own & 15u) == 0);
    /* h += the slots summed in rank order, every element on its own: the order of the elements
     * does not matter, only that of the ranks */
    if (vectors) {
        for (int j = threadIdx.x; j < n / 4; j += blockDim.x) {
            float4 sum, value = ((const float4 *)row)[j];
            if (v) {
                sum = __ldcg((const float4 *)slots + j);
                for (int q = 1; q < v->ranks; q++) {
                    float4 add = __ldcg((const float4 *)(slots + (size_t)q * v->max_n) + j);
                    sum.x += add.x, sum.y += add.y, sum.z += add.z, sum.w += add.w;
                }
            } else {
                sum = __ldcg((const float4 *)own + j);
            }
            value.x += sum.x, value.y += sum.y, value.z += sum.z, value.w += sum.w;
            ((float4 *)row)[j] = value;
            bad |= !isfinite(value.x) | !isfinite(value.y) | !isfinite(value.z) | !isfinite(value.w);
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            float sum;
            if (v) {
                sum = __ldcg(slots + i);
                for (int q = 1; q < v->ranks; q++)
                    sum += __ldcg(slots + (size_t)q * v->max_n + i);
            } else {
                sum = __ldcg(own + i);
            }
            float value = row[i] + sum;
            row[i] = value;
            bad |= !isfinite(value);
        }
    }
    /* the barrier also makes every thread's h visible to the squares below */
    if (__syncthreads_or(bad) && flag && threadIdx.x == 0)
        atomicMax(flag, code);
    if (!weight)
        return;
    /* the other threads' 0.0f terms leave the warp totals' sum unchanged */
    float squares = 0.0f;
    if (threadIdx.x < kPeerNormThreads)
        for (int i = threadIdx.x; i < n; i += kPeerNormThreads)
            squares += row[i] * row[i];
    float inverse_rms = norm_block_inverse_rms(squares, n, eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        dst[i] = rmsnorm_element(row[i], inverse_rms, weight[i]);
}

/* The last block's part of a residual_epilogue of one token (y [n]: this rank's output, every
 * element already pushed to every device when e.peer.ranks > 0): flags, waits, the sum, the
 * residual add and the norm, and the epoch advanced. The whole block. Not inlined: in a GEMV
 * held to 64 registers (4 blocks a multiprocessor) the inlined epilogue made sm_100's ptxas
 * spill; a kernel passes e as a __grid_constant__ parameter, so the call copies nothing. */
__attribute__((noinline)) static inline __device__ void residual_epilogue_finish(const residual_epilogue &e,
                                                                                 const float *y, int n)
{
    if (e.peer.ranks == 0) {
        peer_residual_norm_row(nullptr, nullptr, y, e.h, e.out, e.weight, n, e.eps, e.code, e.flag);
        return;
    }
    unsigned epoch = peer_next_epoch(e.peer);
    peer_raise_flags(e.peer, epoch);
    if (peer_wait_for_peers(e.peer, epoch))
        return; /* the step failed elsewhere; its results are not used */
    const float *slots = e.peer.slots[e.peer.rank] + (size_t)(epoch & 1u) * (size_t)e.peer.ranks * e.peer.max_n;
    peer_residual_norm_row(&e.peer, slots, nullptr, e.h, e.out, e.weight, n, e.eps, e.code, e.flag);
    if (threadIdx.x == 0)
        *e.peer.epoch = epoch;
}

#endif
