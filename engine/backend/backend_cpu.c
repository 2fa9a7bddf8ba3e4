/* backend_cpu: the CPU reference backend (engine/backend/backend_impl.h): one thread per tensor-parallel
 * rank, each with its worker pool and its shard (engine/backend/forward.h), stepped together by the
 * thread that calls backend_forward; a long prefill runs as consecutive chunks. */
#include "engine/backend/backend_impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/forward.h"
#include "engine/backend/kv_shard.h"
#include "engine/base/cpu_count.h"
#include "engine/backend/spin_barrier.h"
#include "engine/backend/tp_comm.h"
#include "engine/backend/worker_pool.h"

enum { MAX_RANKS = 8, CHUNK_TOKENS = 128 };

typedef struct {
    struct cpu_backend *be;
    int rank;
    pthread_t thread;
    int started;
    worker_pool *pool;
    rank_model *model;
    kimi_err err;               /* why opening this rank failed */
} rank_slot;

struct cpu_backend {
    const model_weights *mw;
    int tp, dcp, threads_per_rank;
    int spin;                   /* the step barriers (the ranks and the calling thread) may spin */
    int spin_within_step;       /* the rank's worker pools and all-reduces may spin */
    long capacity;
    kv_cache_format cache_format;
    cpu_activations activations;
    int (*on_layer)(void *user, double tokens_done);
    void *on_layer_user;
    tp_comm *comm;
    spin_barrier step_start, step_done;   /* the ranks and the calling thread */
    rank_slot ranks[MAX_RANKS];

    /* The step the ranks run next (written by the caller before step_start). */
    int quit;
    const int32_t *tokens;
    int n;
    long start_pos;
    int layer_begin, layer_end;
    const int *logit_rows;
    int n_logit_rows;
    float *const *logit_out;
    int per_token_decode;
};

static void *rank_main(void *arg)
{
    rank_slot *slot = arg;
    struct cpu_backend *be = slot->be;
    /* Opened on the rank's own thread, so its cache and activations are first touched there. */
    rank_setup setup = {be->mw, be->tp, slot->rank, be->capacity, be->cache_format, be->activations,
                        be->dcp, CHUNK_TOKENS, NULL, be->comm};
    if (!worker_pool_open(&slot->pool, be->threads_per_rank, be->spin_within_step, &slot->err)) {
        setup.pool = slot->pool;
        rank_model_open(&slot->model, &setup, &slot->err);
    }
    spin_barrier_wait(&be->step_done);
    for (;;) {
        spin_barrier_wait(&be->step_start);
        if (be->quit)
            break;
        rank_forward(slot->model, be->tokens, be->n, be->start_pos, be->layer_begin, be->layer_end, be->logit_rows,
                     be->n_logit_rows, slot->rank == 0 ? be->logit_out : NULL, be->per_token_decode);
        spin_barrier_wait(&be->step_done);
    }
    rank_model_close(slot->model);
    worker_pool_close(slot->pool);
    return NULL;
}

/* Stop and join the rank threads, free everything. */
static void backend_free(struct cpu_backend *be)
{
    be->quit = 1;
    spin_barrier_wait(&be->step_start);
    for (int r = 0; r < be->tp; r++)
        if (be->ranks[r].started)
            pthread_join(be->ranks[r].thread, NULL);
    spin_barrier_destroy(&be->step_start);
    spin_barrier_destroy(&be->step_done);
    tp_comm_close(be->comm);
    free(be);
}

int cpu_backend_open(cpu_backend **out, const model_weights *mw, const backend_options *opt, kimi_err *err)
{
    *out = NULL;
    const model_config *c = &mw->cfg;
    if (opt->tp < 1 || opt->tp > MAX_RANKS)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d: must be between 1 and %d", opt->tp, MAX_RANKS);
    int rc = config_check_tp(c, opt->tp, err);
    if (rc)
        return rc;
    if (opt->max_context < 1)
        return kimi_fail(err, KIMI_ERR_USAGE, "max context %ld: the KV cache needs at least one position",
                         opt->max_context);
    if (opt->threads_per_rank < 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "--threads %d: must be 0 (all cores) or positive", opt->threads_per_rank);

    struct cpu_backend *be = calloc(1, sizeof *be);
    if (!be)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the CPU backend");
    int cores = cpu_usable_count();
    int spin_mode = cpu_spin_mode_parse(getenv("KIMI_CPU_SPIN"));
    if (spin_mode < 0) {
        free(be);
        return kimi_fail(err, KIMI_ERR_USAGE, "KIMI_CPU_SPIN=%s: must be auto, on (1) or off (0)",
                         getenv("KIMI_CPU_SPIN"));
    }
    be->mw = mw;
    be->tp = opt->tp;
    be->dcp = opt->dcp > 0 ? opt->dcp : 1;
    be->capacity = opt->max_context;
    be->cache_format = opt->kv_cache;
    be->activations = opt->activations;
    be->on_layer = opt->on_layer;
    be->on_layer_user = opt->on_layer_user;
    be->threads_per_rank = opt->threads_per_rank ? opt->threads_per_rank : (cores / opt->tp > 1 ? cores / opt->tp : 1);
    /* Spinning only pays when every thread that meets in a barrier has a CPU of its own;
     * otherwise a spinner steals its peer's time slice. The step barriers also hold the calling
     * thread, which needs a CPU between steps (sampling, and the on_layer call between a
     * prefill's layers); the barriers inside a step (a rank's workers, the ranks' all-reduces)
     * hold only the compute threads, all busy then while the caller sleeps in step_done. At
     * threads = cores those spin and the step barriers block: 2 threads on 2 CPUs had every
     * wait of a step go through a futex wake-up. */
    long compute_threads = (long)be->tp * be->threads_per_rank;
    be->spin = cpu_spin_pays((cpu_spin_mode)spin_mode, compute_threads + 1, cores);
    be->spin_within_step = cpu_spin_pays((cpu_spin_mode)spin_mode, compute_threads, cores);
    spin_barrier_init(&be->step_start, be->tp + 1, be->spin);
    spin_barrier_init(&be->step_done, be->tp + 1, be->spin);
    if ((rc = tp_comm_open(&be->comm, be->tp, (size_t)CHUNK_TOKENS * (size_t)c->hidden, be->spin_within_step, err))) {
        free(be);
        return rc;
    }
    int started = 0;
    for (int r = 0; r < be->tp; r++) {
        be->ranks[r] = (rank_slot){.be = be, .rank = r};
        if (pthread_create(&be->ranks[r].thread, NULL, rank_main, &be->ranks[r]))
            break;
        be->ranks[r].started = 1;
        started++;
    }
    if (started < be->tp) {
        /* The started ranks wait for all tp to report; stand in for the missing ones. */
        spin_barrier_resize(&be->step_done, started + 1);
        spin_barrier_resize(&be->step_start, started + 1);
        spin_barrier_wait(&be->step_done);
        backend_free(be);
        return kimi_fail(err, KIMI_ERR_NOMEM, "cannot start the thread of rank %d", started);
    }
    spin_barrier_wait(&be->step_done);
    for (int r = 0; r < be->tp; r++) {
        if (be->ranks[r].err.code) {
            rc = be->ranks[r].err.code;
            if (err)
                *err = be->ranks[r].err;
            backend_free(be);
            return kimi_err_prefix(err, rc, "rank %d of %d", r, opt->tp);
        }
    }
    *out = be;
    return 0;
}

void cpu_backend_close(cpu_backend *be)
{
    if (be)
        backend_free(be);
}

long cpu_backend_capacity(const cpu_backend *be)
{
    return be->capacity;
}

/* Layers [layer_begin, layer_end) of one chunk on every rank. */
static void run_step(struct cpu_backend *be, const int32_t *tokens, int n, long start_pos, int layer_begin,
                     int layer_end, const int *rows, int n_rows, float *const *out)
{
    be->tokens = tokens;
    be->n = n;
    be->start_pos = start_pos;
    be->layer_begin = layer_begin;
    be->layer_end = layer_end;
    be->logit_rows = rows;
    be->n_logit_rows = n_rows;
    be->logit_out = out;
    spin_barrier_wait(&be->step_start);
    spin_barrier_wait(&be->step_done);
}

int cpu_backend_forward(cpu_backend *be, const int32_t *tokens, int n, long start_pos,
                    const int *logit_rows, int n_logit_rows, float *logits, int per_token_decode, kimi_err *err)
{
    /* the request was checked by backend_forward; a step fails only on non-finite activations */
    const model_config *c = &be->mw->cfg;
    be->per_token_decode = per_token_decode;
    int chunk_rows[CHUNK_TOKENS];
    float *chunk_out[CHUNK_TOKENS];
    for (int first = 0; first < n; first += CHUNK_TOKENS) {
        int count = n - first < CHUNK_TOKENS ? n - first : CHUNK_TOKENS, n_rows = 0;
        for (int j = 0; j < n_logit_rows; j++) {
            if (logit_rows[j] < first || logit_rows[j] >= first + count)
                continue;
            chunk_rows[n_rows] = logit_rows[j] - first;
            chunk_out[n_rows++] = logits + (size_t)j * (size_t)c->vocab;
        }
        /* A prefill with a watcher goes one layer per step (two barrier rounds each: small
         * next to a layer over a chunk of tokens); decode steps run whole. */
        int layers = c->layers, per_step = be->on_layer && n > 1 && !per_token_decode ? 1 : layers;
        for (int layer = 0; layer < layers; layer += per_step) {
            int end = layer + per_step < layers ? layer + per_step : layers;
            run_step(be, tokens + first, count, start_pos + first, layer, end, chunk_rows, n_rows, chunk_out);
            int nonfinite = rank_model_take_nonfinite(be->ranks[0].model);
            if (nonfinite != RANK_ALL_FINITE)
                return backend_nonfinite_fail(err, nonfinite, start_pos + first, count);
            if (per_step < layers && be->on_layer(be->on_layer_user, first + (double)count * end / layers))
                return BACKEND_STOPPED;
        }
    }
    return 0;
}

long cpu_backend_take_clamps(cpu_backend *be)
{
    return rank_model_take_clamps(be->ranks[0].model);
}

int cpu_backend_read_kv(cpu_backend *be, long n_pos, uint16_t *out, kimi_err *err)
{
    const model_config *c = &be->mw->cfg;
    if (n_pos < 0 || n_pos > be->capacity)
        return kimi_fail(err, KIMI_ERR_STATE, "read_kv: %ld positions, the cache holds %ld", n_pos, be->capacity);
    size_t row = (size_t)c->kv_lora_rank + (size_t)c->qk_rope_dim;
    size_t row_bytes = kv_row_bytes(be->cache_format, c->kv_lora_rank, c->qk_rope_dim);
    /* Position p sits on member p % dcp of group 0, which is rank p % dcp. */
    for (int layer = 0; layer < c->layers; layer++)
        for (long p = 0; p < n_pos; p++)
            kv_row_to_half(be->cache_format,
                           rank_model_cache(be->ranks[kv_shard_owner(p, be->dcp)].model, layer) +
                               (size_t)kv_shard_slot(p, be->dcp) * row_bytes,
                           c->kv_lora_rank, c->qk_rope_dim, out + ((size_t)layer * (size_t)n_pos + (size_t)p) * row);
    return 0;
}

int cpu_backend_take_comm_census(cpu_backend *be, int rank, tp_comm_census *out, kimi_err *err)
{
    if (rank < 0 || rank >= be->tp)
        return kimi_fail(err, KIMI_ERR_USAGE, "comm census: rank %d of %d", rank, be->tp);
    tp_comm_take_census(be->comm, rank, out);
    return 0;
}

size_t cpu_backend_cache_bytes_per_rank(const cpu_backend *be)
{
    return rank_model_cache_bytes(be->ranks[0].model);
}
