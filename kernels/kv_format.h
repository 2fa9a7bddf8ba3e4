/* kv_format: the element formats of the MLA latent KV cache (fp16, or fp8 e4m3 with block
 * scales) and their encode/decode, written once for the CPU kernels (C) and the CUDA kernels
 * (__host__ __device__), so both backends store and read the cache with the same arithmetic.
 *
 * One position of one layer is one row:
 *   KV_CACHE_FP16: [kv_lora latent | rope k_pe] fp16, (kv_lora + rope) * 2 bytes (Kimi: 1152).
 *   KV_CACHE_FP8:  [kv_lora latent, e4m3 codes][one float32 scale per KV_FP8_BLOCK latent values]
 *                  [rope k_pe, fp16]: kv_lora + 4 * ceil(kv_lora / 128) + 2 * rope bytes (Kimi:
 *                  512 + 16 + 128 = 656, the size of vLLM's fp8_ds_mla).
 * A block's scale is amax / 448 (448: the largest e4m3), so its largest value maps to +-448 and
 * the others keep 3 mantissa bits relative to themselves; per 128-element block rather than per
 * row because one outlier channel then costs only its block's precision (README "FP8 latent
 * cache" gives the measured errors). k_pe is kept in 16 bits: it carries the position through
 * RoPE, and 64 values cost only 128 bytes. A decoded latent value is defined as the fp16 rounding
 * of code * scale (kv_fp8_decode): both backends then attend over exactly the same fp16 numbers,
 * and the cache can be read back as fp16 exactly (backend_read_kv). */
#ifndef KIMI_KERNELS_KV_FORMAT_H
#define KIMI_KERNELS_KV_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/half_math.h"
#include "kernels/nvfp4_math.h"

typedef enum { KV_CACHE_FP16 = 0, KV_CACHE_FP8 = 1 } kv_cache_format;

enum { KV_FP8_BLOCK = 128 };

#define KV_FP8_MAX 448.0f

#ifndef __CUDACC__
/* "fp16" or "fp8": the names of the --kv-cache flag and the kv_cache config key. */
static inline const char *kv_cache_format_name(kv_cache_format format)
{
    return format == KV_CACHE_FP8 ? "fp8" : "fp16";
}

/* A name -> *out; -1 (and *out untouched) for anything but "fp16" and "fp8". */
static inline int kv_cache_format_parse(const char *name, kv_cache_format *out)
{
    if (!strcmp(name, "fp16"))
        *out = KV_CACHE_FP16;
    else if (!strcmp(name, "fp8"))
        *out = KV_CACHE_FP8;
    else
        return -1;
    return 0;
}
#endif

static inline KIMI_HOST_DEVICE int kv_fp8_blocks(int kv_lora)
{
    return (kv_lora + KV_FP8_BLOCK - 1) / KV_FP8_BLOCK;
}

/* Bytes of one position of one layer in the given format. */
static inline KIMI_HOST_DEVICE size_t kv_row_bytes(kv_cache_format format, int kv_lora, int rope)
{
    if (format == KV_CACHE_FP8)
        return (size_t)kv_lora + 4 * (size_t)kv_fp8_blocks(kv_lora) + 2 * (size_t)rope;
    return 2 * ((size_t)kv_lora + (size_t)rope);
}

/* float -> e4m3 "fn" code (bias 7, max 448, 0x7F/0xFF NaN, no infinities), rounded to nearest
 * even. Saturating: a finite magnitude beyond 448 gives +-448, never NaN; NaN and infinities
 * (a non-finite activation) give NaN, so the backend's non-finite check reports them. */
static inline KIMI_HOST_DEVICE uint8_t kv_e4m3_from_float(float value)
{
    uint32_t bits = half_math_float_bits(value);
    uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
    uint32_t magnitude = bits & 0x7FFFFFFFu;
    uint32_t exponent = magnitude >> 23;
    if (exponent == 255)
        return sign | 0x7F;
    if (magnitude >= 0x43E00000u) /* >= 448 */
        return sign | 0x7E;
    uint32_t code;
    if (exponent >= 121) /* >= 2^-6: normal e4m3; a carry out of the mantissa bumps the exponent */
        code = half_math_shift_round_even(magnitude - (120u << 23), 20);
    else if (exponent == 0 || 141 - exponent > 31) /* below a quarter of the smallest step 2^-9 */
        code = 0;
    else /* subnormal: steps of 2^-9 = (mantissa | implicit bit) * 2^(exponent - 141) */
        code = half_math_shift_round_even((magnitude & 0x7FFFFF) | 0x800000u, 141 - exponent);
    return sign | (uint8_t)(code > 0x7E ? 0x7E : code);
}

/* The scale of one block of latent values: its largest finite magnitude / 448 (1 for an all-zero
 * block, so decoding needs no special case). NaN and infinities are left out of the maximum:
 * they encode as NaN on their own and must not wipe out their finite neighbours. */
static inline KIMI_HOST_DEVICE float kv_fp8_block_scale(const float *values, int n)
{
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = values[i] < 0.0f ? -values[i] : values[i];
        if (a - a == 0.0f && a > amax)
            amax = a;
    }
    if (amax == 0.0f)
        return 1.0f;
    float scale = amax / KV_FP8_MAX;
    /* amax below 448 * the smallest normal float: the division flushed to a subnormal or 0 */
    return scale > 0.0f ? scale : 1.0f;
}

/* One decoded latent value: fp16(code * scale). */
static inline KIMI_HOST_DEVICE uint16_t kv_fp8_decode_half(uint8_t code, float scale)
{
    return half_from_float_saturate(nvfp4_e4m3_to_float(code) * scale);
}

static inline KIMI_HOST_DEVICE float kv_fp8_decode(uint8_t code, float scale)
{
    return half_to_float(kv_fp8_decode_half(code, scale));
}

static inline KIMI_HOST_DEVICE float kv_fp8_row_scale(const uint8_t *row, int kv_lora, int block)
{
    float scale;
    memcpy(&scale, row + kv_lora + 4 * (size_t)block, sizeof scale);
    return scale;
}

static inline KIMI_HOST_DEVICE const uint8_t *kv_fp8_row_rope(const uint8_t *row, int kv_lora)
{
    return row + kv_lora + 4 * (size_t)kv_fp8_blocks(kv_lora);
}

/* Whether a latent code reads back saturated: its value (code x scale, finite) is beyond fp16,
 * which kv_fp8_decode_half clips to +-65504; the cache counts it as the fp16 cache counts its
 * own saturations (cache_clamps). */
static inline KIMI_HOST_DEVICE int kv_fp8_reads_saturated(uint8_t code, float scale)
{
    return half_math_overflows(nvfp4_e4m3_to_float(code) * scale);
}

/* One block of the latent: codes[i] = e4m3(values[i] / scale), scale stored by the caller;
 * returns the codes that read back saturated. */
static inline KIMI_HOST_DEVICE int kv_fp8_encode_block(const float *values, int n, float scale, uint8_t *codes)
{
    int clamps = 0;
    for (int i = 0; i < n; i++) {
        codes[i] = kv_e4m3_from_float(values[i] / scale);
        clamps += kv_fp8_reads_saturated(codes[i], scale);
    }
    return clamps;
}

/* values [kv_lora | rope] -> one fp8 row; returns the values saturated to +-65504: k_pe's when
 * stored, the latent's when read (its scale follows its range, but it is read as fp16). */
static inline KIMI_HOST_DEVICE int kv_fp8_encode_row(const float *values, int kv_lora, int rope, uint8_t *row)
{
    int clamps = 0;
    for (int b = 0; b < kv_fp8_blocks(kv_lora); b++) {
        int first = b * KV_FP8_BLOCK, n = kv_lora - first < KV_FP8_BLOCK ? kv_lora - first : KV_FP8_BLOCK;
        float scale = kv_fp8_block_scale(values + first, n);
        clamps += kv_fp8_encode_block(values + first, n, scale, row + first);
        memcpy(row + kv_lora + 4 * (size_t)b, &scale, sizeof scale);
    }
    uint8_t *rope_out = row + kv_lora + 4 * (size_t)kv_fp8_blocks(kv_lora);
    for (int i = 0; i < rope; i++) {
        float v = values[kv_lora + i];
        clamps += half_math_overflows(v);
        uint16_t h = half_from_float_saturate(v);
        memcpy(rope_out + 2 * (size_t)i, &h, sizeof h);
    }
    return clamps;
}

/* One row in either format -> fp16 [kv_lora | rope] (exact for both: see the top). */
static inline KIMI_HOST_DEVICE void kv_row_to_half(kv_cache_format format, const uint8_t *row, int kv_lora, int rope,
                                                   uint16_t *out)
{
    if (format != KV_CACHE_FP8) {
        memcpy(out, row, 2 * ((size_t)kv_lora + (size_t)rope));
        return;
    }
    for (int i = 0; i < kv_lora; i++)
        out[i] = kv_fp8_decode_half(row[i], kv_fp8_row_scale(row, kv_lora, i / KV_FP8_BLOCK));
    memcpy(out + kv_lora, kv_fp8_row_rope(row, kv_lora), 2 * (size_t)rope);
}

#endif
