/* numeric: decoders (and the fp16 encoder) of the number formats in the checkpoint and the KV
 * cache, plus row/vector dequantization of the weight views in kernels/tensor.h. */
#ifndef KIMI_KERNELS_CPU_NUMERIC_H
#define KIMI_KERNELS_CPU_NUMERIC_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/tensor.h"

/* E2M1 nibble (bit 3 sign): {0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, ..., -6}. */
float e2m1_to_float(uint8_t nibble);
/* E4M3fn: bias 7, subnormals at exponent 0, 0x7F/0xFF NaN, no infinities, max 448. */
float e4m3_to_float(uint8_t code);
float bf16_to_float(uint16_t bits);
/* IEEE binary16 with subnormals, infinities and NaN (payload kept). */
float f16_to_float(uint16_t bits);
/* IEEE binary16, round to nearest even; overflow gives infinity; subnormals; NaN stays NaN
 * (payload truncated, never turned into infinity). This is the fp16 KV-cache rounding. */
uint16_t float_to_f16(float value);

/* One NVFP4 row of k elements (k a multiple of 16): packed [k/2] (element 2j in the low nibble
 * of byte j), scales [k/16] E4M3, global scale_2 -> out [k], each (e2m1 * e4m3) * scale_2. */
void nvfp4_decode_row(const uint8_t *packed, const uint8_t *scales, float scale_2, int k, float *out);

/* Row `row` (0 <= row < w->rows) of any weight_matrix -> out [w->cols] as float. */
void weight_matrix_decode_row(const weight_matrix *w, int row, float *out);
/* A weight_vector (BF16, F16 or F32) -> out [v->n]. */
void weight_vector_decode(const weight_vector *v, float *out);

/* Bytes per element of a dtype (0 for DTYPE_COUNT). */
size_t dtype_size(dtype type);
/* The safetensors spelling ("BF16", "F8_E4M3", ...), or NULL for DTYPE_COUNT. */
const char *dtype_name(dtype type);
/* The dtype for a safetensors spelling; returns 0 and fills *type, or -1 if unknown. */
int dtype_from_name(const char *name, dtype *type);

#endif
