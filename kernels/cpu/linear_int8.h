/* linear_int8: y = W x for NVFP4 W with the activations x rounded to int8, the CPU backend's
 * fast mode (--cpu-activations int8). The NVFP4 product is bound by the instructions that turn
 * codes into floats (~4 vector operations per 16 weights in linear.c); with int8 activations
 * two VNNI dot products (vpdpbusd) take 128 weights, ~1.2 operations per 16. It is a numeric
 * contract of its own, not the fp32 reference: each 16-column block of x (one NVFP4 block) is
 *   a_b = max|x_k| / 127,   q_k = round-to-even(x_k * (127 / max|x_k|))  in [-127, 127]
 * (a block of zeros: a_b = 0, q = 0; a block holding an infinity or a NaN: a_b = NaN, so the
 * rows it meets come out NaN), and row r's sum takes the codes as integers 2 * e2m1 in
 * [-12, 12]:
 *   y_r = (scale_2 / 2) * sum over blocks b of (e4m3(s_rb) * a_b) * sum_k (2 e2m1_rk) q_k
 * The integer sums are exact (groups of 4 columns, the lanes of vpdpbusd); the float part is
 * summed in a fixed order (linear_int8.c), so the AVX-512 VNNI kernel and the portable loops
 * give the same bits on every CPU, and a token gets the same bits alone or in a batch. Each
 * x_k is off by at most a_b / 2, so |y_r - exact| <= (scale_2 / 2) * sum_b |e4m3(s_rb)| *
 * (a_b / 2) * sum_k |2 e2m1_rk| plus float rounding (test_linear_int8 checks that bound).
 *
 * Other formats, and NVFP4 rows wider than LINEAR_INT8_COLS_MAX, take linear_rows (fp32). */
#ifndef KIMI_KERNELS_CPU_LINEAR_INT8_H
#define KIMI_KERNELS_CPU_LINEAR_INT8_H

#include <stddef.h>

#include "kernels/tensor.h"

enum { LINEAR_INT8_COLS_MAX = 32768 };

/* As linear_rows (kernels/cpu/linear.h): tokens t < n_tokens, rows [row_begin, row_end),
 * x: [n_tokens][x_stride] floats, y: [n_tokens][y_stride] floats. */
void linear_rows_int8(const weight_matrix *w, const float *x, size_t x_stride, int n_tokens, float *y,
                      size_t y_stride, int row_begin, int row_end);

/* 1 when this CPU runs the AVX-512 VNNI + VBMI kernel (else the portable loops, same bits);
 * linear_use_simd(LINEAR_SIMD_NONE) also turns it off, for tests that compare the two. */
int linear_int8_simd(void);

#endif
