/* test_linear_int8: linear_rows_int8 against its numeric contract (linear_int8.h), on the
 * AVX-512 VNNI kernel (where this CPU has it) and the portable loops:
 *  - against a float64 evaluation of the contract written here from nvfp4_math.h (x quantised
 *    per 16-column block, the products summed in double): |y - contract| <= (n u)(1.01) *
 *    sum|terms| + underflow, n = ceil(chunks / 2) + 7 float roundings on a term's way to y
 *    (chunks of 128 columns; e4m3 * a_b, one fma per other chunk of its accumulator, acc0 +
 *    acc1, 4 levels of lanes, scale_2 / 2), u = 2^-24; underflow = 2^-149 (sum |2 e2m1 q| + n + 1);
 *  - against the exact product (float64 of the dequantised weights times the unquantised x):
 *    the header's bound (scale_2 / 2) sum_b |e4m3(s_b)| (A_b / 2) sum_k |2 e2m1_k| with
 *    A_b = max|x| / 127 exactly, widened by the float rounding of the quantisation (x * (127 /
 *    max) is off by <= 127 * 2^-23 < 2^-16 units, and a_b = fl(A_b) by |a_b - A_b| per unit of
 *    q) plus the bound above; tokens built so that every rounding error points the same way as
 *    its weight take >= 90% of it (truncation or one scale per row would exceed it);
 *  - SIMD == portable and a token alone == the same token in batches of 2..17, bit for bit;
 *  - the round-to-even rule on exact ties, read back one q per row;
 *  - rows wider than LINEAR_INT8_COLS_MAX and BF16 weights: linear_rows' bits. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_int8.h"
#include "kernels/nvfp4_math.h"
#include "tests/unit/check.h"
#include "tests/unit/xorshift.h"

enum { BLOCK = 16, QMAX = 127, TOKENS = 17 };

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rng(void)
{
    return (uint32_t)(xorshift64(&rng_state) >> 16);
}

static float uniform(void) { return (float)(rng() % 2000001) / 1000000.0f - 1.0f; }

/* ---- weights ---- */

/* An NVFP4 view of rows x cols. padded: the view is columns [16, 16 + cols) of a tensor
 * 48 columns wider whose outside blocks have NaN scale codes (0x7F), so reading outside the
 * view, or past a row's scales, turns the result NaN. Scale codes come from the whole finite
 * E4M3 range (zero, subnormal, negative), except block 0, whose codes are +-2^-9 (subnormal)
 * so that a token holding +-FLT_MAX in block 0 still has a finite product. */
typedef struct {
    weight_matrix w;
    uint8_t *data, *scale;
} tensor;

static tensor make_nvfp4(int rows, int cols, int padded, float scale_2)
{
    tensor t = {0};
    int full = padded ? cols + 48 : cols, first_block = padded ? 1 : 0;
    size_t data_stride = (size_t)full / 2, scale_stride = (size_t)full / BLOCK;
    t.data = malloc((size_t)rows * data_stride);
    t.scale = malloc((size_t)rows * scale_stride);
    for (size_t i = 0; i < (size_t)rows * data_stride; i++)
        t.data[i] = (uint8_t)rng();
    for (int r = 0; r < rows; r++)
        for (size_t b = 0; b < scale_stride; b++) {
            int in_view = (int)b >= first_block && (int)b < first_block + cols / BLOCK;
            uint8_t code = (uint8_t)(rng() % 0x7F) | (rng() % 4 == 0 ? 0x80 : 0); /* 0x7F: NaN */
            if ((int)b == first_block)
                code = rng() % 2 ? 0x01 : 0x81;
            t.scale[r * scale_stride + b] = in_view ? code : 0x7F;
        }
    t.w = (weight_matrix){WEIGHT_NVFP4, rows, cols, t.data + first_block * BLOCK / 2, data_stride,
                          t.scale + first_block, scale_stride, scale_2};
    return t;
}

static uint8_t code_at(const weight_matrix *w, int r, int k)
{
    uint8_t byte = w->data[(size_t)r * w->data_stride + k / 2];
    return k % 2 ? byte >> 4 : byte & 15;
}

static void set_code(tensor *t, int r, int k, uint8_t code)
{
    uint8_t *byte = (uint8_t *)t->w.data + (size_t)r * t->w.data_stride + k / 2;
    *byte = k % 2 ? (uint8_t)((*byte & 0x0F) | code << 4) : (uint8_t)((*byte & 0xF0) | code);
}

/* ---- the contract in float64 ---- */

/* One block by the header's rule: returns a_b = fl(max|x| / 127) and sets q and max|x|, or
 * returns NaN for a block holding an infinity or a NaN. x * (127 / max) is evaluated in float
 * as if the exponent range had no end: x and max are first scaled by the same power of two, so
 * a block of denormals quantises like any other. */
static float reference_quantize(const float *x, int q[BLOCK], float *amax_out)
{
    float amax = 0.0f;
    memset(q, 0, BLOCK * sizeof *q);
    *amax_out = 0.0f;
    for (int k = 0; k < BLOCK; k++) {
        if (!isfinite(x[k]))
            return NAN;
        amax = fmaxf(amax, fabsf(x[k]));
    }
    *amax_out = amax;
    if (amax == 0.0f)
        return 0.0f;
    int exponent;
    float inverse = (float)QMAX / frexpf(amax, &exponent);
    for (int k = 0; k < BLOCK; k++) {
        float units = ldexpf(x[k], -exponent) * inverse;
        q[k] = (int)rintf(fmaxf(-QMAX, fminf(QMAX, units)));
    }
    return amax / (float)QMAX;
}

/* A token quantised by reference_quantize: per block a_b and max|x|, q [blocks][BLOCK]. */
typedef struct {
    float *a, *amax;
    int *q;
} quantised_token;

static quantised_token quantise_token(const float *x, int cols)
{
    int blocks = cols / BLOCK;
    quantised_token token = {malloc(blocks * sizeof(float)), malloc(blocks * sizeof(float)),
                             malloc((size_t)cols * sizeof(int))};
    for (int b = 0; b < blocks; b++)
        token.a[b] = reference_quantize(x + (size_t)b * BLOCK, token.q + (size_t)b * BLOCK, &token.amax[b]);
    return token;
}

static void free_token(quantised_token *token)
{
    free(token->a);
    free(token->amax);
    free(token->q);
}

typedef struct {
    int nan;                      /* a block of x holds an infinity or a NaN */
    double contract, contract_bound; /* the contract's value, |y - it| allowed */
    double exact, exact_bound;       /* the unquantised product, |y - it| allowed */
} expected;

/* Row r of w against token x (xq: x quantised). */
static expected reference_row(const weight_matrix *w, int r, const float *x, const quantised_token *xq)
{
    const uint8_t *scales = w->scale + (size_t)r * w->scale_stride;
    double sum = 0, magnitude = 0, exact = 0, exact_magnitude = 0, quantisation = 0, code_units = 0;
    expected e = {0};
    for (int b = 0; b < w->cols / BLOCK; b++) {
        const int *q = xq->q + (size_t)b * BLOCK;
        float amax = xq->amax[b], a = xq->a[b];
        if (isnan(a)) {
            e.nan = 1;
            continue;
        }
        double s = nvfp4_e4m3_to_float(scales[b]), A = (double)amax / QMAX;
        long dot = 0, dot_magnitude = 0, codes_magnitude = 0;
        for (int k = 0; k < BLOCK; k++) {
            int col = b * BLOCK + k;
            float e2m1 = nvfp4_e2m1_to_float(code_at(w, r, col));
            int twice = (int)(2 * e2m1);
            dot += twice * q[k];
            dot_magnitude += labs((long)twice * q[k]);
            codes_magnitude += abs(twice);
            double weight = e2m1 * s * (double)w->scale_2;
            exact += weight * x[col];
            exact_magnitude += fabs(weight * x[col]);
        }
        sum += s * a * (double)dot;
        magnitude += fabs(s * a) * (double)dot_magnitude;
        quantisation += fabs(s) * (A * (0.5 + 0x1p-16) * (double)codes_magnitude + fabs(a - A) * (double)dot_magnitude);
        code_units += (double)dot_magnitude;
    }
    double half = (double)w->scale_2 / 2;
    int chunks = (w->cols + 127) / 128, roundings = (chunks + 1) / 2 + 7;
    e.contract = half * sum;
    e.contract_bound = fabs(half) * magnitude * (roundings * 0x1p-24 * 1.01 + 1e-12) +
                       0x1p-149 * (code_units + roundings + 1);
    e.exact = exact;
    e.exact_bound = fabs(half) * quantisation + e.contract_bound + 1e-12 * exact_magnitude;
    return e;
}

/* ---- tokens ---- */

enum {
    TOKEN_WIDE,      /* blocks of magnitude 2^-20 .. 2^20 */
    TOKEN_UNIFORM,   /* [-1, 1] */
    TOKEN_ZERO_BLOCK, /* a block of +-0 (scale 0), scattered -0 */
    TOKEN_NAN,
    TOKEN_PLUS_INF,
    TOKEN_MINUS_INF,
    TOKEN_FLT_MAX,   /* +-FLT_MAX in block 0 */
    TOKEN_DENORMAL,  /* only: a block of denormals, denormals beside a normal max, max 1e-37 */
    TOKEN_ZERO,      /* all zero: y is exactly 0 */
    TOKEN_TIES,      /* x * 127 / max = k + 0.5 exactly */
    TOKEN_KINDS
};
static const char *const token_names[TOKEN_KINDS] = {"wide", "uniform", "zero block", "NaN", "+inf", "-inf",
                                                     "FLT_MAX", "denormal", "zero", "ties"};

static void fill_token(int kind, float *x, int cols)
{
    int blocks = cols / BLOCK;
    for (int b = 0; b < blocks; b++) {
        float magnitude = kind == TOKEN_UNIFORM ? 1.0f : ldexpf(1.0f, (int)(rng() % 41) - 20);
        for (int k = 0; k < BLOCK; k++)
            x[b * BLOCK + k] = kind == TOKEN_ZERO || kind == TOKEN_DENORMAL ? 0.0f : uniform() * magnitude;
    }
    int b = (int)(rng() % (unsigned)blocks), k = (int)(rng() % BLOCK);
    float *block = x + b * BLOCK;
    switch (kind) {
    case TOKEN_ZERO_BLOCK:
        for (int i = 0; i < BLOCK; i++)
            block[i] = i % 3 ? 0.0f : -0.0f;
        for (int i = 0; i < cols; i += 7)
            x[i] = -0.0f;
        break;
    case TOKEN_NAN:
        block[k] = NAN;
        break;
    case TOKEN_PLUS_INF:
        block[k] = INFINITY;
        break;
    case TOKEN_MINUS_INF:
        block[k] = -INFINITY;
        break;
    case TOKEN_FLT_MAX:
        for (int i = 0; i < BLOCK; i++)
            x[i] = uniform() * FLT_MAX;
        x[k] = rng() % 2 ? FLT_MAX : -FLT_MAX;
        x[(k + 5) % BLOCK] = -x[k];
        break;
    case TOKEN_DENORMAL:
        /* the rest 0, so that these tiny blocks are all the product has */
        for (int i = 0; i < BLOCK; i++) /* all denormal; then denormals beside a normal max */
            block[i] = uniform() * 0x1p-127f;
        for (int i = 0; i < BLOCK && blocks > 1; i++)
            x[((b + 1) % blocks) * BLOCK + i] = i == k ? 0x1p-120f : uniform() * 0x1p-127f;
        for (int i = 0; i < BLOCK && blocks > 2; i++) /* normal, but 127 / max overflows float */
            x[((b + 2) % blocks) * BLOCK + i] = i == k ? -1e-37f : uniform() * 1e-37f;
        break;
    case TOKEN_TIES:
        /* max = 127 * 2^e, the others (j + 0.5) * 2^e: exact ties; round-to-even keeps j when
         * j is even */
        for (int i = 0; i < BLOCK; i++)
            block[i] = ldexpf(i == k ? 127.0f : (float)(rng() % 127) + 0.5f, b % 5 - 2) * (rng() % 2 ? 1.0f : -1.0f);
        break;
    default:
        break;
    }
}

/* ---- checks ---- */

static const int batch_sizes[] = {2, 3, 4, 5, 9, TOKENS};
static const float sentinel = 12345.0f;

/* y [TOKENS][y_stride]: each token alone, every token's rows outside the range left as
 * sentinel; then each batch size: the same bits. */
static void run_alone_and_batched(const char *what, const weight_matrix *w, const float *x, size_t x_stride,
                                  float *alone, size_t y_stride, int row_begin, int row_end, const char *mode)
{
    for (size_t i = 0; i < TOKENS * y_stride; i++)
        alone[i] = sentinel;
    for (int t = 0; t < TOKENS; t++)
        linear_rows_int8(w, x + t * x_stride, x_stride, 1, alone + t * y_stride, y_stride, row_begin, row_end);
    int untouched = 1;
    for (int t = 0; t < TOKENS; t++)
        for (int r = 0; r < (int)y_stride; r++)
            if (r < row_begin || r >= row_end)
                untouched &= alone[t * y_stride + r] == sentinel;
    CHECK_MSG(untouched, "%s, %s: rows outside [%d, %d) were written", what, mode, row_begin, row_end);
    float *batch = malloc(TOKENS * y_stride * sizeof *batch);
    for (size_t n = 0; n < sizeof batch_sizes / sizeof *batch_sizes; n++) {
        int tokens = batch_sizes[n];
        for (size_t i = 0; i < TOKENS * y_stride; i++)
            batch[i] = sentinel;
        linear_rows_int8(w, x, x_stride, tokens, batch, y_stride, row_begin, row_end);
        for (int t = 0; t < tokens; t++)
            CHECK_MSG(!memcmp(batch + t * y_stride, alone + t * y_stride, y_stride * sizeof *batch),
                      "%s, %s: token %d in a batch of %d differs from the token alone", what, mode, t, tokens);
    }
    free(batch);
}

/* The products of one view: alone vs batched and SIMD vs portable bit for bit, and the active
 * kernel's values against the contract and the exact product. */
static void check_view(const char *what, const weight_matrix *w, int row_begin, int row_end)
{
    size_t x_stride = (size_t)w->cols + 5, y_stride = (size_t)w->rows + 3;
    float *x = malloc(TOKENS * x_stride * sizeof *x);
    for (size_t i = 0; i < TOKENS * x_stride; i++)
        x[i] = NAN; /* past cols: must not be read */
    for (int t = 0; t < TOKENS; t++)
        fill_token(t % TOKEN_KINDS, x + t * x_stride, w->cols);
    float *simd = malloc(TOKENS * y_stride * sizeof *simd), *portable = malloc(TOKENS * y_stride * sizeof *portable);
    int has_simd = linear_int8_simd();
    if (has_simd)
        run_alone_and_batched(what, w, x, x_stride, simd, y_stride, row_begin, row_end, "VNNI");
    linear_use_simd(LINEAR_SIMD_NONE);
    run_alone_and_batched(what, w, x, x_stride, portable, y_stride, row_begin, row_end, "portable");
    linear_use_simd(LINEAR_SIMD_BEST);
    for (int t = 0; t < TOKENS && has_simd; t++)
        for (int r = row_begin; r < row_end; r++)
            if (memcmp(&simd[t * y_stride + r], &portable[t * y_stride + r], sizeof *simd)) {
                CHECK_MSG(0, "%s: token %d (%s), row %d: VNNI %.9g != portable %.9g", what, t,
                          token_names[t % TOKEN_KINDS], r, simd[t * y_stride + r], portable[t * y_stride + r]);
                break;
            }

    for (int t = 0; t < TOKENS; t++) {
        int bad = 0;
        quantised_token xq = quantise_token(x + t * x_stride, w->cols);
        for (int r = row_begin; r < row_end; r++) {
            float y = portable[t * y_stride + r];
            expected e = reference_row(w, r, x + t * x_stride, &xq);
            int kind = t % TOKEN_KINDS;
            const char *why = NULL;
            if (e.nan)
                why = isnan(y) ? NULL : "not NaN";
            else if (!(fabs(y - e.contract) <= e.contract_bound))
                why = "off the contract";
            else if (!(fabs(y - e.exact) <= e.exact_bound))
                why = "outside the exact product's bound";
            else if (kind == TOKEN_ZERO && y != 0.0f)
                why = "not 0";
            if (why && !bad++)
                fprintf(stderr,
                        "%s: token %d (%s), row %d: %s: y %.9g, contract %.12g (+-%.3g), exact %.12g (+-%.3g)\n", what,
                        t, token_names[kind], r, why, y, e.contract, e.contract_bound, e.exact, e.exact_bound);
        }
        free_token(&xq);
        CHECK_MSG(bad == 0, "%s: token %d (%s): %d rows wrong", what, t, token_names[t % TOKEN_KINDS], bad);
    }
    if (!has_simd)
        printf("%s: no AVX-512 VNNI + VBMI here: SIMD vs portable not compared\n", what);
    free(x);
    free(simd);
    free(portable);
}

static void check_shape(int rows, int cols, int padded, float scale_2, int row_begin, int row_end)
{
    char what[128];
    snprintf(what, sizeof what, "%d x %d%s, scale_2 %g, rows [%d, %d)", rows, cols, padded ? " (padded view)" : "",
             (double)scale_2, row_begin, row_end);
    tensor t = make_nvfp4(rows, cols, padded, scale_2);
    check_view(what, &t.w, row_begin, row_end);
    free(t.data);
    free(t.scale);
}

/* Token r is built against row r so that every quantisation error has the sign of its weight:
 * x_k = sign(w_rk) (j + 0.51) a_b (0 <= j <= 125), rounded up by 0.49 units; the block's max
 * sits on a zero weight. Block 0 holds a single value 2^13 on zero weights (all rows), far above
 * the others (<= 16): per-block scales ignore it, a per-row scale would round every other x to
 * 0 (an error of -(j + 0.51) units each), and truncation would err by -0.51 units: both beyond
 * the bound, which round-to-nearest fills to 98%. */
static void check_bound_is_tight(int cols, float scale_2)
{
    enum { ROWS = 6 };
    int blocks = cols / BLOCK;
    char what[96];
    snprintf(what, sizeof what, "aligned errors, %d x %d, scale_2 %g", ROWS, cols, (double)scale_2);
    tensor t = make_nvfp4(ROWS, cols, 0, scale_2);
    for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < cols; k++) {
            int zero = k < BLOCK || k % BLOCK == (k / BLOCK * 5) % BLOCK;
            set_code(&t, r, k, zero ? (uint8_t)(rng() % 2 * 8) : (uint8_t)(rng() % 7 + 1 + rng() % 2 * 8));
        }
    for (int r = 0; r < ROWS; r++)
        for (int b = 0; b < blocks; b++)
            if (t.w.scale[r * t.w.scale_stride + b] % 0x80 == 0)
                t.scale[r * t.w.scale_stride + b] |= 0x30; /* a zero scale would leave the block out */
    float *x = calloc((size_t)ROWS * cols, sizeof *x), y[ROWS][ROWS];
    for (int r = 0; r < ROWS; r++) {
        float *token = x + (size_t)r * cols;
        const uint8_t *scales = t.w.scale + r * t.w.scale_stride;
        token[3] = 0x1p13f;
        for (int b = 1; b < blocks; b++) {
            float amax = ldexpf(1.0f + uniform() * 0.5f, (int)(rng() % 8) - 4);
            for (int k = 0; k < BLOCK; k++) {
                int col = b * BLOCK + k;
                float weight = nvfp4_e2m1_to_float(code_at(&t.w, r, col)) * nvfp4_e4m3_to_float(scales[b]);
                token[col] = k == (b * 5) % BLOCK ? amax
                                                  : copysignf(((float)(rng() % 126) + 0.51f) * (amax / QMAX), weight);
            }
        }
    }
    int has_simd = linear_int8_simd(); /* asked before linear_use_simd turns it off */
    for (int simd = 0; simd < 1 + has_simd; simd++) {
        linear_use_simd(simd ? LINEAR_SIMD_BEST : LINEAR_SIMD_NONE);
        linear_rows_int8(&t.w, x, (size_t)cols, ROWS, &y[0][0], ROWS, 0, ROWS);
        for (int token = 0; token < ROWS; token++) {
            quantised_token xq = quantise_token(x + (size_t)token * cols, cols);
            for (int r = 0; r < ROWS; r++) {
                expected e = reference_row(&t.w, r, x + (size_t)token * cols, &xq);
                double error = fabs(y[token][r] - e.exact);
                CHECK_MSG(error <= e.exact_bound, "%s, %s: token %d, row %d: |y - exact| = %.6g > bound %.6g", what,
                          simd ? "VNNI" : "portable", token, r, error, e.exact_bound);
                if (token == r)
                    CHECK_MSG(error >= 0.9 * e.exact_bound, "%s, %s: row %d: |y - exact| = %.6g, under 90%% of %.6g",
                              what, simd ? "VNNI" : "portable", r, error, e.exact_bound);
            }
            free_token(&xq);
        }
    }
    linear_use_simd(LINEAR_SIMD_BEST);
    free(x);
    free(t.data);
    free(t.scale);
}

/* Round-to-even on exact ties, worked out by hand: max 127 makes a_b = 1, and row i of a
 * 16 x 16 identity (code 2 = 1.0, scale 1.0, scale_2 1) gives y_i = q_i. */
static void check_ties_by_hand(void)
{
    static const float x[BLOCK] = {127, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f,
                                   125.5f, -126.5f, 64.5f, 63.5f, -0.0f, 0.49999997f, 100.25f, -100.75f};
    static const float q[BLOCK] = {127, 0, 2, 2, 0, -2, -2, 4, 126, -126, 64, 64, 0, 0, 100, -101};
    uint8_t data[BLOCK][BLOCK / 2] = {{0}}, scale[BLOCK];
    for (int i = 0; i < BLOCK; i++) {
        data[i][i / 2] = (uint8_t)(i % 2 ? 2 << 4 : 2);
        scale[i] = 0x38;
    }
    weight_matrix w = {WEIGHT_NVFP4, BLOCK, BLOCK, &data[0][0], BLOCK / 2, scale, 1, 1.0f};
    int has_simd = linear_int8_simd(); /* asked before linear_use_simd turns it off */
    for (int simd = 0; simd < 1 + has_simd; simd++) {
        linear_use_simd(simd ? LINEAR_SIMD_BEST : LINEAR_SIMD_NONE);
        float y[BLOCK];
        linear_rows_int8(&w, x, BLOCK, 1, y, BLOCK, 0, BLOCK);
        for (int i = 0; i < BLOCK; i++)
            CHECK_MSG(y[i] == q[i], "ties, %s: x %.9g -> q %g, want %g", simd ? "VNNI" : "portable", (double)x[i],
                      (double)y[i], (double)q[i]);
    }
    linear_use_simd(LINEAR_SIMD_BEST);
}

/* Weights linear_rows_int8 hands to linear_rows: the same bits as linear_rows. */
static void check_falls_back(const char *what, const weight_matrix *w)
{
    enum { N = 5 };
    size_t x_stride = (size_t)w->cols + 1, y_stride = (size_t)w->rows;
    float *x = malloc(N * x_stride * sizeof *x), *int8 = malloc(N * y_stride * sizeof *int8);
    float *fp32 = malloc(N * y_stride * sizeof *fp32);
    for (size_t i = 0; i < N * x_stride; i++)
        x[i] = uniform();
    for (int simd = 0; simd < 2; simd++) {
        linear_use_simd(simd ? LINEAR_SIMD_BEST : LINEAR_SIMD_NONE);
        linear_rows_int8(w, x, x_stride, N, int8, y_stride, 0, w->rows);
        linear_rows(w, x, x_stride, N, fp32, y_stride, 0, w->rows);
        CHECK_MSG(!memcmp(int8, fp32, N * y_stride * sizeof *int8), "%s (simd %d): not linear_rows' bits", what, simd);
    }
    linear_use_simd(LINEAR_SIMD_BEST);
    free(x);
    free(int8);
    free(fp32);
}

int main(void)
{
    printf("AVX-512 VNNI kernel: %s\n", linear_int8_simd() ? "yes" : "no (portable loops only)");
    check_ties_by_hand();
    /* rows: 1, and around the groups of 16 the kernel sums together; cols: one block, short
     * last chunks (48, 80, 8208), whole chunks, model widths, the maximum */
    check_shape(1, 16, 0, 1.0f, 0, 1);
    check_shape(15, 48, 1, 1e-3f, 0, 15);
    check_shape(16, 64, 0, 1.0f, 0, 16);
    check_shape(17, 80, 1, 1.0f, 3, 17);
    check_shape(100, 64, 1, 1e-3f, 17, 99);
    check_shape(100, 2048, 0, 1e-3f, 0, 100);
    check_shape(17, 7168, 1, 1.0f, 1, 16);
    check_shape(20, 8208, 0, 1.0f, 2, 19);
    check_shape(16, 8208, 1, 1e-3f, 0, 16);
    check_shape(17, LINEAR_INT8_COLS_MAX, 0, 1.0f, 0, 17);
    check_shape(5, LINEAR_INT8_COLS_MAX, 1, 1e-3f, 1, 5);
    check_bound_is_tight(2048, 1.0f);
    check_bound_is_tight(8208, 1e-3f);
    check_bound_is_tight(LINEAR_INT8_COLS_MAX, 1.0f);

    tensor wide = make_nvfp4(3, LINEAR_INT8_COLS_MAX + BLOCK, 0, 0.0123f);
    check_falls_back("NVFP4 wider than LINEAR_INT8_COLS_MAX", &wide.w);
    free(wide.data);
    free(wide.scale);
    enum { BF16_ROWS = 7, BF16_COLS = 200 };
    uint16_t *bf16 = malloc(BF16_ROWS * BF16_COLS * sizeof *bf16);
    for (int i = 0; i < BF16_ROWS * BF16_COLS; i++) {
        float v = uniform();
        uint32_t bits;
        memcpy(&bits, &v, 4);
        bf16[i] = (uint16_t)(bits >> 16);
    }
    weight_matrix bf16_w = {WEIGHT_BF16, BF16_ROWS, BF16_COLS, (const uint8_t *)bf16, BF16_COLS * 2, NULL, 0, 1.0f};
    check_falls_back("BF16", &bf16_w);
    free(bf16);
    return check_finish();
}
