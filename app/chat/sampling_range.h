/* sampling_range: the one range of each sampling setting (temperature, top_p, top_k,
 * max_tokens, seed) and the one parser of a value against it, shared by the flags, the config
 * file and /set, so a value one accepts the others accept too. */
#ifndef KIMI_APP_SAMPLING_RANGE_H
#define KIMI_APP_SAMPLING_RANGE_H

#include <stdint.h>

#include "engine/base/error.h"

typedef enum {
    SAMPLING_TEMPERATURE,   /* [0, 100], 0 = greedy */
    SAMPLING_TOP_P,         /* (0, 1] */
    SAMPLING_TOP_K,         /* 0 .. 2^30, 0 = off */
    SAMPLING_MAX_TOKENS,    /* 0 .. 2^30, 0 = up to the context */
    SAMPLING_SEED,          /* 0 .. 2^64 - 1 */
} sampling_setting;

/* Parse text (the whole string: no spaces, no junk) as a value of the setting: temperature and
 * top_p as finite decimal numbers (no hex; -0 is 0) into *number, the others as whole numbers into *integer. Anything
 * else fails with code and one line "WHAT: must be a number in [0, 100]" or "WHAT: must be a
 * whole number from 0 to 1073741824", what naming where the value came from ("--temperature
 * 150", "CFG:3: temperature = 150", "/set temperature 150"). */
int sampling_parse(sampling_setting s, const char *text, const char *what, int code, double *number,
                   uint64_t *integer, kimi_err *err);

#endif
