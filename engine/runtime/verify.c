/* verify: the reference-vs-candidate self-check (engine/runtime/verify.h): runs both backends in turn on
 * the same tokens, then compares logits, top-k sets, KL divergence and the fp16 latent cache. */
#include "engine/runtime/verify.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/monotonic.h"
#include "engine/text/chat.h"
#include "kernels/cpu/numeric.h"

/* ---- the arithmetic ---- */

void verify_report_init(verify_report *r)
{
    memset(r, 0, sizeof *r);
    r->logit_max_position = -1;
    r->logit_max_token = -1;
    r->kl_max_position = -1;
}

int verify_top_k(const float *x, int n, int k, int *top)
{
    int m = 0;
    if (k > n)
        k = n;
    if (k < 1)
        return 0;
    for (int i = 0; i < n; i++) {
        if (m == k && !(x[i] > x[top[m - 1]]))
            continue;
        /* after every kept value >= x[i]: equal values keep the lower id first */
        int at = m < k ? m : m - 1;
        while (at > 0 && x[i] > x[top[at - 1]]) {
            top[at] = top[at - 1];
            at--;
        }
        top[at] = i;
        if (m < k)
            m++;
    }
    return m;
}

double verify_kl_divergence(const float *reference, const float *candidate, int n)
{
    double max_p = -INFINITY, max_q = -INFINITY;
    for (int i = 0; i < n; i++) {
        max_p = reference[i] > max_p ? reference[i] : max_p;
        max_q = candidate[i] > max_q ? candidate[i] : max_q;
    }
    double sum_p = 0, sum_q = 0;
    for (int i = 0; i < n; i++) {
        sum_p += exp((double)reference[i] - max_p);
        sum_q += exp((double)candidate[i] - max_q);
    }
    double lse_p = max_p + log(sum_p), lse_q = max_q + log(sum_q), kl = 0;
    for (int i = 0; i < n; i++) {
        double log_p = (double)reference[i] - lse_p, log_q = (double)candidate[i] - lse_q, p = exp(log_p);
        if (p > 0 || isnan(p))  /* p = 0 adds nothing, even where ln q is -inf */
            kl += p * (log_p - log_q);
    }
    if (isnan(kl))
        return INFINITY;
    return kl > 0 ? kl : 0;  /* KL >= 0: a negative sum is rounding */
}

static void add_logit_row(verify_report *r, const float *ref, const float *cand, int vocab, int position)
{
    for (int i = 0; i < vocab; i++) {
        double d = fabs((double)cand[i] - (double)ref[i]);
        if (isnan(d))
            d = INFINITY;
        if (d > r->logit_max_abs || r->logit_max_position < 0) {
            r->logit_max_abs = d;
            r->logit_max_position = position;
            r->logit_max_token = i;
        }
        r->logit_sum_abs += d;
    }
    r->logit_count += (size_t)vocab;

    /* the reference's 6 largest give its top-1 margin and its 5th-to-6th gap */
    int ref_top[VERIFY_TOP_K + 1], cand_top[VERIFY_TOP_K];
    int ref_n = verify_top_k(ref, vocab, VERIFY_TOP_K + 1, ref_top);
    int k = verify_top_k(cand, vocab, VERIFY_TOP_K, cand_top);
    r->top5_k = k;
    int top1_same = ref_top[0] == cand_top[0];
    r->top1_agree += top1_same;
    if (ref_n >= 2 && (double)ref[ref_top[0]] - (double)ref[ref_top[1]] > VERIFY_ORDER_MARGIN) {
        r->top1_clear++;
        r->top1_clear_differ += !top1_same;
    }
    int shared = 0;
    for (int a = 0; a < k; a++)
        for (int b = 0; b < k; b++)
            shared += cand_top[a] == ref_top[b];
    r->top5_shared += shared;
    if (ref_n > VERIFY_TOP_K &&
        (double)ref[ref_top[VERIFY_TOP_K - 1]] - (double)ref[ref_top[VERIFY_TOP_K]] > VERIFY_ORDER_MARGIN) {
        r->top5_clear++;
        r->top5_clear_differ += shared < k;
    }

    double kl = verify_kl_divergence(ref, cand, vocab);
    if (kl > r->kl_max || r->kl_max_position < 0) {
        r->kl_max = kl;
        r->kl_max_position = position;
    }
    r->kl_sum += kl;
}

void verify_add_logits(verify_report *r, const float *reference, const float *candidate, int rows, int vocab)
{
    for (int row = 0; row < rows; row++) {
        size_t at = (size_t)row * (size_t)vocab;
        add_logit_row(r, reference + at, candidate + at, vocab, r->positions);
        r->positions++;
    }
}

/* How many fp16 values lie between a and b, plus one (0: equal, 1: neighbours; the two zeros
 * count as one value); -1 when either is an infinity or a NaN. */
static int fp16_steps(uint16_t a, uint16_t b)
{
    if ((a & 0x7C00) == 0x7C00 || (b & 0x7C00) == 0x7C00)
        return -1;
    /* sign-magnitude to a monotonic integer line */
    int ka = a & 0x8000 ? -(int)(a & 0x7FFF) : (int)a, kb = b & 0x8000 ? -(int)(b & 0x7FFF) : (int)b;
    return abs(ka - kb);
}

void verify_add_cache(verify_report *r, const uint16_t *reference, const uint16_t *candidate, size_t n_vectors,
                      int latent, int rope)
{
    size_t row = (size_t)latent + (size_t)rope, parts[3] = {0, (size_t)latent, row};
    for (size_t v = 0; v < n_vectors; v++) {
        const uint16_t *ref = reference + v * row, *cand = candidate + v * row;
        for (int p = 0; p < 2; p++) {
            if (parts[p + 1] == parts[p])
                continue;
            double squares = 0;
            for (size_t i = parts[p]; i < parts[p + 1]; i++)
                squares += (double)f16_to_float(ref[i]) * (double)f16_to_float(ref[i]);
            double rms = sqrt(squares / (double)(parts[p + 1] - parts[p]));
            for (size_t i = parts[p]; i < parts[p + 1]; i++) {
                float a = f16_to_float(ref[i]), b = f16_to_float(cand[i]);
                double d = fabs((double)b - (double)a);
                if (isnan(d))
                    d = INFINITY;
                double rel = d / (rms > 0 ? rms : 1);
                if (rel > VERIFY_CACHE_MAX_REL) {
                    if (fp16_steps(ref[i], cand[i]) == 1)
                        r->cache_flips_beyond++;
                    else
                        r->cache_beyond++;
                }
                r->cache_differ += !(a == b);
                r->cache_max_abs = d > r->cache_max_abs ? d : r->cache_max_abs;
                r->cache_rel_max = rel > r->cache_rel_max ? rel : r->cache_rel_max;
                r->cache_rel_sum += rel;
                r->cache_elements++;
            }
        }
    }
}

/* ---- the verdict ---- */

static double mean_of(double sum, double count)
{
    return count > 0 ? sum / count : 0;
}

int verify_metric_passed(const verify_report *r, verify_metric m)
{
    switch (m) {
    case VERIFY_LOGITS: return r->logit_max_abs <= VERIFY_LOGIT_MAX_ABS;
    case VERIFY_TOP1: return r->top1_clear_differ == 0;
    case VERIFY_TOP5: return r->top5_clear_differ == 0;
    case VERIFY_KL: return r->kl_max <= VERIFY_KL_MAX;
    case VERIFY_CACHE:
        return r->cache_beyond == 0 && mean_of(r->cache_rel_sum, (double)r->cache_elements) <= VERIFY_CACHE_MEAN_REL;
    case VERIFY_N_METRICS: break;
    }
    return 0;
}

const char *verify_metric_name(verify_metric m)
{
    static const char *const names[VERIFY_N_METRICS] = {"logits", "top1", "top5", "kl", "cache"};
    return m < VERIFY_N_METRICS ? names[m] : "?";
}

void verify_metric_line(const verify_report *r, verify_metric m, char *line, size_t cap)
{
    int n = snprintf(line, cap, "%s %s ", verify_metric_passed(r, m) ? "PASS" : "FAIL", verify_metric_name(m));
    if (n < 0 || (size_t)n >= cap)
        return;
    char *at = line + n;
    size_t left = cap - (size_t)n;
    double positions = r->positions;
    switch (m) {
    case VERIFY_LOGITS:
        snprintf(at, left, "max |Δ| %.3g at position %d token %d, mean %.3g over %d positions x %zu (tolerance: max %g)",
                 r->logit_max_abs, r->logit_max_position, r->logit_max_token,
                 mean_of(r->logit_sum_abs, (double)r->logit_count), r->positions,
                 r->positions ? r->logit_count / (size_t)r->positions : 0, VERIFY_LOGIT_MAX_ABS);
        break;
    case VERIFY_TOP1:
        snprintf(at, left,
                 "agreement %.4f (%d of %d positions); arg-max differs at %d of the %d positions whose reference "
                 "top-1 margin > %g (tolerance: 0)",
                 mean_of(r->top1_agree, positions), r->top1_agree, r->positions, r->top1_clear_differ, r->top1_clear,
                 VERIFY_ORDER_MARGIN);
        break;
    case VERIFY_TOP5:
        snprintf(at, left,
                 "overlap %.4f (mean |T%d ref ∩ T%d cand| / %d over %d positions); sets differ at %d of the %d "
                 "positions whose reference %dth-%dth gap > %g (tolerance: 0)",
                 mean_of((double)r->top5_shared, positions * r->top5_k), r->top5_k, r->top5_k, r->top5_k, r->positions,
                 r->top5_clear_differ, r->top5_clear, VERIFY_TOP_K, VERIFY_TOP_K + 1, VERIFY_ORDER_MARGIN);
        break;
    case VERIFY_KL:
        snprintf(at, left, "KL(ref || cand) max %.3g nats at position %d, mean %.3g (tolerance: max %g)", r->kl_max,
                 r->kl_max_position, mean_of(r->kl_sum, positions), VERIFY_KL_MAX);
        break;
    case VERIFY_CACHE:
        snprintf(at, left,
                 "fp16 latent cache max |Δ| %.3g, %.4f%% of %zu elements differ; relative to rms: max %.3g mean "
                 "%.3g; beyond %g x rms: %zu elements, besides %zu one-step fp16 rounding flips (tolerance: 0 "
                 "elements, mean %g)",
                 r->cache_max_abs, 100 * mean_of((double)r->cache_differ, (double)r->cache_elements),
                 r->cache_elements, r->cache_rel_max, mean_of(r->cache_rel_sum, (double)r->cache_elements),
                 VERIFY_CACHE_MAX_REL, r->cache_beyond, r->cache_flips_beyond, VERIFY_CACHE_MEAN_REL);
        break;
    case VERIFY_N_METRICS: break;
    }
}

/* ---- the run ---- */

static void phase(const verify_options *opt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void phase(const verify_options *opt, const char *fmt, ...)
{
    if (!opt->on_phase)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    opt->on_phase(opt->on_phase_user, line);
}

/* "cpu tp 1", "cuda tp 8 on devices 0,1,2,3,4,5,6,7" */
static void describe_backend(const backend_options *bo, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s tp %d", bo->kind == BACKEND_CUDA ? "cuda" : "cpu", bo->tp);
    for (int i = 0; bo->kind == BACKEND_CUDA && bo->devices && i < bo->n_devices && n > 0 && (size_t)n < cap; i++)
        n += snprintf(out + n, cap - (size_t)n, "%s%d", i ? "," : " on devices ", bo->devices[i]);
}

static int arg_max(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* One backend's run: the prefill (logits of every prompt position), then the decode steps fed
 * greedy[] (choose_greedy: filled here, with the arg-max of the previous row), then the cache.
 * logits [n_tokens + n_decode][vocab], cache [layers][n_tokens + n_decode][kv_lora + rope]. */
static int run_one(const model_weights *mw, const backend_options *base, const char *role, const verify_options *opt,
                   int32_t *greedy, int choose_greedy, float *logits, uint16_t *cache, kimi_err *err)
{
    int n = opt->n_tokens, rows = n + opt->n_decode, vocab = mw->cfg.vocab, zero = 0;
    backend_options bo = *base;
    bo.max_context = rows;
    char what[128];
    describe_backend(&bo, what, sizeof what);
    int *prompt_rows = malloc((size_t)n * sizeof *prompt_rows);
    if (!prompt_rows)
        return kimi_fail(err, KIMI_ERR_NOMEM, "verify: out of memory for %d logit rows", n);
    for (int i = 0; i < n; i++)
        prompt_rows[i] = i;
    phase(opt, "%s %s: opening", role, what);
    double start = monotonic_seconds();
    backend *be = NULL;
    int rc = backend_open(&be, mw, &bo, err);
    if (!rc) {
        phase(opt, "%s %s: prefill of %d tokens, %d decode steps", role, what, n, opt->n_decode);
        rc = backend_forward(be, opt->tokens, n, 0, prompt_rows, n, logits, err);
    }
    for (int i = 0; !rc && i < opt->n_decode; i++) {
        if (choose_greedy)
            greedy[i] = arg_max(logits + (size_t)(n - 1 + i) * (size_t)vocab, vocab);
        rc = backend_forward(be, &greedy[i], 1, n + i, &zero, 1, logits + (size_t)(n + i) * (size_t)vocab, err);
    }
    if (!rc)
        rc = backend_read_kv(be, rows, cache, err);
    backend_close(be);
    free(prompt_rows);
    if (rc == BACKEND_STOPPED)
        return kimi_fail(err, KIMI_ERR_STATE, "verify: the %s (%s) was stopped", role, what);
    if (rc)
        return kimi_err_prefix(err, rc, "verify: %s %s", role, what);
    phase(opt, "%s %s: done in %.1f s", role, what, monotonic_seconds() - start);
    return 0;
}

/* A device candidate that cannot open (a build without CUDA, no device, too little memory for
 * its shard and rows positions of cache) is said before the reference spends its time. */
static int candidate_fits(const model_weights *mw, const backend_options *bo, long rows, kimi_err *err)
{
    if (bo->kind != BACKEND_CUDA)
        return 0;
    size_t rank_budget, rank_fixed;
    char what[128];
    describe_backend(bo, what, sizeof what);
    int rc = backend_memory(mw, bo, &rank_budget, &rank_fixed, err);
    if (rc)
        return kimi_err_prefix(err, rc, "verify: candidate %s", what);
    if (max_context_for_budget(&mw->cfg, bo->kv_cache, rank_fixed, rank_budget) < rows)
        return kimi_fail(err, KIMI_ERR_NOMEM,
                         "verify: candidate %s: a rank needs %.2f GiB for its weights and workspace and %ld positions "
                         "of cache, the device has %.2f GiB free per rank",
                         what, (double)rank_fixed / 1073741824.0, rows, (double)rank_budget / 1073741824.0);
    return 0;
}

/* The candidate's checkpoint must have the reference's shape, or nothing lines up. */
static int same_shape(const model_config *a, const model_config *b, kimi_err *err)
{
    const struct {
        const char *name;
        int ref, cand;
    } fields[] = {
        {"vocab", a->vocab, b->vocab},
        {"hidden", a->hidden, b->hidden},
        {"layers", a->layers, b->layers},
        {"heads", a->heads, b->heads},
        {"kv_lora_rank", a->kv_lora_rank, b->kv_lora_rank},
        {"qk_rope_dim", a->qk_rope_dim, b->qk_rope_dim},
        {"experts", a->experts, b->experts},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (fields[i].ref != fields[i].cand)
            return kimi_fail(err, KIMI_ERR_MODEL, "verify: the candidate checkpoint has %s %d, the reference's %d",
                             fields[i].name, fields[i].cand, fields[i].ref);
    return 0;
}

int verify_check_options(const model_weights *mw, const verify_options *opt, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    const model_config *cfg = &mw->cfg;
    if (opt->n_tokens < 1 || opt->n_tokens > VERIFY_MAX_PROMPT || opt->n_decode < 0 ||
        opt->n_decode > VERIFY_MAX_DECODE)
        return kimi_fail(err, KIMI_ERR_INPUT, "verify: %d prompt tokens and %d decode steps (need 1..%d and 0..%d)",
                         opt->n_tokens, opt->n_decode, VERIFY_MAX_PROMPT, VERIFY_MAX_DECODE);
    for (int i = 0; i < opt->n_tokens; i++)
        if (opt->tokens[i] < 0 || opt->tokens[i] >= cfg->vocab)
            return kimi_fail(err, KIMI_ERR_INPUT, "verify: token id %d at index %d is outside the vocabulary [0, %d)",
                             opt->tokens[i], i, cfg->vocab);
    return opt->candidate_weights ? same_shape(cfg, &opt->candidate_weights->cfg, err) : 0;
}

int verify_run(const model_weights *mw, const verify_options *opt, verify_report *report, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    const model_config *cfg = &mw->cfg;
    const model_weights *cand_mw = opt->candidate_weights ? opt->candidate_weights : mw;
    verify_report_init(report);
    if (verify_check_options(mw, opt, err))
        return err->code;
    size_t rows = (size_t)opt->n_tokens + (size_t)opt->n_decode, vocab = (size_t)cfg->vocab;
    size_t row_halves = (size_t)cfg->kv_lora_rank + (size_t)cfg->qk_rope_dim;
    size_t vectors = (size_t)cfg->layers * rows;
    if (rows > SIZE_MAX / sizeof(float) / vocab || vectors > SIZE_MAX / sizeof(uint16_t) / row_halves)
        return kimi_fail(err, KIMI_ERR_NOMEM, "verify: %zu positions overflow the logit and cache sizes", rows);
    float *ref_logits = malloc(rows * vocab * sizeof(float)), *cand_logits = malloc(rows * vocab * sizeof(float));
    uint16_t *ref_cache = malloc(vectors * row_halves * sizeof(uint16_t));
    uint16_t *cand_cache = malloc(vectors * row_halves * sizeof(uint16_t));
    int rc = 0;
    if (!ref_logits || !cand_logits || !ref_cache || !cand_cache)
        rc = kimi_fail(err, KIMI_ERR_NOMEM, "verify: out of memory for the logits and caches of %zu positions", rows);
    if (!rc)
        rc = candidate_fits(cand_mw, &opt->candidate, (long)rows, err);
    if (!rc)
        rc = run_one(mw, &opt->reference, "reference", opt, report->greedy, 1, ref_logits, ref_cache, err);
    if (!rc)
        rc = run_one(cand_mw, &opt->candidate, "candidate", opt, report->greedy, 0, cand_logits, cand_cache, err);
    if (!rc) {
        report->n_tokens = opt->n_tokens;
        report->n_decode = opt->n_decode;
        verify_add_logits(report, ref_logits, cand_logits, (int)rows, cfg->vocab);
        verify_add_cache(report, ref_cache, cand_cache, vectors, cfg->kv_lora_rank, cfg->qk_rope_dim);
    }
    free(ref_logits);
    free(cand_logits);
    free(ref_cache);
    free(cand_cache);
    return rc;
}

/* ---- the prompt ---- */

int verify_render_prompt(const tokenizer *tok, const char *text, int32_t **ids, int *n_ids, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    chat_conversation conv;
    chat_conversation_init(&conv);
    chat_render_options ro = {.tools = NULL, .thinking = 1, .add_generation_prompt = 1};
    chat_rendering r = {0};
    int rc = chat_append(&conv, CHAT_ROLE_USER, text, strlen(text), err) ? 0 : err->code;
    if (!rc)
        rc = chat_render(tok, &conv, &ro, &r, err);
    if (!rc && (r.n_ids == 0 || r.n_ids > (size_t)VERIFY_MAX_PROMPT))
        rc = kimi_fail(err, KIMI_ERR_INPUT, "verify: the prompt renders to %zu tokens (1..%d)", r.n_ids,
                       VERIFY_MAX_PROMPT);
    if (!rc) {
        *ids = r.ids;
        *n_ids = (int)r.n_ids;
        r.ids = NULL;
    }
    chat_rendering_free(&r);
    chat_conversation_free(&conv);
    return rc;
}
