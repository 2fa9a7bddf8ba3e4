/* test_backend_dcp: decode context parallelism on the CPU backend (tiny checkpoint, TP 8):
 * - the group all-gather and all-to-all of the communicator, value by value;
 * - each rank's cache holds 1/dcp of the positions: its bytes drop dcp times;
 * - logits and the cache (read back with every position in place) match DCP 1 within the
 *   tolerances of docs/CONVENTIONS.md, for DCP 2, 4 and 8;
 * - a prefill equals, bit for bit, the same tokens as a shorter prefill plus decode steps, and
 *   rewriting positions from k on (prefix reuse, /retry, a rejected draft) equals a fresh run of
 *   the new sequence: no stale entry of another rank survives;
 * - the census of one decode step's collectives: the two all-reduces per layer of DCP 1, plus
 *   per layer an all-gather of the absorbed queries and an all-to-all of the partials, whose bytes
 *   follow the formula (dcp - 1) x heads per rank x ((kv_lora + rope) + (kv_lora + 2)) x 4 B;
 * - --dcp that does not divide the ranks, and dcp > 1 on the CUDA backend, are usage errors. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/tp_comm.h"
#include "engine/model/weights.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/check.h"

#define TINY "tests/golden/fixtures/tiny-k25"
enum { TP = 8, N_TOKENS = 40 };

static model_weights mw;
static int32_t tokens[N_TOKENS];
static int rows[N_TOKENS];

/* ---- the group exchanges on their own ---- */

enum { SLICE = 7 };
static tp_comm *comm;
static int group;
static float gathered[TP][TP][SLICE], exchanged[TP][TP][SLICE];

/* value member `from` sends member `to` at element i (to = -1 for the all-gather) */
static float sent_value(int rank, int to, int i)
{
    return (float)(1000 * rank + 100 * (to + 1) + i);
}

static void *group_rank(void *arg)
{
    int rank = (int)(intptr_t)arg;
    float mine[SLICE], to_each[TP][SLICE];
    for (int i = 0; i < SLICE; i++) {
        mine[i] = sent_value(rank, -1, i);
        for (int j = 0; j < group; j++)
            to_each[j][i] = sent_value(rank, j, i);
    }
    tp_comm_group_all_gather(comm, rank, group, mine, &gathered[rank][0][0], SLICE);
    tp_comm_group_all_to_all(comm, rank, group, &to_each[0][0], &exchanged[rank][0][0], SLICE);
    return NULL;
}

static void check_group_exchange(void)
{
    kimi_err err = {0};
    CHECK_INT(tp_comm_open(&comm, TP, 16, 0, &err), 0);
    for (group = 1; group <= TP; group *= 2) {
        pthread_t threads[TP];
        for (int r = 0; r < TP; r++)
            pthread_create(&threads[r], NULL, group_rank, (void *)(intptr_t)r);
        for (int r = 0; r < TP; r++)
            pthread_join(threads[r], NULL);
        int bad = 0;
        for (int r = 0; r < TP; r++) {
            int first = r - r % group, member = r % group;
            for (int s = 0; s < group; s++)
                for (int i = 0; i < SLICE; i++) {
                    bad += gathered[r][s][i] != sent_value(first + s, -1, i);
                    bad += exchanged[r][s][i] != sent_value(first + s, member, i);
                }
        }
        CHECK_MSG(bad == 0, "group %d: %d values misplaced", group, bad);
    }
    tp_comm_close(comm);
}

/* ---- the backend ---- */

static kv_cache_format cache_format = KV_CACHE_FP16; /* of every backend opened */

static backend *open_backend(int dcp, long capacity)
{
    kimi_err err = {0};
    backend *be = NULL;
    backend_options opt = {.kind = BACKEND_CPU, .tp = TP, .dcp = dcp, .threads_per_rank = 1, .max_context = capacity,
                           .kv_cache = cache_format};
    int rc = backend_open(&be, &mw, &opt, &err);
    CHECK_MSG(rc == 0, "backend_open tp %d dcp %d %s: %s", TP, dcp, kv_cache_format_name(cache_format), err.msg);
    return be;
}

static size_t vocab(void)
{
    return (size_t)mw.cfg.vocab;
}

static size_t kv_halves(long n_pos)
{
    return (size_t)mw.cfg.layers * (size_t)n_pos * (size_t)(mw.cfg.kv_lora_rank + mw.cfg.qk_rope_dim);
}

/* Prefill of seq [N_TOKENS]: every row's logits and the cache, malloc'ed. */
static void prefill(int dcp, const int32_t *seq, float **logits, uint16_t **kv)
{
    kimi_err err = {0};
    backend *be = open_backend(dcp, N_TOKENS);
    *logits = malloc((size_t)N_TOKENS * vocab() * sizeof **logits);
    *kv = malloc(kv_halves(N_TOKENS) * sizeof **kv);
    if (!be)
        return;
    CHECK_MSG(backend_forward(be, seq, N_TOKENS, 0, rows, N_TOKENS, *logits, &err) == 0, "dcp %d: %s", dcp, err.msg);
    CHECK_MSG(backend_read_kv(be, N_TOKENS, *kv, &err) == 0, "dcp %d: %s", dcp, err.msg);
    backend_close(be);
}

/* docs/CONVENTIONS.md: logits max |error| <= 1e-2, mean <= 1e-3; the cache per element
 * |error| / rms(its vector) mean <= 1e-4, max <= 4e-3. */
static void check_close_to_dcp1(int dcp, const float *want_logits, const uint16_t *want_kv)
{
    float *logits;
    uint16_t *kv;
    prefill(dcp, tokens, &logits, &kv);
    size_t n = (size_t)N_TOKENS * vocab();
    double max_err = 0, sum_err = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)logits[i] - want_logits[i]);
        max_err = d > max_err || isnan(d) ? (isnan(d) ? INFINITY : d) : max_err;
        sum_err += d;
    }
    CHECK_MSG(max_err <= 1e-2 && sum_err / (double)n <= 1e-3, "dcp %d: logits max %.3g mean %.3g", dcp, max_err,
              sum_err / (double)n);
    int row = mw.cfg.kv_lora_rank + mw.cfg.qk_rope_dim, widths[2] = {mw.cfg.kv_lora_rank, mw.cfg.qk_rope_dim};
    double rel_max = 0, rel_sum = 0;
    size_t count = 0;
    for (size_t v = 0; v < kv_halves(N_TOKENS) / (size_t)row; v++)
        for (int part = 0, at = 0; part < 2; at += widths[part], part++) {
            const uint16_t *a = kv + v * (size_t)row + at, *b = want_kv + v * (size_t)row + at;
            double squares = 0;
            for (int i = 0; i < widths[part]; i++)
                squares += (double)f16_to_float(b[i]) * f16_to_float(b[i]);
            double rms = sqrt(squares / widths[part]);
            for (int i = 0; i < widths[part]; i++) {
                double rel = fabs((double)f16_to_float(a[i]) - f16_to_float(b[i])) / (rms > 0 ? rms : 1);
                rel_max = rel > rel_max ? rel : rel_max;
                rel_sum += rel;
                count++;
            }
        }
    CHECK_MSG(rel_max <= 4e-3 && rel_sum / (double)count <= 1e-4, "dcp %d: cache relative error max %.3g mean %.3g",
              dcp, rel_max, rel_sum / (double)count);
    printf("dcp %d vs dcp 1 (tp %d): logits max %.3g mean %.3g; cache relative max %.3g mean %.3g\n", dcp, TP,
           max_err, sum_err / (double)n, rel_max, rel_sum / (double)count);
    free(logits);
    free(kv);
}

static void check_cache_bytes(void)
{
    size_t replicated = 0;
    for (int dcp = 1; dcp <= TP; dcp *= 2) {
        backend *be = open_backend(dcp, 64);
        if (!be)
            continue;
        size_t bytes = backend_cache_bytes_per_rank(be);
        if (dcp == 1) {
            replicated = bytes;
            CHECK_INT(bytes, 64 * kv_bytes_per_token(&mw.cfg, cache_format));
        }
        CHECK_MSG(bytes * (size_t)dcp == replicated, "dcp %d: %zu B per rank, replicated %zu", dcp, bytes, replicated);
        printf("dcp %d, %s cache: %zu cache bytes per rank for 64 positions (replicated %zu)\n", dcp,
               kv_cache_format_name(cache_format), bytes, replicated);
        backend_close(be);
    }
    /* 65 positions over 8 ranks: the first member holds 9 of them, and so is the largest share */
    backend *be = open_backend(8, 65);
    if (be)
        CHECK_INT(backend_cache_bytes_per_rank(be), 9 * kv_bytes_per_token(&mw.cfg, cache_format));
    backend_close(be);
}

/* Positions [0, split) as one prefill then one decode step each: the logits of every row equal
 * those of the one prefill bit for bit (a sharded prefill attends as decode steps do). Then
 * positions from rewrite_at on are run again with other tokens: the logits equal those of a
 * fresh prefill of the new sequence bit for bit. */
static void check_steps_and_rewrite(int dcp, int split, int rewrite_at)
{
    kimi_err err = {0};
    float *want, *got = malloc((size_t)N_TOKENS * vocab() * sizeof *got);
    uint16_t *kv;
    prefill(dcp, tokens, &want, &kv);
    backend *be = open_backend(dcp, N_TOKENS);
    if (!be)
        goto done;
    CHECK(backend_forward(be, tokens, split, 0, rows, split, got, &err) == 0);
    int zero = 0;
    for (int t = split; t < N_TOKENS; t++)
        CHECK(backend_forward(be, &tokens[t], 1, t, &zero, 1, got + (size_t)t * vocab(), &err) == 0);
    CHECK_MSG(!memcmp(got, want, (size_t)N_TOKENS * vocab() * sizeof *got), "dcp %d: prefill %d + steps differ", dcp,
              split);

    int32_t other[N_TOKENS];
    memcpy(other, tokens, sizeof other);
    for (int t = rewrite_at; t < N_TOKENS; t++)
        other[t] = (tokens[t] * 7 + 3) % 2048;
    free(want);
    free(kv);
    prefill(dcp, other, &want, &kv);
    CHECK(backend_forward(be, other + rewrite_at, N_TOKENS - rewrite_at, rewrite_at, rows,
                          N_TOKENS - rewrite_at, got, &err) == 0);
    CHECK_MSG(!memcmp(got, want + (size_t)rewrite_at * vocab(), (size_t)(N_TOKENS - rewrite_at) * vocab() * sizeof *got),
              "dcp %d: rewriting from %d differs from a fresh run", dcp, rewrite_at);
    backend_close(be);
done:
    free(want);
    free(kv);
    free(got);
}

static void check_census(void)
{
    kimi_err err = {0};
    const model_config *c = &mw.cfg;
    int heads = c->heads / TP, zero = 0;
    float *logits = malloc(vocab() * sizeof *logits);
    for (int dcp = 1; dcp <= TP; dcp *= 2) {
        backend *be = open_backend(dcp, N_TOKENS);
        if (!be)
            continue;
        CHECK(backend_forward(be, tokens, 20, 0, &zero, 1, logits, &err) == 0);
        tp_comm_census census;
        for (int r = 0; r < TP; r++)
            backend_take_comm_census(be, r, &census, &err);
        CHECK(backend_forward(be, &tokens[20], 1, 20, &zero, 1, logits, &err) == 0);
        size_t want_bytes = (size_t)c->layers * (size_t)(dcp - 1) * (size_t)heads *
                            (size_t)((c->kv_lora_rank + c->qk_rope_dim) + (c->kv_lora_rank + 2)) * sizeof(float);
        for (int r = 0; r < TP; r++) {
            CHECK_INT(backend_take_comm_census(be, r, &census, &err), 0);
            CHECK_INT(census.allreduces, 2 * c->layers);
            CHECK_INT(census.allreduce_bytes, 2 * (size_t)c->layers * (size_t)c->hidden * sizeof(float));
            CHECK_INT(census.group_exchanges, dcp > 1 ? 2 * c->layers : 0);
            CHECK_INT(census.group_bytes_in, want_bytes);
            if (r == 0)
                printf("decode step, tp %d dcp %d, per rank: %ld all-reduces (%zu B), %ld gathers, %ld group "
                       "exchanges (%zu B in)\n", TP, dcp, census.allreduces, census.allreduce_bytes, census.gathers,
                       census.group_exchanges, census.group_bytes_in);
        }
        backend_close(be);
    }
    free(logits);
    backend *be = open_backend(1, 8);
    tp_comm_census census;
    if (be)
        CHECK_INT(backend_take_comm_census(be, TP, &census, &err), KIMI_ERR_USAGE);
    backend_close(be);
}

static void check_bad_dcp(void)
{
    kimi_err err = {0};
    backend *none = NULL;
    const int bad[] = {3, -1, 16};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        backend_options opt = {.kind = BACKEND_CPU, .tp = TP, .dcp = bad[i], .threads_per_rank = 1, .max_context = 8};
        CHECK_INT(backend_open(&none, &mw, &opt, &err), KIMI_ERR_USAGE);
        CHECK_MSG(strstr(err.msg, "--dcp") != NULL, "%s", err.msg);
    }
    backend_options opt = {.kind = BACKEND_CPU, .tp = 2, .dcp = 4, .threads_per_rank = 1, .max_context = 8};
    CHECK_INT(backend_open(&none, &mw, &opt, &err), KIMI_ERR_USAGE);
    /* the cuda backend shards too (tests/gpu golden_cuda_tp8_dcp*): the same check, before any device */
    backend_options cuda = {.kind = BACKEND_CUDA, .tp = 2, .dcp = 4, .max_context = 8};
    CHECK_INT(backend_open(&none, &mw, &cuda, &err), KIMI_ERR_USAGE);
    CHECK_MSG(strstr(err.msg, "--dcp 4") && strstr(err.msg, "--tp 2"), "%s", err.msg);
    CHECK(none == NULL);
}

int main(void)
{
    kimi_err err = {0};
    check_group_exchange();
    if (weights_load(&mw, TINY, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return check_finish();
    }
    for (int t = 0; t < N_TOKENS; t++) {
        tokens[t] = (t * 577 + 11) % 2048;
        rows[t] = t;
    }
    float *want_logits;
    uint16_t *want_kv;
    prefill(1, tokens, &want_logits, &want_kv);
    for (int dcp = 2; dcp <= TP; dcp *= 2)
        check_close_to_dcp1(dcp, want_logits, want_kv);
    free(want_logits);
    free(want_kv);
    check_cache_bytes();
    check_steps_and_rewrite(2, 17, 23);
    check_steps_and_rewrite(8, 30, 13);
    check_census();
    check_bad_dcp();
    /* The fp8 cache sharded (both levers of issue 22): 1/dcp of the fp8 bytes per rank, and a
     * sharded prefill of the fp8 cache equal to its decode steps and rewrites bit for bit. */
    cache_format = KV_CACHE_FP8;
    check_cache_bytes();
    check_steps_and_rewrite(2, 17, 23);
    check_steps_and_rewrite(8, 30, 13);
    weights_free(&mw);
    return check_finish();
}
