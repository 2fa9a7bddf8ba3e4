/* elementwise: the per-token vector operations of the forward pass (RMSNorm, SiLU gate,
 * scaled accumulation), float32 in and out. (The attention softmax is fused into
 * mla_attention.) */
#ifndef KIMI_KERNELS_CPU_ELEMENTWISE_H
#define KIMI_KERNELS_CPU_ELEMENTWISE_H

#include "kernels/tensor.h"

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], i < weight->n (out may alias x). */
void rmsnorm(float *out, const float *x, const weight_vector *weight, float eps);

/* out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g) (out may alias gate or up). */
void silu_gate(float *out, const float *gate, const float *up, int n);

/* y[i] += scale * x[i]. */
void accumulate_scaled(float *y, const float *x, float scale, int n);

#endif
