/* forward (CUDA): the kernels of one step of the forward pass (one token when decoding, up to
 * FORWARD_MAX_TOKENS of a prefill), as extern "C" launchers on device memory. Weights are
 * weight_matrix views whose data/scale point into device memory in the packed layout of
 * engine/backend/device_plan.h (dense rows, row pitch a multiple of 16 bytes, zero padding). Activations are float32. Every launcher enqueues on `stream` (a cudaStream_t,
 * NULL = default) and returns 0 or a cudaError_t code; none synchronises, none allocates, so a
 * whole step can be captured in a CUDA graph. Positions are read from device memory (`pos`), so
 * one captured graph serves every step. Per-element math comes from kernels/forward_math.h,
 * kernels/half_math.h and kernels/nvfp4_math.h, shared with the CPU kernels. */
#ifndef KIMI_KERNELS_CUDA_FORWARD_H
#define KIMI_KERNELS_CUDA_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/allreduce.h"
#include "kernels/kv_format.h"
#include "kernels/moe_routing_math.h"
#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most tokens one step serves (a prefill runs in steps of up to this many tokens). */
enum { FORWARD_MAX_TOKENS = 64 };

/* Scratch of the split-K GEMV: `partials` [rows * 16] floats and `counters` [rows] unsigned,
 * zero at first use (each call leaves them zero again). */
typedef struct {
    float *partials;
    unsigned *counters;
    int max_rows;
    int sm_count;               /* multiprocessors: the grid the split aims to fill */
} gemv_scratch;

/* y[b * y_batch + r] = sum_k W[b * row_batch + r][k] * x[b * x_batch + k], for r < rows,
 * b < batches (rows: the rows of one batch; batches share w). W4A16 for NVFP4: each block of
 * 16 is (e2m1 * e4m3) exact, summed in float, times scale_2 once per row. */
int linear_gemv_cuda(const weight_matrix *w, int rows, int batches, int row_batch, const float *x, size_t x_batch,
                     float *y, size_t y_batch, const gemv_scratch *scratch, void *stream);
/* The same for `tokens` tokens (x of token t at x + t * x_token, y at y + t * y_token): each
 * weight is read once per 8 tokens. One token may split K (scratch). */
int linear_gemv_tokens_cuda(const weight_matrix *w, int rows, int batches, int row_batch, const float *x,
                            size_t x_batch, size_t x_token, float *y, size_t y_batch, size_t y_token, int tokens,
                            const gemv_scratch *scratch, void *stream);
/* The same, but each token's y is bit for bit what the call for that token alone gives (it
 * splits K as one token does, each token's partial sums apart in scratch, so fewer tokens share
 * a weight read where rows * tokens would pass scratch->max_rows): the verify step of
 * speculative decoding, whose logits equal those of one-token steps. */
int linear_gemv_tokens_exact_cuda(const weight_matrix *w, int rows, int batches, int row_batch, const float *x,
                                  size_t x_batch, size_t x_token, float *y, size_t y_batch, size_t y_token, int tokens,
                                  const gemv_scratch *scratch, void *stream);

/* A decode step's GEMV of one token whose output ends a sublayer (o_proj): y [w->rows] = w x as
 * linear_gemv_cuda computes it (the same K split, the same bits), then in the last block the
 * residual epilogue on y (kernels/cuda/allreduce.h: the peer all-reduce when epilogue->peer.ranks
 * > 0, the residual add, the next norm), so the launch replaces the GEMV and the all-reduce's (or
 * residual_rmsnorm_cuda's) launch. scratch as mla_qkv_a_cuda's. */
int linear_gemv_residual_cuda(const weight_matrix *w, const float *x, float *y, const residual_epilogue *epilogue,
                              const gemv_scratch *scratch, void *stream);

/* Absorbed attention: q_latent[t][h][c] = sum_{i < nope} W_UK[h][i][c] * q[t][h][i], W_UK the
 * first nope rows of each head's (nope + v) rows of kv_b; q [tokens][heads][q_width],
 * q_latent [tokens][heads][kv_lora]. */
int mla_absorb_q_cuda(const weight_matrix *kv_b, int heads, int nope, int v, const float *q, int q_width,
                      float *q_latent, int tokens, void *stream);

/* out[i] = rmsnorm(x)[i] * weight[i] for `rows` rows of n (out may alias x). */
int rmsnorm_cuda(float *out, const float *x, const float *weight, int rows, int n, float eps, void *stream);

/* h [rows][n] += delta, then out = rmsnorm(h) * weight (a residual add and the next norm in one
 * launch; the same arithmetic as add_cuda then rmsnorm_cuda). */
int residual_rmsnorm_cuda(float *h, const float *delta, float *out, const float *weight, int rows, int n, float eps,
                          void *stream);

/* residual_rmsnorm_cuda, and *flag (device) = max(*flag, code) when any h is NaN or infinite
 * after the add (nonfinite_flag_cuda's check of h in the same launch). */
int residual_rmsnorm_flag_cuda(float *h, const float *delta, float *out, const float *weight, int rows, int n,
                               float eps, int code, int *flag, void *stream);

/* h[i] += delta[i]. */
int add_cuda(float *h, const float *delta, size_t n, void *stream);

/* The local communicator's reduction: bufs[r][i] = sum over r' of bufs[r'][i] (ranks in
 * order) for every r < ranks <= 8. */
typedef struct {
    float *bufs[8];
} rank_buffers;
int allreduce_sum_local_cuda(rank_buffers bufs, int ranks, size_t n, void *stream);

/* The tail of the MLA projections of token t < tokens at position p = *pos + t:
 *   kv[t] [kv_lora | rope]: latent = rmsnorm(latent, kv_norm); k_pe = rope(k_pe) -> the cache
 *   row p in cache_format (kernels/kv_format.h: fp16, or e4m3 latent with block scales and fp16
 *   k_pe, the same bytes as the CPU's kv_fp8_encode_row), fp16 values saturated to +-65504 as
 *   on the CPU (kernels/half_math.h half_from_float_saturate), each saturation added to *clamps
 *   (device; NULL: not counted);
 *   and q_pe = rope(q_pe) for every head of q[t] [heads][nope + rope]. cos/sin of pair i:
 *   (float)(cos(p * inv_freq[i]) * scale). */
int mla_kv_rope_cache_cuda(float *kv, int kv_lora, int rope, const float *kv_norm, float eps, float *q, int heads,
                           int nope, const double *inv_freq, double cos_sin_scale, const int *pos,
                           void *cache, kv_cache_format cache_format, unsigned *clamps, int tokens, void *stream);

/* A decode step's q_a and kv_a projections (one token) in one launch, and in its last block
 * what follows them: q_a = rmsnorm(q_a, q_a_norm), and the kv row's tail as in
 * mla_kv_rope_cache_cuda (latent normalised, k_pe roped, the cache row at *pos written) except
 * q_pe, which mla_absorb_q_rope_cuda ropes. x [hidden], q_a [q_a->rows], kv [kv_a->rows]. The
 * K split uses scratch (its partials need (q_a blocks + kv_a blocks) * 8 rows, its counters one
 * more than the blocks; otherwise K is not split). */
enum { GEMV_TAIL_MAX_SPLIT = 16 };   /* the K split of the GEMVs fused with a tail */
typedef struct {
    const float *q_a_norm, *kv_norm;
    float eps;
    int kv_lora, rope;
    const double *inv_freq;
    double cos_sin_scale;
    const int *pos;
    void *cache;
    kv_cache_format cache_format;
    unsigned *clamps;
} mla_qkv_tail;
int mla_qkv_a_cuda(const weight_matrix *q_a_proj, const weight_matrix *kv_a_proj, const float *x, float *q_a,
                   float *kv, const mla_qkv_tail *tail, const gemv_scratch *scratch, void *stream);

/* mla_absorb_q_cuda, and q_pe = rope(q_pe) of every head of q[t] at position *pos + t (the q
 * part of mla_kv_rope_cache_cuda) in the same launch. */
int mla_absorb_q_rope_cuda(const weight_matrix *kv_b, int heads, int nope, int v, int rope, float *q, int q_width,
                           float *q_latent, const double *inv_freq, double cos_sin_scale, const int *pos, int tokens,
                           void *stream);

/* *flag (device) = max(*flag, code) when any of values[0..n) (device) is NaN or infinite: the
 * first layer whose output is non-finite, with codes falling as the layers rise. */
int nonfinite_flag_cuda(const float *values, size_t n, int code, int *flag, void *stream);

/* Flash-decoding attention over the latent cache [positions][one row in cache_format] (fp8 rows
 * are decoded to kernels/kv_format.h's fp16 values as they are staged) for the
 * queries of tokens t < tokens at positions *pos + t (causal: keys 0..*pos + t):
 * q_latent [tokens][heads][kv_lora] (W_UK absorbed), q [tokens][heads][nope | rope] (q_pe
 * roped); o_latent [tokens][heads][kv_lora] = the softmax-weighted sum of the latents. Each
 * query's sequence is cut into at most `splits` parts (fixed at capture) of at least 4 chunks
 * of 32 positions each, as many as its length fills (read on the device: the blocks of the
 * others end at once), whose partial (max, sum, weighted latent) go to `partials`
 * [tokens][splits][heads][kv_lora + 2] and are merged by a second kernel, which reads only
 * those. splits <= 4096. */
size_t mla_decode_partial_floats(int splits, int heads, int kv_lora);   /* per token */
int mla_decode_cuda(const float *q_latent, const float *q, int heads, int kv_lora, int rope, int nope,
                    float softmax_scale, const void *cache, kv_cache_format cache_format, const int *pos, int splits,
                    float *partials, float *o_latent, int tokens, void *stream);

/* Prefill attention over the same cache, absorbed, for a step of `tokens` causal queries at
 * positions *pos + t (the cache holds the step's own rows): the same inputs and output as
 * mla_decode_cuda, the same online softmax in fp32, but a block takes MLA_PREFILL_ROWS query
 * rows (row i = token i / heads, head i % heads) and scores each staged chunk of the cache
 * against all of them, so a chunk is read once per block of rows instead of once per query.
 * parts: the parts of the sequence each block of rows splits into (fixed at capture); with one
 * part the output is written directly, with more their partials go to `partials`
 * [tokens][parts][heads][kv_lora + 2] (mla_decode_cuda's layout) and are merged. kv_lora is
 * even and at most 1024. */
enum { MLA_PREFILL_ROWS = 16 };
size_t mla_prefill_partial_floats(int parts, int tokens, int heads, int kv_lora);
/* The dynamic shared memory per block the decode or the prefill kernel takes for cache rows of
 * kv_lora + rope, whichever is more: a device whose opt-in per-block limit
 * (cudaDevAttrMaxSharedMemoryPerBlockOptin: 227 KiB on sm_90 and sm_100, 99 KiB on sm_120)
 * is smaller cannot run them. */
size_t mla_attention_shared_bytes(int kv_lora, int rope);
/* Raises the decode and prefill kernels' dynamic shared memory limit on the current device to
 * what rows of kv_lora + rope take (cudaFuncSetAttribute): once per device before the first
 * launch, outside any stream capture (the launchers no longer set it, so a captured step holds
 * kernels only). Returns 0 or the cudaError_t (a limit the device cannot give). */
int mla_attention_setup_cuda(int kv_lora, int rope);
int mla_prefill_cuda(const float *q_latent, const float *q, int heads, int kv_lora, int rope, int nope,
                     float softmax_scale, const void *cache, kv_cache_format cache_format, const int *pos, int parts,
                     float *partials, float *o_latent, int tokens, void *stream);

/* Decode context parallelism (--dcp, kernels/kv_shard_math.h): the cache holds only the positions
 * member `member` of a group of dcp stores, in its slots.
 * mla_query_pack_cuda: q_abs [tokens][heads][kv_lora + rope] = [q_latent | q_pe of q] per head
 *   (the absorbed query a member sends its group).
 * mla_decode_shard_cuda: the group's queries q_group [queries][heads][kv_lora + rope] (member j's
 *   tokens at rows j * period.., query x at position *pos + x % period) against this member's
 *   slots below each position, in `splits` parts per query (partials: [queries] x
 *   mla_decode_partial_floats(splits, heads, kv_lora) floats), merged into one unnormalised part
 *   per query and head: parts [queries][heads][kv_lora + 2] = [max | sum | acc]
 *   (kernels/attention_merge_math.h), what the CPU's mla_decode_partial gives.
 * mla_merge_shard_parts_cuda: o_latent [tokens][heads][kv_lora] from the dcp members' parts
 *   [dcp][tokens][heads][kv_lora + 2] of this rank's heads, the exact merge the split-K kernels use. */
int mla_query_pack_cuda(const float *q_latent, const float *q, int heads, int kv_lora, int nope, int rope,
                        float *q_abs, int tokens, void *stream);
int mla_decode_shard_cuda(const float *q_group, int queries, int period, int heads, int kv_lora, int rope,
                          float softmax_scale, const void *cache, kv_cache_format cache_format, const int *pos,
                          int dcp, int member, int splits, float *partials, float *parts, void *stream);
int mla_merge_shard_parts_cuda(const float *parts, int dcp, int heads, int kv_lora, float *o_latent, int tokens,
                               void *stream);
/* mla_kv_rope_cache_cuda for a sharded cache: the row of position p goes to slot p / dcp when
 * member stores it (p % dcp == member), else to foreign [tokens][row bytes] (scratch), so every
 * rank still counts the saturations of every position. dcp 1, member 0: mla_kv_rope_cache_cuda. */
int mla_kv_rope_cache_shard_cuda(float *kv, int kv_lora, int rope, const float *kv_norm, float eps, float *q, int heads,
                                 int nope, const double *inv_freq, double cos_sin_scale, const int *pos, void *cache,
                                 kv_cache_format cache_format, int dcp, int member, void *foreign, unsigned *clamps,
                                 int tokens, void *stream);

/* Routing on the device, per token: logits [tokens][experts] -> chosen [tokens][top_k],
 * weights [tokens][top_k], exactly moe_route's selection (kernels/cpu/moe_routing.h).
 * bias: [experts] or NULL. */
int moe_route_cuda(const moe_routing_config *c, const float *logits, const float *bias, int *chosen, float *weights,
                   int tokens, void *stream);

/* A decode step's router GEMV (logits [experts] = router x, one token, K split with scratch as
 * mla_qkv_a_cuda splits it) and moe_route_cuda's routing of it in one launch; slot_table
 * (device, [top_k + 1]) gets the mlp_device table entries of the token's slots for a table
 * whose entry 0 is the shared expert and 1 + e routed expert e: 1 + chosen[j], then 0. */
int moe_router_route_cuda(const weight_matrix *router, const float *x, float *logits, const moe_routing_config *c,
                          const float *bias, int *chosen, float *weights, int *slot_table,
                          const gemv_scratch *scratch, void *stream);

/* One MLP's gate, up and down projections, selected per slot from a device table:
 * slot s < slots uses table[index ? index[s] : 0] and input x[s / slots_per_input]:
 *   act[s][i] = silu(gate . x) * (up . x)       i < inter  (gate/up rows of this rank)
 *   y[s][r] = down[r] . act[s]                  r < hidden */
typedef struct {
    weight_matrix gate, up, down;
} mlp_device;
int mlp_gate_up_cuda(const mlp_device *table, const int *index, int slots, int slots_per_input, const float *x,
                     int hidden, int inter, float *act, void *stream);
int mlp_down_cuda(const mlp_device *table, const int *index, int slots, const float *act, int hidden, int inter,
                  float *y, void *stream);

/* One token's MoE output in one launch: mlp_down_cuda of its top_k routed slots (and the shared
 * expert's slot top_k when `shared`), slot s using table[slot_table[s]], into y [slots][hidden],
 * then moe_combine_cuda's sum of them into out [hidden] (scratch: its counters). top_k 0, shared,
 * slot_table NULL: table[0] alone (a dense MLP's down projection; out may then alias y).
 * epilogue not NULL: its residual epilogue on out in the last block (kernels/cuda/allreduce.h),
 * which replaces the all-reduce's (or residual_rmsnorm_cuda's) launch. */
int mlp_down_combine_cuda(const mlp_device *table, const int *slot_table, int top_k, int shared, const float *act,
                          int hidden, int inter, float *y, const int *chosen, const float *weights, float *out,
                          const residual_epilogue *epilogue, const gemv_scratch *scratch, void *stream);

/* The same MLPs for steps of several tokens, each expert's weights read once: moe_group_cuda
 * sorts the slots (chosen [slots], slot t * top_k + j) by expert into offsets [experts + 1]
 * and order [slots]; the grouped kernels then run table[e] over expert e's slots (input
 * x[slot / slots_per_input], act and y indexed by slot, as above). */
int moe_group_cuda(const int *chosen, int slots, int experts, int *offsets, int *order, void *stream);
int mlp_gate_up_grouped_cuda(const mlp_device *table, const int *offsets, const int *order, int experts,
                             int slots_per_input, const float *x, int hidden, int inter, float *act, void *stream);
int mlp_down_grouped_cuda(const mlp_device *table, const int *offsets, const int *order, int experts,
                          const float *act, int hidden, int inter, float *y, void *stream);

/* The MoE output of each token t: out[t][r] = 0 + shared[t][r] (when shared is not NULL),
 * then + weights[t][k] * routed[t][k][r] for the chosen experts in ascending expert index (the
 * CPU backend's order). */
int moe_combine_cuda(const float *shared, const float *routed, const int *chosen, const float *weights, int top_k,
                     int hidden, float *out, int tokens, void *stream);

#ifdef __cplusplus
}
#endif

#endif
