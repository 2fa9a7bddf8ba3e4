/* weights: every tensor the forward pass needs, resolved from the mmap'ed checkpoint into
 * typed, shape-checked views, plus the tensor-parallel plan and the memory plan. */
#ifndef KIMI_WEIGHTS_H
#define KIMI_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/config.h"
#include "kernels/kv_format.h"
#include "engine/base/error.h"
#include "kernels/tensor.h"

/* One linear y = W x, W [out][in]. */
typedef struct {
    char name[160];             /* checkpoint name without ".weight" */
    weight_matrix w;            /* the full matrix */
} linear;

typedef struct {
    linear gate;                /* [inter][hidden] */
    linear up;                  /* [inter][hidden] */
    linear down;                /* [hidden][inter] */
    int inter;                  /* intermediate width of this MLP */
} mlp_weights;

typedef struct {
    weight_vector input_norm;       /* [hidden] */
    weight_vector post_attn_norm;   /* [hidden] */
    linear q_a;                     /* [q_lora_rank][hidden] */
    weight_vector q_a_norm;         /* [q_lora_rank] */
    linear q_b;                     /* [heads*(nope+rope)][q_lora_rank] */
    linear kv_a;                    /* [kv_lora_rank+rope][hidden] (kv_a_proj_with_mqa) */
    weight_vector kv_a_norm;        /* [kv_lora_rank] */
    linear kv_b;                    /* [heads*(nope+v)][kv_lora_rank] */
    linear o;                       /* [hidden][heads*v] */

    int is_moe;
    mlp_weights dense;              /* !is_moe */
    linear router;                  /* is_moe: mlp.gate [experts][hidden] */
    weight_vector router_bias;      /* is_moe: e_score_correction_bias [experts]; n == 0 if absent */
    mlp_weights *experts;           /* is_moe: [experts] */
    mlp_weights shared;             /* is_moe && shared_experts > 0: inter = shared x moe_inter */
} layer_weights;

typedef struct safetensors_set safetensors_set;

/* Bytes of the mmap'ed checkpoint that the model uses. */
typedef struct {
    const uint8_t *data;
    size_t bytes;
    int file;                   /* the shard it lies in */
    int movable;                /* in a shard mmap of ours (weights_page_in may remap it) */
} weight_span;

typedef struct {
    model_config cfg;
    safetensors_set *files;         /* owns the mmaps every view points into */
    char prefix[64];                /* "language_model.model." etc. */
    linear embed;                   /* [vocab][hidden]; a row is a token's embedding */
    weight_vector final_norm;       /* [hidden] */
    linear lm_head;                 /* [vocab][hidden] (embed when tied) */
    layer_weights *layers;          /* [cfg.layers] */
    int n_nvfp4_linears, n_dense_linears;   /* linears of the language model (lm_head included
                                               unless tied; the embedding table is not a linear) */
    size_t weight_bytes;            /* bytes of every language-model tensor used */
    weight_span *spans;             /* [n_spans] those tensors, in address order; ones of a
                                       shard that overlap or lie within SPAN_GAP_MERGE of
                                       each other merged (the gap, a few scalars the model
                                       does not use, read with them) */
    size_t n_spans;
    double load_seconds;
} model_weights;

/* Open model_dir: config, every shard, every tensor resolved and checked. */
int weights_load(model_weights *mw, const char *model_dir, kimi_err *err);
void weights_free(model_weights *mw);

/* Progress of weights_page_in: bytes of the spans read so far of their total. A non-zero
 * return stops the reading. */
typedef int (*weights_page_in_progress)(void *user, size_t done, size_t total);

/* weights_page_in's result when progress stopped it (not an error: err is left alone). */
#define WEIGHTS_STOPPED (-1)

typedef struct {
    int threads;                        /* readers, at least 1 */
    /* Also move the weights into 2 MiB pages: every 2 MiB-aligned stretch inside a span of a
     * shard mmap is copied into anonymous memory advised MADV_HUGEPAGE, made read-only and
     * moved over the mmap at the same address (mremap), so every pointer into the weights
     * stays valid. A decode step reads each weight once, and with 4 KiB pages every page of
     * it costs a TLB miss (a two-level walk in a virtual machine) and stops the hardware
     * prefetcher; in 2 MiB pages the bench model's MoE products ran 1.5x faster. The stretch
     * stays mapped from the file where this fails (no memory, too many mappings). */
    int huge_pages;
    double report_seconds;              /* between progress calls */
    weights_page_in_progress progress;  /* may be NULL */
    void *user;
} weights_page_in_options;

/* Read the model's weights into memory so that the first forward pass does not wait for the
 * disk: o->threads threads take 64 MiB steps of the spans in address order (madvise WILLNEED on
 * the step, then one byte of every page, or the copy into 2 MiB pages). The calling thread only
 * waits and reports: progress is called on it every report_seconds while the threads read, and
 * once at the end with done == total. When progress returns non-zero, the threads finish the
 * step they are in and no more is read: WEIGHTS_STOPPED (nothing to free; pages read stay).
 * Otherwise 0, or KIMI_ERR_NOMEM when the threads cannot start. *huge_bytes (may be NULL): the
 * bytes now in anonymous memory advised for 2 MiB pages. */
int weights_page_in(const model_weights *mw, const weights_page_in_options *o, size_t *huge_bytes, kimi_err *err);

/* 1 when the kernel offers transparent huge pages to memory advised MADV_HUGEPAGE
 * (/sys/kernel/mm/transparent_hugepage/enabled is [always] or [madvise]). */
int weights_huge_pages_available(void);

/* Look up any linear by checkpoint name (without ".weight"), for kimi-probe weights. */
const linear *weights_find_linear(const model_weights *mw, const char *name);

/* ---- tensor-parallel plan: how rank r of tp slices each sharded linear ---- */
typedef struct { int begin, end; } index_range;

typedef struct {
    int tp, rank;
    index_range heads;              /* attention heads of this rank */
    index_range dense_inter;        /* dense MLP intermediate columns */
    index_range moe_inter;          /* every routed expert's intermediate columns */
    index_range shared_inter;       /* shared expert intermediate columns */
    index_range vocab;              /* lm_head rows */
    size_t weight_bytes;            /* bytes of weights this rank reads (replicated ones included) */
} tp_shard;

int tp_shard_plan(const model_weights *mw, int tp, int rank, tp_shard *out, kimi_err *err);

/* Views of a row range [r.begin, r.end) or a K range of a full matrix (no copies). */
weight_matrix weight_rows(const weight_matrix *w, index_range r);
weight_matrix weight_cols(const weight_matrix *w, index_range k);

/* ---- memory plan ---- */
/* One position's cache row in every layer: kv_row_bytes(format, kv_lora_rank, qk_rope_dim) *
 * layers (fp16: (kv_lora_rank + qk_rope_dim) * 2 B; fp8: kernels/kv_format.h). */
size_t kv_bytes_per_token(const model_config *cfg, kv_cache_format format);
/* Positions that fit in budget_bytes per rank after that rank's weights (0 if none). */
long max_context_for_budget(const model_config *cfg, kv_cache_format format, size_t rank_weight_bytes,
                            size_t budget_bytes);

#endif
