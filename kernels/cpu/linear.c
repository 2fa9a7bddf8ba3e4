/* linear: the matrix products of the forward pass. Every format is decoded 16 columns at a
 * time into registers (a "block"), then multiplied into 16-lane accumulators, so the inner
 * loops have a fixed width of 16 that the compiler vectorises. Each token has two
 * accumulators, even blocks adding into one and odd blocks into the other: with one, every
 * block's add waited for the previous one's (a 3-4 cycle chain per 9 bytes of NVFP4, slower
 * than memory delivers them to one thread); the two are summed lane by lane at the end. The
 * order is the same for every number of tokens, so a token gives the same bits alone (decode)
 * or in a batch (prefill, speculative verification). For NVFP4 a block is (e2m1 * e4m3),
 * exact in float; scale_2 multiplies each finished row sum once, which equals summing
 * (e2m1 * e4m3) * scale_2 up to float rounding. */
#include "kernels/cpu/linear.h"

#include <pthread.h>
#include <string.h>

#include "kernels/cpu/e4m3_avx512.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/wide_vector_clones.h"
#include "kernels/nvfp4_math.h"

enum { BLOCK = 16 };

/* On x86-64 an AVX-512 path decodes NVFP4 with one in-register table lookup per 16 weights
 * (vpermps) instead of a table load per byte: the portable loop is bound by those loads, not by
 * memory. It runs the same multiplications and additions in the same order as the portable
 * loop (lane j of a block in lane j of the accumulator, products then sums, no fused
 * multiply-add), so both give the same bits; test_linear checks that. */
#if defined(__x86_64__) && defined(__GNUC__)
#define KIMI_AVX512_NVFP4 1
#include <immintrin.h>
#else
#define KIMI_AVX512_NVFP4 0
#endif

/* C11's sanctioned bit cast; it vectorises. */
typedef union {
    uint32_t bits;
    float value;
} float_bits;

/* byte -> {e2m1(low nibble), e2m1(high nibble)}, and every E4M3 code -> float; both filled
 * from nvfp4_math.h so the CPU and CUDA kernels share one definition of the formats. */
static float nvfp4_pair_table[256][2];
static float e4m3_table[256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static float e2m1_table[16];
static int simd_available;           /* the best LINEAR_SIMD_* level this CPU runs */
static int simd_allowed = LINEAR_SIMD_BEST; /* linear_use_simd() */

/* For the VBMI NVFP4 decode (nvfp4_block_vbmi): the vpmultishiftqb control that moves nibble 2q
 * of a block into the low byte of dword 2q and nibble 2q + 1 into that of dword 2q + 1. */
static uint8_t nibble_shift_control[64];

static void tables_fill(void)
{
    for (int byte = 0; byte < 256; byte++) {
        nvfp4_pair_table[byte][0] = nvfp4_e2m1_to_float((uint8_t)(byte & 15));
        nvfp4_pair_table[byte][1] = nvfp4_e2m1_to_float((uint8_t)(byte >> 4));
        e4m3_table[byte] = nvfp4_e4m3_to_float((uint8_t)byte);
    }
    for (int nibble = 0; nibble < 16; nibble++)
        e2m1_table[nibble] = nvfp4_e2m1_to_float((uint8_t)nibble);
    for (int q = 0; q < 8; q++) {
        nibble_shift_control[8 * q] = (uint8_t)(8 * q);
        nibble_shift_control[8 * q + 4] = (uint8_t)(8 * q + 4);
    }
#if KIMI_AVX512_NVFP4
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        simd_available = __builtin_cpu_supports("avx512vbmi") ? LINEAR_SIMD_AVX512_VBMI : LINEAR_SIMD_AVX512;
#endif
}

/* Columns [16 * block, 16 * block + 16) of one row, times the block scale (no scale_2). */
static inline void nvfp4_block_decode(const uint8_t *row, const uint8_t *scales, int block,
                                      float out[BLOCK])
{
    float block_scale = e4m3_table[scales[block]];
    const uint8_t *bytes = row + block * (BLOCK / 2);
    for (int j = 0; j < BLOCK / 2; j++) {
        out[2 * j] = nvfp4_pair_table[bytes[j]][0] * block_scale;
        out[2 * j + 1] = nvfp4_pair_table[bytes[j]][1] * block_scale;
    }
}

/* Rows are 2-byte aligned (the loader checks every tensor's alignment), so BF16 and F16 are
 * read as uint16_t. */

static inline void bf16_block_decode(const uint8_t *row, int block, float out[BLOCK])
{
    const uint16_t *halves = (const uint16_t *)row + (size_t)block * BLOCK;
    for (int j = 0; j < BLOCK; j++)
        out[j] = ((float_bits){.bits = (uint32_t)halves[j] << 16}).value;
}

static inline void f16_block_decode(const uint8_t *row, int block, float out[BLOCK])
{
    const uint16_t *halves = (const uint16_t *)row + (size_t)block * BLOCK;
    for (int j = 0; j < BLOCK; j++)
        out[j] = f16_to_float(halves[j]);
}

static inline void f32_block_decode(const uint8_t *row, int block, float out[BLOCK])
{
    memcpy(out, row + (size_t)block * BLOCK * 4, BLOCK * sizeof(float));
}

static inline __attribute__((always_inline)) void block_decode(
    weight_format format, const uint8_t *row, const uint8_t *scales, int block, float out[BLOCK])
{
    switch (format) {
    case WEIGHT_NVFP4:
        nvfp4_block_decode(row, scales, block, out);
        break;
    case WEIGHT_BF16:
        bf16_block_decode(row, block, out);
        break;
    case WEIGHT_F16:
        f16_block_decode(row, block, out);
        break;
    case WEIGHT_F32:
    default:
        f32_block_decode(row, block, out);
        break;
    }
}

/* One element past the last whole block (only non-NVFP4 rows have a tail). */
static inline float element_decode(const weight_matrix *w, const uint8_t *row, int col)
{
    uint16_t bits;
    float value;
    switch (w->format) {
    case WEIGHT_BF16:
        memcpy(&bits, row + (size_t)col * 2, 2);
        return bf16_to_float(bits);
    case WEIGHT_F16:
        memcpy(&bits, row + (size_t)col * 2, 2);
        return f16_to_float(bits);
    case WEIGHT_F32:
        memcpy(&value, row + (size_t)col * 4, 4);
        return value;
    case WEIGHT_NVFP4:
        break;
    }
    return 0.0f;
}

/* One row against n_tokens (<= LINEAR_TOKEN_TILE) tokens. Inlined with a constant format
 * and, for the common tiles, a constant n_tokens, so each case gets its own tight loop. */
static inline __attribute__((always_inline)) void row_times_tokens(
    const weight_matrix *w, weight_format format, int r, const float *x, size_t x_stride,
    int n_tokens, float *y, size_t y_stride)
{
    const uint8_t *row = w->data + (size_t)r * w->data_stride;
    const uint8_t *scales = w->format == WEIGHT_NVFP4 ? w->scale + (size_t)r * w->scale_stride : NULL;
    int blocks = w->cols / BLOCK;
    float even[LINEAR_TOKEN_TILE][BLOCK], odd[LINEAR_TOKEN_TILE][BLOCK];
    memset(even, 0, sizeof even);
    memset(odd, 0, sizeof odd);
    int b = 0;
    for (; b + 1 < blocks; b += 2) {
        float w_even[BLOCK], w_odd[BLOCK];
        block_decode(format, row, scales, b, w_even);
        block_decode(format, row, scales, b + 1, w_odd);
        for (int t = 0; t < n_tokens; t++) {
            const float *xb = x + t * x_stride + (size_t)b * BLOCK;
            for (int j = 0; j < BLOCK; j++) {
                even[t][j] += w_even[j] * xb[j];
                odd[t][j] += w_odd[j] * xb[BLOCK + j];
            }
        }
    }
    if (b < blocks) {
        float w_even[BLOCK];
        block_decode(format, row, scales, b, w_even);
        for (int t = 0; t < n_tokens; t++) {
            const float *xb = x + t * x_stride + (size_t)b * BLOCK;
            for (int j = 0; j < BLOCK; j++)
                even[t][j] += w_even[j] * xb[j];
        }
    }
    float row_scale = w->format == WEIGHT_NVFP4 ? w->scale_2 : 1.0f;
    for (int t = 0; t < n_tokens; t++) {
        float sum = 0.0f;
        for (int j = 0; j < BLOCK; j++)
            sum += even[t][j] + odd[t][j];
        for (int k = blocks * BLOCK; k < w->cols; k++)
            sum += element_decode(w, row, k) * x[t * x_stride + k];
        y[t * y_stride + r] = sum * row_scale;
    }
}

static inline __attribute__((always_inline)) void rows_of_format(
    const weight_matrix *w, weight_format format, const float *x, size_t x_stride, int n_tokens,
    float *y, size_t y_stride, int row_begin, int row_end)
{
    for (int t0 = 0; t0 < n_tokens; t0 += LINEAR_TOKEN_TILE) {
        int tile = n_tokens - t0 < LINEAR_TOKEN_TILE ? n_tokens - t0 : LINEAR_TOKEN_TILE;
        const float *xt = x + t0 * x_stride;
        float *yt = y + t0 * y_stride;
        if (tile == 1) {
            for (int r = row_begin; r < row_end; r++)
                row_times_tokens(w, format, r, xt, x_stride, 1, yt, y_stride);
        } else if (tile == LINEAR_TOKEN_TILE) {
            for (int r = row_begin; r < row_end; r++)
                row_times_tokens(w, format, r, xt, x_stride, LINEAR_TOKEN_TILE, yt, y_stride);
        } else {
            for (int r = row_begin; r < row_end; r++)
                row_times_tokens(w, format, r, xt, x_stride, tile, yt, y_stride);
        }
    }
}

#if KIMI_AVX512_NVFP4
/* Block b of an NVFP4 row as 16 floats: 8 bytes -> 16 nibbles in element order (low nibble
 * first) -> e2m1 values (one in-register lookup) times the block's e4m3 scale. */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline __m512 nvfp4_block_m512(
    const uint8_t *row, const uint8_t *scales, int b, __m512 e2m1)
{
    const __m128i low_nibbles = _mm_set1_epi8(0x0F);
    __m128i bytes = _mm_loadl_epi64((const __m128i *)(row + (size_t)b * (BLOCK / 2)));
    __m128i low = _mm_and_si128(bytes, low_nibbles);
    __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), low_nibbles);
    __m512i nibbles = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(low, high));
    return _mm512_mul_ps(_mm512_permutexvar_ps(nibbles, e2m1), _mm512_set1_ps(e4m3_table[scales[b]]));
}

/* row_times_tokens for one NVFP4 row against n_tokens tokens, 16 lanes per block. The weights
 * ahead are prefetched one cache line per 8 blocks: each thread streams its own rows, and the
 * hardware prefetcher alone left the loads waiting. */
enum { PREFETCH_AHEAD_BYTES = 1024 };

__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void nvfp4_row_avx512(
    const weight_matrix *w, int r, const float *x, size_t x_stride, int n_tokens, float *y,
    size_t y_stride, __m512 e2m1)
{
    const uint8_t *row = w->data + (size_t)r * w->data_stride;
    const uint8_t *scales = w->scale + (size_t)r * w->scale_stride;
    int blocks = w->cols / BLOCK;
    __m512 even[LINEAR_TOKEN_TILE], odd[LINEAR_TOKEN_TILE];
    for (int t = 0; t < n_tokens; t++)
        even[t] = odd[t] = _mm512_setzero_ps();
    int b = 0;
    for (; b + 1 < blocks; b += 2) {
        if (b % 8 == 0)
            _mm_prefetch((const char *)row + (size_t)b * (BLOCK / 2) + PREFETCH_AHEAD_BYTES, _MM_HINT_T0);
        __m512 w_even = nvfp4_block_m512(row, scales, b, e2m1);
        __m512 w_odd = nvfp4_block_m512(row, scales, b + 1, e2m1);
        for (int t = 0; t < n_tokens; t++) {
            const float *xb = x + t * x_stride + (size_t)b * BLOCK;
            even[t] = _mm512_add_ps(even[t], _mm512_mul_ps(w_even, _mm512_loadu_ps(xb)));
            odd[t] = _mm512_add_ps(odd[t], _mm512_mul_ps(w_odd, _mm512_loadu_ps(xb + BLOCK)));
        }
    }
    if (b < blocks) {
        __m512 w_even = nvfp4_block_m512(row, scales, b, e2m1);
        for (int t = 0; t < n_tokens; t++)
            even[t] = _mm512_add_ps(even[t], _mm512_mul_ps(w_even, _mm512_loadu_ps(x + t * x_stride + (size_t)b * BLOCK)));
    }
    for (int t = 0; t < n_tokens; t++) {
        float lanes[BLOCK], sum = 0.0f;
        _mm512_storeu_ps(lanes, _mm512_add_ps(even[t], odd[t]));
        for (int j = 0; j < BLOCK; j++)
            sum += lanes[j];
        y[t * y_stride + r] = sum * w->scale_2;
    }
}

/* nvfp4_row_avx512 over rows [row_begin, row_end), a constant token count for the common
 * tiles so their accumulators stay in registers. */
__attribute__((target("avx512f,avx512bw"))) static void nvfp4_rows_avx512(
    const weight_matrix *w, const float *x, size_t x_stride, int n_tokens, float *y,
    size_t y_stride, int row_begin, int row_end)
{
    const __m512 e2m1 = _mm512_loadu_ps(e2m1_table);
    for (int t0 = 0; t0 < n_tokens; t0 += LINEAR_TOKEN_TILE) {
        int tile = n_tokens - t0 < LINEAR_TOKEN_TILE ? n_tokens - t0 : LINEAR_TOKEN_TILE;
        const float *xt = x + t0 * x_stride;
        float *yt = y + t0 * y_stride;
        for (int r = row_begin; r < row_end; r++) {
            if (tile == 1)
                nvfp4_row_avx512(w, r, xt, x_stride, 1, yt, y_stride, e2m1);
            else if (tile == LINEAR_TOKEN_TILE)
                nvfp4_row_avx512(w, r, xt, x_stride, LINEAR_TOKEN_TILE, yt, y_stride, e2m1);
            else
                nvfp4_row_avx512(w, r, xt, x_stride, tile, yt, y_stride, e2m1);
        }
    }
}

/* The fused kernels below (VBMI NVFP4, AVX-512 BF16) use fused multiply-adds and keep four
 * accumulators per token, block b adding into accumulator b % 4: at ~1.5 cycles per block one
 * accumulator's chain of 4-cycle FMAs would be the limit. They are not bit-equal to the
 * portable loop (one rounding per product-and-add instead of two), only to themselves: a token
 * gets the same bits alone or in a batch. SIMD_TOKENS tokens share each decoded block, so
 * their 16 accumulators stay in registers. */
enum { SIMD_TOKENS = 4, SIMD_ACCUMULATORS = 4, SIMD_ROW_CHUNK = 16 };


#define VBMI_TARGET "avx512f,avx512bw,avx512vbmi"

typedef struct {
    __m512i control;        /* nibble_shift_control */
    __m512 e2m1;            /* e2m1_table */
} nvfp4_vbmi_consts;

/* Block b (16 weights, 8 bytes) as floats in element order, times its e4m3 scale: broadcast the
 * 8 bytes to every qword, move nibble k into the low byte of dword k (vpmultishiftqb; the bits
 * above it are the next nibbles, which vpermps ignores) and look it up in the e2m1 table scaled
 * by the block's scale (exact: at most 5 significant bits). */
__attribute__((target(VBMI_TARGET), always_inline)) static inline __m512 nvfp4_block_vbmi(
    const uint8_t *row, const uint8_t *scales, int b, const nvfp4_vbmi_consts *k)
{
    uint64_t packed;
    memcpy(&packed, row + (size_t)b * (BLOCK / 2), sizeof packed);
    __m512i nibbles = _mm512_multishift_epi64_epi8(k->control, _mm512_set1_epi64((long long)packed));
    return _mm512_permutexvar_ps(nibbles, _mm512_mul_ps(k->e2m1, _mm512_set1_ps(e4m3_table[scales[b]])));
}

/* Block b of a BF16 row: 16 halves widened to the high halves of 16 dwords. */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline __m512 bf16_block_m512(const uint8_t *row,
                                                                                            int b)
{
    __m256i halves = _mm256_loadu_si256((const __m256i *)(row + (size_t)b * BLOCK * 2));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16));
}

/* One decoded block into accumulator `slot` of every token. */
__attribute__((target("avx512f"), always_inline)) static inline void block_fma(
    __m512 weights, const float *x, size_t x_stride, int n_tokens, int b,
    __m512 acc[SIMD_TOKENS][SIMD_ACCUMULATORS], int slot)
{
    for (int t = 0; t < n_tokens; t++)
        acc[t][slot] = _mm512_fmadd_ps(weights, _mm512_loadu_ps(x + t * x_stride + (size_t)b * BLOCK), acc[t][slot]);
}

/* Row r of an NVFP4 (vbmi != 0) or BF16 matrix against n_tokens <= SIMD_TOKENS tokens. The
 * weights ahead are prefetched one cache line at a time, as in nvfp4_row_avx512. */
__attribute__((target(VBMI_TARGET), always_inline)) static inline void fused_row(
    const weight_matrix *w, int nvfp4, int r, const float *x, size_t x_stride, int n_tokens, float *y,
    size_t y_stride, const nvfp4_vbmi_consts *k)
{
    const uint8_t *row = w->data + (size_t)r * w->data_stride;
    const uint8_t *scales = nvfp4 ? w->scale + (size_t)r * w->scale_stride : NULL;
    int blocks = w->cols / BLOCK, block_bytes = nvfp4 ? BLOCK / 2 : BLOCK * 2;
    int blocks_per_line = 64 / block_bytes;
    __m512 acc[SIMD_TOKENS][SIMD_ACCUMULATORS];
    for (int t = 0; t < n_tokens; t++)
        for (int a = 0; a < SIMD_ACCUMULATORS; a++)
            acc[t][a] = _mm512_setzero_ps();
    int b = 0;
    for (; b + SIMD_ACCUMULATORS <= blocks; b += SIMD_ACCUMULATORS) {
        for (int a = 0; a < SIMD_ACCUMULATORS; a++) {
            if ((b + a) % blocks_per_line == 0)
                _mm_prefetch((const char *)row + (size_t)(b + a) * block_bytes + PREFETCH_AHEAD_BYTES, _MM_HINT_T0);
            __m512 weights = nvfp4 ? nvfp4_block_vbmi(row, scales, b + a, k) : bf16_block_m512(row, b + a);
            block_fma(weights, x, x_stride, n_tokens, b + a, acc, a);
        }
    }
    for (int a = 0; a < SIMD_ACCUMULATORS - 1 && b + a < blocks; a++)
        block_fma(nvfp4 ? nvfp4_block_vbmi(row, scales, b + a, k) : bf16_block_m512(row, b + a), x, x_stride,
                  n_tokens, b + a, acc, a);
    float row_scale = nvfp4 ? w->scale_2 : 1.0f;
    for (int t = 0; t < n_tokens; t++) {
        float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]),
                                                       _mm512_add_ps(acc[t][2], acc[t][3])));
        for (int col = blocks * BLOCK; col < w->cols; col++)
            sum += element_decode(w, row, col) * x[t * x_stride + col];
        y[t * y_stride + r] = sum * row_scale;
    }
}

/* fused_row over rows [row_begin, row_end) and every token: a chunk of SIMD_ROW_CHUNK rows (a
 * few KiB, cache-resident) meets every tile of tokens before the next chunk is read, so a
 * prefill streams the weights from memory once. A constant token count per call keeps the
 * accumulators in registers. */
__attribute__((target(VBMI_TARGET), always_inline)) static inline void fused_rows(
    const weight_matrix *w, int nvfp4, const float *x, size_t x_stride, int n_tokens, float *y, size_t y_stride,
    int row_begin, int row_end)
{
    nvfp4_vbmi_consts k = {_mm512_loadu_si512(nibble_shift_control), _mm512_loadu_ps(e2m1_table)};
    for (int r0 = row_begin; r0 < row_end; r0 += SIMD_ROW_CHUNK) {
        int r1 = row_end - r0 < SIMD_ROW_CHUNK ? row_end : r0 + SIMD_ROW_CHUNK;
        for (int t0 = 0; t0 < n_tokens; t0 += SIMD_TOKENS) {
            const float *xt = x + t0 * x_stride;
            float *yt = y + t0 * y_stride;
            switch (n_tokens - t0 < SIMD_TOKENS ? n_tokens - t0 : SIMD_TOKENS) {
            case 1:
                for (int r = r0; r < r1; r++)
                    fused_row(w, nvfp4, r, xt, x_stride, 1, yt, y_stride, &k);
                break;
            case 2:
                for (int r = r0; r < r1; r++)
                    fused_row(w, nvfp4, r, xt, x_stride, 2, yt, y_stride, &k);
                break;
            case 3:
                for (int r = r0; r < r1; r++)
                    fused_row(w, nvfp4, r, xt, x_stride, 3, yt, y_stride, &k);
                break;
            default:
                for (int r = r0; r < r1; r++)
                    fused_row(w, nvfp4, r, xt, x_stride, SIMD_TOKENS, yt, y_stride, &k);
                break;
            }
        }
    }
}

/* NVFP4 two blocks at a time (linear_rows at LINEAR_SIMD_AVX512_VBMI, rows up to PAIR_COLS_MAX
 * columns). The kernel above spent ~5 vector operations per 16 weights (broadcast, nibble
 * shift, table times scale, lookup, multiply-add) and could not keep up with memory on one
 * thread (11 GB/s of 27 in the MoE experts). Here the 16 bytes of blocks b and b + 1 are
 * widened to 16 dwords at once (lanes 0-7: block b, 8-15: block b + 1); a lookup on the low
 * nibbles gives the even elements of both blocks, one on the high nibbles the odd ones, against
 * a copy of x permuted to match (made once per call and token). Per token
 *   t = w_even * x_even + w_odd * x_odd,   acc += t * scales   (lanes 0-7: scale b, 8-15: b + 1)
 * so the block scales are applied once per pair, read 16 at a time and converted in registers.
 * About 8 operations per 32 weights. Not bit-equal to the kernels above, only to itself: a
 * token gets the same bits alone or in a batch. */
enum { PAIR_COLS_MAX = 8192, PAIR_FLOATS = 32, SCALE_GROUP = 16 };

/* x [cols] -> out [pairs][even 16 | odd 16], the pair layout above; a missing second block of
 * the last pair reads as zeros. */
__attribute__((target("avx512f"))) static void x_to_pairs(const float *x, int cols, float *out)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    int blocks = cols / BLOCK;
    for (int b = 0; b < blocks; b += 2) {
        __m512 first = _mm512_loadu_ps(x + (size_t)b * BLOCK);
        __m512 second = b + 1 < blocks ? _mm512_loadu_ps(x + (size_t)(b + 1) * BLOCK) : _mm512_setzero_ps();
        float *pair = out + (size_t)(b / 2) * PAIR_FLOATS;
        _mm512_storeu_ps(pair, _mm512_permutex2var_ps(first, even, second));
        _mm512_storeu_ps(pair + BLOCK, _mm512_permutex2var_ps(first, odd, second));
    }
}

/* Blocks b and b + 1 (q = b - g: their place in the scale group; `single`: block b is the
 * row's last, no b + 1) into accumulator `slot` of every token. */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline void nvfp4_pair_fma(
    const uint8_t *row, int b, int q, int single, __m512 group_scales, const float *xp, size_t xp_stride,
    int n_tokens, __m512 e2m1, __m512 acc[SIMD_TOKENS][SIMD_ACCUMULATORS], int slot)
{
    const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const uint8_t *bytes = row + (size_t)b * (BLOCK / 2);
    __m512i codes = _mm512_cvtepu8_epi32(single ? _mm_loadl_epi64((const __m128i *)bytes)
                                                : _mm_loadu_si128((const __m128i *)bytes));
    __m512 w_even = _mm512_permutexvar_ps(codes, e2m1);
    __m512 w_odd = _mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), e2m1);
    __m512 pair_scales = _mm512_permutexvar_ps(_mm512_add_epi32(half, _mm512_set1_epi32(q)), group_scales);
    for (int t = 0; t < n_tokens; t++) {
        const float *xq = xp + t * xp_stride + (size_t)(b / 2) * PAIR_FLOATS;
        __m512 sum = _mm512_fmadd_ps(w_odd, _mm512_loadu_ps(xq + BLOCK), _mm512_mul_ps(w_even, _mm512_loadu_ps(xq)));
        acc[t][slot] = _mm512_fmadd_ps(sum, pair_scales, acc[t][slot]);
    }
}

/* Row r against n_tokens <= SIMD_TOKENS tokens of pair-layout x (xp [token][pairs][32]). A
 * whole group of 16 blocks is unrolled, its pair k adding into accumulator k % 4 (constant
 * indices keep the accumulators in registers); the pairs of a last partial group add into
 * accumulator 0. */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline void nvfp4_pair_row(
    const weight_matrix *w, int r, const float *xp, size_t xp_stride, int n_tokens, float *y, size_t y_stride,
    __m512 e2m1)
{
    const uint8_t *row = w->data + (size_t)r * w->data_stride;
    const uint8_t *scales = w->scale + (size_t)r * w->scale_stride;
    int blocks = w->cols / BLOCK, g = 0;
    __m512 acc[SIMD_TOKENS][SIMD_ACCUMULATORS];
    for (int t = 0; t < n_tokens; t++)
        for (int a = 0; a < SIMD_ACCUMULATORS; a++)
            acc[t][a] = _mm512_setzero_ps();
    for (; g + SCALE_GROUP <= blocks; g += SCALE_GROUP) {
        __m512 group_scales = e4m3_group(scales, g, SCALE_GROUP);
        _mm_prefetch((const char *)row + (size_t)g * (BLOCK / 2) + PREFETCH_AHEAD_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)row + (size_t)g * (BLOCK / 2) + PREFETCH_AHEAD_BYTES + 64, _MM_HINT_T0);
#pragma GCC unroll 8
        for (int k = 0; k < SCALE_GROUP / 2; k++)
            nvfp4_pair_fma(row, g + 2 * k, 2 * k, 0, group_scales, xp, xp_stride, n_tokens, e2m1, acc,
                           k % SIMD_ACCUMULATORS);
    }
    if (g < blocks) {
        __m512 group_scales = e4m3_group(scales, g, blocks - g);
        for (int b = g; b < blocks; b += 2)
            nvfp4_pair_fma(row, b, b - g, b + 1 == blocks, group_scales, xp, xp_stride, n_tokens, e2m1, acc, 0);
    }
    for (int t = 0; t < n_tokens; t++) {
        float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]),
                                                       _mm512_add_ps(acc[t][2], acc[t][3])));
        y[t * y_stride + r] = sum * w->scale_2;
    }
}

/* nvfp4_pair_row over rows [row_begin, row_end) and every token: a batch that fits one tile
 * is permuted once and meets every row; a longer one goes by chunks of SIMD_ROW_CHUNK rows that
 * meet every tile (permuted per chunk) before the next chunk is read, so a prefill streams the
 * weights once. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void nvfp4_rows_pairs(
    const weight_matrix *w, const float *x, size_t x_stride, int n_tokens, float *y, size_t y_stride,
    int row_begin, int row_end)
{
    const __m512 e2m1 = _mm512_loadu_ps(e2m1_table);
    size_t xp_stride = (size_t)(w->cols / BLOCK + 1) / 2 * PAIR_FLOATS;
    float xp[SIMD_TOKENS * (PAIR_COLS_MAX + BLOCK)];
    int chunk = n_tokens <= SIMD_TOKENS ? row_end - row_begin : SIMD_ROW_CHUNK;
    for (int r0 = row_begin; r0 < row_end; r0 += chunk) {
        int r1 = row_end - r0 < chunk ? row_end : r0 + chunk;
        for (int t0 = 0; t0 < n_tokens; t0 += SIMD_TOKENS) {
            int tile = n_tokens - t0 < SIMD_TOKENS ? n_tokens - t0 : SIMD_TOKENS;
            for (int t = 0; t < tile; t++)
                x_to_pairs(x + (t0 + t) * x_stride, w->cols, xp + t * xp_stride);
            float *yt = y + t0 * y_stride;
            switch (tile) {
            case 1:
                for (int r = r0; r < r1; r++)
                    nvfp4_pair_row(w, r, xp, xp_stride, 1, yt, y_stride, e2m1);
                break;
            case 2:
                for (int r = r0; r < r1; r++)
                    nvfp4_pair_row(w, r, xp, xp_stride, 2, yt, y_stride, e2m1);
                break;
            case 3:
                for (int r = r0; r < r1; r++)
                    nvfp4_pair_row(w, r, xp, xp_stride, 3, yt, y_stride, e2m1);
                break;
            default:
                for (int r = r0; r < r1; r++)
                    nvfp4_pair_row(w, r, xp, xp_stride, SIMD_TOKENS, yt, y_stride, e2m1);
                break;
            }
        }
    }
}

/* linear_transposed_accumulate for BF16 (the absorbed attention's W_UK^T q_nope): a strip of y
 * stays in registers (unrolled: with a variable count the compiler kept it on the stack) while
 * every row adds coefficient * weights into it by FMA (rows in order, as in the portable loop,
 * with one rounding per step instead of two). A row's 32 columns at a time are one 64-byte load
 * read as 16 dwords: the high halves masked are the odd columns' floats, the low halves shifted
 * up the even ones (two operations per 32 columns, where widening took two per 16), so the
 * accumulators hold even and odd columns apart: y is split so on loading and interleaved again on
 * storing. The first pass over the rows also prefetches whole rows ahead (the later strips then
 * read them from L2): the loads alone left the weights waiting on memory. */
enum { TRANSPOSED_PAIRS = 8, TRANSPOSED_AHEAD_ROWS = 8 };

__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void bf16_transposed_pairs(
    const weight_matrix *w, const float *x, float *y, int p0, int n_pairs, int prefetch)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512i low_to_even = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i high_to_even = _mm512_add_epi32(low_to_even, _mm512_set1_epi32(8));
    const __m512i high_halves = _mm512_set1_epi32((int)0xFFFF0000u);
    size_t row_bytes = (size_t)w->cols * 2;
    __m512 acc_even[TRANSPOSED_PAIRS], acc_odd[TRANSPOSED_PAIRS];
#pragma GCC unroll 8
    for (int j = 0; j < n_pairs; j++) {
        __m512 first = _mm512_loadu_ps(y + (size_t)(p0 + j) * 2 * BLOCK);
        __m512 second = _mm512_loadu_ps(y + (size_t)(p0 + j) * 2 * BLOCK + BLOCK);
        acc_even[j] = _mm512_permutex2var_ps(first, even, second);
        acc_odd[j] = _mm512_permutex2var_ps(first, odd, second);
    }
    for (int r = 0; r < w->rows; r++) {
        const uint8_t *row = w->data + (size_t)r * w->data_stride;
        if (prefetch && r + TRANSPOSED_AHEAD_ROWS < w->rows)
            for (size_t line = 0; line < row_bytes; line += 64)
                _mm_prefetch((const char *)row + TRANSPOSED_AHEAD_ROWS * w->data_stride + line, _MM_HINT_T0);
        __m512 coefficient = _mm512_set1_ps(x[r]);
#pragma GCC unroll 8
        for (int j = 0; j < n_pairs; j++) {
            __m512i dwords = _mm512_loadu_si512(row + (size_t)(p0 + j) * 2 * BLOCK * 2);
            acc_even[j] = _mm512_fmadd_ps(coefficient, _mm512_castsi512_ps(_mm512_slli_epi32(dwords, 16)), acc_even[j]);
            acc_odd[j] = _mm512_fmadd_ps(coefficient, _mm512_castsi512_ps(_mm512_and_si512(dwords, high_halves)),
                                         acc_odd[j]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < n_pairs; j++) {
        _mm512_storeu_ps(y + (size_t)(p0 + j) * 2 * BLOCK, _mm512_permutex2var_ps(acc_even[j], low_to_even, acc_odd[j]));
        _mm512_storeu_ps(y + (size_t)(p0 + j) * 2 * BLOCK + BLOCK,
                         _mm512_permutex2var_ps(acc_even[j], high_to_even, acc_odd[j]));
    }
}

__attribute__((target("avx512f,avx512bw"))) static void bf16_transposed_avx512(const weight_matrix *w,
                                                                              const float *x, float *y)
{
    int pairs = w->cols / (2 * BLOCK), p0 = 0;
    for (; p0 + TRANSPOSED_PAIRS <= pairs; p0 += TRANSPOSED_PAIRS)
        bf16_transposed_pairs(w, x, y, p0, TRANSPOSED_PAIRS, p0 == 0);
    for (; p0 < pairs; p0++)
        bf16_transposed_pairs(w, x, y, p0, 1, p0 == 0);
    /* a last odd block, then the columns past the last block */
    if (w->cols / BLOCK % 2) {
        int b = pairs * 2;
        __m512 acc = _mm512_loadu_ps(y + (size_t)b * BLOCK);
        for (int r = 0; r < w->rows; r++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(x[r]), bf16_block_m512(w->data + (size_t)r * w->data_stride, b), acc);
        _mm512_storeu_ps(y + (size_t)b * BLOCK, acc);
    }
    for (int r = 0; r < w->rows; r++)
        for (int k = w->cols / BLOCK * BLOCK; k < w->cols; k++)
            y[k] += x[r] * element_decode(w, w->data + (size_t)r * w->data_stride, k);
}

__attribute__((target(VBMI_TARGET))) static void bf16_rows_fused(const weight_matrix *w, const float *x,
                                                                 size_t x_stride, int n_tokens, float *y,
                                                                 size_t y_stride, int row_begin, int row_end)
{
    fused_rows(w, 0, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
}

__attribute__((target(VBMI_TARGET))) static void nvfp4_rows_vbmi(const weight_matrix *w, const float *x,
                                                                 size_t x_stride, int n_tokens, float *y,
                                                                 size_t y_stride, int row_begin, int row_end)
{
    fused_rows(w, 1, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
}
#endif

int linear_use_simd(int level)
{
    pthread_once(&tables_once, tables_fill);
    simd_allowed = level;
    return level < simd_available ? level : simd_available;
}

int linear_simd_level(void)
{
    pthread_once(&tables_once, tables_fill);
    return simd_allowed < simd_available ? simd_allowed : simd_available;
}

/* The products also come as an x86-64-v3 (AVX2) copy (kernels/cpu/wide_vector_clones.h): the
 * same C vectorises twice as wide. */
WIDE_VECTOR_CLONES
void linear_rows(const weight_matrix *w, const float *x, size_t x_stride, int n_tokens,
                 float *y, size_t y_stride, int row_begin, int row_end)
{
    pthread_once(&tables_once, tables_fill);
    int simd = simd_allowed < simd_available ? simd_allowed : simd_available;
    switch (w->format) {
    case WEIGHT_NVFP4:
#if KIMI_AVX512_NVFP4
        if (simd >= LINEAR_SIMD_AVX512_VBMI && w->cols <= PAIR_COLS_MAX) {
            nvfp4_rows_pairs(w, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
            break;
        }
        if (simd >= LINEAR_SIMD_AVX512_VBMI) {
            nvfp4_rows_vbmi(w, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
            break;
        }
        if (simd >= LINEAR_SIMD_AVX512) {
            nvfp4_rows_avx512(w, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
            break;
        }
#endif
        rows_of_format(w, WEIGHT_NVFP4, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
        break;
    case WEIGHT_BF16:
#if KIMI_AVX512_NVFP4
        if (simd >= LINEAR_SIMD_AVX512_VBMI) {
            bf16_rows_fused(w, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
            break;
        }
#endif
        rows_of_format(w, WEIGHT_BF16, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
        break;
    case WEIGHT_F16:
        rows_of_format(w, WEIGHT_F16, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
        break;
    case WEIGHT_F32:
        rows_of_format(w, WEIGHT_F32, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
        break;
    }
}

void linear_transposed_accumulate(const weight_matrix *w, const float *x, float *y)
{
    pthread_once(&tables_once, tables_fill);
#if KIMI_AVX512_NVFP4
    if (w->format == WEIGHT_BF16 && (simd_allowed < simd_available ? simd_allowed : simd_available) >= LINEAR_SIMD_AVX512_VBMI) {
        bf16_transposed_avx512(w, x, y);
        return;
    }
#endif
    int blocks = w->cols / BLOCK;
    float row_scale = w->format == WEIGHT_NVFP4 ? w->scale_2 : 1.0f;
    for (int r = 0; r < w->rows; r++) {
        const uint8_t *row = w->data + (size_t)r * w->data_stride;
        const uint8_t *scales = w->format == WEIGHT_NVFP4 ? w->scale + (size_t)r * w->scale_stride : NULL;
        float coefficient = x[r] * row_scale;
        for (int b = 0; b < blocks; b++) {
            float wb[BLOCK];
            block_decode(w->format, row, scales, b, wb);
            float *yb = y + (size_t)b * BLOCK;
            for (int j = 0; j < BLOCK; j++)
                yb[j] += coefficient * wb[j];
        }
        for (int k = blocks * BLOCK; k < w->cols; k++)
            y[k] += coefficient * element_decode(w, row, k);
    }
}

weight_matrix linear_row_view(const weight_matrix *w, int begin, int end)
{
    weight_matrix view = *w;
    view.rows = end - begin;
    view.data = w->data + (size_t)begin * w->data_stride;
    if (w->scale)
        view.scale = w->scale + (size_t)begin * w->scale_stride;
    return view;
}
