/* GPU test: decode context parallelism on the CUDA backend (--dcp, the latent cache sharded by
 * position over groups of ranks; engine/backend/kv_shard.h), tiny-k25 at TP 8, every rank on
 * device 0 (the local communicator):
 *   - a prompt prefilled in one call and the same prompt fed as one decode step per token give
 *     the same logits and cache within the CUDA tolerances, at DCP 2 and 8 and with the fp8 cache
 *     at DCP 4 (the cache is read back through each position's owner), and both agree with the
 *     replicated cache of the same format (DCP 1); on the emulator the prefill and the steps come
 *     out bit-identical, a GPU may split a one-token GEMV's K differently;
 *   - graphs on and off give the same bits at DCP 8 (the group exchanges are captured with the
 *     step and replayed in the same stream order);
 *   - the cache bytes per rank are the replicated bytes / DCP;
 *   - NCCL, one rank per device (where 8 devices and NCCL exist, as on the emulator): the same
 *     bits as the local communicator at DCP 8, the exchanges as grouped sends and receives.
 * Exits 77 (skipped) without a device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/model/weights.h"
#include "kernels/half_math.h"
#include "tests/gpu/gpu_test.h"

#define TINY "tests/golden/fixtures/tiny-k25"

enum { TP = 8, N_TOKENS = 12, CAPACITY = 64 };

typedef struct {
    float *logits;      /* [N_TOKENS][vocab]: every position's */
    uint16_t *cache;    /* [layers][N_TOKENS][row] */
    size_t cache_bytes_per_rank;
} run_result;

typedef struct {
    int dcp;
    kv_cache_format format;
    int steps;          /* one decode step per token, else one prefill call */
    const char *graphs; /* KIMI_CUDA_GRAPHS */
    int nccl;           /* one rank per device (devices 0..7) */
} run_setup;

static int run(const model_weights *mw, const run_setup *s, run_result *out)
{
    const model_config *c = &mw->cfg;
    size_t vocab = (size_t)c->vocab, row = (size_t)(c->kv_lora_rank + c->qk_rope_dim);
    int devices[TP] = {0}, n_devices = 1;
    if (s->nccl)
        for (n_devices = 0; n_devices < TP; n_devices++)
            devices[n_devices] = n_devices;
    kimi_err err = {0};
    setenv("KIMI_CUDA_GRAPHS", s->graphs, 1);
    backend *be = NULL;
    backend_options opt = {.kind = BACKEND_CUDA, .tp = TP, .dcp = s->dcp, .threads_per_rank = 1,
                           .max_context = CAPACITY, .kv_cache = s->format, .devices = devices,
                           .n_devices = n_devices};
    int rc = backend_open(&be, mw, &opt, &err);
    unsetenv("KIMI_CUDA_GRAPHS");
    CHECK_MSG(rc == 0, "open dcp %d: %s", s->dcp, err.msg);
    if (rc)
        return -1;
    int32_t tokens[N_TOKENS];
    int rows[N_TOKENS];
    for (int j = 0; j < N_TOKENS; j++) {
        tokens[j] = (int32_t)((j * 131 + 7) % c->vocab);
        rows[j] = j;
    }
    out->logits = malloc(N_TOKENS * vocab * sizeof(float));
    out->cache = malloc((size_t)c->layers * N_TOKENS * row * sizeof(uint16_t));
    out->cache_bytes_per_rank = backend_cache_bytes_per_rank(be);
    if (s->steps) {
        int zero = 0;
        for (int j = 0; j < N_TOKENS && !rc; j++)
            rc = backend_forward(be, tokens + j, 1, j, &zero, 1, out->logits + (size_t)j * vocab, &err);
    } else {
        rc = backend_forward(be, tokens, N_TOKENS, 0, rows, N_TOKENS, out->logits, &err);
    }
    if (!rc)
        rc = backend_read_kv(be, N_TOKENS, out->cache, &err);
    CHECK_MSG(rc == 0, "forward dcp %d steps %d: %s", s->dcp, s->steps, err.msg);
    backend_close(be);
    return rc;
}

static void result_free(run_result *r)
{
    free(r->logits);
    free(r->cache);
    *r = (run_result){0};
}

static double logits_error(const model_config *c, const run_result *a, const run_result *b)
{
    double worst = 0;
    for (size_t i = 0; i < N_TOKENS * (size_t)c->vocab; i++) {
        double e = fabs((double)a->logits[i] - b->logits[i]);
        worst = e > worst || isnan(e) ? e : worst;
    }
    return worst;
}

/* max |a - b| over the cache, relative to max |b| */
static double cache_error(const model_config *c, const run_result *a, const run_result *b)
{
    size_t n = (size_t)c->layers * N_TOKENS * (size_t)(c->kv_lora_rank + c->qk_rope_dim);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double x = half_to_float(a->cache[i]), y = half_to_float(b->cache[i]);
        double e = fabs(x - y);
        worst = e > worst || isnan(e) ? e : worst;
        scale = fabs(y) > scale ? fabs(y) : scale;
    }
    return scale > 0 ? worst / scale : worst;
}

static int same_bits(const model_config *c, const run_result *a, const run_result *b)
{
    size_t row = (size_t)(c->kv_lora_rank + c->qk_rope_dim);
    return !memcmp(a->logits, b->logits, N_TOKENS * (size_t)c->vocab * sizeof(float)) &&
           !memcmp(a->cache, b->cache, (size_t)c->layers * N_TOKENS * row * sizeof(uint16_t));
}

/* The CUDA backend's tolerances against itself on another path (tests/gpu/test_gpu_ranks.c:
 * logits 5e-2), and the cache rows a rounding apart relative to the largest value. */
#define LOGITS_TOLERANCE 5e-2
#define CACHE_TOLERANCE 1e-2

static void check_prefill_equals_steps(const model_weights *mw, const run_result *replicated, int dcp,
                                       kv_cache_format format)
{
    const model_config *c = &mw->cfg;
    run_result prefill = {0}, steps = {0};
    if (!run(mw, &(run_setup){dcp, format, 0, "1", 0}, &prefill) &&
        !run(mw, &(run_setup){dcp, format, 1, "1", 0}, &steps)) {
        double steps_logits = logits_error(c, &steps, &prefill), steps_cache = cache_error(c, &steps, &prefill);
        double dcp1_logits = logits_error(c, &prefill, replicated), dcp1_cache = cache_error(c, &prefill, replicated);
        const char *name = format == KV_CACHE_FP8 ? "fp8" : "fp16";
        CHECK_MSG(steps_logits <= LOGITS_TOLERANCE && steps_cache <= CACHE_TOLERANCE,
                  "dcp %d %s: decode steps vs prefill: logits %.3g, cache %.3g", dcp, name, steps_logits, steps_cache);
        CHECK_MSG(dcp1_logits <= LOGITS_TOLERANCE && dcp1_cache <= CACHE_TOLERANCE,
                  "dcp %d %s vs the replicated cache: logits %.3g, cache %.3g", dcp, name, dcp1_logits, dcp1_cache);
        /* CAPACITY is a multiple of dcp: each rank holds CAPACITY / dcp rows per layer */
        size_t want = kv_bytes_per_token(c, format) * (CAPACITY / (size_t)dcp);
        CHECK_MSG(prefill.cache_bytes_per_rank == want && replicated->cache_bytes_per_rank == want * (size_t)dcp,
                  "dcp %d: %zu cache bytes per rank (want %zu), replicated %zu", dcp, prefill.cache_bytes_per_rank, want,
                  replicated->cache_bytes_per_rank);
        printf("dcp %d %s: steps vs prefill logits %.3g cache %.3g; vs dcp 1 logits %.3g cache %.3g; %zu cache bytes "
               "per rank\n", dcp, name, steps_logits, steps_cache, dcp1_logits, dcp1_cache,
               prefill.cache_bytes_per_rank);
    }
    result_free(&prefill);
    result_free(&steps);
}

int main(void)
{
    gpu_test_require_device();
    model_weights mw;
    kimi_err err = {0};
    if (weights_load(&mw, TINY, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return check_finish();
    }
    const model_config *c = &mw.cfg;
    run_result replicated = {0}, replicated_fp8 = {0};
    if (!run(&mw, &(run_setup){1, KV_CACHE_FP16, 0, "1", 0}, &replicated)) {
        check_prefill_equals_steps(&mw, &replicated, 2, KV_CACHE_FP16);
        check_prefill_equals_steps(&mw, &replicated, 8, KV_CACHE_FP16);
    }
    if (!run(&mw, &(run_setup){1, KV_CACHE_FP8, 0, "1", 0}, &replicated_fp8))
        check_prefill_equals_steps(&mw, &replicated_fp8, 4, KV_CACHE_FP8);
    /* graphs on and off, and NCCL against the local communicator, at DCP 8 (decode steps) */
    run_result graphs = {0}, no_graphs = {0}, nccl = {0};
    if (!run(&mw, &(run_setup){8, KV_CACHE_FP16, 1, "1", 0}, &graphs) &&
        !run(&mw, &(run_setup){8, KV_CACHE_FP16, 1, "0", 0}, &no_graphs))
        CHECK_MSG(same_bits(c, &graphs, &no_graphs), "dcp 8: graphs on and off differ");
    int visible = 0;
    CUDA_CHECK(cudaGetDeviceCount(&visible));
#ifdef KIMI_HAVE_NCCL
    if (visible >= TP && graphs.logits && !run(&mw, &(run_setup){8, KV_CACHE_FP16, 1, "1", 1}, &nccl))
        CHECK_MSG(same_bits(c, &graphs, &nccl), "dcp 8: NCCL on 8 devices and the local communicator differ");
    printf("dcp 8: graphs on/off bit-identical; NCCL on %d devices: %s\n", visible,
           nccl.logits ? "bit-identical to the local communicator" : "not run (fewer than 8 devices)");
#else
    printf("dcp 8: graphs on/off bit-identical; NCCL: not in this build\n");
#endif
    result_free(&graphs);
    result_free(&no_graphs);
    result_free(&nccl);
    result_free(&replicated);
    result_free(&replicated_fp8);
    weights_free(&mw);
    return check_finish();
}
