/* nvfp4_encode: float -> E4M3 / E2M1 / BF16 rounding and NVFP4 row quantization as NVIDIA
 * ModelOpt does it (per-16 block scales relative to a per-tensor global scale). */
#include "tests/bench/nvfp4_encode.h"

#include <math.h>
#include <string.h>

#include "kernels/nvfp4_math.h"

uint8_t e4m3_from_float(float value)
{
    if (isnan(value))
        return 0x7F;
    uint8_t sign = signbit(value) ? 0x80 : 0;
    float magnitude = fabsf(value);
    /* Codes 0x00..0x7E are ascending: binary search the decoder itself for the neighbours. */
    unsigned low = 0, high = 0x7E;
    if (magnitude >= nvfp4_e4m3_to_float(0x7E))
        return sign | 0x7E;
    while (high - low > 1) {
        unsigned mid = (low + high) / 2;
        if (nvfp4_e4m3_to_float((uint8_t)mid) <= magnitude)
            low = mid;
        else
            high = mid;
    }
    double midpoint = ((double)nvfp4_e4m3_to_float((uint8_t)low) + nvfp4_e4m3_to_float((uint8_t)high)) / 2;
    unsigned code = magnitude < midpoint ? low : magnitude > midpoint ? high : (low & 1) ? high : low;
    return sign | (uint8_t)code;
}

/* Counting the midpoints of {0, .5, 1, 1.5, 2, 3, 4, 6} below the magnitude gives the nearest code;
 * > or >= at each midpoint sends a tie to the even code. Branch-free: this runs per weight. */
uint8_t e2m1_from_float(float value)
{
    float m = fabsf(value);
    int code = (m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) + (m >= 3.5f) + (m > 5.0f);
    return (uint8_t)((signbit(value) ? 8 : 0) | code);
}

uint16_t bf16_from_float(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((bits >> 16) | 0x40);
    bits += 0x7FFFu + ((bits >> 16) & 1);
    return (uint16_t)(bits >> 16);
}

float nvfp4_global_scale(const float *values, size_t count)
{
    float amax = 0;
    for (size_t i = 0; i < count; i++)
        amax = fmaxf(amax, fabsf(values[i]));
    return amax > 0 ? amax / (6.0f * 448.0f) : 1.0f;
}

void nvfp4_quantize_row(const float *row, int k, float scale_2, uint8_t *packed, uint8_t *scales)
{
    for (int block = 0; block < k / 16; block++) {
        const float *values = row + block * 16;
        float amax = 0;
        for (int i = 0; i < 16; i++)
            amax = fmaxf(amax, fabsf(values[i]));
        float relative_scale = amax / 6.0f / scale_2;
        uint8_t scale_code = e4m3_from_float(relative_scale > 0 ? relative_scale : 1.0f);
        scales[block] = scale_code;
        float step = nvfp4_e4m3_to_float(scale_code) * scale_2;
        for (int j = 0; j < 8; j++) {
            uint8_t low = e2m1_from_float(values[2 * j] / step);
            uint8_t high = e2m1_from_float(values[2 * j + 1] / step);
            packed[block * 8 + j] = (uint8_t)(low | (high << 4));
        }
    }
}
