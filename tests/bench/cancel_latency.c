/* kimi-cancel-bench: how long engine_cancel takes to end a request during a long prefill: the
 * time from engine_cancel to the request's DONE event, measured at several points of the
 * prefill (and how fast engine_open read the weights in). Prints one JSON object. A benchmark,
 * not a test: numbers depend on the machine.
 *
 * usage: kimi-cancel-bench --model DIR [--prompt N] [--runs N] [--tp N] [--threads N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/runtime/engine.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_seconds(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Read events until the DONE of id; its stats into *st. 0 on success. */
static int wait_done(engine *e, uint64_t id, engine_stats *st)
{
    engine_event ev;
    while (engine_next_event(e, &ev, 600000)) {
        if (ev.request == id && ev.kind == ENGINE_EVENT_DONE) {
            *st = ev.stats;
            return 0;
        }
    }
    return 1;
}

/* The last loading report: how fast engine_open read the weights in. */
static int on_load(void *user, const engine_progress *p)
{
    *(engine_progress *)user = *p;
    return 0;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int prompt = 1024, runs = 8, tp = 1, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--prompt"))
            prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--runs"))
            runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tp"))
            tp = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
    }
    if (!model || prompt < 2 || runs < 1) {
        fprintf(stderr, "usage: kimi-cancel-bench --model DIR [--prompt N>=2] [--runs N>=1] [--tp N] [--threads N]\n");
        return 2;
    }
    engine_progress load = {0};
    engine_options opt = {.model_dir = model, .backend = BACKEND_CPU, .tp = tp, .threads_per_rank = threads,
                          .max_context = prompt + 8, .on_load_progress = on_load, .progress_user = &load};
    engine *e;
    kimi_err err = {0};
    if (engine_open(&e, &opt, &err)) {
        fprintf(stderr, "kimi-cancel-bench: %s\n", err.msg);
        return 1;
    }
    int vocab = engine_get_info(e)->vocab;
    int32_t *tokens = malloc((size_t)prompt * sizeof *tokens);
    uint64_t x = 2026;
    for (int i = 0; i < prompt; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
    }
    engine_request req = {.tokens = tokens, .n_tokens = prompt, .sampling = {0, 0, 1, 0}, .max_new_tokens = 1};

    /* One whole prefill first: the time a cancel is measured against. Each run changes the
     * first token so that nothing is reused from the cache. */
    uint64_t id;
    engine_stats st;
    if (engine_submit(e, &req, &id, &err) || wait_done(e, id, &st)) {
        fprintf(stderr, "kimi-cancel-bench: the full prefill failed: %s\n", err.msg);
        return 1;
    }
    double full = st.prefill_seconds;
    double *latency = malloc((size_t)runs * sizeof *latency);
    int stopped_early = 0;
    for (int r = 0; r < runs; r++) {
        tokens[0] = (tokens[0] + 1) % vocab;
        if (engine_submit(e, &req, &id, &err)) {
            fprintf(stderr, "kimi-cancel-bench: %s\n", err.msg);
            return 1;
        }
        /* Cancel at evenly spread points of the prefill, from 10% to 90%. */
        sleep_seconds(full * (0.1 + 0.8 * r / (runs > 1 ? runs - 1 : 1)));
        double t = now_seconds();
        engine_cancel(e, id, &err);
        if (wait_done(e, id, &st)) {
            fprintf(stderr, "kimi-cancel-bench: no DONE after the cancel\n");
            return 1;
        }
        latency[r] = now_seconds() - t;
        stopped_early += st.stop_reason == ENGINE_STOP_CANCELLED && st.generated_tokens == 0;
    }
    qsort(latency, (size_t)runs, sizeof *latency, compare_double);
    printf("{\"weights_read_gb\": %.2f, \"weights_read_gb_s\": %.2f, \"prompt_tokens\": %d, \"full_prefill_ms\": %.1f, \"prefill_tok_s\": %.1f, \"runs\": %d, "
           "\"cancelled_before_first_token\": %d, \"cancel_to_done_ms\": {\"min\": %.1f, \"median\": %.1f, "
           "\"max\": %.1f}}\n",
           load.done / 1e9, load.rate / 1e9, prompt, full * 1e3, prompt / full, runs, stopped_early, latency[0] * 1e3, latency[runs / 2] * 1e3,
           latency[runs - 1] * 1e3);
    free(latency);
    free(tokens);
    engine_close(e);
    return 0;
}
