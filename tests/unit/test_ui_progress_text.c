/* test_ui_progress_text: the progress line of every front end: loading (GB or MB, the rate,
 * the ETA and its rounding), reading the prompt, waiting for a server, and a short buffer. */
#include <string.h>

#include "tests/unit/check.h"
#include "ui/progress_text.h"

static void test_durations(void)
{
    static const struct {
        double seconds;
        const char *text;
    } cases[] = {
        {0, "0s"}, {-3, "0s"}, {0.2, "1s"}, {8, "8s"}, {59.5, "1m00s"}, {72, "1m12s"}, {3599, "59m59s"},
        {3600, "1h00m"}, {3601, "1h01m"}, {2 * 3600 + 5 * 60, "2h05m"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char buf[32];
        duration_text(buf, sizeof buf, cases[i].seconds);
        CHECK_MSG(!strcmp(buf, cases[i].text), "%g s: '%s', want '%s'", cases[i].seconds, buf, cases[i].text);
    }
}

static void test_lines(void)
{
    char buf[200];
    /* 123.4 of 590 GB at 6.8 GB/s: (590 - 123.4) / 6.8 = 68.6 s left */
    generator_progress load = {GENERATOR_PROGRESS_LOAD, 123.4e9, 590e9, 18.1, 6.8e9, (590e9 - 123.4e9) / 6.8e9};
    progress_text(buf, sizeof buf, &load);
    CHECK_STR(buf, "loading 123.4/590.0 GB · 6.8 GB/s · ETA 1m09s");
    /* a small model: megabytes, and a rate under a gigabyte a second */
    generator_progress small = {GENERATOR_PROGRESS_LOAD, 3.5e6, 14e6, 0.01, 350e6, 0.03};
    progress_text(buf, sizeof buf, &small);
    CHECK_STR(buf, "loading 3.5/14.0 MB · 350.0 MB/s · ETA 1s");
    /* no rate yet: no ETA */
    generator_progress start = {GENERATOR_PROGRESS_LOAD, 0, 590e9, 0, 0, -1};
    progress_text(buf, sizeof buf, &start);
    CHECK_STR(buf, "loading 0.0/590.0 GB · 0.0 MB/s");
    generator_progress prefill = {GENERATOR_PROGRESS_PREFILL, 512, 8000, 1.2, 420, 17.8};
    progress_text(buf, sizeof buf, &prefill);
    CHECK_STR(buf, "reading the prompt: 512 of 8000 tokens · 420 tok/s · ETA 18s");
    generator_progress waiting = {GENERATOR_PROGRESS_WAITING, 0, 0, 2.54, 0, -1};
    progress_text(buf, sizeof buf, &waiting);
    CHECK_STR(buf, "waiting for the server · 2.5 s");
    char tiny[12];
    progress_text(tiny, sizeof tiny, &load);
    CHECK_STR(tiny, "loading 123");
}

int main(void)
{
    test_durations();
    test_lines();
    return check_finish();
}
