/* rope: YaRN as in DeepSeek-V3: frequencies between the correction range [low, high] are
 * blended from interpolated (inv/f) to original ones, and cos/sin carry the mscale ratio.
 * Angles and their cosines are computed in double and rounded once to float. */
#include "kernels/cpu/rope.h"

#include <math.h>

#include "kernels/forward_math.h"

static double yarn_mscale(double factor, double mscale)
{
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* The pair index whose wavelength completes `rotations` turns over the original length. */
static double yarn_correction_dim(double rotations, int dim, double theta, int original_max)
{
    return dim * log(original_max / (rotations * 2.0 * M_PI)) / (2.0 * log(theta));
}

int rope_table_init(rope_table *table, const rope_config *config)
{
    int dim = config->dim;
    if (dim <= 0 || dim % 2 || dim > ROPE_MAX_DIM)
        return -1;
    table->dim = dim;
    table->cos_sin_scale = 1.0;
    for (int i = 0; i < dim / 2; i++)
        table->inv_freq[i] = 1.0 / pow(config->theta, (double)(2 * i) / dim);
    if (!config->yarn)
        return 0;
    double low = floor(yarn_correction_dim(config->beta_fast, dim, config->theta, config->original_max));
    double high = ceil(yarn_correction_dim(config->beta_slow, dim, config->theta, config->original_max));
    low = low < 0 ? 0 : low;
    high = high > dim - 1 ? dim - 1 : high;
    if (low == high)
        high += 0.001;
    for (int i = 0; i < dim / 2; i++) {
        double ramp = (i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double original = table->inv_freq[i];
        table->inv_freq[i] = original / config->factor * ramp + original * (1.0 - ramp);
    }
    table->cos_sin_scale = yarn_mscale(config->factor, config->mscale) /
                           yarn_mscale(config->factor, config->mscale_all_dim);
    return 0;
}

void rope_cos_sin(const rope_table *table, long pos, float *cos_out, float *sin_out)
{
    for (int i = 0; i < table->dim / 2; i++) {
        double angle = (double)pos * table->inv_freq[i];
        cos_out[i] = (float)(cos(angle) * table->cos_sin_scale);
        sin_out[i] = (float)(sin(angle) * table->cos_sin_scale);
    }
}

void rope_apply(float *x, const float *cos_in, const float *sin_in, int dim)
{
    for (int i = 0; i < dim / 2; i++)
        rope_rotate_pair(&x[2 * i], &x[2 * i + 1], cos_in[i], sin_in[i]);
}

float rope_softmax_scale(const rope_config *config, int qk_head_dim)
{
    double scale = 1.0 / sqrt((double)qk_head_dim);
    if (config->yarn) {
        double m = yarn_mscale(config->factor, config->mscale_all_dim);
        scale *= m * m;
    }
    return (float)scale;
}
