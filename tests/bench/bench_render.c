/* bench_render: the render model's cost per streamed token and per page scrolled, in a short
 * (~1k tokens) and a long (~100k tokens) transcript; neither should grow with the length.
 * Prints one JSON object (median microseconds). Not a test: run build/tests/bench/bench_render. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/bench/bench_transcript.h"
#include "ui/render_model.h"

enum { WIDTH = 120, HEIGHT = 50, SAMPLES = 2001 };

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

typedef struct {
    int tokens, blocks;
    double build_ms, token_us, token_p99_us, page_up_us, page_up_cold_us, idle_frame_us,
        resize_frame_us;
} result;

static result run(int target_tokens, const char *search)
{
    result res = {0};
    render_model *rm = render_model_new();
    render_model_set_size(rm, WIDTH, HEIGHT);
    unsigned seed = 1;
    double t0 = now_us();
    while (res.tokens < target_tokens) {
        add_turn(rm, &seed, &res.tokens);
        render_model_frame(rm); /* the view paints as the session grows */
    }
    int live = render_model_append(rm, RM_ANSWER, "", 0, NULL);
    if (search) /* highlighted, the current match in the streamed answer */
        render_model_set_search(rm, search, strlen(search), 2 * live, 0, NULL);
    res.build_ms = (now_us() - t0) / 1e3;
    render_model_frame(rm);

    static double t[SAMPLES];
    /* (a) one streamed token into the last message, then the frame of a 50-row view */
    for (int i = 0; i < SAMPLES; i++) {
        double a = now_us();
        add_words(rm, live, 1, &seed);
        const rm_frame *f = render_model_frame(rm);
        t[i] = now_us() - a;
        if (!f->any_changed)
            fprintf(stderr, "bench_render: a token changed no row\n");
    }
    res.token_us = median(t, SAMPLES);
    res.token_p99_us = t[SAMPLES * 99 / 100];

    /* the frame when nothing changed (what a keystroke in the input costs the transcript) */
    for (int i = 0; i < SAMPLES; i++) {
        double a = now_us();
        render_model_frame(rm);
        t[i] = now_us() - a;
    }
    res.idle_frame_us = median(t, SAMPLES);

    /* (b) one page up, then the frame; back to the bottom at the top. The first pass over a
     * part of the transcript lays it out (cold, as after a resize), later passes reuse it. */
    render_model_set_size(rm, WIDTH - 1, HEIGHT);
    double a = now_us();
    render_model_frame(rm);
    res.resize_frame_us = now_us() - a;
    int n = 0, cold_n = 0;
    static double cold[SAMPLES];
    int pass = 0;
    while (n < SAMPLES) {
        a = now_us();
        render_model_scroll(rm, -(HEIGHT - 1));
        const rm_frame *f = render_model_frame(rm);
        double dt = now_us() - a;
        if (pass == 0 && cold_n < SAMPLES)
            cold[cold_n++] = dt;
        else
            t[n++] = dt;
        if (!f->any_changed) { /* at the top */
            render_model_scroll_to_bottom(rm);
            render_model_frame(rm);
            pass++;
        }
    }
    res.page_up_us = median(t, n);
    res.page_up_cold_us = median(cold, cold_n);
    res.blocks = render_model_block_count(rm);
    render_model_free(rm);
    return res;
}

static void print(const char *name, const result *r, int last)
{
    printf("  \"%s\": {\"tokens\": %d, \"blocks\": %d, \"build_ms\": %.1f, "
           "\"token_append_frame_us\": %.2f, \"token_append_frame_p99_us\": %.2f, "
           "\"page_up_frame_us\": %.2f, \"page_up_frame_first_pass_us\": %.2f, "
           "\"idle_frame_us\": %.3f, \"resize_first_frame_us\": %.1f}%s\n",
           name, r->tokens, r->blocks, r->build_ms, r->token_us, r->token_p99_us, r->page_up_us,
           r->page_up_cold_us, r->idle_frame_us, r->resize_frame_us, last ? "" : ",");
}

int main(int argc, char **argv)
{
    /* --search QUERY: with the transcript search's highlighting on */
    const char *search = argc == 3 && !strcmp(argv[1], "--search") ? argv[2] : NULL;
    if (argc > 1 && !search) {
        fprintf(stderr, "usage: %s [--search QUERY]\n", argv[0]);
        return 2;
    }
    result small = run(1000, search), large = run(100000, search);
    printf("{\n  \"width\": %d, \"height\": %d, \"samples\": %d, \"search\": \"%s\",\n", WIDTH, HEIGHT, SAMPLES,
           search ? search : "");
    print("tokens_1k", &small, 0);
    print("tokens_100k", &large, 1);
    printf("}\n");
    return 0;
}
