/* mla (CUDA): absorbed MLA attention over the fp16 latent cache, flash-decoding style, for the
 * one query of a decode step or the causal queries of a prefill step (each over its own
 * prefix). The cache is shared by every head, so a block takes one query, a group of up to 8
 * heads and one part of the sequence: it stages CHUNK positions at a time in shared memory (one contiguous read
 * of the cache), scores them against all its heads and folds them into a running (online)
 * softmax, like the CPU's mla_decode; a second kernel merges the parts. The number of parts is
 * fixed when a graph is captured and the position is read from device memory, so parts past
 * the current length are simply empty. */
#include <math.h>

#include "kernels/cuda/forward.h"
#include "kernels/half_math.h"

namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 16;
constexpr int kHeadsPerBlock = 8;
constexpr int kMaxLatentPerThread = 4; /* kv_lora <= 1024 */

/* One block per multiprocessor pass is enough here, and lets ptxas keep the 32 accumulators in
 * registers (with the default target it spills). */
__global__ void __launch_bounds__(kThreads, 1) mla_partial_kernel(const float *q_latent, const float *q, int heads,
                                                               int kv_lora, int rope, int nope, float softmax_scale,
                                                               const uint16_t *cache, const int *pos, int splits,
                                                               float *partials)
{
    extern __shared__ uint4 mla_shared[];
    int row = kv_lora + rope, q_width = nope + rope;
    /* x: the query (fastest, so a step's queries read each cache chunk at about the same time
     * and all but the first find it in L2), y: the head group, z: the part of the sequence */
    size_t token = blockIdx.x;
    int split = blockIdx.z;
    q_latent += token * heads * kv_lora;
    q += token * heads * q_width;
    partials += token * (size_t)splits * heads * ((size_t)kv_lora + 2);
    int head0 = blockIdx.y * kHeadsPerBlock;
    int group = heads - head0 < kHeadsPerBlock ? heads - head0 : kHeadsPerBlock;
    uint16_t *chunk = reinterpret_cast<uint16_t *>(mla_shared);        /* [kChunk][row], 16-byte aligned */
    float *query = reinterpret_cast<float *>(chunk + kChunk * row);    /* [group][kv_lora | rope] */
    float *scores = query + kHeadsPerBlock * row;                       /* [group][kChunk] */
    float *max_state = scores + kHeadsPerBlock * kChunk;                /* [group] */
    float *sum_state = max_state + kHeadsPerBlock;                      /* [group] */
    float *rescale = sum_state + kHeadsPerBlock;                        /* [group] */

    for (int i = threadIdx.x; i < group * row; i += kThreads) {
        int g = i / row, c = i % row;
        query[i] = c < kv_lora ? q_latent[(size_t)(head0 + g) * kv_lora + c]
                               : q[(size_t)(head0 + g) * q_width + nope + (c - kv_lora)];
    }
    if (threadIdx.x < kHeadsPerBlock) {
        max_state[threadIdx.x] = -INFINITY;
        sum_state[threadIdx.x] = 0.0f;
    }
    float acc[kHeadsPerBlock][kMaxLatentPerThread];
#pragma unroll
    for (int g = 0; g < kHeadsPerBlock; g++)
#pragma unroll
        for (int k = 0; k < kMaxLatentPerThread; k++)
            acc[g][k] = 0.0f;

    long n_pos = (long)*pos + (long)token + 1;
    long chunks = (n_pos + kChunk - 1) / kChunk;
    long per_split = (chunks + splits - 1) / splits;
    long first_chunk = split * per_split;
    long end_chunk = first_chunk + per_split < chunks ? first_chunk + per_split : chunks;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    for (long ch = first_chunk; ch < end_chunk; ch++) {
        long first = ch * kChunk;
        int n = n_pos - first < kChunk ? (int)(n_pos - first) : kChunk;
        __syncthreads(); /* the previous chunk is no longer read */
        const uint16_t *source = cache + (size_t)first * row;
        if (row % 8 == 0) { /* rows of whole 16-byte words: cache and chunk are 16-byte aligned */
            const uint4 *from = reinterpret_cast<const uint4 *>(source);
            uint4 *to = reinterpret_cast<uint4 *>(chunk);
            for (int i = threadIdx.x; i < n * row / 8; i += kThreads)
                to[i] = from[i];
        } else {
            for (int i = threadIdx.x; i < n * row; i += kThreads)
                chunk[i] = source[i];
        }
        __syncthreads();
        /* scores[g][j] = (q_latent . latent_j + q_pe . k_pe_j) * scale, one warp per pair */
        for (int pair = warp; pair < group * n; pair += kThreads / 32) {
            int g = pair / n, j = pair % n;
            const float *qg = query + g * row;
            const uint16_t *kj = chunk + j * row;
            float latent_dot = 0.0f, rope_dot = 0.0f;
            for (int c = lane; c < kv_lora; c += 32)
                latent_dot += qg[c] * half_to_float(kj[c]);
            for (int c = kv_lora + lane; c < row; c += 32)
                rope_dot += qg[c] * half_to_float(kj[c]);
            for (int offset = 16; offset > 0; offset /= 2) {
                latent_dot += __shfl_xor_sync(0xFFFFFFFFu, latent_dot, offset);
                rope_dot += __shfl_xor_sync(0xFFFFFFFFu, rope_dot, offset);
            }
            if (lane == 0)
                scores[g * kChunk + j] = (latent_dot + rope_dot) * softmax_scale;
        }
        __syncthreads();
        /* online softmax: rescale by e^(m_old - m_new), p_j = e^(s_j - m_new) */
        if (threadIdx.x < group) {
            int g = threadIdx.x;
            float chunk_max = -INFINITY;
            for (int j = 0; j < n; j++)
                chunk_max = fmaxf(chunk_max, scores[g * kChunk + j]);
            float new_max = chunk_max > max_state[g] ? chunk_max : max_state[g];
            float r = expf(max_state[g] - new_max);
            float sum = sum_state[g] * r;
            for (int j = 0; j < n; j++) {
                float p = expf(scores[g * kChunk + j] - new_max);
                scores[g * kChunk + j] = p;
                sum += p;
            }
            sum_state[g] = sum;
            max_state[g] = new_max;
            rescale[g] = r;
        }
        __syncthreads();
#pragma unroll
        for (int g = 0; g < kHeadsPerBlock; g++) {
#pragma unroll
            for (int k = 0; k < kMaxLatentPerThread; k++) {
                int c = threadIdx.x + k * kThreads;
                if (g < group && c < kv_lora) {
                    float a = acc[g][k] * rescale[g];
                    for (int j = 0; j < n; j++)
                        a += scores[g * kChunk + j] * half_to_float(chunk[j * row + c]);
                    acc[g][k] = a;
                }
            }
        }
    }
    __syncthreads();
    size_t stride = (size_t)kv_lora + 2;
#pragma unroll
    for (int g = 0; g < kHeadsPerBlock; g++) {
        if (g >= group)
            continue;
        float *out = partials + ((size_t)split * heads + head0 + g) * stride;
        if (threadIdx.x == 0) {
            out[0] = max_state[g];
            out[1] = sum_state[g];
        }
#pragma unroll
        for (int k = 0; k < kMaxLatentPerThread; k++) {
            int c = threadIdx.x + k * kThreads;
            if (c < kv_lora)
                out[2 + c] = acc[g][k];
        }
    }
}

/* o_latent[h] = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s over the parts s. */
__global__ void __launch_bounds__(kThreads) mla_merge_kernel(const float *partials, int splits, int heads,
                                                             int kv_lora, float *o_latent)
{
    int head = blockIdx.x;
    size_t stride = (size_t)kv_lora + 2;
    partials += (size_t)blockIdx.y * splits * heads * stride;
    o_latent += (size_t)blockIdx.y * heads * kv_lora;
    float global_max = -INFINITY;
    for (int s = 0; s < splits; s++)
        global_max = fmaxf(global_max, partials[((size_t)s * heads + head) * stride]);
    float total = 0.0f;
    for (int s = 0; s < splits; s++) {
        const float *part = partials + ((size_t)s * heads + head) * stride;
        if (part[1] > 0.0f)
            total += part[1] * expf(part[0] - global_max);
    }
    float inverse = 1.0f / total;
    for (int c = threadIdx.x; c < kv_lora; c += kThreads) {
        float sum = 0.0f;
        for (int s = 0; s < splits; s++) {
            const float *part = partials + ((size_t)s * heads + head) * stride;
            if (part[1] > 0.0f)
                sum += part[2 + c] * expf(part[0] - global_max);
        }
        o_latent[(size_t)head * kv_lora + c] = sum * inverse;
    }
}

size_t partial_shared_bytes(int kv_lora, int rope)
{
    size_t row = (size_t)kv_lora + (size_t)rope;
    return (kHeadsPerBlock * row + kHeadsPerBlock * kChunk + 3 * kHeadsPerBlock) * sizeof(float) +
           kChunk * row * sizeof(uint16_t);
}

} // namespace

extern "C" size_t mla_decode_partial_floats(int splits, int heads, int kv_lora)
{
    return (size_t)splits * (size_t)heads * ((size_t)kv_lora + 2);
}

extern "C" int mla_decode_cuda(const float *q_latent, const float *q, int heads, int kv_lora, int rope, int nope,
                               float softmax_scale, const uint16_t *cache, const int *pos, int splits,
                               float *partials, float *o_latent, int tokens, void *stream)
{
    if (tokens <= 0)
        return 0;
    if (heads <= 0 || splits <= 0 || kv_lora > kThreads * kMaxLatentPerThread || splits > 65535 || tokens > 65535)
        return (int)cudaErrorInvalidValue;
    size_t shared = partial_shared_bytes(kv_lora, rope);
    if (shared > 48 * 1024) {
        cudaError_t status = cudaFuncSetAttribute(mla_partial_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  (int)shared);
        if (status != cudaSuccess)
            return (int)status;
    }
    dim3 grid((unsigned)tokens, (unsigned)((heads + kHeadsPerBlock - 1) / kHeadsPerBlock), (unsigned)splits);
    mla_partial_kernel<<<grid, kThreads, shared, (cudaStream_t)stream>>>(q_latent, q, heads, kv_lora, rope, nope,
                                                                         softmax_scale, cache, pos, splits, partials);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess)
        return (int)status;
    dim3 merge_grid((unsigned)heads, (unsigned)tokens);
    mla_merge_kernel<<<merge_grid, kThreads, 0, (cudaStream_t)stream>>>(partials, splits, heads, kv_lora, o_latent);
    return (int)cudaGetLastError();
}
