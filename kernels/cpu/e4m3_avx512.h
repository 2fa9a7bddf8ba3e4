/* e4m3_avx512: NVFP4 block scales (E4M3) as floats, 16 at a time in an AVX-512 register, for
 * the CPU kernels that apply a row's scales a group of 16 blocks at a time (linear.c,
 * linear_int8.c). The same values as nvfp4_e4m3_to_float (kernels/nvfp4_math.h). */
#ifndef KIMI_KERNELS_CPU_E4M3_AVX512_H
#define KIMI_KERNELS_CPU_E4M3_AVX512_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdint.h>

/* 16 e4m3 codes as floats: the 7 magnitude bits moved to the top of a float's exponent and
 * mantissa and multiplied by 2^120 (exact, also for the subnormal codes), the sign bit, and NaN
 * for the two NaN codes. */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline __m512 e4m3_convert(__m128i bytes)
{
    __m512i codes = _mm512_cvtepu8_epi32(bytes);
    __m512i magnitude = _mm512_and_si512(codes, _mm512_set1_epi32(0x7F));
    __m512 value = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(magnitude, 20)), _mm512_set1_ps(0x1p120f));
    __mmask16 nan = _mm512_cmpeq_epi32_mask(magnitude, _mm512_set1_epi32(0x7F));
    value = _mm512_mask_mov_ps(value, nan, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(codes, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(value), sign));
}

/* The scales of blocks [b, b + count), count <= 16, as floats (lanes past count: 0). A whole
 * group is one plain load (the masked one was the kernels' slowest instruction). */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline __m512 e4m3_group(
    const uint8_t *scales, int b, int count)
{
    if (count == 16)
        return e4m3_convert(_mm_loadu_si128((const __m128i *)(scales + b)));
    return e4m3_convert(_mm_maskz_loadu_epi8((__mmask16)((1u << count) - 1), scales + b));
}
#endif

#endif
