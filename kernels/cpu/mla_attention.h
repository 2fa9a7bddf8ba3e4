/* mla_attention: multi-head latent attention over the latent cache (fp16, or fp8 with block
 * scales: kernels/kv_format.h), for decode (weight absorption: scores against the latent
 * itself) and for prefill (keys and values expanded per head from the latent), both reading the
 * cache as the fp16 values it holds or decodes to. */
#ifndef KIMI_KERNELS_CPU_MLA_ATTENTION_H
#define KIMI_KERNELS_CPU_MLA_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kv_format.h"
#include "kernels/tensor.h"

typedef struct {
    int kv_lora;            /* latent width c */
    int rope;               /* q_pe / k_pe width */
    int nope;               /* q_nope / k_nope width per head */
    int v;                  /* value width per head */
    float softmax_scale;
    kv_cache_format cache_format; /* of the cache rows (0: fp16) */
} mla_shape;

/* Cache rows: [position][one row of kv_row_bytes(cache_format, kv_lora, rope)], positions from 0.
 * kv_b: the kv_b_proj rows of n_heads heads, [n_heads][nope + v][kv_lora] (k part then v part
 * of each head); n_heads = kv_b->rows / (nope + v). q rows hold n_heads heads of
 * [nope | rope] (q_pe already roped), out rows n_heads heads of [v]. Both kernels compute heads
 * [head_begin, head_end) only, so callers can split heads among threads. */

/* One query at position n_pos - 1 against positions [0, n_pos):
 * q [n_heads][nope + rope], out [n_heads][v]. */
size_t mla_decode_scratch_floats(const mla_shape *s, int head_count);
void mla_decode(const mla_shape *s, const weight_matrix *kv_b, int head_begin, int head_end,
                const float *q, const void *cache, long n_pos, float *scratch, float *out);

/* The decode attention in its pieces, for a query whose positions are split into parts (decode
 * context parallelism: each rank holds some of the positions) and merged exactly:
 * mla_absorb_query: q_abs [head_end - head_begin][kv_lora + rope] = (W_UK^T q_nope | q_pe) of
 *   heads [head_begin, head_end) of q [n_heads][nope + rope];
 * mla_decode_partial: parts [head_count][ATTENTION_PART_FLOATS(kv_lora)] (kernels/attention_merge_math.h:
 *   max, sum, unnormalised weighted latent) of the queries q_abs [head_count] over cache rows
 *   [0, n_rows) (n_rows 0 gives empty parts); scratch [mla_partial_scratch_floats];
 * mla_merge_parts: o_latent [kv_lora] of one head from n_parts parts, part s at parts + s * part_stride;
 * mla_apply_uv: out [v] = W_UV of head (an index into kv_b's heads) times o_latent. */
void mla_absorb_query(const mla_shape *s, const weight_matrix *kv_b, int head_begin, int head_end, const float *q,
                      float *q_abs);
size_t mla_partial_scratch_floats(const mla_shape *s);
void mla_decode_partial(const mla_shape *s, const float *q_abs, int head_count, const void *cache, long n_rows,
                        float *scratch, float *parts);
void mla_merge_parts(const mla_shape *s, const float *parts, int n_parts, size_t part_stride, float *o_latent);
void mla_apply_uv(const mla_shape *s, const weight_matrix *kv_b, int head, const float *o_latent, float *out);

/* n_tokens queries at positions start_pos + t, causal: q [n_tokens][n_heads][nope + rope],
 * out [n_tokens][n_heads][v]; the cache must hold positions [0, start_pos + n_tokens). */
size_t mla_prefill_scratch_floats(const mla_shape *s, int n_tokens);
void mla_prefill(const mla_shape *s, const weight_matrix *kv_b, int head_begin, int head_end,
                 const float *q, int n_tokens, long start_pos, const void *cache,
                 float *scratch, float *out);

#endif
