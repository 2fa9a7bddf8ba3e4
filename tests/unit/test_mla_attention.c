/* test_mla_attention: absorbed decode and expanded prefill attention over an fp16 latent cache
 * against a float64 evaluation of the unabsorbed definition (k_nope and v expanded per head
 * from the fp16 latent, causal softmax), for BF16 and NVFP4 kv_b, over several cache chunks,
 * with a prefix already cached; and the two kernels against each other. Over an fp8 cache
 * (kernels/kv_format.h, one block of latent and several, the last partial) both kernels give
 * bit for bit what they give over the fp16 values the fp8 rows decode to. Partial attentions
 * over parts of the cache merged (decode context parallelism) carry a non-finite cache value
 * into the output as the whole decode does. The AVX-512 scores, weighted sums and fp16
 * conversion give the portable loops' bits (widths with whole and partial strips and tails, head
 * counts with whole and partial groups of four). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_merge_math.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/check.h"
#include "tests/unit/xorshift.h"

enum { KV_LORA = 32, ROPE = 8, NOPE = 16, V = 12, HEADS = 3, POSITIONS = 150, PREFILL = 70 };
enum { Q_WIDTH = NOPE + ROPE, KV_B_ROWS = HEADS * (NOPE + V), ROW = KV_LORA + ROPE };

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static float uniform(void)
{
    return (float)((xorshift64(&rng_state) >> 11) % 2000001) / 1000000.0f - 1.0f;
}

/* out [V] of head h for a query q [HEADS][Q_WIDTH] at position pos. */
static void reference(const weight_matrix *kv_b, const uint16_t *cache, const float *q, int h, long pos, float scale,
                      double *out)
{
    float w[KV_B_ROWS][KV_LORA], c[KV_LORA];
    for (int r = 0; r < KV_B_ROWS; r++)
        weight_matrix_decode_row(kv_b, r, w[r]);
    double *scores = malloc((size_t)(pos + 1) * sizeof *scores), max = -INFINITY, sum = 0;
    const float *q_h = q + h * Q_WIDTH;
    for (long p = 0; p <= pos; p++) {
        for (int i = 0; i < KV_LORA; i++)
            c[i] = f16_to_float(cache[p * ROW + i]);
        double score = 0;
        for (int d = 0; d < NOPE; d++) {
            double k = 0;
            for (int i = 0; i < KV_LORA; i++)
                k += (double)w[h * (NOPE + V) + d][i] * c[i];
            score += q_h[d] * k;
        }
        for (int d = 0; d < ROPE; d++)
            score += (double)q_h[NOPE + d] * f16_to_float(cache[p * ROW + KV_LORA + d]);
        scores[p] = score * scale;
        max = fmax(max, scores[p]);
    }
    for (int d = 0; d < V; d++)
        out[d] = 0;
    for (long p = 0; p <= pos; p++) {
        double weight = exp(scores[p] - max);
        sum += weight;
        for (int i = 0; i < KV_LORA; i++)
            c[i] = f16_to_float(cache[p * ROW + i]);
        for (int d = 0; d < V; d++) {
            double v = 0;
            for (int i = 0; i < KV_LORA; i++)
                v += (double)w[h * (NOPE + V) + NOPE + d][i] * c[i];
            out[d] += weight * v;
        }
    }
    for (int d = 0; d < V; d++)
        out[d] /= sum;
    free(scores);
}

static void check_kv_b(const char *what, const weight_matrix *kv_b, const uint16_t *cache)
{
    mla_shape s = {KV_LORA, ROPE, NOPE, V, 0.3f, KV_CACHE_FP16};
    float q[PREFILL][HEADS][Q_WIDTH], out[PREFILL][HEADS][V], decoded[HEADS][V];
    for (int t = 0; t < PREFILL; t++)
        for (int h = 0; h < HEADS; h++)
            for (int d = 0; d < Q_WIDTH; d++)
                q[t][h][d] = uniform();
    float *scratch = malloc(mla_prefill_scratch_floats(&s, PREFILL) * sizeof *scratch);
    long start = POSITIONS - PREFILL;
    memset(out, 0xFF, sizeof out); /* NaN: heads outside the range must stay so */
    mla_prefill(&s, kv_b, 1, HEADS, &q[0][0][0], PREFILL, start, cache, scratch, &out[0][0][0]);
    mla_prefill(&s, kv_b, 0, 1, &q[0][0][0], PREFILL, start, cache, scratch, &out[0][0][0]);
    double worst = 0;
    for (int t = 0; t < PREFILL; t += 23)
        for (int h = 0; h < HEADS; h++) {
            double want[V];
            reference(kv_b, cache, &q[t][0][0], h, start + t, s.softmax_scale, want);
            for (int d = 0; d < V; d++)
                worst = fmax(worst, isnan(out[t][h][d]) ? INFINITY : fabs(out[t][h][d] - want[d]));
        }
    CHECK_MSG(worst < 2e-5, "%s prefill: max error %g", what, worst);

    /* Decode of the last prefill token, heads split in two calls like two workers. */
    free(scratch);
    scratch = malloc(mla_decode_scratch_floats(&s, HEADS) * sizeof *scratch);
    memset(decoded, 0xFF, sizeof decoded);
    mla_decode(&s, kv_b, 0, 2, &q[PREFILL - 1][0][0], cache, POSITIONS, scratch, &decoded[0][0]);
    CHECK(isnan(decoded[2][0]));
    mla_decode(&s, kv_b, 2, 3, &q[PREFILL - 1][0][0], cache, POSITIONS, scratch, &decoded[0][0]);
    worst = 0;
    double agree = 0;
    for (int h = 0; h < HEADS; h++) {
        double want[V];
        reference(kv_b, cache, &q[PREFILL - 1][0][0], h, POSITIONS - 1, s.softmax_scale, want);
        for (int d = 0; d < V; d++) {
            worst = fmax(worst, isnan(decoded[h][d]) ? INFINITY : fabs(decoded[h][d] - want[d]));
            agree = fmax(agree, fabs(decoded[h][d] - out[PREFILL - 1][h][d]));
        }
    }
    CHECK_MSG(worst < 2e-5, "%s decode: max error %g", what, worst);
    CHECK_MSG(agree < 2e-5, "%s: decode and prefill differ by %g", what, agree);

    /* A single cached position: the output is that position's value. */
    mla_decode(&s, kv_b, 0, HEADS, &q[0][0][0], cache, 1, scratch, &decoded[0][0]);
    double want[V];
    reference(kv_b, cache, &q[0][0][0], 1, 0, s.softmax_scale, want);
    worst = 0;
    for (int d = 0; d < V; d++)
        worst = fmax(worst, fabs(decoded[1][d] - want[d]));
    CHECK_MSG(worst < 2e-5, "%s decode at position 0: error %g", what, worst);
    free(scratch);
}

/* Attention over fp8 rows of kv_lora latent values (positions [n_pos]) equals, bit for bit,
 * attention over the fp16 rows they decode to: decode of the last position, and a causal
 * prefill of the last `prefill` positions. */
static void check_fp8(int kv_lora, long n_pos, int prefill)
{
    enum { HEADS_8 = 2 };
    int rows = HEADS_8 * (NOPE + V), q_width = NOPE + ROPE;
    size_t fp8_row = kv_row_bytes(KV_CACHE_FP8, kv_lora, ROPE), half_row = (size_t)kv_lora + ROPE;
    uint8_t *fp8 = malloc((size_t)n_pos * fp8_row);
    uint16_t *halves = malloc((size_t)n_pos * half_row * sizeof *halves), *kv_b16 = malloc((size_t)rows * kv_lora * 2);
    float *values = malloc(half_row * sizeof *values), *q = malloc((size_t)prefill * HEADS_8 * q_width * sizeof *q);
    float *out8 = malloc((size_t)prefill * HEADS_8 * V * sizeof *out8), *out16 = malloc((size_t)prefill * HEADS_8 * V * 4);
    for (long p = 0; p < n_pos; p++) {
        for (size_t i = 0; i < half_row; i++)
            values[i] = uniform() * (i == 7 ? 30.0f : 2.0f); /* an outlier channel in block 0 */
        kv_fp8_encode_row(values, kv_lora, ROPE, fp8 + (size_t)p * fp8_row);
        kv_row_to_half(KV_CACHE_FP8, fp8 + (size_t)p * fp8_row, kv_lora, ROPE, halves + (size_t)p * half_row);
    }
    for (int i = 0; i < rows * kv_lora; i++) {
        float v = uniform() * 0.3f;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        kv_b16[i] = (uint16_t)(bits >> 16);
    }
    weight_matrix kv_b = {WEIGHT_BF16, rows, kv_lora, (const uint8_t *)kv_b16, (size_t)kv_lora * 2, NULL, 0, 1.0f};
    for (int i = 0; i < prefill * HEADS_8 * q_width; i++)
        q[i] = uniform();
    mla_shape s16 = {kv_lora, ROPE, NOPE, V, 0.2f, KV_CACHE_FP16}, s8 = s16;
    s8.cache_format = KV_CACHE_FP8;
    size_t scratch_floats = mla_prefill_scratch_floats(&s16, prefill), d = mla_decode_scratch_floats(&s16, HEADS_8);
    float *scratch = malloc((scratch_floats > d ? scratch_floats : d) * sizeof *scratch);
    mla_prefill(&s8, &kv_b, 0, HEADS_8, q, prefill, n_pos - prefill, fp8, scratch, out8);
    mla_prefill(&s16, &kv_b, 0, HEADS_8, q, prefill, n_pos - prefill, halves, scratch, out16);
    CHECK_MSG(!memcmp(out8, out16, (size_t)prefill * HEADS_8 * V * sizeof *out8), "kv_lora %d: fp8 prefill differs",
              kv_lora);
    const float *q_last = q + (size_t)(prefill - 1) * HEADS_8 * q_width;
    mla_decode(&s8, &kv_b, 0, HEADS_8, q_last, fp8, n_pos, scratch, out8);
    mla_decode(&s16, &kv_b, 0, HEADS_8, q_last, halves, n_pos, scratch, out16);
    CHECK_MSG(!memcmp(out8, out16, HEADS_8 * V * sizeof *out8), "kv_lora %d: fp8 decode differs", kv_lora);
    int finite = 1;
    for (int i = 0; i < HEADS_8 * V; i++)
        finite &= isfinite(out8[i]) && out8[i] != 0.0f;
    CHECK(finite);
    free(fp8), free(halves), free(kv_b16), free(values), free(q), free(out8), free(out16), free(scratch);
}

/* Decode and prefill over an fp16 cache of n_pos positions give the same bits with the
 * attention's AVX-512 paths (LINEAR_SIMD_AVX512: BF16 products stay the portable loops there)
 * as with none, for `heads` heads (the AVX-512 decode takes them four at a time, the last group
 * possibly short); and so does the partial attention of the same absorbed queries at every SIMD
 * level the CPU has. */
static void check_simd_bits(int kv_lora, int rope, long n_pos, int prefill, int heads)
{
    int rows = heads * (NOPE + V), q_width = NOPE + rope;
    size_t half_row = (size_t)kv_lora + rope, outs = (size_t)prefill * heads * V;
    uint16_t *cache = malloc((size_t)n_pos * half_row * sizeof *cache), *kv_b16 = malloc((size_t)rows * kv_lora * 2);
    float *q = malloc((size_t)prefill * heads * q_width * sizeof *q);
    float *out[2] = {malloc(outs * sizeof(float)), malloc(outs * sizeof(float))};
    float *dec[2] = {malloc(heads * V * sizeof(float)), malloc(heads * V * sizeof(float))};
    for (size_t i = 0; i < (size_t)n_pos * half_row; i++)
        cache[i] = float_to_f16(uniform() * 3.0f);
    for (int i = 0; i < rows * kv_lora; i++) {
        float v = uniform() * 0.3f;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        kv_b16[i] = (uint16_t)(bits >> 16);
    }
    for (int i = 0; i < prefill * heads * q_width; i++)
        q[i] = uniform();
    weight_matrix kv_b = {WEIGHT_BF16, rows, kv_lora, (const uint8_t *)kv_b16, (size_t)kv_lora * 2, NULL, 0, 1.0f};
    mla_shape s = {kv_lora, rope, NOPE, V, 0.25f, KV_CACHE_FP16};
    size_t p_floats = mla_prefill_scratch_floats(&s, prefill), d_floats = mla_decode_scratch_floats(&s, heads);
    float *scratch = malloc((p_floats > d_floats ? p_floats : d_floats) * sizeof *scratch);
    const int levels[2] = {LINEAR_SIMD_NONE, LINEAR_SIMD_AVX512};
    for (int k = 0; k < 2; k++) {
        linear_use_simd(levels[k]);
        mla_prefill(&s, &kv_b, 0, heads, q, prefill, n_pos - prefill, cache, scratch, out[k]);
        mla_decode(&s, &kv_b, 0, heads, q + (size_t)(prefill - 1) * heads * q_width, cache, n_pos, scratch,
                   dec[k]);
    }
    linear_use_simd(LINEAR_SIMD_BEST);
    CHECK_MSG(!memcmp(out[0], out[1], outs * sizeof(float)), "kv_lora %d rope %d: SIMD prefill differs", kv_lora,
              rope);
    CHECK_MSG(!memcmp(dec[0], dec[1], heads * V * sizeof(float)), "kv_lora %d rope %d: SIMD decode differs",
              kv_lora, rope);
    CHECK(isfinite(dec[1][0]) && dec[1][0] != 0.0f);

    size_t abs_floats = (size_t)heads * (kv_lora + rope), part_floats = heads * ATTENTION_PART_FLOATS(kv_lora);
    float *q_abs = malloc(abs_floats * sizeof *q_abs), *parts[2] = {malloc(part_floats * 4), malloc(part_floats * 4)};
    for (size_t i = 0; i < abs_floats; i++)
        q_abs[i] = uniform();
    linear_use_simd(LINEAR_SIMD_NONE);
    mla_decode_partial(&s, q_abs, heads, cache, n_pos, scratch, parts[0]);
    for (int level = LINEAR_SIMD_AVX512; level <= LINEAR_SIMD_BEST; level++) {
        if (linear_use_simd(level) != level)
            continue;
        mla_decode_partial(&s, q_abs, heads, cache, n_pos, scratch, parts[1]);
        CHECK_MSG(!memcmp(parts[0], parts[1], part_floats * sizeof(float)),
                  "kv_lora %d rope %d heads %d: partial attention at SIMD level %d differs", kv_lora, rope, heads,
                  level);
    }
    linear_use_simd(LINEAR_SIMD_BEST);
    free(q_abs), free(parts[0]), free(parts[1]);
    free(cache), free(kv_b16), free(q), free(out[0]), free(out[1]), free(dec[0]), free(dec[1]), free(scratch);
}

/* A NaN in one part's positions makes the merged output NaN, as in the decode over the whole
 * cache: a part whose softmax sum is NaN is no empty part, and dropping it would hide a
 * non-finite activation from the backend's check behind a finite attention output. */
static void check_merge_nonfinite(const weight_matrix *kv_b, const uint16_t *finite_cache)
{
    enum { SPLIT = 75 };
    static uint16_t cache[POSITIONS * ROW];
    memcpy(cache, finite_cache, sizeof cache);
    cache[100 * ROW + 3] = 0x7E00; /* fp16 NaN in position 100's latent, in the second part */
    mla_shape s = {KV_LORA, ROPE, NOPE, V, 0.3f, KV_CACHE_FP16};
    float q[HEADS][Q_WIDTH], q_abs[HEADS][KV_LORA + ROPE], whole[HEADS][V], merged[HEADS][V];
    for (int h = 0; h < HEADS; h++)
        for (int d = 0; d < Q_WIDTH; d++)
            q[h][d] = uniform();
    float *scratch = malloc(mla_decode_scratch_floats(&s, HEADS) * sizeof *scratch);
    mla_decode(&s, kv_b, 0, HEADS, &q[0][0], cache, POSITIONS, scratch, &whole[0][0]);
    size_t part = ATTENTION_PART_FLOATS(KV_LORA);
    float *parts = malloc(2 * HEADS * part * sizeof *parts), o_latent[KV_LORA];
    mla_absorb_query(&s, kv_b, 0, HEADS, &q[0][0], &q_abs[0][0]);
    mla_decode_partial(&s, &q_abs[0][0], HEADS, cache, SPLIT, scratch, parts);
    mla_decode_partial(&s, &q_abs[0][0], HEADS, cache + SPLIT * ROW, POSITIONS - SPLIT, scratch, parts + HEADS * part);
    for (int h = 0; h < HEADS; h++) {
        mla_merge_parts(&s, parts + h * part, 2, HEADS * part, o_latent);
        mla_apply_uv(&s, kv_b, h, o_latent, merged[h]);
    }
    for (int h = 0; h < HEADS; h++) {
        CHECK_MSG(isnan(whole[h][0]), "head %d: the whole decode is %g over a NaN", h, whole[h][0]);
        CHECK_MSG(isnan(merged[h][0]), "head %d: the merged parts are %g over a NaN", h, merged[h][0]);
    }
    free(scratch);
    free(parts);
}

/* mla_merge_parts gives attention_merge_math's element-by-element merge bit for bit: parts with
 * different maxima, an empty one among them, and a single part (a decode without context
 * parallelism). */
static void check_merge_bits(void)
{
    enum { WIDTH = 40, PARTS = 4, STRIDE = WIDTH + 2 };
    mla_shape s = {WIDTH, ROPE, NOPE, V, 0.3f, KV_CACHE_FP16};
    float parts[PARTS * STRIDE], got[WIDTH], want[WIDTH];
    for (int p = 0; p < PARTS; p++) {
        parts[p * STRIDE] = 3.0f * uniform();
        parts[p * STRIDE + 1] = 1.0f + 20.0f * fabsf(uniform());
        for (int c = 0; c < WIDTH; c++)
            parts[p * STRIDE + 2 + c] = 5.0f * uniform();
    }
    parts[2 * STRIDE] = -INFINITY; /* part 2 empty */
    parts[2 * STRIDE + 1] = 0.0f;
    for (int c = 0; c < WIDTH; c++)
        parts[2 * STRIDE + 2 + c] = 0.0f;
    for (int n_parts = 1; n_parts <= PARTS; n_parts += PARTS - 1) {
        float max = attention_parts_max(parts, n_parts, STRIDE);
        float inverse = attention_parts_inverse_total(parts, n_parts, STRIDE, max);
        for (int c = 0; c < WIDTH; c++)
            want[c] = attention_parts_merge_element(parts, n_parts, STRIDE, max, inverse, c);
        mla_merge_parts(&s, parts, n_parts, STRIDE, got);
        CHECK_MSG(!memcmp(got, want, sizeof got), "%d parts: mla_merge_parts differs from the element merge", n_parts);
    }
}

int main(void)
{
    check_merge_bits();
    check_fp8(KV_LORA, POSITIONS, 20);
    check_fp8(320, 100, 70);
    check_simd_bits(KV_LORA, ROPE, POSITIONS, 20, 2);
    check_simd_bits(160, 24, 150, 30, 5);
    check_simd_bits(512, 64, 70, 5, 2);
    check_simd_bits(512, 64, 131, 3, 9); /* the bench model's shape: two groups of four heads and one */
    check_simd_bits(72, 64, 66, 2, 4);   /* a last chunk of two rows */
    static uint16_t cache[POSITIONS * ROW];
    for (int i = 0; i < POSITIONS * ROW; i++)
        cache[i] = float_to_f16(uniform() * 2.0f);

    static uint16_t bf16[KV_B_ROWS * KV_LORA];
    for (int i = 0; i < KV_B_ROWS * KV_LORA; i++) {
        float v = uniform() * 0.5f;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        bf16[i] = (uint16_t)(bits >> 16);
    }
    weight_matrix w = {WEIGHT_BF16, KV_B_ROWS, KV_LORA, (const uint8_t *)bf16, KV_LORA * 2, NULL, 0, 1.0f};
    check_kv_b("bf16", &w, cache);
    check_merge_nonfinite(&w, cache);

    static uint8_t packed[KV_B_ROWS * KV_LORA / 2], scales[KV_B_ROWS * KV_LORA / 16];
    for (int i = 0; i < KV_B_ROWS * KV_LORA / 2; i++)
        packed[i] = (uint8_t)(uniform() * 127 + 128);
    for (int i = 0; i < KV_B_ROWS * KV_LORA / 16; i++)
        scales[i] = (uint8_t)(0x30 + i % 16);
    weight_matrix nv = {WEIGHT_NVFP4, KV_B_ROWS, KV_LORA, packed, KV_LORA / 2, scales, KV_LORA / 16, 0.05f};
    check_kv_b("nvfp4", &nv, cache);
    return check_finish();
}
