/* half_math: fp16 and bf16 conversions written once for the CPU kernels (C) and the CUDA
 * kernels (__host__ __device__), so the fp16 KV cache is rounded with the same arithmetic on
 * both backends (round to nearest even, subnormals, overflow to infinity or, for the cache,
 * saturated to +-65504; NaN kept NaN). */
#ifndef KIMI_KERNELS_HALF_MATH_H
#define KIMI_KERNELS_HALF_MATH_H

#include <stdint.h>
#include <string.h>

#include "kernels/nvfp4_math.h"

static inline KIMI_HOST_DEVICE uint32_t half_math_float_bits(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

/* Shift right by `shift` (1..31) rounding to nearest, ties to even. */
static inline KIMI_HOST_DEVICE uint32_t half_math_shift_round_even(uint32_t value, unsigned shift)
{
    uint32_t kept = value >> shift;
    uint32_t rest = value & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1)))
        kept++;
    return kept;
}

/* float -> IEEE binary16 bits. */
static inline KIMI_HOST_DEVICE uint16_t half_from_float(float value)
{
    uint32_t bits = half_math_float_bits(value);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
    uint32_t magnitude = bits & 0x7FFFFFFFu;
    uint32_t exponent = magnitude >> 23;
    uint32_t mantissa = magnitude & 0x7FFFFF;

    if (exponent == 255) {
        if (mantissa == 0)
            return sign | 0x7C00;
        uint16_t payload = (uint16_t)(mantissa >> 13);
        return sign | 0x7C00 | (payload ? payload : 0x200);
    }
    /* 65520 = 65504 + half an ulp: the tie goes to the even neighbour 2^16, i.e. infinity. */
    if (magnitude >= 0x477FF000u)
        return sign | 0x7C00;
    if (exponent >= 113) /* >= 2^-14: normal half; a carry out of the mantissa bumps the exponent */
        return sign | (uint16_t)half_math_shift_round_even(magnitude - (112u << 23), 13);
    if (exponent == 0) /* float subnormals are far below half an fp16 subnormal step */
        return sign;
    /* Subnormal half: count of 2^-24 steps = (mantissa | implicit bit) * 2^(exponent - 126). */
    unsigned shift = 126 - exponent;
    if (shift > 31)
        return sign;
    return sign | (uint16_t)half_math_shift_round_even(mantissa | 0x800000u, shift);
}

/* Whether a finite value rounds past the largest fp16 (65504), i.e. half_from_float gives
 * infinity for it. */
static inline KIMI_HOST_DEVICE int half_math_overflows(float value)
{
    return (half_math_float_bits(value) & 0x7FFFFFFFu) >= 0x477FF000u && value - value == 0.0f;
}

/* float -> fp16 bits for the KV cache: as half_from_float, but a finite value beyond the fp16
 * range saturates to +-65504 instead of becoming infinity (an infinite cache entry turns the
 * attention's online softmax into inf - inf = NaN for every later token); infinities and NaN
 * stay what they are (a non-finite activation, reported as such). */
static inline KIMI_HOST_DEVICE uint16_t half_from_float_saturate(float value)
{
    if (half_math_overflows(value))
        return (uint16_t)(((half_math_float_bits(value) >> 16) & 0x8000) | 0x7BFF);
    return half_from_float(value);
}

/* IEEE binary16 bits -> float (exact). */
static inline KIMI_HOST_DEVICE float half_to_float(uint16_t bits)
{
    uint32_t sign = (uint32_t)(bits & 0x8000) << 16;
    uint32_t exponent = (bits >> 10) & 31;
    uint32_t mantissa = bits & 0x3FF;
    if (exponent == 0) {
        float magnitude = (float)mantissa * 5.9604644775390625e-8f; /* 2^-24, exact */
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31)
        return nvfp4_bits_to_float(sign | 0x7F800000u | (mantissa << 13));
    return nvfp4_bits_to_float(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

static inline KIMI_HOST_DEVICE float bf16_bits_to_float(uint16_t bits)
{
    return nvfp4_bits_to_float((uint32_t)bits << 16);
}

/* float -> bf16 bits, rounded to nearest even (a NaN stays a quiet NaN). */
static inline KIMI_HOST_DEVICE uint16_t bf16_from_float(float value)
{
    uint32_t bits = half_math_float_bits(value);
    if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x7FFFFFu))
        return (uint16_t)((bits >> 16) | 0x40);
    bits += 0x7FFFu + ((bits >> 16) & 1);
    return (uint16_t)(bits >> 16);
}

#endif
