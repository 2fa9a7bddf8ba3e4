/* test_half: the vectorised fp16 row conversions give exactly numeric's scalar results, for all
 * 65536 halves (NaN payloads included) and for floats around every rounding boundary, except
 * that the cache row saturates: finite values past 65504 become +-65504 (counted), never inf. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/half.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/check.h"

int main(void)
{
    static uint16_t halves[65536];
    static float floats[65536];
    for (int i = 0; i < 65536; i++)
        halves[i] = (uint16_t)i;
    f16_row_to_float(halves, 65536, floats);
    int bad = 0;
    for (int i = 0; i < 65536; i++) {
        float want = f16_to_float((uint16_t)i);
        bad += memcmp(&want, &floats[i], sizeof want) != 0;
    }
    CHECK_MSG(bad == 0, "%d halves decode differently from f16_to_float", bad);
    CHECK(floats[0x3C00] == 1.0f);
    CHECK(floats[0x0001] == 0x1p-24f);
    CHECK(floats[0xFBFF] == -65504.0f);

    /* Every half, and the floats halfway between neighbours, back to fp16. */
    static float probes[3 * 65536];
    static uint16_t rounded[3 * 65536];
    for (int i = 0; i < 65536; i++) {
        uint32_t bits;
        memcpy(&bits, &floats[i], 4);
        probes[3 * i] = floats[i];
        uint32_t up = bits + (1u << 12), down = bits - (1u << 12); /* half an fp16 ulp of a normal */
        memcpy(&probes[3 * i + 1], &up, 4);
        memcpy(&probes[3 * i + 2], &down, 4);
    }
    size_t clamped = float_row_to_f16_saturate(probes, 3 * 65536, rounded);
    bad = 0;
    size_t overflows = 0;
    for (int i = 0; i < 3 * 65536; i++) {
        uint16_t want = float_to_f16(probes[i]);
        int saturates = (want & 0x7FFF) == 0x7C00 && (probes[i] - probes[i] == 0.0f);
        overflows += (size_t)saturates;
        bad += rounded[i] != (saturates ? (uint16_t)((want & 0x8000) | 0x7BFF) : want);
    }
    CHECK_MSG(bad == 0, "%d floats round differently from float_to_f16 (saturated)", bad);
    CHECK_INT(clamped, overflows);
    CHECK(overflows > 0);
    CHECK_INT(rounded[3 * 0x3C00], 0x3C00);

    /* The boundary: 65519.99 rounds down to 65504 unclamped, 65520 (rounding to infinity) and
     * beyond clamp, infinities and NaN are not finite overflows and stay as they are. */
    float edge[7] = {65519.99f, 65520.0f, 1e10f, -3e38f, INFINITY, -INFINITY, NAN};
    uint16_t out[7];
    CHECK_INT(float_row_to_f16_saturate(edge, 7, out), 3);
    CHECK_INT(out[0], 0x7BFF);
    CHECK_INT(out[1], 0x7BFF);
    CHECK_INT(out[2], 0x7BFF);
    CHECK_INT(out[3], 0xFBFF);
    CHECK_INT(out[4], 0x7C00);
    CHECK_INT(out[5], 0xFC00);
    CHECK((out[6] & 0x7C00) == 0x7C00 && (out[6] & 0x3FF));
    return check_finish();
}
