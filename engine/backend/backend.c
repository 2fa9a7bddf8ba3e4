/* backend: dispatch of engine/backend/backend.h to the CPU reference or the CUDA backend; a build
 * without CUDA answers --backend cuda with an error that says so. */
#include "engine/backend/backend_impl.h"

#include "engine/backend/kv_shard.h"

#include <stdio.h>
#include <stdlib.h>

struct backend {
    backend_kind kind;
    const model_config *cfg;
    kv_cache_format cache_format;
    int dcp;                    /* the cache is sharded over dcp ranks (engine/backend/kv_shard.h) */
    cpu_backend *cpu;
    cuda_backend *cuda;
};

#ifndef KIMI_HAVE_CUDA
static const char no_cuda[] = "--backend cuda: this build has no CUDA backend (configured with KIMI_CUDA=OFF or "
                              "without nvcc); rebuild with -DKIMI_CUDA=ON";

int cuda_backend_memory(const model_weights *mw, const backend_options *opt, size_t *rank_budget_bytes,
                        size_t *rank_fixed_bytes, kimi_err *err)
{
    (void)mw, (void)opt, (void)rank_budget_bytes, (void)rank_fixed_bytes;
    return kimi_fail(err, KIMI_ERR_USAGE, "%s", no_cuda);
}

int cuda_backend_open(cuda_backend **out, const model_weights *mw, const backend_options *opt, kimi_err *err)
{
    (void)mw, (void)opt;
    *out = NULL;
    return kimi_fail(err, KIMI_ERR_USAGE, "%s", no_cuda);
}

/* Never reached: no cuda_backend can be opened in this build. */
void cuda_backend_close(cuda_backend *be)
{
    (void)be;
}

long cuda_backend_capacity(const cuda_backend *be)
{
    (void)be;
    return 0;
}

int cuda_backend_forward(cuda_backend *be, const int32_t *tokens, int n, long start_pos, const int *logit_rows,
                         int n_logit_rows, float *logits, kimi_err *err)
{
    (void)be, (void)tokens, (void)n, (void)start_pos, (void)logit_rows, (void)n_logit_rows, (void)logits;
    return kimi_fail(err, KIMI_ERR_STATE, "%s", no_cuda);
}

int cuda_backend_read_kv(cuda_backend *be, long n_pos, uint16_t *out, kimi_err *err)
{
    (void)be, (void)n_pos, (void)out;
    return kimi_fail(err, KIMI_ERR_STATE, "%s", no_cuda);
}

long long cuda_backend_runtime_overhead(const cuda_backend *be, int *device)
{
    (void)be;
    *device = -1;
    return 0;
}

const char *cuda_backend_comm_description(const cuda_backend *be)
{
    (void)be;
    return NULL;
}

long cuda_backend_take_clamps(cuda_backend *be)
{
    (void)be;
    return 0;
}

int cuda_backend_decode_tokens(cuda_backend *be, const int32_t *tokens, int n, long start_pos, float *logits,
                               kimi_err *err)
{
    (void)be, (void)tokens, (void)n, (void)start_pos, (void)logits;
    return kimi_fail(err, KIMI_ERR_STATE, "%s", no_cuda);
}
#endif

int backend_nonfinite_fail(kimi_err *err, int layer, long pos, int n)
{
    char where[64];
    if (layer < 0)
        snprintf(where, sizeof where, "the token embeddings");
    else
        snprintf(where, sizeof where, "the output of layer %d", layer);
    return kimi_fail(err, KIMI_ERR_MODEL,
                     "non-finite activations (NaN or inf) first in %s, at positions %ld..%ld: a broken weight or an "
                     "overflow; the request stops", where, pos, pos + n - 1);
}

long backend_take_cache_clamps(backend *be)
{
    return be->kind == BACKEND_CUDA ? cuda_backend_take_clamps(be->cuda) : cpu_backend_take_clamps(be->cpu);
}

int backend_memory(const model_weights *mw, const backend_options *opt, size_t *rank_budget_bytes,
                   size_t *rank_fixed_bytes, kimi_err *err)
{
    if (opt->kind != BACKEND_CUDA)
        return kimi_fail(err, KIMI_ERR_USAGE, "backend_memory: only a device backend has its own memory");
    return cuda_backend_memory(mw, opt, rank_budget_bytes, rank_fixed_bytes, err);
}

int backend_open(backend **out, const model_weights *mw, const backend_options *opt, kimi_err *err)
{
    *out = NULL;
    struct backend *be = calloc(1, sizeof *be);
    if (!be)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the backend");
    be->kind = opt->kind;
    be->cfg = &mw->cfg;
    be->cache_format = opt->kv_cache;
    int dcp = opt->dcp ? opt->dcp : 1, rc = kv_shard_check(opt->tp, dcp, err);
    be->dcp = dcp;
    if (rc) {
        free(be);
        return rc;
    }
    rc = opt->kind == BACKEND_CUDA ? cuda_backend_open(&be->cuda, mw, opt, err)
                                       : cpu_backend_open(&be->cpu, mw, opt, err);
    if (rc) {
        free(be);
        return rc;
    }
    *out = be;
    return 0;
}

void backend_close(backend *be)
{
    if (!be)
        return;
    if (be->kind == BACKEND_CUDA)
        cuda_backend_close(be->cuda);
    else
        cpu_backend_close(be->cpu);
    free(be);
}

long backend_capacity(const backend *be)
{
    return be->kind == BACKEND_CUDA ? cuda_backend_capacity(be->cuda) : cpu_backend_capacity(be->cpu);
}

/* The request, checked once for both implementations. */
static int check_request(const backend *be, const int32_t *tokens, int n, long start_pos, const int *logit_rows,
                         int n_logit_rows, const float *logits, kimi_err *err)
{
    long capacity = backend_capacity(be);
    if (n < 1 || start_pos < 0 || n_logit_rows < 0 || (n_logit_rows > 0 && !logits))
        return kimi_fail(err, KIMI_ERR_STATE, "forward: bad request (%d tokens at position %ld, %d logit rows)", n,
                         start_pos, n_logit_rows);
    if (start_pos > capacity - n)
        return kimi_fail(err, KIMI_ERR_STATE,
                         "context full: positions %ld..%ld do not fit in the KV cache of %ld positions", start_pos,
                         start_pos + n - 1, capacity);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= be->cfg->vocab)
            return kimi_fail(err, KIMI_ERR_INPUT, "token id %d at index %d is outside the vocabulary [0, %d)",
                             tokens[i], i, be->cfg->vocab);
    for (int j = 0; j < n_logit_rows; j++) {
        if (logit_rows[j] < 0 || logit_rows[j] >= n)
            return kimi_fail(err, KIMI_ERR_STATE, "logit row %d is outside the %d tokens", logit_rows[j], n);
        for (int i = 0; i < j; i++)
            if (logit_rows[i] == logit_rows[j])
                return kimi_fail(err, KIMI_ERR_STATE, "logit row %d is asked for twice", logit_rows[j]);
    }
    return 0;
}

int backend_forward(backend *be, const int32_t *tokens, int n, long start_pos, const int *logit_rows,
                    int n_logit_rows, float *logits, kimi_err *err)
{
    int rc = check_request(be, tokens, n, start_pos, logit_rows, n_logit_rows, logits, err);
    if (rc)
        return rc;
    if (be->kind == BACKEND_CUDA)
        return cuda_backend_forward(be->cuda, tokens, n, start_pos, logit_rows, n_logit_rows, logits, err);
    return cpu_backend_forward(be->cpu, tokens, n, start_pos, logit_rows, n_logit_rows, logits, 0, err);
}

int backend_decode_tokens(backend *be, const int32_t *tokens, int n, long start_pos, float *logits, kimi_err *err)
{
    if (n < 1 || n > BACKEND_DECODE_TOKENS_MAX)
        return kimi_fail(err, KIMI_ERR_STATE, "decode_tokens: %d tokens (1..%d)", n, BACKEND_DECODE_TOKENS_MAX);
    int rows[BACKEND_DECODE_TOKENS_MAX];
    for (int j = 0; j < n; j++)
        rows[j] = j;
    int rc = check_request(be, tokens, n, start_pos, rows, n, logits, err);
    if (rc)
        return rc;
    if (be->kind == BACKEND_CUDA)
        return cuda_backend_decode_tokens(be->cuda, tokens, n, start_pos, logits, err);
    return cpu_backend_forward(be->cpu, tokens, n, start_pos, rows, n, logits, 1, err);
}

int backend_take_comm_census(backend *be, int rank, tp_comm_census *out, kimi_err *err)
{
    if (be->kind == BACKEND_CUDA)
        return kimi_fail(err, KIMI_ERR_USAGE, "comm census: the cuda backend counts its collectives elsewhere");
    return cpu_backend_take_comm_census(be->cpu, rank, out, err);
}

size_t backend_cache_bytes_per_rank(const backend *be)
{
    if (be->kind == BACKEND_CUDA)
        return (size_t)kv_shard_slots(cuda_backend_capacity(be->cuda), be->dcp) *
               kv_bytes_per_token(be->cfg, be->cache_format);
    return cpu_backend_cache_bytes_per_rank(be->cpu);
}

long long backend_runtime_overhead(const backend *be, int *device)
{
    if (be->kind == BACKEND_CUDA)
        return cuda_backend_runtime_overhead(be->cuda, device);
    *device = -1;
    return 0;
}

const char *backend_comm_description(const backend *be)
{
    return be->kind == BACKEND_CUDA ? cuda_backend_comm_description(be->cuda) : NULL;
}

int backend_read_kv(backend *be, long n_pos, uint16_t *out, kimi_err *err)
{
    if (be->kind == BACKEND_CUDA)
        return cuda_backend_read_kv(be->cuda, n_pos, out, err);
    return cpu_backend_read_kv(be->cpu, n_pos, out, err);
}
