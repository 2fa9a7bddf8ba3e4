/* forward: one tensor-parallel rank of the CPU backend: views of its shard of every weight (in
 * place in the mmap'ed checkpoint), its part of the latent cache (fp16 or fp8; a replica, or 1/dcp
 * of the positions under decode context parallelism), and the forward pass over a chunk of tokens,
 * written to read like the math of docs/MODEL_FORMAT.md. */
#ifndef KIMI_FORWARD_H
#define KIMI_FORWARD_H

#include <stdint.h>

#include "engine/base/error.h"
#include "engine/backend/backend.h"
#include "engine/backend/tp_comm.h"
#include "engine/model/weights.h"
#include "engine/backend/worker_pool.h"
#include "kernels/kv_format.h"

typedef struct rank_model rank_model;

typedef struct {
    const model_weights *mw;
    int tp, rank;
    long capacity;              /* positions of the context */
    kv_cache_format cache_format; /* of the latent cache's rows (kernels/kv_format.h) */
    cpu_activations activations; /* of the NVFP4 products (backend.h) */
    int dcp;                    /* ranks the cache is sharded over (engine/backend/kv_shard.h; 0 or 1:
                                   replicated); divides tp */
    int max_tokens;             /* most tokens of one rank_forward call */
    worker_pool *pool;          /* this rank's workers (borrowed) */
    tp_comm *comm;              /* shared by the ranks (borrowed) */
} rank_setup;

int rank_model_open(rank_model **out, const rank_setup *setup, kimi_err *err);
void rank_model_close(rank_model *m);

/* Layers [layer_begin, layer_end) of the pass over tokens [n] (n <= max_tokens, ids checked
 * by the caller) at positions start_pos.. (the cache holds [0, start_pos) already;
 * start_pos + n <= capacity), so a caller can stop between layers. A pass is one or more
 * calls with consecutive layer ranges and the same tokens: the one from layer 0 embeds the
 * tokens, the one up to the last layer computes the logits; the hidden state stays in the
 * rank between calls. Every rank calls it together. For j < n_logit_rows, logit_out[j]
 * [vocab] receives the logits of token logit_rows[j] (logit_out: rank 0's row pointers; the
 * other ranks pass NULL). per_token_decode: every token attends as a one-token decode step does
 * (absorbed attention, one query at a time) instead of the expanded prefill attention, so each
 * token's results equal bit for bit those of n one-token calls (every other operation of the
 * pass already computes each token the same way whatever n is). */
void rank_forward(rank_model *m, const int32_t *tokens, int n, long start_pos, int layer_begin, int layer_end,
                  const int *logit_rows, int n_logit_rows, float *const *logit_out, int per_token_decode);

/* What the numbers of rank_forward did (rank 0 watches; the ranks share h and the cache
 * contents): the first layer since the last take whose output held NaN or inf (-1: the token
 * embeddings; RANK_ALL_FINITE: none), and the cache values saturated to +-65504 since the last
 * take. Each take resets what it reads. */
#define RANK_ALL_FINITE (-2)
int rank_model_take_nonfinite(rank_model *m);
long rank_model_take_clamps(rank_model *m);

/* This rank's cache of one layer: [kv_shard_slots(capacity, dcp)][kv_row_bytes(setup's cache_format, ...)],
 * slot i holding position i * dcp + (rank % dcp). */
const uint8_t *rank_model_cache(const rank_model *m, int layer);

/* Bytes of this rank's cache, all layers. */
size_t rank_model_cache_bytes(const rank_model *m);

#endif
