/* test_rope: YaRN frequencies, cos/sin scale and softmax scale against values computed
 * independently with python3 from the formulas in docs/MODEL_FORMAT.md (Kimi-K2.5's settings:
 * dim 64, theta 50000, factor 64, original 4096, beta 32/1; and a variant with factor 32,
 * mscale 1, mscale_all_dim 0.707), and the interleaved pair rotation. */
#include <math.h>

#include "kernels/cpu/rope.h"
#include "tests/unit/check.h"

int main(void)
{
    rope_config kimi = {64, 50000.0, 1, 64.0, 4096, 32.0, 1.0, 1.0, 1.0};
    rope_table t;
    CHECK_INT(rope_table_init(&t, &kimi), 0);
    /* python3: correction range [8, 20]; inv_freq[i] for i = 0, 5, 10, 11, 20, 31 */
    CHECK_NEAR(t.inv_freq[0], 1.0, 1e-15);
    CHECK_NEAR(t.inv_freq[5] / 0.18441062375976633, 1.0, 1e-12);
    CHECK_NEAR(t.inv_freq[10] / 0.028427959083084944, 1.0, 1e-12);
    CHECK_NEAR(t.inv_freq[11] / 0.018282955605182935, 1.0, 1e-12);
    CHECK_NEAR(t.inv_freq[20] / 1.8070233867863153e-05, 1.0, 1e-12);
    CHECK_NEAR(t.inv_freq[31] / 4.3822064557949375e-07, 1.0, 1e-12);
    CHECK_NEAR(t.cos_sin_scale, 1.0, 0);
    CHECK_NEAR(rope_softmax_scale(&kimi, 192), 0.14467962580268923, 1e-7);

    float cos_v[32], sin_v[32];
    rope_cos_sin(&t, 1000, cos_v, sin_v);
    CHECK_NEAR(cos_v[11], 0.8437306846008256, 1e-7);
    CHECK_NEAR(sin_v[11], -0.5367667387823338, 1e-7);
    CHECK_NEAR(cos_v[0], cos(1000.0), 1e-7);

    rope_config variant = {16, 50000.0, 1, 32.0, 4096, 32.0, 1.0, 1.0, 0.707};
    CHECK_INT(rope_table_init(&t, &variant), 0);
    /* python3: correction range [2, 5] */
    CHECK_NEAR(t.inv_freq[1] / 0.2586001363063102, 1.0, 1e-12);
    CHECK_NEAR(t.inv_freq[3] / 0.01170923094929969, 1.0, 1e-12);
    CHECK_NEAR(t.inv_freq[7] / 2.4168587415580154e-06, 1.0, 1e-12);
    CHECK_NEAR(t.cos_sin_scale, 1.0815612985589222, 1e-12);
    CHECK_NEAR(rope_softmax_scale(&variant, 48), 0.2237367315555406, 1e-7);
    rope_cos_sin(&t, 0, cos_v, sin_v);
    CHECK_NEAR(cos_v[0], 1.0815612985589222, 1e-7); /* position 0: cos 1 times the mscale ratio */
    CHECK_NEAR(sin_v[0], 0.0, 0);

    rope_config plain = {8, 10000.0, 0, 0, 0, 0, 0, 0, 0};
    CHECK_INT(rope_table_init(&t, &plain), 0);
    CHECK_NEAR(t.inv_freq[1], 0.1, 1e-15); /* 10000^(-2/8) */
    CHECK_NEAR(rope_softmax_scale(&plain, 64), 0.125, 1e-9);

    /* Pairs (2i, 2i+1) rotate; a quarter turn maps (1, 2) to (-2, 1). */
    float x[4] = {1, 2, 3, 4}, c[2] = {0, 1}, s[2] = {1, 0};
    rope_apply(x, c, s, 4);
    CHECK_NEAR(x[0], -2, 1e-7);
    CHECK_NEAR(x[1], 1, 1e-7);
    CHECK_NEAR(x[2], 3, 0);
    CHECK_NEAR(x[3], 4, 0);

    rope_config odd = {7, 10000.0, 0, 0, 0, 0, 0, 0, 0};
    CHECK(rope_table_init(&t, &odd) != 0);
    return check_finish();
}
