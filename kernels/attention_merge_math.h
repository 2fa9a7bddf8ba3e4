/* attention_merge_math: the exact merge of partial attentions (log-sum-exp rescaling), written
 * once for the CPU kernels (C) and the CUDA kernels (__host__ __device__): the split-K decode
 * kernels merge the parts of one sequence with it, and decode context parallelism merges the
 * parts that each rank computed over its own positions.
 *
 * A part is one head's attention over some of the positions, ATTENTION_PART_FLOATS(width)
 * floats: [max score m | sum of e^(score - m) l | acc[width] = sum of e^(score - m) * value].
 * An empty part has l == 0 exactly (and m == -inf, acc all 0); a part with positions has l >= 1,
 * or NaN when a score was not finite (a NaN or infinity in the cache): such a part is merged, not
 * skipped, so that the output is NaN as the attention over all positions at once would be and the
 * backend's non-finite check sees it. The merge of parts s is
 *   out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s,   M = max_s m_s. */
#ifndef KIMI_KERNELS_ATTENTION_MERGE_MATH_H
#define KIMI_KERNELS_ATTENTION_MERGE_MATH_H

#include <math.h>
#include <stddef.h>

#include "kernels/nvfp4_math.h"

#define ATTENTION_PART_FLOATS(width) ((size_t)(width) + 2)

/* M over n_parts parts, part s at parts + s * part_stride floats. */
static inline KIMI_HOST_DEVICE float attention_parts_max(const float *parts, int n_parts, size_t part_stride)
{
    float global_max = -INFINITY;
    for (int s = 0; s < n_parts; s++)
        global_max = fmaxf(global_max, parts[(size_t)s * part_stride]);
    return global_max;
}

/* e^(m_s - M) for a part that holds positions, 0 for an empty one. */
static inline KIMI_HOST_DEVICE float attention_part_weight(const float *part, float global_max)
{
    return part[1] != 0.0f ? expf(part[0] - global_max) : 0.0f;
}

/* sum_s e^(m_s - M) l_s, summed in part order: the l of the parts merged into one part. */
static inline KIMI_HOST_DEVICE float attention_parts_total(const float *parts, int n_parts, size_t part_stride,
                                                           float global_max)
{
    float total = 0.0f;
    for (int s = 0; s < n_parts; s++) {
        const float *part = parts + (size_t)s * part_stride;
        if (part[1] != 0.0f)
            total += part[1] * attention_part_weight(part, global_max);
    }
    return total;
}

/* 1 / sum_s e^(m_s - M) l_s. */
static inline KIMI_HOST_DEVICE float attention_parts_inverse_total(const float *parts, int n_parts, size_t part_stride,
                                                                   float global_max)
{
    return 1.0f / attention_parts_total(parts, n_parts, part_stride, global_max);
}

/* Element c of the merged output, summed in part order (inverse_total 1: element c of the merged
 * part's acc, unnormalised). */
static inline KIMI_HOST_DEVICE float attention_parts_merge_element(const float *parts, int n_parts, size_t part_stride,
                                                                   float global_max, float inverse_total, int c)
{
    float sum = 0.0f;
    for (int s = 0; s < n_parts; s++) {
        const float *part = parts + (size_t)s * part_stride;
        if (part[1] != 0.0f)
            sum += part[2 + c] * attention_part_weight(part, global_max);
    }
    return sum * inverse_total;
}

#endif
