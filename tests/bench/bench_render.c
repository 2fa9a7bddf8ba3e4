/* bench_render: the render model's cost per streamed token and per page scrolled, in a short
 * (~1k tokens) and a long (~100k tokens) transcript; neither should grow with the length.
 * Prints one JSON object (median microseconds). Not a test: run build/tests/bench/bench_render. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static const char *words[] = {"the", "model", "reads", "every", "weight", "once", "per",
                              "token", "**fast**", "`kv`", "中文", "cache", "and", "so", "on"};
enum { N_WORDS = sizeof words / sizeof words[0] };

/* About 4 bytes per token, as a tokenizer would cut English. */
static size_t add_words(render_model *rm, int b, int tokens, unsigned *seed)
{
    char buf[64];
    size_t bytes = 0;
    for (int i = 0; i < tokens; i++) {
        *seed = *seed * 1103515245u + 12345u;
        int n = snprintf(buf, sizeof buf, "%s%s", words[(*seed >> 16) % N_WORDS],
                         (*seed >> 8) % 13 == 0 ? "\n" : " ");
        render_model_append_text(rm, b, buf, (size_t)n, NULL);
        bytes += (size_t)n;
    }
    return bytes;
}

static const char answer_tail[] =
    "\n\n## Table\n\n| name | value | 说明 |\n|---|--:|---|\n| alpha | 1 | 第一 |\n"
    "| beta | 22 | 第二 |\n\n```c\nfor (int i = 0; i < n; i++)\n    sum += x[i];\n```\n"
    "- a list item\n- another one with more words in it\n> a quote\n";

/* One turn of about 600 tokens: question, reasoning, markdown answer, tool call. */
static void add_turn(render_model *rm, unsigned *seed, int *tokens)
{
    int u = render_model_append(rm, RM_USER, "", 0, NULL);
    add_words(rm, u, 20, seed);
    int r = render_model_append(rm, RM_REASONING, "", 0, NULL);
    add_words(rm, r, 200, seed);
    render_model_set_reasoning_stats(rm, r, 200, 3.2);
    render_model_finish(rm, r);
    int a = render_model_append(rm, RM_ANSWER, "# Answer\n\n", 10, NULL);
    add_words(rm, a, 250, seed);
    render_model_append_text(rm, a, answer_tail, sizeof answer_tail - 1, NULL);
    render_model_finish(rm, a);
    int t = render_model_append_tool(rm, "word_count", "functions.word_count:0", NULL);
    const char *args = "{\"path\": \"notes.txt\"}";
    render_model_append_text(rm, t, args, strlen(args), NULL);
    render_model_set_tool_state(rm, t, RM_TOOL_DONE, NULL, 0.2, NULL);
    const char *result = "  1204 notes.txt\nline 2\nline 3\nline 4\nline 5\n";
    render_model_set_tool_result(rm, t, result, strlen(result), NULL);
    render_model_finish(rm, t);
    *tokens += 20 + 200 + 250 + 80 + 30;
}

typedef struct {
    int tokens, blocks;
    double build_ms, token_us, token_p99_us, page_up_us, page_up_cold_us, idle_frame_us,
        resize_frame_us;
} result;

static result run(int target_tokens)
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

int main(void)
{
    result small = run(1000), large = run(100000);
    printf("{\n  \"width\": %d, \"height\": %d, \"samples\": %d,\n", WIDTH, HEIGHT, SAMPLES);
    print("tokens_1k", &small, 0);
    print("tokens_100k", &large, 1);
    printf("}\n");
    return 0;
}
