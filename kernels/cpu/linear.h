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

/* linear_rows' signature, so a caller picks it or linear_rows_int8 (linear_int8.h) once. */
typedef void (*linear_product)(const weight_matrix *w, const float *x, size_t x_stride, int n_tokens, float *y,
                               size_t y_stride, int row_begin, int row_end);

/* The x86 SIMD kernels linear_rows may use, for tests and benchmarks that compare them:
 *   LINEAR_SIMD_NONE         the portable loops (the only ones off x86-64);
 *   LINEAR_SIMD_AVX512       AVX-512F/BW: NVFP4 decoded with vpermps, the same bits as the portable
 *                            loop (products and sums in the same order);
 *   LINEAR_SIMD_AVX512_VBMI  + VBMI: NVFP4 two blocks per decode with the block scales applied
 *                            once per pair (rows up to 8192 columns; wider ones by vpermb a block
 *                            at a time) and BF16, with fused multiply-adds and four accumulators
 *                            per token: the fastest, within float rounding of the others (a token
 *                            still gets the same bits alone or in a batch).
 * linear_use_simd(level) allows up to `level` (the default: LINEAR_SIMD_BEST) and returns the
 * level in effect, which is also capped by what this CPU has. Not thread-safe: call it while no
 * linear_rows runs. */
enum { LINEAR_SIMD_NONE, LINEAR_SIMD_AVX512, LINEAR_SIMD_AVX512_VBMI, LINEAR_SIMD_BEST = LINEAR_SIMD_AVX512_VBMI };
int linear_use_simd(int level);

/* The level in effect now (what linear_use_simd last returned): other kernels (mla_attention) take
 * their AVX-512 paths by it, so one switch turns every SIMD path off for a comparison. */
int linear_simd_level(void);

/* y[k] += sum_r W[r][k] * x[r] for all rows r and columns k of w: the transposed product the
 * absorbed attention needs (q_nope through W_UK). x: [w->rows], y: [w->cols]. */
void linear_transposed_accumulate(const weight_matrix *w, const float *x, float *y);

/* A view of rows [begin, end) of w, addressed in place. */
weight_matrix linear_row_view(const weight_matrix *w, int begin, int end);

#endif
