/* numeric: the checkpoint's number formats decoded to float, and float rounded to fp16 for the
 * KV cache. Checkpoint data is little-endian and may sit at any byte offset in the mmap, so
 * multi-byte elements are read with memcpy (the compiler turns it into plain loads). */
#include "kernels/cpu/numeric.h"

#include <string.h>

#include "kernels/half_math.h"
#include "kernels/nvfp4_math.h"

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
    return bf16_bits_to_float(bits);
}

float f16_to_float(uint16_t bits)
{
    return half_to_float(bits);
}

uint16_t float_to_f16(float value)
{
    return half_from_float(value);
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
