/* monotonic: CLOCK_MONOTONIC as a double. */
#include "engine/base/monotonic.h"

#include <time.h>

double monotonic_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
