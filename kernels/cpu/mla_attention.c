/* mla_attention: both kernels walk the cache in chunks of CHUNK positions, converting each
 * chunk from the cache's format (fp16 or fp8, kernels/kv_format.h) once, and keep a running (online) softmax per query: running max m, sum of
 * exponentials l and the weighted sum, rescaled by e^(m_old - m_new) when the max grows. */
#include "kernels/cpu/mla_attention.h"

#include <math.h>
#include <string.h>

#include "kernels/attention_merge_math.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/wide_vector_clones.h"

/* On x86-64 with AVX-512 (linear_simd_level() >= LINEAR_SIMD_AVX512) the scores, the weighted
 * sums and the fp16 conversion run 16 lanes wide: the loops below were left to the compiler as
 * separate functions, built for the baseline x86-64 (4 lanes) even inside the AVX2 clones, and
 * most of a decode step's attention time went there. They do the same multiplications and
 * additions in the same order as the portable loops (lane j of a dot product in lane j, a product
 * then a sum, no fused multiply-add), so both give the same bits; test_mla_attention checks it. */
#if defined(__x86_64__) && defined(__GNUC__)
#define KIMI_MLA_AVX512 1
#include <immintrin.h>
#else
#define KIMI_MLA_AVX512 0
#endif

enum { CHUNK = 64 };

/* The AVX-512 decode takes heads HEAD_GROUP at a time (decode_chunk_avx512): its scratch holds
 * HEAD_GROUP rows of CHUNK scores. */
enum { HEAD_GROUP = 4 };

typedef struct {
    float max;      /* running max of the scores seen */
    float sum;      /* sum of e^(score - max) */
} softmax_state;

/* Sixteen partial sums (lane j takes elements i with i % 16 == j), added up at the end: one
 * running sum made every product wait for the previous addition, and the compiler may not
 * reorder float additions itself; sixteen independent lanes vectorise. */
enum { DOT_LANES = 16 };

static float lanes_then_tail(const float lanes[DOT_LANES], const float *a, const float *b, int i, int n)
{
    float sum = 0.0f;
    for (int j = 0; j < DOT_LANES; j++)
        sum += lanes[j];
    for (; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

static float dot(const float *a, const float *b, int n)
{
    float lanes[DOT_LANES] = {0};
    int i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++)
            lanes[j] += a[i + j] * b[i + j];
    return lanes_then_tail(lanes, a, b, i, n);
}

/* The weights e^(score - new max) of scores[0..n) in place, folded into state. */
static void softmax_weights(softmax_state *state, float *scores, int n, float *rescale)
{
    float chunk_max = -INFINITY;
    for (int j = 0; j < n; j++)
        chunk_max = scores[j] > chunk_max ? scores[j] : chunk_max;
    float new_max = chunk_max > state->max ? chunk_max : state->max;
    *rescale = expf(state->max - new_max);
    state->sum *= *rescale;
    for (int j = 0; j < n; j++) {
        scores[j] = expf(scores[j] - new_max);
        state->sum += scores[j];
    }
    state->max = new_max;
}

/* Fold scores[0..n) into (state, acc [width]) with rows values[j * width]. */
static void online_softmax_update(softmax_state *state, float *acc, int width, float *scores,
                                  int n, const float *values)
{
    float rescale;
    softmax_weights(state, scores, n, &rescale);
    for (int i = 0; i < width; i++)
        acc[i] *= rescale;
    for (int j = 0; j < n; j++) {
        const float *row = values + (size_t)j * width;
        for (int i = 0; i < width; i++)
            acc[i] += scores[j] * row[i];
    }
}

#if KIMI_MLA_AVX512
enum { ACC_STRIP = 8 };

/* online_softmax_update with ACC_STRIP vectors of acc held in registers while every row adds
 * into them: per element, the same rescale and then the rows in order. */
__attribute__((target("avx512f"))) static void online_softmax_update_avx512(softmax_state *state, float *acc,
                                                                           int width, float *scores, int n,
                                                                           const float *values)
{
    float rescale;
    softmax_weights(state, scores, n, &rescale);
    __m512 r = _mm512_set1_ps(rescale);
    int i0 = 0;
    while (i0 + DOT_LANES <= width) {
        int strip = (width - i0) / DOT_LANES < ACC_STRIP ? (width - i0) / DOT_LANES : ACC_STRIP;
        __m512 sums[ACC_STRIP];
        for (int k = 0; k < strip; k++)
            sums[k] = _mm512_mul_ps(_mm512_loadu_ps(acc + i0 + k * DOT_LANES), r);
        for (int j = 0; j < n; j++) {
            __m512 p = _mm512_set1_ps(scores[j]);
            const float *row = values + (size_t)j * width + i0;
            for (int k = 0; k < strip; k++)
                sums[k] = _mm512_add_ps(sums[k], _mm512_mul_ps(p, _mm512_loadu_ps(row + k * DOT_LANES)));
        }
        for (int k = 0; k < strip; k++)
            _mm512_storeu_ps(acc + i0 + k * DOT_LANES, sums[k]);
        i0 += strip * DOT_LANES;
    }
    for (int i = i0; i < width; i++) {
        acc[i] *= rescale;
        for (int j = 0; j < n; j++)
            acc[i] += scores[j] * values[(size_t)j * width + i];
    }
}

/* The decode's heads in groups of HEAD_GROUP (a chunk's rows are loaded once per group, not once
 * per head), HEAD_GROUP x TILE_ROWS scores or HEAD_GROUP x TILE_VECTORS weighted-sum vectors in
 * registers. A group of fewer heads repeats its last head (the same work twice, stored twice). */
enum { TILE_ROWS = 4, TILE_VECTORS = 4, TILE = HEAD_GROUP * TILE_ROWS };

/* Lane k of the result = 0 + a[k][0] + a[k][1] + ... + a[k][15], lanes_then_tail's sum of the
 * sixteen lanes of a[k] in its order: a 16 x 16 transpose (32-bit, 64-bit, then 128-bit
 * interleaves), then the columns added one by one. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 lane_sums(const __m512 a[TILE])
{
    __m512 b[TILE], c[TILE], t[TILE];
    for (int i = 0; i < TILE; i += 2) {
        b[i] = _mm512_unpacklo_ps(a[i], a[i + 1]);
        b[i + 1] = _mm512_unpackhi_ps(a[i], a[i + 1]);
    }
    /* c[4g + e], 128-bit chunk q: element 4q + e of a[4g .. 4g + 3] */
    for (int g = 0; g < TILE; g += 4) {
        c[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(b[g]), _mm512_castps_pd(b[g + 2])));
        c[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(b[g]), _mm512_castps_pd(b[g + 2])));
        c[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(b[g + 1]), _mm512_castps_pd(b[g + 3])));
        c[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(b[g + 1]), _mm512_castps_pd(b[g + 3])));
    }
    /* t[4q + e], chunk g: element 4q + e of a[4g .. 4g + 3] */
    for (int e = 0; e < 4; e++) {
        __m512 d0 = _mm512_shuffle_f32x4(c[e], c[4 + e], 0x44), d1 = _mm512_shuffle_f32x4(c[e], c[4 + e], 0xEE);
        __m512 d2 = _mm512_shuffle_f32x4(c[8 + e], c[12 + e], 0x44), d3 = _mm512_shuffle_f32x4(c[8 + e], c[12 + e], 0xEE);
        t[e] = _mm512_shuffle_f32x4(d0, d2, 0x88);
        t[4 + e] = _mm512_shuffle_f32x4(d0, d2, 0xDD);
        t[8 + e] = _mm512_shuffle_f32x4(d1, d3, 0x88);
        t[12 + e] = _mm512_shuffle_f32x4(d1, d3, 0xDD);
    }
    __m512 sum = _mm512_setzero_ps();
    for (int l = 0; l < TILE; l++)
        sum = _mm512_add_ps(sum, t[l]);
    return sum;
}

/* Lane g * TILE_ROWS + r of the result: dot(q[g], rows[r], width) (the portable dot's bits). */
__attribute__((target("avx512f"), always_inline)) static inline __m512 dot_tile(const float *const q[HEAD_GROUP],
                                                                               const float *const rows[TILE_ROWS],
                                                                               int width)
{
    __m512 lanes[TILE];
    for (int k = 0; k < TILE; k++)
        lanes[k] = _mm512_setzero_ps();
    int i = 0;
    for (; i + DOT_LANES <= width; i += DOT_LANES) {
        __m512 row[TILE_ROWS];
        for (int r = 0; r < TILE_ROWS; r++)
            row[r] = _mm512_loadu_ps(rows[r] + i);
        for (int g = 0; g < HEAD_GROUP; g++) {
            __m512 qi = _mm512_loadu_ps(q[g] + i);
            for (int r = 0; r < TILE_ROWS; r++)
                lanes[g * TILE_ROWS + r] = _mm512_add_ps(lanes[g * TILE_ROWS + r], _mm512_mul_ps(qi, row[r]));
        }
    }
    __m512 sums = lane_sums(lanes);
    if (i == width)
        return sums;
    float d[TILE];
    _mm512_storeu_ps(d, sums);
    for (int g = 0; g < HEAD_GROUP; g++)
        for (int r = 0; r < TILE_ROWS; r++)
            for (int k = i; k < width; k++)
                d[g * TILE_ROWS + r] += q[g][k] * rows[r][k];
    return _mm512_loadu_ps(d);
}

/* scores [HEAD_GROUP][CHUNK]: row j < n of head g = (q_lat[g] . latent[j] + q_pe[g] . k_pe[j]) * scale. A
 * tile of fewer rows repeats its last row. */
__attribute__((target("avx512f"))) static void group_scores_avx512(const mla_shape *s, const float *const q_lat[HEAD_GROUP],
                                                                  const float *const q_pe[HEAD_GROUP],
                                                                  const float *latent, const float *k_pe, int n,
                                                                  float *scores)
{
    __m512 scale = _mm512_set1_ps(s->softmax_scale);
    for (int j0 = 0; j0 < n; j0 += TILE_ROWS) {
        const float *lat_rows[TILE_ROWS], *pe_rows[TILE_ROWS];
        for (int r = 0; r < TILE_ROWS; r++) {
            int j = j0 + r < n ? j0 + r : n - 1;
            lat_rows[r] = latent + (size_t)j * s->kv_lora;
            pe_rows[r] = k_pe + (size_t)j * s->rope;
        }
        float tile[TILE];
        _mm512_storeu_ps(tile, _mm512_mul_ps(_mm512_add_ps(dot_tile(q_lat, lat_rows, s->kv_lora),
                                                           dot_tile(q_pe, pe_rows, s->rope)), scale));
        for (int g = 0; g < HEAD_GROUP; g++)
            for (int r = 0; r < TILE_ROWS && j0 + r < n; r++)
                scores[g * CHUNK + j0 + r] = tile[g * TILE_ROWS + r];
    }
}

/* acc[g][i0 + 16 v], v < vectors, of every head g: times rescale[g], then plus weights[g][j] * row j
 * for the rows in order (online_softmax_update's operations per element). */
__attribute__((target("avx512f"), always_inline)) static inline void weighted_tile(
    float *const acc[HEAD_GROUP], const float *const weights[HEAD_GROUP], const float rescale[HEAD_GROUP], int i0,
    int vectors, int n, const float *values, int width)
{
    __m512 sums[HEAD_GROUP][TILE_VECTORS];
    for (int g = 0; g < HEAD_GROUP; g++) {
        __m512 r = _mm512_set1_ps(rescale[g]);
        for (int v = 0; v < vectors; v++)
            sums[g][v] = _mm512_mul_ps(_mm512_loadu_ps(acc[g] + i0 + v * DOT_LANES), r);
    }
    for (int j = 0; j < n; j++) {
        const float *row = values + (size_t)j * width + i0;
        __m512 x[TILE_VECTORS];
        for (int v = 0; v < vectors; v++)
            x[v] = _mm512_loadu_ps(row + v * DOT_LANES);
        for (int g = 0; g < HEAD_GROUP; g++) {
            __m512 p = _mm512_set1_ps(weights[g][j]);
            for (int v = 0; v < vectors; v++)
                sums[g][v] = _mm512_add_ps(sums[g][v], _mm512_mul_ps(p, x[v]));
        }
    }
    for (int g = 0; g < HEAD_GROUP; g++)
        for (int v = 0; v < vectors; v++)
            _mm512_storeu_ps(acc[g] + i0 + v * DOT_LANES, sums[g][v]);
}

__attribute__((target("avx512f"))) static void group_weighted_sum_avx512(float *const acc[HEAD_GROUP],
                                                                        const float *const weights[HEAD_GROUP],
                                                                        const float rescale[HEAD_GROUP], int n,
                                                                        const float *values, int width)
{
    int i0 = 0;
    for (; i0 + TILE_VECTORS * DOT_LANES <= width; i0 += TILE_VECTORS * DOT_LANES)
        weighted_tile(acc, weights, rescale, i0, TILE_VECTORS, n, values, width);
    for (; i0 + DOT_LANES <= width; i0 += DOT_LANES)
        weighted_tile(acc, weights, rescale, i0, 1, n, values, width);
    for (int g = 0; g < HEAD_GROUP; g++)
        for (int i = i0; i < width; i++) {
            acc[g][i] *= rescale[g];
            for (int j = 0; j < n; j++)
                acc[g][i] += weights[g][j] * values[(size_t)j * width + i];
        }
}

/* One chunk of rows (latent [n][kv_lora], k_pe [n][rope]) into the parts of head_count heads:
 * scores [HEAD_GROUP][CHUNK] of scratch. */
__attribute__((target("avx512f"))) static void decode_chunk_avx512(const mla_shape *s, const float *q_abs,
                                                                  int head_count, const float *latent,
                                                                  const float *k_pe, int n, float *scores,
                                                                  float *parts)
{
    int abs_width = s->kv_lora + s->rope;
    size_t part_floats = ATTENTION_PART_FLOATS(s->kv_lora);
    for (int h0 = 0; h0 < head_count; h0 += HEAD_GROUP) {
        int heads = head_count - h0 < HEAD_GROUP ? head_count - h0 : HEAD_GROUP;
        const float *q_lat[HEAD_GROUP], *q_pe[HEAD_GROUP], *weights[HEAD_GROUP];
        float *part[HEAD_GROUP], *acc[HEAD_GROUP], rescale[HEAD_GROUP];
        for (int g = 0; g < HEAD_GROUP; g++) {
            int h = h0 + (g < heads ? g : heads - 1);
            q_lat[g] = q_abs + (size_t)h * abs_width;
            q_pe[g] = q_lat[g] + s->kv_lora;
            part[g] = parts + (size_t)h * part_floats;
            acc[g] = part[g] + 2;
            weights[g] = scores + (size_t)(g < heads ? g : heads - 1) * CHUNK;
        }
        group_scores_avx512(s, q_lat, q_pe, latent, k_pe, n, scores);
        for (int g = 0; g < heads; g++) {
            softmax_state state = {part[g][0], part[g][1]};
            softmax_weights(&state, scores + (size_t)g * CHUNK, n, &rescale[g]);
            part[g][0] = state.max;
            part[g][1] = state.sum;
        }
        for (int g = heads; g < HEAD_GROUP; g++)
            rescale[g] = rescale[heads - 1];
        group_weighted_sum_avx512(acc, weights, rescale, n, latent, s->kv_lora);
    }
}

/* f16_row_to_float with vcvtph2ps (exact, as the portable conversion). */
__attribute__((target("avx512f"))) static void f16_row_to_float_avx512(const uint16_t *in, int n, float *out)
{
    int i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(in + i))));
    f16_row_to_float(in + i, (size_t)(n - i), out + i);
}
#endif

static int attention_wide(void)
{
#if KIMI_MLA_AVX512
    return linear_simd_level() >= LINEAR_SIMD_AVX512;
#else
    return 0;
#endif
}

static void chunk_scores(const mla_shape *s, const float *q_lat, const float *q_pe, const float *latent,
                         const float *k_pe, int n, float *scores)
{
    for (int j = 0; j < n; j++)
        scores[j] = (dot(q_lat, latent + (size_t)j * s->kv_lora, s->kv_lora) +
                     dot(q_pe, k_pe + (size_t)j * s->rope, s->rope)) * s->softmax_scale;
}

static void softmax_update(int wide, softmax_state *state, float *acc, int width, float *scores, int n,
                           const float *values)
{
#if KIMI_MLA_AVX512
    if (wide) {
        online_softmax_update_avx512(state, acc, width, scores, n, values);
        return;
    }
#endif
    (void)wide;
    online_softmax_update(state, acc, width, scores, n, values);
}

static void f16_row(int wide, const uint16_t *in, int n, float *out)
{
#if KIMI_MLA_AVX512
    if (wide) {
        f16_row_to_float_avx512(in, n, out);
        return;
    }
#endif
    (void)wide;
    f16_row_to_float(in, (size_t)n, out);
}

/* Cache rows [first, first + n) -> latent [n][kv_lora] and k_pe [n][rope] as float. */
static void chunk_to_float(const mla_shape *s, int wide, const void *cache, long first, int n,
                           float *latent, float *k_pe)
{
    size_t row_bytes = kv_row_bytes(s->cache_format, s->kv_lora, s->rope);
    for (int j = 0; j < n; j++) {
        const uint8_t *entry = (const uint8_t *)cache + (size_t)(first + j) * row_bytes;
        float *latent_j = latent + (size_t)j * s->kv_lora;
        if (s->cache_format == KV_CACHE_FP8) {
            for (int b = 0; b < kv_fp8_blocks(s->kv_lora); b++) {
                float scale = kv_fp8_row_scale(entry, s->kv_lora, b);
                int end = (b + 1) * KV_FP8_BLOCK < s->kv_lora ? (b + 1) * KV_FP8_BLOCK : s->kv_lora;
                for (int i = b * KV_FP8_BLOCK; i < end; i++)
                    latent_j[i] = kv_fp8_decode(entry[i], scale);
            }
            f16_row(wide, (const uint16_t *)kv_fp8_row_rope(entry, s->kv_lora), s->rope, k_pe + (size_t)j * s->rope);
        } else {
            f16_row(wide, (const uint16_t *)entry, s->kv_lora, latent_j);
            f16_row(wide, (const uint16_t *)entry + s->kv_lora, s->rope, k_pe + (size_t)j * s->rope);
        }
    }
}

void mla_absorb_query(const mla_shape *s, const weight_matrix *kv_b, int head_begin, int head_end, const float *q,
                      float *q_abs)
{
    int q_width = s->nope + s->rope, kv_b_rows = s->nope + s->v, abs_width = s->kv_lora + s->rope;
    /* q_latent = W_UK^T q_nope, so q_nope . (W_UK c) = q_latent . c */
    for (int head = head_begin; head < head_end; head++) {
        float *q_lat = q_abs + (size_t)(head - head_begin) * abs_width;
        const float *q_head = q + (size_t)head * q_width;
        weight_matrix w_uk = linear_row_view(kv_b, head * kv_b_rows, head * kv_b_rows + s->nope);
        memset(q_lat, 0, (size_t)s->kv_lora * sizeof(float));
        linear_transposed_accumulate(&w_uk, q_head, q_lat);
        memcpy(q_lat + s->kv_lora, q_head + s->nope, (size_t)s->rope * sizeof(float));
    }
}

size_t mla_partial_scratch_floats(const mla_shape *s)
{
    return (size_t)CHUNK * (s->kv_lora + s->rope + HEAD_GROUP);
}

WIDE_VECTOR_CLONES
void mla_decode_partial(const mla_shape *s, const float *q_abs, int head_count, const void *cache, long n_rows,
                        float *scratch, float *parts)
{
    int abs_width = s->kv_lora + s->rope;
    size_t part_floats = ATTENTION_PART_FLOATS(s->kv_lora);
    float *latent = scratch;                                    /* [CHUNK][kv_lora] */
    float *k_pe = latent + (size_t)CHUNK * s->kv_lora;          /* [CHUNK][rope] */
    float *scores = k_pe + (size_t)CHUNK * s->rope;             /* [HEAD_GROUP][CHUNK] */
    int wide = attention_wide();

    for (int h = 0; h < head_count; h++) {
        float *part = parts + (size_t)h * part_floats;
        memset(part + 2, 0, (size_t)s->kv_lora * sizeof(float));
        part[0] = -INFINITY;
        part[1] = 0.0f;
    }
    for (long first = 0; first < n_rows; first += CHUNK) {
        int n = n_rows - first < CHUNK ? (int)(n_rows - first) : CHUNK;
        chunk_to_float(s, wide, cache, first, n, latent, k_pe);
#if KIMI_MLA_AVX512
        if (wide) {
            decode_chunk_avx512(s, q_abs, head_count, latent, k_pe, n, scores, parts);
            continue;
        }
#endif
        for (int h = 0; h < head_count; h++) {
            const float *q_lat = q_abs + (size_t)h * abs_width, *q_pe = q_lat + s->kv_lora;
            float *part = parts + (size_t)h * part_floats;
            chunk_scores(s, q_lat, q_pe, latent, k_pe, n, scores);
            softmax_state state = {part[0], part[1]};
            softmax_update(wide, &state, part + 2, s->kv_lora, scores, n, latent);
            part[0] = state.max;
            part[1] = state.sum;
        }
    }
}

void mla_merge_parts(const mla_shape *s, const float *parts, int n_parts, size_t part_stride, float *o_latent)
{
    float global_max = attention_parts_max(parts, n_parts, part_stride);
    float inverse = attention_parts_inverse_total(parts, n_parts, part_stride, global_max);
    /* attention_parts_merge_element's sums, parts outer: each part's weight (an expf) once, not
     * once per element. */
    for (int c = 0; c < s->kv_lora; c++)
        o_latent[c] = 0.0f;
    for (int p = 0; p < n_parts; p++) {
        const float *part = parts + (size_t)p * part_stride;
        if (part[1] == 0.0f)
            continue;
        float weight = attention_part_weight(part, global_max);
        for (int c = 0; c < s->kv_lora; c++)
            o_latent[c] += part[2 + c] * weight;
    }
    for (int c = 0; c < s->kv_lora; c++)
        o_latent[c] *= inverse;
}

void mla_apply_uv(const mla_shape *s, const weight_matrix *kv_b, int head, const float *o_latent, float *out)
{
    int kv_b_rows = s->nope + s->v;
    weight_matrix w_uv = linear_row_view(kv_b, head * kv_b_rows + s->nope, (head + 1) * kv_b_rows);
    linear_rows(&w_uv, o_latent, 0, 1, out, 0, 0, s->v);
}

size_t mla_decode_scratch_floats(const mla_shape *s, int head_count)
{
    return mla_partial_scratch_floats(s) + (size_t)head_count * (s->kv_lora + s->rope) +
           (size_t)head_count * ATTENTION_PART_FLOATS(s->kv_lora) + (size_t)s->kv_lora;
}

void mla_decode(const mla_shape *s, const weight_matrix *kv_b, int head_begin, int head_end,
                const float *q, const void *cache, long n_pos, float *scratch, float *out)
{
    int head_count = head_end - head_begin;
    size_t part_floats = ATTENTION_PART_FLOATS(s->kv_lora);
    float *q_abs = scratch + mla_partial_scratch_floats(s);            /* [head_count][kv_lora + rope] */
    float *parts = q_abs + (size_t)head_count * (s->kv_lora + s->rope); /* [head_count][part] */
    float *o_latent = parts + (size_t)head_count * part_floats;         /* [kv_lora] */

    mla_absorb_query(s, kv_b, head_begin, head_end, q, q_abs);
    mla_decode_partial(s, q_abs, head_count, cache, n_pos, scratch, parts);
    /* W_UV after the weighted sum over the latent (the merge of one part normalises it). */
    for (int h = 0; h < head_count; h++) {
        mla_merge_parts(s, parts + (size_t)h * part_floats, 1, part_floats, o_latent);
        mla_apply_uv(s, kv_b, head_begin + h, o_latent, out + (size_t)(head_begin + h) * s->v);
    }
}

size_t mla_prefill_scratch_floats(const mla_shape *s, int n_tokens)
{
    return (size_t)CHUNK * (s->kv_lora + s->rope + s->nope + s->v + 1) +
           (size_t)n_tokens * (s->v + 2);
}

WIDE_VECTOR_CLONES
void mla_prefill(const mla_shape *s, const weight_matrix *kv_b, int head_begin, int head_end,
                 const float *q, int n_tokens, long start_pos, const void *cache,
                 float *scratch, float *out)
{
    int kv_b_rows = s->nope + s->v, n_heads = kv_b->rows / kv_b_rows;
    size_t q_row = (size_t)n_heads * (s->nope + s->rope), out_row = (size_t)n_heads * s->v;
    long n_pos = start_pos + n_tokens;
    float *latent = scratch;                                    /* [CHUNK][kv_lora] */
    float *k_pe = latent + (size_t)CHUNK * s->kv_lora;          /* [CHUNK][rope] */
    float *k_nope = k_pe + (size_t)CHUNK * s->rope;             /* [CHUNK][nope] */
    float *values = k_nope + (size_t)CHUNK * s->nope;           /* [CHUNK][v] */
    float *scores = values + (size_t)CHUNK * s->v;              /* [CHUNK] */
    float *acc = scores + CHUNK;                                /* [n_tokens][v] */
    softmax_state *state = (softmax_state *)(acc + (size_t)n_tokens * s->v); /* [n_tokens] */
    int wide = attention_wide();

    for (int head = head_begin; head < head_end; head++) {
        weight_matrix w_uk = linear_row_view(kv_b, head * kv_b_rows, head * kv_b_rows + s->nope);
        weight_matrix w_uv = linear_row_view(kv_b, head * kv_b_rows + s->nope, (head + 1) * kv_b_rows);
        memset(acc, 0, (size_t)n_tokens * s->v * sizeof(float));
        for (int t = 0; t < n_tokens; t++)
            state[t] = (softmax_state){-INFINITY, 0.0f};
        for (long first = 0; first < n_pos; first += CHUNK) {
            int n = n_pos - first < CHUNK ? (int)(n_pos - first) : CHUNK;
            chunk_to_float(s, wide, cache, first, n, latent, k_pe);
            linear_rows(&w_uk, latent, s->kv_lora, n, k_nope, s->nope, 0, s->nope);
            linear_rows(&w_uv, latent, s->kv_lora, n, values, s->v, 0, s->v);
            for (int t = 0; t < n_tokens; t++) {
                long visible = start_pos + t + 1 - first; /* causal: positions <= start_pos + t */
                if (visible <= 0)
                    continue;
                int m = visible < n ? (int)visible : n;
                const float *q_nope = q + t * q_row + (size_t)head * (s->nope + s->rope);
                const float *q_pe = q_nope + s->nope;
                for (int j = 0; j < m; j++)
                    scores[j] = (dot(q_nope, k_nope + (size_t)j * s->nope, s->nope) +
                                 dot(q_pe, k_pe + (size_t)j * s->rope, s->rope)) * s->softmax_scale;
                softmax_update(wide, &state[t], acc + (size_t)t * s->v, s->v, scores, m, values);
            }
        }
        for (int t = 0; t < n_tokens; t++) {
            float inverse = 1.0f / state[t].sum;
            float *o = out + t * out_row + (size_t)head * s->v;
            for (int i = 0; i < s->v; i++)
                o[i] = acc[(size_t)t * s->v + i] * inverse;
        }
    }
}
