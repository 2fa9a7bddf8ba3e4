/* Unit tests of kernels/cpu/numeric: every E2M1 and E4M3 code, every f16 code, fp16 rounding,
 * and row/vector dequantization of weight views. Expected values come from the formats'
 * definitions, evaluated here differently (ldexp on the bit fields, in double), and from
 * constants derived with python3's struct module (IEEE half, 'e' format) where noted. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/numeric.h"
#include "tests/unit/check.h"

static uint32_t float_bits(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static int same_float(float a, float b)
{
    return float_bits(a) == float_bits(b);
}

/* E2M1 from its fields: 2 exponent bits (bias 1), 1 mantissa bit, subnormal at exponent 0. */
static double expected_e2m1(unsigned code)
{
    unsigned exponent = (code >> 1) & 3, mantissa = code & 1;
    double magnitude = exponent ? ldexp(1.0 + mantissa / 2.0, (int)exponent - 1) : mantissa * 0.5;
    return (code & 8) ? -magnitude : magnitude;
}

/* E4M3fn from its fields: 4 exponent bits (bias 7), 3 mantissa bits, subnormal at exponent 0. */
static double expected_e4m3(unsigned code)
{
    unsigned exponent = (code >> 3) & 15, mantissa = code & 7;
    double magnitude = exponent ? ldexp(1.0 + mantissa / 8.0, (int)exponent - 7) : ldexp(mantissa, -9);
    return (code & 0x80) ? -magnitude : magnitude;
}

/* binary16 from its fields (finite codes only). */
static double expected_f16(unsigned code)
{
    unsigned exponent = (code >> 10) & 31, mantissa = code & 0x3FF;
    double magnitude = exponent ? ldexp(1.0 + mantissa / 1024.0, (int)exponent - 15) : ldexp(mantissa, -24);
    return (code & 0x8000) ? -magnitude : magnitude;
}

static void test_e2m1(void)
{
    static const float spec[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
    for (unsigned code = 0; code < 16; code++) {
        float value = e2m1_to_float((uint8_t)code);
        CHECK_MSG(same_float(value, spec[code]), "e2m1 0x%x = %g, spec %g", code, value, spec[code]);
        CHECK_MSG(value == (float)expected_e2m1(code), "e2m1 0x%x = %g", code, value);
        CHECK_MSG(!!signbit(value) == !!(code & 8), "e2m1 0x%x sign", code);
    }
}

static void test_e4m3(void)
{
    int nans = 0;
    for (unsigned code = 0; code < 256; code++) {
        float value = e4m3_to_float((uint8_t)code);
        if ((code & 0x7F) == 0x7F) {
            CHECK_MSG(isnan(value), "e4m3 0x%02x should be NaN, got %g", code, value);
            nans++;
            continue;
        }
        CHECK_MSG(isfinite(value) && (double)value == expected_e4m3(code), "e4m3 0x%02x = %.9g, expected %.9g",
                  code, value, expected_e4m3(code));
        CHECK_MSG(!!signbit(value) == !!(code & 0x80), "e4m3 0x%02x sign", code);
    }
    CHECK_INT(nans, 2);
    CHECK(e4m3_to_float(0x7E) == 448.0f);
    CHECK(e4m3_to_float(0xFE) == -448.0f);
    CHECK(e4m3_to_float(0x08) == 0x1p-6f);
    CHECK(e4m3_to_float(0x01) == 0x1p-9f);
    CHECK(e4m3_to_float(0x07) == 7 * 0x1p-9f);
    CHECK(e4m3_to_float(0x38) == 1.0f);
    CHECK(e4m3_to_float(0x3C) == 1.5f);
    CHECK(same_float(e4m3_to_float(0x80), -0.0f));
}

static void test_bf16(void)
{
    CHECK(bf16_to_float(0x3F80) == 1.0f);
    CHECK(bf16_to_float(0xC000) == -2.0f);
    CHECK(bf16_to_float(0x3E80) == 0.25f);
    CHECK(bf16_to_float(0x4049) == 3.140625f);
    CHECK(isinf(bf16_to_float(0x7F80)));
    CHECK(isnan(bf16_to_float(0x7FC0)));
    CHECK(same_float(bf16_to_float(0x8000), -0.0f));
}

static void test_f16_all_codes(void)
{
    int mismatches = 0, round_trip_failures = 0;
    for (unsigned code = 0; code < 65536; code++) {
        float value = f16_to_float((uint16_t)code);
        unsigned exponent = (code >> 10) & 31;
        int ok;
        if (exponent == 31 && (code & 0x3FF))
            ok = isnan(value) && !!signbit(value) == !!(code & 0x8000);
        else if (exponent == 31)
            ok = isinf(value) && (value < 0) == !!(code & 0x8000);
        else
            ok = (double)value == expected_f16(code) && !!signbit(value) == !!(code & 0x8000);
        if (!ok && mismatches++ < 5)
            fprintf(stderr, "f16_to_float(0x%04x) = %.9g\n", code, value);
        uint16_t back = float_to_f16(value);
        if (back != code && round_trip_failures++ < 5)
            fprintf(stderr, "float_to_f16(f16_to_float(0x%04x)) = 0x%04x\n", code, back);
    }
    CHECK_INT(mismatches, 0);
    CHECK_INT(round_trip_failures, 0);
}

/* Between every pair of neighbouring finite halves the exact midpoint is a float (12 significant
 * bits); it must round to the neighbour with an even code, and one float ulp either side of it
 * to the nearer neighbour. */
static void test_f16_midpoints(void)
{
    int failures = 0;
    for (unsigned code = 0; code < 0x7BFF; code++) {
        for (unsigned sign = 0; sign <= 0x8000; sign += 0x8000) {
            float low = f16_to_float((uint16_t)(code | sign)), high = f16_to_float((uint16_t)((code + 1) | sign));
            float mid = (float)(((double)low + (double)high) / 2);
            unsigned even = (code & 1) ? code + 1 : code;
            uint16_t at = float_to_f16(mid);
            uint16_t below = float_to_f16(nextafterf(mid, low));
            uint16_t above = float_to_f16(nextafterf(mid, high));
            if ((at != (even | sign) || below != (code | sign) || above != ((code + 1) | sign)) && failures++ < 5)
                fprintf(stderr, "midpoint of 0x%04x: 0x%04x 0x%04x 0x%04x\n", code | sign, below, at, above);
        }
    }
    CHECK_INT(failures, 0);
}

static void test_f16_rounding_constants(void)
{
    /* Expected codes from python3: struct.unpack('<H', struct.pack('<e', x)). */
    CHECK_INT(float_to_f16(1.0f + 0x1p-11f), 0x3C00);
    CHECK_INT(float_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
    CHECK_INT(float_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    CHECK_INT(float_to_f16(65504.0f), 0x7BFF);
    CHECK_INT(float_to_f16(65519.99f), 0x7BFF);
    CHECK_INT(float_to_f16(0x1p-24f), 0x0001);
    CHECK_INT(float_to_f16(0x1p-25f), 0x0000);
    CHECK_INT(float_to_f16(3 * 0x1p-25f), 0x0002);
    CHECK_INT(float_to_f16(0x1p-14f), 0x0400);
    CHECK_INT(float_to_f16(0x1p-14f - 0x1p-25f), 0x0400);
    CHECK_INT(float_to_f16(-0.0f), 0x8000);
    CHECK_INT(float_to_f16(0.1f), 0x2E66);
    CHECK_INT(float_to_f16(-3.14159f), 0xC248);
    CHECK_INT(float_to_f16(1.0f / 3.0f), 0x3555);
    CHECK_INT(float_to_f16(1e-5f), 0x00A8);
    CHECK_INT(float_to_f16(123.456f), 0x57B7);
    /* IEEE overflow (python raises OverflowError here): 65520 is the tie with 2^16 -> infinity. */
    CHECK_INT(float_to_f16(65520.0f), 0x7C00);
    CHECK_INT(float_to_f16(1e6f), 0x7C00);
    CHECK_INT(float_to_f16(-1e6f), 0xFC00);
    CHECK_INT(float_to_f16(INFINITY), 0x7C00);
    CHECK_INT(float_to_f16(-INFINITY), 0xFC00);
    CHECK_INT(float_to_f16(0x1p-140f), 0x0000);
    CHECK_INT(float_to_f16(-0x1p-149f), 0x8000);
    uint16_t nan = float_to_f16(NAN);
    CHECK((nan & 0x7C00) == 0x7C00 && (nan & 0x3FF) != 0);
}

static uint32_t lcg_state = 12345;
static uint32_t lcg_next(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return lcg_state >> 8;
}

static void test_nvfp4_decode_row(void)
{
    enum { K = 256 };
    uint8_t packed[K / 2], scales[K / 16];
    float out[K];
    const float scale_2_values[] = {1.0f, 0.000372314453125f, 1.7e-5f, 3.3333333f};
    int failures = 0;
    for (size_t s = 0; s < sizeof scale_2_values / sizeof scale_2_values[0]; s++) {
        for (int trial = 0; trial < 64; trial++) {
            for (int i = 0; i < K / 2; i++)
                packed[i] = (uint8_t)lcg_next();
            for (int i = 0; i < K / 16; i++)
                scales[i] = (uint8_t)(lcg_next() % 0x7F); /* any non-NaN positive scale */
            float scale_2 = scale_2_values[s];
            nvfp4_decode_row(packed, scales, scale_2, K, out);
            for (int k = 0; k < K; k++) {
                unsigned nibble = (k & 1) ? packed[k / 2] >> 4 : packed[k / 2] & 15;
                /* e2m1 * e4m3 * scale_2 is exact in double, so one rounding to float. */
                float expected = (float)(expected_e2m1(nibble) * expected_e4m3(scales[k / 16]) * (double)scale_2);
                if (!same_float(out[k], expected) && failures++ < 5)
                    fprintf(stderr, "nvfp4 k=%d: %.9g expected %.9g\n", k, out[k], expected);
            }
        }
    }
    CHECK_INT(failures, 0);
    /* Byte 0x71: element 0 is the low nibble (1 -> 0.5), element 1 the high one (7 -> 6). */
    uint8_t one_block[8] = {0x71, 0x8A, 0, 0, 0, 0, 0, 0};
    uint8_t scale_two = 0x40; /* 2.0 */
    float block[16];
    nvfp4_decode_row(one_block, &scale_two, 0.5f, 16, block);
    CHECK(block[0] == 0.5f && block[1] == 6.0f && block[2] == -1.0f && same_float(block[3], -0.0f));
}

static void test_weight_matrix_views(void)
{
    /* NVFP4 W[3][64]; a view of rows 1..2 and K range [16, 48). */
    enum { ROWS = 3, COLS = 64 };
    uint8_t packed[ROWS][COLS / 2], scales[ROWS][COLS / 16];
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < COLS / 2; i++)
            packed[r][i] = (uint8_t)lcg_next();
        for (int i = 0; i < COLS / 16; i++)
            scales[r][i] = (uint8_t)(0x20 + lcg_next() % 0x30);
    }
    weight_matrix view = {
        .format = WEIGHT_NVFP4, .rows = 2, .cols = 32,
        .data = &packed[1][8], .data_stride = COLS / 2,
        .scale = &scales[1][1], .scale_stride = COLS / 16, .scale_2 = 0.25f,
    };
    float full[COLS], part[32];
    for (int r = 0; r < 2; r++) {
        nvfp4_decode_row(packed[1 + r], scales[1 + r], 0.25f, COLS, full);
        weight_matrix_decode_row(&view, r, part);
        CHECK(memcmp(full + 16, part, sizeof part) == 0);
    }

    /* BF16 / F16 / F32 rows at an odd (unaligned) address, second row of two. */
    uint8_t bytes[1 + 2 * 3 * 4];
    const uint16_t bf16_row[3] = {0x3F80, 0xC040, 0x3E00};  /* 1, -3, 0.125 */
    const uint16_t f16_row[3] = {0x3C00, 0xC200, 0x3000};   /* 1, -3, 0.125 */
    const float f32_row[3] = {1.0f, -3.0f, 0.125f};
    const struct {
        weight_format format;
        const void *row;
        size_t size;
    } formats[] = {{WEIGHT_BF16, bf16_row, 6}, {WEIGHT_F16, f16_row, 6}, {WEIGHT_F32, f32_row, 12}};
    for (size_t f = 0; f < 3; f++) {
        memset(bytes, 0xEE, sizeof bytes);
        memcpy(bytes + 1 + formats[f].size, formats[f].row, formats[f].size);
        weight_matrix m = {.format = formats[f].format, .rows = 2, .cols = 3, .data = bytes + 1,
                           .data_stride = formats[f].size, .scale_2 = 1.0f};
        float row[3];
        weight_matrix_decode_row(&m, 1, row);
        CHECK_MSG(row[0] == 1.0f && row[1] == -3.0f && row[2] == 0.125f, "format %zu: %g %g %g", f, row[0],
                  row[1], row[2]);
    }

    const dtype vector_types[] = {DTYPE_BF16, DTYPE_F16, DTYPE_F32};
    for (size_t f = 0; f < 3; f++) {
        memcpy(bytes + 1, formats[f].row, formats[f].size);
        weight_vector v = {.type = vector_types[f], .n = 3, .data = bytes + 1};
        float values[3];
        weight_vector_decode(&v, values);
        CHECK_MSG(values[0] == 1.0f && values[1] == -3.0f && values[2] == 0.125f, "vector %zu", f);
    }
}

static void test_dtype_names(void)
{
    dtype type;
    CHECK(dtype_from_name("F8_E4M3", &type) == 0 && type == DTYPE_F8_E4M3);
    CHECK(dtype_from_name("BF16", &type) == 0 && type == DTYPE_BF16);
    CHECK(dtype_from_name("U8", &type) == 0 && type == DTYPE_U8);
    CHECK(dtype_from_name("F4", &type) == -1);
    CHECK_INT(dtype_size(DTYPE_BF16), 2);
    CHECK_INT(dtype_size(DTYPE_F32), 4);
    CHECK_INT(dtype_size(DTYPE_I64), 8);
    CHECK_INT(dtype_size(DTYPE_F8_E4M3), 1);
    CHECK_STR(dtype_name(DTYPE_F16), "F16");
    for (int i = 0; i < DTYPE_COUNT; i++)
        CHECK_MSG(dtype_name((dtype)i) && dtype_size((dtype)i) > 0, "dtype %d", i);
}

int main(void)
{
    test_e2m1();
    test_e4m3();
    test_bf16();
    test_f16_all_codes();
    test_f16_midpoints();
    test_f16_rounding_constants();
    test_nvfp4_decode_row();
    test_weight_matrix_views();
    test_dtype_names();
    return check_finish();
}
