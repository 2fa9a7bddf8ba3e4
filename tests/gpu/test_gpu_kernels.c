/* GPU test: every kernel of kernels/cuda/forward.h against its CPU counterpart on the
 * same inputs. Exact where the math is (the local all-reduce, the residual add, the fp16 cache
 * bits up to one fp16 ulp where expf/cos differ, the experts the router chooses); elsewhere
 * within the stated tolerance of a float sum taken in another order:
 *   GEMV / MLP / absorption: |gpu - cpu| <= 2e-5 * sum_k |w_k x_k| (+1e-30) per output;
 *   RMSNorm, routing weights: relative 2e-6;  attention (the decode and the prefill kernels): 2e-5
 *   of the output's largest value.
 * Weights are packed with engine/backend/device_plan.h (the layout the backend uploads), so the test
 * also covers that the kernels read that layout, and that the packed copy on the device
 * dequantizes bit for bit to the CPU decoder's values. Exits 77 (skipped) without a device. */
#include <math.h>
#include <string.h>

#include "engine/backend/device_plan.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/moe_routing.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/forward.h"
#include "kernels/cuda/nvfp4.h"
#include "tests/gpu/gpu_test.h"

/* A random host matrix [rows][cols] of a format (NVFP4: random codes, non-NaN scales near 1). */
typedef struct {
    weight_matrix host;         /* the view on host memory */
    uint8_t *data, *scale;
    weight_matrix dev;          /* packed, on the device */
    uint8_t *dev_data, *dev_scale;
} test_matrix;

static size_t element_size(weight_format f)
{
    return f == WEIGHT_F32 ? 4 : 2;
}

static void matrix_make(test_matrix *m, weight_format format, int rows, int cols, float scale_2)
{
    memset(m, 0, sizeof *m);
    size_t row_bytes = format == WEIGHT_NVFP4 ? (size_t)cols / 2 : (size_t)cols * element_size(format);
    m->data = malloc((size_t)rows * row_bytes);
    for (size_t i = 0; i < (size_t)rows * row_bytes; i++)
        m->data[i] = (uint8_t)gpu_test_next();
    if (format == WEIGHT_BF16 || format == WEIGHT_F16 || format == WEIGHT_F32) {
        for (size_t i = 0; i < (size_t)rows * cols; i++) {
            float v = gpu_test_uniform() * 0.1f;
            if (format == WEIGHT_F32)
                memcpy(m->data + 4 * i, &v, 4);
            else {
                uint32_t bits;
                memcpy(&bits, &v, 4);
                uint16_t h = format == WEIGHT_BF16 ? (uint16_t)(bits >> 16) : float_to_f16(v);
                memcpy(m->data + 2 * i, &h, 2);
            }
        }
    }
    if (format == WEIGHT_NVFP4) {
        m->scale = malloc((size_t)rows * cols / 16);
        for (size_t i = 0; i < (size_t)rows * cols / 16; i++)
            m->scale[i] = (uint8_t)(0x28 + gpu_test_next() % 32); /* 2^-2 .. 2^2 */
    }
    m->host = (weight_matrix){format, rows, cols, m->data, row_bytes, m->scale, (size_t)cols / 16,
                              format == WEIGHT_NVFP4 ? scale_2 : 1.0f};
    packed_layout l;
    packed_layout_of(&m->host, &l);
    uint8_t *packed = malloc(l.bytes);
    packed_rows_write(&m->host, &l, 0, rows, packed, packed + l.data_bytes);
    m->dev_data = gpu_test_upload(packed, l.bytes);
    m->dev_scale = m->dev_data + l.data_bytes;
    m->dev = packed_view(&m->host, &l, m->dev_data, m->dev_scale);
    free(packed);
}

static void matrix_free(test_matrix *m)
{
    cudaFree(m->dev_data);
    free(m->data);
    free(m->scale);
}

/* The packed copy on the device decodes to exactly the checkpoint view's values (the upload
 * path of the backend: packed_rows_write, then a copy). */
static void check_packed_upload(int rows, int cols)
{
    test_matrix m;
    matrix_make(&m, WEIGHT_NVFP4, rows, cols, 0.000372314453125f);
    float *dout = NULL, *got = malloc((size_t)rows * cols * 4), *want = malloc((size_t)cols * 4);
    CUDA_CHECK(cudaMalloc((void **)&dout, (size_t)rows * cols * 4));
    CHECK_INT(nvfp4_dequantize_rows_cuda(&m.dev, 0, rows, dout, NULL), 0);
    gpu_test_download(got, dout, (size_t)rows * cols * 4);
    int bad = 0;
    for (int r = 0; r < rows; r++) {
        weight_matrix_decode_row(&m.host, r, want);
        bad += memcmp(want, got + (size_t)r * cols, (size_t)cols * 4) != 0;
    }
    CHECK_MSG(bad == 0, "packed upload [%d x %d]: %d rows decode differently on the device", rows, cols, bad);
    cudaFree(dout);
    free(got);
    free(want);
    matrix_free(&m);
}

static float *random_floats(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = gpu_test_uniform() * scale;
    return x;
}

/* sum_k |W[r][k] x[k]| for each row: the scale of the rounding a float sum may differ by. */
static void abs_products(const weight_matrix *w, const float *x, float *out)
{
    float *row = malloc((size_t)w->cols * sizeof *row);
    for (int r = 0; r < w->rows; r++) {
        weight_matrix_decode_row(w, r, row);
        double s = 0;
        for (int k = 0; k < w->cols; k++)
            s += fabs((double)row[k] * x[k]);
        out[r] = (float)s;
    }
    free(row);
}

static int close_to(float got, float want, float magnitude, float rel)
{
    return fabsf(got - want) <= rel * magnitude + 1e-30f;
}

/* tokens == 1: linear_gemv_cuda (split-K where it applies); more: linear_gemv_tokens_cuda. */
static void check_gemv_tokens(weight_format format, int rows, int cols, int sm_count, int tokens, const char *what)
{
    test_matrix m;
    matrix_make(&m, format, rows, cols, 0.0123f);
    size_t ty = (size_t)tokens * rows;
    float *x = random_floats((size_t)tokens * cols, 1.0f), *want = malloc(ty * 4), *got = malloc(ty * 4);
    float *mag = malloc(ty * 4);
    linear_rows(&m.host, x, (size_t)cols, tokens, want, (size_t)rows, 0, rows);
    for (int t = 0; t < tokens; t++)
        abs_products(&m.host, x + (size_t)t * cols, mag + (size_t)t * rows);
    float *dx = gpu_test_upload(x, (size_t)tokens * cols * 4), *dy = NULL, *partials = NULL;
    unsigned *counters = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dy, ty * 4));
    CUDA_CHECK(cudaMalloc((void **)&partials, (size_t)rows * 16 * 4));
    CUDA_CHECK(cudaMalloc((void **)&counters, (size_t)rows * 4));
    CUDA_CHECK(cudaMemset(counters, 0, (size_t)rows * 4));
    gemv_scratch scratch = {partials, counters, rows, sm_count};
    for (int pass = 0; pass < 2; pass++) { /* twice: the split-K counters must be left at zero */
        /* NaN bytes: the first pass's outputs, which are right, must not stand for the second's */
        CUDA_CHECK(cudaMemset(dy, 0xFF, ty * 4));
        if (tokens == 1)
            CHECK_INT(linear_gemv_cuda(&m.dev, rows, 1, 0, dx, 0, dy, 0, &scratch, NULL), 0);
        else
            CHECK_INT(linear_gemv_tokens_cuda(&m.dev, rows, 1, 0, dx, 0, (size_t)cols, dy, 0, (size_t)rows, tokens,
                                              &scratch, NULL), 0);
        gpu_test_download(got, dy, ty * 4);
        int bad = 0;
        for (size_t r = 0; r < ty; r++)
            if (!close_to(got[r], want[r], mag[r], 2e-5f) && bad++ < 3)
                fprintf(stderr, "%s output %zu: gpu %.9g cpu %.9g (|w||x| %.3g)\n", what, r, got[r], want[r], mag[r]);
        CHECK_MSG(bad == 0, "%s [%d x %d], %d tokens, pass %d: %d outputs out of tolerance", what, rows, cols, tokens,
                  pass, bad);
    }
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(partials);
    cudaFree(counters);
    matrix_free(&m);
    free(x);
    free(want);
    free(got);
    free(mag);
}

static void check_gemv(weight_format format, int rows, int cols, int sm_count, const char *what)
{
    check_gemv_tokens(format, rows, cols, sm_count, 1, what);
}

/* linear_gemv_tokens_exact_cuda over `tokens` tokens gives, bit for bit, what linear_gemv_cuda
 * gives each token alone (split-K included: rows few enough that one token splits), also when
 * scratch holds the partials of only max_rows / rows tokens per launch. */
static void check_gemv_exact(weight_format format, int rows, int cols, int sm_count, int tokens, int max_rows,
                             const char *what)
{
    test_matrix m;
    matrix_make(&m, format, rows, cols, 0.0123f);
    size_t ty = (size_t)tokens * rows;
    float *x = random_floats((size_t)tokens * cols, 1.0f), *want = malloc(ty * 4), *got = malloc(ty * 4);
    float *dx = gpu_test_upload(x, (size_t)tokens * cols * 4), *dy = NULL, *partials = NULL;
    unsigned *counters = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dy, ty * 4));
    CUDA_CHECK(cudaMalloc((void **)&partials, (size_t)max_rows * 16 * 4));
    CUDA_CHECK(cudaMalloc((void **)&counters, (size_t)max_rows * 4));
    CUDA_CHECK(cudaMemset(counters, 0, (size_t)max_rows * 4));
    gemv_scratch scratch = {partials, counters, max_rows, sm_count};
    for (int t = 0; t < tokens; t++)
        CHECK_INT(linear_gemv_cuda(&m.dev, rows, 1, 0, dx + (size_t)t * cols, 0, dy + (size_t)t * rows, 0, &scratch,
                                   NULL), 0);
    gpu_test_download(want, dy, ty * 4);
    CUDA_CHECK(cudaMemset(dy, 0xFF, ty * 4));
    CHECK_INT(linear_gemv_tokens_exact_cuda(&m.dev, rows, 1, 0, dx, 0, (size_t)cols, dy, 0, (size_t)rows, tokens,
                                            &scratch, NULL), 0);
    gpu_test_download(got, dy, ty * 4);
    CHECK_MSG(!memcmp(want, got, ty * 4), "%s [%d x %d], %d tokens: not the one-token results bit for bit", what, rows,
              cols, tokens);
    /* and the plain multi-token GEMV of a split shape does differ (else this test proved nothing) */
    CHECK_INT(linear_gemv_tokens_cuda(&m.dev, rows, 1, 0, dx, 0, (size_t)cols, dy, 0, (size_t)rows, tokens, &scratch,
                                      NULL), 0);
    gpu_test_download(got, dy, ty * 4);
    CHECK_MSG(memcmp(want, got, ty * 4), "%s: the unsplit GEMV sums alike: the shape does not split K", what);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(partials);
    cudaFree(counters);
    matrix_free(&m);
    free(x);
    free(want);
    free(got);
}

/* The per-head W_UV product (batched GEMV) and the W_UK absorption against the CPU. */
static void check_attention_projections(weight_format format, int heads, int nope, int v, int kv_lora)
{
    test_matrix m;
    int rows_per_head = nope + v, q_width = nope + 16;
    matrix_make(&m, format, heads * rows_per_head, kv_lora, 0.02f);
    float *q = random_floats((size_t)heads * q_width, 1.0f), *o_lat = random_floats((size_t)heads * kv_lora, 1.0f);
    float *want_lat = calloc((size_t)heads * kv_lora, 4), *got_lat = malloc((size_t)heads * kv_lora * 4);
    float *want_out = malloc((size_t)heads * v * 4), *got_out = malloc((size_t)heads * v * 4);
    for (int h = 0; h < heads; h++) {
        weight_matrix uk = linear_row_view(&m.host, h * rows_per_head, h * rows_per_head + nope);
        weight_matrix uv = linear_row_view(&m.host, h * rows_per_head + nope, (h + 1) * rows_per_head);
        linear_transposed_accumulate(&uk, q + (size_t)h * q_width, want_lat + (size_t)h * kv_lora);
        linear_rows(&uv, o_lat + (size_t)h * kv_lora, 0, 1, want_out + (size_t)h * v, 0, 0, v);
    }
    float *dq = gpu_test_upload(q, (size_t)heads * q_width * 4), *dlat = NULL;
    float *do_lat = gpu_test_upload(o_lat, (size_t)heads * kv_lora * 4), *dout = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dlat, (size_t)heads * kv_lora * 4));
    CUDA_CHECK(cudaMalloc((void **)&dout, (size_t)heads * v * 4));
    CHECK_INT(mla_absorb_q_cuda(&m.dev, heads, nope, v, dq, q_width, dlat, 1, NULL), 0);
    weight_matrix uv = m.dev;
    uv.data += (size_t)nope * uv.data_stride;
    if (uv.scale)
        uv.scale += (size_t)nope * uv.scale_stride;
    CHECK_INT(linear_gemv_cuda(&uv, v, heads, rows_per_head, do_lat, (size_t)kv_lora, dout, (size_t)v, NULL, NULL), 0);
    gpu_test_download(got_lat, dlat, (size_t)heads * kv_lora * 4);
    gpu_test_download(got_out, dout, (size_t)heads * v * 4);
    int bad = 0;
    for (size_t i = 0; i < (size_t)heads * kv_lora; i++)
        bad += !close_to(got_lat[i], want_lat[i], 1.0f + fabsf(want_lat[i]), 2e-5f * nope);
    CHECK_MSG(bad == 0, "W_UK absorption (format %d): %d values out of tolerance", format, bad);
    bad = 0;
    for (size_t i = 0; i < (size_t)heads * v; i++)
        bad += !close_to(got_out[i], want_out[i], 1.0f + fabsf(want_out[i]), 2e-5f * kv_lora);
    CHECK_MSG(bad == 0, "W_UV per head (format %d): %d values out of tolerance", format, bad);
    cudaFree(dq);
    cudaFree(dlat);
    cudaFree(do_lat);
    cudaFree(dout);
    matrix_free(&m);
    free(q);
    free(o_lat);
    free(want_lat);
    free(got_lat);
    free(want_out);
    free(got_out);
}

static void check_rmsnorm_add_allreduce(void)
{
    int n = 7168, rows = 3;
    float *x = random_floats((size_t)rows * n, 3.0f), *w = random_floats((size_t)n, 1.0f);
    float *want = malloc((size_t)rows * n * 4), *got = malloc((size_t)rows * n * 4);
    weight_vector wv = {DTYPE_F32, n, w};
    for (int r = 0; r < rows; r++)
        rmsnorm(want + (size_t)r * n, x + (size_t)r * n, &wv, 1e-5f);
    float *dx = gpu_test_upload(x, (size_t)rows * n * 4), *dw = gpu_test_upload(w, (size_t)n * 4);
    CHECK_INT(rmsnorm_cuda(dx, dx, dw, rows, n, 1e-5f, NULL), 0);
    gpu_test_download(got, dx, (size_t)rows * n * 4);
    int bad = 0;
    for (size_t i = 0; i < (size_t)rows * n; i++)
        bad += !close_to(got[i], want[i], fabsf(want[i]), 2e-6f);
    CHECK_MSG(bad == 0, "rmsnorm: %d values out of tolerance", bad);

    /* residual add and the local all-reduce: exact (same operations, same order) */
    enum { RANKS = 8 };
    size_t m = 7168;
    float *parts[RANKS], *dparts[RANKS], *sum = malloc(m * 4), *h = random_floats(m, 1.0f), *back = malloc(m * 4);
    rank_buffers bufs;
    for (int r = 0; r < RANKS; r++) {
        parts[r] = random_floats(m, 1.0f);
        dparts[r] = gpu_test_upload(parts[r], m * 4);
        bufs.bufs[r] = dparts[r];
    }
    for (size_t i = 0; i < m; i++) {
        float s = parts[0][i];
        for (int r = 1; r < RANKS; r++)
            s += parts[r][i];
        sum[i] = s;
    }
    CHECK_INT(allreduce_sum_local_cuda(bufs, RANKS, m, NULL), 0);
    for (int r = 0; r < RANKS; r++) {
        gpu_test_download(back, dparts[r], m * 4);
        CHECK_MSG(!memcmp(back, sum, m * 4), "all-reduce: rank %d's buffer differs from the ordered sum", r);
    }
    float *dh = gpu_test_upload(h, m * 4);
    CHECK_INT(add_cuda(dh, dparts[0], m, NULL), 0);
    gpu_test_download(back, dh, m * 4);
    for (size_t i = 0; i < m; i++)
        h[i] += sum[i];
    CHECK(!memcmp(back, h, m * 4));

    /* the residual add fused with the next norm: h exact, the norm as rmsnorm's */
    float *normed = malloc(m * 4), *dnormed = NULL, *dweight = gpu_test_upload(w, m * 4);
    CUDA_CHECK(cudaMalloc((void **)&dnormed, m * 4));
    CHECK_INT(residual_rmsnorm_cuda(dh, dparts[1], dnormed, dweight, 1, (int)m, 1e-5f, NULL), 0);
    for (size_t i = 0; i < m; i++)
        h[i] += sum[i];
    weight_vector hw = {DTYPE_F32, (int)m, w};
    rmsnorm(want, h, &hw, 1e-5f);
    gpu_test_download(back, dh, m * 4);
    gpu_test_download(normed, dnormed, m * 4);
    CHECK_MSG(!memcmp(back, h, m * 4), "residual add: h differs");
    bad = 0;
    for (size_t i = 0; i < m; i++)
        bad += !close_to(normed[i], want[i], fabsf(want[i]), 2e-6f);
    CHECK_MSG(bad == 0, "residual rmsnorm: %d values out of tolerance", bad);
    cudaFree(dnormed);
    cudaFree(dweight);
    free(normed);
    for (int r = 0; r < RANKS; r++) {
        cudaFree(dparts[r]);
        free(parts[r]);
    }
    cudaFree(dh);
    cudaFree(dx);
    cudaFree(dw);
    free(sum);
    free(h);
    free(back);
    free(x);
    free(w);
    free(want);
    free(got);
}

/* RMSNorm's fp32 sums (kernels/cuda/norm_core.cuh) against the CPU's double sums on hostile rows
 * at Kimi-K2.5's widths (hidden 7168, q_lora 1536, kv_lora 512): K2.5-sized activations, 1e4
 * outliers among them, magnitudes spread log-uniformly over 1e-6..1e4, one 3e4 value among
 * 1e-3s, and a row of 1e-4s where eps counts. Element 0 of every row is 1 with weight 1, so
 * out[0] is the row's scale (1 / rms) itself: both the scale and every output are held to 2e-6
 * relative (rmsnorm_cuda, and residual_rmsnorm_cuda adding zeros to the row). Prints the largest
 * differences seen. */
static void check_rmsnorm_hostile(int n)
{
    enum { ROWS = 5 };
    float *x = malloc((size_t)ROWS * n * 4), *w = random_floats((size_t)n, 1.0f);
    for (int r = 0; r < ROWS; r++) {
        float *row = x + (size_t)r * n;
        for (int i = 0; i < n; i++) {
            float u = gpu_test_uniform(), sign = u < 0.0f ? -1.0f : 1.0f;
            switch (r) {
            case 0: row[i] = 3.0f * u; break;
            case 1: row[i] = i % 997 == 5 ? sign * 1e4f : 3.0f * u; break;
            case 2: row[i] = sign * powf(10.0f, -6.0f + 5.0f * (gpu_test_uniform() + 1.0f)); break;
            case 3: row[i] = i == n / 2 ? 3e4f : 1e-3f * u; break;
            default: row[i] = 1e-4f * u; break;
            }
        }
        row[0] = 1.0f;
    }
    w[0] = 1.0f;
    float *want = malloc((size_t)ROWS * n * 4), *got = malloc((size_t)ROWS * n * 4);
    weight_vector wv = {DTYPE_F32, n, w};
    for (int r = 0; r < ROWS; r++)
        rmsnorm(want + (size_t)r * n, x + (size_t)r * n, &wv, 1e-6f);
    float *zeros = calloc((size_t)ROWS * n, 4);
    float *dx = gpu_test_upload(x, (size_t)ROWS * n * 4), *dw = gpu_test_upload(w, (size_t)n * 4);
    float *dh = gpu_test_upload(x, (size_t)ROWS * n * 4), *dd = gpu_test_upload(zeros, (size_t)ROWS * n * 4);
    float *dout = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dout, (size_t)ROWS * n * 4));
    for (int fused = 0; fused < 2; fused++) {
        if (fused)
            CHECK_INT(residual_rmsnorm_cuda(dh, dd, dout, dw, ROWS, n, 1e-6f, NULL), 0);
        else
            CHECK_INT(rmsnorm_cuda(dout, dx, dw, ROWS, n, 1e-6f, NULL), 0);
        gpu_test_download(got, dout, (size_t)ROWS * n * 4);
        double worst_scale = 0.0, worst = 0.0;
        for (int r = 0; r < ROWS; r++) {
            const float *g = got + (size_t)r * n, *e = want + (size_t)r * n;
            double scale_diff = fabs((double)g[0] - e[0]) / fabs((double)e[0]);
            worst_scale = scale_diff > worst_scale ? scale_diff : worst_scale;
            for (int i = 0; i < n; i++)
                if (e[i] != 0.0f) {
                    double d = fabs((double)g[i] - e[i]) / fabs((double)e[i]);
                    worst = d > worst ? d : worst;
                }
        }
        printf("rmsnorm%s n=%d hostile rows: scale max relative difference %.3g, outputs %.3g\n",
               fused ? " (residual)" : "", n, worst_scale, worst);
        CHECK_MSG(worst_scale <= 2e-6 && worst <= 2e-6, "rmsnorm%s n=%d: scale %.3g, outputs %.3g relative",
                  fused ? " (residual)" : "", n, worst_scale, worst);
    }
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dh);
    cudaFree(dd);
    cudaFree(dout);
    free(x);
    free(w);
    free(want);
    free(got);
    free(zeros);
}

/* The latent norm, rope of k_pe and q_pe, and the cache rows (fp16, or fp8: kernels/kv_format.h)
 * of `tokens` tokens at positions position + t; norm_scale 1e5 pushes latents past the fp16
 * range, which both backends saturate to +-65504 and count alike (fp8: its block scale holds
 * them, but they read back as fp16, saturated: counted as the fp16 cache counts them). Cache values are compared as the fp16 they decode to:
 * within one fp16 ulp (fp8: one e4m3 step of the block, as a latent one ulp away in float may
 * round to the neighbouring code). */
static void check_kv_rope_cache(long position, int tokens, float norm_scale, kv_cache_format format)
{
    int kv_lora = 512, rope = 64, heads = 8, nope = 128, q_width = nope + rope, row = kv_lora + rope;
    size_t row_bytes = kv_row_bytes(format, kv_lora, rope);
    size_t qn = (size_t)heads * q_width;
    rope_config rc = {rope, 50000.0, 1, 64.0, 4096, 32.0, 1.0, 1.0, 1.0};
    rope_table table;
    CHECK_INT(rope_table_init(&table, &rc), 0);
    float *kv = random_floats((size_t)tokens * row, 2.0f), *q = random_floats((size_t)tokens * qn, 1.0f);
    float *norm = random_floats((size_t)kv_lora, 1.0f);
    for (int i = 0; i < kv_lora; i++)
        norm[i] *= norm_scale;
    size_t want_clamps = 0;
    float cos_t[128], sin_t[128];
    float *want_kv = malloc((size_t)tokens * row * 4), *want_q = malloc((size_t)tokens * qn * 4);
    memcpy(want_kv, kv, (size_t)tokens * row * 4);
    memcpy(want_q, q, (size_t)tokens * qn * 4);
    weight_vector nv = {DTYPE_F32, kv_lora, norm};
    uint16_t *want_cache = malloc((size_t)tokens * row * 2), *got_cache = malloc((size_t)tokens * row * 2);
    uint8_t *want_rows = malloc((size_t)tokens * row_bytes), *got_rows = malloc((size_t)tokens * row_bytes);
    for (int t = 0; t < tokens; t++) {
        float *kv_t = want_kv + (size_t)t * row;
        rmsnorm(kv_t, kv_t, &nv, 1e-6f);
        rope_cos_sin(&table, position + t, cos_t, sin_t);
        rope_apply(kv_t + kv_lora, cos_t, sin_t, rope);
        for (int h = 0; h < heads; h++)
            rope_apply(want_q + (size_t)t * qn + (size_t)h * q_width + nope, cos_t, sin_t, rope);
        if (format == KV_CACHE_FP8)
            want_clamps += (size_t)kv_fp8_encode_row(kv_t, kv_lora, rope, want_rows + (size_t)t * row_bytes);
        else
            want_clamps += float_row_to_f16_saturate(kv_t, (size_t)row, (uint16_t *)(want_rows + (size_t)t * row_bytes));
        kv_row_to_half(format, want_rows + (size_t)t * row_bytes, kv_lora, rope, want_cache + (size_t)t * row);
    }

    float *dkv = gpu_test_upload(kv, (size_t)tokens * row * 4), *dq = gpu_test_upload(q, (size_t)tokens * qn * 4);
    float *dnorm = gpu_test_upload(norm, (size_t)kv_lora * 4);
    double *dfreq = gpu_test_upload(table.inv_freq, (size_t)(rope / 2) * sizeof(double));
    int pos = (int)position;
    int *dpos = gpu_test_upload(&pos, sizeof pos);
    uint8_t *dcache = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dcache, ((size_t)position + tokens) * row_bytes));
    unsigned zero = 0, got_clamps = 0;
    unsigned *dclamps = gpu_test_upload(&zero, sizeof zero);
    CHECK_INT(mla_kv_rope_cache_cuda(dkv, kv_lora, rope, dnorm, 1e-6f, dq, heads, nope, dfreq, table.cos_sin_scale,
                                     dpos, dcache, format, dclamps, tokens, NULL), 0);
    gpu_test_download(&got_clamps, dclamps, sizeof got_clamps);
    CHECK_INT(got_clamps, want_clamps);
    CHECK(norm_scale < 1e4f || want_clamps > 0);
    cudaFree(dclamps);
    float *got_kv = malloc((size_t)tokens * row * 4), *got_q = malloc((size_t)tokens * qn * 4);
    gpu_test_download(got_kv, dkv, (size_t)tokens * row * 4);
    gpu_test_download(got_q, dq, (size_t)tokens * qn * 4);
    gpu_test_download(got_rows, dcache + (size_t)position * row_bytes, (size_t)tokens * row_bytes);
    for (int t = 0; t < tokens; t++)
        kv_row_to_half(format, got_rows + (size_t)t * row_bytes, kv_lora, rope, got_cache + (size_t)t * row);
    int bad = 0, far = 0;
    for (size_t i = 0; i < (size_t)tokens * row; i++) {
        bad += !close_to(got_kv[i], want_kv[i], 1.0f + fabsf(want_kv[i]), 2e-6f);
        size_t t = i / (size_t)row, c = i % (size_t)row;
        if (format == KV_CACHE_FP8 && c < (size_t)kv_lora) {
            float step = 32.0f * kv_fp8_row_scale(want_rows + t * row_bytes, kv_lora, (int)c / KV_FP8_BLOCK);
            far += fabsf(half_to_float(got_cache[i]) - half_to_float(want_cache[i])) > 1.01f * step;
        } else
            far += abs((int)got_cache[i] - (int)want_cache[i]) > 1;
    }
    for (size_t i = 0; i < (size_t)tokens * qn; i++)
        bad += !close_to(got_q[i], want_q[i], 1.0f + fabsf(want_q[i]), 2e-6f);
    CHECK_MSG(bad == 0, "kv/rope at position %ld (%d tokens): %d values out of tolerance", position, tokens, bad);
    CHECK_MSG(far == 0, "%s cache rows at position %ld (%d tokens): %d values more than one step away",
              kv_cache_format_name(format), position, tokens, far);
    cudaFree(dkv);
    cudaFree(dq);
    cudaFree(dnorm);
    cudaFree(dfreq);
    cudaFree(dpos);
    cudaFree(dcache);
    free(kv);
    free(q);
    free(norm);
    free(want_kv);
    free(want_q);
    free(got_kv);
    free(got_q);
    free(want_cache);
    free(got_cache);
    free(want_rows);
    free(got_rows);
}

/* The rotary cos/sin (kernels/cuda/rope_core.cuh: fp32 after an exact reduction of the angle)
 * against the CPU's, computed in double, at positions position + t for Kimi-K2.5's rope table
 * (pair 0 turns by 1 rad a position: 262143 rad at the longest context, where an fp32 angle
 * would be off by ~0.016 rad). q_pe's pairs are (1, 0), so the kernel's rotation leaves
 * exactly (cos, sin) there. Within 1e-6 (the values are at most 1); prints the largest difference. */
static void check_rope_angles(long position, int tokens)
{
    int kv_lora = 512, rope = 64;
    size_t row_bytes = kv_row_bytes(KV_CACHE_FP16, kv_lora, rope);
    rope_config rc = {rope, 50000.0, 1, 64.0, 4096, 32.0, 1.0, 1.0, 1.0};
    rope_table table;
    CHECK_INT(rope_table_init(&table, &rc), 0);
    float *kv = random_floats((size_t)tokens * (kv_lora + rope), 1.0f), *norm = random_floats((size_t)kv_lora, 1.0f);
    float *q = calloc((size_t)tokens * rope, 4), *got = malloc((size_t)tokens * rope * 4);
    for (int i = 0; i < tokens * rope; i += 2)
        q[i] = 1.0f;
    float *dkv = gpu_test_upload(kv, (size_t)tokens * (kv_lora + rope) * 4);
    float *dq = gpu_test_upload(q, (size_t)tokens * rope * 4);
    float *dnorm = gpu_test_upload(norm, (size_t)kv_lora * 4);
    double *dfreq = gpu_test_upload(table.inv_freq, (size_t)(rope / 2) * sizeof(double));
    int pos = (int)position;
    int *dpos = gpu_test_upload(&pos, sizeof pos);
    uint8_t *dcache = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dcache, ((size_t)position + tokens) * row_bytes));
    CHECK_INT(mla_kv_rope_cache_cuda(dkv, kv_lora, rope, dnorm, 1e-6f, dq, 1, 0, dfreq, table.cos_sin_scale, dpos,
                                     dcache, KV_CACHE_FP16, NULL, tokens, NULL), 0);
    gpu_test_download(got, dq, (size_t)tokens * rope * 4);
    double worst = 0.0;
    for (int t = 0; t < tokens; t++) {
        float cos_t[128], sin_t[128];
        rope_cos_sin(&table, position + t, cos_t, sin_t);
        for (int i = 0; i < rope / 2; i++) {
            double dc = fabs((double)got[(size_t)t * rope + 2 * i] - cos_t[i]);
            double ds = fabs((double)got[(size_t)t * rope + 2 * i + 1] - sin_t[i]);
            worst = dc > worst ? dc : worst;
            worst = ds > worst ? ds : worst;
        }
    }
    printf("rope cos/sin at positions %ld..%ld: max difference %.3g\n", position, position + tokens - 1, worst);
    CHECK_MSG(worst <= 1e-6, "rope cos/sin at positions %ld..%ld: %.3g from the CPU's", position,
              position + tokens - 1, worst);
    cudaFree(dkv);
    cudaFree(dq);
    cudaFree(dnorm);
    cudaFree(dfreq);
    cudaFree(dpos);
    cudaFree(dcache);
    free(kv);
    free(norm);
    free(q);
    free(got);
}

/* poison: token t's logits are made non-finite by pattern t % 4 (none; all NaN; NaN at every
 * third expert and +inf at one; -inf and NaN halves), so both backends must follow the one
 * ranking rule of kernels/moe_routing_math.h. */
static void check_route(int experts, int top_k, int n_group, int topk_group, int with_bias, int tokens, int poison)
{
    moe_routing_config c = {experts, top_k, n_group, topk_group, 1, 2.827f};
    float *logits = random_floats((size_t)tokens * experts, 4.0f), *bias = random_floats((size_t)experts, 0.05f);
    for (int t = 0; poison && t < tokens; t++)
        for (int e = 0; e < experts; e++) {
            float *l = &logits[(size_t)t * experts + e];
            switch (t % 4) {
            case 1: *l = NAN; break;
            case 2: *l = e % 3 == 0 ? NAN : e == experts / 2 ? INFINITY : *l; break;
            case 3: *l = e < experts / 2 ? -INFINITY : NAN; break;
            }
        }
    float *scratch = malloc(moe_route_scratch_floats(&c) * sizeof(float));
    int want_chosen[8 * 64], got_chosen[8 * 64];
    float want_w[8 * 64], got_w[8 * 64];
    for (int t = 0; t < tokens; t++)
        moe_route(&c, logits + (size_t)t * experts, with_bias ? bias : NULL, scratch, want_chosen + t * top_k,
                  want_w + t * top_k);
    float *dl = gpu_test_upload(logits, (size_t)tokens * experts * 4), *db = gpu_test_upload(bias, (size_t)experts * 4);
    int *dc = NULL;
    float *dw = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dc, (size_t)tokens * top_k * 4));
    CUDA_CHECK(cudaMalloc((void **)&dw, (size_t)tokens * top_k * 4));
    CHECK_INT(moe_route_cuda(&c, dl, with_bias ? db : NULL, dc, dw, tokens, NULL), 0);
    gpu_test_download(got_chosen, dc, (size_t)tokens * top_k * 4);
    gpu_test_download(got_w, dw, (size_t)tokens * top_k * 4);
    CHECK_MSG(!memcmp(got_chosen, want_chosen, (size_t)tokens * top_k * 4),
              "routing %d experts top %d groups %d/%d, %d tokens: choice differs", experts, top_k, n_group, topk_group,
              tokens);
    for (int k = 0; k < tokens * top_k; k++)
        CHECK_MSG((isnan(got_w[k]) && isnan(want_w[k])) || close_to(got_w[k], want_w[k], fabsf(want_w[k]), 2e-6f),
                  "routing weight %d: gpu %.9g cpu %.9g", k,
                  got_w[k], want_w[k]);
    cudaFree(dl);
    cudaFree(db);
    cudaFree(dc);
    cudaFree(dw);
    free(logits);
    free(bias);
    free(scratch);
}

/* The MoE step: shared expert + top_k experts chosen on the device, weighted sum. */
static void check_moe(int experts, int top_k, int hidden, int inter, int with_shared, int tokens)
{
    test_matrix *gate = calloc((size_t)experts + 1, sizeof *gate), *up = calloc((size_t)experts + 1, sizeof *up);
    test_matrix *down = calloc((size_t)experts + 1, sizeof *down);
    mlp_device *table = calloc((size_t)experts + 1, sizeof *table);
    for (int e = 0; e <= experts; e++) {
        matrix_make(&gate[e], WEIGHT_NVFP4, inter, hidden, 0.01f + 0.001f * e);
        matrix_make(&up[e], WEIGHT_NVFP4, inter, hidden, 0.02f);
        matrix_make(&down[e], WEIGHT_NVFP4, hidden, inter, 0.015f);
        table[e] = (mlp_device){gate[e].dev, up[e].dev, down[e].dev};
    }
    size_t th = (size_t)tokens * hidden, tk = (size_t)tokens * top_k;
    float *x = random_floats(th, 1.0f);
    int chosen[16 * 16];
    float weights[16 * 16];
    for (int t = 0; t < tokens; t++)
        for (int k = 0; k < top_k; k++) {
            chosen[t * top_k + k] = (int)((k * 7 + 3 + t) % experts); /* distinct, not in index order */
            weights[t * top_k + k] = 0.1f + 0.05f * k - 0.01f * t;
        }
    /* CPU: the forward.c order: partial = 0, += shared, then experts by ascending index */
    float *act = malloc((size_t)inter * 4), *upv = malloc((size_t)inter * 4), *y = malloc((size_t)hidden * 4);
    float *want = calloc(th, 4), *got = malloc(th * 4);
    for (int t = 0; t < tokens; t++) {
        const float *xt = x + (size_t)t * hidden;
        for (int e = -1; e < experts; e++) {
            int slot = -1;
            for (int k = 0; k < top_k; k++)
                if (chosen[t * top_k + k] == e)
                    slot = t * top_k + k;
            if ((e < 0 && !with_shared) || (e >= 0 && slot < 0))
                continue;
            int i = e < 0 ? 0 : 1 + e;
            linear_rows(&gate[i].host, xt, 0, 1, act, 0, 0, inter);
            linear_rows(&up[i].host, xt, 0, 1, upv, 0, 0, inter);
            silu_gate(act, act, upv, inter);
            linear_rows(&down[i].host, act, 0, 1, y, 0, 0, hidden);
            accumulate_scaled(want + (size_t)t * hidden, y, e < 0 ? 1.0f : weights[slot], hidden);
        }
    }
    mlp_device *dtable = gpu_test_upload(table, ((size_t)experts + 1) * sizeof *table);
    float *dx = gpu_test_upload(x, th * 4), *dw = gpu_test_upload(weights, tk * 4);
    int *dc = gpu_test_upload(chosen, tk * 4);
    float *dact = NULL, *dy = NULL, *dsact = NULL, *dsy = NULL, *dout = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dact, tk * inter * 4));
    CUDA_CHECK(cudaMalloc((void **)&dy, tk * hidden * 4));
    CUDA_CHECK(cudaMalloc((void **)&dsact, (size_t)tokens * inter * 4));
    CUDA_CHECK(cudaMalloc((void **)&dsy, th * 4));
    CUDA_CHECK(cudaMalloc((void **)&dout, th * 4));
    CHECK_INT(mlp_gate_up_cuda(dtable, NULL, tokens, 1, dx, hidden, inter, dsact, NULL), 0);
    CHECK_INT(mlp_down_cuda(dtable, NULL, tokens, dsact, hidden, inter, dsy, NULL), 0);
    CHECK_INT(mlp_gate_up_cuda(dtable + 1, dc, tokens * top_k, top_k, dx, hidden, inter, dact, NULL), 0);
    CHECK_INT(mlp_down_cuda(dtable + 1, dc, tokens * top_k, dact, hidden, inter, dy, NULL), 0);
    CHECK_INT(moe_combine_cuda(with_shared ? dsy : NULL, dy, dc, dw, top_k, hidden, dout, tokens, NULL), 0);
    gpu_test_download(got, dout, th * 4);
    double scale = 0;
    for (size_t r = 0; r < th; r++)
        scale = fmax(scale, fabs(want[r]));
    int bad = 0;
    for (size_t r = 0; r < th; r++)
        if (!close_to(got[r], want[r], (float)scale, 1e-4f) && bad++ < 3)
            fprintf(stderr, "moe output %zu: gpu %.9g cpu %.9g\n", r, got[r], want[r]);
    CHECK_MSG(bad == 0, "MoE step (%d experts, top %d, hidden %d, inter %d, %d tokens): %d outputs out of tolerance",
              experts, top_k, hidden, inter, tokens, bad);

    /* the same slots grouped by expert (a prefill step): the grouping exactly, the output within
     * the same tolerance */
    int *doffsets = NULL, *dorder = NULL, offsets[64], order[16 * 16], want_offsets[64] = {0}, want_order[16 * 16];
    CUDA_CHECK(cudaMalloc((void **)&doffsets, ((size_t)experts + 1) * 4));
    CUDA_CHECK(cudaMalloc((void **)&dorder, tk * 4));
    CHECK_INT(moe_group_cuda(dc, (int)tk, experts, doffsets, dorder, NULL), 0);
    CHECK_INT(mlp_gate_up_grouped_cuda(dtable + 1, doffsets, dorder, experts, top_k, dx, hidden, inter, dact, NULL), 0);
    CHECK_INT(mlp_down_grouped_cuda(dtable + 1, doffsets, dorder, experts, dact, hidden, inter, dy, NULL), 0);
    CHECK_INT(moe_combine_cuda(with_shared ? dsy : NULL, dy, dc, dw, top_k, hidden, dout, tokens, NULL), 0);
    gpu_test_download(offsets, doffsets, ((size_t)experts + 1) * 4);
    gpu_test_download(order, dorder, tk * 4);
    gpu_test_download(got, dout, th * 4);
    int at = 0;
    for (int e = 0; e < experts; e++) {
        want_offsets[e] = at;
        for (size_t i = 0; i < tk; i++)
            if (chosen[i] == e)
                want_order[at++] = (int)i;
    }
    want_offsets[experts] = at;
    CHECK_MSG(!memcmp(offsets, want_offsets, ((size_t)experts + 1) * 4) && !memcmp(order, want_order, tk * 4),
              "slots grouped by expert differ (%d experts, %zu slots)", experts, tk);
    bad = 0;
    for (size_t r = 0; r < th; r++)
        bad += !close_to(got[r], want[r], (float)scale, 1e-4f);
    CHECK_MSG(bad == 0, "grouped MoE step (%d experts, top %d, %d tokens): %d outputs out of tolerance", experts, top_k,
              tokens, bad);
    cudaFree(doffsets);
    cudaFree(dorder);
    for (int e = 0; e <= experts; e++) {
        matrix_free(&gate[e]);
        matrix_free(&up[e]);
        matrix_free(&down[e]);
    }
    cudaFree(dtable);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dc);
    cudaFree(dact);
    cudaFree(dy);
    cudaFree(dsact);
    cudaFree(dsy);
    cudaFree(dout);
    free(gate);
    free(up);
    free(down);
    free(table);
    free(x);
    free(act);
    free(upv);
    free(y);
    free(want);
    free(got);
}

/* n_pos cache rows of random latents (with an outlier channel) in format (kernels/kv_format.h). */
static uint8_t *random_cache(kv_cache_format format, int kv_lora, int rope, long n_pos)
{
    size_t row_bytes = kv_row_bytes(format, kv_lora, rope), row = (size_t)kv_lora + (size_t)rope;
    uint8_t *cache = malloc((size_t)n_pos * row_bytes);
    float *values = malloc(row * sizeof *values);
    for (long p = 0; p < n_pos; p++) {
        uint8_t *at = cache + (size_t)p * row_bytes;
        for (size_t i = 0; i < row; i++)
            values[i] = gpu_test_uniform() * (format == KV_CACHE_FP8 && i == 3 ? 20.0f : 2.0f);
        if (format == KV_CACHE_FP8)
            kv_fp8_encode_row(values, kv_lora, rope, at);
        else
            for (size_t i = 0; i < row; i++) {
                uint16_t h = float_to_f16(values[i]);
                memcpy(at + 2 * i, &h, 2);
            }
    }
    free(values);
    return cache;
}

/* Flash-decoding attention (absorbed) for `tokens` causal queries at positions
 * n_pos - tokens + t, against the CPU's mla_decode of each query over its own prefix. The
 * W_UV product is checked above, so kv_b's W_UV is the identity (F32): the CPU's output is
 * then the attention's latent itself. The partials start as NaN bytes, so a part the merge
 * reads but no block wrote shows. The same seed gives the same inputs; got_out (NULL: none)
 * receives the output [tokens][heads][kv_lora]. */
static void check_attention_into(long n_pos, int splits, int heads, int tokens, kv_cache_format format,
                                 float *got_out)
{
    int kv_lora = 512, rope = 64, nope = 128, q_width = nope + rope;
    mla_shape shape = {kv_lora, rope, nope, kv_lora, 0.1447f, format};
    size_t per_head = (size_t)(nope + kv_lora) * kv_lora, qn = (size_t)heads * q_width, on = (size_t)heads * kv_lora;
    float *kv_b = calloc((size_t)heads * per_head, 4);
    for (int h = 0; h < heads; h++) {
        float *w = kv_b + (size_t)h * per_head;
        for (size_t i = 0; i < (size_t)nope * kv_lora; i++)
            w[i] = gpu_test_uniform() * 0.05f;
        for (int i = 0; i < kv_lora; i++)
            w[(size_t)(nope + i) * kv_lora + i] = 1.0f;
    }
    weight_matrix kv_b_host = {WEIGHT_F32, heads * (nope + kv_lora), kv_lora, (const uint8_t *)kv_b,
                               (size_t)kv_lora * 4, NULL, 0, 1.0f};
    uint8_t *cache = random_cache(format, kv_lora, rope, n_pos);
    size_t row_bytes = kv_row_bytes(format, kv_lora, rope);
    float *q = random_floats((size_t)tokens * qn, 1.0f);
    float *scratch = malloc(mla_decode_scratch_floats(&shape, heads) * 4);
    float *want = malloc((size_t)tokens * on * 4), *got = malloc((size_t)tokens * on * 4);
    float *q_latent = calloc((size_t)tokens * on, 4);
    long first = n_pos - tokens;
    for (int t = 0; t < tokens; t++) {
        mla_decode(&shape, &kv_b_host, 0, heads, q + (size_t)t * qn, cache, first + t + 1, scratch,
                   want + (size_t)t * on);
        /* the absorption from the CPU (checked separately) */
        for (int h = 0; h < heads; h++) {
            weight_matrix uk = linear_row_view(&kv_b_host, h * (nope + kv_lora), h * (nope + kv_lora) + nope);
            linear_transposed_accumulate(&uk, q + (size_t)t * qn + (size_t)h * q_width,
                                         q_latent + (size_t)t * on + (size_t)h * kv_lora);
        }
    }
    float *dql = gpu_test_upload(q_latent, (size_t)tokens * on * 4), *dq = gpu_test_upload(q, (size_t)tokens * qn * 4);
    uint8_t *dcache = gpu_test_upload(cache, (size_t)n_pos * row_bytes);
    int pos = (int)first;
    int *dpos = gpu_test_upload(&pos, sizeof pos);
    float *dparts = NULL, *dout = NULL;
    size_t part_bytes = (size_t)tokens * mla_decode_partial_floats(splits, heads, kv_lora) * 4;
    CUDA_CHECK(cudaMalloc((void **)&dparts, part_bytes));
    CUDA_CHECK(cudaMemset(dparts, 0xFF, part_bytes));
    CUDA_CHECK(cudaMalloc((void **)&dout, (size_t)tokens * on * 4));
    CHECK_INT(mla_attention_setup_cuda(kv_lora, rope), 0);
    CHECK_INT(mla_decode_cuda(dql, dq, heads, kv_lora, rope, nope, shape.softmax_scale, dcache, format, dpos, splits,
                              dparts, dout, tokens, NULL), 0);
    gpu_test_download(got, dout, (size_t)tokens * on * 4);
    if (got_out)
        memcpy(got_out, got, (size_t)tokens * on * 4);
    int bad = 0;
    for (int t = 0; t < tokens; t++) {
        double scale = 0;
        for (size_t i = 0; i < on; i++)
            scale = fmax(scale, fabs(want[(size_t)t * on + i]));
        for (size_t i = 0; i < on; i++)
            bad += !close_to(got[(size_t)t * on + i], want[(size_t)t * on + i], (float)scale, 2e-5f);
    }
    CHECK_MSG(bad == 0, "%s attention over %ld positions, %d queries, %d parts, %d heads: %d values out of tolerance",
              kv_cache_format_name(format), n_pos, tokens, splits, heads, bad);
    cudaFree(dql);
    cudaFree(dq);
    cudaFree(dcache);
    cudaFree(dpos);
    cudaFree(dparts);
    cudaFree(dout);
    free(kv_b);
    free(cache);
    free(q);
    free(scratch);
    free(want);
    free(got);
    free(q_latent);
}

static void check_attention(long n_pos, int splits, int heads, int tokens, kv_cache_format format)
{
    check_attention_into(n_pos, splits, heads, tokens, format, NULL);
}

/* A decode step at n_pos positions in a graph captured for the most splits a 262k cache plans
 * on 188 multiprocessors (376) and for few: a sequence of up to 4 x splits chunks of 16 is cut
 * the same way whatever the capture's count (the length decides, kernels/cuda/mla.cu), so the
 * outputs agree bit for bit; both within the tolerance of the CPU. */
static void check_attention_split_invariance(long n_pos, int few_splits)
{
    int heads = 8, on = heads * 512;
    float *many = malloc((size_t)on * 4), *few = malloc((size_t)on * 4);
    gpu_test_lcg = 0xA77Eu + (uint32_t)n_pos;
    check_attention_into(n_pos, 376, heads, 1, KV_CACHE_FP16, many);
    gpu_test_lcg = 0xA77Eu + (uint32_t)n_pos;
    check_attention_into(n_pos, few_splits, heads, 1, KV_CACHE_FP16, few);
    CHECK_MSG(memcmp(many, few, (size_t)on * 4) == 0,
              "attention over %ld positions: 376 splits and %d splits differ", n_pos, few_splits);
    free(many);
    free(few);
}

/* The prefill attention for `tokens` causal queries after `context` cached positions, in `parts`
 * parts of the sequence (partials merged when more than one), against the CPU's mla_decode of
 * each query over its own prefix; W_UV is the identity as above, so the CPU's output is the
 * latent the kernel writes. Tolerance as for the decode kernel: 2e-5 of each query's largest
 * value. Shapes cover K2.5 (512 + 64: 16-byte staging, two columns per thread), kv_lora above
 * 512 (four columns per thread) and rows that are not whole 16-byte units. */
static void check_prefill_attention_in(int kv_lora, int rope, long context, int tokens, int heads, int parts,
                                       kv_cache_format format)
{
    int nope = 32, q_width = nope + rope;
    long n_pos = context + tokens;
    mla_shape shape = {kv_lora, rope, nope, kv_lora, 0.1447f, format};
    size_t per_head = (size_t)(nope + kv_lora) * kv_lora, qn = (size_t)heads * q_width, on = (size_t)heads * kv_lora;
    float *kv_b = calloc((size_t)heads * per_head, 4);
    for (int h = 0; h < heads; h++) {
        float *w = kv_b + (size_t)h * per_head;
        for (size_t i = 0; i < (size_t)nope * kv_lora; i++)
            w[i] = gpu_test_uniform() * 0.05f;
        for (int i = 0; i < kv_lora; i++)
            w[(size_t)(nope + i) * kv_lora + i] = 1.0f;
    }
    weight_matrix kv_b_host = {WEIGHT_F32, heads * (nope + kv_lora), kv_lora, (const uint8_t *)kv_b,
                               (size_t)kv_lora * 4, NULL, 0, 1.0f};
    uint8_t *cache = random_cache(format, kv_lora, rope, n_pos);
    size_t row_bytes = kv_row_bytes(format, kv_lora, rope);
    float *q = random_floats((size_t)tokens * qn, 1.0f);
    float *scratch = malloc(mla_decode_scratch_floats(&shape, heads) * 4);
    float *want = malloc((size_t)tokens * on * 4), *got = malloc((size_t)tokens * on * 4);
    float *q_latent = calloc((size_t)tokens * on, 4);
    for (int t = 0; t < tokens; t++) {
        mla_decode(&shape, &kv_b_host, 0, heads, q + (size_t)t * qn, cache, context + t + 1, scratch,
                   want + (size_t)t * on);
        for (int h = 0; h < heads; h++) {
            weight_matrix uk = linear_row_view(&kv_b_host, h * (nope + kv_lora), h * (nope + kv_lora) + nope);
            linear_transposed_accumulate(&uk, q + (size_t)t * qn + (size_t)h * q_width,
                                         q_latent + (size_t)t * on + (size_t)h * kv_lora);
        }
    }
    float *dql = gpu_test_upload(q_latent, (size_t)tokens * on * 4), *dq = gpu_test_upload(q, (size_t)tokens * qn * 4);
    uint8_t *dcache = gpu_test_upload(cache, (size_t)n_pos * row_bytes);
    int pos = (int)context;
    int *dpos = gpu_test_upload(&pos, sizeof pos);
    float *dparts = NULL, *dout = NULL;
    size_t partial_floats = mla_prefill_partial_floats(parts, tokens, heads, kv_lora);
    CHECK(parts == 1 ? partial_floats == 0 : partial_floats == (size_t)parts * tokens * heads * (kv_lora + 2));
    CUDA_CHECK(cudaMalloc((void **)&dparts, (partial_floats ? partial_floats : 1) * 4));
    CUDA_CHECK(cudaMalloc((void **)&dout, (size_t)tokens * on * 4));
    CUDA_CHECK(cudaMemset(dout, 0xFF, (size_t)tokens * on * 4)); /* NaN: every value must be written */
    CHECK_INT(mla_attention_setup_cuda(kv_lora, rope), 0);
    CHECK_INT(mla_prefill_cuda(dql, dq, heads, kv_lora, rope, nope, shape.softmax_scale, dcache, format, dpos, parts,
                               parts > 1 ? dparts : NULL, dout, tokens, NULL), 0);
    gpu_test_download(got, dout, (size_t)tokens * on * 4);
    int bad = 0;
    for (int t = 0; t < tokens; t++) {
        double scale = 0;
        for (size_t i = 0; i < on; i++)
            scale = fmax(scale, fabs(want[(size_t)t * on + i]));
        for (size_t i = 0; i < on; i++) {
            float g = got[(size_t)t * on + i], w = want[(size_t)t * on + i];
            if ((isnan(g) || !close_to(g, w, (float)scale, 2e-5f)) && bad++ < 3)
                fprintf(stderr, "prefill attention token %d value %zu: gpu %.9g cpu %.9g\n", t, i, g, w);
        }
    }
    CHECK_MSG(bad == 0,
              "%s prefill attention kv_lora %d rope %d, %ld cached + %d queries, %d heads, %d parts: %d values out of "
              "tolerance", kv_cache_format_name(format), kv_lora, rope, context, tokens, heads, parts, bad);
    cudaFree(dql);
    cudaFree(dq);
    cudaFree(dcache);
    cudaFree(dpos);
    cudaFree(dparts);
    cudaFree(dout);
    free(kv_b);
    free(cache);
    free(q);
    free(scratch);
    free(want);
    free(got);
    free(q_latent);
}

static void check_prefill_attention(int kv_lora, int rope, long context, int tokens, int heads, int parts)
{
    check_prefill_attention_in(kv_lora, rope, context, tokens, heads, parts, KV_CACHE_FP16);
}

/* The attention launchers inside a stream capture (as the backend's step graphs hold them) at
 * K2.5's rows, whose shared memory is above the 48 KiB default: once mla_attention_setup_cuda
 * has raised the limits, a launch sets no kernel attribute, which the CPU emulation of CUDA
 * refuses while a stream of the device captures (a launcher that set it on every launch failed
 * here). Nothing is run: the graph is dropped. */
static void check_attention_captured(void)
{
    int kv_lora = 512, rope = 64, heads = 8, tokens = 4;
    CHECK_INT(mla_attention_setup_cuda(kv_lora, rope), 0);
    size_t rows = (size_t)tokens * heads;
    float *dql = NULL, *dq = NULL, *dparts = NULL, *dout = NULL;
    uint8_t *dcache = NULL;
    int *dpos = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dql, rows * kv_lora * 4));
    CUDA_CHECK(cudaMalloc((void **)&dq, rows * (32 + rope) * 4));
    CUDA_CHECK(cudaMalloc((void **)&dparts, (size_t)tokens * mla_decode_partial_floats(4, heads, kv_lora) * 4));
    CUDA_CHECK(cudaMalloc((void **)&dout, rows * kv_lora * 4));
    CUDA_CHECK(cudaMalloc((void **)&dcache, 16 * kv_row_bytes(KV_CACHE_FP16, kv_lora, rope)));
    CUDA_CHECK(cudaMalloc((void **)&dpos, sizeof(int)));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    CHECK_INT(mla_decode_cuda(dql, dq, heads, kv_lora, rope, 32, 0.1f, dcache, KV_CACHE_FP16, dpos, 4, dparts, dout,
                              tokens, stream), 0);
    CHECK_INT(mla_prefill_cuda(dql, dq, heads, kv_lora, rope, 32, 0.1f, dcache, KV_CACHE_FP16, dpos, 4, dparts, dout,
                               tokens, stream), 0);
    cudaGraph_t graph = NULL;
    CHECK_INT(cudaStreamEndCapture(stream, &graph), 0);
    if (graph)
        cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    cudaFree(dql);
    cudaFree(dq);
    cudaFree(dparts);
    cudaFree(dout);
    cudaFree(dcache);
    cudaFree(dpos);
}

/* Shared memory against the device's per-block limit: Kimi-K2.5's rows (512 + 64) fit every
 * target; the largest rows the backend accepts (1024 + 256) run where the limit holds them
 * (sm_90, sm_100) and are refused by mla_attention_setup_cuda where it does not (sm_120), which
 * backend_open checks before loading; a launch without the raised limit is refused too. */
static void check_attention_shared_limit(void)
{
    check_attention_captured();
    int limit = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    CHECK_MSG(mla_attention_shared_bytes(512, 64) <= (size_t)limit, "K2.5 attention: %zu bytes of shared memory, "
              "the device allows %d", mla_attention_shared_bytes(512, 64), limit);
    if (mla_attention_shared_bytes(1024, 256) <= (size_t)limit) {
        check_prefill_attention(1024, 256, 100, 20, 2, 3);
        return;
    }
    int pos = 0, *dpos = gpu_test_upload(&pos, sizeof pos);
    CHECK(mla_attention_setup_cuda(1024, 256) != 0);
    cudaGetLastError();     /* the refused attribute is this thread's last error: not the next launch's */
    CHECK(mla_prefill_cuda(NULL, NULL, 2, 1024, 256, 32, 0.1f, NULL, KV_CACHE_FP16, dpos, 1, NULL, NULL, 4, NULL) != 0);
    cudaGetLastError();
    cudaFree(dpos);
}

/* Decode and prefill attention, every shape above, then the shared memory limit. */
static void check_attention_all(void)
{
    check_attention(1, 1, 8, 1, KV_CACHE_FP16);
    check_attention(17, 4, 8, 1, KV_CACHE_FP16);
    check_attention(300, 7, 8, 1, KV_CACHE_FP16);
    check_attention(5000, 64, 8, 1, KV_CACHE_FP16);
    check_attention(2000, 16, 11, 1, KV_CACHE_FP16); /* two head groups, the second partial */
    check_attention(8, 3, 8, 8, KV_CACHE_FP16);      /* a prefill step from position 0 */
    check_attention(1000, 16, 8, 6, KV_CACHE_FP16);  /* a prefill step after 994 cached positions */
    check_attention(700, 4, 8, 64, KV_CACHE_FP16);   /* a full prefill step */
    /* the prefill kernel: one, seven and 64 queries, empty to ~3000 positions of context, parts as
     * the backend plans them for 264 splits (device_prefill_attention_parts) and one part */
    int sizes[3] = {1, 7, 64};
    long contexts[4] = {0, 31, 1000, 2990};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            int parts = device_prefill_attention_parts(264, sizes[i], 8);
            check_prefill_attention(512, 64, contexts[j], sizes[i], 8, parts);
            if (parts > 1)
                check_prefill_attention(512, 64, contexts[j], sizes[i], 8, 1);
        }
    check_prefill_attention(512, 64, 500, 512, 8, 1);       /* a long step: 256 blocks of rows */
    check_prefill_attention(512, 64, 40, 33, 3, 5);         /* blocks holding rows of several tokens */
    check_prefill_attention(512, 64, 2000, 9, 11, 7);       /* 11 heads: a token's rows across blocks */
    check_prefill_attention(640, 64, 300, 20, 2, 3);        /* four columns per thread */
    check_prefill_attention(48, 8, 90, 40, 4, 2);           /* the `shape` variant's dims */
    check_prefill_attention(50, 6, 77, 12, 8, 1);           /* rows of 56 + 2 halves: staged element by element */
    check_prefill_attention(64, 16, 0, 150, 8, 1);          /* tiny-k25's dims */
    /* one K2.5 rank at TP 1: 64 heads, a block of rows is a quarter of a token's heads */
    check_prefill_attention(512, 64, 100, 16, 64, device_prefill_attention_parts(264, 16, 64));
    check_prefill_attention(512, 64, 2047, 3, 64, device_prefill_attention_parts(264, 3, 64));
    check_prefill_attention(512, 64, 33, 64, 64, 1);
    /* the fp8 cache (issue 22): the write quantises as the CPU does, decode and prefill read it
     * as the CPU does (one scale block for tiny-k25, four for K2.5, three with a partial one) */
    check_kv_rope_cache(0, 1, 1.0f, KV_CACHE_FP8);
    check_kv_rope_cache(100, 8, 1.0f, KV_CACHE_FP8);
    check_kv_rope_cache(100, 8, 1e5f, KV_CACHE_FP8);
    check_attention(300, 7, 8, 1, KV_CACHE_FP8);
    check_attention(1000, 16, 8, 6, KV_CACHE_FP8);
    check_prefill_attention_in(512, 64, 1000, 7, 8, device_prefill_attention_parts(264, 7, 8), KV_CACHE_FP8);
    check_prefill_attention_in(512, 64, 31, 64, 8, 1, KV_CACHE_FP8);
    check_prefill_attention_in(320, 64, 90, 40, 4, 2, KV_CACHE_FP8);
    check_prefill_attention_in(64, 16, 0, 150, 8, 1, KV_CACHE_FP8);
    check_attention_shared_limit();
}

/* The attention kernels at Kimi-K2.5's shapes (kv_lora 512, rope 64): decode and prefill for one
 * rank at TP 8 (8 heads) and at TP 1 (64 heads), then the shared memory limit: what must fit the
 * device's opt-in shared memory (the sm_120 run of the CPU emulation of CUDA: 99 KiB). */
static void check_attention_real_shapes(void)
{
    /* a capture's split count far above the length's need: short and long sequences */
    check_attention_split_invariance(40, 1);
    check_attention_split_invariance(1000, 16);
    check_attention_split_invariance(4000, 63);
    check_attention(30000, 376, 8, 1, KV_CACHE_FP16);
    check_attention(300, 7, 8, 1, KV_CACHE_FP16);
    check_attention(1000, 16, 8, 6, KV_CACHE_FP16);
    check_prefill_attention(512, 64, 1000, 64, 8, device_prefill_attention_parts(264, 64, 8));
    check_prefill_attention(512, 64, 100, 16, 64, device_prefill_attention_parts(264, 16, 64));
    check_attention(1000, 16, 8, 6, KV_CACHE_FP8);
    check_prefill_attention_in(512, 64, 1000, 64, 8, device_prefill_attention_parts(264, 64, 8), KV_CACHE_FP8);
    check_attention_shared_limit();
}

/* usage: test_gpu_kernels [attention]: every kernel, or the attention kernels at the real shapes
 * alone (check_attention_real_shapes). */
int main(int argc, char **argv)
{
    int attention_only = argc == 2 && !strcmp(argv[1], "attention");
    if (argc > 1 && !attention_only) {
        fprintf(stderr, "usage: %s [attention]\n", argv[0]);
        return 2;
    }
    gpu_test_require_device();
    if (attention_only) {
        check_attention_real_shapes();
        return check_finish();
    }
    int sm = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, 0));
    check_packed_upload(256, 7168);
    check_packed_upload(5, 48);
    /* GEMV: every format, odd widths (a half chunk at the end), rank shapes, split-K */
    check_gemv(WEIGHT_NVFP4, 256, 7168, sm, "nvfp4 gate slice");
    check_gemv(WEIGHT_NVFP4, 7168, 256, sm, "nvfp4 down slice");
    check_gemv(WEIGHT_NVFP4, 37, 48, sm, "nvfp4 odd");
    check_gemv(WEIGHT_NVFP4, 100, 7168 + 16, sm, "nvfp4 split-K, half chunk");
    check_gemv(WEIGHT_BF16, 576, 7168, sm, "bf16 kv_a (split-K)");
    check_gemv(WEIGHT_BF16, 1536, 7168, sm, "bf16 q_a");
    check_gemv(WEIGHT_BF16, 384, 7168, 1, "bf16 router (no split)");
    check_gemv(WEIGHT_BF16, 33, 100, sm, "bf16 odd");
    check_gemv(WEIGHT_F16, 70, 136, sm, "f16");
    check_gemv(WEIGHT_F32, 50, 330, sm, "f32");
    /* several tokens: each weight read once for all (prefill steps), and tiles of 8 */
    check_gemv_tokens(WEIGHT_NVFP4, 256, 7168, sm, 3, "nvfp4, 3 tokens");
    check_gemv_tokens(WEIGHT_BF16, 576, 7168, sm, 8, "bf16 kv_a, 8 tokens");
    check_gemv_tokens(WEIGHT_NVFP4, 37, 48, sm, 11, "nvfp4 odd, 11 tokens");
    check_gemv_tokens(WEIGHT_F16, 70, 136, sm, 5, "f16, 5 tokens");
    /* the verify step's GEMV: split-K shapes, 8 tokens a launch, and 3 where scratch holds 3 */
    check_gemv_exact(WEIGHT_BF16, 64, 4096, 16, 17, 1024, "bf16 exact");
    check_gemv_exact(WEIGHT_NVFP4, 40, 8192, 16, 5, 120, "nvfp4 exact, 3 tokens a launch");
    check_attention_projections(WEIGHT_BF16, 8, 128, 128, 512);
    check_attention_projections(WEIGHT_NVFP4, 3, 32, 16, 64);
    /* the absorption's column blocks (16 chunks each) ending inside a block */
    check_attention_projections(WEIGHT_F16, 2, 48, 16, 96);
    check_attention_projections(WEIGHT_F32, 2, 20, 8, 72);
    check_rmsnorm_add_allreduce();
    check_rmsnorm_hostile(7168);
    check_rmsnorm_hostile(1536);
    check_rmsnorm_hostile(512);
    check_kv_rope_cache(0, 1, 1.0f, KV_CACHE_FP16);
    check_kv_rope_cache(4097, 1, 1.0f, KV_CACHE_FP16);
    check_kv_rope_cache(131071, 1, 1.0f, KV_CACHE_FP16);
    check_kv_rope_cache(100, 8, 1.0f, KV_CACHE_FP16);
    check_kv_rope_cache(100, 8, 1e5f, KV_CACHE_FP16);
    check_kv_rope_cache(262136, 8, 1.0f, KV_CACHE_FP16);
    check_rope_angles(0, 8);
    check_rope_angles(65531, 8);
    check_rope_angles(262136, 8);
    check_route(384, 8, 1, 1, 1, 1, 0);
    check_route(16, 4, 4, 2, 1, 1, 0);
    check_route(64, 6, 8, 3, 0, 1, 0);
    check_route(384, 8, 1, 1, 1, 8, 0);
    check_route(384, 8, 1, 1, 1, 8, 1);
    check_route(64, 6, 8, 3, 1, 8, 1);
    check_moe(16, 8, 7168, 256, 1, 1);
    check_moe(8, 2, 192, 64, 0, 1);
    check_moe(16, 8, 7168, 256, 1, 5);
    check_moe(40, 6, 512, 64, 0, 8);
    check_moe(3, 3, 512, 64, 0, 12); /* 12 slots per expert: two passes of the grouped kernels */
    check_attention_all();
    return check_finish();
}
