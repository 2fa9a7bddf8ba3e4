/* numeric: the checkpoint's number formats decoded to float, and float rounded to fp16 for the
 * KV cache. Checkpoint data is little-endian and may sit at any byte offset in the mmap, so
 * multi-byte elements are read with memcpy (the compiler turns it into plain loads). */
#include "kernels/cpu/numeric.h"

#include <string.h>

#include "kernels/nvfp4_math.h"

static float float_from_bits(uint32_t bits)
{
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

static uint32_t bits_from_float(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

float e2m1_to_float(uint8_t nibble)
{
    return nvfp4_e2m1_to_float(nibble & 15);
}

float e4m3_to_float(uint8_t code)
{
    return nvfp4_e4m3_to_float(code);
}

float bf16_to_float(uint16_t bits)
{
    return float_from_bits((uint32_t)bits << 16);
}

float f16_to_float(uint16_t bits)
{
    uint32_t sign = (uint32_t)(bits & 0x8000) << 16;
    uint32_t exponent = (bits >> 10) & 31;
    uint32_t mantissa = bits & 0x3FF;
    if (exponent == 0) {
        float magnitude = (float)mantissa * 0x1p-24f; /* exact: at most 10 significant bits */
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31)
        return float_from_bits(sign | 0x7F800000u | (mantissa << 13));
    return float_from_bits(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

/* Shift right by `shift` (1..31) rounding to nearest, ties to even. */
static uint32_t shift_right_round_even(uint32_t value, unsigned shift)
{
    uint32_t kept = value >> shift;
    uint32_t rest = value & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1)))
        kept++;
    return kept;
}

uint16_t float_to_f16(float value)
{
    uint32_t bits = bits_from_float(value);
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
        return sign | (uint16_t)shift_right_round_even(magnitude - (112u << 23), 13);
    if (exponent == 0) /* float subnormals are far below half an fp16 subnormal step */
        return sign;
    /* Subnormal half: count of 2^-24 steps = (mantissa | implicit bit) * 2^(exponent - 126). */
    unsigned shift = 126 - exponent;
    if (shift > 31)
        return sign;
    return sign | (uint16_t)shift_right_round_even(mantissa | 0x800000u, shift);
}

void nvfp4_decode_row(const uint8_t *packed, const uint8_t *scales, float scale_2, int k, float *out)
{
    for (int block = 0; block < k / 16; block++) {
        /* The 16 possible e2m1 * e4m3 products of this block (exact), then one rounding each. */
        float block_scale = nvfp4_e4m3_to_float(scales[block]);
        float products[16];
        for (int nibble = 0; nibble < 16; nibble++)
            products[nibble] = nvfp4_e2m1_to_float((uint8_t)nibble) * block_scale;
        const uint8_t *bytes = packed + block * 8;
        float *values = out + block * 16;
        for (int j = 0; j < 8; j++) {
            values[2 * j] = products[bytes[j] & 15] * scale_2;
            values[2 * j + 1] = products[bytes[j] >> 4] * scale_2;
        }
    }
}

static void bf16_decode(const uint8_t *data, int n, float *out)
{
    for (int i = 0; i < n; i++) {
        uint16_t bits;
        memcpy(&bits, data + 2 * (size_t)i, sizeof bits);
        out[i] = bf16_to_float(bits);
    }
}

static void f16_decode(const uint8_t *data, int n, float *out)
{
    for (int i = 0; i < n; i++) {
        uint16_t bits;
        memcpy(&bits, data + 2 * (size_t)i, sizeof bits);
        out[i] = f16_to_float(bits);
    }
}

void weight_matrix_decode_row(const weight_matrix *w, int row, float *out)
{
    const uint8_t *data = w->data + (size_t)row * w->data_stride;
    switch (w->format) {
    case WEIGHT_NVFP4:
        nvfp4_decode_row(data, w->scale + (size_t)row * w->scale_stride, w->scale_2, w->cols, out);
        break;
    case WEIGHT_BF16:
        bf16_decode(data, w->cols, out);
        break;
    case WEIGHT_F16:
        f16_decode(data, w->cols, out);
        break;
    case WEIGHT_F32:
        memcpy(out, data, (size_t)w->cols * sizeof(float));
        break;
    }
}

void weight_vector_decode(const weight_vector *v, float *out)
{
    switch (v->type) {
    case DTYPE_BF16:
        bf16_decode(v->data, v->n, out);
        break;
    case DTYPE_F16:
        f16_decode(v->data, v->n, out);
        break;
    default:
        memcpy(out, v->data, (size_t)v->n * sizeof(float));
        break;
    }
}

static const struct {
    const char *name;
    size_t size;
} dtype_table[DTYPE_COUNT] = {
    [DTYPE_BF16] = {"BF16", 2}, [DTYPE_F16] = {"F16", 2},   [DTYPE_F32] = {"F32", 4},
    [DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [DTYPE_U8] = {"U8", 1}, [DTYPE_I8] = {"I8", 1},
    [DTYPE_I32] = {"I32", 4}, [DTYPE_I64] = {"I64", 8}, [DTYPE_BOOL] = {"BOOL", 1},
    [DTYPE_F64] = {"F64", 8},
};

size_t dtype_size(dtype type)
{
    return (unsigned)type < DTYPE_COUNT ? dtype_table[type].size : 0;
}

const char *dtype_name(dtype type)
{
    return (unsigned)type < DTYPE_COUNT ? dtype_table[type].name : NULL;
}

int dtype_from_name(const char *name, dtype *type)
{
    for (int i = 0; i < DTYPE_COUNT; i++) {
        if (!strcmp(dtype_table[i].name, name)) {
            *type = (dtype)i;
            return 0;
        }
    }
    return -1;
}
