/* elementwise: RMSNorm, SiLU gate, scaled accumulation. Sums of squares are taken in
 * double: it costs nothing at these sizes and keeps the norm independent of summation order. */
#include "kernels/cpu/elementwise.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/numeric.h"
#include "kernels/forward_math.h"

static float vector_element(const weight_vector *v, int i)
{
    uint16_t bits;
    float value;
    switch (v->type) {
    case DTYPE_BF16:
        memcpy(&bits, (const uint8_t *)v->data + 2 * (size_t)i, 2);
        return bf16_to_float(bits);
    case DTYPE_F16:
        memcpy(&bits, (const uint8_t *)v->data + 2 * (size_t)i, 2);
        return f16_to_float(bits);
    default:
        memcpy(&value, (const uint8_t *)v->data + 4 * (size_t)i, 4);
        return value;
    }
}

void rmsnorm(float *out, const float *x, const weight_vector *weight, float eps)
{
    int n = weight->n;
    double sum_squares = 0.0;
    for (int i = 0; i < n; i++)
        sum_squares += (double)x[i] * x[i];
    float inverse_rms = rmsnorm_inverse_rms(sum_squares, n, eps);
    for (int i = 0; i < n; i++)
        out[i] = rmsnorm_element(x[i], inverse_rms, vector_element(weight, i));
}

void silu_gate(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = silu_gate_element(gate[i], up[i]);
}

void accumulate_scaled(float *y, const float *x, float scale, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += scale * x[i];
}
