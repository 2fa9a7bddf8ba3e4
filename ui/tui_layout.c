/* tui_layout: the full-screen view's rows and the texts of its bars. */
#include "ui/tui_layout.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/monotonic.h"
#include "engine/text/utf8.h"
#include "ui/text_width.h"

void tui_layout(tui *t)
{
    int max_input = t->rows / 3 > 1 ? t->rows / 3 : 1;
    int cr, cc;
    int n = input_layout(t->in, t->cols, NULL, 0, &cr, &cc);
    int h = n < max_input ? n : max_input;
    if (t->rows - h - 2 < 1)
        h = t->rows - 3 > 1 ? t->rows - 3 : 1;
    if (cr < t->input_top)
        t->input_top = cr;
    if (cr >= t->input_top + h)
        t->input_top = cr - h + 1;
    if (t->input_top > n - h)
        t->input_top = n - h > 0 ? n - h : 0;
    int trans = t->rows - h - 2;
    if (trans < 1)
        trans = 1;
    if (h != t->input_h || trans != t->trans_h) {
        t->input_h = h;
        t->trans_h = trans;
        render_model_set_size(t->rm, t->cols, trans);
        int *rb = realloc(t->row_block, sizeof *rb * (size_t)trans);
        if (rb) {
            t->row_block = rb;
            for (int i = 0; i < trans; i++)
                rb[i] = -1;
        }
        t->force = 1;
    }
}

/* printf at the end of buf (cut at cap) */
static void append(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t n = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

/* "3.2k" */
static void count_text(char *buf, size_t cap, long n)
{
    if (n < 1000)
        snprintf(buf, cap, "%ld", n);
    else if (n < 100000)
        snprintf(buf, cap, "%.1fk", n / 1000.0);
    else
        snprintf(buf, cap, "%ldk", n / 1000);
}

static const char *state_word(const tui *t)
{
    switch (t->state) {
    case GEN_IDLE: return "ready";
    case GEN_LOADING: return "loading";
    case GEN_PREFILL: return "reading the prompt";
    case GEN_WAITING: return "waiting";
    case GEN_THINKING: return "thinking…";
    case GEN_ANSWERING: return "answering…";
    case GEN_CALLING: return "writing a tool call";
    case GEN_APPROVAL: return "approve? y/a/n";
    case GEN_TOOL: return "running a tool";
    case GEN_STOPPING: return "stopping";
    }
    return "";
}

int tui_status_text(tui *t, char *buf, size_t cap, int room)
{
    if (!t->a) {
        snprintf(buf, cap, " kimi-chat · %s", t->progress[0] ? t->progress : "starting");
        if (text_width(buf, strlen(buf)) > room)
            snprintf(buf, cap, " %s", t->progress[0] ? t->progress : "starting");
        return text_width(buf, strlen(buf)) <= room;
    }
    const generator *g = app_generator(t->a);
    const session *s = app_session(t->a);
    long used = app_context_used(t->a);
    if (app_busy(t->a))
        used += t->gen_tokens;
    char u[32], l[32], speed[32] = "";
    count_text(u, sizeof u, used);
    count_text(l, sizeof l, g->context_limit);
    double tps = t->tok_s;
    int decoding = t->state == GEN_THINKING || t->state == GEN_ANSWERING || t->state == GEN_CALLING;
    if (decoding && t->first_token && monotonic_seconds() - t->first_token > 0.2)
        tps = t->gen_tokens / (monotonic_seconds() - t->first_token);
    if (tps > 0)
        snprintf(speed, sizeof speed, tps < 100 ? " · %.1f tok/s" : " · %.0f tok/s", tps);
    /* the full line, then shorter ones until it fits: "thinking" as "think", then without the
       backend, then without the temperature, the session's name and the F1 hint, then
       without thinking and the save state, then
       without the speed, the model, the context's limit, the context: a narrow terminal loses
       whole fields, never the end of one */
    /* the session's name: its file in the sessions folder, without ".json" */
    char name[64] = "";
    if (s->path) {
        const char *base = strrchr(s->path, '/');
        base = base ? base + 1 : s->path;
        size_t n = strlen(base);
        if (n > 5 && !strcmp(base + n - 5, ".json"))
            n -= 5;
        /* the file name is the user's, or a --load argument's: one line, no control
           characters (a \b or \n would move the cursor), cut at a character */
        utf8_one_line(base, n, name, 52);
    }
    for (int level = 0; level < 9; level++) {
        buf[0] = 0;
        append(buf, cap, " %s", state_word(t));
        const char *sep = " │ ";
        if (level < 6) {
            append(buf, cap, "%s%s", sep, g->model);
            sep = " · ";
        }
        if (level < 2)
            append(buf, cap, " · %s", g->backend);
        if (level < 7) {
            append(buf, cap, "%sctx %s/%s%s", sep, u, l, level < 5 ? speed : "");
            sep = " · ";
        } else if (level < 8) {
            append(buf, cap, "%sctx %s", sep, u);
        }
        if (level < 4)
            append(buf, cap, " · %s %s", level ? "think" : "thinking", s->settings.thinking ? "on" : "off");
        if (level < 3)
            append(buf, cap, " · T %g", (double)s->settings.temperature);
        if (t->save_state[0] && level < 4)
            append(buf, cap, " · %s", t->save_state);
        if (name[0] && level < 3)
            append(buf, cap, " · %s", name);
        /* where to start, while nothing is typed in a conversation not yet begun (then the
           session's name takes its place) */
        if (input_is_empty(t->in) && used == 0 && level < 3)
            append(buf, cap, " · F1 keys · /help commands");
        if (text_width(buf, strlen(buf)) <= room)
            return 1;
    }
    return 0;
}


void tui_separator_text(tui *t, char *buf, size_t cap, int *element)
{
    *element = THEME_SEPARATOR;
    buf[0] = 0;
    if (t->approval >= 0) {
        if (t->flash[0] && monotonic_seconds() < t->flash_until)
            snprintf(buf, cap, " %s ", t->flash);
        else if (t->approval_always)
            snprintf(buf, cap, " a again to allow %s for this session · [y] once · [n] deny ", t->approval_name);
        else
            snprintf(buf, cap, " run %s? [y] once · [a] always for %s · [n] deny ", t->approval_name,
                     t->approval_name);
        *element = THEME_TOOL_WAITING;
    } else if (t->search_mode) {
        const search_result *r = &t->search_hits;
        char where[64];
        if (!t->search_query.len)
            snprintf(where, sizeof where, "type to search; case matters with a capital");
        else if (!r->n)
            snprintf(where, sizeof where, "no match");
        else
            snprintf(where, sizeof where, "match %d/%d", t->search_match + 1, r->n);
        snprintf(buf, cap, " search: %.*s · %s · %s ", (int)t->search_query.len,
                 t->search_query.data ? t->search_query.data : "", where,
                 t->search_mode == SEARCH_TYPING ? "Enter, then n/N next/previous · Esc ends"
                                                 : "n/N next/previous · / edits · Esc ends");
        *element = r->n || !t->search_query.len ? THEME_STATUS_ACCENT : THEME_ERROR;
    } else if (input_searching(t->in)) {
        snprintf(buf, cap, " %s history search: %s ", input_search_failed(t->in) ? "failing" : "reverse",
                 input_search_query(t->in));
        *element = THEME_STATUS_ACCENT;
    } else if (t->flash[0] && monotonic_seconds() < t->flash_until) {
        snprintf(buf, cap, " %s ", t->flash);
        *element = THEME_NOTE;
    } else if (t->a && app_queue_length(t->a)) {
        /* the newest queued message's first line, dimmed: Esc takes it back */
        int n = app_queue_length(t->a);
        size_t len;
        const char *text = app_queued(t->a, n - 1, &len);
        const char *nl = memchr(text, '\n', len);
        size_t shown = nl ? (size_t)(nl - text) : len;
        if (shown > 60) {
            shown = 60;
            while (shown && ((unsigned char)text[shown] & 0xC0) == 0x80)
                shown--;
        }
        char count[32] = "";
        if (n > 1)
            snprintf(count, sizeof count, " (%d)", n);
        snprintf(buf, cap, " queued%s: %.*s%s · sent when the answer ends · Esc takes it back ", count, (int)shown, text,
                 shown < len ? "…" : "");
        *element = THEME_FOLD_HINT;
    } else if (t->progress[0]) {
        snprintf(buf, cap, " %s ", t->progress);
        *element = THEME_NOTE;
    } else if (t->focus) {
        snprintf(buf, cap, " transcript: ↑↓ select · Enter fold · y copy · e rewind · / search · Tab back ");
        *element = THEME_STATUS_ACCENT;
    } else if (t->a && !app_busy(t->a)) {
        /* scrolled up and idle: how far the end is (while an answer streams, "↓ new" says so) */
        long below = render_model_rows_below(t->rm);
        if (below > 0) {
            /* the whole sentence, then without the key, then the arrow and the count alone: a
               narrow window drops whole parts */
            const char *lines = below == 1 ? "line" : "lines";
            snprintf(buf, cap, " ↑ %ld %s above the end · Ctrl-End returns ", below, lines);
            if (text_width(buf, strlen(buf)) > t->cols - 2)
                snprintf(buf, cap, " ↑ %ld %s above the end ", below, lines);
            if (text_width(buf, strlen(buf)) > t->cols - 2)
                snprintf(buf, cap, " ↑ %ld ", below);
            *element = THEME_NOTE;
        }
    }
}
