/* monotonic: seconds on the monotonic clock, the one clock for durations, deadlines and rates
 * everywhere (never the wall clock, which NTP and the user move). */
#ifndef KIMI_MONOTONIC_H
#define KIMI_MONOTONIC_H

/* Seconds since an unspecified start (CLOCK_MONOTONIC), with nanosecond resolution; only
 * differences mean anything. */
double monotonic_seconds(void);

#endif
