/* bench_view: what the full-screen view adds to the render model per streamed token and per page
 * scrolled, in a short (~1k tokens) and a long (~100k tokens) transcript: the frame, the curses
 * painting of its changed rows (ui/paint) and doupdate(), on a real ncurses screen (newterm,
 * xterm-256color, 120x50). Prints one JSON object (median and p99
 * microseconds) and the bytes curses wrote per token and per page (to a temporary file: what
 * would cross an ssh link). Not a test: run build/tests/bench/bench_view. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curses.h>

#include "ui/paint.h"
#include "tests/bench/bench_transcript.h"
#include "ui/render_model.h"
#include "ui/theme.h"

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

static double sorted_at(double *v, int n, int permille)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[(long)n * permille / 1000];
}

typedef struct {
    int tokens;
    double token_us, token_p99_us, token_rows, token_bytes, page_us, page_p99_us, page_bytes;
} result;

static FILE *screen_out; /* where curses writes */

/* The view's frame: the model's frame, its changed rows painted, one doupdate. */
static int view_frame(render_model *rm, const paint_palette *pal)
{
    const rm_frame *f = render_model_frame(rm);
    int rows = paint_frame(stdscr, pal, 0, f, 0);
    wnoutrefresh(stdscr);
    doupdate();
    return rows;
}

static result run(int target_tokens, const char *search, const paint_palette *pal)
{
    result res = {0};
    render_model *rm = render_model_new();
    render_model_set_size(rm, WIDTH, HEIGHT);
    unsigned seed = 1;
    while (res.tokens < target_tokens) {
        add_turn(rm, &seed, &res.tokens);
        render_model_frame(rm);
    }
    int live = render_model_append(rm, RM_ANSWER, "", 0, NULL);
    if (search) /* highlighted, the current match in the streamed answer */
        render_model_set_search(rm, search, strlen(search), 2 * live, 0, NULL);
    render_model_repaint(rm);
    view_frame(rm, pal);

    static double t[SAMPLES];
    long rows = 0;
    fflush(screen_out);
    long bytes0 = ftell(screen_out);
    for (int i = 0; i < SAMPLES; i++) {
        double a = now_us();
        add_words(rm, live, 1, &seed);
        rows += view_frame(rm, pal);
        t[i] = now_us() - a;
    }
    res.token_us = sorted_at(t, SAMPLES, 500);
    res.token_p99_us = sorted_at(t, SAMPLES, 990);
    res.token_rows = (double)rows / SAMPLES;
    fflush(screen_out);
    res.token_bytes = (double)(ftell(screen_out) - bytes0) / SAMPLES;

    /* page up until the top, then back to the bottom; laid-out blocks are reused after the first
       pass, as in a session that scrolls back and forth */
    int n = 0;
    long page_bytes = 0;
    while (n < SAMPLES) {
        fflush(screen_out);
        long b0 = ftell(screen_out);
        double a = now_us();
        render_model_scroll_page(rm, -1);
        int painted = view_frame(rm, pal);
        double dt = now_us() - a;
        if (!painted) {
            render_model_scroll_to_bottom(rm);
            view_frame(rm, pal);
            continue;
        }
        fflush(screen_out);
        page_bytes += ftell(screen_out) - b0;
        t[n++] = dt;
    }
    res.page_bytes = (double)page_bytes / n;
    res.page_us = sorted_at(t, n, 500);
    res.page_p99_us = sorted_at(t, n, 990);
    render_model_free(rm);
    return res;
}

static void print(const char *name, const result *r, int last)
{
    printf("  \"%s\": {\"tokens\": %d, \"token_frame_paint_us\": %.2f, \"token_frame_paint_p99_us\": %.2f, "
           "\"rows_painted_per_token\": %.2f, \"bytes_per_token\": %.0f, \"page_up_frame_paint_us\": %.2f, "
           "\"page_up_p99_us\": %.2f, \"bytes_per_page\": %.0f}%s\n",
           name, r->tokens, r->token_us, r->token_p99_us, r->token_rows, r->token_bytes, r->page_us,
           r->page_p99_us, r->page_bytes, last ? "" : ",");
}

int main(int argc, char **argv)
{
    /* --search QUERY: with the transcript search's highlighting on */
    const char *search = argc == 3 && !strcmp(argv[1], "--search") ? argv[2] : NULL;
    if (argc > 1 && !search) {
        fprintf(stderr, "usage: %s [--search QUERY]\n", argv[0]);
        return 2;
    }
    char lines[16], cols[16];
    snprintf(lines, sizeof lines, "%d", HEIGHT);
    snprintf(cols, sizeof cols, "%d", WIDTH);
    setenv("LINES", lines, 1);
    setenv("COLUMNS", cols, 1);
    FILE *in = fopen("/dev/null", "r");
    screen_out = tmpfile();
    if (!screen_out || !in || !newterm("xterm-256color", screen_out, in)) {
        fprintf(stderr, "bench_view: no curses screen (terminfo xterm-256color?)\n");
        return 1;
    }
    start_color();
    use_default_colors();
    theme th;
    theme_init_default(&th);
    paint_palette pal;
    paint_palette_init(&pal, &th, paint_detect_depth(0));
    result small = run(1000, search, &pal), large = run(100000, search, &pal);
    endwin();
    printf("{\n  \"width\": %d, \"height\": %d, \"samples\": %d, \"colors\": %d, \"search\": \"%s\",\n", WIDTH, HEIGHT,
           SAMPLES, COLORS, search ? search : "");
    print("tokens_1k", &small, 0);
    print("tokens_100k", &large, 1);
    printf("}\n");
    return 0;
}
