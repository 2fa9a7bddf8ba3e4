/* e4m3_avx512: NVFP4 block scales (E4M3) as floats, 16 at a time in an AVX-512 register, for
 * the CPU kernels that apply a row's scales a group of 16 blocks at a time (linear.c,
 * linear_int8.c). The same values as nvfp4_e4m3_to_float (kernels/nvfp4_math.h). */
#ifndef KIMI_KERNELS_CPU_E4M3_AVX512_H
#define KIMI_KERNELS_CPU_E4M3_AVX512_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdint.h>

/* 16 e4m3 codes as floats: sign-extended to 32 bits and shifted left by 20, the 7 magnitude
 * bits land at the top of a float's exponent and mantissa and the sign's copies above them
 * (bits 27-31), of which the mask keeps bit 31; times 2^120 that is the value (exact, also for
 * the subnormal codes), and NaN for the two NaN codes (magnitude 0x7F: the code's low 7 bits
 * shifted to the top). Two operations fewer than moving the sign and the magnitude apart. */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static inline __m512 e4m3_convert(__m128i bytes)
{
    __m512i codes = _mm512_cvtepi8_epi32(bytes);
    __m512i bits = _mm512_and_si512(_mm512_slli_epi32(codes, 20), _mm512_set1_epi32((int)0x87F00000u));
    __m512 value = _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0x1p120f));
    __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_slli_epi32(codes, 25), _mm512_set1_epi32((int)0xFE000000u));
    return _mm512_mask_mov_ps(value, nan, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
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
