/* nvfp4_math: decoders of the NVFP4 element formats (E2M1 values, E4M3 block scales), written
 * once for both the CPU kernels (C) and the CUDA kernels (__host__ __device__), so the two
 * backends dequantize with exactly the same arithmetic. */
#ifndef KIMI_KERNELS_NVFP4_MATH_H
#define KIMI_KERNELS_NVFP4_MATH_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KIMI_HOST_DEVICE __host__ __device__
#else
#define KIMI_HOST_DEVICE
#endif

static inline KIMI_HOST_DEVICE float nvfp4_bits_to_float(uint32_t bits)
{
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* E2M1 code (bit 3 sign) -> {0, .5, 1, 1.5, 2, 3, 4, 6} with sign. The eight magnitudes times
 * two are {0,1,2,3,4,6,8,12}, packed one per nibble into a constant, so no table is needed on
 * either side. */
static inline KIMI_HOST_DEVICE float nvfp4_e2m1_to_float(uint8_t nibble)
{
    const uint32_t twice_magnitudes = 0xC8643210u;
    float magnitude = (float)((twice_magnitudes >> (4 * (nibble & 7))) & 15) * 0.5f;
    return (nibble & 8) ? -magnitude : magnitude;
}

/* E4M3 "fn" (bias 7, subnormals at exponent 0, 0x7F/0xFF NaN, no infinities, max 448). */
static inline KIMI_HOST_DEVICE float nvfp4_e4m3_to_float(uint8_t code)
{
    uint32_t sign = (uint32_t)(code & 0x80) << 24;
    uint32_t exponent = (code >> 3) & 15;
    uint32_t mantissa = code & 7;
    if ((code & 0x7F) == 0x7F)
        return nvfp4_bits_to_float(sign | 0x7FC00000u);
    if (exponent == 0) {
        float magnitude = (float)mantissa * 0.001953125f; /* mantissa * 2^-9, exact */
        return sign ? -magnitude : magnitude;
    }
    return nvfp4_bits_to_float(sign | ((exponent - 7 + 127) << 23) | (mantissa << 20));
}

/* One dequantized weight: (E2M1 * E4M3) is exact in float (at most 5 significant bits), so
 * the multiplication by scale_2 is the only rounding. Every backend must use this order. */
static inline KIMI_HOST_DEVICE float nvfp4_dequantize(uint8_t nibble, float block_scale, float scale_2)
{
    return (nvfp4_e2m1_to_float(nibble) * block_scale) * scale_2;
}

#endif
