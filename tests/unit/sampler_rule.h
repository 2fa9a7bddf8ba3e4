/* sampler_rule: the sampling rule of engine/runtime/sampler.h restated independently (+inf
 * certain, NaN ignored, -inf impossible), as a check of one draw (shared by test_sampler and the fuzz_sampler target): whether an id the sampler
 * returned is one the rule gives a nonzero probability. */
#ifndef KIMI_TEST_SAMPLER_RULE_H
#define KIMI_TEST_SAMPLER_RULE_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "engine/runtime/sampler.h"

/* z of sampler.h step 1: (logit - max logit) / temperature in double, then as a float (below
 * the float range: -inf). */
static inline float sampler_rule_z(float logit, double max_logit, double temperature)
{
    double z = ((double)logit - max_logit) / temperature;
    return z < -FLT_MAX ? -INFINITY : (float)z;
}

/* NULL when id may come out of sampler_sample(logits [vocab]) under p, else which part of the
 * rule it breaks. The top-p boundary is allowed a relative 1e-5 of slack for the order in
 * which probabilities are summed. */
static inline const char *sampler_rule_violation(const float *logits_in, int vocab, const sampler_params *p,
                                                 int32_t id)
{
    /* +inf is certain: with any +inf logit the +inf ids alone compete, as equals (logit 0) */
    int has_inf = 0;
    for (int i = 0; i < vocab; i++)
        has_inf |= logits_in[i] == INFINITY;
    float logits[vocab > 0 ? vocab : 1];
    for (int i = 0; i < vocab; i++)
        logits[i] = !has_inf ? logits_in[i] : logits_in[i] == INFINITY ? 0.0f : NAN;
    int32_t best = -1;
    for (int i = 0; i < vocab; i++)
        if (isfinite(logits[i]) && (best < 0 || logits[i] > logits[best]))
            best = i;
    if (best < 0)
        return id == -1 ? NULL : "no logit is finite or +inf, yet an id came back";
    if (id < 0 || id >= vocab)
        return "the id is outside the vocabulary";
    if (!isfinite(logits[id]))
        return has_inf ? "a +inf logit exists, yet the id's is not +inf" : "the id has a non-finite logit";
    if (p->temperature == 0)
        return id == best ? NULL : "greedy did not return the argmax (lowest id on ties)";

    double max_logit = logits[best], t = p->temperature;
    float z_id = sampler_rule_z(logits[id], max_logit, t);
    if (!(exp((double)z_id) > 0))
        return "the id has probability 0";

    /* Top-k ranks by z, larger first, the lower id on ties. */
    long ahead = 0;
    for (int i = 0; i < vocab; i++) {
        if (!isfinite(logits[i]))
            continue;
        float z = sampler_rule_z(logits[i], max_logit, t);
        ahead += z > z_id || (z == z_id && i < id);
    }
    if (p->top_k > 0 && ahead >= p->top_k)
        return "the id is outside the top-k set";
    if (p->top_p >= 1)
        return NULL;

    /* Top-p ranks the top-k set by probability p = exp(z) as a float (distinct z can share
     * one p), larger first, the lower id on ties; the pick must not come after a prefix that
     * already holds top_p of the set's mass. */
    float p_id = expf(z_id);
    double mass_ahead = 0, total = 0;
    for (int i = 0; i < vocab; i++) {
        if (!isfinite(logits[i]))
            continue;
        float z = sampler_rule_z(logits[i], max_logit, t);
        if (p->top_k > 0) {
            long rank = 0;
            for (int j = 0; j < vocab && rank < p->top_k; j++) {
                if (!isfinite(logits[j]))
                    continue;
                float zj = sampler_rule_z(logits[j], max_logit, t);
                rank += zj > z || (zj == z && j < i);
            }
            if (rank >= p->top_k)
                continue;
        }
        float w = expf(z);
        total += w;
        if (w > p_id || (w == p_id && i < id))
            mass_ahead += w;
    }
    if (mass_ahead >= (double)p->top_p * total * (1 + 1e-5))
        return "the id is outside the top-p nucleus";
    return NULL;
}

#endif
