/* kv_cache: token-id bookkeeping beside the backend's latent cache, and context planning. */
#include "engine/runtime/kv_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/kv_shard.h"
#include "engine/model/weights.h"

int kv_cache_init(kv_cache *c, long capacity, kimi_err *err)
{
    c->tokens = NULL;
    c->n = 0;
    c->capacity = 0;
    if (capacity <= 0 || (unsigned long)capacity > SIZE_MAX / sizeof *c->tokens)
        return kimi_fail(err, KIMI_ERR_USAGE, "KV cache capacity %ld positions is out of range", capacity);
    c->tokens = malloc((size_t)capacity * sizeof *c->tokens);
    if (!c->tokens)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the ids of %ld cache positions", capacity);
    c->capacity = capacity;
    return 0;
}

void kv_cache_free(kv_cache *c)
{
    free(c->tokens);
    c->tokens = NULL;
    c->n = c->capacity = 0;
}

long kv_cache_reusable(const kv_cache *c, const int32_t *prompt, long n)
{
    long limit = n - 1 < c->n ? n - 1 : c->n, common = 0;
    while (common < limit && c->tokens[common] == prompt[common])
        common++;
    return common;
}

void kv_cache_truncate(kv_cache *c, long pos)
{
    if (pos < c->n)
        c->n = pos < 0 ? 0 : pos;
}

int kv_cache_append(kv_cache *c, const int32_t *tokens, long n, kimi_err *err)
{
    if (n < 0 || n > c->capacity - c->n)
        return kimi_fail(err, KIMI_ERR_STATE, "context full: %ld cached + %ld new positions > %ld in the KV cache",
                         c->n, n, c->capacity);
    memcpy(c->tokens + c->n, tokens, (size_t)n * sizeof *tokens);
    c->n += n;
    return 0;
}

static double gib(size_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

static long fit_with(const model_config *cfg, kv_cache_format format, size_t rank_weight_bytes,
                     size_t rank_budget_bytes, int dcp)
{
    if (rank_budget_bytes == 0)
        return -1;
    long model_max = cfg->max_position > 0 ? cfg->max_position : 0;
    long fit = kv_shard_context(max_context_for_budget(cfg, format, rank_weight_bytes, rank_budget_bytes), dcp);
    return model_max > 0 && fit > model_max ? model_max : fit;
}

int kv_cache_plan_context(const model_config *cfg, kv_cache_format format, size_t rank_weight_bytes,
                          size_t rank_budget_bytes, int tp, int dcp, long requested, const char *budget_source,
                          kv_cache_plan *out, kimi_err *err)
{
    memset(out, 0, sizeof *out);
    if (tp < 1)
        return kimi_fail(err, KIMI_ERR_USAGE, "tp %d: must be at least 1", tp);
    int rc = kv_shard_check(tp, dcp, err);
    if (rc)
        return rc;
    if (requested < 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "max context %ld: must be 0 (from the memory budget) or positive",
                         requested);
    out->tp = tp;
    out->dcp = dcp;
    out->rank_weight_bytes = rank_weight_bytes;
    out->rank_budget_bytes = rank_budget_bytes;
    out->format = format;
    out->kv_bytes_per_token = kv_bytes_per_token(cfg, format);
    long model_max = cfg->max_position > 0 ? cfg->max_position : 0;

    out->max_fit_fp16 = fit_with(cfg, KV_CACHE_FP16, rank_weight_bytes, rank_budget_bytes, dcp);
    out->max_fit_fp8 = fit_with(cfg, KV_CACHE_FP8, rank_weight_bytes, rank_budget_bytes, dcp);
    out->max_fit = format == KV_CACHE_FP8 ? out->max_fit_fp8 : out->max_fit_fp16;
    char budget_text[400] = "", sharding[120] = "";
    if (dcp > 1)
        snprintf(sharding, sizeof sharding, ", the cache sharded over %d ranks (dcp %d): %zu B per position per rank",
                 dcp, dcp, out->kv_bytes_per_token / (size_t)dcp);
    if (rank_budget_bytes > 0)
        snprintf(budget_text, sizeof budget_text,
                 "%s: %.2f GiB per rank x %d, after %.2f GiB of weights per rank, at %zu B per position in the %s "
                 "cache%s; an %s cache would hold %ld",
                 budget_source, gib(rank_budget_bytes), tp, gib(rank_weight_bytes), out->kv_bytes_per_token,
                 kv_cache_format_name(format), sharding,
                 kv_cache_format_name(format == KV_CACHE_FP8 ? KV_CACHE_FP16 : KV_CACHE_FP8),
                 format == KV_CACHE_FP8 ? out->max_fit_fp16 : out->max_fit_fp8);

    if (requested > 0) {
        if (model_max > 0 && requested > model_max)
            return kimi_fail(err, KIMI_ERR_USAGE,
                             "max context %ld exceeds the model's max_position_embeddings %ld", requested,
                             model_max);
        if (out->max_fit >= 0 && requested > out->max_fit)
            return kimi_fail(err, KIMI_ERR_NOMEM, "max context %ld does not fit: at most %ld positions (%s)",
                             requested, out->max_fit, budget_text);
        out->max_context = requested;
        if (out->max_fit >= 0)
            snprintf(out->summary, sizeof out->summary, "context %ld positions (as asked; up to %ld fit, %s)",
                     requested, out->max_fit, budget_text);
        else
            snprintf(out->summary, sizeof out->summary, "context %ld positions (as asked%s) in the %s cache", requested,
                     sharding, kv_cache_format_name(format));
        return 0;
    }

    if (out->max_fit < 0)
        return kimi_fail(err, KIMI_ERR_USAGE,
                         "no memory budget is known for this backend: give a max context or a memory budget");
    if (out->max_fit < 1)
        return kimi_fail(err, KIMI_ERR_NOMEM, "the memory budget does not hold the weights plus one cache position (%s)",
                         budget_text);
    out->max_context = out->max_fit;
    snprintf(out->summary, sizeof out->summary, "context %ld positions: %s (%s)", out->max_context,
             out->max_fit == model_max ? "the model's max_position_embeddings" : "what the memory budget holds",
             budget_text);
    return 0;
}
