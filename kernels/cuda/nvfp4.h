/* nvfp4 (CUDA): dequantization of NVFP4 weight rows in device memory into float, with the same
 * arithmetic as the CPU decoder (kernels/nvfp4_math.h), so the two can be compared bit-exactly. */
#ifndef KIMI_KERNELS_CUDA_NVFP4_H
#define KIMI_KERNELS_CUDA_NVFP4_H

#include "kernels/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows [row_begin, row_end) of the NVFP4 view `w` (w->data and w->scale in device memory, the
 * struct itself on the host) -> out (device) [row_end - row_begin][w->cols] float, enqueued on
 * `stream` (a cudaStream_t; NULL for the default stream). Returns 0 or a cudaError_t code;
 * cudaErrorInvalidValue when w is not NVFP4 or the row range is outside the view. */
int nvfp4_dequantize_rows_cuda(const weight_matrix *w, int row_begin, int row_end, float *out, void *stream);

#ifdef __cplusplus
}
#endif

#endif
