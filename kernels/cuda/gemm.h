/* gemm (CUDA): the BF16 tensor-core GEMMs of a prefill step (cuBLASLt, fp32 accumulation and
 * output) and the conversions that feed them, arranged so the result is the fp32 product the
 * CPU computes: weights are exact in BF16 (BF16 rows as stored; NVFP4 as e2m1 * e4m3, which
 * has at most 6 significant bits, with scale_2 applied as the GEMM's alpha), and activations
 * are split into hi + lo BF16 parts (16 significant bits, relative error <= 2^-16) multiplied
 * in two GEMMs into one fp32 sum; BF16 products are exact in fp32. Launchers enqueue on `stream`,
 * allocate nothing and return 0 or a cudaError_t code (a cuBLASLt failure reads as
 * cudaErrorNotSupported or, out of memory, cudaErrorMemoryAllocation). */
#ifndef KIMI_KERNELS_CUDA_GEMM_H
#define KIMI_KERNELS_CUDA_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* hi[r][c] = bf16(x[r][c]) and lo[r][c] = bf16(x[r][c] - hi[r][c]) (nearest even), r < rows,
 * c < cols; x rows x_ld floats apart, hi and lo rows out_ld elements apart. */
int bf16_split_cuda(const float *x, int rows, int cols, size_t x_ld, uint16_t *hi, uint16_t *lo, size_t out_ld,
                    void *stream);

/* out[r][c] = e2m1 * e4m3 of NVFP4 weight W[row_begin + r][c] (exact in BF16; W = that times
 * w->scale_2), r < rows, c < w->cols; out rows out_ld elements apart. */
int bf16_dequantise_cuda(const weight_matrix *w, int row_begin, int rows, uint16_t *out, size_t out_ld,
                         void *stream);

/* act[i] = silu(gate[i]) * up[i] for i < n (kernels/forward_math.h; act may alias gate): between
 * the gate/up GEMMs of an MLP and its down GEMM. */
int silu_gate_cuda(const float *gate, const float *up, float *act, size_t n, void *stream);

/* The rows of one expert's tokens in and out of its GEMMs: out[i][c] = x[index[min(i, indices -
 * 1)] / per_input][c] (i < rows, c < cols: rows past the indices repeat the last, padding the
 * GEMMs to a common shape; x rows x_ld floats apart, out rows cols apart), and y[index[i]][c] =
 * rows_in[i][c] (i < rows; y rows y_ld apart). index: device memory (the expert's slice of the
 * grouped slot order: slot s is token s / top_k's choice). */
int rows_gather_cuda(const float *x, size_t x_ld, const int *index, int indices, int per_input, int rows, int cols,
                     float *out, void *stream);
int rows_scatter_cuda(const float *rows_in, int rows, int cols, const int *index, float *y, size_t y_ld,
                      void *stream);

/* A cuBLASLt handle and the GEMM shapes it has planned (descriptors and algorithm, asked of
 * the heuristic once per shape); one per backend, NULLs until created. */
typedef struct {
    void *handle;
    void *shapes;
} gemm_context;
int gemm_context_create(gemm_context *ctx);
void gemm_context_destroy(gemm_context *ctx);

/* c[t][r] = alpha * sum_{i < k} a[r][i] * b[t][i] + beta * c[t][r] for r < n, t < m: a [n][lda]
 * and b [m][ldb] BF16, c [m][ldc] float (row r of a weight, token t of the activations). scratch: the cuBLASLt
 * workspace of scratch_bytes, 256-byte aligned. */
int gemm_bf16_cuda(const gemm_context *ctx, int m, int n, int k, float alpha, const uint16_t *a, size_t lda,
                   const uint16_t *b, size_t ldb, float beta, float *c, size_t ldc, void *scratch, size_t scratch_bytes,
                   void *stream);

#ifdef __cplusplus
}
#endif

#endif
