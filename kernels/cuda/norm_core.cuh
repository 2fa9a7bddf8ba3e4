/* norm_core: the RMSNorm of one row by one block, in fp32, for every CUDA kernel that normalises
 * (ops.cu's norms, the q_a/kv_a tail, and any kernel that fuses a norm into its epilogue).
 *
 * The sum of squares is taken in fp32 in two levels: each thread's strided elements in order,
 * then a butterfly over the warp, then the warp totals in warp order (every thread gets the same
 * bits). fp64 runs at 1/64 of fp32 on sm_120 (and the old double sum cost a double division and
 * square root in every thread). All terms are positive, so the fp32 sum's relative error is at
 * most ~(n / blockDim + 5 + warps) * 2^-24 (~2.4e-6 at 7168 wide on 256 threads, ~1e-7 seen
 * on hostile rows: test_gpu_kernels' check_rmsnorm_hostile), half of it in the scale; the CPU
 * sums in double (kernels/cpu/elementwise.c). The squares overflow fp32 only for |x| > 1.8e19,
 * activations no working model produces: the scale is then 0 where the CPU's is finite. */
#ifndef KIMI_KERNELS_CUDA_NORM_CORE_CUH
#define KIMI_KERNELS_CUDA_NORM_CORE_CUH

#include <cuda_runtime.h>

#include "kernels/forward_math.h"

/* The sum of every thread's value over the block (blockDim.x a multiple of 32, at most 1024);
 * every thread gets the same total. Called by all threads of the block (it synchronises). */
static __device__ __forceinline__ float norm_block_sum(float value)
{
    __shared__ float warp_total[32];
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads(); /* a previous call's readers are done with warp_total */
    if (lane == 0)
        warp_total[warp] = value;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < (int)blockDim.x / 32; i++)
        total += warp_total[i];
    return total;
}

/* 1 / sqrt(mean(x^2) + eps) of an n-wide row from this thread's part of its sum of squares
 * (squares: the sum of x^2 over the elements this thread visited), by the whole block. */
static __device__ __forceinline__ float norm_block_inverse_rms(float squares, int n, float eps)
{
    float total = norm_block_sum(squares);
    return 1.0f / sqrtf(total / (float)n + eps);
}

/* dst = rmsnorm(row) * weight by the whole block (dst may alias row); the elements as the CPU's
 * (rmsnorm_element). */
static __device__ __forceinline__ void norm_block_rmsnorm(float *dst, const float *row, const float *weight, int n,
                                                          float eps)
{
    float squares = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        squares += row[i] * row[i];
    float inverse_rms = norm_block_inverse_rms(squares, n, eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        dst[i] = rmsnorm_element(row[i], inverse_rms, weight[i]);
}

#endif
