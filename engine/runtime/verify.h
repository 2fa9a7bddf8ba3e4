/* verify: the self-check that tells "the model, the cache or the code" apart on a user's own box:
 * the same tokens through a reference backend (the CPU, TP 1 by default) and a candidate (CUDA at
 * its TP and devices, or the CPU at another TP), compared by logits, top-1/top-5 agreement, KL
 * divergence and the fp16 latent cache, against the tolerances of docs/CONVENTIONS.md.
 *
 * The run: the prompt is prefilled in one backend_forward (logits of every prompt position),
 * then n_decode decode steps follow, each fed the reference's greedy id of the previous row, so
 * both backends see identical inputs; rows compared = n_tokens + n_decode, and the cache of all
 * those positions is read back (backend_read_kv) and compared.
 *
 * Memory: one backend at a time. The reference runs first (its greedy ids feed the candidate),
 * its logits and cache are kept on the host and it is closed; then the candidate opens, runs and
 * closes. Host heap besides the backends: 2 x rows x vocab x 4 B of logits and 2 x rows x
 * kv_bytes_per_token of cache (Kimi-K2.5, 80 rows: 2 x 80 x 163840 x 4 B = 105 MB and 2 x 80 x
 * 70,272 B = 11 MB). For Kimi-K2.5 the CPU reference computes from the mmap'ed 590 GB
 * checkpoint: its own heap is small (< 1 GB of chunk buffers), but every weight it touches
 * passes through the page cache. Per token it reads the non-expert weights (attention 202 MB x
 * 61 layers = 12.3 GB, router 0.33 GB, shared experts 1.5 GB, dense layer 0.2 GB, lm_head
 * 2.35 GB: ~16.7 GB) plus its 8 routed experts in each of 60 MoE layers (24.8 MB each: up to
 * 11.9 GB); a prefill of P tokens touches the union of their experts, about 384 x (1 - (1 -
 * 8/384)^P) per layer: ~57% of them (~324 GB) for P = 40, ~77% (~440 GB) for P = 70. So with
 * ~350-460 GB of free RAM for the page cache each byte is read from storage once (about a
 * minute at 7 GB/s); with less, the check still runs (the mmap's pages are reclaimable), but
 * every decode step re-reads its ~28 GB from storage (~4 s per step at 7 GB/s) and the
 * prefill's layers evict one another. The CUDA candidate then reads the whole checkpoint once
 * more to upload it (the pages the reference left in the cache make that faster).
 *
 * Tolerances (docs/CONVENTIONS.md, the CUDA-vs-reference contract, used for every candidate):
 *   logits:  max |Δ| <= VERIFY_LOGIT_MAX_ABS over every compared row and token.
 *   top-1:   the arg-max equal at every position where the reference's top-1 margin (largest
 *            minus second largest logit) exceeds VERIFY_ORDER_MARGIN. With |Δ| <= 5e-2 two
 *            logits more than 0.1 apart cannot swap, so this is what the logit bound implies.
 *   top-5:   the top-5 sets equal at every position where the reference's 5th-to-6th gap
 *            exceeds VERIFY_ORDER_MARGIN (same reasoning). Reported as the overlap fraction:
 *            mean over positions of |T5(reference) ∩ T5(candidate)| / 5, where T5(x) is the set
 *            of the 5 largest logits' token ids (ties: the lower id first; a vocabulary of fewer
 *            than 5 tokens: all of them).
 *   KL:      KL(ref || cand) = sum_i p_i (ln p_i - ln q_i), p = softmax(reference row),
 *            q = softmax(candidate row), in double, per position; max <= VERIFY_KL_MAX =
 *            VERIFY_LOGIT_MAX_ABS^2 / 2 nats, the bound the logit tolerance implies (KL = ln
 *            E_p[exp(Δ - E_p Δ)] <= (2 x 5e-2)^2 / 8 by Hoeffding's lemma). Mean reported.
 *   cache:   the fp16 latent cache [layer][position][kv_lora | rope] of both, as floats; each
 *            element's |Δ| relative to the rms of the reference vector it belongs to (the
 *            latent or the k_pe part of one layer and position): mean <= VERIFY_CACHE_MEAN_REL
 *            and none beyond VERIFY_CACHE_MAX_REL (the CPU cache contract, which the CUDA GEMM
 *            and step prefills also meet against each other), except elements one fp16 step
 *            apart: two correct implementations summing in another order round the same value
 *            to neighbouring fp16 numbers, and on an element of 8 x its vector's rms one step
 *            is 2^-11 to 2^-10 of 8 x rms, up to 7.8e-3 of the rms (tiny-k25 has no such
 *            outliers; a real checkpoint may). Also reported: max |Δ|, the max relative error, the fraction of
 *            elements whose values differ, and the excused one-step flips.
 * NaN anywhere counts as the worst value (an infinite difference). */
#ifndef KIMI_VERIFY_H
#define KIMI_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/base/error.h"
#include "engine/text/tokenizer.h"
#include "engine/model/weights.h"

#define VERIFY_LOGIT_MAX_ABS 5e-2
#define VERIFY_ORDER_MARGIN 0.1
#define VERIFY_KL_MAX (VERIFY_LOGIT_MAX_ABS * VERIFY_LOGIT_MAX_ABS / 2)
#define VERIFY_CACHE_MAX_REL 4e-3
#define VERIFY_CACHE_MEAN_REL 1e-4
#define VERIFY_TOP_K 5
#define VERIFY_MAX_DECODE 256
/* Every prompt position's logits are kept, twice: 4096 rows of Kimi-K2.5's vocabulary are
 * 2 x 2.7 GB. */
#define VERIFY_MAX_PROMPT 4096
#define VERIFY_DEFAULT_DECODE 8

/* The check's fixed prompt (kimi-chat --verify, kimi-probe verify without --tokens/--prompt):
 * 270 characters, so about 75 tokens once rendered at Kimi-K2.5's ~4 characters a token (an
 * estimate: more than one 64-token CUDA prefill step). */
#define VERIFY_DEFAULT_PROMPT                                                                           \
    "This is a self-check: the GPU must give the same answer as the CPU. In two short sentences, "     \
    "explain why the sky is blue at noon and red at sunset, then name the physicist the scattering "  \
    "is named after and the year he described it, and say whether the same holds on Mars."

typedef enum { VERIFY_LOGITS, VERIFY_TOP1, VERIFY_TOP5, VERIFY_KL, VERIFY_CACHE, VERIFY_N_METRICS } verify_metric;

typedef struct {
    /* logits, over rows [positions][vocab] */
    int positions;                  /* rows compared */
    size_t logit_count;             /* values compared (positions x vocab) */
    double logit_max_abs;           /* max |Δ| (INFINITY when a NaN was met) */
    double logit_sum_abs;           /* for the mean |Δ| */
    int logit_max_position;         /* the row of the max (-1 before any) */
    int logit_max_token;            /* the token id of the max */
    int top1_agree;                 /* positions whose arg-max is the same */
    int top1_clear;                 /* positions whose reference top-1 margin > VERIFY_ORDER_MARGIN */
    int top1_clear_differ;          /* ... of which the arg-max differs */
    long top5_shared;               /* sum over positions of |T5(ref) ∩ T5(cand)| */
    int top5_k;                     /* k of the overlap: min(VERIFY_TOP_K, vocab) */
    int top5_clear;                 /* positions whose reference 5th-to-6th gap > VERIFY_ORDER_MARGIN */
    int top5_clear_differ;          /* ... of which the sets differ */
    double kl_max, kl_sum;          /* nats */
    int kl_max_position;
    /* the fp16 latent cache, [layer][position][kv_lora | rope] */
    size_t cache_elements;
    size_t cache_differ;            /* elements whose values differ */
    double cache_max_abs;
    double cache_rel_max, cache_rel_sum;    /* |Δ| / rms(reference vector) */
    size_t cache_beyond;            /* elements beyond VERIFY_CACHE_MAX_REL, not one fp16 step apart */
    size_t cache_flips_beyond;      /* elements beyond it one fp16 step apart (rounding flips) */
    /* the run */
    int n_tokens, n_decode;         /* prompt tokens, decode steps */
    int32_t greedy[VERIFY_MAX_DECODE];  /* [n_decode] the reference's greedy ids fed to both */
} verify_report;

typedef struct {
    const int32_t *tokens;          /* [n_tokens] the prompt, prefilled in one call; 1..VERIFY_MAX_PROMPT */
    int n_tokens;
    int n_decode;                   /* decode steps after the prefill, 0..VERIFY_MAX_DECODE */
    backend_options reference;      /* usually BACKEND_CPU, tp 1; max_context is set by the check */
    backend_options candidate;      /* the backend under test; max_context is set by the check */
    const model_weights *candidate_weights;  /* NULL: the reference's; else another copy of the
                                                same architecture (a re-downloaded or patched
                                                checkpoint, checked against the original) */
    /* Optional: one line per phase ("reference cpu tp 1: prefill of 70 tokens"), for a caller
     * that shows progress; the line has no trailing newline. */
    void (*on_phase)(void *user, const char *line);
    void *on_phase_user;
} verify_options;

/* opt against mw, without running anything (verify_run does this first): the prompt's size and
 * ids, the decode steps (KIMI_ERR_INPUT), the candidate checkpoint's shape (KIMI_ERR_MODEL). */
int verify_check_options(const model_weights *mw, const verify_options *opt, kimi_err *err);

/* Run the check on mw (the reference's weights) and fill report (every metric; then
 * verify_metric_passed tells the verdict). Token ids outside the vocabulary are KIMI_ERR_INPUT, a
 * candidate checkpoint of another shape KIMI_ERR_MODEL; backend failures pass through. */
int verify_run(const model_weights *mw, const verify_options *opt, verify_report *report, kimi_err *err);

/* ---- the arithmetic, exposed for the unit tests ---- */

/* A report with nothing compared yet. */
void verify_report_init(verify_report *r);
/* Add rows [rows][vocab] of reference and candidate logits (row index = position). */
void verify_add_logits(verify_report *r, const float *reference, const float *candidate, int rows, int vocab);
/* Add n_vectors cache vectors of latent + rope fp16 values each. */
void verify_add_cache(verify_report *r, const uint16_t *reference, const uint16_t *candidate, size_t n_vectors,
                      int latent, int rope);
/* KL(softmax(reference) || softmax(candidate)) over n logits, in nats (INFINITY for NaN). */
double verify_kl_divergence(const float *reference, const float *candidate, int n);
/* The ids of the k largest of x[n] (ties: the lower id first) into top[k], largest first;
 * returns min(k, n). */
int verify_top_k(const float *x, int n, int k, int *top);

/* The verdict of one metric, within its tolerance (1) or not (0). */
int verify_metric_passed(const verify_report *r, verify_metric m);
/* Its short name: "logits", "top1", "top5", "kl", "cache". */
const char *verify_metric_name(verify_metric m);
/* One line "PASS|FAIL <name> <values> (tolerance ...)" into line[cap] (no newline). */
void verify_metric_line(const verify_report *r, verify_metric m, char *line, size_t cap);

/* text as one user message, rendered in the chat format (thinking on, with the generation
 * prompt) as the chat would send it: *ids malloc'ed [*n_ids]. */
int verify_render_prompt(const tokenizer *tok, const char *text, int32_t **ids, int *n_ids, kimi_err *err);

#endif
