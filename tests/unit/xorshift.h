/* xorshift: the tests' and benchmarks' pseudo-random numbers (Marsaglia's xorshift64, shifts
 * 13, 7, 17): the same sequence on every machine, so a failing case can be run again. */
#ifndef KIMI_TESTS_XORSHIFT_H
#define KIMI_TESTS_XORSHIFT_H

#include <stdint.h>

/* Advance *state (never 0) and return it. */
static inline uint64_t xorshift64(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

#endif
