/* half: fp16 rows (the KV cache) to and from float, a vectorisable loop with the exact results
 * of numeric's scalar f16_to_float / float_to_f16, except that the cache saturates. */
#ifndef KIMI_KERNELS_CPU_HALF_H
#define KIMI_KERNELS_CPU_HALF_H

#include <stddef.h>
#include <stdint.h>

void f16_row_to_float(const uint16_t *in, size_t n, float *out);   /* in [n] -> out [n] */
/* in [n] -> out [n], rounded to nearest even, a finite value beyond the fp16 range saturated to
 * +-65504 (kernels/half_math.h half_from_float_saturate); returns how many were saturated. */
size_t float_row_to_f16_saturate(const float *in, size_t n, uint16_t *out);

#endif
