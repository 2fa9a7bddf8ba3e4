/* forward: the pass over a chunk of T tokens at positions p0.. on rank r of N:
 *   h = embed(tokens)                                                     [T][hidden]
 *   each layer: h += all_reduce(attention over this rank's heads)
 *               h += all_reduce(MLP or MoE over this rank's intermediate columns)
 *   logits = gather(lm_head rows of this rank's vocabulary)(rmsnorm(h[rows]))
 * Inside a rank, work is split among its workers by output rows (linears, weighted by the
 * tokens each row serves), by heads (attention) and by hidden rows (the MLP down projections
 * and their weighted sum). */
#include "engine/backend/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/cpu_profile.h"
#include "engine/backend/kv_shard.h"
#include "engine/base/monotonic.h"
#include "kernels/attention_merge_math.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_int8.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/moe_routing.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/rope.h"

typedef struct {
    weight_matrix gate, up;     /* rows [i0, i1) of the intermediate */
    weight_matrix down;         /* K columns [i0, i1) */
    int inter;                  /* i1 - i0 */
} mlp_shard;

typedef struct {
    weight_matrix q_b;          /* [heads * (nope + rope)][q_lora] of this rank's heads */
    weight_matrix kv_b;         /* [heads * (nope + v)][kv_lora] */
    weight_matrix o;            /* [hidden][heads * v] */
    mlp_shard dense;            /* dense layers */
    mlp_shard shared;           /* MoE layers; inter 0 without a shared expert */
    mlp_shard *experts;         /* MoE layers: [experts] */
    float *router_bias;         /* MoE layers with a correction bias: [experts], else NULL */
} layer_shard;

/* One MLP on some of the chunk's tokens: partial[token] += weight * mlp(x[token]). */
typedef struct {
    const mlp_shard *mlp;
    int n;                      /* tokens */
    const int *tokens;          /* [n] indices into the chunk */
    const float *weights;       /* [n] routing weights; NULL = 1 */
    const float *x;             /* [n][hidden] its inputs */
    float *act;                 /* [n][inter] gate, then silu(gate) * up */
    float *up;                  /* [n][inter] */
    float *y;                   /* [n][hidden] down projection (this rank's K share) */
} mlp_job;

typedef struct {
    const weight_matrix *w;
    const float *x;             /* [n][x_stride] */
    size_t x_stride;
    int n;
    float *y;                   /* [n][y_stride] */
    size_t y_stride;
} linear_task;

struct rank_model {
    const model_weights *mw;
    const model_config *cfg;
    int rank, tp;
    tp_shard shard;
    int heads;                  /* heads of this rank */
    layer_shard *layers;        /* [layers] */
    weight_matrix lm_head;      /* [vocab of this rank][hidden] */
    long capacity;              /* positions of the context */
    int max_tokens;
    int dcp, dcp_member;        /* the cache is sharded over dcp ranks; this rank is member dcp_member
                                   (engine/backend/kv_shard.h) */
    long slots;                 /* positions this rank stores: kv_shard_slots(capacity, dcp) */
    size_t cache_row;           /* bytes of one position's row: kv_row_bytes(mla.cache_format, ...) */
    uint8_t *cache;             /* [layers][slots][cache_row] (kernels/kv_format.h) */
    uint8_t *foreign_row;       /* [cache_row]: where the entry of a position another member stores is
                                   converted (the saturation count covers every position on every rank) */
    rope_table rope;
    mla_shape mla;
    moe_routing_config routing;
    worker_pool *pool;
    tp_comm *comm;
    linear_product product;     /* linear_rows, or linear_rows_int8 (setup's activations) */
    int nonfinite_layer;        /* rank 0: the first layer with a non-finite output (RANK_ALL_FINITE) */
    long cache_clamps;          /* fp16 cache values saturated to +-65504 */
    int profiling;              /* this step adds to cpu_profile (rank 0, one-token steps) */
    double phase_start;         /* profiling: when the current phase began */
    double phase_cpu_start;     /* profiling: the thread's CPU time then */
    double phase_bytes;         /* profiling: weight bytes its products have read so far */

    /* Activations of one chunk, T = max_tokens. */
    float *h;                   /* [T][hidden] residual stream */
    float *x;                   /* [T][hidden] normalised input of a block */
    float *q_a;                 /* [T][q_lora] */
    float *q;                   /* [T][heads][nope | rope] */
    float *kv;                  /* [T][kv_lora | rope] */
    float *attn;                /* [T][heads][v] */
    float *partial;             /* [T][hidden] this rank's share of a block's output */
    float *cos_sin;             /* [T][rope]: cos [rope/2] then sin [rope/2] */
    float *attn_scratch;        /* [workers][attn_scratch_floats] */
    /* dcp > 1 only, P = ATTENTION_PART_FLOATS(kv_lora), A = kv_lora + rope: */
    float *q_abs;               /* [T][heads][A] this rank's absorbed queries */
    float *q_group;             /* [dcp][T][heads][A] the group's, member by member */
    float *parts_send;          /* [dcp][T][heads][P] partials over this rank's positions, for member j */
    float *parts_recv;          /* [dcp][T][heads][P] partials of this rank's heads, from member s */
    size_t attn_scratch_floats;
    float *router_logits;       /* [T][experts] */
    int *chosen;                /* [T][top_k] */
    float *chosen_weight;       /* [T][top_k] */
    float *routing_scratch;
    mlp_job *jobs;              /* [experts + 1] */
    int *job_tokens;            /* [T * (top_k + 1)] */
    float *job_weights;         /* [T * (top_k + 1)] */
    int *expert_count;          /* [experts] */
    float *job_x;               /* [T * top_k][hidden] gathered routed inputs */
    float *job_y;               /* [T * (top_k + 1)][hidden] */
    float *job_act, *job_up;    /* [job_inter_floats] */
    size_t job_inter_floats;
    float *logits_x;            /* [T][hidden] */
    float *logits_part;         /* [T][vocab of this rank] */
};

/* ---- profile (engine/backend/cpu_profile.h) ---- */

static double weight_view_bytes(const weight_matrix *w)
{
    double rows = w->rows, cols = w->cols;
    switch (w->format) {
    case WEIGHT_NVFP4: return rows * (cols / 2 + cols / 16);
    case WEIGHT_BF16:
    case WEIGHT_F16: return rows * cols * 2;
    case WEIGHT_F32: return rows * cols * 4;
    }
    return 0;
}

static void profile_bytes(rank_model *m, const weight_matrix *w)
{
    if (m->profiling)
        m->phase_bytes += weight_view_bytes(w);
}

/* The phase that just ended: its time since the previous mark and the bytes counted in it. */
static void profile_mark(rank_model *m, cpu_phase phase)
{
    if (!m->profiling)
        return;
    double now = monotonic_seconds(), cpu_now = cpu_profile_thread_seconds();
    cpu_profile_add_phase(phase, now - m->phase_start, cpu_now - m->phase_cpu_start, m->phase_bytes);
    m->phase_start = now;
    m->phase_cpu_start = cpu_now;
    m->phase_bytes = 0;
}

/* ---- parallel building blocks ---- */

/* Rows of a task (starting at `offset` on the combined cost line, `cost` per row) whose
 * start falls in [c0, c1): every row goes to exactly one worker. */
static void rows_in_cost_range(long offset, int rows, long cost, long c0, long c1, int *r0, int *r1)
{
    long b = c0 - offset, e = c1 - offset;
    b = b <= 0 ? 0 : (b + cost - 1) / cost;
    e = e <= 0 ? 0 : (e + cost - 1) / cost;
    *r0 = (int)(b > rows ? rows : b);
    *r1 = (int)(e > rows ? rows : e);
}

typedef struct {
    const linear_task *tasks;
    int n_tasks;
    linear_product product;
} linear_batch;

static void linear_batch_worker(void *arg, int worker, int n_workers)
{
    const linear_batch *b = arg;
    long total = 0, offset = 0;
    for (int i = 0; i < b->n_tasks; i++)
        total += (long)b->tasks[i].w->rows * b->tasks[i].n;
    long c0 = total * worker / n_workers, c1 = total * (worker + 1) / n_workers;
    for (int i = 0; i < b->n_tasks; i++) {
        const linear_task *t = &b->tasks[i];
        int r0, r1;
        rows_in_cost_range(offset, t->w->rows, t->n, c0, c1, &r0, &r1);
        if (r0 < r1)
            b->product(t->w, t->x, t->x_stride, t->n, t->y, t->y_stride, r0, r1);
        offset += (long)t->w->rows * t->n;
    }
}

static void run_linears(rank_model *m, const linear_task *tasks, int n_tasks)
{
    for (int i = 0; i < n_tasks; i++)
        profile_bytes(m, tasks[i].w);
    linear_batch b = {tasks, n_tasks, m->product};
    worker_pool_run(m->pool, linear_batch_worker, &b);
}

static void rmsnorm_rows(float *out, const float *in, int n, int width, const weight_vector *w, float eps)
{
    for (int t = 0; t < n; t++)
        rmsnorm(out + (size_t)t * width, in + (size_t)t * width, w, eps);
}

static void add_rows(float *h, const float *delta, size_t count)
{
    for (size_t i = 0; i < count; i++)
        h[i] += delta[i];
}

static uint8_t *layer_cache(const rank_model *m, int layer)
{
    return m->cache + (size_t)layer * (size_t)m->slots * m->cache_row;
}

/* Where position pos of a layer is stored on this rank; NULL when another member stores it. */
static uint8_t *cache_entry(const rank_model *m, int layer, long pos)
{
    if (kv_shard_owner(pos, m->dcp) != m->dcp_member)
        return NULL;
    return layer_cache(m, layer) + (size_t)kv_shard_slot(pos, m->dcp) * m->cache_row;
}

/* ---- attention ---- */

typedef struct {
    rank_model *m;
    int layer, n;
    long start_pos;
    int per_token_decode;
} attention_job;

static void attention_worker(void *arg, int worker, int n_workers)
{
    const attention_job *job = arg;
    rank_model *m = job->m;
    int h0, h1;
    worker_share(m->heads, worker, n_workers, &h0, &h1);
    if (h0 == h1)
        return;
    float *scratch = m->attn_scratch + (size_t)worker * m->attn_scratch_floats;
    const weight_matrix *kv_b = &m->layers[job->layer].kv_b;
    const uint8_t *cache = layer_cache(m, job->layer);
    if (job->n == 1 || job->per_token_decode) {
        int q_width = m->cfg->qk_nope_dim + m->cfg->qk_rope_dim, v = m->cfg->v_head_dim;
        for (int t = 0; t < job->n; t++)
            mla_decode(&m->mla, kv_b, h0, h1, m->q + (size_t)t * m->heads * q_width, cache, job->start_pos + t + 1,
                       scratch, m->attn + (size_t)t * m->heads * v);
    } else
        mla_prefill(&m->mla, kv_b, h0, h1, m->q, job->n, job->start_pos, cache, scratch, m->attn);
}

/* Decode context parallelism: every token attends as a decode step does (absorbed), over the
 * cache positions spread across the group: the group's absorbed queries are gathered, each member
 * takes all of them over its own positions, and each rank merges the parts of its own heads. */
static void sharded_absorb_worker(void *arg, int worker, int n_workers)
{
    const attention_job *job = arg;
    rank_model *m = job->m;
    int h0, h1, abs_width = m->mla.kv_lora + m->mla.rope, q_width = m->mla.nope + m->mla.rope;
    worker_share(m->heads, worker, n_workers, &h0, &h1);
    for (int t = 0; h0 < h1 && t < job->n; t++)
        mla_absorb_query(&m->mla, &m->layers[job->layer].kv_b, h0, h1, m->q + (size_t)t * m->heads * q_width,
                         m->q_abs + ((size_t)t * m->heads + h0) * abs_width);
}

static void sharded_partial_worker(void *arg, int worker, int n_workers)
{
    const attention_job *job = arg;
    rank_model *m = job->m;
    int g0, g1, abs_width = m->mla.kv_lora + m->mla.rope;
    size_t part_floats = ATTENTION_PART_FLOATS(m->mla.kv_lora);
    worker_share(m->dcp * m->heads, worker, n_workers, &g0, &g1);
    float *scratch = m->attn_scratch + (size_t)worker * m->attn_scratch_floats;
    const uint8_t *cache = layer_cache(m, job->layer);
    for (int t = 0; t < job->n; t++) {
        long rows = kv_shard_local_count(job->start_pos + t + 1, m->dcp, m->dcp_member);
        /* group head g = head g % heads of member g / heads; one call per member's run of heads */
        for (int g = g0; g < g1;) {
            int member = g / m->heads, head = g % m->heads;
            int count = g1 - g < m->heads - head ? g1 - g : m->heads - head;
            size_t query = ((size_t)member * job->n + t) * m->heads + head;
            mla_decode_partial(&m->mla, m->q_group + query * abs_width, count, cache, rows, scratch,
                               m->parts_send + query * part_floats);
            g += count;
        }
    }
}

static void sharded_merge_worker(void *arg, int worker, int n_workers)
{
    const attention_job *job = arg;
    rank_model *m = job->m;
    int h0, h1, v = m->mla.v;
    size_t part_floats = ATTENTION_PART_FLOATS(m->mla.kv_lora), member_stride = (size_t)job->n * m->heads * part_floats;
    worker_share(m->heads, worker, n_workers, &h0, &h1);
    float *o_latent = m->attn_scratch + (size_t)worker * m->attn_scratch_floats; /* [kv_lora] */
    for (int t = 0; t < job->n; t++)
        for (int h = h0; h < h1; h++) {
            size_t row = (size_t)t * m->heads + h;
            mla_merge_parts(&m->mla, m->parts_recv + row * part_floats, m->dcp, member_stride, o_latent);
            mla_apply_uv(&m->mla, &m->layers[job->layer].kv_b, h, o_latent, m->attn + row * v);
        }
}

static void sharded_attention(attention_job *job)
{
    rank_model *m = job->m;
    size_t queries = (size_t)job->n * m->heads;
    worker_pool_run(m->pool, sharded_absorb_worker, job);
    tp_comm_group_all_gather(m->comm, m->rank, m->dcp, m->q_abs, m->q_group,
                             queries * (size_t)(m->mla.kv_lora + m->mla.rope));
    worker_pool_run(m->pool, sharded_partial_worker, job);
    tp_comm_group_all_to_all(m->comm, m->rank, m->dcp, m->parts_send, m->parts_recv,
                             queries * ATTENTION_PART_FLOATS(m->mla.kv_lora));
    worker_pool_run(m->pool, sharded_merge_worker, job);
}

static void attention_block(rank_model *m, int layer, int n, long start_pos, int per_token_decode)
{
    const model_config *c = m->cfg;
    const layer_weights *lw = &m->mw->layers[layer];
    const layer_shard *ls = &m->layers[layer];
    int hidden = c->hidden, kv_width = c->kv_lora_rank + c->qk_rope_dim;
    int q_width = c->qk_nope_dim + c->qk_rope_dim, rope = c->qk_rope_dim;

    /* x = rmsnorm(h); q_a = q_a_proj(x); kv = kv_a_proj_with_mqa(x) */
    rmsnorm_rows(m->x, m->h, n, hidden, &lw->input_norm, c->rms_norm_eps);
    profile_mark(m, CPU_PHASE_NORMS);
    run_linears(m, (linear_task[]){{&lw->q_a.w, m->x, hidden, n, m->q_a, c->q_lora_rank},
                                   {&lw->kv_a.w, m->x, hidden, n, m->kv, kv_width}}, 2);
    profile_mark(m, CPU_PHASE_ATTENTION_GEMV);

    /* q = q_b_proj(rmsnorm(q_a)) for this rank's heads */
    rmsnorm_rows(m->q_a, m->q_a, n, c->q_lora_rank, &lw->q_a_norm, c->rms_norm_eps);
    profile_mark(m, CPU_PHASE_NORMS);
    run_linears(m, (linear_task[]){{&ls->q_b, m->q_a, c->q_lora_rank, n, m->q, (size_t)m->heads * q_width}}, 1);
    profile_mark(m, CPU_PHASE_ATTENTION_GEMV);

    /* c = rmsnorm(latent), k_pe = rope(k_pe) -> the cache (fp16 or fp8); q_pe = rope(q_pe) */
    for (int t = 0; t < n; t++) {
        const float *cos_t = m->cos_sin + (size_t)t * rope, *sin_t = cos_t + rope / 2;
        float *kv_t = m->kv + (size_t)t * kv_width;
        rmsnorm(kv_t, kv_t, &lw->kv_a_norm, c->rms_norm_eps);
        rope_apply(kv_t + c->kv_lora_rank, cos_t, sin_t, rope);
        uint8_t *entry = cache_entry(m, layer, start_pos + t);
        if (!entry)
            entry = m->foreign_row;
        if (m->mla.cache_format == KV_CACHE_FP8)
            m->cache_clamps += kv_fp8_encode_row(kv_t, c->kv_lora_rank, rope, entry);
        else
            m->cache_clamps += (long)float_row_to_f16_saturate(kv_t, (size_t)kv_width, (uint16_t *)entry);
        for (int hd = 0; hd < m->heads; hd++)
            rope_apply(m->q + ((size_t)t * m->heads + hd) * q_width + c->qk_nope_dim, cos_t, sin_t, rope);
    }

    profile_mark(m, CPU_PHASE_NORMS);

    /* causal attention over the cache [0, start_pos + t] */
    attention_job job = {m, layer, n, start_pos, per_token_decode};
    if (m->dcp > 1)
        sharded_attention(&job);
    else
        worker_pool_run(m->pool, attention_worker, &job);
    profile_bytes(m, &ls->kv_b);
    profile_mark(m, CPU_PHASE_ATTENTION);

    /* h += o_proj(attn), summed over the ranks' heads */
    run_linears(m, (linear_task[]){{&ls->o, m->attn, (size_t)m->heads * c->v_head_dim, n, m->partial, hidden}}, 1);
    profile_mark(m, CPU_PHASE_ATTENTION_GEMV);
    tp_comm_allreduce_sum(m->comm, m->rank, m->partial, (size_t)n * hidden);
    profile_mark(m, CPU_PHASE_ALLREDUCE);
    add_rows(m->h, m->partial, (size_t)n * hidden);
}

/* ---- MLP / MoE ---- */

typedef struct {
    rank_model *m;
    int n_jobs;
    int n;                      /* tokens of the chunk */
} mlp_batch;

/* act = silu(gate(x)) * up(x) on this worker's rows of every job (cost: tokens per row). */
static void mlp_gate_up_worker(void *arg, int worker, int n_workers)
{
    const mlp_batch *b = arg;
    int hidden = b->m->cfg->hidden;
    long total = 0, offset = 0;
    for (int j = 0; j < b->n_jobs; j++)
        total += (long)b->m->jobs[j].mlp->inter * b->m->jobs[j].n;
    long c0 = total * worker / n_workers, c1 = total * (worker + 1) / n_workers;
    for (int j = 0; j < b->n_jobs; j++) {
        const mlp_job *job = &b->m->jobs[j];
        int inter = job->mlp->inter, r0, r1;
        rows_in_cost_range(offset, inter, job->n, c0, c1, &r0, &r1);
        offset += (long)inter * job->n;
        if (r0 == r1)
            continue;
        b->m->product(&job->mlp->gate, job->x, hidden, job->n, job->act, inter, r0, r1);
        b->m->product(&job->mlp->up, job->x, hidden, job->n, job->up, inter, r0, r1);
        for (int t = 0; t < job->n; t++) {
            float *act = job->act + (size_t)t * inter + r0;
            silu_gate(act, act, job->up + (size_t)t * inter + r0, r1 - r0);
        }
    }
}

/* partial[token][r] = sum over jobs (in job order) of weight * down(act)[r], for this
 * worker's hidden rows r. */
static void mlp_down_worker(void *arg, int worker, int n_workers)
{
    const mlp_batch *b = arg;
    rank_model *m = b->m;
    int hidden = m->cfg->hidden, r0, r1;
    worker_share(hidden, worker, n_workers, &r0, &r1);
    if (r0 == r1)
        return;
    for (int t = 0; t < b->n; t++)
        memset(m->partial + (size_t)t * hidden + r0, 0, (size_t)(r1 - r0) * sizeof(float));
    for (int j = 0; j < b->n_jobs; j++) {
        const mlp_job *job = &m->jobs[j];
        m->product(&job->mlp->down, job->act, job->mlp->inter, job->n, job->y, hidden, r0, r1);
        for (int t = 0; t < job->n; t++)
            accumulate_scaled(m->partial + (size_t)job->tokens[t] * hidden + r0, job->y + (size_t)t * hidden + r0,
                              job->weights ? job->weights[t] : 1.0f, r1 - r0);
    }
}

/* Jobs for the chunk's tokens: the shared expert on all tokens, then each chosen expert (in
 * index order) on the tokens that chose it, with their routing weights. */
static int moe_jobs(rank_model *m, int layer, int n)
{
    const model_config *c = m->cfg;
    const layer_weights *lw = &m->mw->layers[layer];
    const layer_shard *ls = &m->layers[layer];
    int hidden = c->hidden, experts = c->experts, k = c->experts_per_token, n_jobs = 0;

    /* s = sigmoid(x . router^T); choose by s + bias, weigh by s */
    run_linears(m, (linear_task[]){{&lw->router.w, m->x, hidden, n, m->router_logits, experts}}, 1);
    for (int t = 0; t < n; t++)
        moe_route(&m->routing, m->router_logits + (size_t)t * experts, ls->router_bias, m->routing_scratch,
                  m->chosen + (size_t)t * k, m->chosen_weight + (size_t)t * k);

    if (ls->shared.inter > 0)
        m->jobs[n_jobs++] = (mlp_job){.mlp = &ls->shared, .n = n, .tokens = m->job_tokens, .x = m->x};
    int *tokens = m->job_tokens + n;
    float *weights = m->job_weights + n;
    memset(m->expert_count, 0, (size_t)experts * sizeof *m->expert_count);
    for (int i = 0; i < n * k; i++)
        m->expert_count[m->chosen[i]]++;
    float *x = m->job_x;
    for (int e = 0; e < experts; e++) {
        if (!m->expert_count[e])
            continue;
        mlp_job *job = &m->jobs[n_jobs++];
        *job = (mlp_job){.mlp = &ls->experts[e], .tokens = tokens, .weights = weights, .x = x};
        for (int i = 0; i < n * k; i++) {
            if (m->chosen[i] != e)
                continue;
            int t = i / k;
            tokens[job->n] = t;
            weights[job->n] = m->chosen_weight[i];
            memcpy(x + (size_t)job->n * hidden, m->x + (size_t)t * hidden, (size_t)hidden * sizeof *x);
            job->n++;
        }
        tokens += job->n;
        weights += job->n;
        x += (size_t)job->n * hidden;
    }
    return n_jobs;
}

static void mlp_block(rank_model *m, int layer, int n)
{
    const model_config *c = m->cfg;
    const layer_weights *lw = &m->mw->layers[layer];
    int hidden = c->hidden, n_jobs;

    rmsnorm_rows(m->x, m->h, n, hidden, &lw->post_attn_norm, c->rms_norm_eps);
    profile_mark(m, CPU_PHASE_NORMS);
    for (int t = 0; t < n; t++)
        m->job_tokens[t] = t;
    if (lw->is_moe) {
        n_jobs = moe_jobs(m, layer, n);
        profile_mark(m, CPU_PHASE_ROUTING);
    } else {
        m->jobs[0] = (mlp_job){.mlp = &m->layers[layer].dense, .n = n, .tokens = m->job_tokens, .x = m->x};
        n_jobs = 1;
    }
    /* Per-job intermediate and output rows, one after another. */
    float *act = m->job_act, *up = m->job_up, *y = m->job_y;
    for (int j = 0; j < n_jobs; j++) {
        mlp_job *job = &m->jobs[j];
        job->act = act;
        job->up = up;
        job->y = y;
        act += (size_t)job->n * job->mlp->inter;
        up += (size_t)job->n * job->mlp->inter;
        y += (size_t)job->n * hidden;
        profile_bytes(m, &job->mlp->gate);
        profile_bytes(m, &job->mlp->up);
        profile_bytes(m, &job->mlp->down);
    }
    mlp_batch b = {m, n_jobs, n};
    worker_pool_run(m->pool, mlp_gate_up_worker, &b);
    worker_pool_run(m->pool, mlp_down_worker, &b);
    profile_mark(m, CPU_PHASE_MLP_GEMV);
    tp_comm_allreduce_sum(m->comm, m->rank, m->partial, (size_t)n * hidden);
    profile_mark(m, CPU_PHASE_ALLREDUCE);
    add_rows(m->h, m->partial, (size_t)n * hidden);
}

/* ---- the whole pass ---- */

static void logits_block(rank_model *m, const int *rows, int n_rows, float *const *logit_out)
{
    const model_config *c = m->cfg;
    int vocab_part = m->shard.vocab.end - m->shard.vocab.begin;
    for (int j = 0; j < n_rows; j++)
        rmsnorm(m->logits_x + (size_t)j * c->hidden, m->h + (size_t)rows[j] * c->hidden, &m->mw->final_norm,
                c->rms_norm_eps);
    run_linears(m, (linear_task[]){{&m->lm_head, m->logits_x, c->hidden, n_rows, m->logits_part, vocab_part}}, 1);
    tp_comm_gather_columns(m->comm, m->rank, m->logits_part, n_rows, vocab_part, m->shard.vocab.begin, logit_out);
    profile_mark(m, CPU_PHASE_LM_HEAD);
}

/* Rank 0 notes the first layer (-1: the embeddings) whose output h holds a NaN or inf. */
static void watch_finite(rank_model *m, int layer, int n)
{
    if (m->rank != 0 || m->nonfinite_layer != RANK_ALL_FINITE)
        return;
    const float *h = m->h;
    size_t count = (size_t)n * (size_t)m->cfg->hidden;
    for (size_t i = 0; i < count; i++)
        if (!isfinite(h[i])) {
            m->nonfinite_layer = layer;
            return;
        }
}

void rank_forward(rank_model *m, const int32_t *tokens, int n, long start_pos, int layer_begin, int layer_end,
                  const int *logit_rows, int n_logit_rows, float *const *logit_out, int per_token_decode)
{
    const model_config *c = m->cfg;
    int rope = c->qk_rope_dim;
    int profiling = m->rank == 0 && n == 1 && cpu_profile_enabled();
    if (profiling != m->profiling)
        worker_pool_time_waits(m->pool, profiling);
    m->profiling = profiling;
    double step_start = profiling ? monotonic_seconds() : 0;
    double step_cpu_start = profiling ? cpu_profile_thread_seconds() : 0;
    m->phase_start = step_start;
    m->phase_cpu_start = step_cpu_start;
    m->phase_bytes = 0;
    for (int t = 0; layer_begin == 0 && t < n; t++) {
        weight_matrix_decode_row(&m->mw->embed.w, tokens[t], m->h + (size_t)t * c->hidden);
        float *cos_t = m->cos_sin + (size_t)t * rope;
        rope_cos_sin(&m->rope, start_pos + t, cos_t, cos_t + rope / 2);
    }
    if (layer_begin == 0)
        watch_finite(m, -1, n);
    profile_mark(m, CPU_PHASE_NORMS);
    for (int layer = layer_begin; layer < layer_end; layer++) {
        attention_block(m, layer, n, start_pos, per_token_decode);
        mlp_block(m, layer, n);
        watch_finite(m, layer, n);
        profile_mark(m, CPU_PHASE_NORMS);
    }
    if (layer_end == c->layers && n_logit_rows > 0)
        logits_block(m, logit_rows, n_logit_rows, logit_out);
    if (profiling) {
        cpu_profile_add_worker_wait(worker_pool_take_wait_seconds(m->pool));
        cpu_profile_add_step(monotonic_seconds() - step_start, cpu_profile_thread_seconds() - step_cpu_start);
    }
}

int rank_model_take_nonfinite(rank_model *m)
{
    int layer = m->nonfinite_layer;
    m->nonfinite_layer = RANK_ALL_FINITE;
    return layer;
}

long rank_model_take_clamps(rank_model *m)
{
    long clamps = m->cache_clamps;
    m->cache_clamps = 0;
    return clamps;
}

const uint8_t *rank_model_cache(const rank_model *m, int layer)
{
    return layer_cache(m, layer);
}

size_t rank_model_cache_bytes(const rank_model *m)
{
    return (size_t)m->cfg->layers * (size_t)m->slots * m->cache_row * sizeof *m->cache;
}

/* ---- setup ---- */

static mlp_shard mlp_view(const mlp_weights *w, index_range inter)
{
    return (mlp_shard){weight_rows(&w->gate.w, inter), weight_rows(&w->up.w, inter), weight_cols(&w->down.w, inter),
                       inter.end - inter.begin};
}

static index_range times(index_range r, int width)
{
    return (index_range){r.begin * width, r.end * width};
}

/* calloc of count elements of size bytes, failing on overflow. */
static void *alloc_array(size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    return calloc(count ? count : 1, size);
}

static int config_supported(const model_config *c, kv_cache_format cache_format, kimi_err *err)
{
    /* the fp8 row keeps its fp16 k_pe 2-byte aligned only after an even number of latent bytes */
    if (cache_format == KV_CACHE_FP8 && c->kv_lora_rank % 2)
        return kimi_fail(err, KIMI_ERR_MODEL, "config.json: kv_lora_rank %d is odd: --kv-cache fp8 needs it even",
                         c->kv_lora_rank);
    int groups = c->n_group > 1 ? c->n_group : 1;
    if (c->experts > 0 && (c->experts % groups || c->topk_group * (c->experts / groups) < c->experts_per_token))
        return kimi_fail(err, KIMI_ERR_MODEL,
                         "config.json: %d experts in n_group %d groups, topk_group %d cannot give %d experts per token",
                         c->experts, c->n_group, c->topk_group, c->experts_per_token);
    if (c->experts > 0 && (c->experts_per_token < 1 || c->experts_per_token > c->experts))
        return kimi_fail(err, KIMI_ERR_MODEL, "config.json: num_experts_per_tok %d is outside [1, %d]",
                         c->experts_per_token, c->experts);
    return 0;
}

static int layer_shards_open(rank_model *m, kimi_err *err)
{
    const model_config *c = m->cfg;
    index_range heads = m->shard.heads;
    m->layers = alloc_array((size_t)c->layers, sizeof *m->layers);
    if (!m->layers)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the shard views of %d layers", c->layers);
    for (int i = 0; i < c->layers; i++) {
        const layer_weights *lw = &m->mw->layers[i];
        layer_shard *ls = &m->layers[i];
        ls->q_b = weight_rows(&lw->q_b.w, times(heads, c->qk_nope_dim + c->qk_rope_dim));
        ls->kv_b = weight_rows(&lw->kv_b.w, times(heads, c->qk_nope_dim + c->v_head_dim));
        ls->o = weight_cols(&lw->o.w, times(heads, c->v_head_dim));
        if (!lw->is_moe) {
            ls->dense = mlp_view(&lw->dense, m->shard.dense_inter);
            continue;
        }
        if (c->shared_experts > 0)
            ls->shared = mlp_view(&lw->shared, m->shard.shared_inter);
        ls->experts = alloc_array((size_t)c->experts, sizeof *ls->experts);
        if (lw->router_bias.n > 0)
            ls->router_bias = alloc_array((size_t)c->experts, sizeof(float));
        if (!ls->experts || (lw->router_bias.n > 0 && !ls->router_bias))
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the expert views of layer %d", i);
        for (int e = 0; e < c->experts; e++)
            ls->experts[e] = mlp_view(&lw->experts[e], m->shard.moe_inter);
        if (ls->router_bias)
            weight_vector_decode(&lw->router_bias, ls->router_bias);
    }
    m->lm_head = weight_rows(&m->mw->lm_head.w, m->shard.vocab);
    return 0;
}

static int buffers_open(rank_model *m, int n_workers, kimi_err *err)
{
    const model_config *c = m->cfg;
    size_t T = (size_t)m->max_tokens, k = (size_t)c->experts_per_token, hidden = (size_t)c->hidden;
    size_t experts = (size_t)c->experts, vocab_part = (size_t)(m->shard.vocab.end - m->shard.vocab.begin);
    size_t dense_inter = (size_t)(m->shard.dense_inter.end - m->shard.dense_inter.begin);
    size_t moe_inter = (size_t)(m->shard.moe_inter.end - m->shard.moe_inter.begin);
    size_t shared_inter = (size_t)(m->shard.shared_inter.end - m->shard.shared_inter.begin);
    size_t routed = T * k * moe_inter + T * shared_inter;
    m->job_inter_floats = T * dense_inter > routed ? T * dense_inter : routed;
    size_t decode_scratch = mla_decode_scratch_floats(&m->mla, m->heads);
    size_t prefill_scratch = mla_prefill_scratch_floats(&m->mla, m->max_tokens);
    m->attn_scratch_floats = decode_scratch > prefill_scratch ? decode_scratch : prefill_scratch;

    if (m->capacity <= 0 || (size_t)m->slots > SIZE_MAX / m->cache_row / (size_t)c->layers)
        return kimi_fail(err, KIMI_ERR_NOMEM, "a KV cache of %ld positions does not fit in memory", m->capacity);
    m->cache = alloc_array((size_t)c->layers * (size_t)m->slots * m->cache_row, sizeof *m->cache);
    m->foreign_row = alloc_array(m->cache_row, sizeof *m->foreign_row);
    if (m->dcp > 1) {
        size_t queries = T * (size_t)m->heads, group = (size_t)m->dcp * queries;
        m->q_abs = alloc_array(queries * (size_t)(c->kv_lora_rank + c->qk_rope_dim), sizeof(float));
        m->q_group = alloc_array(group * (size_t)(c->kv_lora_rank + c->qk_rope_dim), sizeof(float));
        m->parts_send = alloc_array(group * ATTENTION_PART_FLOATS(c->kv_lora_rank), sizeof(float));
        m->parts_recv = alloc_array(group * ATTENTION_PART_FLOATS(c->kv_lora_rank), sizeof(float));
        if (!m->q_abs || !m->q_group || !m->parts_send || !m->parts_recv)
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the sharded attention of %d tokens (dcp %d)",
                             m->max_tokens, m->dcp);
    }
    m->h = alloc_array(T * hidden, sizeof(float));
    m->x = alloc_array(T * hidden, sizeof(float));
    m->q_a = alloc_array(T * (size_t)c->q_lora_rank, sizeof(float));
    m->q = alloc_array(T * (size_t)m->heads * (size_t)(c->qk_nope_dim + c->qk_rope_dim), sizeof(float));
    m->kv = alloc_array(T * ((size_t)c->kv_lora_rank + (size_t)c->qk_rope_dim), sizeof(float));
    m->attn = alloc_array(T * (size_t)m->heads * (size_t)c->v_head_dim, sizeof(float));
    m->partial = alloc_array(T * hidden, sizeof(float));
    m->cos_sin = alloc_array(T * (size_t)c->qk_rope_dim, sizeof(float));
    m->attn_scratch = alloc_array((size_t)n_workers * m->attn_scratch_floats, sizeof(float));
    m->router_logits = alloc_array(T * experts, sizeof(float));
    m->chosen = alloc_array(T * k, sizeof(int));
    m->chosen_weight = alloc_array(T * k, sizeof(float));
    m->routing_scratch = alloc_array(moe_route_scratch_floats(&m->routing), sizeof(float));
    m->jobs = alloc_array(experts + 1, sizeof *m->jobs);
    m->job_tokens = alloc_array(T * (k + 1), sizeof(int));
    m->job_weights = alloc_array(T * (k + 1), sizeof(float));
    m->expert_count = alloc_array(experts, sizeof(int));
    m->job_x = alloc_array(T * k * hidden, sizeof(float));
    m->job_y = alloc_array(T * (k + 1) * hidden, sizeof(float));
    m->job_act = alloc_array(m->job_inter_floats, sizeof(float));
    m->job_up = alloc_array(m->job_inter_floats, sizeof(float));
    m->logits_x = alloc_array(T * hidden, sizeof(float));
    m->logits_part = alloc_array(T * vocab_part, sizeof(float));
    if (!m->cache || !m->foreign_row)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for a KV cache of %ld positions (%zu B each)",
                         m->slots, m->cache_row * (size_t)c->layers);
    if (!m->h || !m->x || !m->q_a || !m->q || !m->kv || !m->attn || !m->partial || !m->cos_sin ||
        !m->attn_scratch || !m->router_logits || !m->chosen || !m->chosen_weight || !m->routing_scratch ||
        !m->jobs || !m->job_tokens || !m->job_weights || !m->expert_count || !m->job_x || !m->job_y ||
        !m->job_act || !m->job_up || !m->logits_x || !m->logits_part)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the activations of %d tokens", m->max_tokens);
    return 0;
}

int rank_model_open(rank_model **out, const rank_setup *setup, kimi_err *err)
{
    *out = NULL;
    const model_config *c = &setup->mw->cfg;
    int status = config_supported(c, setup->cache_format, err);
    if (status)
        return status;
    rank_model *m = calloc(1, sizeof *m);
    if (!m)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for rank %d", setup->rank);
    m->mw = setup->mw;
    m->cfg = c;
    m->rank = setup->rank;
    m->nonfinite_layer = RANK_ALL_FINITE;
    m->tp = setup->tp;
    m->capacity = setup->capacity;
    m->dcp = setup->dcp > 0 ? setup->dcp : 1;
    m->product = setup->activations == CPU_ACTIVATIONS_INT8 ? linear_rows_int8 : linear_rows;
    m->dcp_member = setup->rank % m->dcp;
    m->slots = kv_shard_slots(setup->capacity, m->dcp);
    m->max_tokens = setup->max_tokens;
    m->pool = setup->pool;
    m->comm = setup->comm;
    m->cache_row = kv_row_bytes(setup->cache_format, c->kv_lora_rank, c->qk_rope_dim);
    rope_config rc = {c->qk_rope_dim, c->rope_theta, c->rope_yarn, c->rope_factor, c->rope_original_max,
                      c->rope_beta_fast, c->rope_beta_slow, c->rope_mscale, c->rope_mscale_all_dim};
    m->mla = (mla_shape){c->kv_lora_rank, c->qk_rope_dim, c->qk_nope_dim, c->v_head_dim,
                         rope_softmax_scale(&rc, c->qk_nope_dim + c->qk_rope_dim), setup->cache_format};
    m->routing = (moe_routing_config){c->experts, c->experts_per_token, c->n_group, c->topk_group,
                                      c->norm_topk_prob, c->routed_scaling_factor};
    if (rope_table_init(&m->rope, &rc)) {
        status = kimi_fail(err, KIMI_ERR_MODEL, "config.json: qk_rope_head_dim %d must be even and at most %d",
                           c->qk_rope_dim, ROPE_MAX_DIM);
        goto fail;
    }
    if ((status = tp_shard_plan(setup->mw, setup->tp, setup->rank, &m->shard, err)))
        goto fail;
    m->heads = m->shard.heads.end - m->shard.heads.begin;
    if ((status = layer_shards_open(m, err)) || (status = buffers_open(m, worker_pool_size(setup->pool), err)))
        goto fail;
    *out = m;
    return 0;
fail:
    rank_model_close(m);
    return status;
}

void rank_model_close(rank_model *m)
{
    if (!m)
        return;
    if (m->layers) {
        for (int i = 0; i < m->cfg->layers; i++) {
            free(m->layers[i].experts);
            free(m->layers[i].router_bias);
        }
        free(m->layers);
    }
    free(m->cache);
    free(m->foreign_row);
    free(m->q_abs);
    free(m->q_group);
    free(m->parts_send);
    free(m->parts_recv);
    free(m->h);
    free(m->x);
    free(m->q_a);
    free(m->q);
    free(m->kv);
    free(m->attn);
    free(m->partial);
    free(m->cos_sin);
    free(m->attn_scratch);
    free(m->router_logits);
    free(m->chosen);
    free(m->chosen_weight);
    free(m->routing_scratch);
    free(m->jobs);
    free(m->job_tokens);
    free(m->job_weights);
    free(m->expert_count);
    free(m->job_x);
    free(m->job_y);
    free(m->job_act);
    free(m->job_up);
    free(m->logits_x);
    free(m->logits_part);
    free(m);
}
