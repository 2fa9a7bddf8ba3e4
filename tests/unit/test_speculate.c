/* test_speculate: prompt lookup (longest recurring suffix, most recent occurrence, draft
 * bounds, nothing to copy), the draft length policy (fixed, off, auto declining when plain
 * steps are faster and drafting when acceptance pays, the periodic probe), the --speculate
 * parser, and the acceptance rule of sampler_sample_draft: over many seeds its output follows
 * the sampler's distribution (greedy, temperature, top-k, top-p; a likely and an unlikely
 * draft, and one outside the kept set) within a stated tolerance. */
#include <stdlib.h>

#include "engine/runtime/sampler.h"
#include "engine/runtime/speculate.h"
#include "tests/unit/check.h"

static void test_lookup(void)
{
    int32_t draft[SPECULATE_MAX_DRAFT];
    /* "a b c d X a b c" -> the suffix "a b c" recurs at 0: propose "d X a b c", then again */
    const int32_t h1[] = {1, 2, 3, 4, 9, 1, 2, 3};
    CHECK_INT(speculate_lookup(h1, 8, 7, draft), 7);
    CHECK(draft[0] == 4 && draft[1] == 9 && draft[2] == 1 && draft[3] == 2 && draft[4] == 3);
    CHECK(draft[5] == 4 && draft[6] == 9);
    CHECK_INT(speculate_lookup(h1, 8, 2, draft), 2);
    CHECK(draft[0] == 4 && draft[1] == 9);
    /* the most recent earlier occurrence wins: "5 6" followed by 7 then later by 8 */
    const int32_t h2[] = {5, 6, 7, 0, 5, 6, 8, 0, 5, 6};
    CHECK_INT(speculate_lookup(h2, 10, 1, draft), 1);
    CHECK_INT(draft[0], 8);
    /* a longer match beats a more recent shorter one: "1 2 3" at 0 vs "2 3" at 5 */
    const int32_t h3[] = {1, 2, 3, 40, 0, 2, 3, 50, 1, 2, 3};
    CHECK_INT(speculate_lookup(h3, 11, 1, draft), 1);
    CHECK_INT(draft[0], 40);
    /* a single recurring token is not enough (SPECULATE_MIN_NGRAM 2) */
    const int32_t h4[] = {7, 1, 8, 2, 7};
    CHECK_INT(speculate_lookup(h4, 5, 4, draft), 0);
    /* nothing recurs, too short, empty */
    const int32_t h5[] = {1, 2, 3, 4, 5, 6};
    CHECK_INT(speculate_lookup(h5, 6, 4, draft), 0);
    CHECK_INT(speculate_lookup(h5, 2, 4, draft), 0);
    CHECK_INT(speculate_lookup(h5, 0, 4, draft), 0);
    /* a draft longer than what follows the match continues the pattern it copies: the
     * period-3 text "1 2 3 1 2 3 1 2" proposes "3 1 2 3 ..." */
    const int32_t h6[] = {1, 2, 3, 1, 2, 3, 1, 2};
    CHECK_INT(speculate_lookup(h6, 8, 7, draft), 7);
    for (int i = 0; i < 7; i++)
        CHECK_INT(draft[i], (i + 2) % 3 + 1);
    /* k above the maximum is capped; a run of one id proposes the run */
    int32_t run[40];
    for (int i = 0; i < 40; i++)
        run[i] = 3;
    CHECK_INT(speculate_lookup(run, 40, 100, draft), SPECULATE_MAX_DRAFT);
    CHECK_INT(speculate_lookup(run, 40, 0, draft), 0);
}

static void test_parse(void)
{
    int s = 99;
    kimi_err err = {0};
    CHECK(speculate_parse("off", &s, "--speculate", &err) == 0 && s == SPECULATE_OFF);
    CHECK(speculate_parse("auto", &s, "--speculate", &err) == 0 && s == SPECULATE_AUTO);
    CHECK(speculate_parse("1", &s, "--speculate", &err) == 0 && s == 1);
    CHECK(speculate_parse("16", &s, "--speculate", &err) == 0 && s == 16);
    const char *bad[] = {"0", "17", "-1", "+3", " 3", "3 ", "4x", "", "on", "1e1", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err = (kimi_err){0};
        CHECK_MSG(speculate_parse(bad[i], &s, "--speculate", &err) == KIMI_ERR_USAGE, "'%s' accepted", bad[i]);
        CHECK_MSG(strstr(err.msg, "--speculate") && strstr(err.msg, "off, auto"), "'%s': %s", bad[i], err.msg);
    }
}

static void test_policy(void)
{
    speculate_policy p;
    speculate_policy_init(&p, 3);
    CHECK_INT(speculate_policy_length(&p, 10), 3);
    CHECK_INT(speculate_policy_length(&p, 2), 2);
    CHECK_INT(speculate_policy_length(&p, 0), 0);
    speculate_policy_init(&p, SPECULATE_OFF);
    CHECK_INT(speculate_policy_length(&p, 10), 0);

    /* auto: no plain step timed yet -> a plain step first */
    speculate_policy_init(&p, SPECULATE_AUTO);
    CHECK_INT(speculate_policy_length(&p, 8), 0);
    speculate_policy_plain_step(&p, 0.010);
    /* memory-bound: a verify step costs little more than a plain one -> drafting pays */
    int k = speculate_policy_length(&p, 8);
    CHECK_MSG(k > 0, "auto declined with the prior acceptance and cheap verify steps");
    for (int i = 0; i < 20; i++)
        speculate_policy_verify_step(&p, 4, 4, 0.011);
    CHECK_MSG(speculate_policy_length(&p, 8) >= 4, "auto drafts short with every draft accepted");
    /* nothing accepted any more: auto stops drafting, and probes once per PROBE_EVERY */
    for (int i = 0; i < 20; i++)
        speculate_policy_verify_step(&p, 4, 0, 0.011);
    int drafted = 0;
    for (int i = 0; i < 4 * SPECULATE_PROBE_EVERY; i++)
        drafted += speculate_policy_length(&p, 8) > 0;
    CHECK_INT(drafted, 4);
    /* compute-bound: verify steps cost a plain step per token -> declines even at 60% */
    speculate_policy_init(&p, SPECULATE_AUTO);
    speculate_policy_plain_step(&p, 0.010);
    for (int i = 0; i < 20; i++)
        speculate_policy_verify_step(&p, 4, i % 5 < 3 ? 4 : 0, 0.050);
    CHECK_INT(speculate_policy_length(&p, 8), 0);
}

/* Frequencies of sampler_sample_draft's ids over n seeds against sampler_sample's distribution
 * measured the same way (both estimates, so the bound is on their difference: 5 standard
 * errors of a difference of two proportions, plus 0.002). Also the acceptance rate against
 * the draft's probability. */
static void check_rule(const char *what, const float *logits, int vocab, float temperature, int top_k, float top_p,
                       int32_t draft)
{
    enum { N = 40000, V = 8 };
    long direct[V] = {0}, drafted[V] = {0}, accepted = 0;
    for (uint64_t seed = 0; seed < N; seed++) {
        sampler a, b;
        sampler_params params = {temperature, top_k, top_p, seed};
        sampler_init(&a, vocab, &params, NULL);
        params.seed = seed + 1000003;
        sampler_init(&b, vocab, &params, NULL);
        direct[sampler_sample(&a, logits)]++;
        int taken;
        int32_t id = sampler_sample_draft(&b, logits, draft, &taken);
        CHECK_MSG(id >= 0 && id < vocab, "%s: id %d", what, id);
        drafted[id]++;
        accepted += taken;
        CHECK_MSG(!taken || id == draft, "%s: accepted but returned %d", what, id);
        sampler_free(&a);
        sampler_free(&b);
    }
    for (int i = 0; i < vocab; i++) {
        double p = (double)direct[i] / N, q = (double)drafted[i] / N;
        double se = sqrt((p * (1 - p) + q * (1 - q)) / N);
        CHECK_MSG(fabs(p - q) <= 5 * se + 0.002, "%s: id %d direct %.4f with draft %.4f", what, i, p, q);
    }
    double p_draft = (double)direct[draft] / N, rate = (double)accepted / N;
    CHECK_MSG(fabs(rate - p_draft) <= 5 * sqrt(p_draft * (1 - p_draft) / N * 2) + 0.002,
              "%s: accepted %.4f of drafts, p(draft) %.4f", what, rate, p_draft);
}

static void test_acceptance_rule(void)
{
    const float logits[6] = {2.0f, 1.0f, 0.5f, -1.0f, 1.5f, 0.0f};
    check_rule("t1 likely draft", logits, 6, 1.0f, 0, 1.0f, 0);
    check_rule("t1 unlikely draft", logits, 6, 1.0f, 0, 1.0f, 3);
    check_rule("t0.7 top-k 3", logits, 6, 0.7f, 3, 1.0f, 1);
    check_rule("top-k 3, draft outside", logits, 6, 1.0f, 3, 1.0f, 5);
    check_rule("top-p 0.8", logits, 6, 1.3f, 0, 0.8f, 4);
    check_rule("top-p 0.8, draft outside", logits, 6, 1.0f, 0, 0.8f, 3);
    const float one_hot[4] = {0, 0, 30, 0};
    check_rule("nearly certain", one_hot, 4, 1.0f, 0, 1.0f, 2);

    /* greedy: the argmax, accepted exactly when it is the draft, no RNG drawn */
    sampler s;
    sampler_params g = {0, 0, 1, 7};
    sampler_init(&s, 6, &g, NULL);
    int taken;
    CHECK_INT(sampler_sample_draft(&s, logits, 0, &taken), 0);
    CHECK_INT(taken, 1);
    CHECK_INT(sampler_sample_draft(&s, logits, 4, &taken), 0);
    CHECK_INT(taken, 0);
    const float none[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
    CHECK_INT(sampler_sample_draft(&s, none, 1, &taken), -1);
    CHECK_INT(taken, 0);
    sampler_free(&s);
    sampler_params t = {1, 0, 1, 7};
    sampler_init(&s, 6, &t, NULL);
    CHECK_INT(sampler_sample_draft(&s, none, 1, &taken), -1);
    CHECK_INT(taken, 0);
    sampler_free(&s);
}

int main(void)
{
    test_lookup();
    test_parse();
    test_policy();
    test_acceptance_rule();
    return check_finish();
}
