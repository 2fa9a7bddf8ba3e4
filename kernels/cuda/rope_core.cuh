/* rope_core: the rotary cosine and sine of a position in fp32 with the angle reduced exactly,
 * for every CUDA kernel that ropes (ops.cu's latent/rope/cache tail, linear.cu's q absorption).
 *
 * The CPU takes cos/sin of position * inv_freq in double (kernels/cpu/rope.c). The angle reaches
 * 262144 rad at the longest context: an fp32 angle there is off by up to 0.008 rad, so it cannot
 * simply be computed in fp32, and double cos/sin cost ~100 fp64 instructions a pair (fp64 runs at
 * 1/64 of fp32 on sm_120). Here the angle is kept in turns as a 64-bit fixed-point fraction:
 * inv_freq / 2pi once in fixed point (the one fp64 multiply left, and it is where the 53 bits
 * are needed), times the integer position modulo 2^64 (whole turns drop out exactly), then the
 * remainder in [-1/2, 1/2) of a turn to radians in fp32 with 2pi in two parts, and fp32 sincosf
 * of an angle within [-pi, pi]. The angle is then off by ~1e-10 rad (the double product's
 * rounding) plus fp32's rounding of the reduced angle, at every position. */
#ifndef KIMI_KERNELS_CUDA_ROPE_CORE_CUH
#define KIMI_KERNELS_CUDA_ROPE_CORE_CUH

#include <cuda_runtime.h>
#include <math.h>

/* (cos, sin)(position * inv_freq) * scale, each rounded to fp32 (inv_freq <= 1: every rope table). */
static __device__ __forceinline__ void rope_cos_sin_f32(long position, double inv_freq, float scale, float *cos_out,
                                                        float *sin_out)
{
    /* turns per position in units of 2^-64 turn (inv_freq <= 1: below 2^61) */
    const double units_per_radian = 18446744073709551616.0 / 6.283185307179586476925286766559;
    unsigned long long per_position = (unsigned long long)(inv_freq * units_per_radian);
    /* the fraction of a turn, wrapped to [-1/2, 1/2) as a signed 64-bit number; its top 32 bits
     * (2^-32 turn = 1.5e-9 rad steps) split so each part converts to fp32 exactly */
    long long turns = (long long)((unsigned long long)position * per_position);
    int top = (int)(turns >> 32);
    float high = (float)(top & ~0xFF), low = (float)(top & 0xFF);
    /* 2pi = two_pi_high + two_pi_low, two_pi_high the fp32 nearest */
    const float two_pi_high = 6.28318548202514648f, two_pi_low = -1.74845553e-7f;
    const float unit = 2.3283064365386963e-10f; /* 2^-32 */
    float angle = fmaf(high, two_pi_high, fmaf(high, two_pi_low, low * two_pi_high)) * unit;
    float s, c;
    sincosf(angle, &s, &c);
    *cos_out = c * scale;
    *sin_out = s * scale;
}

#endif
