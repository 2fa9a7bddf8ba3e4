/* speculate: the n-gram lookup and the draft length policy (speculate.h). */
#include "engine/runtime/speculate.h"

#include <stdlib.h>
#include <string.h>

/* Moving averages weigh the newest observation by this much. */
#define AVERAGE_WEIGHT 0.2
/* Before any verify step is timed: a verify step of t tokens is assumed to cost a plain step
 * plus this fraction of one per extra token (memory-bound decode reads the weights once). */
#define ASSUMED_EXTRA_TOKEN_COST 0.15
/* The acceptance assumed before any draft was verified. */
#define PRIOR_ACCEPTANCE 0.5

int speculate_parse(const char *text, int *setting, const char *what, kimi_err *err)
{
    if (!strcmp(text, "off")) {
        *setting = SPECULATE_OFF;
        return 0;
    }
    if (!strcmp(text, "auto")) {
        *setting = SPECULATE_AUTO;
        return 0;
    }
    char *end;
    long n = strtol(text, &end, 10);
    if (end == text || *end || text[0] < '0' || text[0] > '9' || n < 1 || n > SPECULATE_MAX_DRAFT)
        return kimi_fail(err, KIMI_ERR_USAGE, "%s: must be off, auto or a draft length 1..%d", what,
                         SPECULATE_MAX_DRAFT);
    *setting = (int)n;
    return 0;
}

int speculate_lookup(const int32_t *history, long n, int k, int32_t *draft)
{
    if (k > SPECULATE_MAX_DRAFT)
        k = SPECULATE_MAX_DRAFT;
    for (int g = SPECULATE_MAX_NGRAM; g >= SPECULATE_MIN_NGRAM && k > 0; g--) {
        if (n <= g)
            continue;
        const int32_t *suffix = history + n - g;
        /* most recent earlier occurrence first: start positions n - g - 1 down to 0 */
        for (long start = n - g - 1; start >= 0; start--) {
            if (history[start] != suffix[0] || memcmp(history + start, suffix, (size_t)g * sizeof *suffix))
                continue;
            /* Copy what followed the match; past the end of the history the copy reads its own
             * output, so a pattern shorter than the draft (a run, a repeated phrase) goes on. */
            long next = start + g;
            for (int i = 0; i < k; i++)
                draft[i] = next + i < n ? history[next + i] : draft[next + i - n];
            return k;
        }
    }
    return 0;
}

void speculate_policy_init(speculate_policy *p, int setting)
{
    memset(p, 0, sizeof *p);
    p->setting = setting;
    p->acceptance = PRIOR_ACCEPTANCE;
}

static double average(double old, double sample, int have_old)
{
    return have_old ? old + AVERAGE_WEIGHT * (sample - old) : sample;
}

/* Expected seconds of a verify step over tokens tokens. */
static double verify_seconds(const speculate_policy *p, int tokens)
{
    if (p->verify_seen >= 2)
        return p->verify_fixed + p->verify_per_token * tokens;
    return p->step_seconds * (1.0 + ASSUMED_EXTRA_TOKEN_COST * (tokens - 1));
}

int speculate_policy_length(speculate_policy *p, int available)
{
    if (available <= 0 || p->setting == SPECULATE_OFF)
        return 0;
    if (p->setting > 0)
        return available < p->setting ? available : p->setting;
    if (p->step_seconds <= 0)
        return 0;   /* nothing to compare with yet: one plain step first */
    /* tokens a verify step of k drafts yields: 1 + a + a^2 + ... + a^k (each drafted token
     * counts only if every one before it was accepted; the step always adds one of its own) */
    double best_rate = 1.0 / p->step_seconds, yield = 1.0, chain = 1.0;
    int best = 0;
    for (int k = 1; k <= available; k++) {
        chain *= p->acceptance;
        yield += chain;
        double rate = yield / verify_seconds(p, k + 1);
        if (rate > best_rate) {
            best_rate = rate;
            best = k;
        }
    }
    if (best == 0 && ++p->declined >= SPECULATE_PROBE_EVERY) {
        p->declined = 0;
        best = available < 2 ? available : 2;
    }
    return best;
}

void speculate_policy_plain_step(speculate_policy *p, double seconds)
{
    p->step_seconds = average(p->step_seconds, seconds, p->step_seconds > 0);
}

void speculate_policy_verify_step(speculate_policy *p, int drafted, int accepted, double seconds)
{
    /* Accepted tokens each passed a test; the first rejected one (if any) failed one; the
     * tokens after it were never tested. */
    int tested = accepted < drafted ? accepted + 1 : accepted;
    for (int i = 0; i < tested; i++)
        p->acceptance = average(p->acceptance, i < accepted ? 1.0 : 0.0, 1);
    /* A line through (1, plain step) and the verify steps seen: cost per extra token. */
    int tokens = drafted + 1;
    if (p->step_seconds > 0 && tokens > 1) {
        double per_token = (seconds - p->step_seconds) / (tokens - 1);
        if (per_token < 0)
            per_token = 0;
        p->verify_per_token = average(p->verify_per_token, per_token, p->verify_seen > 0);
        p->verify_fixed = p->step_seconds - p->verify_per_token;
        p->verify_seen++;
    }
}
