/* gemv_core: the inner loop every CUDA matrix-vector kernel shares: the dot product of one
 * 16-byte chunk of a packed weight row (32 NVFP4, 8 BF16/F16 or 4 F32 weights) with the
 * matching float activations, decoded with the helpers the CPU kernels use. NVFP4 chunks give
 * sum((e2m1 * e4m3) * x) without scale_2, which the caller applies once per row, as the CPU's
 * linear_rows does. */
#ifndef KIMI_KERNELS_CUDA_GEMV_CORE_CUH
#define KIMI_KERNELS_CUDA_GEMV_CORE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/half_math.h"
#include "kernels/nvfp4_math.h"
#include "kernels/tensor.h"

static __device__ __forceinline__ int gemv_chunk_elements(weight_format format)
{
    return format == WEIGHT_NVFP4 ? 32 : format == WEIGHT_F32 ? 4 : 8;
}

/* Chunk `chunk` of a row: elements [chunk * E, chunk * E + E), those >= cols are padding.
 * Each weight is decoded once and multiplied into the sums of up to MAXT tokens (token t's
 * activations at xs[t]), products added in element order. */
template <weight_format F, int MAXT>
static __device__ __forceinline__ void gemv_chunk_tokens(uint4 raw, const uint8_t *scales, int chunk,
                                                         const float *const *xs, int tokens, int cols,
                                                         float sums[MAXT])
{
    constexpr int E = F == WEIGHT_NVFP4 ? 32 : F == WEIGHT_F32 ? 4 : 8;
    uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    int first = chunk * E;
    float block_scale[2] = {0.0f, 0.0f};
    if (F == WEIGHT_NVFP4) {
        block_scale[0] = nvfp4_e4m3_to_float(scales[2 * chunk]);
        block_scale[1] = first + 16 < cols ? nvfp4_e4m3_to_float(scales[2 * chunk + 1]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < E; j++) {
        if (first + j >= cols)
            break;
        float w;
        if (F == WEIGHT_NVFP4) {
            uint8_t nibble = (uint8_t)((words[j / 8] >> (4 * (j % 8))) & 15);
            w = nvfp4_e2m1_to_float(nibble) * block_scale[j / 16];
        } else if (F == WEIGHT_F32) {
            w = __uint_as_float(words[j]);
        } else {
            uint16_t bits = (uint16_t)(words[j / 2] >> (16 * (j % 2)));
            w = F == WEIGHT_BF16 ? bf16_bits_to_float(bits) : half_to_float(bits);
        }
#pragma unroll
        for (int t = 0; t < MAXT; t++)
            if (t < tokens)
                sums[t] += w * __ldg(xs[t] + first + j);
    }
}

/* Chunks [c_begin, c_end) stepping by `stride` from c_begin + lane, in order. For one token
 * (decode: a pure memory stream) four loads are issued before their chunks are used, so each
 * lane keeps 64 bytes in flight; several tokens give the loop enough work per load as it is
 * (and unrolling them too would multiply the code for little). */
template <weight_format F, int MAXT>
static __device__ __forceinline__ void gemv_chunks_tokens(const uint8_t *data, const uint8_t *scales, int c_begin,
                                                          int c_end, int lane, int stride, const float *const *xs,
                                                          int tokens, int cols, float sums[MAXT])
{
    const uint4 *row = reinterpret_cast<const uint4 *>(data);
    int c = c_begin + lane;
    for (; MAXT == 1 && c + 3 * stride < c_end; c += 4 * stride) {
        uint4 r0 = __ldg(row + c), r1 = __ldg(row + c + stride);
        uint4 r2 = __ldg(row + c + 2 * stride), r3 = __ldg(row + c + 3 * stride);
        gemv_chunk_tokens<F, MAXT>(r0, scales, c, xs, tokens, cols, sums);
        gemv_chunk_tokens<F, MAXT>(r1, scales, c + stride, xs, tokens, cols, sums);
        gemv_chunk_tokens<F, MAXT>(r2, scales, c + 2 * stride, xs, tokens, cols, sums);
        gemv_chunk_tokens<F, MAXT>(r3, scales, c + 3 * stride, xs, tokens, cols, sums);
    }
    for (; c < c_end; c += stride)
        gemv_chunk_tokens<F, MAXT>(__ldg(row + c), scales, c, xs, tokens, cols, sums);
}

/* Chunks [c_begin, c_end) of row `row` stepping by `stride` from c_begin + lane, any format,
 * for up to MAXT tokens. */
template <int MAXT>
static __device__ __forceinline__ void gemv_row_tokens(const weight_matrix &w, int row, const float *const *xs,
                                                       int tokens, int c_begin, int c_end, int lane, int stride,
                                                       float sums[MAXT])
{
    const uint8_t *data = w.data + (size_t)row * w.data_stride;
    const uint8_t *scales = w.scale ? w.scale + (size_t)row * w.scale_stride : nullptr;
    switch (w.format) {
    case WEIGHT_NVFP4:
        gemv_chunks_tokens<WEIGHT_NVFP4, MAXT>(data, scales, c_begin, c_end, lane, stride, xs, tokens, w.cols, sums);
        break;
    case WEIGHT_BF16:
        gemv_chunks_tokens<WEIGHT_BF16, MAXT>(data, scales, c_begin, c_end, lane, stride, xs, tokens, w.cols, sums);
        break;
    case WEIGHT_F16:
        gemv_chunks_tokens<WEIGHT_F16, MAXT>(data, scales, c_begin, c_end, lane, stride, xs, tokens, w.cols, sums);
        break;
    case WEIGHT_F32:
        gemv_chunks_tokens<WEIGHT_F32, MAXT>(data, scales, c_begin, c_end, lane, stride, xs, tokens, w.cols, sums);
        break;
    }
}

/* One token. */
static __device__ __forceinline__ float gemv_row_partial(const weight_matrix &w, int row, const float *x,
                                                         int c_begin, int c_end, int lane, int stride)
{
    float sum[1] = {0.0f};
    const float *xs[1] = {x};
    gemv_row_tokens<1>(w, row, xs, 1, c_begin, c_end, lane, stride, sum);
    return sum[0];
}

static __device__ __forceinline__ int gemv_row_chunks(const weight_matrix &w)
{
    int e = gemv_chunk_elements(w.format);
    return (w.cols + e - 1) / e;
}

/* Sum over the `width` lanes of a group (width a power of two <= 32, groups aligned). */
static __device__ __forceinline__ float gemv_group_sum(float value, int width)
{
    for (int offset = width / 2; offset > 0; offset /= 2)
        value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
    return value;
}

static __device__ __forceinline__ float gemv_row_scale(const weight_matrix &w)
{
    return w.format == WEIGHT_NVFP4 ? w.scale_2 : 1.0f;
}

/* Lanes per row for rows of `chunks` chunks: 32, or the power of two that covers them. */
static inline int gemv_lanes_per_row(int chunks)
{
    int lanes = 1;
    while (lanes < 32 && lanes < chunks)
        lanes *= 2;
    return lanes;
}

#endif
