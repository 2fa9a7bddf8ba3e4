/* kv_cache: the engine's record of which token ids the backend's latent KV cache holds (for
 * prefix reuse) and the plan of how many positions the cache gets for a memory budget. The
 * cache itself (fp16 or fp8, kernels/kv_format.h) lives in the backend. */
#ifndef KIMI_KV_CACHE_H
#define KIMI_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/config.h"
#include "engine/base/error.h"
#include "kernels/kv_format.h"

typedef struct {
    int32_t *tokens;            /* [capacity]: the id whose cache entries sit at each position */
    long n;                     /* positions [0, n) hold valid entries */
    long capacity;              /* positions the backend's cache holds */
} kv_cache;

int kv_cache_init(kv_cache *c, long capacity, kimi_err *err);
void kv_cache_free(kv_cache *c);

/* Leading positions of prompt [n] that can be reused: the longest common prefix with the
 * cached ids, but at most n - 1, so at least one prompt token is run and its logits exist. */
long kv_cache_reusable(const kv_cache *c, const int32_t *prompt, long n);

/* Forget positions >= pos (the backend will overwrite them). */
void kv_cache_truncate(kv_cache *c, long pos);

/* Record that tokens [n] now fill positions c->n .. c->n + n - 1. */
int kv_cache_append(kv_cache *c, const int32_t *tokens, long n, kimi_err *err);

/* How many positions the cache gets. Every rank keeps a full replica of the latent cache
 * (docs/ARCHITECTURE.md), or with decode context parallelism (dcp > 1) 1/dcp of the positions
 * (engine/backend/kv_shard.h), so the plan is per rank: positions a rank stores =
 * (rank_budget - rank_weight_bytes) / kv_bytes_per_token, and the context that fits is dcp times
 * that, capped at max_position_embeddings.
 * The caller says what a rank's share is: on the CPU the ranks share one memory and one
 * mmap of the weights (budget / tp and weights / tp), on GPUs each rank has its device. */
typedef struct {
    long max_context;           /* positions the cache is opened with */
    long max_fit;               /* most positions the budget holds (capped at max_position); -1 = no budget known */
    size_t rank_budget_bytes;   /* 0 = none known */
    size_t rank_weight_bytes;
    size_t kv_bytes_per_token;  /* per position a rank stores (every position when dcp is 1), in the chosen format */
    kv_cache_format format;     /* the chosen format */
    long max_fit_fp16, max_fit_fp8; /* max_fit with each format at this dcp (-1 = no budget known) */
    int tp, dcp;
    char summary[600];          /* one line saying what was chosen and why, for the user */
} kv_cache_plan;

/* format: the cache's element format; the summary says it and what fits with each format.
 * requested > 0: that many positions, an error naming the largest that fits when it does not.
 * requested == 0: as many as fit (a budget must be known). budget_source says where the budget
 * came from ("75% of available memory", "--mem-gib"), for the summary and errors. */
int kv_cache_plan_context(const model_config *cfg, kv_cache_format format, size_t rank_weight_bytes,
                          size_t rank_budget_bytes, int tp, int dcp, long requested, const char *budget_source,
                          kv_cache_plan *out, kimi_err *err);

#endif
