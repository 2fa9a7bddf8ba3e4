/* test_elementwise: RMSNorm (BF16, F16, F32 weights), SiLU gate and scaled accumulation
 * against float64 evaluations of their definitions. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/check.h"

enum { N = 67 };

int main(void)
{
    float x[N], out[N], w32[N];
    uint16_t w16[N], wbf[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)sin(i * 0.7) * (1.0f + i % 5);
        w32[i] = 0.5f + 0.01f * i;
        w16[i] = float_to_f16(w32[i]);
        uint32_t bits;
        memcpy(&bits, &w32[i], 4);
        wbf[i] = (uint16_t)(bits >> 16);
    }
    double squares = 0;
    for (int i = 0; i < N; i++)
        squares += (double)x[i] * x[i];
    double inverse_rms = 1.0 / sqrt(squares / N + 1e-5);
    const weight_vector vectors[3] = {{DTYPE_F32, N, w32}, {DTYPE_F16, N, w16}, {DTYPE_BF16, N, wbf}};
    for (int v = 0; v < 3; v++) {
        float weight[N];
        weight_vector_decode(&vectors[v], weight);
        rmsnorm(out, x, &vectors[v], 1e-5f);
        double worst = 0;
        for (int i = 0; i < N; i++)
            worst = fmax(worst, fabs(out[i] - x[i] * inverse_rms * weight[i]));
        CHECK_MSG(worst < 1e-6, "rmsnorm with weight dtype %d: error %g", v, worst);
    }
    float in_place[N];
    memcpy(in_place, x, sizeof x);
    rmsnorm(in_place, in_place, &vectors[0], 1e-5f);
    rmsnorm(out, x, &vectors[0], 1e-5f);
    CHECK(!memcmp(in_place, out, sizeof out));

    float gate[N], up[N];
    for (int i = 0; i < N; i++) {
        gate[i] = (i - N / 2) * 0.3f;
        up[i] = 1.0f + 0.1f * i;
    }
    silu_gate(out, gate, up, N);
    double worst = 0;
    for (int i = 0; i < N; i++)
        worst = fmax(worst, fabs(out[i] - gate[i] / (1.0 + exp(-(double)gate[i])) * up[i]));
    CHECK_MSG(worst < 1e-5, "silu_gate error %g", worst);
    CHECK_NEAR(out[N / 2], 0.0, 0);

    float y[4] = {1, 2, 3, 4}, d[4] = {1, -1, 0.5f, 2};
    accumulate_scaled(y, d, 2.0f, 4);
    CHECK_NEAR(y[0], 3, 0);
    CHECK_NEAR(y[1], 0, 0);
    CHECK_NEAR(y[2], 4, 0);
    CHECK_NEAR(y[3], 8, 0);
    return check_finish();
}
