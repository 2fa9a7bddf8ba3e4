/* test_monotonic: the one clock of durations never goes back, and a sleep of 20 ms shows as at
 * least 20 ms against it (nothing is asserted about how much longer: the box may be busy). */
#include <time.h>

#include "engine/base/monotonic.h"
#include "tests/unit/check.h"

int main(void)
{
    double prev = monotonic_seconds();
    CHECK(prev >= 0);
    int never_back = 1;
    for (int i = 0; i < 100000; i++) {
        double now = monotonic_seconds();
        never_back &= now >= prev;
        prev = now;
    }
    CHECK(never_back);
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    double before = monotonic_seconds();
    nanosleep(&pause, NULL);
    double slept = monotonic_seconds() - before;
    CHECK_MSG(slept >= 0.020, "slept %.6f s", slept);
    /* nanosecond resolution: two readings a sleep of 1 us apart differ */
    pause.tv_nsec = 1000;
    before = monotonic_seconds();
    nanosleep(&pause, NULL);
    CHECK(monotonic_seconds() > before);
    return check_finish();
}
