/* ops (CUDA): the small kernels of a step (RMSNorm, residual add, the local all-reduce, the
 * latent/rope/cache tail of the MLA projections, MoE routing, the expert MLPs chosen on the
 * device, per slot or grouped by expert, and their weighted sum). Each mirrors its CPU
 * counterpart's order of operations, with the per-element math of kernels/forward_math.h; the
 * library is compiled without fused multiply-add contraction so those helpers round as they do
 * on the CPU. */
#include <float.h>
#include <math.h>

#include "kernels/cuda/allreduce_core.cuh"
#include "kernels/cuda/forward.h"
#include "kernels/cuda/gemv_core.cuh"
#include "kernels/cuda/launch_grid.h"
#include "kernels/cuda/norm_core.cuh"
#include "kernels/cuda/rope_core.cuh"
#include "kernels/forward_math.h"
#include "kernels/kv_format.h"
#include "kernels/kv_shard_math.h"

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(float *out, const float *x, const float *weight, int n,
                                                           float eps)
{
    norm_block_rmsnorm(out + (size_t)blockIdx.x * n, x + (size_t)blockIdx.x * n, weight, n, eps);
}

/* h += delta, then out = rmsnorm(h) * weight: the residual add and the next block's norm in one
 * launch (the same operations as add_kernel then rmsnorm_kernel). */
/* flag not NULL: *flag = max(*flag, code) when any h is NaN or infinite after the add
 * (nonfinite_flag_kernel's check in the same launch). */
__global__ void __launch_bounds__(kThreads) residual_rmsnorm_kernel(float *h, const float *delta, float *out,
                                                                    const float *weight, int n, float eps, int code,
                                                                    int *flag)
{
    float *row = h + (size_t)blockIdx.x * n;
    const float *add = delta + (size_t)blockIdx.x * n;
    float *dst = out + (size_t)blockIdx.x * n;
    float squares = 0.0f;
    int bad = 0;
    for (int i = threadIdx.x; i < n; i += kThreads) {
        float value = row[i] + add[i];
        row[i] = value;
        squares += value * value;
        bad |= !isfinite(value);
    }
    if (flag && __syncthreads_or(bad) && threadIdx.x == 0)
        atomicMax(flag, code);
    float inverse_rms = norm_block_inverse_rms(squares, n, eps);
    for (int i = threadIdx.x; i < n; i += kThreads)
        dst[i] = rmsnorm_element(row[i], inverse_rms, weight[i]);
}

__global__ void add_kernel(float *h, const float *delta, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        h[i] += delta[i];
}

__global__ void allreduce_local_kernel(rank_buffers bufs, int ranks, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float sum = bufs.bufs[0][i];
        for (int r = 1; r < ranks; r++)
            sum += bufs.bufs[r][i];
        for (int r = 0; r < ranks; r++)
            bufs.bufs[r][i] = sum;
    }
}

/* A cache value as fp16, saturated to +-65504 (kernels/half_math.h), the saturations counted. */
__device__ __forceinline__ uint16_t cache_half(float value, unsigned *clamps)
{
    if (clamps && half_math_overflows(value))
        atomicAdd(clamps, 1u);
    return half_from_float_saturate(value);
}

/* flag = max(flag, code) when any of values[0..n) is NaN or infinite. */
__global__ void nonfinite_flag_kernel(const float *values, size_t n, int code, int *flag)
{
    int bad = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        bad |= !isfinite(values[i]);
    if (__syncthreads_or(bad) && threadIdx.x == 0)
        atomicMax(flag, code);
}

/* The MLA projections' tail for one token at `position`, by the whole block (kv and q: that
 * token's rows; heads 0: no q_pe to rope), its cache row written to `row` (the position's slot,
 * or with --dcp a scratch row where another member owns it: every clamp is still counted). */
__device__ void kv_rope_cache_row(float *kv, int kv_lora, int rope, const float *kv_norm, float eps, float *q,
                                  int heads, int nope, const double *inv_freq, double cos_sin_scale, long position,
                                  uint8_t *row, int fp8, unsigned *clamps)
{
    __shared__ float cos_table[128], sin_table[128];
    uint16_t *entry = reinterpret_cast<uint16_t *>(row); /* fp16: [kv_lora | rope] */
    uint16_t *k_pe_out = fp8 ? reinterpret_cast<uint16_t *>(row + kv_lora + 4 * (size_t)kv_fp8_blocks(kv_lora))
                             : entry + kv_lora;
    for (int i = threadIdx.x; i < rope / 2; i += kThreads)
        rope_cos_sin_f32(position, inv_freq[i], (float)cos_sin_scale, &cos_table[i], &sin_table[i]);
    float squares = 0.0f;
    for (int i = threadIdx.x; i < kv_lora; i += kThreads)
        squares += kv[i] * kv[i];
    float inverse_rms = norm_block_inverse_rms(squares, kv_lora, eps);
    for (int i = threadIdx.x; i < kv_lora; i += kThreads) {
        float value = rmsnorm_element(kv[i], inverse_rms, kv_norm[i]);
        kv[i] = value;
        if (!fp8)
            entry[i] = cache_half(value, clamps);
    }
    __syncthreads(); /* cos/sin tables, and the normalised latent for the fp8 block scales */
    if (fp8) {
        /* one thread per block of KV_FP8_BLOCK values finds its scale (the CPU's arithmetic:
         * kv_fp8_block_scale), then every thread encodes its values */
        __shared__ float block_scale[1024 / KV_FP8_BLOCK];
        for (int b = threadIdx.x; b < kv_fp8_blocks(kv_lora); b += kThreads) {
            int first = b * KV_FP8_BLOCK, n = kv_lora - first < KV_FP8_BLOCK ? kv_lora - first : KV_FP8_BLOCK;
            block_scale[b] = kv_fp8_block_scale(kv + first, n);
            memcpy(row + kv_lora + 4 * (size_t)b, &block_scale[b], sizeof(float));
        }
        __syncthreads();
        for (int i = threadIdx.x; i < kv_lora; i += kThreads) {
            float scale = block_scale[i / KV_FP8_BLOCK];
            row[i] = kv_e4m3_from_float(kv[i] / scale);
            if (clamps && kv_fp8_reads_saturated(row[i], scale))
                atomicAdd(clamps, 1u);
        }
    }
    float *k_pe = kv + kv_lora;
    for (int i = threadIdx.x; i < rope / 2; i += kThreads) {
        rope_rotate_pair(&k_pe[2 * i], &k_pe[2 * i + 1], cos_table[i], sin_table[i]);
        k_pe_out[2 * i] = cache_half(k_pe[2 * i], clamps);
        k_pe_out[2 * i + 1] = cache_half(k_pe[2 * i + 1], clamps);
    }
    int q_width = nope + rope;
    for (int i = threadIdx.x; i < heads * (rope / 2); i += kThreads) {
        int head = i / (rope / 2), pair = i % (rope / 2);
        float *q_pe = q + (size_t)head * q_width + nope;
        rope_rotate_pair(&q_pe[2 * pair], &q_pe[2 * pair + 1], cos_table[pair], sin_table[pair]);
    }
}

__global__ void __launch_bounds__(kThreads) kv_rope_cache_kernel(float *kv, int kv_lora, int rope,
                                                                 const float *kv_norm, float eps, float *q, int heads,
                                                                 int nope, const double *inv_freq,
                                                                 double cos_sin_scale, const int *pos,
                                                                 uint8_t *cache, int fp8, int dcp, int member,
                                                                 uint8_t *foreign, unsigned *clamps)
{
    long position = (long)*pos + blockIdx.x;
    size_t row_bytes = kv_row_bytes(fp8 ? KV_CACHE_FP8 : KV_CACHE_FP16, kv_lora, rope);
    uint8_t *row = kv_shard_owner(position, dcp) == member ? cache + (size_t)kv_shard_slot(position, dcp) * row_bytes
                                                           : foreign + (size_t)blockIdx.x * row_bytes;
    kv_rope_cache_row(kv + (size_t)blockIdx.x * (kv_lora + rope), kv_lora, rope, kv_norm, eps,
                      q + (size_t)blockIdx.x * heads * (nope + rope), heads, nope, inv_freq, cos_sin_scale, position,
                      row, fp8, clamps);
}

/* shared memory the GEMVs of one token stage their activations in (hidden 7168 in one tile) */
constexpr int kGemvTailStageFloats = 8 * kGemvStageFloatsPerToken;

/* 1 in the last of a grid's gridDim.x blocks (or row ranges) to get here, each after all its
 * stores (seen at system scope with `system`: its pushes to peers), so that block can run what
 * needs them all; *counter zero before and after. The whole block. */
__device__ int grid_last_block(unsigned *counter, bool system)
{
    __shared__ unsigned is_last;
    if (system)
        __threadfence_system();
    else
        __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!is_last)
        return 0;
    __threadfence();
    if (threadIdx.x == 0)
        *counter = 0;
    return 1;
}

/* The GEMV of one token over the rows of two matrices of the same K (blocks [0, w0_blocks)
 * take w0's rows into y0, the rest w1's into y1; w0_blocks = gridDim.x: w0 alone), K split
 * over blockIdx.y as linear_gemv_cuda splits it, with the same sums (a row's parts added in
 * split order by the last of its blocks, `partials` [row slots][GEMV_TAIL_MAX_SPLIT],
 * counters [gridDim.x], zero before and after). Returns 1 in the block that writes its row
 * range's y (the last of its split parts), after they are written. */
__device__ int gemv_rows_final(const weight_matrix &w0, const weight_matrix &w1, int w0_blocks, const float *x,
                               float *y0, float *y1, int lanes_per_row, int split, float *partials, unsigned *counters)
{
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int rows_per_warp = 32 / lanes_per_row, rows_per_block = kThreads / 32 * rows_per_warp;
    int sub = lane / lanes_per_row, group_lane = lane % lanes_per_row;
    int first = (int)blockIdx.x < w0_blocks;
    const weight_matrix &w = first ? w0 : w1;
    float *y = first ? y0 : y1;
    int in_block = warp * rows_per_warp + sub;
    int row = ((int)blockIdx.x - (first ? 0 : w0_blocks)) * rows_per_block + in_block;
    int slot = (int)blockIdx.x * rows_per_block + in_block; /* this row's place in partials */
    int chunks = gemv_row_chunks(w), per_split = (chunks + split - 1) / split, part = blockIdx.y;
    int c_begin = part * per_split, c_end = min(chunks, c_begin + per_split);
    __shared__ float4 stage[kGemvTailStageFloats / 4];
    float sum = gemv_row_partial_staged(w, row, row < w.rows, x, c_begin, c_end, group_lane, lanes_per_row,
                                        reinterpret_cast<float *>(stage), kGemvTailStageFloats);
    sum = gemv_group_sum(sum, lanes_per_row);
    float scale = gemv_row_scale(w);
    if (split == 1) {
        if (row < w.rows && group_lane == 0)
            y[row] = sum * scale;
        return 1;
    }
    __shared__ unsigned is_last;
    if (row < w.rows && group_lane == 0)
        partials[(size_t)slot * GEMV_TAIL_MAX_SPLIT + part] = sum;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        is_last = atomicAdd(&counters[blockIdx.x], 1u) == (unsigned)split - 1;
    __syncthreads();
    if (!is_last)
        return 0;
    __threadfence();
    if (row < w.rows && group_lane == 0) {
        float total = 0.0f;
        for (int i = 0; i < split; i++)
            total += __ldcg(&partials[(size_t)slot * GEMV_TAIL_MAX_SPLIT + i]);
        y[row] = total * scale;
    }
    if (threadIdx.x == 0)
        counters[blockIdx.x] = 0;
    return 1;
}

/* gemv_rows_final, then 1 in the block that finishes last, after every row is written, so that
 * block can run what needs them all in the same launch (counters [gridDim.x + 1]). */
__device__ int gemv_rows_then_last(const weight_matrix &w0, const weight_matrix &w1, int w0_blocks, const float *x,
                                   float *y0, float *y1, int lanes_per_row, int split, float *partials,
                                   unsigned *counters)
{
    return gemv_rows_final(w0, w1, w0_blocks, x, y0, y1, lanes_per_row, split, partials, counters) &&
           grid_last_block(&counters[gridDim.x], false);
}

/* A decode step's q_a and kv_a projections of x in one launch, then, in the last block to
 * finish, the tail that needs all of both: q_a = rmsnorm(q_a) and the latent/rope/cache row of
 * kv (kv_rope_cache_row without q_pe, which q_b has not produced yet). */
__global__ void __launch_bounds__(kThreads) qkv_a_kernel(weight_matrix wq, weight_matrix wkv, int q_blocks,
                                                         const float *x, float *q_a, float *kv, int lanes_per_row,
                                                         int split, float *partials, unsigned *counters,
                                                         mla_qkv_tail tail)
{
    if (!gemv_rows_then_last(wq, wkv, q_blocks, x, q_a, kv, lanes_per_row, split, partials, counters))
        return;
    norm_block_rmsnorm(q_a, q_a, tail.q_a_norm, wq.rows, tail.eps);
    kv_rope_cache_row(kv, tail.kv_lora, tail.rope, tail.kv_norm, tail.eps, nullptr, 0, 0, tail.inv_freq,
                      tail.cos_sin_scale, (long)*tail.pos,
                      static_cast<uint8_t *>(tail.cache) +
                          (size_t)*tail.pos * kv_row_bytes(tail.cache_format, tail.kv_lora, tail.rope),
                      tail.cache_format == KV_CACHE_FP8, tail.clamps);
}

/* The better of two candidates under the routing rank rule (kernels/moe_routing_math.h: larger
 * key, then lower index; taken keys and index -1 are no candidate). */
__device__ __forceinline__ void better_of(float *value, int *index, float other_value, int other_index)
{
    if (moe_rank_better(other_value, other_index, *value, *index)) {
        *value = other_value;
        *index = other_index;
    }
}

/* The block's arg-max of the untaken keys values[0..n) (the CPU's scan: the lowest index among
 * equals), -1 when all are taken. */
__device__ int block_arg_max(const float *values, int n, float *red_value, int *red_index)
{
    float best_value = 0.0f;
    int best_index = -1;
    for (int i = threadIdx.x; i < n; i += kThreads)
        better_of(&best_value, &best_index, values[i], i);
    for (int offset = 16; offset > 0; offset /= 2) {
        float v = __shfl_xor_sync(0xFFFFFFFFu, best_value, offset);
        int j = __shfl_xor_sync(0xFFFFFFFFu, best_index, offset);
        better_of(&best_value, &best_index, v, j);
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) {
        red_value[warp] = best_value;
        red_index[warp] = best_index;
    }
    __syncthreads();
    float value = 0.0f;
    int index = -1;
    for (int w = 0; w < kThreads / 32; w++)
        better_of(&value, &index, red_value[w], red_index[w]);
    return index;
}

/* One token's routing by the whole block (route_shared: moe_route_cuda's dynamic shared memory);
 * slot_table not NULL: [top_k + 1] the mlp_device table entries of its slots (1 + chosen[j],
 * then 0, the shared expert). */
__device__ void route_token(const moe_routing_config &c, const float *logits, const float *bias, int *chosen,
                            float *weights, int *slot_table, float *route_shared)
{
    int experts = c.experts, groups = c.n_group > 1 ? c.n_group : 1, group_size = experts / groups;
    float *score = route_shared;                    /* [experts] */
    float *key = score + experts;                   /* [experts] rank key of score + bias; taken once chosen */
    float *group_key = key + experts;               /* [groups] */
    float *chosen_weight = group_key + groups;      /* [top_k] */
    __shared__ float red_value[kThreads / 32];
    __shared__ int red_index[kThreads / 32];

    for (int e = threadIdx.x; e < experts; e += kThreads) {
        score[e] = moe_sigmoid(logits[e]);
        key[e] = moe_rank_key(score[e] + (bias ? bias[e] : 0.0f));
    }
    __syncthreads();
    if (groups > 1) {
        for (int g = threadIdx.x; g < groups; g += kThreads)
            group_key[g] = moe_rank_key(moe_group_score(key + (size_t)g * group_size, group_size));
        __syncthreads();
        if (threadIdx.x == 0) {
            /* the kept groups are marked taken in group_key, then the others' experts in key */
            for (int k = 0; k < c.topk_group && k < groups; k++) {
                int best = -1;
                for (int g = 0; g < groups; g++)
                    if (moe_rank_better(group_key[g], g, best >= 0 ? group_key[best] : 0.0f, best))
                        best = g;
                group_key[best] = MOE_RANK_TAKEN;
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < experts; e += kThreads)
            if (!moe_rank_is_taken(group_key[e / group_size]))
                key[e] = MOE_RANK_TAKEN;
        __syncthreads();
    }
    /* the config check guarantees topk_group * group_size >= top_k: an untaken expert is left */
    for (int k = 0; k < c.top_k; k++) {
        int best = block_arg_max(key, experts, red_value, red_index);
        if (threadIdx.x == 0) {
            chosen[k] = best;
            chosen_weight[k] = score[best];
            key[best] = MOE_RANK_TAKEN;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        moe_finish_weights(chosen_weight, c.top_k, c.norm_topk_prob, c.routed_scaling_factor);
        for (int k = 0; k < c.top_k; k++)
            weights[k] = chosen_weight[k];
        if (slot_table) {
            for (int k = 0; k < c.top_k; k++)
                slot_table[k] = 1 + chosen[k];
            slot_table[c.top_k] = 0;
        }
    }
}

__global__ void __launch_bounds__(kThreads) route_kernel(moe_routing_config c, const float *logits,
                                                         const float *bias, int *chosen, float *weights)
{
    extern __shared__ float route_shared[];
    route_token(c, logits + (size_t)blockIdx.x * c.experts, bias, chosen + (size_t)blockIdx.x * c.top_k,
                weights + (size_t)blockIdx.x * c.top_k, nullptr, route_shared);
}

/* A decode step's router GEMV (logits = router x, one token) and, in its last block, the
 * routing of route_kernel. One block per multiprocessor is all it needs: without saying so,
 * sm_90's ptxas held it to 32 registers and spilled (cuda_ptxas_report). */
__global__ void __launch_bounds__(kThreads, 1) router_route_kernel(weight_matrix router, const float *x, float *logits,
                                                                int lanes_per_row, int split, float *partials,
                                                                unsigned *counters, moe_routing_config c,
                                                                const float *bias, int *chosen, float *weights,
                                                                int *slot_table)
{
    extern __shared__ float route_shared[];
    if (gemv_rows_then_last(router, router, gridDim.x, x, logits, logits, lanes_per_row, split, partials, counters))
        route_token(c, logits, bias, chosen, weights, slot_table, route_shared);
}

/* What a decode kernel's last block runs after its output (kernels/cuda/allreduce.h
 * residual_epilogue): nothing, the residual add and norm of one rank, or the peer all-reduce
 * with them. The census (tests/emu/census_check.py) counts the launches named
 * <kPeerAllReduceNorm> as peer all-reduces. */
enum residual_kind { kNoEpilogue, kResidualNorm, kPeerAllReduceNorm };

/* A decode step's GEMV of one token (o_proj) as gemv_rows_then_last runs it, then the residual
 * epilogue in its last block. */
template <residual_kind kKind>
__global__ void __launch_bounds__(kThreads, 4) gemv_residual_kernel(weight_matrix w, const float *x, float *y,
                                                                     int lanes_per_row, int split, float *partials,
                                                                     unsigned *counters,
                                                                     const __grid_constant__ residual_epilogue e)
{
    if (!gemv_rows_final(w, w, gridDim.x, x, y, y, lanes_per_row, split, partials, counters))
        return;
    if (kKind == kPeerAllReduceNorm) {
        __syncthreads(); /* the block's rows of y are written: pushed as one contiguous range */
        int rows_per_block = kThreads / 32 * (32 / lanes_per_row), first_row = (int)blockIdx.x * rows_per_block;
        peer_push_range(e.peer, peer_next_epoch(e.peer), y + first_row, (size_t)first_row,
                        min(rows_per_block, w.rows - first_row));
    }
    if (grid_last_block(&counters[gridDim.x], kKind == kPeerAllReduceNorm))
        residual_epilogue_finish(e, y, w.rows);
}

constexpr int kMlpWarps = 8;

__global__ void __launch_bounds__(kMlpWarps * 32, 2) mlp_gate_up_kernel(const mlp_device *table, const int *index,
                                                                     int slots_per_input, const float *x, int hidden,
                                                                     int inter, float *act, int lanes_per_row)
{
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int sub = lane / lanes_per_row, group_lane = lane % lanes_per_row;
    int row = (blockIdx.x * kMlpWarps + warp) * (32 / lanes_per_row) + sub;
    int slot = blockIdx.y;
    const mlp_device *mlp = &table[index ? index[slot] : 0];
    const float *input = x + (size_t)(slot / slots_per_input) * hidden;
    const weight_matrix w[2] = {mlp->gate, mlp->up};
    float gate_scale = gemv_row_scale(w[0]), up_scale = gemv_row_scale(w[1]);
    __shared__ float4 stage[kGemvTailStageFloats / 4];
    float *staged = reinterpret_cast<float *>(stage);
    float sums[2][1] = {{0.0f}, {0.0f}};
    const float *xs[1] = {input};
    if (w[0].format == w[1].format && w[0].cols == w[1].cols) { /* one staging for both */
        gemv_rows_staged<1, 2>(w, row, row < inter, xs, 1, 0, gemv_row_chunks(w[0]), group_lane, lanes_per_row, sums,
                               staged, kGemvTailStageFloats);
    } else {
        sums[0][0] = gemv_row_partial_staged(w[0], row, row < inter, input, 0, gemv_row_chunks(w[0]), group_lane,
                                             lanes_per_row, staged, kGemvTailStageFloats);
        __syncthreads(); /* the gate's last tile is read */
        sums[1][0] = gemv_row_partial_staged(w[1], row, row < inter, input, 0, gemv_row_chunks(w[1]), group_lane,
                                             lanes_per_row, staged, kGemvTailStageFloats);
    }
    float gate = gemv_group_sum(sums[0][0], lanes_per_row);
    float up = gemv_group_sum(sums[1][0], lanes_per_row);
    if (row < inter && group_lane == 0)
        act[(size_t)slot * inter + row] = silu_gate_element(gate * gate_scale, up * up_scale);
}

/* This block's rows of slot blockIdx.y through expert's down projection into y [slots][hidden]
 * (the body of mlp_down_kernel and mlp_down_combine_kernel). */
__device__ __forceinline__ void down_rows(const mlp_device *table, int expert, const float *act, int hidden,
                                          int inter, float *y, int lanes_per_row)
{
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int sub = lane / lanes_per_row, group_lane = lane % lanes_per_row;
    int row = (blockIdx.x * kMlpWarps + warp) * (32 / lanes_per_row) + sub;
    int slot = blockIdx.y;
    const weight_matrix down = table[expert].down;
    /* an expert's down slice is short (256 at TP 8); a longer one (the dense MLP) takes tiles */
    __shared__ float4 stage[kGemvStageFloatsPerToken];
    float sum = gemv_row_partial_staged(down, row, row < hidden, act + (size_t)slot * inter, 0, gemv_row_chunks(down),
                                        group_lane, lanes_per_row, reinterpret_cast<float *>(stage),
                                        4 * kGemvStageFloatsPerToken);
    sum = gemv_group_sum(sum, lanes_per_row);
    if (row < hidden && group_lane == 0)
        y[(size_t)slot * hidden + row] = sum * gemv_row_scale(down);
}

__global__ void __launch_bounds__(kMlpWarps * 32, 2) mlp_down_kernel(const mlp_device *table, const int *index,
                                                                  const float *act, int hidden, int inter, float *y,
                                                                  int lanes_per_row)
{
    down_rows(table, index ? index[blockIdx.y] : 0, act, hidden, inter, y, lanes_per_row);
}

/* One token's slots (k routed experts, then the shared expert when there is one; index NULL:
 * table[0] alone, k = 0) through down (mlp_down_kernel's rows and sums into y [slots][hidden]),
 * and the last of a row range's blocks to finish adds them up for its rows as combine_kernel
 * does: out[r] = 0 + shared[r], then + weights[j] * routed[j][r] in ascending expert index
 * (counters [gridDim.x], zero before and after); with an epilogue, the last of the row ranges
 * runs it on out (counters [gridDim.x + 1]), the peer kind pushing each out[r] as it is summed. */
template <residual_kind kKind>
__global__ void __launch_bounds__(kMlpWarps * 32, 2) mlp_down_combine_kernel(
    const mlp_device *table, const int *index, const float *act, int hidden, int inter, float *y, int lanes_per_row,
    const int *chosen, const float *weights, int top_k, float *out, unsigned *counters,
    const __grid_constant__ residual_epilogue e)
{
    constexpr bool peer = kKind == kPeerAllReduceNorm;
    int rows_per_block = kMlpWarps * (32 / lanes_per_row);
    down_rows(table, index ? index[blockIdx.y] : 0, act, hidden, inter, y, lanes_per_row);
    __shared__ unsigned is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        is_last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1;
    __syncthreads();
    if (!is_last)
        return;
    __threadfence();
    unsigned epoch = peer ? peer_next_epoch(e.peer) : 0u;
    int shared = (int)gridDim.y > top_k;
    for (int r = blockIdx.x * rows_per_block + threadIdx.x; r < hidden && r < (int)(blockIdx.x + 1) * rows_per_block;
         r += kMlpWarps * 32) {
        float total = 0.0f;
        if (shared)
            total += 1.0f * __ldcg(&y[(size_t)top_k * hidden + r]);
        int last = -1;
        for (int done = 0; done < top_k; done++) {
            int next = -1;
            for (int k = 0; k < top_k; k++)
                if (chosen[k] > last && (next < 0 || chosen[k] < chosen[next]))
                    next = k;
            total += weights[next] * __ldcg(&y[(size_t)next * hidden + r]);
            last = chosen[next];
        }
        out[r] = total;
        if (peer)
            peer_push_value(e.peer, epoch, (size_t)r, total);
    }
    if (threadIdx.x == 0)
        counters[blockIdx.x] = 0;
    /* this row range is summed (and pushed); the last of the gridDim.x ranges runs the epilogue */
    if (kKind != kNoEpilogue && grid_last_block(&counters[gridDim.x], peer))
        residual_epilogue_finish(e, out, hidden);
}

/* Slots (token t's j-th choice is slot t * top_k + j) grouped by expert: expert e's slots are
 * order[offsets[e] .. offsets[e + 1]), ascending. One block; every expert's thread scans all
 * slots, so the grouping does not depend on timing. */
__global__ void __launch_bounds__(1024) moe_group_kernel(const int *chosen, int slots, int experts, int *offsets,
                                                         int *order)
{
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        int count = 0;
        for (int s = 0; s < slots; s++)
            count += chosen[s] == e;
        offsets[e + 1] = count;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        offsets[0] = 0;
        for (int e = 0; e < experts; e++)
            offsets[e + 1] += offsets[e];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        int at = offsets[e];
        for (int s = 0; s < slots; s++)
            if (chosen[s] == e)
                order[at++] = s;
    }
}

constexpr int kGroupTokens = 8;
constexpr int kGroupStageFloats = kGroupTokens * kGemvStageFloatsPerToken;

/* Expert blockIdx.y's gate/up rows over all its slots, kGroupTokens slots per pass, so each
 * expert's weights are read once per step (from L2 after the first pass). */
__global__ void __launch_bounds__(kMlpWarps * 32, 1) mlp_gate_up_grouped_kernel(
    const mlp_device *table, const int *offsets, const int *order, int slots_per_input, const float *x, int hidden,
    int inter, float *act, int lanes_per_row)
{
    int expert = blockIdx.y, begin = offsets[expert], end = offsets[expert + 1];
    if (begin == end)
        return;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int sub = lane / lanes_per_row, group_lane = lane % lanes_per_row;
    int row = (blockIdx.x * kMlpWarps + warp) * (32 / lanes_per_row) + sub;
    const weight_matrix gate = table[expert].gate, up = table[expert].up;
    float gate_scale = gemv_row_scale(gate), up_scale = gemv_row_scale(up);
    __shared__ float4 stage[kGroupStageFloats / 4];
    for (int first = begin; first < end; first += kGroupTokens) {
        if (first != begin)
            __syncthreads(); /* the previous pass's last tile is read */
        int n = end - first < kGroupTokens ? end - first : kGroupTokens;
        const float *xs[kGroupTokens];
        float g[kGroupTokens], u[kGroupTokens];
#pragma unroll
        for (int t = 0; t < kGroupTokens; t++)
            xs[t] = x + (size_t)(order[first + (t < n ? t : n - 1)] / slots_per_input) * hidden;
        {
            float staged[1][kGroupTokens];
#pragma unroll
            for (int t = 0; t < kGroupTokens; t++)
                staged[0][t] = 0.0f;
            gemv_rows_staged<kGroupTokens, 1>(&gate, row, row < inter, xs, n, 0, gemv_row_chunks(gate), group_lane,
                                              lanes_per_row, staged, reinterpret_cast<float *>(stage),
                                              kGroupStageFloats);
#pragma unroll
            for (int t = 0; t < kGroupTokens; t++) {
                g[t] = staged[0][t];
                staged[0][t] = 0.0f;
            }
            __syncthreads(); /* the gate's last tile is read */
            gemv_rows_staged<kGroupTokens, 1>(&up, row, row < inter, xs, n, 0, gemv_row_chunks(up), group_lane,
                                              lanes_per_row, staged, reinterpret_cast<float *>(stage),
                                              kGroupStageFloats);
#pragma unroll
            for (int t = 0; t < kGroupTokens; t++)
                u[t] = staged[0][t];
        }
#pragma unroll
        for (int t = 0; t < kGroupTokens; t++) {
            g[t] = gemv_group_sum(g[t], lanes_per_row);
            u[t] = gemv_group_sum(u[t], lanes_per_row);
        }
        if (row < inter && group_lane == 0) {
#pragma unroll
            for (int t = 0; t < kGroupTokens; t++)
                if (t < n)
                    act[(size_t)order[first + t] * inter + row] = silu_gate_element(g[t] * gate_scale, u[t] * up_scale);
        }
    }
}

__global__ void __launch_bounds__(kMlpWarps * 32, 1) mlp_down_grouped_kernel(
    const mlp_device *table, const int *offsets, const int *order, const float *act, int hidden, int inter, float *y,
    int lanes_per_row)
{
    int expert = blockIdx.y, begin = offsets[expert], end = offsets[expert + 1];
    if (begin == end)
        return;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int sub = lane / lanes_per_row, group_lane = lane % lanes_per_row;
    int row = (blockIdx.x * kMlpWarps + warp) * (32 / lanes_per_row) + sub;
    const weight_matrix down = table[expert].down;
    float scale = gemv_row_scale(down);
    __shared__ float4 stage[kGroupStageFloats / 4];
    for (int first = begin; first < end; first += kGroupTokens) {
        int n = end - first < kGroupTokens ? end - first : kGroupTokens;
        const float *xs[kGroupTokens];
        float sums[kGroupTokens];
#pragma unroll
        for (int t = 0; t < kGroupTokens; t++)
            xs[t] = act + (size_t)order[first + (t < n ? t : n - 1)] * inter;
        float staged[1][kGroupTokens];
#pragma unroll
        for (int t = 0; t < kGroupTokens; t++)
            staged[0][t] = 0.0f;
        if (first != begin)
            __syncthreads(); /* the previous pass's last tile is read */
        gemv_rows_staged<kGroupTokens, 1>(&down, row, row < hidden, xs, n, 0, gemv_row_chunks(down), group_lane,
                                          lanes_per_row, staged, reinterpret_cast<float *>(stage), kGroupStageFloats);
#pragma unroll
        for (int t = 0; t < kGroupTokens; t++)
            sums[t] = staged[0][t];
#pragma unroll
        for (int t = 0; t < kGroupTokens; t++)
            sums[t] = gemv_group_sum(sums[t], lanes_per_row);
        if (row < hidden && group_lane == 0) {
#pragma unroll
            for (int t = 0; t < kGroupTokens; t++)
                if (t < n)
                    y[(size_t)order[first + t] * hidden + row] = sums[t] * scale;
        }
    }
}

__global__ void combine_kernel(const float *shared, const float *routed, const int *chosen, const float *weights,
                               int top_k, int hidden, float *out)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= hidden)
        return;
    size_t t = blockIdx.y;
    if (shared)
        shared += t * hidden;
    routed += t * top_k * hidden;
    chosen += t * top_k;
    weights += t * top_k;
    out += t * hidden;
    float sum = 0.0f;
    if (shared)
        sum += 1.0f * shared[r];
    int last = -1;
    for (int done = 0; done < top_k; done++) {
        int next = -1;
        for (int k = 0; k < top_k; k++)
            if (chosen[k] > last && (next < 0 || chosen[k] < chosen[next]))
                next = k;
        sum += weights[next] * routed[(size_t)next * hidden + r];
        last = chosen[next];
    }
    out[r] = sum;
}

unsigned grid_for(size_t n, unsigned threads)
{
    size_t blocks = (n + threads - 1) / threads;
    return blocks < 4096 ? (unsigned)(blocks ? blocks : 1) : 4096u;
}

} // namespace

extern "C" int rmsnorm_cuda(float *out, const float *x, const float *weight, int rows, int n, float eps, void *stream)
{
    if (rows <= 0)
        return 0;
    rmsnorm_kernel<<<(unsigned)rows, kThreads, 0, (cudaStream_t)stream>>>(out, x, weight, n, eps);
    return (int)cudaGetLastError();
}

extern "C" int residual_rmsnorm_cuda(float *h, const float *delta, float *out, const float *weight, int rows, int n,
                                     float eps, void *stream)
{
    if (rows <= 0)
        return 0;
    residual_rmsnorm_kernel<<<(unsigned)rows, kThreads, 0, (cudaStream_t)stream>>>(h, delta, out, weight, n, eps, 0,
                                                                                    nullptr);
    return (int)cudaGetLastError();
}

extern "C" int residual_rmsnorm_flag_cuda(float *h, const float *delta, float *out, const float *weight, int rows,
                                          int n, float eps, int code, int *flag, void *stream)
{
    if (rows <= 0)
        return 0;
    residual_rmsnorm_kernel<<<(unsigned)rows, kThreads, 0, (cudaStream_t)stream>>>(h, delta, out, weight, n, eps,
                                                                                    code, flag);
    return (int)cudaGetLastError();
}

extern "C" int add_cuda(float *h, const float *delta, size_t n, void *stream)
{
    add_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(h, delta, n);
    return (int)cudaGetLastError();
}

extern "C" int allreduce_sum_local_cuda(rank_buffers bufs, int ranks, size_t n, void *stream)
{
    if (ranks < 1 || ranks > 8)
        return (int)cudaErrorInvalidValue;
    if (ranks == 1)
        return 0;
    allreduce_local_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(bufs, ranks, n);
    return (int)cudaGetLastError();
}

extern "C" int mla_kv_rope_cache_shard_cuda(float *kv, int kv_lora, int rope, const float *kv_norm, float eps,
                                            float *q, int heads, int nope, const double *inv_freq,
                                            double cos_sin_scale, const int *pos, void *cache,
                                            kv_cache_format cache_format, int dcp, int member, void *foreign,
                                            unsigned *clamps, int tokens, void *stream)
{
    if (rope % 2 || rope > 256 || (cache_format == KV_CACHE_FP8 && (kv_lora % 2 || kv_lora > 1024)) || dcp < 1 ||
        member < 0 || member >= dcp || (dcp > 1 && !foreign))
        return (int)cudaErrorInvalidValue;
    if (tokens <= 0)
        return 0;
    kv_rope_cache_kernel<<<(unsigned)tokens, kThreads, 0, (cudaStream_t)stream>>>(
        kv, kv_lora, rope, kv_norm, eps, q, heads, nope, inv_freq, cos_sin_scale, pos, static_cast<uint8_t *>(cache),
        cache_format == KV_CACHE_FP8, dcp, member, static_cast<uint8_t *>(foreign), clamps);
    return (int)cudaGetLastError();
}

extern "C" int mla_kv_rope_cache_cuda(float *kv, int kv_lora, int rope, const float *kv_norm, float eps, float *q,
                                      int heads, int nope, const double *inv_freq, double cos_sin_scale,
                                      const int *pos, void *cache, kv_cache_format cache_format, unsigned *clamps,
                                      int tokens, void *stream)
{
    return mla_kv_rope_cache_shard_cuda(kv, kv_lora, rope, kv_norm, eps, q, heads, nope, inv_freq, cos_sin_scale, pos,
                                        cache, cache_format, 1, 0, NULL, clamps, tokens, stream);
}

namespace {

/* The K split gemv_rows_then_last uses for `blocks` blocks of rows_per_block rows of `chunks`
 * chunks (lanes per row), as linear_gemv_cuda chooses it; -1 when scratch cannot hold the
 * counters. */
int tail_split(int blocks, int rows_per_block, int lanes, int chunks, const gemv_scratch *scratch)
{
    if (!scratch || blocks >= scratch->max_rows)
        return -1;
    if (lanes != 32 || blocks * rows_per_block > scratch->max_rows)
        return 1;
    int most = chunks / 64; /* at least two chunks per lane in every part */
    return launch_grid_split(blocks, scratch->sm_count, most < GEMV_TAIL_MAX_SPLIT ? most : GEMV_TAIL_MAX_SPLIT);
}

int gemv_shape_ok(const weight_matrix *w)
{
    return !((w->format == WEIGHT_NVFP4 && (!w->scale || w->cols % 16)) || w->data_stride % 16);
}

/* How a tail GEMV lays out w's rows: chunks per row, lanes per row, rows per block. */
void tail_gemv_layout(const weight_matrix *w, int *chunks, int *lanes, int *rows_per_block)
{
    int elements = w->format == WEIGHT_NVFP4 ? 32 : w->format == WEIGHT_F32 ? 4 : 8;
    *chunks = (w->cols + elements - 1) / elements;
    *lanes = gemv_lanes_per_row(*chunks);
    *rows_per_block = kThreads / 32 * (32 / *lanes);
}

} // namespace

extern "C" int mla_qkv_a_cuda(const weight_matrix *q_a_proj, const weight_matrix *kv_a_proj, const float *x,
                              float *q_a, float *kv, const mla_qkv_tail *tail, const gemv_scratch *scratch,
                              void *stream)
{
    if (!gemv_shape_ok(q_a_proj) || !gemv_shape_ok(kv_a_proj) || kv_a_proj->cols != q_a_proj->cols ||
        kv_a_proj->format != q_a_proj->format)
        return (int)cudaErrorInvalidValue;
    if (tail->rope % 2 || tail->rope > 256 || tail->kv_lora + tail->rope != kv_a_proj->rows ||
        (tail->cache_format == KV_CACHE_FP8 && (tail->kv_lora % 2 || tail->kv_lora > 1024)))
        return (int)cudaErrorInvalidValue;
    int chunks, lanes, rows_per_block;
    tail_gemv_layout(q_a_proj, &chunks, &lanes, &rows_per_block);
    int q_blocks = (q_a_proj->rows + rows_per_block - 1) / rows_per_block;
    int blocks = q_blocks + (kv_a_proj->rows + rows_per_block - 1) / rows_per_block;
    int split = tail_split(blocks, rows_per_block, lanes, chunks, scratch);
    if (split < 1)
        return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)blocks, (unsigned)split);
    qkv_a_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>(*q_a_proj, *kv_a_proj, q_blocks, x, q_a, kv, lanes, split,
                                                              scratch->partials, scratch->counters, *tail);
    return (int)cudaGetLastError();
}

extern "C" int moe_router_route_cuda(const weight_matrix *router, const float *x, float *logits,
                                     const moe_routing_config *c, const float *bias, int *chosen, float *weights,
                                     int *slot_table, const gemv_scratch *scratch, void *stream)
{
    int groups = c->n_group > 1 ? c->n_group : 1;
    size_t shared = (2 * (size_t)c->experts + (size_t)groups + (size_t)c->top_k) * sizeof(float);
    /* the routing's dynamic shared memory beside the GEMV's static staging, within the default 48 KiB */
    if (c->experts <= 0 || c->top_k <= 0 || c->experts % groups ||
        shared + kGemvTailStageFloats * sizeof(float) > 48 * 1024 || router->rows != c->experts ||
        !gemv_shape_ok(router))
        return (int)cudaErrorInvalidValue;
    int chunks, lanes, rows_per_block;
    tail_gemv_layout(router, &chunks, &lanes, &rows_per_block);
    int blocks = (router->rows + rows_per_block - 1) / rows_per_block;
    int split = tail_split(blocks, rows_per_block, lanes, chunks, scratch);
    if (split < 1)
        return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)blocks, (unsigned)split);
    router_route_kernel<<<grid, kThreads, shared, (cudaStream_t)stream>>>(*router, x, logits, lanes, split,
                                                                          scratch->partials, scratch->counters, *c,
                                                                          bias, chosen, weights, slot_table);
    return (int)cudaGetLastError();
}

extern "C" int linear_gemv_residual_cuda(const weight_matrix *w, const float *x, float *y,
                                         const residual_epilogue *epilogue, const gemv_scratch *scratch, void *stream)
{
    if (!gemv_shape_ok(w) || !epilogue->h || (epilogue->peer.ranks && (size_t)w->rows > epilogue->peer.max_n))
        return (int)cudaErrorInvalidValue;
    int chunks, lanes, rows_per_block;
    tail_gemv_layout(w, &chunks, &lanes, &rows_per_block);
    int blocks = (w->rows + rows_per_block - 1) / rows_per_block;
    int split = tail_split(blocks, rows_per_block, lanes, chunks, scratch);
    if (split < 1)
        return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)blocks, (unsigned)split);
    if (epilogue->peer.ranks)
        gemv_residual_kernel<kPeerAllReduceNorm><<<grid, kThreads, 0, (cudaStream_t)stream>>>(
            *w, x, y, lanes, split, scratch->partials, scratch->counters, *epilogue);
    else
        gemv_residual_kernel<kResidualNorm><<<grid, kThreads, 0, (cudaStream_t)stream>>>(
            *w, x, y, lanes, split, scratch->partials, scratch->counters, *epilogue);
    return (int)cudaGetLastError();
}

extern "C" int mlp_down_combine_cuda(const mlp_device *table, const int *slot_table, int top_k, int shared,
                                     const float *act, int hidden, int inter, float *y, const int *chosen,
                                     const float *weights, float *out, const residual_epilogue *epilogue,
                                     const gemv_scratch *scratch, void *stream)
{
    int lanes = gemv_lanes_per_row((inter + 31) / 32);
    int rows_per_block = kMlpWarps * (32 / lanes);
    int blocks = (hidden + rows_per_block - 1) / rows_per_block;
    if (top_k < 0 || (top_k == 0 && (!shared || slot_table)) || (top_k > 0 && !slot_table) || !scratch ||
        blocks + (epilogue ? 1 : 0) > scratch->max_rows ||
        (epilogue && (!epilogue->h || (epilogue->peer.ranks && (size_t)hidden > epilogue->peer.max_n))))
        return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)blocks, (unsigned)(top_k + (shared ? 1 : 0)));
    if (!epilogue) {
        residual_epilogue none = {};
        mlp_down_combine_kernel<kNoEpilogue><<<grid, kMlpWarps * 32, 0, (cudaStream_t)stream>>>(
            table, slot_table, act, hidden, inter, y, lanes, chosen, weights, top_k, out, scratch->counters, none);
    } else if (epilogue->peer.ranks) {
        mlp_down_combine_kernel<kPeerAllReduceNorm><<<grid, kMlpWarps * 32, 0, (cudaStream_t)stream>>>(
            table, slot_table, act, hidden, inter, y, lanes, chosen, weights, top_k, out, scratch->counters,
            *epilogue);
    } else {
        mlp_down_combine_kernel<kResidualNorm><<<grid, kMlpWarps * 32, 0, (cudaStream_t)stream>>>(
            table, slot_table, act, hidden, inter, y, lanes, chosen, weights, top_k, out, scratch->counters,
            *epilogue);
    }
    return (int)cudaGetLastError();
}

extern "C" int nonfinite_flag_cuda(const float *values, size_t n, int code, int *flag, void *stream)
{
    if (n == 0)
        return 0;
    size_t blocks = (n + 255) / 256;
    nonfinite_flag_kernel<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, (cudaStream_t)stream>>>(values, n,
                                                                                                      code, flag);
    return (int)cudaGetLastError();
}

extern "C" int moe_route_cuda(const moe_routing_config *c, const float *logits, const float *bias, int *chosen,
                              float *weights, int tokens, void *stream)
{
    if (tokens <= 0)
        return 0;
    int groups = c->n_group > 1 ? c->n_group : 1;
    size_t shared = (2 * (size_t)c->experts + (size_t)groups + (size_t)c->top_k) * sizeof(float);
    if (c->experts <= 0 || c->top_k <= 0 || c->experts % groups || shared > 48 * 1024)
        return (int)cudaErrorInvalidValue;
    route_kernel<<<(unsigned)tokens, kThreads, shared, (cudaStream_t)stream>>>(*c, logits, bias, chosen, weights);
    return (int)cudaGetLastError();
}

extern "C" int mlp_gate_up_cuda(const mlp_device *table, const int *index, int slots, int slots_per_input,
                                const float *x, int hidden, int inter, float *act, void *stream)
{
    if (slots <= 0 || inter <= 0)
        return 0;
    int lanes = gemv_lanes_per_row((hidden + 31) / 32);
    int rows_per_block = kMlpWarps * (32 / lanes);
    dim3 grid((unsigned)((inter + rows_per_block - 1) / rows_per_block), (unsigned)slots);
    mlp_gate_up_kernel<<<grid, kMlpWarps * 32, 0, (cudaStream_t)stream>>>(table, index, slots_per_input, x, hidden,
                                                                          inter, act, lanes);
    return (int)cudaGetLastError();
}

extern "C" int mlp_down_cuda(const mlp_device *table, const int *index, int slots, const float *act, int hidden,
                             int inter, float *y, void *stream)
{
    if (slots <= 0)
        return 0;
    int lanes = gemv_lanes_per_row((inter + 31) / 32);
    int rows_per_block = kMlpWarps * (32 / lanes);
    dim3 grid((unsigned)((hidden + rows_per_block - 1) / rows_per_block), (unsigned)slots);
    mlp_down_kernel<<<grid, kMlpWarps * 32, 0, (cudaStream_t)stream>>>(table, index, act, hidden, inter, y, lanes);
    return (int)cudaGetLastError();
}

extern "C" int moe_group_cuda(const int *chosen, int slots, int experts, int *offsets, int *order, void *stream)
{
    if (slots <= 0 || experts <= 0)
        return slots < 0 || experts < 0 ? (int)cudaErrorInvalidValue : 0;
    moe_group_kernel<<<1, 1024, 0, (cudaStream_t)stream>>>(chosen, slots, experts, offsets, order);
    return (int)cudaGetLastError();
}

extern "C" int mlp_gate_up_grouped_cuda(const mlp_device *table, const int *offsets, const int *order, int experts,
                                        int slots_per_input, const float *x, int hidden, int inter, float *act,
                                        void *stream)
{
    if (experts <= 0 || inter <= 0)
        return 0;
    int lanes = gemv_lanes_per_row((hidden + 31) / 32);
    int rows_per_block = kMlpWarps * (32 / lanes);
    dim3 grid((unsigned)((inter + rows_per_block - 1) / rows_per_block), (unsigned)experts);
    mlp_gate_up_grouped_kernel<<<grid, kMlpWarps * 32, 0, (cudaStream_t)stream>>>(table, offsets, order, slots_per_input,
                                                                                  x, hidden, inter, act, lanes);
    return (int)cudaGetLastError();
}

extern "C" int mlp_down_grouped_cuda(const mlp_device *table, const int *offsets, const int *order, int experts,
                                     const float *act, int hidden, int inter, float *y, void *stream)
{
    if (experts <= 0)
        return 0;
    int lanes = gemv_lanes_per_row((inter + 31) / 32);
    int rows_per_block = kMlpWarps * (32 / lanes);
    dim3 grid((unsigned)((hidden + rows_per_block - 1) / rows_per_block), (unsigned)experts);
    mlp_down_grouped_kernel<<<grid, kMlpWarps * 32, 0, (cudaStream_t)stream>>>(table, offsets, order, act, hidden,
                                                                               inter, y, lanes);
    return (int)cudaGetLastError();
}

extern "C" int moe_combine_cuda(const float *shared, const float *routed, const int *chosen, const float *weights,
                                int top_k, int hidden, float *out, int tokens, void *stream)
{
    if (tokens <= 0)
        return 0;
    dim3 grid((unsigned)((hidden + 255) / 256), (unsigned)tokens);
    combine_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(shared, routed, chosen, weights,
                                                                                       top_k, hidden, out);
    return (int)cudaGetLastError();
}
