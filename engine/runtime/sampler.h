/* sampler: picks the next token id from a row of logits (greedy, temperature, top-k, top-p)
 * with a seedable RNG, so that a run with the same seed repeats exactly.
 *
 * Non-finite logits: NaN is ignored (never picked), -inf has probability 0, +inf is certain:
 * when any logit is +inf, only the +inf ids can come out, greedy taking the lowest and sampling
 * taking one uniformly among them (each z = 0, then steps 2-4 as usual).
 *
 * Order of operations for temperature > 0:
 *   1. z_i = (logit_i - max logit) / temperature over every id with a finite logit (the same
 *      softmax as logit_i / temperature, computed in double so that a tiny temperature cannot
 *      overflow: it tends to greedy, the tied largest logits sharing the mass);
 *   2. top-k (k > 0): keep the k largest z (ties: the lower id ranks first);
 *   3. top-p (p < 1): p_i = softmax(z) over what is left, sorted by p descending (ties: lower id
 *      first); keep the shortest prefix whose mass reaches top_p (always at least one id);
 *   4. draw u uniform in [0, 1) times the kept mass and walk the kept ids, returning the first
 *      whose cumulative mass exceeds u; the walk goes in rank order after a top-k or top-p cut
 *      and in id order when neither is on (the same distribution, fewer sorts).
 * temperature == 0 is greedy: the argmax, the lowest id on ties (top-k and top-p are moot).
 *
 * RNG: xoshiro256** (Blackman and Vigna, 2018), its 256-bit state filled from the 64-bit seed
 * by four successive outputs of splitmix64 (state += 0x9e3779b97f4a7c15, then the standard
 * mix). A uniform double in [0, 1) is (next() >> 11) * 2^-53, one per token sampled at a
 * positive temperature (greedy draws none). */
#ifndef KIMI_SAMPLER_H
#define KIMI_SAMPLER_H

#include <stdint.h>

#include "engine/base/error.h"

typedef struct {
    float temperature;          /* 0 = greedy; otherwise > 0 */
    int top_k;                  /* 0 = off */
    float top_p;                /* 1 = off; in (0, 1] */
    uint64_t seed;              /* any value, 0 included */
} sampler_params;

typedef struct {
    int32_t id;
    float z;                    /* logit / temperature, then unnormalised probability */
} sampler_candidate;

typedef struct {
    sampler_params params;
    int vocab;
    uint64_t rng[4];            /* xoshiro256** state */
    sampler_candidate *scratch; /* [vocab] */
} sampler;

/* One-line error when params are out of range (names the field). */
int sampler_params_check(const sampler_params *p, kimi_err *err);

int sampler_init(sampler *s, int vocab, const sampler_params *p, kimi_err *err);
void sampler_free(sampler *s);

/* Next id from logits [vocab]; -1 when every logit is NaN or -inf (a broken forward pass). */
int32_t sampler_sample(sampler *s, const float *logits);

/* Speculative decoding's rule for a deterministic draft (one proposed id): accept the draft
 * with probability p(draft), p the distribution sampler_sample draws from (after temperature,
 * top-k and top-p); on rejection draw from p with the draft removed and renormalised. The id
 * returned is then distributed exactly as sampler_sample's. Greedy: the argmax, accepted when
 * it is the draft (no draw). *accepted says whether the draft was taken; -1 as sampler_sample.
 * Draws one uniform for the test and, on rejection, one for the new id. */
int32_t sampler_sample_draft(sampler *s, const float *logits, int32_t draft, int *accepted);

/* Argmax of logits [n] with the lowest id on ties (+inf included), ignoring NaN and -inf; -1
 * when every logit is one of those. */
int32_t sampler_argmax(const float *logits, int n);

/* The RNG alone, for tests: a uniform double in [0, 1) and the raw 64-bit output. */
double sampler_uniform(sampler *s);
uint64_t sampler_next_u64(sampler *s);

#endif
