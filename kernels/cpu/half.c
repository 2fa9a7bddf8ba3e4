/* half: fp16 <-> float rows. Decoding is branch-free so that it vectorises: the 15 magnitude
 * bits shifted into a float's exponent/mantissa and multiplied by 2^112 give every finite
 * half exactly (subnormals included); exponent 31 is patched to infinity/NaN by a select. */
#include "kernels/cpu/half.h"

#include <string.h>

#include "kernels/cpu/numeric.h"
#include "kernels/half_math.h"

void f16_row_to_float(const uint16_t *in, size_t n, float *out)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t half = in[i];
        uint32_t sign = (half & 0x8000u) << 16;
        uint32_t magnitude = (half & 0x7FFFu) << 13;
        float scaled;
        memcpy(&scaled, &magnitude, sizeof scaled);
        scaled *= 0x1p112f;
        uint32_t bits;
        memcpy(&bits, &scaled, sizeof bits);
        bits = (half & 0x7C00u) == 0x7C00u ? magnitude | 0x70000000u : bits;
        bits |= sign;
        memcpy(&out[i], &bits, sizeof bits);
    }
}

size_t float_row_to_f16_saturate(const float *in, size_t n, uint16_t *out)
{
    size_t clamped = 0;
    for (size_t i = 0; i < n; i++) {
        clamped += (size_t)half_math_overflows(in[i]);
        out[i] = half_from_float_saturate(in[i]);
    }
    return clamped;
}
