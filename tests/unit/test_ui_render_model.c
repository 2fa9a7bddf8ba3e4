/* test_ui_render_model: the transcript's rows (gutter labels, reasoning live/folded/expanded/
 * hidden, tool boxes with folded results and streamed arguments), fold counts, scrolling that
 * follows only at the bottom, "↓ new", jumps, focus, changed-row flags, and layouts after a
 * resize or a stream equal to a fresh layout of the same state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/array.h"
#include "tests/unit/check.h"
#include "ui/render_model.h"
#include "ui/text_width.h"
#include "ui/theme.h"

enum { MAX_ROWS = 4000, ROW_BYTES = 512 };
static char rows_a[MAX_ROWS][ROW_BYTES], rows_b[MAX_ROWS][ROW_BYTES];

/* Every row of the transcript at width w (a screen taller than it), as text. */
static int all_rows(render_model *rm, int w, char (*out)[ROW_BYTES])
{
    render_model_set_size(rm, w, MAX_ROWS);
    const rm_frame *f = render_model_frame(rm);
    int n = 0;
    for (; n < f->n_rows && f->rows[n].block >= 0; n++)
        render_model_row_text(&f->rows[n], out[n], ROW_BYTES);
    return n;
}

/* The visible rows of an h-row screen as text. */
static const rm_frame *screen(render_model *rm, char (*out)[ROW_BYTES])
{
    const rm_frame *f = render_model_frame(rm);
    for (int i = 0; i < f->n_rows; i++)
        render_model_row_text(&f->rows[i], out[i], ROW_BYTES);
    return f;
}

static int add(render_model *rm, rm_block_kind kind, const char *text)
{
    return render_model_append(rm, kind, text, strlen(text), NULL);
}

static void text(render_model *rm, int b, const char *s)
{
    CHECK_INT(render_model_append_text(rm, b, s, strlen(s), NULL), 0);
}

static const char *numbered(int n)
{
    static char buf[4096];
    size_t k = 0;
    for (int i = 1; i <= n; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "line %d\n", i);
    return buf;
}

static void test_rows_and_labels(void)
{
    render_model *rm = render_model_new();
    add(rm, RM_USER, "Write a haiku about GPUs.");
    int r = add(rm, RM_REASONING, "The user wants a haiku.");
    render_model_set_reasoning_stats(rm, r, 412, 6.1);
    render_model_finish(rm, r);
    int a = add(rm, RM_ANSWER, "Silicon **rivers**");
    render_model_finish(rm, a);
    add(rm, RM_NOTE, "saved");
    add(rm, RM_USER, "thanks");
    int n = all_rows(rm, 60, rows_a);
    CHECK_INT(n, 6);
    CHECK_STR(rows_a[0], "  you  Write a haiku about GPUs.");
    CHECK_STR(rows_a[1], "  kimi ▸ thought for 6.1 s · 412 tokens");
    CHECK_STR(rows_a[2], "       Silicon rivers"); /* the label is on the turn's first block only */
    CHECK_STR(rows_a[3], "       saved");
    CHECK_STR(rows_a[4], "");                      /* a blank row before the next user turn */
    CHECK_STR(rows_a[5], "  you  thanks");
    const rm_frame *f = render_model_frame(rm);
    CHECK_INT(f->rows[0].spans[0].element, THEME_USER_LABEL);
    CHECK_INT(f->rows[0].spans[1].element, THEME_USER_TEXT);
    CHECK_INT(f->rows[0].spans[1].col, RM_GUTTER);
    CHECK_INT(f->rows[1].spans[1].element, THEME_REASONING_HEADER);
    CHECK_INT(f->rows[2].spans[1].attrs, THEME_ATTR_BOLD);
    CHECK_INT(f->rows[3].spans[0].element, THEME_NOTE);
    CHECK_INT(f->rows[6].block, -1);

    /* hidden reasoning: the label moves to the answer */
    render_model_set_reasoning_mode(rm, RM_REASONING_HIDDEN);
    n = all_rows(rm, 60, rows_a);
    CHECK_INT(n, 5);
    CHECK_STR(rows_a[1], "  kimi Silicon rivers");

    /* narrow: no labels, one column for the focus marker */
    n = all_rows(rm, 20, rows_a);
    CHECK_STR(rows_a[0], " Write a haiku about");
    CHECK_STR(rows_a[1], " GPUs.");
    render_model_free(rm);
}

static void test_reasoning_folds(void)
{
    render_model *rm = render_model_new();
    render_model_set_size(rm, 60, 40);
    add(rm, RM_USER, "q");
    int r = add(rm, RM_REASONING, "");
    text(rm, r, numbered(10));
    render_model_set_reasoning_stats(rm, r, 50, 1.5);
    /* live: header + the last six lines */
    CHECK_INT(render_model_block_rows(rm, r), 1 + RM_LIVE_REASONING_ROWS);
    int n = all_rows(rm, 60, rows_a);
    CHECK_INT(n, 8);
    CHECK_STR(rows_a[1], "  kimi thinking · 50 tokens · 1.5 s");
    CHECK_STR(rows_a[2], "       line 5");
    CHECK_STR(rows_a[7], "       line 10");
    render_model_finish(rm, r);
    CHECK_INT(render_model_block_rows(rm, r), 1);
    CHECK(render_model_is_folded(rm, r));
    render_model_toggle_fold(rm, r);
    CHECK_INT(render_model_block_rows(rm, r), 11);
    CHECK(!render_model_is_folded(rm, r));
    n = all_rows(rm, 60, rows_a);
    CHECK_STR(rows_a[1], "  kimi ▾ thought for 1.5 s · 50 tokens");
    CHECK_STR(rows_a[2], "       line 1");
    render_model_toggle_fold(rm, r);
    CHECK_INT(render_model_block_rows(rm, r), 1);

    int a = add(rm, RM_ANSWER, "answer");
    int r2 = add(rm, RM_REASONING, "one\ntwo");
    render_model_finish(rm, r2);
    render_model_toggle_fold(rm, r2);
    CHECK_INT(render_model_block_rows(rm, r2), 3);
    /* Ctrl-T: every reasoning block expanded, earlier single toggles forgotten; again: folded */
    CHECK_INT(render_model_toggle_all_reasoning(rm), RM_REASONING_EXPANDED);
    CHECK_INT(render_model_block_rows(rm, r), 11);
    CHECK_INT(render_model_block_rows(rm, r2), 3);
    CHECK_INT(render_model_toggle_all_reasoning(rm), RM_REASONING_COLLAPSED);
    CHECK_INT(render_model_block_rows(rm, r), 1);
    CHECK_INT(render_model_block_rows(rm, r2), 1);
    render_model_set_reasoning_mode(rm, RM_REASONING_HIDDEN);
    CHECK_INT(render_model_block_rows(rm, r), 0);
    render_model_toggle_fold(rm, r); /* a block can still be opened by itself */
    CHECK_INT(render_model_block_rows(rm, r), 11);
    CHECK_INT(render_model_block_rows(rm, a), 1);
    CHECK_INT(render_model_total_rows(rm), 1 + 11 + 1 + 0);
    /* live and hidden: only the header, as progress */
    int r3 = add(rm, RM_REASONING, "x\ny");
    CHECK_INT(render_model_block_rows(rm, r3), 1);
    render_model_free(rm);
}

static void test_tool_box(void)
{
    render_model *rm = render_model_new();
    render_model_set_size(rm, 60, 40);
    int t = render_model_append_tool(rm, "get_weather", "functions.get_weather:0", NULL);
    text(rm, t, "{\"city\": \"Pa");
    int n = all_rows(rm, 60, rows_a);
    CHECK_INT(n, 3);
    /* the state stays whole; the call id gives way */
    CHECK_STR(rows_a[0], "  kimi ┌ get_weather  functions.get ─ waiting for approval ┐");
    CHECK_STR(rows_a[1], "       │ {\"city\": \"Pa                                      │");
    CHECK_STR(rows_a[2], "       └───────────────────────────────────────────────────┘");
    text(rm, t, "ris\",\"days\":2}");
    render_model_set_tool_state(rm, t, RM_TOOL_DONE, NULL, 0.3, NULL);
    render_model_set_tool_result(rm, t, numbered(10), strlen(numbered(10)), NULL);
    n = all_rows(rm, 60, rows_a);
    CHECK_INT(n, 1 + 1 + 3 + 1 + 1);
    CHECK_STR(rows_a[0], "  kimi ┌ get_weather  functions.get_weather:0 ─ done 0.3 s ┐");
    CHECK_STR(rows_a[1], "       │ {\"city\": \"Paris\", \"days\": 2}                      │");
    CHECK_STR(rows_a[2], "       │ → line 1                                          │");
    CHECK_STR(rows_a[4], "       │   line 3                                          │");
    CHECK_STR(rows_a[5], "       │ … +7 lines                                        │");
    render_model_set_tool_result(rm, t, numbered(4), strlen(numbered(4)), NULL);
    all_rows(rm, 60, rows_a);
    CHECK_STR(rows_a[5], "       │ … +1 line                                         │");
    /* a denied call shows no duration (it never ran) */
    render_model_set_tool_state(rm, t, RM_TOOL_DENIED, NULL, 2.5, NULL);
    all_rows(rm, 60, rows_a);
    CHECK_STR(rows_a[0], "  kimi ┌ get_weather  functions.get_weather:0 ─ denied ────┐");
    render_model_set_tool_state(rm, t, RM_TOOL_DONE, NULL, 0.3, NULL);
    render_model_set_tool_result(rm, t, numbered(10), strlen(numbered(10)), NULL);
    CHECK(render_model_is_folded(rm, t));
    const rm_frame *f = render_model_frame(rm);
    int state_element = -1;
    for (int i = 0; i < f->rows[0].n_spans; i++)
        if (f->rows[0].spans[i].len == 10 && !memcmp(f->rows[0].spans[i].s, "done 0.3 s", 10))
            state_element = f->rows[0].spans[i].element;
    CHECK_INT(state_element, THEME_TOOL_OK);
    int widths_ok = 1; /* every row of the box ends at the last column */
    for (int i = 0; i < n; i++) {
        const rm_span *last = &f->rows[i].spans[f->rows[i].n_spans - 1];
        widths_ok &= last->col + last->width == 60;
    }
    CHECK(widths_ok);
    render_model_toggle_fold(rm, t);
    CHECK_INT(render_model_block_rows(rm, t), 1 + 1 + 10 + 1);
    render_model_toggle_fold(rm, t);
    render_model_set_tools_expanded(rm, 1);
    CHECK_INT(render_model_block_rows(rm, t), 13);
    CHECK(!render_model_is_folded(rm, t));
    render_model_set_tools_expanded(rm, 0);
    CHECK_INT(render_model_block_rows(rm, t), 7);

    /* arguments too long for one line are indented JSON */
    int t2 = render_model_append_tool(rm, "write", "w:1", NULL);
    text(rm, t2, "{\"path\": \"/tmp/some/long/path/name.txt\", \"text\": \"hello there\"}");
    render_model_set_tool_state(rm, t2, RM_TOOL_FAILED, "exit 3", -1, NULL);
    n = all_rows(rm, 60, rows_a);
    CHECK_STR(rows_a[7], "       ┌ write  w:1 ─ exit 3 ──────────────────────────────┐");
    CHECK_STR(rows_a[8], "       │ {                                                 │");
    CHECK_STR(rows_a[9], "       │   \"path\": \"/tmp/some/long/path/name.txt\",         │");

    /* numbers as written, names from the model cannot reach the terminal as escapes */
    int t3 = render_model_append_tool(rm, "evil\x1b]0;x\x07", "id\n2", NULL);
    text(rm, t3, "{\"t\": 0.1}");
    render_model_set_tool_state(rm, t3, RM_TOOL_DENIED, "no\x1b", -1, NULL);
    n = all_rows(rm, 60, rows_a);
    CHECK_STR(rows_a[n - 3], "       ┌ evil^[]0;x^G  id^J2 ─ no^[ ───────────────────────┐");
    CHECK_STR(rows_a[n - 2], "       │ {\"t\": 0.1}                                        │");
    size_t len;
    const char *raw = render_model_block_text(rm, t3, &len);
    CHECK(len == 10 && !memcmp(raw, "{\"t\": 0.1}", 10));
    raw = render_model_tool_result(rm, t, &len);
    CHECK(len == strlen(numbered(10)) && !memcmp(raw, numbered(10), len));
    render_model_free(rm);
}

static render_model *transcript(int width, size_t chunk)
{
    render_model *rm = render_model_new();
    render_model_set_size(rm, width, 30);
    static const char *answer =
        "# Plan\n\nSome **bold** words, `code`, 中文字 and 👨‍👩‍👧 🇫🇷 in a sentence long "
        "enough to wrap.\n\n- one\n- two with a longer text that wraps\n\n| a | 東京 |\n|---|---|\n"
        "| 1 | 中文 |\n\n```c\nint x = 1; /* a comment that is rather long */\n```\n> done\n";
    for (int turn = 0; turn < 3; turn++) {
        add(rm, RM_USER, "question with\ta tab and 中文");
        int r = add(rm, RM_REASONING, "");
        const char *reason = "thinking about it\nstep one\nstep two\n";
        for (size_t i = 0; i < strlen(reason); i += chunk)
            render_model_append_text(rm, r, reason + i,
                                     chunk < strlen(reason) - i ? chunk : strlen(reason) - i, NULL);
        render_model_finish(rm, r);
        int a = add(rm, RM_ANSWER, "");
        for (size_t i = 0; i < strlen(answer); i += chunk)
            render_model_append_text(rm, a, answer + i,
                                     chunk < strlen(answer) - i ? chunk : strlen(answer) - i, NULL);
        render_model_finish(rm, a);
        int t = render_model_append_tool(rm, "now", "now:0", NULL);
        const char *args = "{\"tz\": \"UTC\"}";
        for (size_t i = 0; i < strlen(args); i += chunk)
            render_model_append_text(rm, t, args + i,
                                     chunk < strlen(args) - i ? chunk : strlen(args) - i, NULL);
        render_model_set_tool_result(rm, t, numbered(5), strlen(numbered(5)), NULL);
    }
    return rm;
}

static void check_same_rows(render_model *a, render_model *b, int width, const char *what)
{
    int na = all_rows(a, width, rows_a), nb = all_rows(b, width, rows_b);
    int same = na == nb;
    for (int i = 0; same && i < na; i++)
        same = !strcmp(rows_a[i], rows_b[i]);
    CHECK_MSG(same, "%s at width %d: %d rows vs %d", what, width, na, nb);
    for (int i = 0; !same && i < na && i < nb; i++)
        if (strcmp(rows_a[i], rows_b[i]))
            fprintf(stderr, "  row %d: \"%s\" vs \"%s\"\n", i, rows_a[i], rows_b[i]);
}

static void test_resize_and_stream_equal_fresh(void)
{
    render_model *streamed = transcript(80, 3);
    render_model *whole = transcript(80, 100000);
    check_same_rows(streamed, whole, 80, "streamed vs whole");
    /* resize to 200 and to 60 (after a layout at each) vs models laid out only there */
    all_rows(streamed, 200, rows_a);
    render_model *fresh60 = transcript(60, 100000);
    check_same_rows(streamed, fresh60, 60, "80 -> 200 -> 60 vs fresh");
    render_model *fresh200 = transcript(200, 100000);
    check_same_rows(streamed, fresh200, 200, "-> 200 vs fresh");
    render_model_toggle_all_reasoning(streamed);
    render_model_toggle_all_reasoning(fresh60);
    check_same_rows(streamed, fresh60, 60, "expanded after resizes vs fresh");
    int rows60 = all_rows(fresh60, 60, rows_a), rows200 = all_rows(fresh200, 200, rows_b);
    CHECK(rows60 > rows200);
    render_model_free(streamed);
    render_model_free(whole);
    render_model_free(fresh60);
    render_model_free(fresh200);
}

static void test_scroll_follow(void)
{
    render_model *rm = render_model_new();
    render_model_set_size(rm, 40, 10);
    for (int i = 0; i < 30; i++) {
        char s[32];
        snprintf(s, sizeof s, "note %d", i);
        add(rm, RM_NOTE, s);
    }
    static char scr[16][ROW_BYTES], before[16][ROW_BYTES];
    const rm_frame *f = screen(rm, scr);
    CHECK(f->following);
    CHECK_STR(scr[9], "       note 29");
    CHECK_STR(scr[0], "       note 20");
    int a = add(rm, RM_ANSWER, "streaming");
    f = screen(rm, scr);
    CHECK_STR(scr[9], "  kimi streaming"); /* follows at the bottom */
    CHECK(!f->new_below);

    CHECK_INT(render_model_rows_below(rm), 0);
    render_model_scroll(rm, -3);
    f = screen(rm, scr);
    CHECK(!f->following);
    CHECK_STR(scr[9], "       note 27");
    CHECK_INT(render_model_rows_below(rm), 3);      /* note 28, note 29, the answer */
    memcpy(before, scr, sizeof scr);
    text(rm, a, " more\nand a new line");
    add(rm, RM_NOTE, "another");
    f = screen(rm, scr);
    CHECK(!f->following);
    CHECK(f->new_below);
    CHECK(!memcmp(before, scr, sizeof scr)); /* stays put */
    CHECK(!f->any_changed);

    render_model_scroll_page(rm, -1); /* a page keeps one row of context */
    f = screen(rm, scr);
    CHECK_STR(scr[9], "       note 18");
    render_model_scroll(rm, -100);
    f = screen(rm, scr);
    CHECK_STR(scr[0], "       note 0");
    CHECK_INT(render_model_rows_below(rm), render_model_total_rows(rm) - 10);
    render_model_scroll(rm, 5);
    f = screen(rm, scr);
    CHECK_STR(scr[0], "       note 5");
    render_model_scroll(rm, 1000); /* past the end: at the bottom, following again */
    f = screen(rm, scr);
    CHECK(f->following);
    CHECK_INT(render_model_rows_below(rm), 0);
    CHECK(!f->new_below);
    CHECK_STR(scr[9], "       another");
    text(rm, a, "!");
    f = screen(rm, scr);
    CHECK_STR(scr[8], "       and a new line!");

    render_model_scroll_to_top(rm);
    f = screen(rm, scr);
    CHECK_STR(scr[0], "       note 0");
    render_model_scroll_to_bottom(rm);
    f = screen(rm, scr);
    CHECK(f->following);
    CHECK_STR(scr[9], "       another");

    /* a short transcript is always at the bottom */
    render_model_truncate(rm, 2);
    CHECK_INT(render_model_block_count(rm), 2);
    render_model_scroll(rm, -5);
    f = screen(rm, scr);
    CHECK(f->following);
    CHECK_STR(scr[0], "       note 0");
    CHECK_INT(f->rows[2].block, -1);
    render_model_free(rm);
}

static void test_dirty_rows(void)
{
    render_model *rm = render_model_new();
    render_model_set_size(rm, 40, 8);
    for (int i = 0; i < 3; i++)
        add(rm, RM_NOTE, "x");
    int a = add(rm, RM_ANSWER, "hello");
    const rm_frame *f = render_model_frame(rm);
    CHECK(f->any_changed);
    CHECK(!render_model_dirty(rm));
    f = render_model_frame(rm);
    CHECK(!f->any_changed);
    text(rm, a, " world");
    CHECK(render_model_dirty(rm));
    f = render_model_frame(rm);
    int changed = 0;
    for (int i = 0; i < f->n_rows; i++)
        changed += f->rows[i].changed;
    CHECK_INT(changed, 1);
    CHECK(f->rows[3].changed);
    text(rm, a, "\nsecond line");
    f = render_model_frame(rm);
    changed = 0;
    for (int i = 0; i < f->n_rows; i++)
        changed += f->rows[i].changed;
    CHECK_INT(changed, 1);
    CHECK(f->rows[4].changed);
    render_model_repaint(rm); /* e.g. after a theme change: every row once */
    f = render_model_frame(rm);
    changed = 0;
    for (int i = 0; i < f->n_rows; i++)
        changed += f->rows[i].changed;
    CHECK_INT(changed, 8);
    f = render_model_frame(rm);
    CHECK(!f->any_changed);
    render_model_free(rm);
}

static void test_jump_and_focus(void)
{
    render_model *rm = render_model_new();
    render_model_set_size(rm, 40, 5);
    int users[3];
    for (int i = 0; i < 3; i++) {
        char s[32];
        snprintf(s, sizeof s, "question %d", i);
        users[i] = add(rm, RM_USER, s);
        int a = add(rm, RM_ANSWER, numbered(8));
        render_model_finish(rm, a);
    }
    static char scr[8][ROW_BYTES];
    CHECK_INT(render_model_jump_user(rm, -1), users[2]);
    screen(rm, scr);
    CHECK_STR(scr[0], "  you  question 2");
    CHECK_INT(render_model_jump_user(rm, -1), users[1]);
    CHECK_INT(render_model_jump_user(rm, -1), users[0]);
    screen(rm, scr);
    CHECK_STR(scr[0], "  you  question 0");
    CHECK_INT(render_model_jump_user(rm, -1), -1);
    CHECK_INT(render_model_jump_user(rm, 1), users[1]);
    screen(rm, scr);
    CHECK_STR(scr[0], "  you  question 1");

    render_model_scroll_to_bottom(rm);
    CHECK_INT(render_model_focus_move(rm, -1), 5); /* the lowest block on the screen */
    CHECK_INT(render_model_focus_move(rm, -1), 4);
    const rm_frame *f = screen(rm, scr);
    CHECK_STR(scr[0], "▌ you  question 2");        /* scrolled into view, marked */
    CHECK_INT(f->rows[0].spans[0].element, THEME_SELECTION);
    CHECK_INT(render_model_focus_move(rm, -1), 3);
    CHECK_INT(render_model_focused(rm), 3);
    screen(rm, scr);
    CHECK_STR(scr[0], "▌ kimi line 1");

    /* the block at the top of the view folds under it: the view stays on that block */
    int r = add(rm, RM_REASONING, numbered(8));
    render_model_finish(rm, r);
    add(rm, RM_ANSWER, numbered(8));
    render_model_toggle_fold(rm, r);
    render_model_focus(rm, -1);
    render_model_scroll_to_bottom(rm);
    render_model_scroll(rm, -8); /* 3 rows of the answer, then 5 of the reasoning */
    screen(rm, scr);
    CHECK_STR(scr[0], "       line 4");
    render_model_toggle_fold(rm, r);
    screen(rm, scr);
    CHECK_STR(scr[0], "       ▸ thought");
    CHECK_STR(scr[1], "       line 1");
    render_model_focus(rm, -1);
    f = screen(rm, scr);
    CHECK(strncmp(scr[0], "▌", 3) != 0);
    render_model_free(rm);
}

/* Random operations (appends, streams, folds, scrolls, resizes, focus, truncation): every frame
 * has blocks in order with empty rows only at the end, and spans in column order inside the
 * width (the sanitizer build watches memory). */
static void test_random_operations(void)
{
    static const char *pieces[] = {"word ", "中文 ", "**b** ", "\n", "\n\n", "- item ", "| a | b |\n",
                                   "|---|---|\n", "```\n", "\t", "\x1b", "👨‍👩‍👧 ", "> q "};
    unsigned seed = 99;
    render_model *rm = render_model_new();
    int ok = 1;
    for (int step = 0; step < 3000; step++) {
        seed = seed * 1103515245u + 12345u;
        unsigned op = (seed >> 16) % 20;
        int n = render_model_block_count(rm);
        const char *p = pieces[(seed >> 8) % (sizeof pieces / sizeof pieces[0])];
        if (op < 3 || !n) {
            if ((seed >> 4) % 5 == 0)
                render_model_append_tool(rm, "tool", "id:1", NULL);
            else
                add(rm, (rm_block_kind)((seed >> 4) % 6), p);
        } else if (op < 12) {
            text(rm, n - 1, p);
        } else if (op == 12) {
            render_model_toggle_fold(rm, (int)((seed >> 3) % (unsigned)n));
        } else if (op == 13) {
            render_model_scroll(rm, (int)((seed >> 3) % 41) - 20);
        } else if (op == 14) {
            render_model_set_size(rm, 30 + (int)((seed >> 3) % 150), 1 + (int)((seed >> 9) % 60));
        } else if (op == 15) {
            render_model_toggle_all_reasoning(rm);
        } else if (op == 16) {
            render_model_focus_move(rm, (seed >> 3) % 2 ? 1 : -1);
        } else if (op == 17) {
            render_model_jump_user(rm, (seed >> 3) % 2 ? 1 : -1);
        } else if (op == 18 && (seed >> 3) % 8 == 0) {
            render_model_truncate(rm, n / 2);
        } else {
            render_model_finish(rm, n - 1);
            render_model_set_tool_result(rm, n - 1, p, strlen(p), NULL);
        }
        const rm_frame *f = render_model_frame(rm);
        int prev_block = -1, seen_empty = 0;
        for (int i = 0; i < f->n_rows; i++) {
            const rm_row *row = &f->rows[i];
            if (row->block < 0) {
                seen_empty = 1;
                continue;
            }
            ok &= !seen_empty && row->block >= prev_block;
            prev_block = row->block;
            int col = 0;
            for (int k = 0; k < row->n_spans; k++) {
                ok &= row->spans[k].col >= col;
                col = row->spans[k].col + row->spans[k].width;
            }
            ok &= col <= 180;
        }
        if (!ok) {
            fprintf(stderr, "random operations: bad frame after step %d (op %u)\n", step, op);
            break;
        }
    }
    CHECK(ok);
    render_model_free(rm);
}

/* Narrow transcripts (issue 21): the reasoning header drops whole fields, never part of one; a
 * tool box's "… +N lines" stays inside its borders; the focus marker has a column of its own
 * and never covers a box's corner or border. Every width from 8 to 40. */
static void test_narrow_widths(void)
{
    render_model *rm = render_model_new();
    int r = add(rm, RM_REASONING, "The user wants the time.");
    render_model_set_reasoning_stats(rm, r, 35, 0.2);
    render_model_finish(rm, r);
    int t = render_model_append_tool(rm, "now", "functions.now:0", NULL);
    text(rm, t, "{}");
    render_model_set_tool_state(rm, t, RM_TOOL_DONE, NULL, 0.1, NULL);
    render_model_set_tool_result(rm, t, numbered(12), strlen(numbered(12)), NULL);
    render_model_finish(rm, t);
    static const char *const headers[] = {"▸ thought", "▸ thought for 0.2 s", "▸ thought for 0.2 s · 35 tokens"};
    for (int focused = 0; focused < 2; focused++) {
        render_model_focus(rm, focused ? t : -1);
        for (int w = 8; w <= 40; w++) {
            int n = all_rows(rm, w, rows_a);
            /* the header after the gutter (and "kimi " from RM_GUTTER_MIN on) */
            const char *h = rows_a[0] + strspn(rows_a[0], " ");
            if (!strncmp(h, "kimi ", 5))
                h += 5;
            int whole = 0;
            for (int k = 0; k < 3; k++)
                whole |= !strcmp(h, headers[k]);
            if (!whole && w >= 12)
                fprintf(stderr, "width %d: header '%s' is cut mid-field\n", w, rows_a[0]);
            CHECK(whole || w < 12);
            int hint_row = 0, corners = 0;
            for (int i = 1; i < n; i++) {
                const char *row = rows_a[i];
                if (strstr(row, "…")) {
                    hint_row = 1;
                    size_t len = strlen(row);
                    int fits = len >= 3 && !strcmp(row + len - 3, "│") && text_width(row, len) == w;
                    if (!fits)
                        fprintf(stderr, "width %d: '%s' overflows the box\n", w, row);
                    CHECK(fits);
                }
                /* nothing painted over anything else: a row is never wider than the view */
                int within = text_width(row, strlen(row)) <= w;
                if (!within)
                    fprintf(stderr, "width %d: '%s' is wider (spans overlap)\n", w, row);
                CHECK(within);
                corners += strstr(row, "┌") != NULL;
                corners += strstr(row, "└") != NULL;
                /* the marker stands left of the box, in the gutter */
                if (focused && strstr(row, "▌")) {
                    int marker_first = !strncmp(row, "▌", strlen("▌"));
                    if (!marker_first)
                        fprintf(stderr, "width %d: the marker is not in column 0: '%s'\n", w, row);
                    CHECK(marker_first);
                }
            }
            CHECK(hint_row);
            if (corners != 2)
                fprintf(stderr, "width %d, focus %d: a box corner is covered\n", w, focused);
            CHECK_INT(corners, 2);
        }
    }
    render_model_free(rm);
}

/* Row y of the frame as text with search marks: [match], {current}. */
static const char *marked(const rm_frame *f, int y)
{
    static char buf[ROW_BYTES];
    size_t n = 0;
    int col = 0;
    const rm_row *row = &f->rows[y];
    for (int i = 0; i < row->n_spans; i++) {
        const rm_span *s = &row->spans[i];
        for (; col < s->col; col++)
            n += (size_t)snprintf(buf + n, sizeof buf - n, " ");
        int e = s->element;
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%.*s%s", e == THEME_SEARCH_MATCH ? "[" : e == THEME_SEARCH_CURRENT ? "{" : "",
                              (int)s->len, s->s, e == THEME_SEARCH_MATCH ? "]" : e == THEME_SEARCH_CURRENT ? "}" : "");
        col += s->width;
    }
    return buf;
}

/* The span of row y that holds column col. */
static const rm_span *span_at(const rm_frame *f, int y, int col)
{
    for (int i = 0; i < f->rows[y].n_spans; i++) {
        const rm_span *s = &f->rows[y].spans[i];
        if (col >= s->col && col < s->col + s->width)
            return s;
    }
    return NULL;
}

static void search_on(render_model *rm, const char *q, int text, int ordinal)
{
    CHECK_INT(render_model_set_search(rm, q, strlen(q), text, ordinal, NULL), 0);
}

static void test_search_highlight(void)
{
    render_model *rm = render_model_new();
    render_model_set_size(rm, 30, 40); /* 23 columns of text */
    int u = add(rm, RM_USER, "one kiwi and two three KIWI");
    const rm_frame *f = render_model_frame(rm);
    CHECK_STR(marked(f, 0), "  you  one kiwi and two three");
    search_on(rm, "kiwi", -1, 0);
    f = render_model_frame(rm);
    /* smart case: lower case matches both; the wrap puts the second on the next row */
    CHECK_STR(marked(f, 0), "  you  one [kiwi] and two three");
    CHECK_STR(marked(f, 1), "       [KIWI]");
    CHECK(f->rows[0].changed && f->rows[1].changed);
    search_on(rm, "KIWI", 2 * u, 0);
    f = render_model_frame(rm);
    CHECK_STR(marked(f, 0), "  you  one kiwi and two three");
    CHECK_STR(marked(f, 1), "       {KIWI}");
    /* a match across the soft wrap, at the dropped space: both parts, current on both */
    search_on(rm, "three kiwi", 2 * u, 0);
    f = render_model_frame(rm);
    CHECK_STR(marked(f, 0), "  you  one kiwi and two {three}");
    CHECK_STR(marked(f, 1), "       {KIWI}");
    search_on(rm, "three kiwi", -1, 0);
    f = render_model_frame(rm);
    CHECK_STR(marked(f, 0), "  you  one kiwi and two [three]");
    CHECK_STR(marked(f, 1), "       [KIWI]");
    /* ended: no marks, the rows repainted */
    search_on(rm, "", -1, 0);
    f = render_model_frame(rm);
    CHECK_STR(marked(f, 0), "  you  one kiwi and two three");
    CHECK(f->rows[0].changed && f->rows[1].changed);
    /* unchanged: nothing to paint */
    search_on(rm, "", -1, 0);
    CHECK(!render_model_dirty(rm));
    render_model_truncate(rm, 0);

    /* a word cut over two rows (longer than a row) */
    add(rm, RM_USER, "abcdefghijklmnopqrstuvwxyz");
    search_on(rm, "uvwxy", -1, 0);
    f = render_model_frame(rm);
    CHECK_STR(marked(f, 0), "  you  abcdefghijklmnopqrst[uvw]");
    CHECK_STR(marked(f, 1), "       [xy]z");
    render_model_truncate(rm, 0);

    /* columns, not bytes: wide characters before a match, a combining mark kept with its letter,
       an emoji inside */
    u = add(rm, RM_USER, "中文 kiwi cafe\xcc\x81 x😀y");
    search_on(rm, "kiwi", -1, 0);
    f = render_model_frame(rm);
    const rm_span *s = span_at(f, 0, RM_GUTTER + 5);
    CHECK(s && s->element == THEME_SEARCH_MATCH && s->col == RM_GUTTER + 5 && s->width == 4);
    search_on(rm, "cafe", -1, 0);
    f = render_model_frame(rm);
    CHECK_STR(marked(f, 0), "  you  中文 kiwi [cafe\xcc\x81] x😀y");
    s = span_at(f, 0, RM_GUTTER + 10);
    CHECK(s && s->element == THEME_SEARCH_MATCH && s->width == 4);
    search_on(rm, "😀y", -1, 0);
    f = render_model_frame(rm);
    CHECK_STR(marked(f, 0), "  you  中文 kiwi cafe\xcc\x81 x[😀y]");
    s = span_at(f, 0, RM_GUTTER + 16);
    CHECK(s && s->element == THEME_SEARCH_MATCH && s->col == RM_GUTTER + 16 && s->width == 3);
    render_model_truncate(rm, 0);

    /* inside markdown: bold keeps its attribute; a quote's bar on the wrapped row is no text */
    int a = add(rm, RM_ANSWER, "a **kiwi fruit** b\n\n> one two three four kiwi fruit");
    render_model_finish(rm, a);
    search_on(rm, "kiwi fruit", 2 * a, 0);
    f = render_model_frame(rm);
    CHECK_STR(marked(f, 0), "  kimi a {kiwi fruit} b");
    s = span_at(f, 0, RM_GUTTER + 2);
    CHECK(s && s->element == THEME_SEARCH_CURRENT && (s->attrs & THEME_ATTR_BOLD));
    CHECK_STR(marked(f, 2), "       │ one two three four");
    CHECK_STR(marked(f, 3), "       │ [kiwi fruit]");
    search_on(rm, "four kiwi", 2 * a, 0);
    f = render_model_frame(rm);
    CHECK_STR(marked(f, 2), "       │ one two three {four}");
    CHECK_STR(marked(f, 3), "       │ {kiwi} fruit");
    render_model_truncate(rm, 0);

    /* a folded tool result's visible rows, and the arguments */
    int t = render_model_append_tool(rm, "read", "functions.read:0", NULL);
    text(rm, t, "{\"path\": \"kiwi.txt\"}");
    const char *result = "x\nkiwi 2\n3\n4\nkiwi 5\n";
    render_model_set_tool_result(rm, t, result, strlen(result), NULL);
    render_model_finish(rm, t);
    render_model_set_size(rm, 40, 40);
    search_on(rm, "kiwi", 2 * t + 1, 0);
    f = render_model_frame(rm);
    CHECK(render_model_is_folded(rm, t));
    CHECK(strstr(marked(f, 1), "[kiwi].txt") != NULL);
    CHECK(strstr(marked(f, 3), "{kiwi} 2") != NULL);
    search_on(rm, "kiwi", 2 * t + 1, 1);
    render_model_toggle_fold(rm, t);
    f = render_model_frame(rm);
    CHECK(strstr(marked(f, 3), "[kiwi] 2") != NULL);
    CHECK(strstr(marked(f, 6), "{kiwi} 5") != NULL);
    render_model_free(rm);
}

/* Streamed with the search on, every row's marks (and the current match, the 3rd) equal those
 * of a fresh model holding the same text: the cached marks and the counted lines follow the
 * stream. */
static void test_search_highlight_stream(void)
{
    static const char *pieces[] = {"kiwi ", "fruit ", "and ", "ki", "wi\n", "more ", "text ", "Kiwi ",
                                   "fruit\n\n", "> quoted kiwi ", "fruit ", "end\n", "kiwi"};
    render_model *live = render_model_new();
    render_model_set_size(live, 30, 60);
    add(live, RM_USER, "kiwi fruit please");
    int a = add(live, RM_ANSWER, "");
    search_on(live, "kiwi fruit", 2 * a, 2);
    strbuf sofar = {0};
    static char want[60][ROW_BYTES];
    int same = 1;
    for (int rep = 0; rep < 4; rep++)
        for (size_t i = 0; i < sizeof pieces / sizeof *pieces; i++) {
            text(live, a, pieces[i]);
            strbuf_str(&sofar, pieces[i]);
            render_model *fresh = render_model_new();
            render_model_set_size(fresh, 30, 60);
            add(fresh, RM_USER, "kiwi fruit please");
            int fa = add(fresh, RM_ANSWER, sofar.data);
            search_on(fresh, "kiwi fruit", 2 * fa, 2);
            const rm_frame *f = render_model_frame(fresh);
            for (int y = 0; y < 60; y++)
                snprintf(want[y], ROW_BYTES, "%s", marked(f, y));
            f = render_model_frame(live);
            for (int y = 0; y < 60; y++)
                if (strcmp(want[y], marked(f, y))) {
                    if (same)
                        fprintf(stderr, "after %zu bytes, row %d: '%s', fresh '%s'\n", sofar.len, y, marked(f, y), want[y]);
                    same = 0;
                }
            render_model_free(fresh);
        }
    CHECK(same);
    const rm_frame *f = render_model_frame(live);
    int current = 0;
    for (int y = 0; y < 60; y++)
        current += strstr(marked(f, y), "{") != NULL;
    CHECK(current >= 1);
    free(sofar.data);
    render_model_free(live);
}

int main(void)
{
    test_rows_and_labels();
    test_reasoning_folds();
    test_tool_box();
    test_resize_and_stream_equal_fresh();
    test_scroll_follow();
    test_dirty_rows();
    test_jump_and_focus();
    test_random_operations();
    test_narrow_widths();
    test_search_highlight();
    test_search_highlight_stream();
    return check_finish();
}
