/* test_linear: linear_rows / linear_transposed_accumulate for NVFP4, BF16, F16 and F32 views
 * (whole matrices, row ranges, K ranges inside a wider tensor, padded strides, token counts
 * below, at and above the token tile) against a float64 product of the rows decoded by
 * numeric's weight_matrix_decode_row. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/numeric.h"
#include "kernels/nvfp4_math.h"
#include "tests/unit/check.h"
#include "tests/unit/xorshift.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rng(void)
{
    return (uint32_t)(xorshift64(&rng_state) >> 16);
}

static float uniform(void)
{
    return (float)(rng() % 2000001) / 1000000.0f - 1.0f;
}

/* A full tensor [rows][cols] of the given format, random. */
typedef struct {
    weight_matrix w;
    uint8_t *data, *scale;
} tensor;

static tensor make_tensor(weight_format format, int rows, int cols)
{
    tensor t = {0};
    size_t row_bytes = format == WEIGHT_NVFP4 ? (size_t)cols / 2
                       : format == WEIGHT_F32 ? (size_t)cols * 4 : (size_t)cols * 2;
    t.data = malloc((size_t)rows * row_bytes);
    for (size_t i = 0; i < (size_t)rows * row_bytes; i++)
        t.data[i] = (uint8_t)rng();
    if (format == WEIGHT_BF16 || format == WEIGHT_F16) {
        /* random values of a sane magnitude (no inf/NaN) */
        for (size_t i = 0; i < (size_t)rows * cols; i++) {
            float v = uniform();
            uint32_t wide;
            memcpy(&wide, &v, 4);
            uint16_t bits = format == WEIGHT_F16 ? float_to_f16(v) : (uint16_t)(wide >> 16);
            memcpy(t.data + 2 * i, &bits, 2);
        }
    } else if (format == WEIGHT_F32) {
        for (size_t i = 0; i < (size_t)rows * cols; i++) {
            float v = uniform();
            memcpy(t.data + 4 * i, &v, 4);
        }
    }
    if (format == WEIGHT_NVFP4) {
        t.scale = malloc((size_t)rows * cols / 16);
        for (size_t i = 0; i < (size_t)rows * cols / 16; i++)
            t.scale[i] = (uint8_t)(rng() % 0x50 + 0x08) | (rng() % 8 == 0 ? 0x80 : 0); /* finite, some negative */
    }
    t.w = (weight_matrix){format, rows, cols, t.data, row_bytes, t.scale, (size_t)cols / 16,
                          format == WEIGHT_NVFP4 ? 0.0123f : 1.0f};
    return t;
}

/* y[t][r] = sum_k W[r][k] x[t][k] in float64, with a bound on the float32 summation error. */
static void reference(const weight_matrix *w, const float *x, size_t x_stride, int n_tokens, double *y, double *bound)
{
    float *row = malloc((size_t)w->cols * sizeof *row);
    for (int r = 0; r < w->rows; r++) {
        weight_matrix_decode_row(w, r, row);
        for (int t = 0; t < n_tokens; t++) {
            double sum = 0, magnitude = 0;
            for (int k = 0; k < w->cols; k++) {
                sum += (double)row[k] * x[t * x_stride + k];
                magnitude += fabs((double)row[k] * x[t * x_stride + k]);
            }
            y[(size_t)t * w->rows + r] = sum;
            bound[(size_t)t * w->rows + r] = 1e-5 * magnitude + 1e-30;
        }
    }
    free(row);
}

static void check_view(const char *what, const weight_matrix *w, int n_tokens, int row_begin, int row_end)
{
    size_t x_stride = (size_t)w->cols + 3, y_stride = (size_t)w->rows + 5;
    float *x = malloc((size_t)n_tokens * x_stride * sizeof *x);
    float *y = malloc((size_t)n_tokens * y_stride * sizeof *y);
    double *want = malloc((size_t)n_tokens * w->rows * sizeof *want);
    double *bound = malloc((size_t)n_tokens * w->rows * sizeof *bound);
    for (size_t i = 0; i < (size_t)n_tokens * x_stride; i++)
        x[i] = uniform();
    for (size_t i = 0; i < (size_t)n_tokens * y_stride; i++)
        y[i] = 12345.0f; /* rows outside the range must stay untouched */
    reference(w, x, x_stride, n_tokens, want, bound);
    linear_rows(w, x, x_stride, n_tokens, y, y_stride, row_begin, row_end);
    int bad = 0, untouched = 1;
    for (int t = 0; t < n_tokens; t++)
        for (int r = 0; r < (int)y_stride; r++) {
            float got = y[t * y_stride + r];
            if (r < row_begin || r >= row_end) {
                untouched &= got == 12345.0f;
                continue;
            }
            double err = fabs(got - want[(size_t)t * w->rows + r]);
            if (!(err <= bound[(size_t)t * w->rows + r])) {
                if (!bad)
                    fprintf(stderr, "%s: token %d row %d: %.9g vs %.9g\n", what, t, r, got, want[(size_t)t * w->rows + r]);
                bad++;
            }
        }
    CHECK_MSG(bad == 0, "%s (%d tokens, rows %d..%d): %d wrong", what, n_tokens, row_begin, row_end, bad);
    CHECK_MSG(untouched, "%s: rows outside [%d, %d) were written", what, row_begin, row_end);
    free(x);
    free(y);
    free(want);
    free(bound);
}

static void check_transposed(const char *what, const weight_matrix *w)
{
    float *x = malloc((size_t)w->rows * sizeof *x), *y = malloc((size_t)w->cols * sizeof *y);
    float *row = malloc((size_t)w->cols * sizeof *row);
    double *want = calloc((size_t)w->cols, sizeof *want), *magnitude = calloc((size_t)w->cols, sizeof *magnitude);
    for (int r = 0; r < w->rows; r++)
        x[r] = uniform();
    for (int k = 0; k < w->cols; k++)
        y[k] = 0.5f; /* accumulates onto what is there */
    for (int r = 0; r < w->rows; r++) {
        weight_matrix_decode_row(w, r, row);
        for (int k = 0; k < w->cols; k++) {
            want[k] += (double)row[k] * x[r];
            magnitude[k] += fabs((double)row[k] * x[r]);
        }
    }
    linear_transposed_accumulate(w, x, y);
    int bad = 0;
    for (int k = 0; k < w->cols; k++)
        bad += !(fabs(y[k] - (want[k] + 0.5)) <= 1e-5 * (magnitude[k] + 0.5));
    CHECK_MSG(bad == 0, "%s transposed: %d of %d columns wrong", what, bad, w->cols);
    free(x);
    free(y);
    free(row);
    free(want);
    free(magnitude);
}

static void check_format(const char *what, weight_format format, int rows, int cols)
{
    tensor t = make_tensor(format, rows, cols);
    static const int token_counts[] = {1, 3, LINEAR_TOKEN_TILE, LINEAR_TOKEN_TILE + 5};
    for (size_t i = 0; i < sizeof token_counts / sizeof *token_counts; i++)
        check_view(what, &t.w, token_counts[i], 0, rows);
    check_view(what, &t.w, 2, rows / 3, rows - 2);

    /* A view of rows [3, rows - 1) and K columns [16, cols - 16): the tensor-parallel shapes. */
    weight_matrix view = linear_row_view(&t.w, 3, rows - 1);
    size_t element = format == WEIGHT_F32 ? 4 : 2;
    view.cols = cols - 32;
    if (format == WEIGHT_NVFP4) {
        view.data += 16 / 2;
        view.scale += 1;
    } else {
        view.data += 16 * element;
    }
    check_view(what, &view, 1, 0, view.rows);
    check_view(what, &view, LINEAR_TOKEN_TILE + 1, 1, view.rows);
    check_transposed(what, &t.w);
    check_transposed(what, &view);
    free(t.data);
    free(t.scale);
}

/* Exact small cases, worked out by hand from the NVFP4 definition. */
static void check_nvfp4_by_hand(void)
{
    /* One row of 16: bytes 0x21 (1 -> 0.5, 2 -> 1.0) and 0xF7 (7 -> 6, 15 -> -6), the rest 0;
     * block scale 0x38 = 1.0 (exponent 7), scale_2 = 0.25. */
    uint8_t data[8] = {0x21, 0xF7, 0, 0, 0, 0, 0, 0}, scale[1] = {0x38};
    weight_matrix w = {WEIGHT_NVFP4, 1, 16, data, 8, scale, 1, 0.25f};
    float x[16] = {2, 4, 1, 3}, y = 0;
    linear_rows(&w, x, 16, 1, &y, 1, 0, 1);
    /* (0.5*2 + 1*4 + 6*1 - 6*3) * 1.0 * 0.25 = -7 * 0.25 */
    CHECK_NEAR(y, -1.75, 0);
    scale[0] = 0x40; /* exponent 8: 2.0 */
    linear_rows(&w, x, 16, 1, &y, 1, 0, 1);
    CHECK_NEAR(y, -3.5, 0);
    scale[0] = 0x03; /* subnormal: 3 * 2^-9 */
    linear_rows(&w, x, 16, 1, &y, 1, 0, 1);
    CHECK_NEAR(y, -7 * 3 * 0x1p-9 * 0.25, 0);
    scale[0] = 0xC0; /* -2.0 */
    linear_rows(&w, x, 16, 1, &y, 1, 0, 1);
    CHECK_NEAR(y, 3.5, 0);
    /* The NaN codes of E4M3 make the row NaN (a corrupt scale must not pass as a number). */
    scale[0] = 0x7F;
    linear_rows(&w, x, 16, 1, &y, 1, 0, 1);
    CHECK(isnan(y));
    scale[0] = 0xFF;
    linear_rows(&w, x, 16, 1, &y, 1, 0, 1);
    CHECK(isnan(y));
    /* Every code (the SIMD kernels convert scales their own way: kernels/cpu/e4m3_avx512.h). */
    for (int code = 0; code < 256; code++) {
        scale[0] = (uint8_t)code;
        linear_rows(&w, x, 16, 1, &y, 1, 0, 1);
        float want = -7 * nvfp4_e4m3_to_float((uint8_t)code) * 0.25f;
        CHECK_MSG(isnan(want) ? isnan(y) : y == want, "e4m3 code 0x%02X: %g, want %g", code, y, want);
    }
}

/* The AVX-512F/BW NVFP4 path (where this CPU has it) and the portable loop give the same bits,
 * for token counts below, at and above the tile and for a K range inside a wider tensor. */
static void check_nvfp4_simd_matches_portable(void)
{
    tensor t = make_tensor(WEIGHT_NVFP4, 23, 176); /* 11 blocks: an odd one at the end */
    weight_matrix k_range = t.w;
    k_range.cols = 96;
    k_range.data += 16 / 2;
    k_range.scale += 1;
    const weight_matrix *views[] = {&t.w, &k_range};
    int token_counts[] = {1, 3, LINEAR_TOKEN_TILE, 2 * LINEAR_TOKEN_TILE + 3};
    for (int v = 0; v < 2; v++)
        for (int c = 0; c < 4; c++) {
            int n = token_counts[c];
            size_t x_stride = 177, y_stride = 23;
            float *x = malloc((size_t)n * x_stride * sizeof *x);
            float *simd = malloc((size_t)n * y_stride * sizeof *simd);
            float *portable = malloc((size_t)n * y_stride * sizeof *portable);
            for (size_t i = 0; i < (size_t)n * x_stride; i++)
                x[i] = uniform();
            linear_use_simd(LINEAR_SIMD_AVX512);
            linear_rows(views[v], x, x_stride, n, simd, y_stride, 0, 23);
            linear_use_simd(LINEAR_SIMD_NONE);
            linear_rows(views[v], x, x_stride, n, portable, y_stride, 0, 23);
            linear_use_simd(LINEAR_SIMD_BEST);
            CHECK_MSG(!memcmp(simd, portable, (size_t)n * y_stride * sizeof *simd),
                      "view %d, %d tokens: SIMD and portable NVFP4 products differ", v, n);
            free(x);
            free(simd);
            free(portable);
        }
    free(t.data);
    free(t.scale);
}

/* linear_transposed_accumulate on BF16 at LINEAR_SIMD_AVX512_VBMI (where this CPU has it) gives,
 * bit for bit, every column's chain of fused multiply-adds over the rows in order, y[k] =
 * fmaf(x[r], W[r][k], y[k]) from the y given: row counts with and without whole groups of rows,
 * widths with a tail past the last 16-block, and a view of rows inside a wider tensor. */
static void check_bf16_transposed_fma_bits(void)
{
    if (linear_use_simd(LINEAR_SIMD_AVX512_VBMI) != LINEAR_SIMD_AVX512_VBMI) {
        linear_use_simd(LINEAR_SIMD_BEST);
        return;
    }
    static const int shapes[][2] = {{128, 512}, {7, 72}, {18, 200}, {5, 400}, {1, 32}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        int rows = shapes[c][0], cols = shapes[c][1];
        tensor t = make_tensor(WEIGHT_BF16, rows + 3, cols + 16);
        weight_matrix view = linear_row_view(&t.w, 2, rows + 2);
        view.cols = cols;
        view.data += 16 * 2;
        float *x = malloc((size_t)rows * sizeof *x), *row = malloc((size_t)cols * sizeof *row);
        float *got = malloc((size_t)cols * sizeof *got), *want = malloc((size_t)cols * sizeof *want);
        for (int r = 0; r < rows; r++)
            x[r] = uniform();
        for (int k = 0; k < cols; k++)
            got[k] = want[k] = uniform();
        for (int r = 0; r < rows; r++) {
            weight_matrix_decode_row(&view, r, row);
            for (int k = 0; k < cols / 16 * 16; k++)
                want[k] = fmaf(x[r], row[k], want[k]);
        }
        for (int r = 0; r < rows; r++) { /* the tail past the last block: product, then sum */
            weight_matrix_decode_row(&view, r, row);
            for (int k = cols / 16 * 16; k < cols; k++)
                want[k] += x[r] * row[k];
        }
        linear_transposed_accumulate(&view, x, got);
        CHECK_MSG(!memcmp(got, want, (size_t)cols * sizeof *got), "%d x %d: BF16 transposed product differs from its FMA chains",
                  rows, cols);
        free(x), free(row), free(got), free(want), free(t.data), free(t.scale);
    }
    linear_use_simd(LINEAR_SIMD_BEST);
}

/* A token's products have the same bits alone (a decode step) and at any place in a batch
 * (prefill, speculative verification: greedy output must not change with speculation), on every
 * SIMD level this CPU has and the portable loops, for every format and block counts that leave
 * 0, 1, 2 and 3 blocks past the last group of four (the fused kernels' accumulators). */
static void check_token_alone_equals_batched(void)
{
    static const weight_format formats[] = {WEIGHT_NVFP4, WEIGHT_BF16, WEIGHT_F16, WEIGHT_F32};
    static const int cols[] = {176, 160, 192, 208};
    enum { ROWS = 19, TOKENS = 2 * LINEAR_TOKEN_TILE + 5 };
    for (int simd = LINEAR_SIMD_NONE; simd <= LINEAR_SIMD_BEST; simd++)
        for (int f = 0; f < 4; f++)
            for (int c = 0; c < 4; c++) {
                if (linear_use_simd(simd) != simd)
                    continue; /* this CPU lacks it: the level below already ran */
                tensor t = make_tensor(formats[f], ROWS, cols[c]);
                size_t x_stride = (size_t)cols[c];
                float *x = malloc(TOKENS * x_stride * sizeof *x);
                float batched[TOKENS][ROWS], alone[ROWS];
                for (size_t i = 0; i < TOKENS * x_stride; i++)
                    x[i] = uniform();
                linear_rows(&t.w, x, x_stride, TOKENS, &batched[0][0], ROWS, 0, ROWS);
                for (int k = 0; k < TOKENS; k++) {
                    linear_rows(&t.w, x + k * x_stride, x_stride, 1, alone, ROWS, 0, ROWS);
                    CHECK_MSG(!memcmp(alone, batched[k], sizeof alone),
                              "format %d, %d columns, simd %d: token %d alone differs from the batch", f, cols[c], simd, k);
                }
                free(x);
                free(t.data);
                free(t.scale);
            }
    linear_use_simd(LINEAR_SIMD_BEST);
}

int main(void)
{
    check_nvfp4_simd_matches_portable();
    check_bf16_transposed_fma_bits();
    check_token_alone_equals_batched();
    /* Every kernel against the float64 product: the portable loops and each SIMD level the CPU has. */
    for (int simd = LINEAR_SIMD_NONE; simd <= LINEAR_SIMD_BEST; simd++) {
        if (linear_use_simd(simd) != simd)
            continue;
        check_nvfp4_by_hand();
        check_format("nvfp4", WEIGHT_NVFP4, 37, 96);
        check_format("nvfp4", WEIGHT_NVFP4, 21, 112); /* 7 blocks: 3 past the last group of four */
        check_format("nvfp4", WEIGHT_NVFP4, 19, 624); /* 39 blocks: 2 scale groups of 16, 7 past them */
        check_format("nvfp4", WEIGHT_NVFP4, 9, 1024); /* 64 blocks: whole scale groups only */
        check_format("bf16", WEIGHT_BF16, 29, 72);    /* 72: a tail of 8 past the last 16-block */
        check_format("bf16", WEIGHT_BF16, 18, 200);
        check_format("f16", WEIGHT_F16, 21, 53);
        check_format("f32", WEIGHT_F32, 17, 40);
    }
    linear_use_simd(LINEAR_SIMD_BEST);
    return check_finish();
}
