/* tui_layout: the full-screen view's rows and the texts of its bars. */
#include "ui/tui_layout.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/monotonic.h"
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

void tui_status_text(tui *t, char *buf, size_t cap)
{
    if (!t->a) {
        snprintf(buf, cap, " kimi-chat · %s", t->progress[0] ? t->progress : "starting");
        return;
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
    /* the full line, then shorter ones until it fits (room for "↓ new" kept): "thinking" as
       "think", then without the backend, then without the temperature, then without thinking
       and the save state, then without the speed: a narrow terminal loses whole fields, not
       the end of one */
    int room = t->cols - (t->new_below ? 8 : 0);
    for (int level = 0; level < 6; level++) {
        buf[0] = 0;
        append(buf, cap, " %s │ %s", state_word(t), g->model);
        if (level < 2)
            append(buf, cap, " · %s", g->backend);
        append(buf, cap, " · ctx %s/%s%s", u, l, level < 5 ? speed : "");
        if (level < 4)
            append(buf, cap, " · %s %s", level ? "think" : "thinking", s->settings.thinking ? "on" : "off");
        if (level < 3)
            append(buf, cap, " · T %g", (double)s->settings.temperature);
        if (t->save_state[0] && level < 4)
            append(buf, cap, " · %s", t->save_state);
        if (text_width(buf, strlen(buf)) <= room)
            break;
    }
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
    } else if (input_searching(t->in)) {
        snprintf(buf, cap, " %s history search: %s ", input_search_failed(t->in) ? "failing" : "reverse",
                 input_search_query(t->in));
        *element = THEME_STATUS_ACCENT;
    } else if (t->flash[0] && monotonic_seconds() < t->flash_until) {
        snprintf(buf, cap, " %s ", t->flash);
        *element = THEME_NOTE;
    } else if (t->progress[0]) {
        snprintf(buf, cap, " %s ", t->progress);
        *element = THEME_NOTE;
    } else if (t->focus) {
        snprintf(buf, cap, " transcript: ↑↓ select · Enter fold · y copy · Tab back ");
        *element = THEME_STATUS_ACCENT;
    }
}
