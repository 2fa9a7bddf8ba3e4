/* linear (CUDA): the GEMV of a step (one token, or up to 8 per pass sharing each weight read)
 * and the W_UK absorption. A group of lanes (a whole warp for rows of 32 chunks or
 * more) reads one packed weight row in 16-byte chunks, so each weight byte is read once and a
 * warp's loads are contiguous; sums are float. When the rows alone cannot fill the GPU (q_a,
 * kv_a: few rows, long K) the K range is split over blocks: each writes its partial sums and
 * the last block of a row range to finish adds them in split order, so the result does not
 * depend on timing (graphs on and off agree bit for bit). */
#include <math.h>

#include "kernels/cuda/forward.h"
#include "kernels/cuda/gemv_core.cuh"
#include "kernels/cuda/launch_grid.h"
#include "kernels/cuda/rope_core.cuh"
#include "kernels/forward_math.h"

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxSplit = 16;
constexpr int kMaxTokens = 8;
/* shared memory a GEMV block stages its activations in: one tile of 8192 columns for one token
 * (hidden 7168 in one tile), 1024 for each of 8 */
constexpr int kStageFloats = kMaxTokens * kGemvStageFloatsPerToken;

/* MAXT: the most tokens one launch serves (each weight decoded once for all of them). Split K
 * is what one token's GEMV takes; several tokens take it only through
 * linear_gemv_tokens_exact_cuda, each token's partials apart. */
template <int MAXT>
__global__ void __launch_bounds__(kThreads, MAXT == 1 ? 4 : 1)
    gemv_kernel(weight_matrix w, int rows, int row_batch, const float *x, size_t x_batch, size_t x_token, float *y,
                size_t y_batch, size_t y_token, int tokens, int lanes_per_row, int split, float *partials,
                unsigned *counters)
{
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int rows_per_warp = 32 / lanes_per_row;
    int sub = lane / lanes_per_row, group_lane = lane % lanes_per_row;
    int row = (blockIdx.x * kWarps + warp) * rows_per_warp + sub;
    int batch = blockIdx.z, part = blockIdx.y;
    int chunks = gemv_row_chunks(w);
    int per_split = (chunks + split - 1) / split;
    int c_begin = part * per_split, c_end = min(chunks, c_begin + per_split);

    float sums[MAXT];
    {
        float staged[1][MAXT];
#pragma unroll
        for (int t = 0; t < MAXT; t++)
            staged[0][t] = 0.0f;
        const float *xs[MAXT];
#pragma unroll
        for (int t = 0; t < MAXT; t++)
            xs[t] = x + (size_t)batch * x_batch + (size_t)t * x_token;
        __shared__ float4 stage[kStageFloats / 4];
        gemv_rows_staged<MAXT, 1>(&w, batch * row_batch + row, row < rows, xs, tokens, c_begin, c_end, group_lane,
                                  lanes_per_row, staged, reinterpret_cast<float *>(stage), kStageFloats);
#pragma unroll
        for (int t = 0; t < MAXT; t++)
            sums[t] = gemv_group_sum(staged[0][t], lanes_per_row);
    }
    float scale = gemv_row_scale(w);
    if (split == 1) {
        if (row < rows && group_lane == 0) {
#pragma unroll
            for (int t = 0; t < MAXT; t++)
                if (t < tokens)
                    y[(size_t)batch * y_batch + (size_t)t * y_token + row] = sums[t] * scale;
        }
        return;
    }
    /* token t's partial sums at [t][rows][kMaxSplit] (one token: [rows][kMaxSplit]) */
    __shared__ unsigned is_last;
    if (row < rows && group_lane == 0) {
#pragma unroll
        for (int t = 0; t < MAXT; t++)
            if (t < tokens)
                partials[((size_t)t * rows + row) * kMaxSplit + part] = sums[t];
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        is_last = atomicAdd(&counters[blockIdx.x], 1u) == (unsigned)split - 1;
    __syncthreads();
    if (!is_last)
        return;
    __threadfence();
    if (row < rows && group_lane == 0) {
#pragma unroll
        for (int t = 0; t < MAXT; t++) {
            if (t >= tokens)
                break;
            float total = 0.0f;
            for (int i = 0; i < split; i++)
                total += __ldcg(&partials[((size_t)t * rows + row) * kMaxSplit + i]);
            y[(size_t)t * y_token + row] = total * scale;
        }
    }
    if (threadIdx.x == 0)
        counters[blockIdx.x] = 0;
}

/* absorb_q: a block of kAbsorbThreads takes one head's columns [16 E blockIdx.x, +16 E) of W_UK
 * (E columns a 16-byte chunk): thread (g, ct) reads column chunk ct of rows g, g + 16, ... with
 * 16-byte loads (a warp: two rows, 256 contiguous bytes each), four rows in flight, and the 16
 * row groups' sums are added in group order through shared memory. */
constexpr int kAbsorbColumnChunks = 16, kAbsorbRowGroups = 16;
constexpr int kAbsorbThreads = kAbsorbColumnChunks * kAbsorbRowGroups;

/* The E weights of a 16-byte chunk, E2M1 times its E4M3 block scale for NVFP4 (exact in float). */
template <weight_format F>
__device__ __forceinline__ void absorb_decode(const gemv_loaded_chunk &chunk, float *w)
{
    const uint32_t words[4] = {chunk.raw.x, chunk.raw.y, chunk.raw.z, chunk.raw.w};
    if (F == WEIGHT_NVFP4) {
#pragma unroll
        for (int b = 0; b < 2; b++) {
            /* gemv_e2m1_word gives 2^-14 times the code; the scale times 2^14 is exact */
            float scale = nvfp4_e4m3_to_float((uint8_t)(chunk.scales >> (8 * b))) * 16384.0f;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                gemv_e2m1_word(words[2 * b + h], w + 16 * b + 8 * h);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    w[16 * b + 8 * h + j] *= scale;
            }
        }
    } else if (F == WEIGHT_F32) {
#pragma unroll
        for (int j = 0; j < 4; j++)
            w[j] = __uint_as_float(words[j]);
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            uint16_t bits = (uint16_t)(words[j / 2] >> (16 * (j % 2)));
            w[j] = F == WEIGHT_BF16 ? __uint_as_float((uint32_t)bits << 16) : __half2float(__ushort_as_half(bits));
        }
    }
}

/* q_latent[c] = sum_i (q[i] * scale_2) * Wuk[i][c] over this block's columns, rows of head
 * `head` of kv_b; reduce: shared memory of kAbsorbThreads * E floats. */
template <weight_format F>
__device__ __forceinline__ void absorb_columns(const weight_matrix &kv_b, int head, int nope, int v, const float *q,
                                               float *q_latent, float *reduce)
{
    constexpr int E = F == WEIGHT_NVFP4 ? 32 : F == WEIGHT_F32 ? 4 : 8;
    constexpr int kInFlight = 4;
    int ct = threadIdx.x % kAbsorbColumnChunks, g = threadIdx.x / kAbsorbColumnChunks;
    int cols = kv_b.cols, chunks = (cols + E - 1) / E;
    int chunk = blockIdx.x * kAbsorbColumnChunks + ct;
    float row_scale = kv_b.format == WEIGHT_NVFP4 ? kv_b.scale_2 : 1.0f;
    float sums[E];
#pragma unroll
    for (int e = 0; e < E; e++)
        sums[e] = 0.0f;
    if (chunk < chunks) {
        for (int first = g; first < nope; first += kInFlight * kAbsorbRowGroups) {
            gemv_loaded_chunk loaded[kInFlight] = {};
#pragma unroll
            for (int k = 0; k < kInFlight; k++) {
                int i = first + k * kAbsorbRowGroups;
                if (i < nope) {
                    size_t r = (size_t)head * (nope + v) + i;
                    loaded[k].raw = __ldg(reinterpret_cast<const uint4 *>(kv_b.data + r * kv_b.data_stride) + chunk);
                    if (F == WEIGHT_NVFP4)
                        loaded[k].scales =
                            __ldg(reinterpret_cast<const unsigned short *>(kv_b.scale + r * kv_b.scale_stride) + chunk);
                }
            }
#pragma unroll
            for (int k = 0; k < kInFlight; k++) {
                int i = first + k * kAbsorbRowGroups;
                if (i < nope) {
                    float coefficient = __ldg(q + i) * row_scale;
                    float w[E];
                    absorb_decode<F>(loaded[k], w);
#pragma unroll
                    for (int e = 0; e < E; e++)
                        sums[e] = fmaf(coefficient, w[e], sums[e]);
                }
            }
        }
    }
    /* reduce[e][g][ct]: a warp's stores and the final loads touch consecutive words */
#pragma unroll
    for (int e = 0; e < E; e++)
        reduce[(e * kAbsorbRowGroups + g) * kAbsorbColumnChunks + ct] = sums[e];
    __syncthreads();
    for (int j = threadIdx.x; j < kAbsorbColumnChunks * E; j += blockDim.x) {
        int out_ct = j % kAbsorbColumnChunks, e = j / kAbsorbColumnChunks;
        int c = (blockIdx.x * kAbsorbColumnChunks + out_ct) * E + e;
        float total = 0.0f;
        for (int group = 0; group < kAbsorbRowGroups; group++)
            total += reduce[(e * kAbsorbRowGroups + group) * kAbsorbColumnChunks + out_ct];
        if (c < cols)
            q_latent[c] = total;
    }
}

/* q_latent[h][c] = sum_i (q[h][i] * scale_2) * Wuk[h][i][c] (the CPU's
 * linear_transposed_accumulate, rows summed in another order), head blockIdx.y, token
 * blockIdx.z. inv_freq not NULL: the first block of each head also ropes its q_pe
 * (q[h][nope..)), which no block of this launch reads, at position *pos + token, with the
 * cos/sin of kv_rope_cache_kernel. */
__global__ void __launch_bounds__(kAbsorbThreads) absorb_q_kernel(weight_matrix kv_b, int nope, int v, float *q,
                                                                  int q_width, float *q_latent,
                                                                  const double *inv_freq, double cos_sin_scale,
                                                                  const int *pos)
{
    int head = blockIdx.y, heads = gridDim.y;
    int cols = kv_b.cols;
    q += (size_t)blockIdx.z * heads * q_width;
    q_latent += (size_t)blockIdx.z * heads * cols;
    if (inv_freq && blockIdx.x == 0) {
        long position = (long)*pos + blockIdx.z;
        float *q_pe = q + (size_t)head * q_width + nope;
        for (int i = threadIdx.x; i < (q_width - nope) / 2; i += blockDim.x) {
            float c, s;
            rope_cos_sin_f32(position, inv_freq[i], (float)cos_sin_scale, &c, &s);
            rope_rotate_pair(&q_pe[2 * i], &q_pe[2 * i + 1], c, s);
        }
    }
    __shared__ float reduce[kAbsorbThreads * 32];
    const float *q_head = q + (size_t)head * q_width;
    float *out = q_latent + (size_t)head * cols;
    switch (kv_b.format) {
    case WEIGHT_NVFP4:
        absorb_columns<WEIGHT_NVFP4>(kv_b, head, nope, v, q_head, out, reduce);
        break;
    case WEIGHT_BF16:
        absorb_columns<WEIGHT_BF16>(kv_b, head, nope, v, q_head, out, reduce);
        break;
    case WEIGHT_F16:
        absorb_columns<WEIGHT_F16>(kv_b, head, nope, v, q_head, out, reduce);
        break;
    case WEIGHT_F32:
        absorb_columns<WEIGHT_F32>(kv_b, head, nope, v, q_head, out, reduce);
        break;
    }
}

} // namespace

extern "C" int linear_gemv_cuda(const weight_matrix *w, int rows, int batches, int row_batch, const float *x,
                                size_t x_batch, float *y, size_t y_batch, const gemv_scratch *scratch, void *stream)
{
    return linear_gemv_tokens_cuda(w, rows, batches, row_batch, x, x_batch, 0, y, y_batch, 0, 1, scratch, stream);
}

/* The K split a GEMV of one token takes (1: none): the rows alone cannot fill the GPU (q_a,
 * kv_a: few rows, long K), so the K range goes to several blocks. */
static int gemv_split(int rows, int batches, int lanes, int blocks, int chunks, const gemv_scratch *scratch)
{
    if (!scratch || batches != 1 || lanes != 32 || rows > scratch->max_rows)
        return 1;
    int most = chunks / 64; /* at least two chunks per lane in every part */
    return launch_grid_split(blocks, scratch->sm_count, most < kMaxSplit ? most : kMaxSplit);
}

/* Checks w and the batches; the launch shape of its rows: lanes per row, blocks, chunks. */
static int gemv_shape(const weight_matrix *w, int rows, int batches, int *lanes, int *blocks, int *chunks)
{
    if (batches > 65535 || (w->format == WEIGHT_NVFP4 && (!w->scale || w->cols % 16)) || w->data_stride % 16)
        return (int)cudaErrorInvalidValue;
    int elements = w->format == WEIGHT_NVFP4 ? 32 : w->format == WEIGHT_F32 ? 4 : 8;
    *chunks = (w->cols + elements - 1) / elements;
    *lanes = gemv_lanes_per_row(*chunks);
    int rows_per_block = kWarps * (32 / *lanes);
    *blocks = (rows + rows_per_block - 1) / rows_per_block;
    return 0;
}

/* One launch of up to kMaxTokens tokens. */
static int gemv_launch(const weight_matrix *w, int rows, int batches, int row_batch, const float *x, size_t x_batch,
                       size_t x_token, float *y, size_t y_batch, size_t y_token, int tokens, int lanes, int blocks,
                       int split, const gemv_scratch *scratch, void *stream)
{
    dim3 grid((unsigned)blocks, (unsigned)split, (unsigned)batches);
    float *partials = scratch ? scratch->partials : nullptr;
    unsigned *counters = scratch ? scratch->counters : nullptr;
    if (tokens == 1)
        gemv_kernel<1><<<grid, kThreads, 0, (cudaStream_t)stream>>>(*w, rows, row_batch, x, x_batch, x_token, y, y_batch,
                                                                    y_token, tokens, lanes, split, partials, counters);
    else
        gemv_kernel<kMaxTokens><<<grid, kThreads, 0, (cudaStream_t)stream>>>(
            *w, rows, row_batch, x, x_batch, x_token, y, y_batch, y_token, tokens, lanes, split, partials, counters);
    return (int)cudaGetLastError();
}

extern "C" int linear_gemv_tokens_cuda(const weight_matrix *w, int rows, int batches, int row_batch, const float *x,
                                       size_t x_batch, size_t x_token, float *y, size_t y_batch, size_t y_token,
                                       int tokens, const gemv_scratch *scratch, void *stream)
{
    if (rows <= 0 || batches <= 0 || tokens <= 0)
        return 0;
    if (tokens > kMaxTokens) {
        for (int first = 0; first < tokens; first += kMaxTokens) {
            int count = tokens - first < kMaxTokens ? tokens - first : kMaxTokens;
            int status = linear_gemv_tokens_cuda(w, rows, batches, row_batch, x + (size_t)first * x_token, x_batch,
                                                 x_token, y + (size_t)first * y_token, y_batch, y_token, count, scratch,
                                                 stream);
            if (status)
                return status;
        }
        return 0;
    }
    int lanes, blocks, chunks;
    int status = gemv_shape(w, rows, batches, &lanes, &blocks, &chunks);
    if (status)
        return status;
    int split = tokens == 1 ? gemv_split(rows, batches, lanes, blocks, chunks, scratch) : 1;
    return gemv_launch(w, rows, batches, row_batch, x, x_batch, x_token, y, y_batch, y_token, tokens, lanes, blocks,
                       split, scratch, stream);
}

extern "C" int linear_gemv_tokens_exact_cuda(const weight_matrix *w, int rows, int batches, int row_batch,
                                             const float *x, size_t x_batch, size_t x_token, float *y, size_t y_batch,
                                             size_t y_token, int tokens, const gemv_scratch *scratch, void *stream)
{
    if (rows <= 0 || batches <= 0 || tokens <= 0)
        return 0;
    int lanes, blocks, chunks;
    int status = gemv_shape(w, rows, batches, &lanes, &blocks, &chunks);
    if (status)
        return status;
    int split = gemv_split(rows, batches, lanes, blocks, chunks, scratch);
    /* a split launch keeps [tokens][rows][kMaxSplit] partials in scratch's [max_rows][kMaxSplit] */
    int per_launch = split > 1 ? scratch->max_rows / rows : kMaxTokens;
    per_launch = per_launch > kMaxTokens ? kMaxTokens : per_launch < 1 ? 1 : per_launch;
    for (int first = 0; first < tokens && !status; first += per_launch) {
        int count = tokens - first < per_launch ? tokens - first : per_launch;
        status = gemv_launch(w, rows, batches, row_batch, x + (size_t)first * x_token, x_batch, x_token,
                             y + (size_t)first * y_token, y_batch, y_token, count, lanes, blocks, split, scratch,
                             stream);
    }
    return status;
}

/* absorb_q_kernel's grid: column blocks x heads x tokens; kv_b's rows must be 16-byte aligned
 * (the packed layout), NVFP4 with its scales in whole blocks of 16. */
static int absorb_grid(const weight_matrix *kv_b, int heads, int tokens, dim3 *grid)
{
    if (kv_b->data_stride % 16 || (kv_b->format == WEIGHT_NVFP4 && (!kv_b->scale || kv_b->cols % 16)) ||
        heads > 65535 || tokens > 65535)
        return (int)cudaErrorInvalidValue;
    int elements = kv_b->format == WEIGHT_NVFP4 ? 32 : kv_b->format == WEIGHT_F32 ? 4 : 8;
    int per_block = kAbsorbColumnChunks * elements;
    *grid = dim3((unsigned)((kv_b->cols + per_block - 1) / per_block), (unsigned)heads, (unsigned)tokens);
    return 0;
}

extern "C" int mla_absorb_q_cuda(const weight_matrix *kv_b, int heads, int nope, int v, const float *q, int q_width,
                                 float *q_latent, int tokens, void *stream)
{
    if (heads <= 0 || tokens <= 0)
        return 0;
    dim3 grid;
    int status = absorb_grid(kv_b, heads, tokens, &grid);
    if (status)
        return status;
    absorb_q_kernel<<<grid, kAbsorbThreads, 0, (cudaStream_t)stream>>>(*kv_b, nope, v, const_cast<float *>(q), q_width,
                                                                        q_latent, nullptr, 0.0, nullptr);
    return (int)cudaGetLastError();
}

extern "C" int mla_absorb_q_rope_cuda(const weight_matrix *kv_b, int heads, int nope, int v, int rope, float *q,
                                      int q_width, float *q_latent, const double *inv_freq, double cos_sin_scale,
                                      const int *pos, int tokens, void *stream)
{
    if (heads <= 0 || tokens <= 0)
        return 0;
    if (rope % 2 || q_width != nope + rope || !inv_freq || !pos)
        return (int)cudaErrorInvalidValue;
    dim3 grid;
    int status = absorb_grid(kv_b, heads, tokens, &grid);
    if (status)
        return status;
    absorb_q_kernel<<<grid, kAbsorbThreads, 0, (cudaStream_t)stream>>>(*kv_b, nope, v, q, q_width, q_latent,
                                                                        inv_freq, cos_sin_scale, pos);
    return (int)cudaGetLastError();
}
