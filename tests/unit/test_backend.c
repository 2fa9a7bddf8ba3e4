/* test_backend: the CPU backend on the tiny checkpoint: tensor-parallel degrees and worker
 * counts agree, decode (absorbed attention) agrees with prefill (expanded attention), prefix
 * reuse gives the logits of a full prefill, the cache reads back as [layer][position][row],
 * the between-layers watcher reports and stops a prefill, and bad requests are clear errors
 * (also with no kimi_err to fill). Also the communicator on its own. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/tp_comm.h"
#include "engine/model/weights.h"
#include "tests/unit/check.h"

#define TINY "tests/golden/fixtures/tiny-k25"
enum { N_TOKENS = 40 };

static model_weights mw;
static int32_t tokens[N_TOKENS];
static int rows[N_TOKENS];

static backend *open_backend(int tp, int threads, long capacity)
{
    kimi_err err = {0};
    backend *be = NULL;
    backend_options opt = {.kind = BACKEND_CPU, .tp = tp, .threads_per_rank = threads, .max_context = capacity};
    int rc = backend_open(&be, &mw, &opt, &err);
    CHECK_MSG(rc == 0, "backend_open tp %d threads %d: %s", tp, threads, err.msg);
    return be;
}

/* Logits of every row of tokens [N_TOKENS] in one prefill: [N_TOKENS][vocab], malloc'ed. */
static float *prefill_logits(int tp, int threads)
{
    kimi_err err = {0};
    backend *be = open_backend(tp, threads, N_TOKENS);
    float *logits = malloc((size_t)N_TOKENS * mw.cfg.vocab * sizeof *logits);
    if (be && backend_forward(be, tokens, N_TOKENS, 0, rows, N_TOKENS, logits, &err))
        CHECK_MSG(0, "forward: %s", err.msg);
    backend_close(be);
    return logits;
}

static double mean_diff(const float *a, const float *b, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += fabs((double)a[i] - b[i]);
    return sum / (double)n;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, isnan(a[i]) || isnan(b[i]) ? INFINITY : fabs((double)a[i] - b[i]));
    return worst;
}

static void check_tp_and_threads(void)
{
    size_t n = (size_t)N_TOKENS * mw.cfg.vocab;
    float *one = prefill_logits(1, 1);
    float *two_threads = prefill_logits(1, 2);
    /* Workers split rows and heads, never a sum: the bits cannot change. */
    CHECK_MSG(!memcmp(one, two_threads, n * sizeof *one), "1 and 2 workers differ by %g", max_diff(one, two_threads, n));
    /* Ranks sum o_proj and the MLPs in another order; that alone flips the fp16 rounding of a
     * few cache entries, which moves logits by up to ~1e-3 (docs/CONVENTIONS.md). */
    float *tp2 = NULL;
    for (int tp = 2; tp <= 8; tp *= 2) {
        float *other = prefill_logits(tp, tp == 8 ? 1 : 2);
        double d = max_diff(one, other, n), mean = mean_diff(one, other, n);
        CHECK_MSG(d < 3e-3 && mean < 2e-4, "tp %d differs from tp 1 by max %g mean %g", tp, d, mean);
        if (tp == 2)
            tp2 = other;
        else
            free(other);
    }
    free(two_threads);

    /* Decode token by token (absorbed attention) against the prefill (expanded), both tp 2. */
    kimi_err err = {0};
    backend *be = open_backend(2, 1, N_TOKENS);
    float *step = malloc((size_t)mw.cfg.vocab * sizeof *step);
    double worst = 0, sum = 0;
    int zero = 0;
    for (int t = 0; be && t < N_TOKENS; t++) {
        if (backend_forward(be, &tokens[t], 1, t, &zero, 1, step, &err)) {
            CHECK_MSG(0, "decode step %d: %s", t, err.msg);
            break;
        }
        for (int i = 0; i < mw.cfg.vocab; i++) {
            double d = fabs((double)step[i] - tp2[(size_t)t * mw.cfg.vocab + i]);
            worst = fmax(worst, d);
            sum += d;
        }
    }
    CHECK_MSG(worst < 3e-3 && sum / (double)n < 2e-4, "decode vs prefill: max %g mean %g", worst, sum / (double)n);

    /* Prefix reuse: a different prompt sharing the first 25 tokens, then the original again
     * from position 25, gives the full prefill's logits. */
    int32_t other[N_TOKENS];
    memcpy(other, tokens, sizeof other);
    for (int t = 25; t < N_TOKENS; t++)
        other[t] = (tokens[t] * 7 + 3) % 2000;
    float *rest = malloc((size_t)(N_TOKENS - 25) * mw.cfg.vocab * sizeof *rest);
    if (be && (backend_forward(be, other, N_TOKENS, 0, NULL, 0, NULL, &err) ||
               backend_forward(be, tokens + 25, N_TOKENS - 25, 25, rows, N_TOKENS - 25, rest, &err)))
        CHECK_MSG(0, "prefix reuse: %s", err.msg);
    double d = max_diff(rest, tp2 + (size_t)25 * mw.cfg.vocab, (size_t)(N_TOKENS - 25) * mw.cfg.vocab);
    CHECK_MSG(d < 1e-5, "prefix reuse differs from the full prefill by %g", d);

    /* Logit rows in any order land in the order asked. */
    int picked[2] = {30, 4};
    float *two = malloc(2 * (size_t)mw.cfg.vocab * sizeof *two);
    if (be && backend_forward(be, tokens, N_TOKENS, 0, picked, 2, two, &err))
        CHECK_MSG(0, "picked rows: %s", err.msg);
    CHECK(max_diff(two, tp2 + (size_t)30 * mw.cfg.vocab, mw.cfg.vocab) == 0);
    CHECK(max_diff(two + mw.cfg.vocab, tp2 + (size_t)4 * mw.cfg.vocab, mw.cfg.vocab) == 0);

    /* The cache: [layer][position][latent | k_pe], the same for any layer's slice. */
    size_t row = (size_t)mw.cfg.kv_lora_rank + mw.cfg.qk_rope_dim;
    uint16_t *all = malloc((size_t)mw.cfg.layers * N_TOKENS * row * 2), *few = malloc((size_t)mw.cfg.layers * 5 * row * 2);
    CHECK_INT(backend_read_kv(be, N_TOKENS, all, &err), 0);
    CHECK_INT(backend_read_kv(be, 5, few, &err), 0);
    CHECK(!memcmp(few + 5 * row, all + (size_t)N_TOKENS * row, 5 * row * 2)); /* layer 1, positions 0..4 */
    int nonzero = 0;
    for (size_t i = 0; i < (size_t)mw.cfg.layers * N_TOKENS * row; i++)
        nonzero += all[i] != 0;
    CHECK(nonzero > (int)((size_t)mw.cfg.layers * N_TOKENS * row * 9 / 10));

    /* Bad requests. */
    CHECK_INT(backend_forward(be, tokens, 5, N_TOKENS - 4, NULL, 0, NULL, &err), KIMI_ERR_STATE);
    CHECK(strstr(err.msg, "context full") != NULL);
    int32_t bad_token = mw.cfg.vocab;
    CHECK_INT(backend_forward(be, &bad_token, 1, 0, NULL, 0, NULL, &err), KIMI_ERR_INPUT);
    int twice[2] = {3, 3};
    CHECK(backend_forward(be, tokens, 5, 0, twice, 2, two, &err) != 0);
    CHECK(backend_read_kv(be, N_TOKENS + 1, all, &err) != 0);
    CHECK_INT(backend_capacity(be), N_TOKENS);
    backend_close(be);

    backend_options opt = {.kind = BACKEND_CPU, .tp = 3, .max_context = 8};
    backend *none = NULL;
    CHECK_INT(backend_open(&none, &mw, &opt, &err), KIMI_ERR_USAGE);
    CHECK(strstr(err.msg, "--tp 3") != NULL && none == NULL);
    CHECK_MSG(strstr(strstr(err.msg, "--tp") + 1, "--tp") == NULL, "the flag twice: %s", err.msg);
    opt.tp = 1;
    opt.max_context = 0;
    CHECK(backend_open(&none, &mw, &opt, &err) != 0);

    free(one);
    free(tp2);
    free(step);
    free(rest);
    free(two);
    free(all);
    free(few);
}

/* ---- the between-layers watcher (backend_options.on_layer) ---- */

typedef struct {
    int calls, stop_at;             /* stop (return 1) on call number stop_at; 0 = never */
    double seen[64];                /* tokens_done of each call */
} watch_log;

static int watch(void *user, double tokens_done)
{
    watch_log *w = user;
    if (w->calls < 64)
        w->seen[w->calls] = tokens_done;
    return ++w->calls == w->stop_at;
}

/* A prefill reports after every layer, done rising to n; the logits are exactly those of an
 * unwatched run; a stop ends the call at once (BACKEND_STOPPED, err untouched) and the next
 * call over the same positions gives the same logits again. A decode step is not watched. */
static void check_on_layer(const float *want)
{
    kimi_err err = {0};
    watch_log w = {0};
    int layers = mw.cfg.layers;
    backend_options opt = {.kind = BACKEND_CPU, .tp = 2, .threads_per_rank = 1, .max_context = N_TOKENS,
                           .on_layer = watch, .on_layer_user = &w};
    backend *be = NULL;
    if (backend_open(&be, &mw, &opt, &err)) {
        CHECK_MSG(0, "backend_open: %s", err.msg);
        return;
    }
    size_t count = (size_t)N_TOKENS * mw.cfg.vocab;
    float *got = malloc(count * sizeof *got);
    CHECK_INT(backend_forward(be, tokens, N_TOKENS, 0, rows, N_TOKENS, got, &err), 0);
    CHECK_INT(w.calls, layers);
    int rising = 1;
    for (int i = 0; i < w.calls && i < 64; i++)
        rising &= w.seen[i] > (i ? w.seen[i - 1] : 0);
    CHECK(rising);
    CHECK_NEAR(w.seen[layers - 1], N_TOKENS, 0);
    CHECK(memcmp(got, want, count * sizeof *got) == 0);

    w = (watch_log){.stop_at = 2};
    err = (kimi_err){0};
    CHECK_INT(backend_forward(be, tokens, N_TOKENS, 0, rows, N_TOKENS, got, &err), BACKEND_STOPPED);
    CHECK_INT(w.calls, 2);
    CHECK_INT(err.code, 0);
    w = (watch_log){0};
    CHECK_INT(backend_forward(be, tokens, N_TOKENS, 0, rows, N_TOKENS, got, &err), 0);
    CHECK(memcmp(got, want, count * sizeof *got) == 0);
    w = (watch_log){0};
    CHECK_INT(backend_forward(be, tokens, 1, N_TOKENS - 1, rows, 1, got, &err), 0);
    CHECK_INT(w.calls, 0);
    free(got);
    backend_close(be);
}

/* Failures are failures without an error to fill: *out stays NULL, the status is non-zero. */
static void check_null_err(void)
{
    backend *none = NULL;
    backend_options opt = {.kind = BACKEND_CPU, .tp = 3, .threads_per_rank = 1, .max_context = 8};
    CHECK_INT(backend_open(&none, &mw, &opt, NULL), KIMI_ERR_USAGE);
    CHECK(none == NULL);
    /* A cache no memory holds fails inside the rank threads. */
    opt.tp = 2;
    opt.max_context = LONG_MAX / 4;
    CHECK_INT(backend_open(&none, &mw, &opt, NULL), KIMI_ERR_NOMEM);
    CHECK(none == NULL);
    kimi_err err = {0};
    CHECK_INT(backend_open(&none, &mw, &opt, &err), KIMI_ERR_NOMEM);
    CHECK_MSG(strstr(err.msg, "rank 0 of 2") != NULL, "%s", err.msg);
    model_weights missing;
    CHECK(weights_load(&missing, "tests/golden/fixtures/no-such-model", NULL) != 0);
    CHECK_INT(kimi_err_prefix(NULL, KIMI_ERR_IO, "context"), KIMI_ERR_IO);
}

/* ---- the communicator on its own ---- */

enum { RANKS = 4, FLOATS = 1001 };
static tp_comm *comm;
static float sums[RANKS][FLOATS];
static float gathered[3][RANKS * 5];

static void *comm_rank(void *arg)
{
    int rank = (int)(intptr_t)arg;
    for (int round = 0; round < 50; round++) {
        for (int i = 0; i < FLOATS; i++)
            sums[rank][i] = (float)(rank + 1) * (float)(i + round);
        tp_comm_allreduce_sum(comm, rank, sums[rank], FLOATS);
    }
    float part[3][5];
    for (int r = 0; r < 3; r++)
        for (int j = 0; j < 5; j++)
            part[r][j] = (float)(100 * r + 10 * rank + j);
    float *rows_out[3] = {gathered[0], gathered[1], gathered[2]};
    tp_comm_gather_columns(comm, rank, &part[0][0], 3, 5, 5 * rank, rank == 0 ? rows_out : NULL);
    return NULL;
}

static void check_comm(void)
{
    kimi_err err = {0};
    CHECK_INT(tp_comm_open(&comm, RANKS, FLOATS, 0, &err), 0);
    pthread_t threads[RANKS];
    for (int r = 0; r < RANKS; r++)
        pthread_create(&threads[r], NULL, comm_rank, (void *)(intptr_t)r);
    for (int r = 0; r < RANKS; r++)
        pthread_join(threads[r], NULL);
    int bad = 0;
    for (int r = 0; r < RANKS; r++)
        for (int i = 0; i < FLOATS; i++)
            bad += sums[r][i] != 10.0f * (float)(i + 49); /* (1+2+3+4) x the last round's value */
    CHECK_INT(bad, 0);
    CHECK_NEAR(gathered[2][5 * 3 + 4], 100 * 2 + 10 * 3 + 4, 0);
    CHECK_NEAR(gathered[0][0], 0, 0);
    CHECK_NEAR(gathered[1][5 * 2 + 1], 100 + 20 + 1, 0);
    tp_comm_close(comm);
    CHECK(tp_comm_open(&comm, 9, 10, 0, &err) != 0);
}

int main(void)
{
    kimi_err err = {0};
    check_comm();
    if (weights_load(&mw, TINY, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return check_finish();
    }
    for (int t = 0; t < N_TOKENS; t++) {
        tokens[t] = (t * 577 + 11) % 2048;
        rows[t] = t;
    }
    check_tp_and_threads();
    float *want = prefill_logits(2, 1);
    check_on_layer(want);
    free(want);
    check_null_err();
    weights_free(&mw);
    return check_finish();
}
