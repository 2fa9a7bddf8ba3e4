/* moe_routing_math: the router's configuration, shared by the CPU routing kernel
 * (kernels/cpu/moe_routing.h) and the CUDA one (kernels/cuda/forward.h). */
#ifndef KIMI_KERNELS_MOE_ROUTING_MATH_H
#define KIMI_KERNELS_MOE_ROUTING_MATH_H

typedef struct {
    int experts;                /* n_routed_experts */
    int top_k;                  /* num_experts_per_tok */
    int n_group, topk_group;    /* groups of experts/n_group; keep the topk_group best groups */
    int norm_topk_prob;         /* divide the chosen scores by their sum */
    float routed_scaling_factor;
} moe_routing_config;

#endif
