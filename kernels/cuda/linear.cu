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

/* q_latent[h][c] = sum_i (q[h][i] * scale_2) * Wuk[h][i][c], rows i in order (the CPU's
 * linear_transposed_accumulate). inv_freq not NULL: the first block of each head also ropes its
 * q_pe (q[h][nope..)), which no block of this launch reads, at position *pos + token, with the
 * cos/sin of kv_rope_cache_kernel. */
__global__ void absorb_q_kernel(weight_matrix kv_b, int nope, int v, float *q, int q_width, float *q_latent,
                                const double *inv_freq, double cos_sin_scale, const int *pos)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, head = blockIdx.y, heads = gridDim.y;
    int cols = kv_b.cols;
    q += (size_t)blockIdx.z * heads * q_width;
    q_latent += (size_t)blockIdx.z * heads * cols;
    if (inv_freq && blockIdx.x == 0) {
        double position = (double)((long)*pos + blockIdx.z);
        float *q_pe = q + (size_t)head * q_width + nope;
        for (int i = threadIdx.x; i < (q_width - nope) / 2; i += blockDim.x) {
            double angle = position * inv_freq[i];
            rope_rotate_pair(&q_pe[2 * i], &q_pe[2 * i + 1], (float)(cos(angle) * cos_sin_scale),
                             (float)(sin(angle) * cos_sin_scale));
        }
    }
    if (c >= cols)
        return;
    float row_scale = kv_b.format == WEIGHT_NVFP4 ? kv_b.scale_2 : 1.0f;
    float sum = 0.0f;
    for (int i = 0; i < nope; i++) {
        int r = head * (nope + v) + i;
        const uint8_t *row = kv_b.data + (size_t)r * kv_b.data_stride;
        float w;
        switch (kv_b.format) {
        case WEIGHT_NVFP4: {
            uint8_t byte = row[c / 2];
            float block_scale = nvfp4_e4m3_to_float(kv_b.scale[(size_t)r * kv_b.scale_stride + c / 16]);
            w = nvfp4_e2m1_to_float((uint8_t)(c & 1 ? byte >> 4 : byte & 15)) * block_scale;
            break;
        }
        case WEIGHT_BF16:
            w = bf16_bits_to_float(reinterpret_cast<const uint16_t *>(row)[c]);
            break;
        case WEIGHT_F16:
            w = half_to_float(reinterpret_cast<const uint16_t *>(row)[c]);
            break;
        default:
            w = reinterpret_cast<const float *>(row)[c];
            break;
        }
        float coefficient = q[(size_t)head * q_width + i] * row_scale;
        sum += coefficient * w;
    }
    q_latent[(size_t)head * cols + c] = sum;
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
    if (!scratch || batches != 1 || lanes != 32 || rows > scratch->max_rows || blocks >= 2 * scratch->sm_count)
        return 1;
    int split = (2 * scratch->sm_count + blocks - 1) / blocks;
    split = split > kMaxSplit ? kMaxSplit : split;
    int most = chunks / 64; /* at least two chunks per lane in every part */
    split = split > most ? most : split;
    return split < 1 ? 1 : split;
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

extern "C" int mla_absorb_q_cuda(const weight_matrix *kv_b, int heads, int nope, int v, const float *q, int q_width,
                                 float *q_latent, int tokens, void *stream)
{
    if (heads <= 0 || tokens <= 0)
        return 0;
    const int threads = 128;
    dim3 grid((unsigned)((kv_b->cols + threads - 1) / threads), (unsigned)heads, (unsigned)tokens);
    absorb_q_kernel<<<grid, threads, 0, (cudaStream_t)stream>>>(*kv_b, nope, v, const_cast<float *>(q), q_width,
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
    const int threads = 128;
    dim3 grid((unsigned)((kv_b->cols + threads - 1) / threads), (unsigned)heads, (unsigned)tokens);
    absorb_q_kernel<<<grid, threads, 0, (cudaStream_t)stream>>>(*kv_b, nope, v, q, q_width, q_latent, inv_freq,
                                                                 cos_sin_scale, pos);
    return (int)cudaGetLastError();
}
