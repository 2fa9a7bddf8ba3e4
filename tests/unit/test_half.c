/* test_half: the vectorised fp16 row conversions give exactly numeric's scalar results, for all
 * 65536 halves (NaN payloads included) and for floats around every rounding boundary. */
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
    float_row_to_f16(probes, 3 * 65536, rounded);
    bad = 0;
    for (int i = 0; i < 3 * 65536; i++)
        bad += rounded[i] != float_to_f16(probes[i]);
    CHECK_MSG(bad == 0, "%d floats round differently from float_to_f16", bad);
    CHECK_INT(rounded[3 * 0x3C00], 0x3C00);
    return check_finish();
}
