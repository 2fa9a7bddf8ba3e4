/* test_sampler: the RNG against independently computed values, the greedy tie rule, over
 * many seeded draws that top-k / top-p never leave their set and that empirical frequencies
 * follow the documented distribution, and a property test over hostile rows and parameter
 * extremes (every draw allowed by the rule; greedy as the temperature tends to 0). */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "engine/runtime/sampler.h"
#include "tests/unit/check.h"
#include "tests/unit/sampler_rule.h"

static sampler make_sampler(int vocab, float temperature, int top_k, float top_p, uint64_t seed)
{
    sampler s;
    kimi_err err = {0};
    sampler_params p = {temperature, top_k, top_p, seed};
    int rc = sampler_init(&s, vocab, &p, &err);
    CHECK_MSG(rc == 0, "sampler_init: %s", err.msg);
    return s;
}

/* Reference values: a python3 implementation of splitmix64 + xoshiro256** written from the
 * published algorithms, checked against their published vectors (splitmix64 seed 1234567 ->
 * 6457827717110365317, ...; xoshiro256** state {1,2,3,4} -> 11520, 0, 1509978240). */
static void test_rng(void)
{
    static const uint64_t seed0[4] = {11091344671253066420ull, 13793997310169335082ull,
                                      1900383378846508768ull, 7684712102626143532ull};
    static const uint64_t seed42[4] = {1546998764402558742ull, 6990951692964543102ull,
                                       12544586762248559009ull, 17057574109182124193ull};
    sampler a = make_sampler(4, 1, 0, 1, 0), b = make_sampler(4, 1, 0, 1, 42);
    for (int i = 0; i < 4; i++) {
        CHECK(sampler_next_u64(&a) == seed0[i]);
        CHECK(sampler_next_u64(&b) == seed42[i]);
    }
    double lo = 1, hi = 0, sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = sampler_uniform(&a);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        sum += u;
    }
    CHECK(lo >= 0 && hi < 1);
    CHECK_NEAR(sum / 100000, 0.5, 0.005);
    sampler_free(&a);
    sampler_free(&b);
}

static void test_greedy(void)
{
    float logits[6] = {1.0f, 3.0f, -2.0f, 3.0f, NAN, 2.5f};
    sampler s = make_sampler(6, 0, 0, 1, 7);
    CHECK_INT(sampler_sample(&s, logits), 1);
    logits[0] = 3.0f;
    CHECK_INT(sampler_sample(&s, logits), 0);
    logits[5] = -INFINITY;  /* NaN (id 4) and -inf are never picked */
    CHECK_INT(sampler_sample(&s, logits), 0);
    logits[3] = INFINITY;   /* +inf is certain */
    CHECK_INT(sampler_sample(&s, logits), 3);
    logits[1] = INFINITY;   /* several: the lowest id */
    CHECK_INT(sampler_sample(&s, logits), 1);
    float broken[3] = {NAN, -INFINITY, NAN};
    CHECK_INT(sampler_argmax(broken, 3), -1);
    sampler_free(&s);

    /* Sampling with +inf logits: only those ids, uniformly (top-p and top-k see them as equals). */
    float certain[6] = {9.0f, INFINITY, 1e30f, INFINITY, NAN, INFINITY};
    float top_ps[3] = {1.0f, 0.9f, 0.5f};
    for (int v = 0; v < 3; v++) {
        sampler u = make_sampler(6, 1.0f, v == 2 ? 2 : 0, top_ps[v], 5);
        int seen[6] = {0};
        for (int i = 0; i < 3000; i++) {
            int32_t id = sampler_sample(&u, certain);
            CHECK(id >= 0 && id < 6 && certain[id] == INFINITY);
            if (id >= 0 && id < 6)
                seen[id]++;
        }
        /* top_p 1 and 0.9 keep all three (each holds a third); top_k 2 with top_p 0.5 keeps ids 1
         * and 3 (the lower ids rank first among equals), of which the nucleus of half the mass
         * is id 1 plus id 3 at the boundary */
        if (v < 2)
            CHECK_MSG(seen[1] > 850 && seen[3] > 850 && seen[5] > 850, "%d %d %d", seen[1], seen[3], seen[5]);
        else
            CHECK_MSG(seen[5] == 0 && seen[1] > 0, "%d %d %d", seen[1], seen[3], seen[5]);
        sampler_free(&u);
    }

    /* top_k = 1 at a positive temperature is greedy too, with the same tie rule. */
    float tied[4] = {0.5f, 2.0f, 2.0f, 1.0f};
    sampler k1 = make_sampler(4, 1.0f, 1, 1, 3);
    for (int i = 0; i < 100; i++)
        CHECK_INT(sampler_sample(&k1, tied), 1);
    sampler_free(&k1);
    sampler none = make_sampler(3, 1.0f, 0, 0.9f, 3);
    CHECK_INT(sampler_sample(&none, broken), -1);
    sampler_free(&none);
}

/* Expected distribution computed directly in double: softmax(logit / T) over the whole
 * vocabulary, then the top-k set, renormalised, then the nucleus of that by a full sort. */
typedef struct {
    int id;
    double p;
} ranked;

static int by_p_desc(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (a->p != b->p)
        return a->p > b->p ? -1 : 1;
    return a->id - b->id;
}

static void expected_distribution(const float *logits, int vocab, double t, int top_k, double top_p,
                                  double *prob /* [vocab] */)
{
    ranked *r = malloc((size_t)vocab * sizeof *r);
    double max = -INFINITY, sum = 0;
    for (int i = 0; i < vocab; i++)
        max = fmax(max, logits[i] / t);
    for (int i = 0; i < vocab; i++)
        r[i] = (ranked){i, exp(logits[i] / t - max)};
    qsort(r, (size_t)vocab, sizeof *r, by_p_desc);
    int n = top_k > 0 && top_k < vocab ? top_k : vocab;
    for (int i = 0; i < n; i++)
        sum += r[i].p;
    double cum = 0;
    int kept = n;
    for (int i = 0; i < n; i++) {
        cum += r[i].p / sum;
        if (top_p < 1 && cum >= top_p) {
            kept = i + 1;
            break;
        }
    }
    double kept_sum = 0;
    for (int i = 0; i < kept; i++)
        kept_sum += r[i].p;
    for (int i = 0; i < vocab; i++)
        prob[i] = 0;
    for (int i = 0; i < kept; i++)
        prob[r[i].id] = r[i].p / kept_sum;
    free(r);
}

/* Draw n_draws times; never outside the expected support, and every frequency within five
 * standard errors (a loose bound: with fixed seeds the test is deterministic anyway). */
static void check_draws(const char *what, const float *logits, int vocab, float t, int top_k, float top_p,
                        uint64_t seed, int n_draws)
{
    double *prob = malloc((size_t)vocab * sizeof *prob);
    long *count = calloc((size_t)vocab, sizeof *count);
    expected_distribution(logits, vocab, t, top_k, top_p, prob);
    sampler s = make_sampler(vocab, t, top_k, top_p, seed);
    int outside = 0;
    for (int i = 0; i < n_draws; i++) {
        int32_t id = sampler_sample(&s, logits);
        if (id < 0 || id >= vocab || prob[id] == 0)
            outside++;
        else
            count[id]++;
    }
    CHECK_MSG(outside == 0, "%s: %d of %d draws outside the allowed set", what, outside, n_draws);
    int bad = 0, support = 0;
    double chi2 = 0;
    for (int i = 0; i < vocab; i++) {
        if (prob[i] == 0)
            continue;
        support++;
        double f = (double)count[i] / n_draws;
        double se = sqrt(prob[i] * (1 - prob[i]) / n_draws);
        if (fabs(f - prob[i]) > 5 * se + 1e-4)
            bad++;
        double e = prob[i] * n_draws;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    CHECK_MSG(bad == 0, "%s: %d ids with a frequency off by more than 5 standard errors", what, bad);
    /* Chi-square with support-1 degrees of freedom: mean df, sd sqrt(2 df); 8 sd is loose. */
    double df = support - 1;
    CHECK_MSG(chi2 <= df + 8 * sqrt(2 * df) + 10, "%s: chi-square %.1f for %d ids", what, chi2, support);
    sampler_free(&s);
    free(prob);
    free(count);
}

static void test_distributions(void)
{
    enum { vocab = 64 };
    float logits[vocab];
    uint64_t x = 12345;
    for (int i = 0; i < vocab; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        logits[i] = (float)((x >> 40) % 1000) / 250.0f - 2.0f;   /* [-2, 2) */
    }
    check_draws("temperature 1", logits, vocab, 1.0f, 0, 1.0f, 1, 200000);
    check_draws("temperature 0.5", logits, vocab, 0.5f, 0, 1.0f, 2, 200000);
    check_draws("top_k 5", logits, vocab, 1.0f, 5, 1.0f, 3, 100000);
    check_draws("top_p 0.5", logits, vocab, 1.0f, 0, 0.5f, 4, 100000);
    check_draws("top_p 0.95 T 0.6", logits, vocab, 0.6f, 0, 0.95f, 5, 100000);
    check_draws("top_k 10 + top_p 0.7", logits, vocab, 1.3f, 10, 0.7f, 6, 100000);
}

/* A Kimi-sized vocabulary with a peaked distribution: the cheap nucleus prefilter must give
 * exactly the nucleus a full sort gives. */
static void test_large_vocab_top_p(void)
{
    int vocab = 163840;
    float *logits = malloc((size_t)vocab * sizeof *logits);
    uint64_t x = 99;
    for (int i = 0; i < vocab; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        logits[i] = (float)((x >> 40) % 10000) / 1000.0f;   /* [0, 10): a long tail */
    }
    logits[777] = 25.0f;
    logits[1234] = 24.0f;
    logits[160000] = 23.5f;
    logits[5] = 20.0f;
    check_draws("vocab 163840 top_p 0.9", logits, vocab, 1.0f, 0, 0.9f, 11, 1500);
    check_draws("vocab 163840 top_k 3", logits, vocab, 1.0f, 3, 1.0f, 12, 1500);
    free(logits);
}

/* Equal probabilities at the top-p boundary: the lower id ranks first, so with four equal
 * logits and top_p 0.5 only ids 0 and 1 can come out. */
static void test_top_p_ties(void)
{
    float logits[4] = {1, 1, 1, 1};
    sampler s = make_sampler(4, 1.0f, 0, 0.5f, 8);
    int seen[4] = {0};
    for (int i = 0; i < 2000; i++)
        seen[sampler_sample(&s, logits)]++;
    CHECK(seen[0] > 0 && seen[1] > 0);
    CHECK_INT(seen[2] + seen[3], 0);
    sampler_free(&s);
}

static void test_repeatable(void)
{
    float logits[32];
    for (int i = 0; i < 32; i++)
        logits[i] = (float)(i % 7) * 0.3f;
    sampler a = make_sampler(32, 1, 0, 0.95f, 2026), b = make_sampler(32, 1, 0, 0.95f, 2026),
            c = make_sampler(32, 1, 0, 0.95f, 2027);
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < 200; i++) {
        int32_t ia = sampler_sample(&a, logits), ib = sampler_sample(&b, logits), ic = sampler_sample(&c, logits);
        same_ab &= ia == ib;
        same_ac &= ia == ic;
    }
    CHECK(same_ab);
    CHECK(!same_ac);
    sampler_free(&a);
    sampler_free(&b);
    sampler_free(&c);
}

/* xorshift64*: the test's own random stream, apart from the sampler's RNG. */
static uint64_t test_rand(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 2685821657736338717ull;
}

static double test_unit(uint64_t *x)
{
    return (double)(test_rand(x) >> 11) * 0x1.0p-53;
}

/* One row of logits of a kind that has broken samplers: flat, one spike, a few ties at the
 * top, non-finite values sprinkled in, values near the float range's ends, subnormals. */
static void random_row(float *row, int n, int kind, uint64_t *x)
{
    for (int i = 0; i < n; i++) {
        double u = test_unit(x);
        switch (kind) {
        case 0: row[i] = 1.5f; break;                                       /* flat */
        case 1: row[i] = (float)(u * 1e-3); break;                          /* nearly flat */
        case 2: row[i] = (float)(u * 4 - 2); break;                         /* ordinary */
        case 3: row[i] = (float)((u * 2 - 1) * FLT_MAX); break;             /* huge, both signs */
        case 4: row[i] = (float)(u * 64) * FLT_TRUE_MIN; break;             /* subnormal */
        case 5: row[i] = u < 0.5 ? -FLT_MAX : FLT_MAX * (float)u; break;    /* huge gaps */
        default: row[i] = (float)(u * 20 - 10); break;
        }
    }
    int spike = (int)(test_rand(x) % (uint64_t)n);
    if (kind == 1 || kind == 6)
        row[spike] = kind == 1 ? 50.0f : 1e30f;
    if (kind == 6 && n > 2)
        row[(spike + 1) % n] = row[spike];                                  /* tied top */
    /* One row in three gets NaN and +-inf sprinkled in (NaN ignored, -inf impossible, +inf certain). */
    if (test_rand(x) % 3 == 0) {
        static const float bad[3] = {NAN, INFINITY, -INFINITY};
        for (int i = 0; i < n; i++)
            if (test_rand(x) % 4 == 0)
                row[i] = bad[test_rand(x) % 3];
    }
}

/* Random rows, temperatures, top-k and top-p, the extremes sampler_params_check accepts
 * included: every draw is an id the rule of sampler.h gives a nonzero probability
 * (tests/unit/sampler_rule.h), so inside the vocabulary, never NaN or -inf, +inf whenever one is. */
static void test_properties(void)
{
    static const float temperatures[] = {0, FLT_TRUE_MIN, 1e-38f, 1e-20f, 1e-6f, 0.3f, 1, 7, 1e20f, FLT_MAX};
    enum { max_vocab = 300 };
    float row[max_vocab];
    uint64_t x = 0x243F6A8885A308D3ull;
    int draws = 0, violations = 0;
    for (int trial = 0; trial < 2000; trial++) {
        int n = trial % 10 == 0 ? 1 + (int)(test_rand(&x) % 3) : 2 + (int)(test_rand(&x) % (max_vocab - 1));
        random_row(row, n, (int)(test_rand(&x) % 7), &x);
        float top_ps[] = {FLT_TRUE_MIN, 1e-6f, 0.5f / (float)n, (float)test_unit(&x), 0.5f, 0.9f,
                          nextafterf(1, 0), 1};
        int top_ks[] = {0, 1, 2, n - 1, n, n + 5, INT_MAX, 1 + (int)(test_rand(&x) % (uint64_t)n)};
        sampler_params p = {temperatures[test_rand(&x) % (sizeof temperatures / sizeof *temperatures)],
                            top_ks[test_rand(&x) % 8], top_ps[test_rand(&x) % 8], test_rand(&x)};
        sampler s;
        kimi_err err = {0};
        if (sampler_init(&s, n, &p, &err)) {
            CHECK_MSG(0, "sampler_init: %s", err.msg);
            continue;
        }
        for (int d = 0; d < 8; d++, draws++) {
            int32_t id = sampler_sample(&s, row);
            const char *why = sampler_rule_violation(row, n, &p, id);
            if (why && violations++ < 5)
                fprintf(stderr, "trial %d: vocab %d, T %g, top_k %d, top_p %g: id %d: %s\n", trial, n,
                        (double)p.temperature, p.top_k, (double)p.top_p, id, why);
        }
        sampler_free(&s);
    }
    CHECK_MSG(violations == 0, "%d of %d draws broke the sampling rule", violations, draws);
}

/* As the temperature tends to 0 from above, sampling becomes greedy: the argmax when it is
 * unique, else one of the tied largest logits. */
static void test_tiny_temperature(void)
{
    static const float temperatures[] = {FLT_TRUE_MIN, 1e-38f, 1e-30f, 1e-12f};
    float issue[4] = {10, 20, 30, 5}, ties[5] = {1, 7, -3, 7, 2};
    float wide[4] = {-FLT_MAX, FLT_MAX, 0, FLT_MAX / 2};
    for (size_t t = 0; t < sizeof temperatures / sizeof *temperatures; t++) {
        for (int top_p = 0; top_p < 2; top_p++) {
            float tp = top_p ? 0.9f : 1;
            sampler a = make_sampler(4, temperatures[t], 0, tp, 1), b = make_sampler(5, temperatures[t], 0, tp, 2);
            sampler c = make_sampler(4, temperatures[t], 2, tp, 3);
            for (int i = 0; i < 50; i++) {
                CHECK_INT(sampler_sample(&a, issue), 2);
                int32_t id = sampler_sample(&b, ties);
                CHECK_MSG(id == 1 || id == 3, "T %g: tied top gave id %d", (double)temperatures[t], id);
                CHECK_INT(sampler_sample(&c, wide), 1);
            }
            sampler_free(&a);
            sampler_free(&b);
            sampler_free(&c);
        }
    }
}

/* top_p below 1/n on a flat row: the nucleus is the single best-ranked id (the lowest). */
static void test_top_p_below_one_over_n(void)
{
    enum { n = 1000 };
    static float flat[n];
    for (int i = 0; i < n; i++)
        flat[i] = 0.25f;
    sampler s = make_sampler(n, 1, 0, 1e-4f, 5);
    for (int i = 0; i < 100; i++)
        CHECK_INT(sampler_sample(&s, flat), 0);
    sampler_free(&s);
}

static void test_bad_params(void)
{
    kimi_err err = {0};
    sampler s;
    CHECK_INT(sampler_params_check(&(sampler_params){-1, 0, 1, 0}, &err), KIMI_ERR_INPUT);
    CHECK(strstr(err.msg, "temperature") != NULL);
    CHECK_INT(sampler_params_check(&(sampler_params){NAN, 0, 1, 0}, &err), KIMI_ERR_INPUT);
    CHECK_INT(sampler_params_check(&(sampler_params){1, -3, 1, 0}, &err), KIMI_ERR_INPUT);
    CHECK(strstr(err.msg, "top_k") != NULL);
    CHECK_INT(sampler_params_check(&(sampler_params){1, 0, 0, 0}, &err), KIMI_ERR_INPUT);
    CHECK(strstr(err.msg, "top_p") != NULL);
    CHECK_INT(sampler_params_check(&(sampler_params){1, 0, 1.5f, 0}, &err), KIMI_ERR_INPUT);
    CHECK_INT(sampler_init(&s, 10, &(sampler_params){1, 0, 2, 0}, &err), KIMI_ERR_INPUT);
    CHECK_INT(sampler_init(&s, 0, &(sampler_params){1, 0, 1, 0}, &err), KIMI_ERR_USAGE);
    CHECK_INT(sampler_params_check(&(sampler_params){0, 0, 1, 0}, &err), 0);
}

int main(void)
{
    test_rng();
    test_greedy();
    test_distributions();
    test_large_vocab_top_p();
    test_top_p_ties();
    test_repeatable();
    test_bad_params();
    test_properties();
    test_tiny_temperature();
    test_top_p_below_one_over_n();
    return check_finish();
}
