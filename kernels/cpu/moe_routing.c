/* moe_routing: s = sigmoid(logit) in float; the choice ranks s + bias, the weights use s. With
 * n_group > 1 a group scores the sum of its two best biased scores, and experts outside the
 * topk_group best groups cannot be chosen. Selection is repeated arg-max with strict '>', so
 * on equal scores the lower index wins (groups too). */
#include "kernels/cpu/moe_routing.h"

#include <math.h>

#include "kernels/forward_math.h"

size_t moe_route_scratch_floats(const moe_routing_config *c)
{
    return 2 * (size_t)c->experts + 2 * (size_t)c->n_group;
}

/* Index of the largest of values[0..n) whose taken[] flag is 0, or -1. */
static int arg_max_untaken(const float *values, const float *taken, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || values[i] > values[best]))
            best = i;
    return best;
}

void moe_route(const moe_routing_config *c, const float *logits, const float *bias,
               float *scratch, int *chosen, float *weights)
{
    int experts = c->experts, groups = c->n_group > 1 ? c->n_group : 1;
    int group_size = experts / groups;
    float *score = scratch;                     /* [experts] sigmoid */
    float *biased = score + experts;            /* [experts] score + bias; -inf once excluded */
    float *group_score = biased + experts;      /* [groups] */
    float *group_taken = group_score + groups;  /* [groups] 1 = kept (or already ranked) */

    for (int e = 0; e < experts; e++) {
        score[e] = moe_sigmoid(logits[e]);
        biased[e] = score[e] + (bias ? bias[e] : 0.0f);
    }
    if (groups > 1) {
        for (int g = 0; g < groups; g++) {
            group_score[g] = moe_group_score(biased + (size_t)g * group_size, group_size);
            group_taken[g] = 0.0f;
        }
        for (int k = 0; k < c->topk_group && k < groups; k++)
            group_taken[arg_max_untaken(group_score, group_taken, groups)] = 1.0f;
        for (int e = 0; e < experts; e++)
            if (!group_taken[e / group_size])
                biased[e] = -INFINITY;
    }

    /* A chosen (or masked) expert's biased score becomes -inf; its unbiased score stays in
     * score[]. The caller guarantees topk_group * group_size >= top_k. */
    for (int k = 0; k < c->top_k; k++) {
        int best = 0;
        for (int e = 1; e < experts; e++)
            if (biased[e] > biased[best])
                best = e;
        chosen[k] = best;
        biased[best] = -INFINITY;
        weights[k] = score[best];
    }
    moe_finish_weights(weights, c->top_k, c->norm_topk_prob, c->routed_scaling_factor);
}
