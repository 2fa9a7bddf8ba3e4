/* gemv_core: the inner loop every CUDA matrix-vector kernel shares: the dot product of one
 * 16-byte chunk of a packed weight row (32 NVFP4, 8 BF16/F16 or 4 F32 weights) with the
 * matching float activations, decoded with the helpers the CPU kernels use. NVFP4 chunks give
 * sum((e2m1 * e4m3) * x) without scale_2, which the caller applies once per row, as the CPU's
 * linear_rows does. */
#ifndef KIMI_KERNELS_CUDA_GEMV_CORE_CUH
#define KIMI_KERNELS_CUDA_GEMV_CORE_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
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

/* Lanes per row for rows of `chunks` chunks: 32, or the smallest power of two that leaves each
 * lane at least four chunks (64 bytes of weights a lane, two in flight while two are used), so a
 * short row (an expert's down slice: 8 chunks) still streams rather than waiting on one load. */
static inline int gemv_lanes_per_row(int chunks)
{
    int lanes = 1;
    while (lanes < 32 && 4 * lanes < chunks)
        lanes *= 2;
    return lanes;
}

/* ---- The staged GEMV: activations in shared memory ----
 * A block's rows share their activations, so the block copies each token's K range into shared
 * memory once, in tiles, with 16-byte loads, and the lanes read their chunk's activations from
 * there as 16-byte loads too (a chunk's floats are contiguous; the XOR swizzle of
 * gemv_stage_slot keeps the eight lanes of a quarter warp on distinct banks). Weights stream as
 * before, a row's 16-byte chunks over its lanes, each lane's NVFP4 scale pair fetched with its
 * chunk as one 2-byte load, two chunks a lane loaded ahead of the two in use. Products are
 * explicit FMAs in a fixed order that depends neither on the tiling nor on the token count, so
 * a chunk gives token t the same bits whatever the launch (linear_gemv_tokens_exact_cuda). */

/* The float4 slot of a tile's float4 number v, chunks of `vpc` float4s (8 NVFP4, 2 BF16/F16,
 * 1 F32). */
static __device__ __forceinline__ int gemv_stage_slot(int v, int vpc)
{
    return v ^ ((v >> 3) & (vpc - 1));
}

/* The shared memory one token's staging needs at least: a tile of 32 NVFP4 chunks. */
constexpr int kGemvStageFloatsPerToken = 1024;

/* Columns [col0, col0 + ncols) of each token's activations into stage (token t's tile at
 * t * tile_floats), the whole block taking part. */
template <int MAXT>
static __device__ __forceinline__ void gemv_stage_tile(float *stage, int tile_floats, const float *const *xs,
                                                       int tokens, int col0, int ncols, int vpc)
{
    int vectors = (ncols + 3) / 4;
#pragma unroll
    for (int t = 0; t < MAXT; t++) {
        if (t >= tokens)
            break;
        const float *src = xs[t] + col0;
        float4 *dst = reinterpret_cast<float4 *>(stage + (size_t)t * tile_floats);
        bool aligned = (reinterpret_cast<uintptr_t>(src) & 15) == 0;
        for (int v = threadIdx.x; v < vectors; v += blockDim.x) {
            float4 value;
            if (aligned && 4 * v + 4 <= ncols) {
                value = __ldg(reinterpret_cast<const float4 *>(src) + v);
            } else { /* a token's row at an odd float offset, or the last columns: rare, plain loads */
                value.x = src[4 * v];
                value.y = 4 * v + 1 < ncols ? src[4 * v + 1] : 0.0f;
                value.z = 4 * v + 2 < ncols ? src[4 * v + 2] : 0.0f;
                value.w = 4 * v + 3 < ncols ? src[4 * v + 3] : 0.0f;
            }
            dst[gemv_stage_slot(v, vpc)] = value;
        }
    }
}

/* A 16-byte weight chunk and its NVFP4 scale pair (byte 0 the first 16 weights' scale). */
struct gemv_loaded_chunk {
    uint4 raw;
    unsigned scales;
};

/* The eight weights of one 32-bit word of E2M1 codes (element j at bits 4j..4j+3) as floats
 * times 2^-14: each code is moved into the fp16 bit pattern whose value is 2^-14 times its own
 * (sign at bit 15, exponent and mantissa bits at 9..11), two codes per 32-bit operation, and
 * converted by the hardware. Exact. */
static __device__ __forceinline__ void gemv_e2m1_word(uint32_t q, float w[8])
{
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t s = q << (4 * k);
        uint32_t bits = (s & 0x80008000u) | ((s & 0x70007000u) >> 3);
        w[3 - k] = __half2float(__ushort_as_half((unsigned short)(bits & 0xFFFFu)));
        w[7 - k] = __half2float(__ushort_as_half((unsigned short)(bits >> 16)));
    }
}

/* One staged chunk (tile chunk lc; `valid` of its E elements lie inside the row) into the sums
 * of `tokens` tokens. NVFP4: per 16-weight block, sum(e2m1 * x) then one FMA by its scale
 * (the scale times 2^14 undoes gemv_e2m1_word's factor, exactly). Others: element order. */
template <weight_format F, int MAXT>
static __device__ __forceinline__ void gemv_staged_chunk(const gemv_loaded_chunk &chunk, const float *stage,
                                                         int tile_floats, int lc, int valid, int tokens,
                                                         float sums[MAXT])
{
    constexpr int E = F == WEIGHT_NVFP4 ? 32 : F == WEIGHT_F32 ? 4 : 8;
    constexpr int VPC = E / 4;
    const uint32_t words[4] = {chunk.raw.x, chunk.raw.y, chunk.raw.z, chunk.raw.w};
    const float4 *x4 = reinterpret_cast<const float4 *>(stage);
    int token_vectors = tile_floats / 4;
    if (F == WEIGHT_NVFP4) {
#pragma unroll
        for (int b = 0; b < 2; b++) {
            if (b == 1 && valid <= 16) /* cols % 16 == 0: a half chunk at most */
                break;
            float block_scale = nvfp4_e4m3_to_float((uint8_t)(chunk.scales >> (8 * b))) * 16384.0f;
            float partial[MAXT];
#pragma unroll
            for (int t = 0; t < MAXT; t++)
                partial[t] = 0.0f;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float w[8];
                gemv_e2m1_word(words[2 * b + h], w);
                int v = lc * VPC + 4 * b + 2 * h;
#pragma unroll
                for (int t = 0; t < MAXT; t++) {
                    if (t < tokens) {
                        float4 lo = x4[t * token_vectors + gemv_stage_slot(v, VPC)];
                        float4 hi = x4[t * token_vectors + gemv_stage_slot(v + 1, VPC)];
                        partial[t] = fmaf(w[0], lo.x, partial[t]);
                        partial[t] = fmaf(w[1], lo.y, partial[t]);
                        partial[t] = fmaf(w[2], lo.z, partial[t]);
                        partial[t] = fmaf(w[3], lo.w, partial[t]);
                        partial[t] = fmaf(w[4], hi.x, partial[t]);
                        partial[t] = fmaf(w[5], hi.y, partial[t]);
                        partial[t] = fmaf(w[6], hi.z, partial[t]);
                        partial[t] = fmaf(w[7], hi.w, partial[t]);
                    }
                }
            }
#pragma unroll
            for (int t = 0; t < MAXT; t++)
                if (t < tokens)
                    sums[t] = fmaf(partial[t], block_scale, sums[t]);
        }
    } else {
        constexpr int EO = F == WEIGHT_NVFP4 ? 8 : E, VO = EO / 4; /* E, VPC (sized so NVFP4 compiles) */
        float w[EO];
#pragma unroll
        for (int j = 0; j < EO; j++) {
            if (F == WEIGHT_F32) {
                w[j] = __uint_as_float(words[j]);
            } else {
                uint16_t bits = (uint16_t)(words[j / 2] >> (16 * (j % 2)));
                w[j] = F == WEIGHT_BF16 ? __uint_as_float((uint32_t)bits << 16)
                                        : __half2float(__ushort_as_half(bits));
            }
        }
#pragma unroll
        for (int t = 0; t < MAXT; t++) {
            if (t >= tokens)
                break;
#pragma unroll
            for (int q = 0; q < VO; q++) {
                float4 x = x4[t * token_vectors + gemv_stage_slot(lc * VO + q, VO)];
                const float xq[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (valid >= EO || 4 * q + j < valid) /* a partial last chunk: its elements only */
                        sums[t] = fmaf(w[4 * q + j], xq[j], sums[t]);
            }
        }
    }
}

/* Loads chunks c, c + stride, ... (R of them, those below `end`) of a row. */
template <weight_format F, int R>
static __device__ __forceinline__ void gemv_load_round(gemv_loaded_chunk chunks[R], const uint4 *row,
                                                       const unsigned short *scales, int c, int stride, int end)
{
#pragma unroll
    for (int i = 0; i < R; i++) {
        int ci = c + i * stride;
        if (ci < end) {
            chunks[i].raw = __ldg(row + ci);
            if (F == WEIGHT_NVFP4)
                chunks[i].scales = __ldg(scales + ci);
        }
    }
}

/* Row `row` of NW matrices of format F and the same cols (gate and up of an expert), chunks
 * [c_begin, c_end) stepping by `stride` from c_begin + lane, for `tokens` tokens (xs[t]), into
 * sums[m][t]. Every thread of the block calls it with the same xs, tokens and chunk range
 * (it stages and waits at barriers); `active` false: a thread without a row, which only helps
 * stage. stage: shared memory of stage_floats >= tokens * kGemvStageFloatsPerToken floats. */
template <weight_format F, int MAXT, int NW>
static __device__ __forceinline__ void gemv_rows_staged_format(const weight_matrix *w, int row, bool active,
                                                               const float *const *xs, int tokens, int c_begin,
                                                               int c_end, int lane, int stride, float sums[][MAXT],
                                                               float *stage, int stage_floats)
{
    constexpr int E = F == WEIGHT_NVFP4 ? 32 : F == WEIGHT_F32 ? 4 : 8;
    constexpr int R = MAXT == 1 ? 2 : 1; /* chunks a round; the next round loads while one is used */
    int cols = w[0].cols;
    int tile_chunks = stage_floats / (tokens * E) / 32 * 32; /* whole warps' worth: lanes keep their chunks */
    int tile_floats = tile_chunks * E;
    const uint4 *rows[NW];
    const unsigned short *scales[NW];
#pragma unroll
    for (int m = 0; m < NW; m++) {
        rows[m] = reinterpret_cast<const uint4 *>(w[m].data + (size_t)(active ? row : 0) * w[m].data_stride);
        scales[m] = F == WEIGHT_NVFP4 ? reinterpret_cast<const unsigned short *>(
                                            w[m].scale + (size_t)(active ? row : 0) * w[m].scale_stride)
                                      : nullptr;
    }
    gemv_loaded_chunk current[NW][R] = {}, next[NW][R] = {};
    int c = c_begin + lane;
    int end = min(c_end, c_begin + tile_chunks);
    if (active) {
#pragma unroll
        for (int m = 0; m < NW; m++)
            gemv_load_round<F, R>(current[m], rows[m], scales[m], c, stride, end);
    }
    for (int tile = c_begin; tile < c_end; tile = end, end = min(c_end, tile + tile_chunks)) {
        if (tile != c_begin)
            __syncthreads(); /* every lane is done with the previous tile */
        gemv_stage_tile<MAXT>(stage, tile_floats, xs, tokens, tile * E, min(end * E, cols) - tile * E, E / 4);
        __syncthreads();
        if (!active)
            continue;
        int next_end = min(c_end, end + tile_chunks);
        while (c < end) {
            /* the next round: later chunks of this tile, or the first of the next tile (loaded
             * before its staging, so the weights stream while the activations are copied) */
            int c_next = c + R * stride < end ? c + R * stride : end + lane;
            int limit = c + R * stride < end ? end : next_end;
#pragma unroll
            for (int m = 0; m < NW; m++)
                gemv_load_round<F, R>(next[m], rows[m], scales[m], c_next, stride, limit);
#pragma unroll
            for (int i = 0; i < R; i++) {
                int ci = c + i * stride;
                if (ci < end) {
#pragma unroll
                    for (int m = 0; m < NW; m++)
                        gemv_staged_chunk<F, MAXT>(current[m][i], stage, tile_floats, ci - tile, cols - ci * E,
                                                   tokens, sums[m]);
                }
            }
#pragma unroll
            for (int m = 0; m < NW; m++)
#pragma unroll
                for (int i = 0; i < R; i++)
                    current[m][i] = next[m][i];
            c = c_next;
        }
    }
}

/* gemv_rows_staged_format for w's format (all NW matrices share it). */
template <int MAXT, int NW>
static __device__ __forceinline__ void gemv_rows_staged(const weight_matrix *w, int row, bool active,
                                                        const float *const *xs, int tokens, int c_begin, int c_end,
                                                        int lane, int stride, float sums[][MAXT], float *stage,
                                                        int stage_floats)
{
    switch (w[0].format) {
    case WEIGHT_NVFP4:
        gemv_rows_staged_format<WEIGHT_NVFP4, MAXT, NW>(w, row, active, xs, tokens, c_begin, c_end, lane, stride,
                                                        sums, stage, stage_floats);
        break;
    case WEIGHT_BF16:
        gemv_rows_staged_format<WEIGHT_BF16, MAXT, NW>(w, row, active, xs, tokens, c_begin, c_end, lane, stride,
                                                       sums, stage, stage_floats);
        break;
    case WEIGHT_F16:
        gemv_rows_staged_format<WEIGHT_F16, MAXT, NW>(w, row, active, xs, tokens, c_begin, c_end, lane, stride,
                                                      sums, stage, stage_floats);
        break;
    case WEIGHT_F32:
        gemv_rows_staged_format<WEIGHT_F32, MAXT, NW>(w, row, active, xs, tokens, c_begin, c_end, lane, stride,
                                                      sums, stage, stage_floats);
        break;
    }
}

/* One token, one matrix: the staged counterpart of gemv_row_partial (the whole block calls it). */
static __device__ __forceinline__ float gemv_row_partial_staged(const weight_matrix &w, int row, bool active,
                                                                const float *x, int c_begin, int c_end, int lane,
                                                                int stride, float *stage, int stage_floats)
{
    float sum[1][1] = {{0.0f}};
    const float *xs[1] = {x};
    gemv_rows_staged<1, 1>(&w, row, active, xs, 1, c_begin, c_end, lane, stride, sum, stage, stage_floats);
    return sum[0][0];
}

#endif
