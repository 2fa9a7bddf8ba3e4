/* linear: y = W x for a batch of tokens over a range of W's output rows (so callers can split
 * rows among threads), for every weight format; NVFP4 is decoded block by block inside the
 * dot product (W4A16), never into a dequantized copy of the weight. */
#ifndef KIMI_KERNELS_CPU_LINEAR_H
#define KIMI_KERNELS_CPU_LINEAR_H

#include <stddef.h>

#include "kernels/tensor.h"

/* For tokens t < n_tokens and rows row_begin <= r < row_end of w:
 *   y[t * y_stride + r] = sum_k W[r][k] * x[t * x_stride + k]      (k < w->cols)
 * x: [n_tokens][x_stride] floats, y: [n_tokens][y_stride] floats. Each weight block is
 * decoded once per tile of up to LINEAR_TOKEN_TILE tokens. */
enum { LINEAR_TOKEN_TILE = 8 };
void linear_rows(const weight_matrix *w, const float *x, size_t x_stride, int n_tokens,
                 float *y, size_t y_stride, int row_begin, int row_end);

/* Turn the x86 AVX-512 NVFP4 path off (0) or back on (1, the default where the CPU has it);
 * for tests and benchmarks that compare it with the portable loop. */
void linear_use_simd(int enabled);

/* y[k] += sum_r W[r][k] * x[r] for all rows r and columns k of w: the transposed product the
 * absorbed attention needs (q_nope through W_UK). x: [w->rows], y: [w->cols]. */
void linear_transposed_accumulate(const weight_matrix *w, const float *x, float *y);

/* A view of rows [begin, end) of w, addressed in place. */
weight_matrix linear_row_view(const weight_matrix *w, int begin, int end);

#endif
