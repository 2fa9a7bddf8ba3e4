/* speculate: prompt-lookup drafting for speculative decoding (no draft model): the longest
 * recent n-gram of the token history that occurred earlier proposes the tokens that followed
 * it, and a controller decides how many to propose from the acceptance and step times it has
 * seen, so that drafting never costs more than it brings. */
#ifndef KIMI_SPECULATE_H
#define KIMI_SPECULATE_H

#include <stdint.h>

#include "engine/base/error.h"

enum {
    SPECULATE_AUTO = -1,        /* draft length chosen by the controller */
    SPECULATE_OFF = 0,
    SPECULATE_MAX_DRAFT = 16,   /* longest draft: one verify step runs draft + 1 tokens */
    SPECULATE_MAX_NGRAM = 4,    /* longest suffix matched */
    SPECULATE_MIN_NGRAM = 2,    /* shortest: one token repeats too often to predict */
};

/* The setting a flag or config value names: "off", "auto" or a draft length 1..16; what
 * names the flag or key and the value in the error ("--speculate 17"). */
int speculate_parse(const char *text, int *setting, const char *what, kimi_err *err);

/* k (<= SPECULATE_MAX_DRAFT) tokens proposed to follow history[0..n): the longest suffix of
 * SPECULATE_MIN_NGRAM..SPECULATE_MAX_NGRAM tokens that occurs earlier in the history, at its
 * most recent earlier occurrence, gives the tokens after it; where those run out (the match is
 * less than k tokens back) the copy goes on from its own start, continuing the repetition.
 * Returns how many were written to draft: k, or 0 when no suffix recurs. */
int speculate_lookup(const int32_t *history, long n, int k, int32_t *draft);

/* The draft length policy of one request. setting: SPECULATE_AUTO, SPECULATE_OFF or a fixed
 * length 1..SPECULATE_MAX_DRAFT. Auto keeps moving averages of the plain decode step's time,
 * of the verify step's time per token, and of the chance that a drafted token is accepted,
 * and proposes the length with the most expected tokens per second, none when a plain step
 * is expected to be faster; every SPECULATE_PROBE_EVERY declined drafts it tries one anyway,
 * so a text that starts repeating itself is noticed. */
enum { SPECULATE_PROBE_EVERY = 32 };
typedef struct {
    int setting;
    double step_seconds;        /* plain decode step, moving average; 0 = none seen */
    double verify_fixed;        /* verify step time ~ verify_fixed + verify_per_token * tokens */
    double verify_per_token;
    int verify_seen;            /* verify steps timed */
    double acceptance;          /* chance a drafted token is accepted (its predecessors were) */
    int declined;               /* drafts declined since the last probe */
} speculate_policy;

void speculate_policy_init(speculate_policy *p, int setting);

/* How many of the available (<= SPECULATE_MAX_DRAFT) drafted tokens to verify: 0 = take a
 * plain decode step. */
int speculate_policy_length(speculate_policy *p, int available);

/* What happened: a plain decode step of seconds; a verify step of drafted tokens of which
 * accepted were taken (0..drafted), in seconds. */
void speculate_policy_plain_step(speculate_policy *p, double seconds);
void speculate_policy_verify_step(speculate_policy *p, int drafted, int accepted, double seconds);

#endif
