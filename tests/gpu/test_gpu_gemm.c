/* GPU test: the prefill GEMM path of kernels/cuda/gemm.h against the CPU on the same inputs.
 *   activations split into BF16 hi + lo: bit for bit the CPU's bf16_from_float;
 *   NVFP4 tiles (packed layout, tiles starting mid-matrix): e2m1 * e4m3 bit for bit, and
 *   times scale_2 bit for bit the CPU decoder's value;
 *   the cuBLASLt GEMM against a float64 sum of the same BF16 operands:
 *   |gpu - ref| <= 1e-5 * sum_k |a_k b_k| (+1e-30) per output (fp32 accumulation order), with
 *   alpha, and beta = 1 adding onto c;
 *   the whole projection as the backend runs it (plan, split, dequantise, two GEMMs per tile)
 *   against the CPU's fp32 linear: |gpu - cpu| <= 2e-5 * sum_k |w_k x_k| (+1e-30), the GEMV's
 *   own tolerance (test_gpu_kernels.c): the only rounding beyond fp32 sums is the lo part's,
 *   2^-17 of each activation;
 *   silu(gate) * up between an MLP's GEMMs: relative 2e-6 of the CPU's (expf may differ by ulps);
 *   the gather and scatter of an expert's token rows: exact copies.
 * Exits 77 (skipped) without a device. */
#include <math.h>
#include <string.h>

#include "engine/backend/device_plan.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cuda/gemm.h"
#include "kernels/forward_math.h"
#include "kernels/half_math.h"
#include "tests/gpu/gpu_test.h"

/* A random weight view [rows][cols] on the host and its packed copy on the device. */
typedef struct {
    weight_matrix host, dev;
    uint8_t *data, *scale, *dev_bytes;
} test_weight;

static void weight_make(test_weight *m, weight_format format, int rows, int cols)
{
    memset(m, 0, sizeof *m);
    size_t elem = format == WEIGHT_F32 ? 4 : 2;
    size_t row_bytes = format == WEIGHT_NVFP4 ? (size_t)cols / 2 : (size_t)cols * elem;
    m->data = malloc((size_t)rows * row_bytes);
    for (size_t i = 0; i < (size_t)rows * row_bytes; i++)
        m->data[i] = (uint8_t)gpu_test_next();
    if (format != WEIGHT_NVFP4)
        for (size_t i = 0; i < (size_t)rows * cols; i++) {
            float v = gpu_test_uniform() * 0.1f;
            if (format == WEIGHT_F32) {
                memcpy(m->data + 4 * i, &v, 4);
            } else {
                uint16_t h = format == WEIGHT_BF16 ? bf16_from_float(v) : float_to_f16(v);
                memcpy(m->data + 2 * i, &h, 2);
            }
        }
    else {
        m->scale = malloc((size_t)rows * cols / 16);
        for (size_t i = 0; i < (size_t)rows * cols / 16; i++)
            m->scale[i] = (uint8_t)(0x28 + gpu_test_next() % 32);
    }
    m->host = (weight_matrix){format, rows, cols, m->data, row_bytes, m->scale, (size_t)cols / 16,
                              format == WEIGHT_NVFP4 ? 0.000372314453125f : 1.0f};
    packed_layout l;
    packed_layout_of(&m->host, &l);
    uint8_t *packed = malloc(l.bytes);
    packed_rows_write(&m->host, &l, 0, rows, packed, packed + l.data_bytes);
    m->dev_bytes = gpu_test_upload(packed, l.bytes);
    m->dev = packed_view(&m->host, &l, m->dev_bytes, m->dev_bytes + l.data_bytes);
    free(packed);
}

static void weight_free(test_weight *m)
{
    cudaFree(m->dev_bytes);
    free(m->data);
    free(m->scale);
}

static float *random_floats(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = gpu_test_uniform() * scale;
    return x;
}

static void check_split(int rows, int cols, size_t x_ld, size_t out_ld)
{
    float *x = random_floats((size_t)rows * x_ld, 3.0f);
    x[0] = 1.0f + 1.0f / 256;   /* a tie */
    float *dx = gpu_test_upload(x, (size_t)rows * x_ld * sizeof *x);
    uint16_t *dout = NULL, *got = malloc((size_t)2 * rows * out_ld * 2);
    CUDA_CHECK(cudaMalloc((void **)&dout, (size_t)2 * rows * out_ld * 2));
    CHECK_INT(bf16_split_cuda(dx, rows, cols, x_ld, dout, dout + (size_t)rows * out_ld, out_ld, NULL), 0);
    gpu_test_download(got, dout, (size_t)2 * rows * out_ld * 2);
    int bad = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            float v = x[(size_t)r * x_ld + c];
            uint16_t hi = bf16_from_float(v), lo = bf16_from_float(v - bf16_bits_to_float(hi));
            bad += got[(size_t)r * out_ld + c] != hi || got[(size_t)(rows + r) * out_ld + c] != lo;
        }
    CHECK_MSG(bad == 0, "bf16 split [%d x %d]: %d values differ from the CPU's rounding", rows, cols, bad);
    cudaFree(dx);
    cudaFree(dout);
    free(x);
    free(got);
}

static void check_dequantise(int rows, int cols, int row_begin, int count)
{
    test_weight m;
    weight_make(&m, WEIGHT_NVFP4, rows, cols);
    size_t ld = ((size_t)cols + 7) / 8 * 8;
    uint16_t *dout = NULL, *got = malloc((size_t)count * ld * 2);
    float *row = malloc((size_t)cols * sizeof *row);
    CUDA_CHECK(cudaMalloc((void **)&dout, (size_t)count * ld * 2));
    CHECK_INT(bf16_dequantise_cuda(&m.dev, row_begin, count, dout, ld, NULL), 0);
    gpu_test_download(got, dout, (size_t)count * ld * 2);
    int bad = 0;
    for (int r = 0; r < count; r++) {
        weight_matrix_decode_row(&m.host, row_begin + r, row);
        for (int c = 0; c < cols; c++)
            bad += bf16_bits_to_float(got[(size_t)r * ld + c]) * m.host.scale_2 != row[c];
    }
    CHECK_MSG(bad == 0, "dequantise [%d x %d] rows %d+%d: %d values differ", rows, cols, row_begin, count, bad);
    cudaFree(dout);
    free(got);
    free(row);
    weight_free(&m);
}

static void check_dequantise_rejects(weight_format format)
{
    test_weight m;
    weight_make(&m, format, 8, 32);
    uint16_t *dout = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dout, 8 * 32 * 2));
    CHECK_INT(bf16_dequantise_cuda(&m.dev, 0, 8, dout, 32, NULL), (int)cudaErrorInvalidValue);
    cudaFree(dout);
    weight_free(&m);
}

static void check_silu_gate(size_t n)
{
    float *g = random_floats(n, 12.0f), *u = random_floats(n, 2.0f), *got = malloc(n * sizeof *got);
    float *dg = gpu_test_upload(g, n * sizeof *g), *du = gpu_test_upload(u, n * sizeof *u);
    CHECK_INT(silu_gate_cuda(dg, du, dg, n, NULL), 0);     /* in place, as the backend runs it */
    gpu_test_download(got, dg, n * sizeof *got);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = silu_gate_element(g[i], u[i]);
        bad += !(fabsf(got[i] - want) <= 2e-6f * fabsf(want) + 1e-30f);
    }
    CHECK_MSG(bad == 0, "silu gate of %zu: %zu values off", n, bad);
    cudaFree(dg);
    cudaFree(du);
    free(g);
    free(u);
    free(got);
}

/* The GEMM alone on BF16 operands, against a float64 sum of the same operands. */
static void check_gemm(const gemm_context *ctx, void *scratch, int m, int n, int k)
{
    size_t lda = ((size_t)k + 7) / 8 * 8 + 8, ldb = ((size_t)k + 7) / 8 * 8, ldc = (size_t)n + 3;
    uint16_t *a = malloc((size_t)n * lda * 2), *b = malloc((size_t)m * ldb * 2);
    for (size_t i = 0; i < (size_t)n * lda; i++)
        a[i] = bf16_from_float(gpu_test_uniform() * 0.1f);
    for (size_t i = 0; i < (size_t)m * ldb; i++)
        b[i] = bf16_from_float(gpu_test_uniform() * 2.0f);
    uint16_t *da = gpu_test_upload(a, (size_t)n * lda * 2), *db = gpu_test_upload(b, (size_t)m * ldb * 2);
    float *dc = NULL, *c = malloc((size_t)m * ldc * sizeof *c);
    CUDA_CHECK(cudaMalloc((void **)&dc, (size_t)m * ldc * sizeof *c));
    CUDA_CHECK(cudaMemset(dc, 0xFF, (size_t)m * ldc * sizeof *c));
    CHECK_INT(gemm_bf16_cuda(ctx, m, n, k, 0.5f, da, lda, db, ldb, 0.0f, dc, ldc, scratch, DEVICE_GEMM_SCRATCH_BYTES,
                             NULL), 0);
    gpu_test_download(c, dc, (size_t)m * ldc * sizeof *c);
    int bad = 0, padding_kept = 1;
    for (int t = 0; t < m; t++) {
        for (int r = 0; r < n; r++) {
            double sum = 0, mag = 0;
            for (int i = 0; i < k; i++) {
                double p = (double)bf16_bits_to_float(a[(size_t)r * lda + i]) * bf16_bits_to_float(b[(size_t)t * ldb + i]);
                sum += p;
                mag += fabs(p);
            }
            bad += !(fabs(c[(size_t)t * ldc + r] - 0.5 * sum) <= 0.5e-5 * mag + 1e-30);
        }
        for (size_t r = (size_t)n; r < ldc; r++) {
            uint32_t bits;
            memcpy(&bits, &c[(size_t)t * ldc + r], 4);
            padding_kept &= bits == 0xFFFFFFFFu;
        }
    }
    CHECK_MSG(bad == 0, "gemm m %d n %d k %d: %d outputs off", m, n, k, bad);
    CHECK_MSG(padding_kept, "gemm m %d n %d k %d: wrote past n in a row of c", m, n, k);
    /* beta = 1 adds onto c (the lo part's GEMM), through the shape the first call planned */
    float *twice = malloc((size_t)m * ldc * sizeof *twice);
    CHECK_INT(gemm_bf16_cuda(ctx, m, n, k, 0.5f, da, lda, db, ldb, 1.0f, dc, ldc, scratch, DEVICE_GEMM_SCRATCH_BYTES,
                             NULL), 0);
    gpu_test_download(twice, dc, (size_t)m * ldc * sizeof *twice);
    int doubled = 0;
    for (int t = 0; t < m; t++)
        for (int r = 0; r < n; r++)
            doubled += twice[(size_t)t * ldc + r] == 2.0f * c[(size_t)t * ldc + r];
    CHECK_MSG(doubled == m * n, "gemm m %d n %d k %d beta 1: %d of %d outputs doubled", m, n, k, doubled, m * n);
    free(twice);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    free(a);
    free(b);
    free(c);
}

/* The backend's projection as it runs it (engine/backend/backend_cuda.c project()): plan, convert,
 * dequantise tile by tile, GEMM into y; against the CPU's fp32 linear. */
static void check_projection(const gemm_context *ctx, void *scratch, weight_format format, int rows, int cols,
                             int tokens, size_t tile_elems)
{
    test_weight m;
    weight_make(&m, format, rows, cols);
    device_workspace ws = {.gemm_x_ld = ((size_t)cols + 7) / 8 * 8, .gemm_w_elems = tile_elems};
    device_gemm_plan p;
    CHECK_INT(device_gemm_plan_make(&m.dev, tokens, (size_t)rows, &ws, &p), 0);
    float *x = random_floats((size_t)tokens * cols, 1.0f);
    float *dx = gpu_test_upload(x, (size_t)tokens * cols * sizeof *x), *dy = NULL;
    uint16_t *hi = NULL, *tile = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dy, (size_t)tokens * rows * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&hi, (size_t)2 * tokens * p.ldb * 2));
    CUDA_CHECK(cudaMalloc((void **)&tile, tile_elems * 2));
    uint16_t *lo = hi + (size_t)tokens * p.ldb;
    float alpha = format == WEIGHT_NVFP4 ? m.dev.scale_2 : 1.0f;
    CHECK_INT(bf16_split_cuda(dx, tokens, p.k, (size_t)cols, hi, lo, p.ldb, NULL), 0);
    for (int first = 0; first < p.n; first += p.tile_rows) {
        int count = p.n - first < p.tile_rows ? p.n - first : p.tile_rows;
        const uint16_t *a = (const uint16_t *)(m.dev.data + (size_t)first * m.dev.data_stride);
        if (p.dequantise) {
            CHECK_INT(bf16_dequantise_cuda(&m.dev, first, count, tile, p.lda, NULL), 0);
            a = tile;
        }
        for (int part = 0; part < 2; part++)
            CHECK_INT(gemm_bf16_cuda(ctx, tokens, count, p.k, alpha, a, p.lda, part ? lo : hi, p.ldb,
                                     part ? 1.0f : 0.0f, dy + first, p.ldc, scratch, DEVICE_GEMM_SCRATCH_BYTES, NULL),
                      0);
    }
    float *got = malloc((size_t)tokens * rows * sizeof *got), *want = malloc((size_t)tokens * rows * sizeof *want);
    float *row = malloc((size_t)cols * sizeof *row);
    gpu_test_download(got, dy, (size_t)tokens * rows * sizeof *got);
    linear_rows(&m.host, x, (size_t)cols, tokens, want, (size_t)rows, 0, rows);
    int bad = 0;
    for (int r = 0; r < rows; r++) {
        weight_matrix_decode_row(&m.host, r, row);
        for (int t = 0; t < tokens; t++) {
            double mag = 0;
            for (int i = 0; i < cols; i++)
                mag += fabs((double)row[i] * x[(size_t)t * cols + i]);
            size_t at = (size_t)t * rows + r;
            bad += !(fabs(got[at] - want[at]) <= 2e-5 * mag + 1e-30);
        }
    }
    CHECK_MSG(bad == 0, "projection format %d [%d x %d] %d tokens (tiles of %d rows): %d outputs off", (int)format,
              rows, cols, tokens, p.tile_rows, bad);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(hi);
    cudaFree(tile);
    free(x);
    free(got);
    free(want);
    free(row);
    weight_free(&m);
}

/* The rows of an expert's tokens: gathered (padded rows repeat the last index) and scattered back,
 * both exact copies; rows of y no index names stay untouched. */
static void check_gather_scatter(void)
{
    enum { TOKENS = 10, PER = 4, COLS = 300, ROWS = 5, SLOTS = TOKENS * PER };
    int index[3] = {13, 2, 39};     /* slots: tokens 3, 0, 9 */
    float *x = random_floats((size_t)TOKENS * (COLS + 4), 1.0f), *y = random_floats((size_t)SLOTS * COLS, 1.0f);
    float *got = malloc((size_t)ROWS * COLS * sizeof(float)), *back = malloc((size_t)SLOTS * COLS * sizeof(float));
    float *dx = gpu_test_upload(x, (size_t)TOKENS * (COLS + 4) * sizeof(float));
    float *dy = gpu_test_upload(y, (size_t)SLOTS * COLS * sizeof(float)), *drows = NULL;
    int *dindex = gpu_test_upload(index, sizeof index);
    CUDA_CHECK(cudaMalloc((void **)&drows, (size_t)ROWS * COLS * sizeof(float)));
    CHECK_INT(rows_gather_cuda(dx, COLS + 4, dindex, 3, PER, ROWS, COLS, drows, NULL), 0);
    gpu_test_download(got, drows, (size_t)ROWS * COLS * sizeof(float));
    int bad = 0;
    for (int i = 0; i < ROWS; i++)
        bad += memcmp(got + (size_t)i * COLS, x + (size_t)(index[i < 3 ? i : 2] / PER) * (COLS + 4),
                      COLS * sizeof(float)) != 0;
    CHECK_MSG(bad == 0, "rows_gather: %d rows differ", bad);
    CHECK_INT(rows_scatter_cuda(drows, 3, COLS, dindex, dy, COLS, NULL), 0);
    gpu_test_download(back, dy, (size_t)SLOTS * COLS * sizeof(float));
    bad = 0;
    for (int s = 0; s < SLOTS; s++) {
        const float *want = y + (size_t)s * COLS;
        for (int i = 0; i < 3; i++)
            if (index[i] == s)
                want = got + (size_t)i * COLS;
        bad += memcmp(back + (size_t)s * COLS, want, COLS * sizeof(float)) != 0;
    }
    CHECK_MSG(bad == 0, "rows_scatter: %d rows differ", bad);
    CHECK_INT(rows_gather_cuda(dx, COLS, dindex, 0, PER, ROWS, COLS, drows, NULL), (int)cudaErrorInvalidValue);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(drows);
    cudaFree(dindex);
    free(x);
    free(y);
    free(got);
    free(back);
}

int main(void)
{
    gpu_test_require_device();
    check_split(17, 7168, 7168, 7168);
    check_split(64, 100, 130, 104);
    check_dequantise(300, 7168, 0, 300);
    check_dequantise(64, 48, 13, 40);
    check_dequantise_rejects(WEIGHT_BF16);
    check_dequantise_rejects(WEIGHT_F32);
    check_silu_gate((size_t)64 * 2304 + 5);
    check_gather_scatter();

    gemm_context ctx = {0};
    CHECK_INT(gemm_context_create(&ctx), 0);
    void *scratch = NULL;
    CUDA_CHECK(cudaMalloc(&scratch, DEVICE_GEMM_SCRATCH_BYTES));
    check_gemm(&ctx, scratch, 64, 1536, 7168);   /* q_a */
    check_gemm(&ctx, scratch, 16, 576, 7168);    /* kv_a, the shortest GEMM step */
    check_gemm(&ctx, scratch, 17, 37, 48);       /* odd shapes and padded leading dimensions */
    check_projection(&ctx, scratch, WEIGHT_NVFP4, 200, 64, 16, (size_t)70 * 64);    /* tiles of 64: y 256-B aligned */
    check_projection(&ctx, scratch, WEIGHT_NVFP4, 50, 64, 16, (size_t)7 * 64);      /* tiles of 7: y 4-B aligned */
    check_projection(&ctx, scratch, WEIGHT_BF16, 1536, 7168, 64, 1);     /* read in place */
    check_projection(&ctx, scratch, WEIGHT_BF16, 7168, 1024, 33, 1);     /* o_proj of one rank */
    check_projection(&ctx, scratch, WEIGHT_NVFP4, 2048, 7168, 64, (size_t)300 * 7168);   /* 8 tiles of 256 rows */
    cudaFree(scratch);
    gemm_context_destroy(&ctx);
    return check_finish();
}
