/* progress_text: progress reports as one line of text. */
#include "ui/progress_text.h"

#include <math.h>
#include <stdio.h>

void duration_text(char *buf, size_t cap, double seconds)
{
    long s = seconds > 0 ? (long)ceil(seconds) : 0;
    if (s < 60)
        snprintf(buf, cap, "%lds", s);
    else if (s < 3600)
        snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
    else /* minutes rounded up, so that the ETA never promises less than is left */
        snprintf(buf, cap, "%ldh%02ldm", (s + 59) / 3600, (s + 59) % 3600 / 60);
}

/* " · ETA 1m12s", or "" while unknown. */
static void eta_text(char *buf, size_t cap, double eta_seconds)
{
    char d[32];
    buf[0] = 0;
    if (eta_seconds >= 0) {
        duration_text(d, sizeof d, eta_seconds);
        snprintf(buf, cap, " · ETA %s", d);
    }
}

void progress_text(char *buf, size_t cap, const generator_progress *p)
{
    char eta[48];
    eta_text(eta, sizeof eta, p->eta_seconds);
    switch (p->kind) {
    case GENERATOR_PROGRESS_LOAD: {
        int giga = p->total >= 1e9;
        double unit = giga ? 1e9 : 1e6, rate_unit = p->rate >= 1e9 ? 1e9 : 1e6;
        snprintf(buf, cap, "loading %.1f/%.1f %s · %.1f %s%s", p->done / unit, p->total / unit, giga ? "GB" : "MB",
                 p->rate / rate_unit, rate_unit == 1e9 ? "GB/s" : "MB/s", eta);
        break;
    }
    case GENERATOR_PROGRESS_PREFILL:
        snprintf(buf, cap, "reading the prompt: %.0f of %.0f tokens · %.0f tok/s%s", p->done, p->total, p->rate, eta);
        break;
    case GENERATOR_PROGRESS_WAITING:
        snprintf(buf, cap, "waiting for the server · %.1f s", p->seconds);
        break;
    }
}
