/* nvfp4_encode: ModelOpt-style NVFP4 quantization of float weights (the inverse of the decoders
 * in kernels/cpu/numeric.h), used by the checkpoint generator kimi-mkmodel. */
#ifndef KIMI_TESTS_BENCH_NVFP4_ENCODE_H
#define KIMI_TESTS_BENCH_NVFP4_ENCODE_H

#include <stddef.h>
#include <stdint.h>

/* Nearest E4M3fn code, ties to the even code; saturates at +-448 (0x7E / 0xFE), NaN -> 0x7F. */
uint8_t e4m3_from_float(float value);
/* Nearest E2M1 code (bit 3 sign), ties to the even code; saturates at +-6. */
uint8_t e2m1_from_float(float value);
/* Round to bfloat16, nearest even (NaN stays NaN). */
uint16_t bf16_from_float(float value);

/* The tensor's global scale: amax / (6 * 448) (ModelOpt's weight_scale_2); 1 for an all-zero tensor. */
float nvfp4_global_scale(const float *values, size_t count);

/* One row of k weights (k a multiple of 16) -> packed [k/2] (element 2j in the low nibble) and
 * scales [k/16]: block scale = E4M3(amax_block / 6 / scale_2) (1.0 for an all-zero block), then
 * each element = E2M1(value / (block scale * scale_2)). */
void nvfp4_quantize_row(const float *row, int k, float scale_2, uint8_t *packed, uint8_t *scales);

#endif
