/* moe_routing: DeepSeek-V3 "noaux_tc" expert selection: sigmoid scores, a correction bias used
 * for the choice only, optional group-limited choice, renormalised and scaled weights. */
#ifndef KIMI_KERNELS_CPU_MOE_ROUTING_H
#define KIMI_KERNELS_CPU_MOE_ROUTING_H

#include <stddef.h>

#include "kernels/moe_routing_math.h"

size_t moe_route_scratch_floats(const moe_routing_config *c);

/* logits [experts] (x . router^T) and bias [experts] (NULL: none) -> chosen [top_k] expert
 * indices by descending biased score (ties: lower index first) and their weights [top_k]. */
void moe_route(const moe_routing_config *c, const float *logits, const float *bias,
               float *scratch, int *chosen, float *weights);

#endif
