/* sampler: greedy / temperature / top-k / top-p token selection with xoshiro256** (the
 * order of operations and the RNG are documented in sampler.h). */
#include "engine/runtime/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t sampler_next_u64(sampler *s)
{
    uint64_t *st = s->rng;
    uint64_t result = rotl(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return result;
}

double sampler_uniform(sampler *s)
{
    return (double)(sampler_next_u64(s) >> 11) * 0x1.0p-53;
}

int sampler_params_check(const sampler_params *p, kimi_err *err)
{
    if (!isfinite(p->temperature) || p->temperature < 0)
        return kimi_fail(err, KIMI_ERR_INPUT, "sampling temperature %g: must be 0 (greedy) or positive",
                         (double)p->temperature);
    if (p->top_k < 0)
        return kimi_fail(err, KIMI_ERR_INPUT, "sampling top_k %d: must be 0 (off) or positive", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return kimi_fail(err, KIMI_ERR_INPUT, "sampling top_p %g: must be in (0, 1] (1 = off)",
                         (double)p->top_p);
    return 0;
}

int sampler_init(sampler *s, int vocab, const sampler_params *p, kimi_err *err)
{
    s->scratch = NULL;
    int rc = sampler_params_check(p, err);
    if (rc)
        return rc;
    if (vocab <= 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "sampler: vocabulary size %d must be positive", vocab);
    s->params = *p;
    s->vocab = vocab;
    uint64_t seed_state = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&seed_state);
    s->scratch = malloc((size_t)vocab * sizeof *s->scratch);
    if (!s->scratch)
        return kimi_fail(err, KIMI_ERR_NOMEM, "sampler: out of memory for %d candidates", vocab);
    return 0;
}

void sampler_free(sampler *s)
{
    free(s->scratch);
    s->scratch = NULL;
}

int32_t sampler_argmax(const float *logits, int n)
{
    int32_t best = -1;
    float best_value = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(logits[i]) || logits[i] == -INFINITY)
            continue;
        if (best < 0 || logits[i] > best_value) {
            best = i;
            best_value = logits[i];
        }
    }
    return best;
}

/* The ranking every step uses: larger z first, the lower id on ties. */
static int ranks_before(const sampler_candidate *a, const sampler_candidate *b)
{
    return a->z > b->z || (a->z == b->z && a->id < b->id);
}

static int compare_rank(const void *pa, const void *pb)
{
    const sampler_candidate *a = pa, *b = pb;
    if (ranks_before(a, b))
        return -1;
    return ranks_before(b, a) ? 1 : 0;
}

/* Min-heap (the worst-ranked candidate at the root) of heap[0..n). */
static void heap_sift_down(sampler_candidate *heap, int n, int i)
{
    for (;;) {
        int worst = i, l = 2 * i + 1, r = l + 1;
        if (l < n && ranks_before(&heap[worst], &heap[l]))
            worst = l;
        if (r < n && ranks_before(&heap[worst], &heap[r]))
            worst = r;
        if (worst == i)
            return;
        sampler_candidate t = heap[i];
        heap[i] = heap[worst];
        heap[worst] = t;
        i = worst;
    }
}

/* Move the k best of c[0..n) to c[0..k), in rank order; O(n log k). */
static void select_top_k(sampler_candidate *c, int n, int k)
{
    for (int i = k / 2 - 1; i >= 0; i--)
        heap_sift_down(c, k, i);
    for (int i = k; i < n; i++) {
        if (ranks_before(&c[i], &c[0])) {
            c[0] = c[i];
            heap_sift_down(c, k, 0);
        }
    }
    qsort(c, (size_t)k, sizeof *c, compare_rank);
}

/* Steps 1-3 of sampler.h for temperature > 0: the kept candidates in s->scratch[0..n) with
 * unnormalised probabilities, *total their sum; returns n (0: no finite logit). */
static int distribution(sampler *s, const float *logits, double *total_out)
{
    const sampler_params *p = &s->params;
    int32_t best = sampler_argmax(logits, s->vocab);
    if (best < 0)
        return 0;
    /* Shifted by the largest logit before dividing, in double: logit / temperature alone
     * overflows to inf for a tiny temperature (and inf - inf is NaN), while the shifted value
     * is at most 0 and, below the float range, becomes -inf: a probability of exactly 0. */
    double max_logit = logits[best], temperature = p->temperature;
    sampler_candidate *c = s->scratch;
    int n = 0;
    if (max_logit == INFINITY) {
        /* +inf is certain: the +inf ids share all the mass equally (z = 0), the rest have none */
        for (int i = best; i < s->vocab; i++)
            if (logits[i] == INFINITY)
                c[n++] = (sampler_candidate){i, 0.0f};
    } else {
        for (int i = 0; i < s->vocab; i++) {
            if (!isfinite(logits[i]))
                continue;
            double z = ((double)logits[i] - max_logit) / temperature;
            c[n++] = (sampler_candidate){i, z < -FLT_MAX ? -INFINITY : (float)z};
        }
    }

    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(c, n, p->top_k);
        n = p->top_k;
    }

    /* The largest z is 0, so every exp is in [0, 1] and the largest is exactly 1. */
    double total = 0;
    for (int i = 0; i < n; i++) {
        c[i].z = expf(c[i].z);
        total += c[i].z;
    }

    if (p->top_p < 1 && n > 1) {
        /* Everything below this cutoff together holds less than (1 - top_p) of the mass and
         * ranks below everything above it, so the nucleus lies entirely above it: sorting only
         * the survivors keeps top-p cheap over a 160k vocabulary. The cutoff is at most 1, the
         * largest probability, so that one always survives (a nearly flat row with
         * top_p < 1/n would otherwise lose every id); when it is lowered to 1, because
         * (1 - top_p) * total > n - 1, the at most n - 1 ids below it hold less than n - 1,
         * so the argument still holds. The sort is by probability even after a top-k cut
         * (ranked by z): distinct z can round to one probability, which ties go by id. */
        double cutoff = fmin((1.0 - p->top_p) / (n - 1) * total, 1.0);
        int kept = 0;
        for (int i = 0; i < n; i++)
            if (c[i].z >= cutoff)
                c[kept++] = c[i];
        n = kept;
        qsort(c, (size_t)n, sizeof *c, compare_rank);
        double need = p->top_p * total, mass = 0;
        for (int i = 0; i < n; i++) {
            mass += c[i].z;
            if (mass >= need) {
                n = i + 1;
                break;
            }
        }
        total = mass;
    }
    *total_out = total;
    return n;
}

/* Step 4: walk c[0..n) (total: their mass) with one uniform draw. */
static int32_t draw(sampler *s, sampler_candidate *c, int n, double total)
{
    double u = sampler_uniform(s) * total, mass = 0;
    for (int i = 0; i < n; i++) {
        mass += c[i].z;
        if (u < mass)
            return c[i].id;
    }
    /* u rounded up to the whole mass: the last kept id that has any probability (the largest,
     * 1, is kept, so there is one). */
    while (c[n - 1].z == 0)
        n--;
    return c[n - 1].id;
}

int32_t sampler_sample(sampler *s, const float *logits)
{
    if (s->params.temperature == 0)
        return sampler_argmax(logits, s->vocab);
    double total;
    int n = distribution(s, logits, &total);
    return n ? draw(s, s->scratch, n, total) : -1;
}

int32_t sampler_sample_draft(sampler *s, const float *logits, int32_t draft, int *accepted)
{
    *accepted = 0;
    if (s->params.temperature == 0) {
        int32_t best = sampler_argmax(logits, s->vocab);
        *accepted = best >= 0 && best == draft;
        return best;
    }
    double total;
    int n = distribution(s, logits, &total);
    if (!n)
        return -1;
    sampler_candidate *c = s->scratch;
    int at = -1;
    for (int i = 0; i < n && at < 0; i++)
        if (c[i].id == draft)
            at = i;
    double p_draft = at >= 0 ? c[at].z : 0;
    if (sampler_uniform(s) * total < p_draft) {
        *accepted = 1;
        return draft;
    }
    /* Rejected: the rest of the distribution, renormalised (the draft can no longer come). */
    if (at >= 0) {
        c[at].z = 0;
        total = 0;
        for (int i = 0; i < n; i++)
            total += c[i].z;
    }
    return draw(s, c, n, total);
}
