/* test_moe_routing: expert choice on hand-made scores: the bias picks but does not weigh,
 * ties go to the lower index, norm_topk_prob and routed_scaling_factor, group-limited
 * choice (groups scored by their two best biased scores), and the one rule for non-finite
 * scores (kernels/moe_routing_math.h): NaN ranks as -inf whatever the expert's index, +inf
 * first, and no expert is ever chosen twice. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/moe_routing.h"
#include "tests/unit/check.h"

static float logit_of(double s)
{
    return (float)log(s / (1.0 - s)); /* sigmoid^-1 */
}

int main(void)
{
    float scratch[64], logits[8], bias[8] = {0}, weights[4];
    int chosen[4];
    double s[8] = {0.1, 0.9, 0.5, 0.7, 0.3, 0.7, 0.2, 0.6};
    for (int e = 0; e < 8; e++)
        logits[e] = logit_of(s[e]);

    moe_routing_config c = {8, 3, 1, 1, 1, 2.5f};
    moe_route(&c, logits, NULL, scratch, chosen, weights);
    /* 0.9 (1), then the tie 0.7 at 3 and 5: index 3 first */
    CHECK_INT(chosen[0], 1);
    CHECK_INT(chosen[1], 3);
    CHECK_INT(chosen[2], 5);
    CHECK_NEAR(weights[0], 0.9 / 2.3 * 2.5, 1e-6);
    CHECK_NEAR(weights[1], 0.7 / 2.3 * 2.5, 1e-6);

    /* A bias lifts expert 0 into the choice; its weight still comes from s = 0.1. */
    bias[0] = 0.75f;
    moe_route(&c, logits, bias, scratch, chosen, weights);
    CHECK_INT(chosen[0], 1);
    CHECK_INT(chosen[1], 0);
    CHECK_INT(chosen[2], 3);
    CHECK_NEAR(weights[1], 0.1 / 1.7 * 2.5, 1e-6);

    /* Without normalisation the weights are s times the scaling factor. */
    c.norm_topk_prob = 0;
    moe_route(&c, logits, NULL, scratch, chosen, weights);
    CHECK_NEAR(weights[0], 0.9 * 2.5, 1e-6);

    /* Four groups of two: sums of the two biased scores 1.0, 1.2, 1.0, 0.8. Keeping 2 groups
     * keeps group 1 (1.2) and group 0 (1.0, the lower index of the tie with group 2), so the
     * top expert of group 2 (0.7 at 5) cannot be chosen. */
    bias[0] = 0;
    c = (moe_routing_config){8, 3, 4, 2, 1, 1.0f};
    moe_route(&c, logits, bias, scratch, chosen, weights);
    CHECK_INT(chosen[0], 1);
    CHECK_INT(chosen[1], 3);
    CHECK_INT(chosen[2], 2);
    CHECK_NEAR(weights[0] + weights[1] + weights[2], 1.0, 1e-6);
    CHECK(moe_route_scratch_floats(&c) <= sizeof scratch / sizeof *scratch);

    /* The group score uses the biased scores: a bias on expert 6 lifts group 3 to 1.8, so
     * groups 3 and 1 are kept and expert 1 (0.9, group 0) is out. */
    bias[6] = 1.0f;
    moe_route(&c, logits, bias, scratch, chosen, weights);
    CHECK_INT(chosen[0], 6);
    CHECK_INT(chosen[1], 3);
    CHECK_INT(chosen[2], 7);
    CHECK_NEAR(weights[0], 0.2 / 1.5, 1e-6);

    /* Every score NaN: three distinct experts (the lowest indices), their weights NaN, so the
     * layer's output is non-finite and the request fails rather than reading one expert 3 times. */
    c = (moe_routing_config){8, 3, 1, 1, 1, 1.0f};
    float nan_logits[8];
    for (int e = 0; e < 8; e++)
        nan_logits[e] = NAN;
    moe_route(&c, nan_logits, NULL, scratch, chosen, weights);
    CHECK(chosen[0] == 0 && chosen[1] == 1 && chosen[2] == 2);
    CHECK(isnan(weights[0]));
    c = (moe_routing_config){8, 3, 4, 2, 1, 1.0f};
    moe_route(&c, nan_logits, NULL, scratch, chosen, weights);
    CHECK(chosen[0] == 0 && chosen[1] == 1 && chosen[2] == 2);

    /* One NaN score is never chosen while finite ones are left, whichever expert has it. */
    c = (moe_routing_config){8, 3, 1, 1, 1, 1.0f};
    for (int poisoned = 0; poisoned < 8; poisoned++) {
        float one_nan[8];
        for (int e = 0; e < 8; e++)
            one_nan[e] = e == poisoned ? NAN : logits[e];
        moe_route(&c, one_nan, NULL, scratch, chosen, weights);
        CHECK_MSG(chosen[0] != poisoned && chosen[1] != poisoned && chosen[2] != poisoned,
                  "NaN at expert %d was chosen", poisoned);
        CHECK(isfinite(weights[0]) && isfinite(weights[1]) && isfinite(weights[2]));
    }

    /* +inf biased scores come first (the lower index first), -inf ones rank above NaN only by
     * index: all -inf gives the lowest indices, each once. */
    float inf_bias[8] = {0, 0, 0, 0, INFINITY, 0, INFINITY, 0};
    moe_route(&c, logits, inf_bias, scratch, chosen, weights);
    CHECK(chosen[0] == 4 && chosen[1] == 6 && chosen[2] == 1);
    for (int e = 0; e < 8; e++)
        inf_bias[e] = -INFINITY;
    moe_route(&c, logits, inf_bias, scratch, chosen, weights);
    CHECK(chosen[0] == 0 && chosen[1] == 1 && chosen[2] == 2);
    float inf_logits[8] = {-INFINITY, INFINITY, NAN, INFINITY, -INFINITY, NAN, 0, INFINITY};
    moe_route(&c, inf_logits, NULL, scratch, chosen, weights);
    CHECK(chosen[0] == 1 && chosen[1] == 3 && chosen[2] == 7);
    CHECK_NEAR(weights[0], 1.0 / 3, 1e-6);
    return check_finish();
}
