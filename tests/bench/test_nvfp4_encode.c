/* Unit tests of the generator's NVFP4 encoder against the decoders in kernels/cpu/numeric:
 * every E4M3 / E2M1 code round-trips, midpoints round to the even code, and quantized weights
 * decode to within the format's error (exactly, for values already on the grid). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/numeric.h"
#include "tests/bench/nvfp4_encode.h"
#include "tests/unit/check.h"

static uint64_t rng_state = 7;
static double random_unit(void) /* [0, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1p-53;
}

static double random_gaussian(void)
{
    double u = random_unit() + 0x1p-60, v = random_unit();
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

static void test_e4m3_encode(void)
{
    int failures = 0;
    for (unsigned code = 0; code < 256; code++) {
        if ((code & 0x7F) == 0x7F)
            continue;
        if (e4m3_from_float(e4m3_to_float((uint8_t)code)) != code && failures++ < 5)
            fprintf(stderr, "e4m3 code 0x%02x does not round-trip\n", code);
    }
    for (unsigned code = 0; code < 0x7E; code++) {
        float low = e4m3_to_float((uint8_t)code), high = e4m3_to_float((uint8_t)(code + 1));
        float mid = (float)(((double)low + high) / 2); /* exact: a few significant bits */
        unsigned even = (code & 1) ? code + 1 : code;
        if ((e4m3_from_float(mid) != even || e4m3_from_float(nextafterf(mid, 0)) != code ||
             e4m3_from_float(nextafterf(mid, 1000)) != code + 1 || e4m3_from_float(-mid) != (even | 0x80)) &&
            failures++ < 5)
            fprintf(stderr, "e4m3 midpoint after 0x%02x rounds wrongly\n", code);
    }
    CHECK_INT(failures, 0);
    CHECK_INT(e4m3_from_float(448.0f), 0x7E);
    CHECK_INT(e4m3_from_float(500.0f), 0x7E);  /* saturates, never NaN */
    CHECK_INT(e4m3_from_float(1e30f), 0x7E);
    CHECK_INT(e4m3_from_float(-1e30f), 0xFE);
    CHECK_INT(e4m3_from_float(1.0f), 0x38);
    CHECK_INT(e4m3_from_float(0x1p-10f), 0x00); /* half the smallest subnormal: tie to 0 */
    CHECK_INT(e4m3_from_float(0x1p-10f * 1.01f), 0x01);
    CHECK_INT(e4m3_from_float(NAN), 0x7F);
}

static void test_e2m1_encode(void)
{
    static const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (unsigned code = 0; code < 16; code++)
        CHECK_MSG(e2m1_from_float(e2m1_to_float((uint8_t)code)) == code, "e2m1 code 0x%x", code);
    for (unsigned code = 0; code < 7; code++) {
        float mid = (grid[code] + grid[code + 1]) / 2;
        unsigned even = (code & 1) ? code + 1 : code;
        CHECK_MSG(e2m1_from_float(mid) == even, "e2m1 tie %g", mid);
        CHECK_MSG(e2m1_from_float(-mid) == (even | 8), "e2m1 tie %g", -mid);
        CHECK_MSG(e2m1_from_float(nextafterf(mid, 0)) == code, "e2m1 below %g", mid);
        CHECK_MSG(e2m1_from_float(nextafterf(mid, 10)) == code + 1, "e2m1 above %g", mid);
    }
    CHECK_INT(e2m1_from_float(7.0f), 7);
    CHECK_INT(e2m1_from_float(-100.0f), 15);
}

static void test_bf16_encode(void)
{
    CHECK_INT(bf16_from_float(1.0f), 0x3F80);
    CHECK_INT(bf16_from_float(-2.0f), 0xC000);
    CHECK_INT(bf16_from_float(1.0f + 0x1p-8f), 0x3F80);      /* tie: to even */
    CHECK_INT(bf16_from_float(1.0f + 3 * 0x1p-8f), 0x3F82);  /* tie: to even */
    CHECK_INT(bf16_from_float(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
    CHECK_INT(bf16_from_float(INFINITY), 0x7F80);
    CHECK(isnan(bf16_to_float(bf16_from_float(NAN))));
    int failures = 0;
    for (unsigned code = 0; code < 65536; code++) {
        float value = bf16_to_float((uint16_t)code);
        if (!isnan(value) && bf16_from_float(value) != code)
            failures++;
    }
    CHECK_INT(failures, 0);
}

/* Weights already on the NVFP4 grid (every block holds a +-6 so its scale is recovered, one
 * block is at the 448 maximum so scale_2 is too) quantize to exactly the same values. */
static void test_exact_on_grid(void)
{
    enum { ROWS = 8, K = 128 };
    const float scale_2 = 0x1p-12f;
    float weights[ROWS * K], decoded[K];
    uint8_t codes[ROWS][K / 16], packed[K / 2], scales[K / 16];
    for (int r = 0; r < ROWS; r++) {
        for (int b = 0; b < K / 16; b++) {
            codes[r][b] = (r == 3 && b == 5) ? 0x7E : (uint8_t)(0x08 + (int)(random_unit() * (0x7E - 0x08)));
            for (int j = 0; j < 16; j++) {
                uint8_t nibble = j == 0 ? (random_unit() < 0.5 ? 0x7 : 0xF) : (uint8_t)(random_unit() * 16);
                weights[r * K + b * 16 + j] = e2m1_to_float(nibble) * e4m3_to_float(codes[r][b]) * scale_2;
            }
        }
    }
    float computed_scale_2 = nvfp4_global_scale(weights, ROWS * K);
    CHECK(computed_scale_2 == scale_2);
    int failures = 0;
    for (int r = 0; r < ROWS; r++) {
        nvfp4_quantize_row(weights + r * K, K, computed_scale_2, packed, scales);
        CHECK(memcmp(scales, codes[r], sizeof scales) == 0);
        nvfp4_decode_row(packed, scales, computed_scale_2, K, decoded);
        for (int k = 0; k < K; k++)
            if (decoded[k] != weights[r * K + k] && failures++ < 5)
                fprintf(stderr, "row %d k %d: %g decoded as %g\n", r, k, weights[r * K + k], decoded[k]);
    }
    CHECK_INT(failures, 0);
}

/* Gaussian weights: the block scale is amax/6 rounded to E4M3 (relative error <= 1/16), so an
 * element is off by at most half the widest E2M1 gap (1, between 4 and 6) times the scale,
 * or 6 * 1/16 of it when it saturates: below 0.18 * amax of its block either way. */
static void test_gaussian_error_bound(void)
{
    enum { ROWS = 64, K = 512 };
    float *weights = malloc(sizeof(float) * ROWS * K), decoded[K];
    uint8_t packed[K / 2], scales[K / 16];
    for (int i = 0; i < ROWS * K; i++)
        weights[i] = (float)(random_gaussian() * 0.03);
    float scale_2 = nvfp4_global_scale(weights, ROWS * K);
    float amax = 0;
    for (int i = 0; i < ROWS * K; i++)
        amax = fmaxf(amax, fabsf(weights[i]));
    CHECK(scale_2 == amax / 2688.0f);
    int failures = 0;
    double squared_error = 0, squared = 0;
    for (int r = 0; r < ROWS; r++) {
        const float *row = weights + r * K;
        nvfp4_quantize_row(row, K, scale_2, packed, scales);
        nvfp4_decode_row(packed, scales, scale_2, K, decoded);
        for (int k = 0; k < K; k++) {
            float block_amax = 0;
            for (int j = k / 16 * 16; j < k / 16 * 16 + 16; j++)
                block_amax = fmaxf(block_amax, fabsf(row[j]));
            float error = fabsf(decoded[k] - row[k]);
            if (error > 0.18f * block_amax && failures++ < 5)
                fprintf(stderr, "row %d k %d: %g decoded as %g (block amax %g)\n", r, k, row[k], decoded[k], block_amax);
            squared_error += (double)error * error;
            squared += (double)row[k] * row[k];
        }
    }
    CHECK_INT(failures, 0);
    /* 4-bit grid at ~3 sigma per block: the rms error is a few percent to ~10% of the rms. */
    double relative_rms = sqrt(squared_error / squared);
    CHECK_MSG(relative_rms > 0.01 && relative_rms < 0.15, "relative rms error %g", relative_rms);
    free(weights);

    float zeros[16] = {0};
    nvfp4_quantize_row(zeros, 16, 1.0f, packed, scales);
    CHECK_INT(scales[0], 0x38); /* an all-zero block gets scale 1.0, as ModelOpt does */
    for (int j = 0; j < 8; j++)
        CHECK_INT(packed[j], 0);
}

int main(void)
{
    test_e4m3_encode();
    test_e2m1_encode();
    test_bf16_encode();
    test_exact_on_grid();
    test_gaussian_error_bound();
    return check_finish();
}
