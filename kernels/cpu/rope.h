/* rope: interleaved rotary position embedding with YaRN scaling (DeepSeek-V3 / Kimi), and the
 * attention softmax scale that YaRN adjusts. */
#ifndef KIMI_KERNELS_CPU_ROPE_H
#define KIMI_KERNELS_CPU_ROPE_H

enum { ROPE_MAX_DIM = 256 };

typedef struct {
    int dim;                    /* rotated width (qk_rope_head_dim), even, <= ROPE_MAX_DIM */
    double theta;               /* rope_theta */
    int yarn;                   /* 0: plain RoPE (the fields below are ignored) */
    double factor;              /* rope_scaling.factor */
    int original_max;           /* original_max_position_embeddings */
    double beta_fast, beta_slow, mscale, mscale_all_dim;
} rope_config;

typedef struct {
    int dim;
    double inv_freq[ROPE_MAX_DIM / 2];  /* radians per position of pair i */
    double cos_sin_scale;               /* YaRN m(f, mscale) / m(f, mscale_all_dim); 1 without */
} rope_table;

/* Returns 0, or -1 when dim is odd, zero or above ROPE_MAX_DIM. */
int rope_table_init(rope_table *table, const rope_config *config);

/* cos/sin [dim/2] of position pos, both already multiplied by cos_sin_scale. */
void rope_cos_sin(const rope_table *table, long pos, float *cos_out, float *sin_out);

/* Rotate the pairs (x[2i], x[2i+1]) of x [dim] by the angles of cos/sin [dim/2]. */
void rope_apply(float *x, const float *cos_in, const float *sin_in, int dim);

/* (qk_head_dim)^-0.5 * m(f, mscale_all_dim)^2: the scale of q.k before the softmax. */
float rope_softmax_scale(const rope_config *config, int qk_head_dim);

#endif
