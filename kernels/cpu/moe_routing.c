/* moe_routing: s = sigmoid(logit) in float; the choice ranks s + bias, the weights use s. With
 * n_group > 1 a group scores the sum of its two best biased scores, and experts outside the
 * topk_group best groups cannot be chosen. Selection is repeated arg-max under the rule of
 * kernels/moe_routing_math.h (NaN ranks as -inf, equal keys go to the lower index, a chosen
 * key is marked taken), which the CUDA kernel follows too. */
#include "kernels/cpu/moe_routing.h"

#include <math.h>

#include "kernels/forward_math.h"

size_t moe_route_scratch_floats(const moe_routing_config *c)
{
    return 2 * (size_t)c->experts + (size_t)c->n_group;
}

/* Index of the best-ranked key of keys[0..n) not yet taken, or -1. */
static int arg_max_untaken(const float *keys, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (moe_rank_better(keys[i], i, best >= 0 ? keys[best] : 0.0f, best))
            best = i;
    return best;
}

void moe_route(const moe_routing_config *c, const float *logits, const float *bias,
               float *scratch, int *chosen, float *weights)
{
    int experts = c->experts, groups = c->n_group > 1 ? c->n_group : 1;
    int group_size = experts / groups;
    float *score = scratch;                     /* [experts] sigmoid */
    float *key = score + experts;               /* [experts] rank key of score + bias; taken once chosen */
    float *group_key = key + experts;           /* [groups] */

    for (int e = 0; e < experts; e++) {
        score[e] = moe_sigmoid(logits[e]);
        key[e] = moe_rank_key(score[e] + (bias ? bias[e] : 0.0f));
    }
    if (groups > 1) {
        for (int g = 0; g < groups; g++)
            group_key[g] = moe_rank_key(moe_group_score(key + (size_t)g * group_size, group_size));
        /* the kept groups are marked taken in group_key, then the others' experts in key */
        for (int k = 0; k < c->topk_group && k < groups; k++)
            group_key[arg_max_untaken(group_key, groups)] = MOE_RANK_TAKEN;
        for (int e = 0; e < experts; e++)
            if (!moe_rank_is_taken(group_key[e / group_size]))
                key[e] = MOE_RANK_TAKEN;
    }

    /* The config check guarantees topk_group * group_size >= top_k, so an untaken expert is
     * always left. */
    for (int k = 0; k < c->top_k; k++) {
        int best = arg_max_untaken(key, experts);
        chosen[k] = best;
        key[best] = MOE_RANK_TAKEN;
        weights[k] = score[best];
    }
    moe_finish_weights(weights, c->top_k, c->norm_topk_prob, c->routed_scaling_factor);
}
