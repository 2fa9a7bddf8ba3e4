/* test_moe_routing: expert choice on hand-made scores: the bias picks but does not weigh,
 * ties go to the lower index, norm_topk_prob and routed_scaling_factor, and group-limited
 * choice (groups scored by their two best biased scores). */
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
    return check_finish();
}
