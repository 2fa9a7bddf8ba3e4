/* linear_int8: NVFP4 products with int8 activations (the contract is in linear_int8.h).
 *
 * Layout. A row is cut into chunks of 128 columns (8 blocks, 64 bytes of codes, one load). Byte
 * i of a chunk's codes holds columns 2i (low nibble) and 2i + 1 (high nibble), so the chunk's
 * low nibbles, looked up as they are, and its high nibbles, shifted down, give two 64-byte
 * registers of weights: the even and the odd columns in order. The quantised activations are
 * stored the same way once per call (per chunk: 64 bytes of even columns, then 64 of odd). The
 * 16 dword lanes of vpdpbusd each sum 4 neighbouring bytes, so lane d of both registers covers
 * columns 8d .. 8d + 7 of the chunk, all in block 8c + d / 2, and both dot products go into one
 * integer sum. Per chunk and token:
 *   lane_sum[d] = sum of its 8 (2 e2m1 + 12) * q  - 12 * sum of its 8 q      (exact: the codes
 *                 go in as unsigned 2 e2m1 + 12 in [0, 24], vpdpbusd's unsigned operand, and the
 *                 correction, precomputed per token, starts the sum)
 *   acc[c % 2][d] = fma((float)lane_sum[d], e4m3(s_rb) * a_b, acc[c % 2][d])   (b: d's block)
 * and the row's value is (scale_2 / 2) times the 16 lanes of acc[0] + acc[1] summed by
 * lanes_sum. One conversion and one fma per 128 columns (a chunk of 64 took one each, and a
 * broadcast), ~0.6 vector operations per 16 weights. The portable loops do exactly these
 * operations (fmaf), so both give the same bits.
 */
#include "kernels/cpu/linear_int8.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/e4m3_avx512.h"
#include "kernels/cpu/linear.h"
#include "kernels/nvfp4_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define KIMI_INT8_AVX512 1
#include <immintrin.h>
#else
#define KIMI_INT8_AVX512 0
#endif

enum {
    BLOCK = 16,          /* columns per NVFP4 block (one scale) */
    CHUNK = 128,         /* columns per chunk: one 64-byte register of codes, two vpdpbusd */
    CHUNK_BLOCKS = CHUNK / BLOCK,
    CHUNK_BYTES = CHUNK / 2, /* bytes of codes per chunk; also bytes of each half of its q */
    LANES = 16,          /* dword lanes of a chunk's sums, 8 columns (half a block) each */
    GROUP_BLOCKS = 16,   /* blocks whose scales are converted at once (one register) */
    GROUP_CHUNKS = GROUP_BLOCKS / CHUNK_BLOCKS,
    TILE = 4,            /* tokens that share each decoded chunk */
    ROW_CHUNK = 64,      /* rows that meet every tile before the next rows are read (batches) */
    CODE_OFFSET = 12,    /* 2 e2m1 + CODE_OFFSET >= 0 */
    QMAX = 127,
    /* Weights are prefetched this far ahead of the chunk being read, and their scales as far
     * in blocks: one thread streaming at ~25 GB/s with ~100 ns to memory needs ~2.5 KB in flight
     * (1 KiB left the loads waiting; without the scales' prefetch the moe micro-benchmark read
     * 15-16 GB/s, with it 17-23). */
    PREFETCH_AHEAD_BYTES = 4096,
};

/* Blocks whose max|x| is below PRESCALE_BELOW are multiplied by PRESCALE before 127 / max. */
static const float PRESCALE_BELOW = 0x1p-64f, PRESCALE = 0x1p64f;

/* One token's activations, quantised: q [chunks][CHUNK] (per chunk its even columns, then its
 * odd ones), correction [chunks][LANES] = -CODE_OFFSET * (sum of the lane's 8 q), scale
 * [groups * GROUP_BLOCKS] = a_b (0 past the last block). */
typedef struct {
    int8_t *q;
    int32_t *correction;
    float *scale;
} quantized_token;

static size_t chunks_of(int cols) { return ((size_t)cols / BLOCK + CHUNK_BLOCKS - 1) / CHUNK_BLOCKS; }

static size_t scale_slots_of(int cols)
{
    return ((size_t)cols / BLOCK + GROUP_BLOCKS - 1) / GROUP_BLOCKS * GROUP_BLOCKS;
}

/* Bytes of one quantized_token's arrays for a row of cols columns (64-byte multiples). */
static size_t token_bytes(int cols)
{
    return chunks_of(cols) * (CHUNK + LANES * sizeof(int32_t)) + scale_slots_of(cols) * sizeof(float);
}

enum { TOKEN_BYTES_MAX = (LINEAR_INT8_COLS_MAX / CHUNK) * (CHUNK + LANES * 4) + LINEAR_INT8_COLS_MAX / BLOCK * 4 };

static quantized_token token_at(uint8_t *buffer, int cols, int t)
{
    uint8_t *base = buffer + (size_t)t * token_bytes(cols);
    size_t chunks = chunks_of(cols);
    quantized_token token = {(int8_t *)base, (int32_t *)(base + chunks * CHUNK),
                             (float *)(base + chunks * (CHUNK + LANES * sizeof(int32_t)))};
    return token;
}

/* Byte p of a chunk's q -> its column within the chunk: the even columns, then the odd. */
static int chunk_column(int p) { return p < CHUNK_BYTES ? 2 * p : 2 * (p - CHUNK_BYTES) + 1; }

static int simd_available; /* AVX-512 F/BW/VL + VBMI + VNNI */
static pthread_once_t simd_once = PTHREAD_ONCE_INIT;

static void simd_detect(void)
{
#if KIMI_INT8_AVX512
    __builtin_cpu_init();
    simd_available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
                     __builtin_cpu_supports("avx512vnni");
#endif
}

int linear_int8_simd(void)
{
    pthread_once(&simd_once, simd_detect);
    return simd_available && linear_simd_level() >= LINEAR_SIMD_AVX512_VBMI;
}

/* a_b and q of one block of 16 columns (the rule in linear_int8.h). */
static float block_quantize(const float *x, int8_t q[BLOCK])
{
    float amax = 0.0f;
    int finite = 1;
    for (int k = 0; k < BLOCK; k++) {
        float m = fabsf(x[k]);
        if (!(m <= FLT_MAX))
            finite = 0;
        else if (m > amax)
            amax = m;
    }
    if (!finite || amax == 0.0f) {
        memset(q, 0, BLOCK);
        return finite ? 0.0f : NAN;
    }
    /* 127 / amax overflows float below amax = 127 / FLT_MAX (blocks of denormals among them):
     * such blocks are scaled by 2^64 first, exactly, so x * (127 / amax) keeps its value. */
    float prescale = amax < PRESCALE_BELOW ? PRESCALE : 1.0f, inverse = (float)QMAX / (amax * prescale);
    for (int k = 0; k < BLOCK; k++) {
        float rounded = nearbyintf(x[k] * prescale * inverse);
        q[k] = (int8_t)(rounded > QMAX ? QMAX : rounded < -QMAX ? -QMAX : rounded);
    }
    return amax / (float)QMAX;
}

static void quantize_portable(const float *x, int cols, quantized_token *out)
{
    int blocks = cols / BLOCK;
    size_t chunks = chunks_of(cols);
    memset(out->q, 0, chunks * CHUNK);
    memset(out->scale, 0, scale_slots_of(cols) * sizeof(float));
    for (int b = 0; b < blocks; b++) {
        int8_t q[BLOCK];
        out->scale[b] = block_quantize(x + (size_t)b * BLOCK, q);
        for (int k = 0; k < BLOCK; k++) {
            int col = b * BLOCK + k, c = col / CHUNK, i = col % CHUNK;
            out->q[(size_t)c * CHUNK + (i % 2 ? CHUNK_BYTES + i / 2 : i / 2)] = q[k];
        }
    }
    for (size_t c = 0; c < chunks; c++)
        for (int lane = 0; lane < LANES; lane++) {
            const int8_t *even = out->q + c * CHUNK + 4 * lane, *odd = even + CHUNK_BYTES;
            out->correction[c * LANES + lane] =
                -CODE_OFFSET * (even[0] + even[1] + even[2] + even[3] + odd[0] + odd[1] + odd[2] + odd[3]);
        }
}

/* The 16 lanes summed pairwise (one order for both kernels). */
static float lanes_sum(const float lanes[LANES])
{
    float eight[8], four[4];
    for (int i = 0; i < 8; i++)
        eight[i] = lanes[i] + lanes[i + 8];
    for (int i = 0; i < 4; i++)
        four[i] = eight[i] + eight[i + 4];
    return (four[0] + four[2]) + (four[1] + four[3]);
}

static int twice_e2m1(uint8_t code) { return (int)(2.0f * nvfp4_e2m1_to_float(code)); }

static void row_portable(const weight_matrix *w, int r, const quantized_token *x, int n_tokens, float *y,
                         size_t y_stride)
{
    const uint8_t *row = w->data + (size_t)r * w->data_stride;
    const uint8_t *scales = w->scale + (size_t)r * w->scale_stride;
    int blocks = w->cols / BLOCK;
    size_t chunks = chunks_of(w->cols);
    for (int t = 0; t < n_tokens; t++) {
        float acc[2][LANES] = {{0}};
        for (size_t c = 0; c < chunks; c++) {
            for (int lane = 0; lane < LANES; lane++) {
                int b = (int)c * CHUNK_BLOCKS + lane / 2, sum = 0;
                for (int half = 0; half < 2; half++)
                    for (int j = 0; j < 4; j++) {
                        int p = half * CHUNK_BYTES + 4 * lane + j, col = (int)c * CHUNK + chunk_column(p);
                        uint8_t byte = col / BLOCK < blocks ? row[col / 2] : 0;
                        sum += twice_e2m1(col % 2 ? byte >> 4 : byte & 15) * x[t].q[c * CHUNK + p];
                    }
                float block_scale = b < blocks ? nvfp4_e4m3_to_float(scales[b]) : 0.0f;
                acc[c % 2][lane] = fmaf((float)sum, block_scale * x[t].scale[b], acc[c % 2][lane]);
            }
        }
        float lanes[LANES];
        for (int lane = 0; lane < LANES; lane++)
            lanes[lane] = acc[0][lane] + acc[1][lane];
        y[t * y_stride + r] = lanes_sum(lanes) * (w->scale_2 * 0.5f);
    }
}

#if KIMI_INT8_AVX512
#define INT8_TARGET "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni"

/* A chunk's 8 blocks quantised into its q (even columns, then odd), correction and scales. */
__attribute__((target(INT8_TARGET))) static void quantize_avx512(const float *x, int cols, quantized_token *out)
{
    int blocks = cols / BLOCK;
    size_t chunks = chunks_of(cols);
    uint8_t even_index[CHUNK_BYTES], odd_index[CHUNK_BYTES];
    for (int p = 0; p < CHUNK_BYTES; p++) {
        even_index[p] = (uint8_t)chunk_column(p);
        odd_index[p] = (uint8_t)chunk_column(CHUNK_BYTES + p);
    }
    const __m512i even_of = _mm512_loadu_si512(even_index), odd_of = _mm512_loadu_si512(odd_index);
    const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
    memset(out->scale, 0, scale_slots_of(cols) * sizeof(float));
    for (size_t c = 0; c < chunks; c++) {
        _Alignas(64) int8_t natural[CHUNK] = {0}; /* the chunk's q in column order */
        for (int k = 0; k < CHUNK_BLOCKS; k++) {
            int b = (int)c * CHUNK_BLOCKS + k;
            if (b >= blocks)
                break;
            __m512 v = _mm512_loadu_ps(x + (size_t)b * BLOCK);
            __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), magnitude));
            if (_mm512_cmp_ps_mask(a, _mm512_set1_ps(FLT_MAX), _CMP_LE_OQ) != 0xFFFF) {
                out->scale[b] = NAN;
                continue;
            }
            float amax = _mm512_reduce_max_ps(a);
            if (amax == 0.0f)
                continue;
            float prescale = amax < PRESCALE_BELOW ? PRESCALE : 1.0f; /* as in block_quantize */
            __m512 units = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(prescale)),
                                         _mm512_set1_ps((float)QMAX / (amax * prescale)));
            _mm_store_si128((__m128i *)(natural + k * BLOCK), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(units)));
            out->scale[b] = amax / (float)QMAX;
        }
        __m512i low = _mm512_load_si512(natural), high = _mm512_load_si512(natural + CHUNK_BYTES);
        __m512i even = _mm512_permutex2var_epi8(low, even_of, high), odd = _mm512_permutex2var_epi8(low, odd_of, high);
        _mm512_storeu_si512(out->q + c * CHUNK, even);
        _mm512_storeu_si512(out->q + c * CHUNK + CHUNK_BYTES, odd);
        __m512i lane_sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(CODE_OFFSET), even);
        lane_sums = _mm512_dpbusd_epi32(lane_sums, _mm512_set1_epi8(CODE_OFFSET), odd);
        _mm512_storeu_si512(out->correction + c * LANES, _mm512_sub_epi32(_mm512_setzero_si512(), lane_sums));
    }
}

typedef struct {
    __m512i codes_to_weights; /* vpermb table: byte i -> 2 e2m1(i & 15) + CODE_OFFSET */
    __m512i block_of_lane[GROUP_CHUNKS]; /* vpermps index: chunk k of a group, lane d -> 8k + d / 2 */
    int32_t row_of_sum[LANES];            /* vpermps index: row i's sum is lane row_of_sum[i] of sixteen_sums */
} int8_consts;

/* Chunk c0 + j of a row (blocks_left < CHUNK_BLOCKS: a short last chunk, read with a mask) into
 * accumulator j % 2 of every token. */
__attribute__((target(INT8_TARGET), always_inline)) static inline void chunk_fma(
    const uint8_t *row, size_t c0, int j, int blocks_left, const quantized_token *x, int n_tokens,
    const __m512 group_scale[TILE], const int8_consts *k, __m512 acc[TILE][2])
{
    const uint8_t *codes = row + (c0 + j) * CHUNK_BYTES;
    __m512i bytes = blocks_left >= CHUNK_BLOCKS
                        ? _mm512_loadu_si512(codes)
                        : _mm512_maskz_loadu_epi8((__mmask64)((1ull << (blocks_left * BLOCK / 2)) - 1), codes);
    /* vpermb looks at the low 6 bits of each byte and the table repeats every 16 entries: the
     * low nibble as it is, the high one once shifted down (within 16 bits: the neighbour's
     * bits that come in above it are ignored too). */
    __m512i even = _mm512_permutexvar_epi8(bytes, k->codes_to_weights);
    __m512i odd = _mm512_permutexvar_epi8(_mm512_srli_epi16(bytes, 4), k->codes_to_weights);
    for (int t = 0; t < n_tokens; t++) {
        const int8_t *q = x[t].q + (c0 + j) * CHUNK;
        __m512i sums = _mm512_dpbusd_epi32(_mm512_loadu_si512(x[t].correction + (c0 + j) * LANES), even,
                                           _mm512_loadu_si512(q));
        sums = _mm512_dpbusd_epi32(sums, odd, _mm512_loadu_si512(q + CHUNK_BYTES));
        acc[t][j % 2] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
                                        _mm512_permutexvar_ps(k->block_of_lane[j], group_scale[t]), acc[t][j % 2]);
    }
}

/* Row r against n_tokens <= TILE quantised tokens: lanes[t] = acc[t][0] + acc[t][1]. */
__attribute__((target(INT8_TARGET), always_inline)) static inline void row_lanes_avx512(
    const weight_matrix *w, int r, const quantized_token *x, int n_tokens, const int8_consts *k, __m512 *lanes,
    size_t lanes_stride)
{
    const uint8_t *row = w->data + (size_t)r * w->data_stride;
    const uint8_t *scales = w->scale + (size_t)r * w->scale_stride;
    int blocks = w->cols / BLOCK, g = 0;
    __m512 acc[TILE][2], group_scale[TILE];
    for (int t = 0; t < n_tokens; t++)
        acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    for (; g + GROUP_BLOCKS <= blocks; g += GROUP_BLOCKS) {
        __m512 block_scales = e4m3_group(scales, g, GROUP_BLOCKS);
        for (int t = 0; t < n_tokens; t++)
            group_scale[t] = _mm512_mul_ps(block_scales, _mm512_loadu_ps(x[t].scale + g));
        _mm_prefetch((const char *)row + (size_t)g * (BLOCK / 2) + PREFETCH_AHEAD_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)row + (size_t)g * (BLOCK / 2) + PREFETCH_AHEAD_BYTES + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)scales + g + PREFETCH_AHEAD_BYTES / (BLOCK / 2), _MM_HINT_T0); /* the same blocks' scales */
        chunk_fma(row, (size_t)g / CHUNK_BLOCKS, 0, CHUNK_BLOCKS, x, n_tokens, group_scale, k, acc);
        chunk_fma(row, (size_t)g / CHUNK_BLOCKS, 1, CHUNK_BLOCKS, x, n_tokens, group_scale, k, acc);
    }
    if (g < blocks) {
        int count = blocks - g;
        __m512 block_scales = e4m3_group(scales, g, count);
        for (int t = 0; t < n_tokens; t++)
            group_scale[t] = _mm512_mul_ps(block_scales, _mm512_loadu_ps(x[t].scale + g));
        for (int j = 0; j * CHUNK_BLOCKS < count; j++)
            chunk_fma(row, (size_t)g / CHUNK_BLOCKS, j, count - j * CHUNK_BLOCKS, x, n_tokens, group_scale, k, acc);
    }
    for (int t = 0; t < n_tokens; t++)
        lanes[t * lanes_stride] = _mm512_add_ps(acc[t][0], acc[t][1]);
}

/* 16 rows' lanes -> their 16 sums, each by lanes_sum's tree (a + b == b + a exactly): halve
 * the lanes pairwise at distance 8, 4, 2 and 1, two rows at a time, so the sums come out in
 * the row order `summed_row` gives. */
static const int summed_row[LANES] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

__attribute__((target(INT8_TARGET), always_inline)) static inline __m512 sixteen_sums(const __m512 rows[LANES])
{
    __m512 eight[8], four[4], two[2];
    for (int i = 0; i < 8; i++) /* lanes 0-7: row 2i, 8-15: row 2i + 1 */
        eight[i] = _mm512_add_ps(_mm512_shuffle_f32x4(rows[2 * i], rows[2 * i + 1], 0x44),
                                 _mm512_shuffle_f32x4(rows[2 * i], rows[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++) /* quarters: rows 4i, 4i + 1, 4i + 2, 4i + 3 */
        four[i] = _mm512_add_ps(_mm512_shuffle_f32x4(eight[2 * i], eight[2 * i + 1], 0x88),
                                _mm512_shuffle_f32x4(eight[2 * i], eight[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++) /* quarter q: rows 8i + q (2 lanes), 8i + 4 + q (2 lanes) */
        two[i] = _mm512_add_ps(_mm512_shuffle_ps(four[2 * i], four[2 * i + 1], 0x44),
                               _mm512_shuffle_ps(four[2 * i], four[2 * i + 1], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(two[0], two[1], 0x88), _mm512_shuffle_ps(two[0], two[1], 0xDD));
}

__attribute__((target(INT8_TARGET), always_inline)) static inline void rows_tile_avx512(
    const weight_matrix *w, const quantized_token *x, int n_tokens, float *y, size_t y_stride, int row_begin,
    int row_end, const int8_consts *k)
{
    __m512 lanes[TILE][LANES];
    __m512i to_row_order = _mm512_loadu_si512(k->row_of_sum);
    float row_scale = w->scale_2 * 0.5f;
    for (int r0 = row_begin; r0 < row_end; r0 += LANES) {
        int count = row_end - r0 < LANES ? row_end - r0 : LANES;
        for (int i = 0; i < count; i++)
            row_lanes_avx512(w, r0 + i, x, n_tokens, k, &lanes[0][i], LANES);
        for (int t = 0; t < n_tokens; t++) {
            for (int i = count; i < LANES; i++)
                lanes[t][i] = _mm512_setzero_ps();
            __m512 sums = _mm512_permutexvar_ps(to_row_order, sixteen_sums(lanes[t]));
            _mm512_mask_storeu_ps(y + t * y_stride + r0, (__mmask16)((1u << count) - 1),
                                  _mm512_mul_ps(sums, _mm512_set1_ps(row_scale)));
        }
    }
}

__attribute__((target(INT8_TARGET))) static void rows_avx512(const weight_matrix *w, const quantized_token *x,
                                                             int n_tokens, float *y, size_t y_stride, int row_begin,
                                                             int row_end)
{
    int8_consts k;
    uint8_t table[CHUNK];
    for (int i = 0; i < CHUNK; i++)
        table[i] = (uint8_t)(twice_e2m1((uint8_t)(i & 15)) + CODE_OFFSET);
    k.codes_to_weights = _mm512_loadu_si512(table);
    for (int j = 0; j < GROUP_CHUNKS; j++) {
        int32_t index[LANES];
        for (int lane = 0; lane < LANES; lane++)
            index[lane] = j * CHUNK_BLOCKS + lane / 2;
        k.block_of_lane[j] = _mm512_loadu_si512(index);
    }
    for (int i = 0; i < LANES; i++)
        k.row_of_sum[summed_row[i]] = i;
    switch (n_tokens) {
    case 1:
        rows_tile_avx512(w, x, 1, y, y_stride, row_begin, row_end, &k);
        break;
    case 2:
        rows_tile_avx512(w, x, 2, y, y_stride, row_begin, row_end, &k);
        break;
    case 3:
        rows_tile_avx512(w, x, 3, y, y_stride, row_begin, row_end, &k);
        break;
    default:
        rows_tile_avx512(w, x, TILE, y, y_stride, row_begin, row_end, &k);
        break;
    }
}
#endif

static void quantize(int simd, const float *x, int cols, quantized_token *out)
{
#if KIMI_INT8_AVX512
    if (simd) {
        quantize_avx512(x, cols, out);
        return;
    }
#endif
    (void)simd;
    quantize_portable(x, cols, out);
}

/* Rows [row_begin, row_end) against n_tokens <= TILE quantised tokens. */
static void tile_rows(int simd, const weight_matrix *w, const quantized_token *x, int n_tokens, float *y,
                      size_t y_stride, int row_begin, int row_end)
{
#if KIMI_INT8_AVX512
    if (simd) {
        rows_avx512(w, x, n_tokens, y, y_stride, row_begin, row_end);
        return;
    }
#endif
    (void)simd;
    for (int r = row_begin; r < row_end; r++)
        row_portable(w, r, x, n_tokens, y, y_stride);
}

void linear_rows_int8(const weight_matrix *w, const float *x, size_t x_stride, int n_tokens, float *y,
                      size_t y_stride, int row_begin, int row_end)
{
    if (w->format != WEIGHT_NVFP4 || w->cols > LINEAR_INT8_COLS_MAX) {
        linear_rows(w, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
        return;
    }
    int simd = linear_int8_simd();
    size_t bytes = token_bytes(w->cols);
    /* A batch is quantised once into the heap when it can be, and its rows then go by chunks
     * of ROW_CHUNK that meet every tile (the weights stream once); otherwise, and for a tile
     * alone, a tile at a time on the stack against all the rows. Same bits either way. */
    uint8_t *batch = n_tokens > TILE ? malloc(bytes * (size_t)n_tokens) : NULL;
    if (batch) {
        quantized_token *tokens = malloc(sizeof *tokens * (size_t)n_tokens);
        if (tokens) {
            for (int t = 0; t < n_tokens; t++) {
                tokens[t] = token_at(batch, w->cols, t);
                quantize(simd, x + t * x_stride, w->cols, &tokens[t]);
            }
            for (int r0 = row_begin; r0 < row_end; r0 += ROW_CHUNK) {
                int r1 = row_end - r0 < ROW_CHUNK ? row_end : r0 + ROW_CHUNK;
                for (int t0 = 0; t0 < n_tokens; t0 += TILE)
                    tile_rows(simd, w, tokens + t0, n_tokens - t0 < TILE ? n_tokens - t0 : TILE, y + t0 * y_stride,
                              y_stride, r0, r1);
            }
            free(tokens);
            free(batch);
            return;
        }
        free(batch);
    }
    _Alignas(64) uint8_t tile_buffer[TILE * TOKEN_BYTES_MAX];
    for (int t0 = 0; t0 < n_tokens; t0 += TILE) {
        int tile = n_tokens - t0 < TILE ? n_tokens - t0 : TILE;
        quantized_token tokens[TILE];
        for (int t = 0; t < tile; t++) {
            tokens[t] = token_at(tile_buffer, w->cols, t);
            quantize(simd, x + (t0 + t) * x_stride, w->cols, &tokens[t]);
        }
        tile_rows(simd, w, tokens, tile, y + t0 * y_stride, y_stride, row_begin, row_end);
    }
}
