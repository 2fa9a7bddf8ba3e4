/* mla (CUDA): absorbed MLA attention over the latent cache (fp16, or fp8 decoded to the same
 * fp16 values as on the CPU while a chunk is staged: kernels/kv_format.h), flash-decoding style, for the
 * one query of a decode step or the causal queries of a prefill step (each over its own
 * prefix). The cache is shared by every head, so a block takes one query, a group of up to 8
 * heads and one part of the sequence: it stages CHUNK positions at a time in shared memory (one contiguous read
 * of the cache), scores them against all its heads and folds them into a running (online)
 * softmax, like the CPU's mla_decode; a second kernel merges the parts. The most parts a query
 * may use is fixed when a graph is captured; how many of them hold positions follows from the
 * length, read from device memory (decode_active_splits): at least kMinChunksPerSplit chunks
 * each, so a short context uses few parts and its merge reads only those. The prefill kernel does the same for blocks of 16 query
 * rows (tokens x heads) at once, so a step's queries share each staged chunk. */
#include <cuda_fp16.h>
#include <math.h>

#include "kernels/attention_merge_math.h"
#include "kernels/cuda/forward.h"
#include "kernels/half_math.h"
#include "kernels/kv_format.h"
#include "kernels/kv_shard_math.h"

namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 32;              /* positions staged at a time */
constexpr int kHeadsPerBlock = 8;       /* K2.5 at TP 8: all of a rank's heads share each staged chunk */
constexpr int kMaxLatentPerThread = 4;  /* kv_lora <= 1024 */
/* A part of the sequence holds at least this many chunks (a short context: few parts, each
 * worth a block's start and its part's merge), unless the sequence has fewer. */
constexpr int kMinChunksPerSplit = 4;
constexpr int kMergeThreads = 128;     /* one column of a head's merge per thread */
constexpr int kMaxMergeParts = 4096;   /* the merge's weights and sums in shared memory: 32 KiB */

/* The chunks each part of a sequence of n_pos positions takes when it may be cut into at most
 * `splits` parts, and how many parts that gives (0 for no positions): parts [0, active) hold
 * positions, the rest none. The length alone decides, so a graph captured for any `splits`
 * replays right at every length, and lengths up to kMinChunksPerSplit * splits chunks are cut
 * the same way whatever `splits` is. */
__device__ __forceinline__ long decode_chunks_per_split(long n_pos, int splits)
{
    long chunks = (n_pos + kChunk - 1) / kChunk;
    long per_split = (chunks + splits - 1) / splits;
    return per_split > kMinChunksPerSplit ? per_split : kMinChunksPerSplit;
}

__device__ __forceinline__ int decode_active_splits(long n_pos, int splits)
{
    long chunks = (n_pos + kChunk - 1) / kChunk, per_split = decode_chunks_per_split(n_pos, splits);
    return (int)((chunks + per_split - 1) / per_split);
}

/* The merge of parts [0, n) of one head (part s at parts + s * part_stride), with
 * kernels/attention_merge_math.h's arithmetic (max, weights e^(m_s - M), total and every element
 * summed in part order), but each part's weight computed once per block instead of once per
 * element: weights and sums [2][n] in shared memory. Every thread of the block calls it;
 * returns M and sets *total (thread 0 sums it, as attention_parts_total does). */
__device__ float merge_weights(const float *parts, int n, size_t part_stride, float *weights, float *sums,
                               float *total)
{
    __shared__ float block_max[32], block_total;
    float local = -INFINITY;
    for (int s = threadIdx.x; s < n; s += blockDim.x)
        local = fmaxf(local, parts[(size_t)s * part_stride]);
    for (int offset = 16; offset > 0; offset /= 2)
        local = fmaxf(local, __shfl_xor_sync(0xFFFFFFFFu, local, offset));
    if (threadIdx.x % 32 == 0)
        block_max[threadIdx.x / 32] = local;
    __syncthreads();
    float global_max = -INFINITY;
    for (int w = 0; w < (int)(blockDim.x / 32); w++)
        global_max = fmaxf(global_max, block_max[w]);
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        const float *part = parts + (size_t)s * part_stride;
        sums[s] = part[1];
        weights[s] = attention_part_weight(part, global_max);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int s = 0; s < n; s++)
            if (sums[s] != 0.0f)
                t += sums[s] * weights[s];
        block_total = t;
    }
    __syncthreads();
    *total = block_total;
    return global_max;
}

/* Element c of the merged parts, summed in part order (attention_parts_merge_element). */
__device__ __forceinline__ float merge_element(const float *parts, int n, size_t part_stride, const float *weights,
                                               const float *sums, float inverse_total, int c)
{
    float sum = 0.0f;
    for (int s = 0; s < n; s++)
        if (sums[s] != 0.0f)
            sum += parts[(size_t)s * part_stride + 2 + c] * weights[s];
    return sum * inverse_total;
}

/* Element c of cache row j of an fp8 cache as the fp16 the CPU decodes it to (kernels/kv_format.h),
 * so the kernels stage fp8 rows in shared memory exactly as they stage fp16 ones. */
__device__ __forceinline__ uint16_t fp8_row_half(const uint8_t *cache, size_t row_bytes, long j, int c, int kv_lora)
{
    const uint8_t *at = cache + (size_t)j * row_bytes;
    if (c < kv_lora)
        return kv_fp8_decode_half(at[c], kv_fp8_row_scale(at, kv_lora, c / KV_FP8_BLOCK));
    return reinterpret_cast<const uint16_t *>(kv_fp8_row_rope(at, kv_lora))[c - kv_lora];
}

__device__ __forceinline__ float half_low(uint32_t two)
{
    return __half2float(__ushort_as_half((unsigned short)(two & 0xFFFFu)));
}

__device__ __forceinline__ float half_high(uint32_t two)
{
    return __half2float(__ushort_as_half((unsigned short)(two >> 16)));
}

/* kCols (2 or 4) adjacent fp16 values of a staged row at `at` (4- or 8-byte aligned) as floats:
 * one shared-memory load for all of them. */
template <int kCols> __device__ __forceinline__ void staged_cols(const uint16_t *at, float latent[kCols])
{
    if (kCols == 2) {
        uint32_t two = *reinterpret_cast<const uint32_t *>(at);
        latent[0] = half_low(two);
        latent[kCols - 1] = half_high(two);
    } else {
        uint2 four = *reinterpret_cast<const uint2 *>(at);
#pragma unroll
        for (int k = 0; k < kCols; k++)
            latent[k] = k % 2 ? half_high(k / 2 ? four.y : four.x) : half_low(k / 2 ? four.y : four.x);
    }
}

__device__ __forceinline__ float warp_max(float value)
{
    for (int offset = 16; offset > 0; offset /= 2)
        value = fmaxf(value, __shfl_xor_sync(0xFFFFFFFFu, value, offset));
    return value;
}

__device__ __forceinline__ float warp_sum(float value)
{
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
    return value;
}

/* One step of warp_transpose_sum: lanes with bit kHalf set keep values [kHalf, 2 kHalf) and
 * send [0, kHalf), the others the reverse; the kept half ends in values [0, kHalf). */
template <int kHalf>
__device__ __forceinline__ void transpose_sum_step(float (&values)[32], int lane)
{
    bool upper = lane & kHalf;
#pragma unroll
    for (int i = 0; i < kHalf; i++) {
        float low = values[i], high = values[i + kHalf]; /* both read, then chosen: no indexed registers */
        float send = upper ? low : high, keep = upper ? high : low;
        values[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, kHalf);
    }
}

/* values[i] (i < 32) of every lane of a warp summed over the warp, sum i ending in lane i: five
 * steps in which each lane keeps half of its values and adds its partner's share of them (31
 * shuffles for 32 sums instead of 160; the order of the additions is fixed). */
__device__ __forceinline__ float warp_transpose_sum(float (&values)[32], int lane)
{
    transpose_sum_step<16>(values, lane);
    transpose_sum_step<8>(values, lane);
    transpose_sum_step<4>(values, lane);
    transpose_sum_step<2>(values, lane);
    transpose_sum_step<1>(values, lane);
    return values[0];
}

/* Shared-memory row width of the decode kernel, in elements: cache rows and queries padded with
 * zeros to whole 16-byte units of halves (each lane reads a key 8 values at a time). */
__host__ __device__ int decode_row_stride(int row)
{
    return (row + 7) / 8 * 8;
}

constexpr int kDecodeWarps = kThreads / 32;
constexpr int kPositionsPerWarp = kChunk / kDecodeWarps;
static_assert(kHeadsPerBlock == kDecodeWarps, "the softmax takes a warp per head");
static_assert(kChunk == 32, "the softmax takes a lane per position");
static_assert(kPositionsPerWarp * kHeadsPerBlock == 32, "a warp's scores: one per lane");

/* One block per multiprocessor pass is enough here, and lets ptxas keep the accumulators in
 * registers. kCols: the latent columns each thread accumulates (kThreads * kCols >= kv_lora).
 * Query row i (token i / heads, head i % heads) is q_latent + i * latent_stride and q_pe + i *
 * pe_stride; the query of token x sits at position *pos + x % period (a decode step: period =
 * tokens; decode context parallelism: the group's queries, member by member, each member's
 * period tokens long) and sees the positions of [0, that position] that member `member` of a
 * group of dcp stores (kernels/kv_shard_math.h), the cache's slots [0, count).
 * Per staged chunk: scores with warp w taking positions w + 8p (p < 4) against all of the
 * block's heads (each key converted once, 16-byte loads of keys and queries, products fused),
 * the online softmax with warp g taking head g, a lane per position, then each thread's kCols
 * columns of every head's accumulator. */
template <int kCols>
__global__ void __launch_bounds__(kThreads, 1) mla_partial_kernel(const float *q_latent, size_t latent_stride,
                                                               const float *q_pe, size_t pe_stride, int heads,
                                                               int kv_lora, int rope, float softmax_scale,
                                                               const uint8_t *cache, int fp8, const int *pos,
                                                               int period, int dcp, int member, int splits,
                                                               float *partials)
{
    extern __shared__ uint4 mla_shared[];
    const int row = kv_lora + rope, stride = decode_row_stride(row), units = stride / 8;
    /* x: the query (fastest, so a step's queries read each cache chunk at about the same time
     * and all but the first find it in L2), y: the head group, z: the part of the sequence */
    size_t token = blockIdx.x;
    int split = blockIdx.z;
    long n_pos = kv_shard_local_count((long)*pos + (long)(token % (size_t)period) + 1, dcp, member);
    if (split >= decode_active_splits(n_pos, splits))
        return; /* a part past the length: the merge reads parts [0, active) only */
    q_latent += token * heads * latent_stride;
    q_pe += token * heads * pe_stride;
    partials += token * (size_t)splits * heads * ((size_t)kv_lora + 2);
    int head0 = blockIdx.y * kHeadsPerBlock;
    int group = heads - head0 < kHeadsPerBlock ? heads - head0 : kHeadsPerBlock;
    uint16_t *chunk = reinterpret_cast<uint16_t *>(mla_shared);          /* [kChunk][stride], 16-byte rows */
    float *query = reinterpret_cast<float *>(chunk + kChunk * stride);   /* [kHeadsPerBlock][stride] */
    float *probs = query + kHeadsPerBlock * stride;                       /* [kChunk][kHeadsPerBlock] */
    float *rescale = probs + kChunk * kHeadsPerBlock;                     /* [kHeadsPerBlock] */

    for (int i = threadIdx.x; i < kHeadsPerBlock * stride; i += kThreads) {
        int g = i / stride, c = i % stride;
        float value = 0.0f;
        if (g < group && c < row)
            value = c < kv_lora ? q_latent[(size_t)(head0 + g) * latent_stride + c]
                                : q_pe[(size_t)(head0 + g) * pe_stride + (c - kv_lora)];
        query[i] = value;
    }
    /* key columns past the row: read by a row's last 16-byte unit, zero, never staged */
    const int pad = stride - row;
    for (int i = threadIdx.x; i < kChunk * pad; i += kThreads)
        chunk[(i / pad) * stride + row + i % pad] = 0;
    float acc[kHeadsPerBlock][kCols];
#pragma unroll
    for (int g = 0; g < kHeadsPerBlock; g++)
#pragma unroll
        for (int k = 0; k < kCols; k++)
            acc[g][k] = 0.0f;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, col0 = threadIdx.x * kCols;
    float max_state = -INFINITY, sum_state = 0.0f; /* warp g's head g, the same in every lane */

    long chunks = (n_pos + kChunk - 1) / kChunk;
    long per_split = decode_chunks_per_split(n_pos, splits);
    long first_chunk = split * per_split;
    long end_chunk = first_chunk + per_split < chunks ? first_chunk + per_split : chunks;

    for (long ch = first_chunk; ch < end_chunk; ch++) {
        long first = ch * kChunk;
        int n = n_pos - first < kChunk ? (int)(n_pos - first) : kChunk;
        __syncthreads(); /* the previous chunk is no longer read */
        const uint16_t *source = reinterpret_cast<const uint16_t *>(cache) + (size_t)first * row;
        if (fp8) {
            size_t row_bytes = kv_row_bytes(KV_CACHE_FP8, kv_lora, rope);
            for (int i = threadIdx.x; i < n * row; i += kThreads)
                chunk[(i / row) * stride + i % row] = fp8_row_half(cache, row_bytes, first + i / row, i % row, kv_lora);
        } else if (row == stride) { /* rows of whole 16-byte words: cache and chunk are 16-byte aligned */
            const uint4 *from = reinterpret_cast<const uint4 *>(source);
            uint4 *to = reinterpret_cast<uint4 *>(chunk);
            for (int i = threadIdx.x; i < n * units; i += kThreads)
                to[i] = from[i];
        } else {
            for (int i = threadIdx.x; i < n * row; i += kThreads)
                chunk[(i / row) * stride + i % row] = source[i];
        }
        __syncthreads();
        /* scores[j][g] = (q_latent . latent_j + q_pe . k_pe_j) * scale: lane l sums 16-byte units
         * l, l + 32, .. of its warp's positions against every head, then the warp's 32 sums are
         * added across the lanes, lane l ending with position warp + 8 (l / 8), head l % 8 (a
         * position past the chunk's end scores what its row holds, which the softmax skips) */
        {
            float dots[kPositionsPerWarp * kHeadsPerBlock];
#pragma unroll
            for (int i = 0; i < kPositionsPerWarp * kHeadsPerBlock; i++)
                dots[i] = 0.0f;
            for (int u = lane; u < units; u += 32) {
                float key[kPositionsPerWarp][8];
#pragma unroll
                for (int p = 0; p < kPositionsPerWarp; p++) {
                    uint4 raw = reinterpret_cast<const uint4 *>(chunk + (warp + kDecodeWarps * p) * stride)[u];
                    uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        key[p][2 * e] = half_low(words[e]);
                        key[p][2 * e + 1] = half_high(words[e]);
                    }
                }
#pragma unroll
                for (int g = 0; g < kHeadsPerBlock; g++) {
                    const float4 *qg = reinterpret_cast<const float4 *>(query + g * stride) + 2 * u;
                    float4 a = qg[0], b = qg[1];
                    float q8[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
                    for (int p = 0; p < kPositionsPerWarp; p++)
#pragma unroll
                        for (int e = 0; e < 8; e++)
                            dots[p * kHeadsPerBlock + g] = fmaf(q8[e], key[p][e], dots[p * kHeadsPerBlock + g]);
                }
            }
            float score = warp_transpose_sum(dots, lane);
            probs[(warp + kDecodeWarps * (lane / kHeadsPerBlock)) * kHeadsPerBlock + lane % kHeadsPerBlock] =
                score * softmax_scale;
        }
        __syncthreads();
        /* online softmax of head g in warp g: rescale by e^(m_old - m_new), p_j = e^(s_j - m_new) */
        {
            float *p_at = probs + lane * kHeadsPerBlock + warp;
            if (warp < group) {
                float score = lane < n ? *p_at : -INFINITY;
                float new_max = fmaxf(max_state, warp_max(score));
                float r = expf(max_state - new_max);
                float p = lane < n ? expf(score - new_max) : 0.0f;
                sum_state = sum_state * r + warp_sum(p);
                max_state = new_max;
                *p_at = p;
                if (lane == 0)
                    rescale[warp] = r;
            } else { /* a head past the group: nothing to add */
                *p_at = 0.0f;
                if (lane == 0)
                    rescale[warp] = 1.0f;
            }
        }
        __syncthreads();
        /* acc[g][c] = acc[g][c] * rescale[g] + sum_j p[j][g] * latent_j[c], c = col0 + k */
        if (col0 < kv_lora) {
#pragma unroll
            for (int g = 0; g < kHeadsPerBlock; g++) {
                float r = rescale[g];
#pragma unroll
                for (int k = 0; k < kCols; k++)
                    acc[g][k] *= r;
            }
            for (int j = 0; j < n; j++) {
                float latent[kCols];
                staged_cols<kCols>(chunk + j * stride + col0, latent);
                const float4 *pj = reinterpret_cast<const float4 *>(probs + j * kHeadsPerBlock);
                float4 pa = pj[0], pb = pj[1];
                float p[kHeadsPerBlock] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
#pragma unroll
                for (int g = 0; g < kHeadsPerBlock; g++)
#pragma unroll
                    for (int k = 0; k < kCols; k++)
                        acc[g][k] = fmaf(p[g], latent[k], acc[g][k]);
            }
        }
    }
    size_t part_floats = (size_t)kv_lora + 2;
    if (warp < group && lane == 0) {
        float *out = partials + ((size_t)split * heads + head0 + warp) * part_floats;
        out[0] = max_state;
        out[1] = sum_state;
    }
#pragma unroll
    for (int g = 0; g < kHeadsPerBlock; g++) {
        if (g >= group)
            continue;
        float *out = partials + ((size_t)split * heads + head0 + g) * part_floats;
#pragma unroll
        for (int k = 0; k < kCols; k++)
            if (col0 + k < kv_lora)
                out[2 + col0 + k] = acc[g][k];
    }
}

/* o_latent[h]: the parts of each head merged (kernels/attention_merge_math.h); token y's part s
 * of head h at partials + y * token_stride + s * part_stride + h * ATTENTION_PART_FLOATS. pos
 * NULL: all `splits` parts; else a decode step's (token y at *pos + y), whose parts past the
 * length (decode_active_splits) are not read. Block (head, token, columns z * kMergeThreads..);
 * dynamic shared memory: 2 * splits floats. */
__global__ void __launch_bounds__(kMergeThreads) mla_merge_kernel(const float *partials, int splits,
                                                                  size_t token_stride, size_t part_stride, int heads,
                                                                  int kv_lora, float *o_latent, const int *pos)
{
    extern __shared__ float merge_shared[];
    int head = blockIdx.x;
    int n = pos ? decode_active_splits((long)*pos + (long)blockIdx.y + 1, splits) : splits;
    size_t stride = ATTENTION_PART_FLOATS(kv_lora);
    partials += (size_t)blockIdx.y * token_stride + (size_t)head * stride;
    o_latent += (size_t)blockIdx.y * heads * kv_lora;
    float total;
    merge_weights(partials, n, part_stride, merge_shared, merge_shared + n, &total);
    float inverse = 1.0f / total;
    int c = blockIdx.z * kMergeThreads + threadIdx.x;
    if (c < kv_lora)
        o_latent[(size_t)head * kv_lora + c] =
            merge_element(partials, n, part_stride, merge_shared, merge_shared + n, inverse, c);
}

/* Decode context parallelism: the splits of each query row merged into one part, left
 * unnormalised ([max | sum | acc], kernels/attention_merge_math.h) for the group's merge:
 * parts [queries][heads][ATTENTION_PART_FLOATS], partials as mla_partial_kernel wrote them for
 * query y at position *pos + y % period over member `member`'s slots (parts past its local
 * length not written, not read). Block (head, query, columns); shared as mla_merge_kernel. */
__global__ void __launch_bounds__(kMergeThreads) mla_part_combine_kernel(const float *partials, int splits, int heads,
                                                                         int kv_lora, const int *pos, int period,
                                                                         int dcp, int member, float *parts)
{
    extern __shared__ float merge_shared[];
    int head = blockIdx.x;
    long n_pos = kv_shard_local_count((long)*pos + (long)(blockIdx.y % (unsigned)period) + 1, dcp, member);
    int n = decode_active_splits(n_pos, splits);
    size_t stride = ATTENTION_PART_FLOATS(kv_lora), part_stride = (size_t)heads * stride;
    partials += (size_t)blockIdx.y * splits * heads * stride + (size_t)head * stride;
    parts += ((size_t)blockIdx.y * heads + head) * stride;
    float total;
    float global_max = merge_weights(partials, n, part_stride, merge_shared, merge_shared + n, &total);
    if (blockIdx.z == 0 && threadIdx.x == 0) {
        parts[0] = total > 0.0f ? global_max : -INFINITY;
        parts[1] = total;
    }
    int c = blockIdx.z * kMergeThreads + threadIdx.x;
    if (c < kv_lora)
        parts[2 + c] = merge_element(partials, n, part_stride, merge_shared, merge_shared + n, 1.0f, c);
}

/* One launch of mla_merge_kernel. */
int merge_launch(const float *partials, int splits, size_t token_stride, size_t part_stride, int heads, int kv_lora,
                 float *o_latent, const int *pos, int tokens, cudaStream_t stream)
{
    if (splits > kMaxMergeParts)
        return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)heads, (unsigned)tokens, (unsigned)((kv_lora + kMergeThreads - 1) / kMergeThreads));
    mla_merge_kernel<<<grid, kMergeThreads, 2 * (size_t)splits * sizeof(float), stream>>>(
        partials, splits, token_stride, part_stride, heads, kv_lora, o_latent, pos);
    return (int)cudaGetLastError();
}

/* ---- prefill: a block of kPrefillRows query rows (row i of the step: token i / heads, head
 * i % heads) against chunks of kPrefillKeys cache positions ---- */

constexpr int kPrefillRows = MLA_PREFILL_ROWS;
constexpr int kPrefillKeys = 32;    /* one key per lane when scoring */
constexpr int kWarps = kThreads / 32;
static_assert(kPrefillRows == 2 * kWarps, "each warp scores two query rows");

/* Shared-memory row widths in elements: queries padded with zeros to a multiple of 8 floats (two
 * float4 per step of the dot product); keys to an odd number of 16-byte units, so the lanes of a
 * warp, each reading 16 bytes of its own key at the same column, hit distinct banks. */
__host__ __device__ int prefill_query_stride(int row)
{
    return (row + 7) / 8 * 8;
}

__host__ __device__ int prefill_key_stride(int row)
{
    int units = (row + 7) / 8;
    return (units % 2 ? units : units + 1) * 8;
}

size_t prefill_shared_bytes(int row)
{
    return (size_t)kPrefillKeys * prefill_key_stride(row) * sizeof(uint16_t) +
           ((size_t)kPrefillRows * prefill_query_stride(row) + kPrefillKeys * kPrefillRows + 3 * kPrefillRows) *
               sizeof(float);
}

/* sum += q[0..8) . the 8 fp16 values of key (fmaf: one rounding per term, like the sums the
 * tolerance against the CPU's separately rounded products already allows) */
__device__ __forceinline__ float dot8(float sum, const float *q, uint4 key)
{
    float4 a = *reinterpret_cast<const float4 *>(q), b = *reinterpret_cast<const float4 *>(q + 4);
    sum = fmaf(a.x, half_low(key.x), sum);
    sum = fmaf(a.y, half_high(key.x), sum);
    sum = fmaf(a.z, half_low(key.y), sum);
    sum = fmaf(a.w, half_high(key.y), sum);
    sum = fmaf(b.x, half_low(key.z), sum);
    sum = fmaf(b.y, half_high(key.z), sum);
    sum = fmaf(b.z, half_low(key.w), sum);
    sum = fmaf(b.w, half_high(key.w), sum);
    return sum;
}

/* One query row's online softmax over a chunk, in one warp (lane = key; every lane keeps the
 * same copy of the row's running max and sum): returns this lane's probability, and the factor
 * the row's accumulator is rescaled by. A row that has seen no visible key yet keeps max -inf,
 * sum 0 and factor 1. */
__device__ __forceinline__ float softmax_fold(float score, bool visible, float *max_state, float *sum_state,
                                              float *factor)
{
    float chunk_max = warp_max(visible ? score : -INFINITY);
    float new_max = fmaxf(*max_state, chunk_max);
    float p = 0.0f;
    *factor = 1.0f;
    if (new_max != -INFINITY) {
        *factor = expf(*max_state - new_max);
        p = visible ? expf(score - new_max) : 0.0f;
    }
    *sum_state = *sum_state * *factor + warp_sum(p);
    *max_state = new_max;
    return p;
}

/* Grid: x = the block of rows, y = the part of the sequence. kCols latent columns per thread
 * (kThreads * kCols >= kv_lora): the accumulators [kPrefillRows][kCols] stay in registers; with
 * two columns (kv_lora <= 512) they fit the 128 registers of two blocks per multiprocessor. */
template <int kCols>
__global__ void __launch_bounds__(kThreads, kCols == 2 ? 2 : 1)
    mla_prefill_kernel(const float *q_latent, const float *q, int heads, int kv_lora, int rope, int nope,
                       float softmax_scale, const uint8_t *cache, int fp8, const int *pos, int tokens, int parts,
                       float *partials, float *o_latent)
{
    extern __shared__ uint4 prefill_shared[];
    const int row = kv_lora + rope, q_width = nope + rope;
    const int q_stride = prefill_query_stride(row), k_stride = prefill_key_stride(row);
    uint16_t *keys = reinterpret_cast<uint16_t *>(prefill_shared);            /* [kPrefillKeys][k_stride] */
    float *query = reinterpret_cast<float *>(keys + kPrefillKeys * k_stride);  /* [kPrefillRows][q_stride] */
    float *probs = query + kPrefillRows * q_stride;                            /* [kPrefillKeys][kPrefillRows] */
    float *factor = probs + kPrefillKeys * kPrefillRows;                       /* [kPrefillRows] */
    float *row_max = factor + kPrefillRows;                                    /* [kPrefillRows] */
    float *row_sum = row_max + kPrefillRows;                                   /* [kPrefillRows] */

    const long total_rows = (long)tokens * heads, row0 = (long)blockIdx.x * kPrefillRows;
    const int rows_here = total_rows - row0 < kPrefillRows ? (int)(total_rows - row0) : kPrefillRows;
    const int part = blockIdx.y;
    const long first_pos = *pos;

    for (int i = threadIdx.x; i < kPrefillRows * q_stride; i += kThreads) {
        int r = i / q_stride, c = i % q_stride;
        size_t global_row = (size_t)(row0 + r);
        float value = 0.0f;
        if (r < rows_here && c < row)
            value = c < kv_lora ? q_latent[global_row * kv_lora + c] : q[global_row * q_width + nope + (c - kv_lora)];
        query[i] = value;
    }
    /* key columns past the row are read by the last 8-wide step of the scores: zero, never staged */
    const int key_pad = k_stride - row;
    for (int i = threadIdx.x; i < kPrefillKeys * key_pad; i += kThreads)
        keys[(i / key_pad) * k_stride + row + i % key_pad] = 0;

    /* the block's keys: [0, position of its last token]; this part's share of them in chunks */
    const long last_token = (row0 + rows_here - 1) / heads;
    const long n_keys = first_pos + last_token + 1;
    const long chunks = (n_keys + kPrefillKeys - 1) / kPrefillKeys;
    const long per_part = (chunks + parts - 1) / parts;
    const long chunk_begin = (long)part * per_part;
    const long chunk_end = chunk_begin + per_part < chunks ? chunk_begin + per_part : chunks;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = 2 * warp, r1 = r0 + 1;
    /* each of the warp's rows sees keys up to its token's position (-1: a row past the step) */
    const long last0 = r0 < rows_here ? first_pos + (row0 + r0) / heads : -1;
    const long last1 = r1 < rows_here ? first_pos + (row0 + r1) / heads : -1;
    float max0 = -INFINITY, max1 = -INFINITY, sum0 = 0.0f, sum1 = 0.0f;
    const int col0 = threadIdx.x * kCols;
    float acc[kPrefillRows][kCols];
#pragma unroll
    for (int r = 0; r < kPrefillRows; r++)
#pragma unroll
        for (int k = 0; k < kCols; k++)
            acc[r][k] = 0.0f;

    for (long ch = chunk_begin; ch < chunk_end; ch++) {
        const long first = ch * kPrefillKeys;
        const int n = n_keys - first < kPrefillKeys ? (int)(n_keys - first) : kPrefillKeys;
        __syncthreads(); /* the previous chunk's keys and probabilities are no longer read */
        const uint16_t *source = reinterpret_cast<const uint16_t *>(cache) + (size_t)first * row;
        if (fp8) {
            size_t row_bytes = kv_row_bytes(KV_CACHE_FP8, kv_lora, rope);
            for (int i = threadIdx.x; i < n * row; i += kThreads)
                keys[(i / row) * k_stride + i % row] = fp8_row_half(cache, row_bytes, first + i / row, i % row, kv_lora);
        } else if (row % 8 == 0) { /* rows of whole 16-byte units: the cache and the staged rows are 16-byte aligned */
            const int units = row / 8;
            const uint4 *from = reinterpret_cast<const uint4 *>(source);
            for (int i = threadIdx.x; i < n * units; i += kThreads)
                *reinterpret_cast<uint4 *>(keys + (i / units) * k_stride + (i % units) * 8) = from[i];
        } else {
            for (int i = threadIdx.x; i < n * row; i += kThreads)
                keys[(i / row) * k_stride + i % row] = source[i];
        }
        __syncthreads();
        /* scores of the warp's two rows against the lane's key, then their online softmax */
        {
            const uint16_t *key = keys + lane * k_stride;
            const float *qa = query + r0 * q_stride, *qb = query + r1 * q_stride;
            float dot0 = 0.0f, dot1 = 0.0f;
            for (int c = 0; c < q_stride; c += 8) {
                uint4 packed = *reinterpret_cast<const uint4 *>(key + c);
                dot0 = dot8(dot0, qa + c, packed);
                dot1 = dot8(dot1, qb + c, packed);
            }
            const long key_pos = first + lane;
            float f0, f1;
            float p0 = softmax_fold(dot0 * softmax_scale, lane < n && key_pos <= last0, &max0, &sum0, &f0);
            float p1 = softmax_fold(dot1 * softmax_scale, lane < n && key_pos <= last1, &max1, &sum1, &f1);
            probs[lane * kPrefillRows + r0] = p0;
            probs[lane * kPrefillRows + r1] = p1;
            if (lane == 0) {
                factor[r0] = f0;
                factor[r1] = f1;
            }
        }
        __syncthreads();
        /* acc[r][c] = acc[r][c] * factor[r] + sum_j p[j][r] * latent_j[c] */
        if (col0 < kv_lora) {
#pragma unroll
            for (int r = 0; r < kPrefillRows; r++) {
                float f = factor[r];
#pragma unroll
                for (int k = 0; k < kCols; k++)
                    acc[r][k] *= f;
            }
            for (int j = 0; j < n; j++) {
                float latent[kCols];
                staged_cols<kCols>(keys + j * k_stride + col0, latent);
                const float4 *p = reinterpret_cast<const float4 *>(probs + j * kPrefillRows);
#pragma unroll
                for (int quad = 0; quad < kPrefillRows / 4; quad++) {
                    float4 pq = p[quad];
                    float pr[4] = {pq.x, pq.y, pq.z, pq.w};
#pragma unroll
                    for (int i = 0; i < 4; i++)
#pragma unroll
                        for (int k = 0; k < kCols; k++)
                            acc[quad * 4 + i][k] = fmaf(pr[i], latent[k], acc[quad * 4 + i][k]);
                }
            }
        }
    }
    if (lane == 0) {
        row_max[r0] = max0;
        row_sum[r0] = sum0;
        row_max[r1] = max1;
        row_sum[r1] = sum1;
    }
    __syncthreads();
    if (col0 >= kv_lora)
        return;
    const size_t stride = (size_t)kv_lora + 2;
#pragma unroll
    for (int r = 0; r < kPrefillRows; r++) {
        if (r >= rows_here)
            continue;
        size_t global_row = (size_t)(row0 + r);
        if (parts == 1) {
            float inverse = 1.0f / row_sum[r];
            float *out = o_latent + global_row * kv_lora;
#pragma unroll
            for (int k = 0; k < kCols; k++)
                if (col0 + k < kv_lora)
                    out[col0 + k] = acc[r][k] * inverse;
        } else {
            size_t token = global_row / heads, head = global_row % heads;
            float *out = partials + ((token * parts + part) * heads + head) * stride;
            if (threadIdx.x == 0) {
                out[0] = row_max[r];
                out[1] = row_sum[r];
            }
#pragma unroll
            for (int k = 0; k < kCols; k++)
                if (col0 + k < kv_lora)
                    out[2 + col0 + k] = acc[r][k];
        }
    }
}

template <int kCols>
int prefill_launch(const float *q_latent, const float *q, int heads, int kv_lora, int rope, int nope,
                   float softmax_scale, const uint8_t *cache, int fp8, const int *pos, int tokens, int parts,
                   float *partials, float *o_latent, cudaStream_t stream)
{
    size_t shared = prefill_shared_bytes(kv_lora + rope);   /* above 48 KiB: mla_attention_setup_cuda */
    long blocks = ((long)tokens * heads + kPrefillRows - 1) / kPrefillRows;
    dim3 grid((unsigned)blocks, (unsigned)parts);
    mla_prefill_kernel<kCols><<<grid, kThreads, shared, stream>>>(q_latent, q, heads, kv_lora, rope, nope,
                                                                 softmax_scale, cache, fp8, pos, tokens, parts,
                                                                 partials, o_latent);
    return (int)cudaGetLastError();
}

size_t partial_shared_bytes(int kv_lora, int rope)
{
    size_t stride = (size_t)decode_row_stride(kv_lora + rope);
    return (kHeadsPerBlock * stride + kHeadsPerBlock * kChunk + kHeadsPerBlock) * sizeof(float) +
           kChunk * stride * sizeof(uint16_t);
}

/* One launch of the decode kernel over `queries` queries: two columns a thread up to kv_lora
 * 512, four above. */
int partial_launch(dim3 grid, size_t shared, cudaStream_t stream, const float *q_latent, size_t latent_stride,
                   const float *q_pe, size_t pe_stride, int heads, int kv_lora, int rope, float softmax_scale,
                   const uint8_t *cache, int fp8, const int *pos, int period, int dcp, int member, int splits,
                   float *partials)
{
    if (kv_lora <= kThreads * 2)
        mla_partial_kernel<2><<<grid, kThreads, shared, stream>>>(q_latent, latent_stride, q_pe, pe_stride, heads,
                                                                 kv_lora, rope, softmax_scale, cache, fp8, pos, period,
                                                                 dcp, member, splits, partials);
    else
        mla_partial_kernel<4><<<grid, kThreads, shared, stream>>>(q_latent, latent_stride, q_pe, pe_stride, heads,
                                                                 kv_lora, rope, softmax_scale, cache, fp8, pos, period,
                                                                 dcp, member, splits, partials);
    return (int)cudaGetLastError();
}

/* Raises the decode kernels' dynamic shared memory limit to `bytes`. */
cudaError_t partial_shared_limit(int bytes)
{
    cudaError_t status = cudaFuncSetAttribute(mla_partial_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (status == cudaSuccess)
        status = cudaFuncSetAttribute(mla_partial_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    return status;
}

} // namespace

extern "C" size_t mla_decode_partial_floats(int splits, int heads, int kv_lora)
{
    return (size_t)splits * (size_t)heads * ((size_t)kv_lora + 2);
}

extern "C" int mla_decode_cuda(const float *q_latent, const float *q, int heads, int kv_lora, int rope, int nope,
                               float softmax_scale, const void *cache, kv_cache_format cache_format,
                               const int *pos, int splits, float *partials, float *o_latent, int tokens, void *stream)
{
    if (tokens <= 0)
        return 0;
    if (heads <= 0 || splits <= 0 || kv_lora > kThreads * kMaxLatentPerThread || splits > kMaxMergeParts ||
        tokens > 65535 || (cache_format == KV_CACHE_FP8 && kv_lora % 2))
        return (int)cudaErrorInvalidValue;
    size_t shared = partial_shared_bytes(kv_lora, rope);    /* above 48 KiB: mla_attention_setup_cuda */
    dim3 grid((unsigned)tokens, (unsigned)((heads + kHeadsPerBlock - 1) / kHeadsPerBlock), (unsigned)splits);
    int status = partial_launch(grid, shared, (cudaStream_t)stream, q_latent, (size_t)kv_lora, q + nope,
                                (size_t)(nope + rope), heads, kv_lora, rope, softmax_scale,
                                static_cast<const uint8_t *>(cache), cache_format == KV_CACHE_FP8, pos, tokens, 1, 0,
                                splits, partials);
    if (status)
        return status;
    size_t part = ATTENTION_PART_FLOATS(kv_lora);
    return merge_launch(partials, splits, (size_t)splits * heads * part, (size_t)heads * part, heads, kv_lora, o_latent,
                        pos, tokens, (cudaStream_t)stream);
}

extern "C" size_t mla_attention_shared_bytes(int kv_lora, int rope)
{
    size_t decode = partial_shared_bytes(kv_lora, rope), prefill = prefill_shared_bytes(kv_lora + rope);
    return decode > prefill ? decode : prefill;
}

extern "C" int mla_attention_setup_cuda(int kv_lora, int rope)
{
    /* never below the 48 KiB every kernel gets without asking: smaller rows lower no limit */
    int floor = 48 * 1024, decode = (int)partial_shared_bytes(kv_lora, rope),
        prefill = (int)prefill_shared_bytes(kv_lora + rope);
    decode = decode > floor ? decode : floor;
    prefill = prefill > floor ? prefill : floor;
    cudaError_t status = partial_shared_limit(decode);
    if (status == cudaSuccess)
        status = cudaFuncSetAttribute(mla_prefill_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, prefill);
    if (status == cudaSuccess)
        status = cudaFuncSetAttribute(mla_prefill_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, prefill);
    return (int)status;
}

extern "C" size_t mla_prefill_partial_floats(int parts, int tokens, int heads, int kv_lora)
{
    return parts > 1 ? (size_t)parts * (size_t)tokens * (size_t)heads * ((size_t)kv_lora + 2) : 0;
}

extern "C" int mla_prefill_cuda(const float *q_latent, const float *q, int heads, int kv_lora, int rope, int nope,
                                float softmax_scale, const void *cache, kv_cache_format cache_format,
                                const int *pos, int parts, float *partials, float *o_latent, int tokens, void *stream)
{
    if (tokens <= 0)
        return 0;
    if (heads <= 0 || parts <= 0 || parts > 65535 || tokens > 65535 || kv_lora <= 0 || rope < 0 ||
        kv_lora > kThreads * 4 || (long)tokens * heads > 0x7FFFFFFFL - kPrefillRows || parts > kMaxMergeParts ||
        (cache_format == KV_CACHE_FP8 && kv_lora % 2))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    const uint8_t *bytes = static_cast<const uint8_t *>(cache);
    int fp8 = cache_format == KV_CACHE_FP8;
    int status = kv_lora <= kThreads * 2
                     ? prefill_launch<2>(q_latent, q, heads, kv_lora, rope, nope, softmax_scale, bytes, fp8, pos,
                                         tokens, parts, partials, o_latent, s)
                     : prefill_launch<4>(q_latent, q, heads, kv_lora, rope, nope, softmax_scale, bytes, fp8, pos,
                                         tokens, parts, partials, o_latent, s);
    if (status || parts == 1)
        return status;
    size_t part = ATTENTION_PART_FLOATS(kv_lora);
    return merge_launch(partials, parts, (size_t)parts * heads * part, (size_t)heads * part, heads, kv_lora, o_latent,
                        nullptr, tokens, s);
}

/* ---- decode context parallelism (kernels/kv_shard_math.h): a member's partial attention over
 * the positions it stores, for the whole group's queries, and the merge of the group's parts ---- */

namespace {

/* q_abs[row] = [q_latent[row] | q_pe of q[row]], row = token * heads + head. */
__global__ void __launch_bounds__(kThreads) mla_query_pack_kernel(const float *q_latent, const float *q, int kv_lora,
                                                                  int nope, int rope, float *q_abs)
{
    size_t row = blockIdx.x, width = (size_t)kv_lora + rope;
    for (int c = threadIdx.x; c < kv_lora + rope; c += kThreads)
        q_abs[row * width + c] = c < kv_lora ? q_latent[row * kv_lora + c]
                                             : q[row * ((size_t)nope + rope) + nope + (c - kv_lora)];
}

} // namespace

extern "C" int mla_query_pack_cuda(const float *q_latent, const float *q, int heads, int kv_lora, int nope, int rope,
                                   float *q_abs, int tokens, void *stream)
{
    if (tokens <= 0 || heads <= 0)
        return 0;
    mla_query_pack_kernel<<<(unsigned)(tokens * heads), kThreads, 0, (cudaStream_t)stream>>>(q_latent, q, kv_lora, nope,
                                                                                          rope, q_abs);
    return (int)cudaGetLastError();
}

extern "C" int mla_decode_shard_cuda(const float *q_group, int queries, int period, int heads, int kv_lora, int rope,
                                     float softmax_scale, const void *cache, kv_cache_format cache_format,
                                     const int *pos, int dcp, int member, int splits, float *partials, float *parts,
                                     void *stream)
{
    if (queries <= 0)
        return 0;
    if (heads <= 0 || splits <= 0 || period <= 0 || dcp <= 0 || member < 0 || member >= dcp ||
        kv_lora > kThreads * kMaxLatentPerThread || splits > kMaxMergeParts || queries > 65535 ||
        (cache_format == KV_CACHE_FP8 && kv_lora % 2))
        return (int)cudaErrorInvalidValue;
    size_t shared = partial_shared_bytes(kv_lora, rope);
    if (shared > 48 * 1024) {
        cudaError_t status = partial_shared_limit((int)shared);
        if (status != cudaSuccess)
            return (int)status;
    }
    size_t width = (size_t)kv_lora + rope;
    dim3 grid((unsigned)queries, (unsigned)((heads + kHeadsPerBlock - 1) / kHeadsPerBlock), (unsigned)splits);
    int status = partial_launch(grid, shared, (cudaStream_t)stream, q_group, width, q_group + kv_lora, width, heads,
                                kv_lora, rope, softmax_scale, static_cast<const uint8_t *>(cache),
                                cache_format == KV_CACHE_FP8, pos, period, dcp, member, splits, partials);
    if (status)
        return status;
    dim3 combine_grid((unsigned)heads, (unsigned)queries, (unsigned)((kv_lora + kMergeThreads - 1) / kMergeThreads));
    mla_part_combine_kernel<<<combine_grid, kMergeThreads, 2 * (size_t)splits * sizeof(float), (cudaStream_t)stream>>>(
        partials, splits, heads, kv_lora, pos, period, dcp, member, parts);
    return (int)cudaGetLastError();
}

extern "C" int mla_merge_shard_parts_cuda(const float *parts, int dcp, int heads, int kv_lora, float *o_latent,
                                          int tokens, void *stream)
{
    if (tokens <= 0)
        return 0;
    if (heads <= 0 || dcp <= 0 || tokens > 65535)
        return (int)cudaErrorInvalidValue;
    size_t part = ATTENTION_PART_FLOATS(kv_lora);
    return merge_launch(parts, dcp, (size_t)heads * part, (size_t)tokens * heads * part, heads, kv_lora, o_latent,
                        nullptr, tokens, (cudaStream_t)stream);
}
