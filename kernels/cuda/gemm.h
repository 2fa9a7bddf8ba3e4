/* gemm (CUDA): the BF16 tensor-core GEMMs of a prefill step (cuBLASLt, fp32 accumulation and
 * output) and the conversions that feed them: float activations to BF16 rows, and packed weight
 * rows (engine/device_plan.h layout) dequantised to BF16 tiles. Launchers enqueue on `stream`,
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

/* out[r][c] = bf16(x[r][c]) (nearest even), r < rows, c < cols; x rows x_ld floats apart, out
 * rows out_ld elements apart. */
int bf16_from_float_cuda(const float *x, int rows, int cols, size_t x_ld, uint16_t *out, size_t out_ld,
                         void *stream);

/* out[r][c] = bf16(W[row_begin + r][c]) for r < rows, c < w->cols, the weight exactly as the
 * CPU decodes it ((e2m1 * e4m3) * scale_2 for NVFP4) rounded once to nearest even; out rows
 * out_ld elements apart. */
int bf16_dequantise_cuda(const weight_matrix *w, int row_begin, int rows, uint16_t *out, size_t out_ld,
                         void *stream);

/* act[i] = silu(gate[i]) * up[i] for i < n (kernels/forward_math.h; act may alias gate): between
 * the gate/up GEMMs of an MLP and its down GEMM. */
int silu_gate_cuda(const float *gate, const float *up, float *act, size_t n, void *stream);

/* A cuBLASLt handle (one per backend; NULL until created). */
typedef struct {
    void *handle;
} gemm_context;
int gemm_context_create(gemm_context *ctx);
void gemm_context_destroy(gemm_context *ctx);

/* c[t][r] = sum_{i < k} a[r][i] * b[t][i] for r < n, t < m: a [n][lda] and b [m][ldb] BF16,
 * c [m][ldc] float (row r of a weight, token t of the activations). scratch: the cuBLASLt
 * workspace of scratch_bytes, 256-byte aligned. */
int gemm_bf16_cuda(const gemm_context *ctx, int m, int n, int k, const uint16_t *a, size_t lda, const uint16_t *b,
                   size_t ldb, float *c, size_t ldc, void *scratch, size_t scratch_bytes, void *stream);

#ifdef __cplusplus
}
#endif

#endif
