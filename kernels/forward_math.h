/* forward_math: the per-element math of the forward pass (RMSNorm scale, SiLU gate, rotary
 * pair rotation, router sigmoid, expert-group score, routing weight normalisation), written
 * once for the CPU kernels (C) and the CUDA kernels (__host__ __device__) so both backends
 * run the same formulas in the same order. */
#ifndef KIMI_KERNELS_FORWARD_MATH_H
#define KIMI_KERNELS_FORWARD_MATH_H

#include <math.h>

#include "kernels/nvfp4_math.h"

/* 1 / sqrt(mean(x^2) + eps) from the sum of squares (taken in double) of n elements. */
static inline KIMI_HOST_DEVICE float rmsnorm_inverse_rms(double sum_squares, int n, float eps)
{
    return (float)(1.0 / sqrt(sum_squares / n + eps));
}

/* One normalised element: x * inverse_rms * weight, rounded after each product. */
static inline KIMI_HOST_DEVICE float rmsnorm_element(float x, float inverse_rms, float weight)
{
    float scaled = x * inverse_rms;
    return scaled * weight;
}

/* silu(gate) * up, silu(g) = g / (1 + e^-g). */
static inline KIMI_HOST_DEVICE float silu_gate_element(float gate, float up)
{
    float silu = gate / (1.0f + expf(-gate));
    return silu * up;
}

/* Rotate the pair (x[0], x[1]) by the angle whose (scaled) cosine and sine are c and s. */
static inline KIMI_HOST_DEVICE void rope_rotate_pair(float *even, float *odd, float c, float s)
{
    float e = *even, o = *odd;
    float ec = e * c, os = o * s, es = e * s, oc = o * c;
    *even = ec - os;
    *odd = es + oc;
}

/* The router's score of one expert. */
static inline KIMI_HOST_DEVICE float moe_sigmoid(float logit)
{
    return 1.0f / (1.0f + expf(-logit));
}

/* A group's score: the sum of its two best biased scores (the best alone for a group of one). */
static inline KIMI_HOST_DEVICE float moe_group_score(const float *member, int group_size)
{
    float best = -INFINITY, second = -INFINITY;
    for (int j = 0; j < group_size; j++) {
        if (member[j] > best) {
            second = best;
            best = member[j];
        } else if (member[j] > second) {
            second = member[j];
        }
    }
    return group_size > 1 ? best + second : best;
}

/* weights [top_k] (the chosen experts' unbiased scores, in choice order) -> divided by their
 * sum (summed in choice order) when norm_topk_prob, then times routed_scaling_factor. */
static inline KIMI_HOST_DEVICE void moe_finish_weights(float *weights, int top_k, int norm_topk_prob,
                                                      float routed_scaling_factor)
{
    float sum = 0.0f;
    for (int k = 0; k < top_k; k++)
        sum += weights[k];
    for (int k = 0; k < top_k; k++) {
        if (norm_topk_prob && sum > 0.0f)
            weights[k] /= sum;
        weights[k] *= routed_scaling_factor;
    }
}

#endif
