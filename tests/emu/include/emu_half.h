/* __half and __nv_bfloat16 of the CPU emulation: 16-bit storage, conversions from float round
 * to nearest even with subnormals and overflow to infinity as the device does; arithmetic is
 * done in float and rounded once (exact for binary16 and bfloat16: float has more than twice
 * their precision plus two bits). */
#ifndef KIMI_EMU_HALF_H
#define KIMI_EMU_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

namespace emu {
inline uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
inline float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline uint16_t float_to_half_bits(float f)
{
    uint32_t x = float_bits(f), sign = (x >> 16) & 0x8000u;
    x &= 0x7FFFFFFFu;
    if (x >= 0x7F800000u)
        return (uint16_t)(sign | (x > 0x7F800000u ? 0x7E00u : 0x7C00u));
    if (x >= 0x477FF000u)       /* 65520 and up round to infinity */
        return (uint16_t)(sign | 0x7C00u);
    if (x < 0x38800000u)        /* below 2^-14: a subnormal, in units of 2^-24, nearest even */
        return (uint16_t)(sign | (uint32_t)nearbyintf(bits_float(x) * 16777216.0f));
    x -= 0x38000000u;
    x += 0xFFFu + ((x >> 13) & 1u);
    return (uint16_t)(sign | (x >> 13));
}
inline float half_bits_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 31u, mant = h & 0x3FFu;
    if (exp == 0) {
        float v = (float)mant / 16777216.0f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return bits_float(sign | 0x7F800000u | (mant << 13));
    return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
inline uint16_t float_to_bf16_bits(float f)
{
    uint32_t x = float_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}
inline float bf16_bits_to_float(uint16_t b)
{
    return bits_float((uint32_t)b << 16);
}
} // namespace emu

struct __half {
    unsigned short __x;
    __half() = default;
    __half(float f) : __x(emu::float_to_half_bits(f)) {}
    operator float() const { return emu::half_bits_to_float(__x); }
};
struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(emu::float_to_bf16_bits(f)) {}
    operator float() const { return emu::bf16_bits_to_float(__x); }
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __half half;

inline float __half2float(__half h) { return emu::half_bits_to_float(h.__x); }
inline __half __float2half(float f) { __half h; h.__x = emu::float_to_half_bits(f); return h; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __hadd(__half a, __half b) { return __float2half((float)a + (float)b); }
inline __half __hsub(__half a, __half b) { return __float2half((float)a - (float)b); }
inline __half __hmul(__half a, __half b) { return __float2half((float)a * (float)b); }
inline __half __hdiv(__half a, __half b) { return __float2half((float)a / (float)b); }
inline float __bfloat162float(__nv_bfloat16 b) { return emu::bf16_bits_to_float(b.__x); }
inline __nv_bfloat16 __float2bfloat16(float f) { __nv_bfloat16 b; b.__x = emu::float_to_bf16_bits(f); return b; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 b; b.__x = u; return b; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return __float2bfloat16((float)a + (float)b); }
inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return __float2bfloat16((float)a * (float)b); }

#endif
