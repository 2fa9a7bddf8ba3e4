/* test_verify: the self-check's arithmetic on small hand-made logits and caches (expected values
 * worked out here from the definitions, not read back from the implementation), its verdicts at
 * the tolerances, and verify_run on tiny-k25 (identical backends agree exactly; bad options are
 * refused). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/runtime/verify.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/check.h"

#define TINY "tests/golden/fixtures/tiny-k25"

/* KL(p || q) of two probability vectors, straight from the definition. */
static double kl_of_probabilities(const double *p, const double *q, int n)
{
    double kl = 0;
    for (int i = 0; i < n; i++)
        kl += p[i] * log(p[i] / q[i]);
    return kl;
}

/* softmax without the max shift: fine for the small logits it is given here */
static void naive_softmax(const float *x, int n, double *p)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)x[i]);
    for (int i = 0; i < n; i++)
        p[i] = exp((double)x[i]) / sum;
}

static void test_kl(void)
{
    /* p = (1/2, 1/2), q = (3/4, 1/4): KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3) */
    float a[2] = {0, 0}, b[2] = {logf(3), 0};
    CHECK_NEAR(verify_kl_divergence(a, b, 2), 0.5 * log(4.0 / 3.0), 1e-7);
    /* p = (1, 2, 5)/8, q = (3, 3, 2)/8, each shifted by a constant (softmax does not see it) */
    float c[3] = {logf(1) + 3, logf(2) + 3, logf(5) + 3}, d[3] = {logf(3) - 7, logf(3) - 7, logf(2) - 7};
    double p[3] = {1 / 8.0, 2 / 8.0, 5 / 8.0}, q[3] = {3 / 8.0, 3 / 8.0, 2 / 8.0};
    CHECK_NEAR(verify_kl_divergence(c, d, 3), kl_of_probabilities(p, q, 3), 2e-6);
    /* Logits far beyond exp's range: (1001, 1000) against (1000, 1001). With s = e / (1 + e),
     * KL = s ln(s / (1 - s)) + (1 - s) ln((1 - s) / s) = (2s - 1) x 1 = tanh(1/2). */
    float big[2] = {1001, 1000}, swapped[2] = {1000, 1001};
    CHECK_NEAR(verify_kl_divergence(big, swapped, 2), tanh(0.5), 1e-9);
    CHECK(verify_kl_divergence(big, big, 2) == 0);
    float nan_row[2] = {NAN, 0};
    CHECK(isinf(verify_kl_divergence(a, nan_row, 2)));
}

static void test_top_k(void)
{
    float x[8] = {0.5f, 3, 3, -1, 2, 7, 3, 0};
    int top[6];
    /* 7 (id 5), the three 3s in id order (1, 2, 6), 2 (id 4), 0.5 (id 0) */
    CHECK_INT(verify_top_k(x, 8, 6, top), 6);
    int want[6] = {5, 1, 2, 6, 4, 0};
    for (int i = 0; i < 6; i++)
        CHECK_INT(top[i], want[i]);
    float small[3] = {1, 3, 2};
    CHECK_INT(verify_top_k(small, 3, 5, top), 3);
    CHECK_INT(top[0], 1);
    CHECK_INT(top[1], 2);
    CHECK_INT(top[2], 0);
}

static void test_logits(void)
{
    enum { V = 8 };
    /* Position 0: clear margins (top-1 by 1.0, 5th-to-6th by 3.0); the candidate swaps token 4
     * (4 -> 0) for token 5 (1 -> 4.5): top-1 agrees, top-5 shares 4 of 5 and differs where it
     * must not, max |Δ| 4 at token 4. Position 1: top-1 margin 0.05 and no 5th-to-6th gap
     * (neither clear); the candidate swaps the two leaders: top-1 differs, top-5 shares 5. */
    float ref[2 * V] = {8, 7, 6, 5, 4, 1, 0, -1, /**/ 1.0f, 1.05f, 0, 0, 0, 0, 0, 0};
    float cand[2 * V] = {8, 7, 6, 5, 0, 4.5f, 0, -1, /**/ 1.05f, 1.0f, 0, 0, 0, 0, 0, 0};
    verify_report r;
    verify_report_init(&r);
    verify_add_logits(&r, ref, cand, 2, V);
    CHECK_INT(r.positions, 2);
    CHECK_NEAR(r.logit_max_abs, 4, 0);
    CHECK_INT(r.logit_max_position, 0);
    CHECK_INT(r.logit_max_token, 4);
    CHECK_NEAR(r.logit_sum_abs / (double)r.logit_count, (4 + 3.5 + 2 * (1.05f - 1.0f)) / 16, 1e-7);
    CHECK_INT(r.top1_agree, 1);
    CHECK_INT(r.top1_clear, 1);
    CHECK_INT(r.top1_clear_differ, 0);
    CHECK_INT(r.top5_k, 5);
    CHECK_INT(r.top5_shared, 9);
    CHECK_INT(r.top5_clear, 1);
    CHECK_INT(r.top5_clear_differ, 1);
    double p[V], q[V], kl0, kl1;
    naive_softmax(ref, V, p);
    naive_softmax(cand, V, q);
    kl0 = kl_of_probabilities(p, q, V);
    naive_softmax(ref + V, V, p);
    naive_softmax(cand + V, V, q);
    kl1 = kl_of_probabilities(p, q, V);
    CHECK_NEAR(r.kl_max, kl0 > kl1 ? kl0 : kl1, 1e-9);
    CHECK_INT(r.kl_max_position, kl0 > kl1 ? 0 : 1);
    CHECK_NEAR(r.kl_sum / 2, (kl0 + kl1) / 2, 1e-9);
    CHECK(!verify_metric_passed(&r, VERIFY_LOGITS));
    CHECK(verify_metric_passed(&r, VERIFY_TOP1));    /* the only differing arg-max is not clear */
    CHECK(!verify_metric_passed(&r, VERIFY_TOP5));
    CHECK(!verify_metric_passed(&r, VERIFY_KL));
    char line[768];
    verify_metric_line(&r, VERIFY_LOGITS, line, sizeof line);
    CHECK_MSG(!strncmp(line, "FAIL logits max |Δ| 4 at position 0 token 4", 44) && strstr(line, "tolerance: max 0.05"),
              "%s", line);
    verify_metric_line(&r, VERIFY_TOP1, line, sizeof line);
    CHECK_MSG(!strncmp(line, "PASS top1 agreement 0.5000 (1 of 2 positions)", 45), "%s", line);
    verify_metric_line(&r, VERIFY_TOP5, line, sizeof line);
    CHECK_MSG(!strncmp(line, "FAIL top5 overlap 0.9000", 24) && strstr(line, "differ at 1 of the 1 positions"), "%s",
              line);

    /* Within tolerance: every logit moved by 0.04 in alternating directions. The KL is then
     * below its bound 0.05^2 / 2, as Hoeffding's lemma says it must be. */
    float near[2 * V];
    for (int i = 0; i < 2 * V; i++)
        near[i] = ref[i] + (i % 2 ? 0.04f : -0.04f);
    verify_report_init(&r);
    verify_add_logits(&r, ref, near, 2, V);
    CHECK_NEAR(r.logit_max_abs, 0.04, 1e-6);
    CHECK(r.kl_max > 0 && r.kl_max <= VERIFY_KL_MAX);
    for (int m = 0; m < VERIFY_CACHE; m++)
        CHECK_MSG(verify_metric_passed(&r, (verify_metric)m), "%s", verify_metric_name((verify_metric)m));

    /* A NaN is the worst difference there is. */
    float broken[V] = {8, 7, 6, NAN, 4, 1, 0, -1};
    verify_report_init(&r);
    verify_add_logits(&r, ref, broken, 1, V);
    CHECK(isinf(r.logit_max_abs) && r.logit_max_token == 3);
    CHECK(!verify_metric_passed(&r, VERIFY_LOGITS) && !verify_metric_passed(&r, VERIFY_KL));
}

static void test_cache(void)
{
    /* One vector: latent (1, -1, 1, -1), rms 1; rope (2, 0), rms sqrt 2. The candidate moves
     * the last latent element by one fp16 step (-1 -> -(1 + 2^-10)) and the second rope element
     * by 0.5 (many steps: 0.5 / sqrt 2 = 0.35 of the rms). */
    float ref_f[6] = {1, -1, 1, -1, 2, 0}, cand_f[6] = {1, -1, 1, -1.0009765625f, 2, 0.5f};
    uint16_t ref[6], cand[6];
    for (int i = 0; i < 6; i++) {
        ref[i] = float_to_f16(ref_f[i]);
        cand[i] = float_to_f16(cand_f[i]);
    }
    verify_report r;
    verify_report_init(&r);
    verify_add_cache(&r, ref, cand, 1, 4, 2);
    CHECK_INT(r.cache_elements, 6);
    CHECK_INT(r.cache_differ, 2);
    CHECK_NEAR(r.cache_max_abs, 0.5, 0);
    CHECK_NEAR(r.cache_rel_max, 0.5 / sqrt(2.0), 1e-12);
    CHECK_NEAR(r.cache_rel_sum / 6, (1.0 / 1024 + 0.5 / sqrt(2.0)) / 6, 1e-12);
    CHECK_INT(r.cache_beyond, 1);
    CHECK_INT(r.cache_flips_beyond, 0);
    CHECK(!verify_metric_passed(&r, VERIFY_CACHE));

    /* 20 vectors where only the one fp16 step differs: relative max 2^-10 <= 4e-3, mean
     * 2^-10 / 120 <= 1e-4: within the CPU cache contract. */
    uint16_t many_ref[20 * 6], many_cand[20 * 6];
    for (int v = 0; v < 20; v++) {
        memcpy(many_ref + v * 6, ref, sizeof ref);
        memcpy(many_cand + v * 6, ref, sizeof ref);
    }
    many_cand[3] = cand[3];
    verify_report_init(&r);
    verify_add_cache(&r, many_ref, many_cand, 20, 4, 2);
    CHECK_INT(r.cache_differ, 1);
    CHECK_NEAR(r.cache_rel_max, 1.0 / 1024, 1e-12);
    CHECK_INT(r.cache_beyond, 0);
    CHECK(verify_metric_passed(&r, VERIFY_CACHE));
    /* The same step alone in one vector: mean 2^-10 / 6 = 1.6e-4, beyond 1e-4. */
    verify_report_init(&r);
    verify_add_cache(&r, many_ref, many_cand, 1, 4, 2);
    CHECK(!verify_metric_passed(&r, VERIFY_CACHE));

    /* An outlier: a 64-wide latent of one 64 and zeros (rms 64 / 8 = 8) and rope (1, 1). One
     * fp16 step of 64 is 2^-4, 2^-4 / 8 = 7.8e-3 of the rms: beyond 4e-3, yet a rounding flip,
     * excused; two steps are not. Two vectors, so the mean (7.8e-3 / 132 = 5.9e-5) stays in. */
    enum { LATENT = 64, ROW = LATENT + 2 };
    uint16_t out_ref[2 * ROW] = {0}, out_cand[2 * ROW] = {0};
    for (int v = 0; v < 2; v++) {
        out_ref[v * ROW] = float_to_f16(64);
        out_ref[v * ROW + LATENT] = out_ref[v * ROW + LATENT + 1] = float_to_f16(1);
    }
    memcpy(out_cand, out_ref, sizeof out_ref);
    out_cand[0] = float_to_f16(64.0625f);
    verify_report_init(&r);
    verify_add_cache(&r, out_ref, out_cand, 2, LATENT, 2);
    CHECK_NEAR(r.cache_rel_max, 0.0625 / 8, 1e-12);
    CHECK_INT(r.cache_beyond, 0);
    CHECK_INT(r.cache_flips_beyond, 1);
    CHECK(verify_metric_passed(&r, VERIFY_CACHE));
    out_cand[0] = float_to_f16(64.125f);
    verify_report_init(&r);
    verify_add_cache(&r, out_ref, out_cand, 2, LATENT, 2);
    CHECK_INT(r.cache_beyond, 1);
    CHECK_INT(r.cache_flips_beyond, 0);
    CHECK(!verify_metric_passed(&r, VERIFY_CACHE));
    /* Across zero: a latent of (-0, s, 0, ...) with s the smallest subnormal (rms s / 8); the
     * candidate's first element +s: 8 x the rms, one step (the two zeros are one value); from
     * -s it would be two. */
    uint16_t zero_ref[ROW] = {0x8000, 0x0001}, zero_cand[ROW] = {0x0001, 0x0001};
    zero_ref[LATENT] = zero_ref[LATENT + 1] = zero_cand[LATENT] = zero_cand[LATENT + 1] = float_to_f16(1);
    verify_report_init(&r);
    verify_add_cache(&r, zero_ref, zero_cand, 1, LATENT, 2);
    CHECK_NEAR(r.cache_rel_max, 8, 1e-9);
    CHECK_INT(r.cache_flips_beyond, 1);
    CHECK_INT(r.cache_beyond, 0);
    zero_ref[0] = 0x8001;
    verify_report_init(&r);
    verify_add_cache(&r, zero_ref, zero_cand, 1, LATENT, 2);
    CHECK_INT(r.cache_flips_beyond, 0);
    CHECK_INT(r.cache_beyond, 1);
}

static void test_run_tiny(void)
{
    model_weights mw = {0}, copy = {0};
    kimi_err err = {0};
    if (weights_load(&mw, TINY, &err) || weights_load(&copy, TINY, &err)) {
        CHECK_MSG(0, "weights_load: %s", err.msg);
        return;
    }
    int32_t tokens[12] = {2048, 5, 77, 300, 1999, 12, 12, 640, 2047, 0, 1, 2303};
    verify_options vo = {
        .tokens = tokens, .n_tokens = 12, .n_decode = 4,
        .reference = {.kind = BACKEND_CPU, .tp = 2, .threads_per_rank = 1},
        .candidate = {.kind = BACKEND_CPU, .tp = 2, .threads_per_rank = 1},
        .candidate_weights = &copy,
    };
    verify_report r;
    /* The same backend on the same bytes (another mmap of them): exactly equal. */
    CHECK_MSG(verify_run(&mw, &vo, &r, &err) == 0, "%s", err.msg);
    CHECK_INT(r.positions, 16);
    CHECK_INT(r.n_tokens, 12);
    CHECK_INT(r.n_decode, 4);
    CHECK_INT(r.logit_count, 16 * mw.cfg.vocab);
    CHECK(r.logit_max_abs == 0 && r.kl_max == 0 && r.top1_agree == 16 && r.top5_shared == 16 * 5);
    CHECK_INT(r.cache_elements, (size_t)mw.cfg.layers * 16 * (size_t)(mw.cfg.kv_lora_rank + mw.cfg.qk_rope_dim));
    CHECK(r.cache_differ == 0 && r.cache_max_abs == 0);
    for (int i = 0; i < 4; i++)
        CHECK(r.greedy[i] >= 0 && r.greedy[i] < mw.cfg.vocab);

    /* Refused before anything runs. */
    tokens[3] = mw.cfg.vocab;
    CHECK_INT(verify_run(&mw, &vo, &r, &err), KIMI_ERR_INPUT);
    CHECK_MSG(strstr(err.msg, "token id 2304 at index 3 is outside the vocabulary") != NULL, "%s", err.msg);
    tokens[3] = 300;
    vo.n_decode = VERIFY_MAX_DECODE + 1;
    CHECK_INT(verify_check_options(&mw, &vo, NULL), KIMI_ERR_INPUT);
    vo.n_decode = 0;
    vo.candidate.tp = 3;    /* does not divide the 8 heads: the candidate's open fails */
    CHECK(verify_run(&mw, &vo, &r, &err) != 0);
    CHECK_MSG(strstr(err.msg, "verify: candidate cpu tp 3") != NULL, "%s", err.msg);
    weights_free(&copy);
    weights_free(&mw);
}

int main(void)
{
    test_kl();
    test_top_k();
    test_logits();
    test_cache();
    test_run_tiny();
    return check_finish();
}
