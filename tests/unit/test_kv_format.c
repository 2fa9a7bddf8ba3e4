/* test_kv_format: the fp8 latent-cache format (kernels/kv_format.h): e4m3 encoding is round to
 * nearest even over every code and every midpoint, saturates instead of overflowing to NaN,
 * turns NaN and infinities into NaN; a row keeps each block within half an e4m3 step of its
 * scale, k_pe exactly as fp16, and reads back as fp16 exactly. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kv_format.h"
#include "tests/unit/check.h"

static int is_nan_code(uint8_t code)
{
    return (code & 0x7F) == 0x7F;
}

int main(void)
{
    /* every finite code decodes to a value that encodes back to the same code */
    int bad = 0;
    for (int code = 0; code < 256; code++) {
        if (is_nan_code((uint8_t)code) || code == 0x80)
            continue;
        bad += kv_e4m3_from_float(nvfp4_e4m3_to_float((uint8_t)code)) != code;
    }
    CHECK_MSG(bad == 0, "%d e4m3 codes do not survive decode + encode", bad);
    CHECK_INT(kv_e4m3_from_float(-0.0f), 0x80);

    /* midpoints between neighbouring positive codes go to the even code, just above / below to
     * the nearer one */
    bad = 0;
    for (int code = 0; code < 0x7E; code++) {
        float low = nvfp4_e4m3_to_float((uint8_t)code), high = nvfp4_e4m3_to_float((uint8_t)(code + 1));
        float mid = 0.5f * (low + high);
        int even = code % 2 == 0 ? code : code + 1;
        bad += kv_e4m3_from_float(mid) != even;
        bad += kv_e4m3_from_float(nextafterf(mid, 0.0f)) != code;
        bad += kv_e4m3_from_float(nextafterf(mid, 1e9f)) != code + 1;
        bad += kv_e4m3_from_float(-mid) != (even | 0x80);
    }
    CHECK_MSG(bad == 0, "%d midpoints round wrongly", bad);
    CHECK_INT(kv_e4m3_from_float(0x1p-10f), 0x00);            /* half the smallest step: tie to 0 */
    CHECK_INT(kv_e4m3_from_float(nextafterf(0x1p-10f, 1.0f)), 0x01);
    CHECK_INT(kv_e4m3_from_float(1e-30f), 0x00);
    CHECK_INT(kv_e4m3_from_float(1.0f), 0x38);

    /* saturation: finite overflow gives +-448, never NaN; non-finite gives NaN */
    CHECK_INT(kv_e4m3_from_float(448.0f), 0x7E);
    CHECK_INT(kv_e4m3_from_float(463.0f), 0x7E);
    CHECK_INT(kv_e4m3_from_float(500.0f), 0x7E);
    CHECK_INT(kv_e4m3_from_float(3e38f), 0x7E);
    CHECK_INT(kv_e4m3_from_float(-1e6f), 0xFE);
    CHECK(is_nan_code(kv_e4m3_from_float(NAN)));
    CHECK(is_nan_code(kv_e4m3_from_float(INFINITY)));
    CHECK(is_nan_code(kv_e4m3_from_float(-INFINITY)));

    /* a row of Kimi's shape: 656 bytes; each latent value within half a step of its block's
     * step (the widest, at the top of the e4m3 range, is 32 * scale = amax / 14) plus the fp16
     * rounding, k_pe as fp16 */
    enum { KV_LORA = 512, ROPE = 64 };
    CHECK_INT(kv_row_bytes(KV_CACHE_FP8, KV_LORA, ROPE), 656);
    CHECK_INT(kv_row_bytes(KV_CACHE_FP16, KV_LORA, ROPE), 1152);
    CHECK_INT(kv_row_bytes(KV_CACHE_FP8, 64, 16), 64 + 4 + 32);
    float values[KV_LORA + ROPE];
    srand(7);
    for (int i = 0; i < KV_LORA + ROPE; i++)
        values[i] = ((float)rand() / RAND_MAX - 0.5f) * (i / KV_FP8_BLOCK == 2 ? 100.0f : 2.0f);
    values[5] = 40.0f;   /* an outlier: costs only block 0's precision */
    values[KV_LORA + 3] = 1e6f; /* k_pe beyond fp16: saturates, counted */
    uint8_t row[656];
    CHECK_INT(kv_fp8_encode_row(values, KV_LORA, ROPE, row), 1);
    uint16_t back[KV_LORA + ROPE];
    kv_row_to_half(KV_CACHE_FP8, row, KV_LORA, ROPE, back);
    double worst[4] = {0};
    for (int i = 0; i < KV_LORA; i++) {
        int block = i / KV_FP8_BLOCK;
        float scale = kv_fp8_row_scale(row, KV_LORA, block);
        double error = fabs((double)half_to_float(back[i]) - values[i]);
        double bound = 16.0 * scale + fabs(values[i]) / 1024;
        if (error > worst[block])
            worst[block] = error;
        CHECK_MSG(error <= bound, "latent %d: %g vs %g (scale %g)", i, half_to_float(back[i]),
                  values[i], scale);
        CHECK(back[i] == kv_fp8_decode_half(row[i], scale));
    }
    CHECK_NEAR(kv_fp8_row_scale(row, KV_LORA, 0), 40.0f / 448.0f, 1e-7);
    CHECK(worst[1] < worst[0]); /* the outlier did not widen block 1's steps */
    for (int i = 0; i < ROPE; i++)
        CHECK(back[KV_LORA + i] == half_from_float_saturate(values[KV_LORA + i]));
    CHECK_INT(back[KV_LORA + 3], 0x7BFF);

    /* a latent beyond fp16: the block's scale holds it, but it reads back as +-65504 (fp16),
     * so it is counted as a saturation, as the fp16 cache counts it (with the k_pe one) */
    float huge[KV_LORA + ROPE];
    memcpy(huge, values, sizeof huge);
    huge[KV_FP8_BLOCK + 1] = 1e30f;
    huge[3 * KV_FP8_BLOCK + 2] = -1e5f;  /* its own block: read back -65504 */
    CHECK_INT(kv_fp8_encode_row(huge, KV_LORA, ROPE, row), 3);
    kv_row_to_half(KV_CACHE_FP8, row, KV_LORA, ROPE, back);
    CHECK_INT(back[KV_FP8_BLOCK + 1], 0x7BFF);
    CHECK_INT(back[3 * KV_FP8_BLOCK + 2], 0xFBFF);

    /* NaN and infinity in a block: NaN where they were, the finite neighbours unharmed */
    values[10] = NAN;
    values[11] = INFINITY;
    kv_fp8_encode_row(values, KV_LORA, ROPE, row);
    CHECK(is_nan_code(row[10]) && is_nan_code(row[11]));
    CHECK(isnan(kv_fp8_decode(row[10], kv_fp8_row_scale(row, KV_LORA, 0))));
    CHECK_NEAR(kv_fp8_decode(row[5], kv_fp8_row_scale(row, KV_LORA, 0)), 40.0f, 0.05f);

    /* an all-zero block decodes to zeros */
    float zeros[KV_LORA + ROPE] = {0};
    kv_fp8_encode_row(zeros, KV_LORA, ROPE, row);
    kv_row_to_half(KV_CACHE_FP8, row, KV_LORA, ROPE, back);
    bad = 0;
    for (int i = 0; i < KV_LORA + ROPE; i++)
        bad += back[i] != 0;
    CHECK_INT(bad, 0);
    return check_finish();
}
