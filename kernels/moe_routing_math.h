/* moe_routing_math: the router's configuration and its ranking rule, shared by the CPU routing
 * kernel (kernels/cpu/moe_routing.h) and the CUDA one (kernels/cuda/forward.h), so both choose
 * the same experts whatever the scores, non-finite ones included. */
#ifndef KIMI_KERNELS_MOE_ROUTING_MATH_H
#define KIMI_KERNELS_MOE_ROUTING_MATH_H

#include <math.h>

#include "kernels/nvfp4_math.h"

typedef struct {
    int experts;                /* n_routed_experts */
    int top_k;                  /* num_experts_per_tok */
    int n_group, topk_group;    /* groups of experts/n_group; keep the topk_group best groups */
    int norm_topk_prob;         /* divide the chosen scores by their sum */
    float routed_scaling_factor;
} moe_routing_config;

/* The ranking rule for experts and groups. A score's rank key is the score, except that NaN
 * ranks as -inf (so a NaN is chosen only when nothing better is left, whatever its index, and
 * +inf/-inf rank as themselves). Keys are then ranked by '>', equal keys by the lower index.
 * A key already chosen (or excluded) is replaced by MOE_RANK_TAKEN, a NaN, which no candidate
 * test accepts: an expert is chosen at most once per token whatever the scores. */
#define MOE_RANK_TAKEN NAN

static inline KIMI_HOST_DEVICE float moe_rank_key(float score)
{
    return score != score ? -INFINITY : score;
}

static inline KIMI_HOST_DEVICE int moe_rank_is_taken(float key)
{
    return key != key;
}

/* Whether candidate (key, index) ranks above the best so far (best_index < 0: none yet). */
static inline KIMI_HOST_DEVICE int moe_rank_better(float key, int index, float best_key, int best_index)
{
    if (index < 0 || moe_rank_is_taken(key))
        return 0;
    return best_index < 0 || key > best_key || (key == best_key && index < best_index);
}

#endif
