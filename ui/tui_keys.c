/* tui_keys: the full-screen view's keys. */
#include "ui/tui_keys.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#include <term.h>

#include "app/chat/commands.h"
#include "app/chat/completion.h"
#include "app/chat/paths.h"
#include "engine/base/array.h"
#include "engine/base/monotonic.h"
#include "engine/text/utf8.h"
#include "ui/tui_paint.h"

static void copy_block(tui *t, int b)
{
    size_t len;
    const char *s = render_model_block_text(t->rm, b, &len);
    if (render_model_block_kind(t->rm, b) == RM_TOOL) {
        size_t rlen;
        const char *r = render_model_tool_result(t->rm, b, &rlen);
        if (rlen) {
            s = r;
            len = rlen;
        }
    }
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    strbuf out = {0};
    strbuf_str(&out, "\033]52;c;");
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)u[i] << 16 | (i + 1 < len ? (unsigned)u[i + 1] << 8 : 0) | (i + 2 < len ? u[i + 2] : 0);
        char q[4] = {b64[v >> 18 & 63], b64[v >> 12 & 63], i + 1 < len ? b64[v >> 6 & 63] : '=',
                     i + 2 < len ? b64[v & 63] : '='};
        strbuf_add(&out, q, 4);
    }
    strbuf_str(&out, "\a");
    if (out.data) {
        ssize_t ignored = write(STDOUT_FILENO, out.data, out.len);
        (void)ignored;
        char msg[96];
        snprintf(msg, sizeof msg, "copied %zu bytes to the clipboard (OSC 52)", len);
        tui_hint(t, msg);
    }
    free(out.data);
}

/* A paste of at least PASTE_FOLD_LINES lines or PASTE_FOLD_BYTES bytes shows in the input as
 * one marker and is sent whole. */
enum { PASTE_FOLD_LINES = 20, PASTE_FOLD_BYTES = 8192 };

/* The paste in t->paste_buf into the input: as typed when small, else as a marker (its text
 * kept as the input would hold it typed: line breaks as LF, controls dropped, so that Ctrl-O
 * shows it as it is sent). */
static void paste_into_input(tui *t)
{
    const char *s = t->paste_buf.data ? t->paste_buf.data : "";
    size_t n = t->paste_buf.len, n_lines = 1;
    for (size_t i = 0; i < n; i++)
        n_lines += s[i] == '\n' || (s[i] == '\r' && (i + 1 == n || s[i + 1] != '\n'));
    input *cleaned = NULL;
    if ((n_lines < PASTE_FOLD_LINES && n < PASTE_FOLD_BYTES) || !(cleaned = input_new()) ||
        array_reserve(&t->pastes, &t->pastes_cap, (size_t)t->n_pastes + 1, sizeof *t->pastes)) {
        input_free(cleaned);
        input_insert(t->in, s, n);
        return;
    }
    input_insert(cleaned, s, n);
    size_t len;
    const char *text = input_text(cleaned, &len);
    tui_paste p = {.text = strndup(text, len), .len = len};
    input_free(cleaned);
    if (!p.text) {
        input_insert(t->in, s, n);
        return;
    }
    snprintf(p.marker, sizeof p.marker, "[pasted %zu lines, %zu KB]", n_lines, (n + 1023) / 1024);
    for (int k = 2, same = 1; same; k++) {   /* two pastes of one size: "[pasted ... #2]" */
        same = 0;
        for (int i = 0; i < t->n_pastes; i++)
            same |= !strcmp(t->pastes[i].marker, p.marker);
        if (same)
            snprintf(p.marker, sizeof p.marker, "[pasted %zu lines, %zu KB #%d]", n_lines, (n + 1023) / 1024, k);
    }
    t->pastes[t->n_pastes++] = p;
    input_insert(t->in, p.marker, strlen(p.marker));
    tui_hint(t, "the paste is folded into its marker · Ctrl-O shows it whole");
}

/* The paste shown at text[i..len): its marker when folded, its whole text when Ctrl-O expanded
 * it; -1 when none. *n: its length there. */
static int paste_at(const tui *t, const char *text, size_t len, size_t i, int expanded, size_t *n)
{
    for (int k = 0; k < t->n_pastes; k++) {
        const tui_paste *p = &t->pastes[k];
        if (p->expanded != expanded)
            continue;
        const char *shown = expanded ? p->text : p->marker;
        size_t m = expanded ? p->len : strlen(p->marker);
        if (m && m <= len - i && text[i] == shown[0] && !memcmp(text + i, shown, m)) {
            *n = m;
            return k;
        }
    }
    return -1;
}

/* text with each paste in it (a marker, or a paste shown whole and unedited) replaced: by the
 * paste (*full, what is sent), and by the paste's first line and the marker (*brief, what the
 * history keeps). */
static int expand_pastes(const tui *t, const char *text, size_t len, strbuf *full, strbuf *brief)
{
    *full = *brief = (strbuf){0};
    for (size_t i = 0; i < len;) {
        size_t n;
        int hit = paste_at(t, text, len, i, 0, &n);
        if (hit < 0)
            hit = paste_at(t, text, len, i, 1, &n);
        if (hit < 0) {
            strbuf_add(full, text + i, 1);
            strbuf_add(brief, text + i, 1);
            i++;
            continue;
        }
        const tui_paste *p = &t->pastes[hit];
        const char *nl = memchr(p->text, '\n', p->len);
        strbuf_add(full, p->text, p->len);
        strbuf_add(brief, p->text, nl ? (size_t)(nl - p->text) : p->len);
        strbuf_add(brief, " ", 1);
        strbuf_add(brief, p->marker, strlen(p->marker));
        i += n;
    }
    return full->failed || brief->failed ? -1 : 0;
}

/* Ctrl-O: the folded pastes in the input shown whole, to read and edit (what is sent, as it is
 * sent); again, each one still as pasted folds back into its marker. A paste that was edited
 * stays as text: it is now the user's own (sent as it reads, kept whole in the history). */
static void pastes_toggle(tui *t)
{
    size_t len, cursor = input_cursor(t->in);
    const char *text = input_text(t->in, &len);
    int expand = 0;
    for (size_t i = 0, n; i < len && !expand; i++)
        expand = paste_at(t, text, len, i, 0, &n) >= 0;
    int any_expanded = 0;
    for (int k = 0; k < t->n_pastes; k++)
        any_expanded |= t->pastes[k].expanded;
    if (!expand && !any_expanded) {
        tui_hint(t, "Ctrl-O: no folded paste in the input (a paste of 20+ lines folds into a marker)");
        return;
    }
    char *seen = calloc((size_t)t->n_pastes + 1, 1);
    strbuf out = {0};
    size_t new_cursor = 0;
    int cursor_set = 0;
    for (size_t i = 0; i <= len;) {
        if (!cursor_set && i >= cursor) {
            new_cursor = out.len;
            cursor_set = 1;
        }
        if (i == len)
            break;
        size_t n;
        int hit = paste_at(t, text, len, i, !expand, &n);
        if (hit < 0) {
            strbuf_add(&out, text + i, 1);
            i++;
            continue;
        }
        const tui_paste *p = &t->pastes[hit];
        if (expand)
            strbuf_add(&out, p->text, p->len);
        else
            strbuf_add(&out, p->marker, strlen(p->marker));
        if (seen)
            seen[hit] = 1;
        i += n;
        if (!cursor_set && i > cursor) {    /* the cursor was inside it: after it now */
            new_cursor = out.len;
            cursor_set = 1;
        }
    }
    if (out.failed || !seen) {
        free(out.data);
        free(seen);
        tui_hint(t, "out of memory for the pasted text");
        return;
    }
    int kept = 0, edited = 0;
    for (int k = 0; k < t->n_pastes; k++) {
        tui_paste p = t->pastes[k];
        if (seen[k])
            p.expanded = expand;
        if (!expand && p.expanded) {    /* not found as pasted: edited, plain text now */
            free(p.text);
            edited++;
            continue;
        }
        t->pastes[kept++] = p;
    }
    t->n_pastes = kept;
    input_set_text(t->in, out.data ? out.data : "", out.len);
    input_set_cursor(t->in, new_cursor);
    char hint[160];
    if (expand)
        snprintf(hint, sizeof hint, "the paste is shown whole · Ctrl-O folds it again");
    else if (edited)
        snprintf(hint, sizeof hint, "folded; %d edited paste%s stay%s as text", edited, edited == 1 ? "" : "s",
                 edited == 1 ? "s" : "");
    else
        snprintf(hint, sizeof hint, "the paste is folded · Ctrl-O shows it whole");
    tui_hint(t, hint);
    free(out.data);
    free(seen);
}

/* ---- the /sessions picker ---- */

static void sessions_close(tui *t)
{
    session_picker_close(t->picker);
    free(t->picker);
    t->picker = NULL;
    touchwin(stdscr);
    t->force = 1;
}

static void sessions_open(tui *t)
{
    session_picker *p = calloc(1, sizeof *p);
    kimi_err err = {0};
    if (!p || session_picker_open(p, app_sessions_dir(t->a), &err)) {
        tui_hint(t, p ? err.msg : "out of memory for the session list");
        free(p);
        return;
    }
    t->picker = p;
    t->force = 1;
}

/* Load the picked session as /load NAME does (the same command, so the same checks, note and
 * session lock); while a turn runs the picker stays and says why not. */
static void sessions_load(tui *t)
{
    if (app_busy(t->a)) {
        session_picker_note(t->picker, "an answer is still coming: wait, or stop it first (Esc closes this)");
        return;
    }
    char *name = session_picker_name(t->picker);
    char *line = NULL;
    if (!name || asprintf(&line, "/load %s", name) < 0) {
        free(name);
        session_picker_note(t->picker, "out of memory");
        return;
    }
    free(name);
    sessions_close(t);
    kimi_err err = {0};
    t->new_conversation = 1;
    if (app_submit_line(t->a, line, strlen(line), &err) == 0)
        render_model_scroll_to_bottom(t->rm);
    t->new_conversation = 0;
    free(line);
}

static void sessions_key(tui *t, int key, int is_char, int alt)
{
    if (alt || (!is_char && key == KEY_MOUSE))
        return;
    switch (session_picker_key(t->picker, key, is_char)) {
    case PICKER_KEEP: break;
    case PICKER_CLOSE: sessions_close(t); break;
    case PICKER_LOAD: sessions_load(t); break;
    case PICKER_DELETE: {
        char *name = session_picker_name(t->picker);
        kimi_err err = {0};
        const char *path = session_picker_path(t->picker);
        if (app_delete_session(t->a, path, &err)) {
            /* the name, not the whole path, leads the note: it has one line */
            size_t n = strlen(path);
            int named = name && !strncmp(err.msg, path, n);
            strbuf note = {0};
            strbuf_printf(&note, "%s%s", named ? name : "", named ? err.msg + n : err.msg);
            session_picker_note(t->picker, note.data ? note.data : err.msg);
            free(note.data);
        } else if (session_picker_reload(t->picker, &err)) {
            session_picker_note(t->picker, err.msg);
        } else {
            strbuf note = {0};
            strbuf_printf(&note, "deleted %s", name ? name : "it");
            session_picker_note(t->picker, note.data ? note.data : "deleted");
            free(note.data);
        }
        free(name);
        break;
    }
    }
}

static void submit(tui *t)
{
    size_t len;
    const char *text = input_text(t->in, &len);
    /* a copy: input_set_text must not be given the input's own text */
    char *copy = strndup(text, len);
    if (!copy)
        return;
    if (len && copy[len - 1] == '\\') {
        input_set_text(t->in, copy, len - 1);
        input_insert(t->in, "\n", 1);
        free(copy);
        return;
    }
    strbuf full, brief;
    if (expand_pastes(t, copy, len, &full, &brief)) {
        free(full.data);
        free(brief.data);
        free(copy);
        tui_hint(t, "out of memory for the pasted text");
        return;
    }
    input_history_add(t->in, brief.data ? brief.data : "", brief.len);
    free(brief.data);
    kimi_err err = {0};
    /* cleared first: /edit fills the input while the line runs; a message that could not be
       sent comes back, a command that failed does not (its error is on screen, Up recalls it,
       and the next command is not typed onto its end) */
    input_clear(t->in);
    command c;
    kimi_err parse_err = {0};
    int is_command = copy[0] == '/' && command_parse(copy, len, &c, &parse_err) == 0;
    if (is_command && c.id == CMD_SESSIONS && app_sessions_dir(t->a)) {
        sessions_open(t);   /* the full screen's picker; the core's listing is plain mode's */
        free(full.data);
        free(copy);
        return;
    }
    t->new_conversation = is_command && (c.id == CMD_NEW || c.id == CMD_LOAD);
    int rc = app_submit_line(t->a, full.data ? full.data : "", full.len, &err);
    t->new_conversation = 0;
    if (rc == 0) {
        render_model_scroll_to_bottom(t->rm);
        tui_pastes_clear(t);
    } else if (copy[0] != '/') {
        input_set_text(t->in, copy, len);   /* the markers stay, and their pastes */
    }
    free(full.data);
    free(copy);
}

static void stop(tui *t)
{
    if (app_busy(t->a)) {
        /* before app_stop: stopping at the approval prompt ends the turn at once (turn_done) */
        t->state = GEN_STOPPING;
        t->approval = -1;
        t->dirty = 1;
        app_stop(t->a);
    }
}

/* Cut the conversation back to before the user's message `message` and put its text into the
 * input, to edit and send again (app_rewind; /undo brings the cut part back). */
static void rewind_to(tui *t, int message)
{
    const session *s = app_session(t->a);
    if (message < 0 || message >= s->conv.n_messages || s->conv.messages[message].role != CHAT_ROLE_USER ||
        s->meta[message].summary) {
        tui_hint(t, "rewind: select one of your messages (Tab, then ↑↓) and press e");
        return;
    }
    int cut = s->conv.n_messages - message;
    char *text = NULL;
    size_t len = 0;
    kimi_err err = {0};
    if (app_rewind(t->a, message, &text, &len, &err)) {
        tui_hint(t, err.msg);
        return;
    }
    tui_input_put_back(t, text, len);
    free(text);
    char hint[160];
    snprintf(hint, sizeof hint, "rewound: %d message%s cut off (/undo brings them back) · Enter sends it again", cut,
             cut == 1 ? "" : "s");
    tui_hint(t, hint);
    render_model_scroll_to_bottom(t->rm);
}

static int last_user_message(const tui *t)
{
    const session *s = app_session(t->a);
    for (int i = s->conv.n_messages - 1; i >= 0; i--)
        if (s->conv.messages[i].role == CHAT_ROLE_USER && !s->meta[i].summary)
            return i;
    return -1;
}

/* Esc: a queued message comes back into the input first; else it stops the answer; twice
 * within ESC_TWICE_S while idle it rewinds to the user's last message. */
#define ESC_TWICE_S 0.6

static void esc_key(tui *t)
{
    double now = monotonic_seconds();
    int twice = t->last_esc && now - t->last_esc < ESC_TWICE_S;
    t->last_esc = now;
    size_t len;
    char *queued = app_unqueue(t->a, &len);
    if (queued) {
        tui_input_put_back(t, queued, len);
        free(queued);
        t->last_esc = 0;
    } else if (app_busy(t->a)) {
        stop(t);
        t->last_esc = 0;    /* Esc Esc to stop quickly is no rewind */
    } else if (twice) {
        t->last_esc = 0;
        int m = last_user_message(t);
        if (m < 0)
            tui_hint(t, "rewind: no message of yours yet");
        else
            rewind_to(t, m);
    }
}

static void scroll_key(tui *t, int key)
{
    switch (key) {
    case KEY_PPAGE: render_model_scroll_page(t->rm, -1); break;
    case KEY_NPAGE: render_model_scroll_page(t->rm, 1); break;
    case KEY_SR: case K_SHIFT_UP: render_model_scroll(t->rm, -1); break;
    case KEY_SF: case K_SHIFT_DOWN: render_model_scroll(t->rm, 1); break;
    case K_CTRL_HOME: render_model_scroll_to_top(t->rm); break;
    case K_CTRL_END: render_model_scroll_to_bottom(t->rm); break;
    case K_CTRL_UP: render_model_jump_user(t->rm, -1); break;
    case K_CTRL_DOWN: render_model_jump_user(t->rm, 1); break;
    }
}

static int is_scroll_key(int key)
{
    return key == KEY_PPAGE || key == KEY_NPAGE || key == KEY_SR || key == KEY_SF || key == K_SHIFT_UP ||
           key == K_SHIFT_DOWN || key == K_CTRL_HOME || key == K_CTRL_END || key == K_CTRL_UP || key == K_CTRL_DOWN;
}

static void mouse_event(tui *t)
{
    MEVENT ev;
    if (getmouse(&ev) != OK)
        return;
    if (ev.bstate & BUTTON4_PRESSED)
        render_model_scroll(t->rm, -3);
#ifdef BUTTON5_PRESSED
    else if (ev.bstate & BUTTON5_PRESSED)
        render_model_scroll(t->rm, 3);
#endif
    else if ((ev.bstate & (BUTTON1_CLICKED | BUTTON1_PRESSED)) && ev.y >= 0 && ev.y < t->trans_h && t->row_block &&
             t->row_block[ev.y] >= 0)
        render_model_toggle_fold(t->rm, t->row_block[ev.y]);
}

/* ---- transcript search (Ctrl-F) ---- */

/* The matches of the query in every block's text (and each tool's result), again: blocks grow
 * while an answer streams. */
static void search_run(tui *t)
{
    search_result_clear(&t->search_hits);
    search_query q;
    kimi_err err = {0};
    if (search_query_init(&q, t->search_query.data ? t->search_query.data : "", t->search_query.len, &err))
        return;
    int n = render_model_block_count(t->rm);
    for (int b = 0; b < n && !err.code; b++) {
        size_t len;
        const char *s = render_model_block_text(t->rm, b, &len);
        search_add_text(&t->search_hits, &q, 2 * b, s, len, &err);
        if (render_model_block_kind(t->rm, b) == RM_TOOL && !err.code) {
            s = render_model_tool_result(t->rm, b, &len);
            search_add_text(&t->search_hits, &q, 2 * b + 1, s, len, &err);
        }
    }
    search_query_free(&q);
}

/* Show match i: its block marked and scrolled into view, unfolded when folded. */
static void search_show(tui *t, int i)
{
    if (i < 0 || i >= t->search_hits.n)
        return;
    t->search_match = i;
    int b = t->search_hits.matches[i].text / 2;
    if (render_model_is_folded(t->rm, b))
        render_model_toggle_fold(t->rm, b);
    render_model_focus(t->rm, b);
}

static void search_start(tui *t)
{
    t->focus = 0;
    t->search_mode = SEARCH_TYPING;
    t->search_query.len = 0;
    t->search_match = -1;
    search_result_clear(&t->search_hits);
}

static void search_end(tui *t)
{
    t->search_mode = SEARCH_OFF;
    t->search_match = -1;
    render_model_focus(t->rm, -1);
}

/* The query changed: the newest match (the view is mostly at the end), or, with none, the
 * view stays where it is. */
static void search_query_changed(tui *t)
{
    search_run(t);
    if (t->search_hits.n)
        search_show(t, t->search_hits.n - 1);
    else
        render_model_focus(t->rm, -1);
}

/* n / N: the next (newer) or previous (older) match, wrapping around. */
static void search_step_to(tui *t, int dir)
{
    search_match at = t->search_match >= 0 && t->search_match < t->search_hits.n
                          ? t->search_hits.matches[t->search_match] : (search_match){.text = -1};
    search_run(t);
    int i = at.text < 0 ? -1 : search_first_from(&t->search_hits, at.text, at.offset);
    if (i >= t->search_hits.n)
        i = -1;
    search_show(t, search_step(&t->search_hits, i, dir));
}

/* A key while searching; 1 when it was taken. */
static int search_key(tui *t, int key, int is_char, int alt)
{
    if (is_char && !alt && key == 27) {
        search_end(t);
        return 1;
    }
    if (t->search_mode == SEARCH_TYPING) {
        if ((is_char && (key == '\r' || key == '\n')) || (!is_char && key == KEY_ENTER)) {
            t->search_mode = SEARCH_MOVING;
        } else if (!is_char && key == K_SHIFT_ENTER) {
            t->search_mode = SEARCH_MOVING;
            search_step_to(t, -1);
        } else if ((is_char && (key == 127 || key == 8)) || (!is_char && key == KEY_BACKSPACE)) {
            while (t->search_query.len && ((unsigned char)t->search_query.data[t->search_query.len - 1] & 0xC0) == 0x80)
                t->search_query.len--;
            if (t->search_query.len)
                t->search_query.len--;
            search_query_changed(t);
        } else if (is_char && !alt && key >= 32 && key != 127) {
            char mb[8];
            int n = wctomb(mb, (wchar_t)key);
            if (n > 0) {
                strbuf_add(&t->search_query, mb, (size_t)n);
                search_query_changed(t);
            }
        } else if (!is_char && (key == KEY_DOWN || key == KEY_UP)) {
            search_step_to(t, key == KEY_DOWN ? 1 : -1);
        } else if (!is_char && is_scroll_key(key)) {
            scroll_key(t, key);
        }
        return 1;
    }
    /* moving between the matches */
    if (is_char && !alt && (key == 'n' || key == 'N' || key == '\r' || key == '\n')) {
        search_step_to(t, key == 'N' ? -1 : 1);
        return 1;
    }
    if (!is_char && (key == KEY_ENTER || key == K_SHIFT_ENTER)) {
        search_step_to(t, key == K_SHIFT_ENTER ? -1 : 1);
        return 1;
    }
    if (is_char && !alt && (key == 6 || key == '/')) {
        t->search_mode = SEARCH_TYPING;     /* edit the query again */
        return 1;
    }
    if (!is_char && is_scroll_key(key)) {
        scroll_key(t, key);
        return 1;
    }
    search_end(t);  /* any other key ends the search and does what it does */
    return 0;
}

/* ---- Tab completion of a slash command ---- */

/* The names of the sessions folder's files (without .json), malloc'ed into *names. */
static int session_names(char ***names)
{
    *names = NULL;
    char *dir = paths_sessions_dir(NULL);
    int n = 0;
    if (dir && session_list_names(dir, names, &n, NULL))
        n = 0;
    free(dir);
    return n;
}

/* Tab on an input that starts with '/': complete the word before the cursor (one candidate:
 * all of it and a space; several: what they share, and the rule lists them). 0 when the input
 * is no command (Tab then moves the focus to the transcript). */
static int complete(tui *t)
{
    size_t len, cursor = input_cursor(t->in);
    const char *text = input_text(t->in, &len);
    if (!len || text[0] != '/' || memchr(text, '\n', cursor))
        return 0;
    /* the lists that live elsewhere */
    char *theme_list = paths_theme_names();
    const char *themes[64];
    int n_themes = 0;
    char *save = NULL;
    for (char *w = theme_list ? strtok_r(theme_list, ", ", &save) : NULL; w && n_themes < 64; w = strtok_r(NULL, ", ", &save))
        themes[n_themes++] = w;
    char **sessions;
    int n_sessions = session_names(&sessions);
    int n_tools = app_tool_count(t->a);
    const char **tools = calloc((size_t)n_tools + 1, sizeof *tools);
    for (int i = 0; tools && i < n_tools; i++)
        tools[i] = app_tool_name(t->a, i);
    completion_sources src = {themes, n_themes, (const char *const *)sessions, n_sessions, tools, tools ? n_tools : 0};
    completion c;
    kimi_err err = {0};
    if (completion_find(text, cursor, &src, &c, &err) == 0) {
        size_t typed = cursor - c.start;
        size_t common = completion_common_prefix(&c);
        strbuf b = {0};
        if (c.n == 1 || common > typed) {
            const char *item = c.items[0];
            size_t take = c.n == 1 ? strlen(item) : common;
            strbuf_add(&b, text, c.start);
            strbuf_add(&b, item, take);
            if (c.n == 1 && take && item[take - 1] != '/')
                strbuf_add(&b, " ", 1);
            strbuf_add(&b, text + cursor, len - cursor);
            if (!b.failed)
                input_set_text(t->in, b.data, b.len);
        }
        if (c.n > 1) {
            strbuf list = {0};
            strbuf_str(&list, "Tab:");
            for (int i = 0; i < c.n && list.len < sizeof t->flash - 8; i++)
                strbuf_printf(&list, " %s", c.items[i]);
            if (list.data)
                tui_hint(t, list.data);
            free(list.data);
        } else if (!c.n) {
            tui_hint(t, "Tab: nothing to complete here");
        }
        free(b.data);
        completion_free(&c);
    }
    free(tools);
    session_names_free(sessions, n_sessions);
    free(theme_list);
    return 1;
}

/* A key in Tab mode. */
static void focus_key(tui *t, int key, int is_char)
{
    int b = render_model_focused(t->rm);
    if ((is_char && (key == '\t' || key == 27)) || (!is_char && key == KEY_BTAB)) {
        t->focus = 0;
        render_model_focus(t->rm, -1);
    } else if ((!is_char && key == KEY_UP) || (is_char && key == 'k')) {
        render_model_focus_move(t->rm, -1);
    } else if ((!is_char && key == KEY_DOWN) || (is_char && key == 'j')) {
        render_model_focus_move(t->rm, 1);
    } else if ((is_char && (key == '\r' || key == '\n' || key == ' ')) || (!is_char && key == KEY_ENTER)) {
        if (b >= 0)
            render_model_toggle_fold(t->rm, b);
    } else if (is_char && key == 'y') {
        if (b >= 0)
            copy_block(t, b);
    } else if (is_char && key == '/') {
        search_start(t);
        render_model_focus(t->rm, -1);
    } else if (is_char && key == 'e') {
        int m = b >= 0 && b < t->n_block_message ? t->block_message[b] : -1;
        if (app_busy(t->a)) {
            tui_hint(t, "rewind: an answer is still coming: wait, or stop it (Esc)");
        } else if (m >= 0 && m < app_session(t->a)->conv.n_messages &&
                   app_session(t->a)->conv.messages[m].role == CHAT_ROLE_USER) {
            t->focus = 0;
            render_model_focus(t->rm, -1);
            rewind_to(t, m);
        } else {
            tui_hint(t, "e rewinds to one of your messages: select one with ↑↓");
        }
    } else if (!is_char && is_scroll_key(key)) {
        scroll_key(t, key);
    }
    t->input_dirty = 1;
}

/* A key while a call waits for approval; 1 when it was taken. The keyboard belongs to the
 * question (issue 18: typing "Cancel" answered it with the "a" and left "Cncel" in the input):
 * y, n and a twice answer; Esc and Ctrl-C stop the turn and the view's keys (scrolling, the
 * mouse, Tab focus) work as ever; every other key, Enter too, types nothing and says what the
 * question wants. A y, a or n within APPROVAL_TYPING_S of such a key is a word being typed
 * ("Cancel"), not an answer; so is one within APPROVAL_TYPING_S of a character typed before
 * the question came (a message being typed or queued while the model answers; Enter ends a
 * word, so a y right after sending is an answer). */
#define APPROVAL_TYPING_S 0.5      /* keys closer than this to a non-answer are typing */

static int approval_key(tui *t, int key, int is_char, int alt)
{
    if (!is_char) {
        if (is_scroll_key(key) || key == KEY_BTAB)
            return 0;
        tui_hint(t, "answer y, a or n");
        return 1;
    }
    if (!alt && (key == 27 || key == 3 || key == '\t'))
        return 0;
    int answer = alt ? 0 : key == 'Y' ? 'y' : key == 'A' ? 'a' : key == 'N' ? 'n' : key;
    double now = monotonic_seconds();
    if (t->approval_stray_at && now - t->approval_stray_at < APPROVAL_TYPING_S)
        answer = 0;
    if (answer == 'a' && !t->approval_always) {
        t->approval_always = 1;
        t->flash[0] = 0;            /* the question's "a again ..." shows at once */
        return 1;
    }
    if (answer != 'y' && answer != 'a' && answer != 'n') {
        t->approval_stray_at = now;
        t->approval_always = 0;     /* the a before it is no longer a deliberate first a */
        tui_hint(t, "answer y, a or n");
        return 1;
    }
    int index = t->approval;
    t->approval = -1;
    t->approval_always = 0;
    app_approve(t->a, index, answer == 'y' ? TOOL_APPROVE_ONCE : answer == 'a' ? TOOL_APPROVE_ALWAYS : TOOL_DENY);
    return 1;
}

/* One key from read_wch (is_char: a character, else a KEY_ code); alt: Esc came before it. */
void tui_handle_key(tui *t, int key, int is_char, int alt)
{
    t->dirty = 1;
    t->input_dirty = 1;
    if (t->paste) {
        if (!is_char && key == K_PASTE_END) {
            t->paste = 0;
            if (t->approval >= 0)   /* pasted text is no answer and does not go to the input */
                tui_hint(t, "answer y, a or n");
            else
                paste_into_input(t);
            free(t->paste_buf.data);
            t->paste_buf = (strbuf){0};
        } else if (is_char) {
            char mb[8];
            wchar_t wc = (wchar_t)key;
            int n = wctomb(mb, wc);
            if (n > 0)
                strbuf_add(&t->paste_buf, mb, (size_t)n);
        }
        return;
    }
    if (!is_char && key == K_PASTE_BEGIN) {
        t->paste = 1;
        return;
    }
    if (!is_char && key == KEY_RESIZE)
        return;
    if (is_char && key == 26) { /* Ctrl-Z: the loop suspends (raw mode makes it a key) */
        t->suspend = 1;
        return;
    }
    if (t->help && !is_char && (key == KEY_UP || key == KEY_DOWN || key == KEY_PPAGE || key == KEY_NPAGE)) {
        int step = key == KEY_UP ? -1 : key == KEY_DOWN ? 1 : key == KEY_PPAGE ? -t->help_rows : t->help_rows;
        t->help_top += step; /* paint_help keeps it in range */
        t->force = 1;
        return;
    }
    if (t->help) {
        tui_help_toggle(t, 0);
        return;
    }
    if (!is_char && key == KEY_F(1)) {
        tui_help_toggle(t, 1);
        return;
    }
    if (!is_char && key == KEY_MOUSE) {
        mouse_event(t);
        return;
    }
    if (is_char && key == 12) { /* Ctrl-L */
        tui_full_redraw(t);
        return;
    }
    if (t->picker) {
        sessions_key(t, key, is_char, alt);
        return;
    }
    if (t->approval < 0)    /* a word being typed (Enter or any other key ends it) */
        t->approval_stray_at = is_char && key >= ' ' && !alt ? monotonic_seconds() : 0;
    else if (approval_key(t, key, is_char, alt))
        return;
    if (t->search_mode && search_key(t, key, is_char, alt))
        return;
    if (t->focus) {
        focus_key(t, key, is_char);
        return;
    }
    if (input_searching(t->in)) {
        if (is_char && key == 18) {
            input_search_older(t->in);
            return;
        }
        if (is_char && (key == 27 || key == 7)) {
            input_search_cancel(t->in);
            return;
        }
        if ((is_char && (key == 127 || key == 8)) || (!is_char && key == KEY_BACKSPACE)) {
            input_search_backspace(t->in);
            return;
        }
        if (is_char && key >= 32 && !alt) {
            char mb[8];
            int n = wctomb(mb, (wchar_t)key);
            if (n > 0)
                input_search_type(t->in, mb, (size_t)n);
            return;
        }
        input_search_accept(t->in);
        if (is_char && (key == '\r' || key == '\n'))
            return; /* Enter keeps the match in the input for a look before sending */
    }
    if (!is_char && is_scroll_key(key)) {
        scroll_key(t, key);
        return;
    }
    if (alt && is_char) {
        switch (key) {
        case 'b': case 'B': input_edit_apply(t->in, INPUT_WORD_LEFT); return;
        case 'f': case 'F': input_edit_apply(t->in, INPUT_WORD_RIGHT); return;
        case '\r': case '\n': input_insert(t->in, "\n", 1); return;
        }
        return;
    }
    if (!is_char) {
        switch (key) {
        case KEY_LEFT: input_edit_apply(t->in, INPUT_LEFT); break;
        case KEY_RIGHT: input_edit_apply(t->in, INPUT_RIGHT); break;
        case KEY_HOME: input_edit_apply(t->in, INPUT_LINE_START); break;
        case KEY_END: input_edit_apply(t->in, INPUT_LINE_END); break;
        case KEY_BACKSPACE: input_edit_apply(t->in, INPUT_BACKSPACE); break;
        case KEY_DC: input_edit_apply(t->in, INPUT_DELETE); break;
        case KEY_ENTER: submit(t); break;
        case K_SHIFT_ENTER: input_insert(t->in, "\n", 1); break;  /* as Alt-Enter */
        case KEY_UP:
            if (!input_line_up(t->in, t->cols))
                input_history_prev(t->in);
            break;
        case KEY_DOWN:
            if (!input_line_down(t->in, t->cols))
                input_history_next(t->in);
            break;
        case KEY_BTAB: break;
        }
        return;
    }
    switch (key) {
    case 27: /* Esc */
        esc_key(t);
        return;
    case 3: /* Ctrl-C */
        if (app_busy(t->a)) {
            stop(t);
        } else if (!input_is_empty(t->in)) {
            input_clear(t->in);
        } else {
            tui_hint(t, "Ctrl-D on an empty input or /quit leaves kimi-chat");
        }
        return;
    case 4: /* Ctrl-D */
        if (input_is_empty(t->in)) {
            stop(t);
            t->quit = 1;
        } else {
            input_edit_apply(t->in, INPUT_DELETE);
        }
        return;
    case '\r': submit(t); return;
    case '\n': input_insert(t->in, "\n", 1); return;
    case '\t':
        if (complete(t))
            return;
        t->focus = 1;
        render_model_focus_move(t->rm, -1);
        return;
    case 1: input_edit_apply(t->in, INPUT_LINE_START); return;
    case 5: input_edit_apply(t->in, INPUT_LINE_END); return;
    case 2: input_edit_apply(t->in, INPUT_LEFT); return;
    case 6: /* Ctrl-F: search the transcript (Right and Alt-F move in the input) */
        search_start(t);
        return;
    case 11: input_edit_apply(t->in, INPUT_KILL_TO_END); return;
    case 15: /* Ctrl-O */
        pastes_toggle(t);
        return;
    case 21: input_edit_apply(t->in, INPUT_KILL_TO_START); return;
    case 23: input_edit_apply(t->in, INPUT_KILL_WORD_BACK); return;
    case 25: input_edit_apply(t->in, INPUT_YANK); return;
    case 8: case 127: input_edit_apply(t->in, INPUT_BACKSPACE); return;
    case 18: input_search_start(t->in); return;
    case 20: /* Ctrl-T */
        render_model_toggle_all_reasoning(t->rm);
        return;
    case 16: /* Ctrl-P / Ctrl-N: history, as readline */
        input_history_prev(t->in);
        return;
    case 14:
        input_history_next(t->in);
        return;
    }
    if (key >= 32 && key != 127) {
        char mb[8];
        int n = wctomb(mb, (wchar_t)key);
        if (n > 0)
            input_insert(t->in, mb, (size_t)n);
    }
}

/* A key, handled at once, or while the model loads (no chat yet): Ctrl-C stops the load (one
 * typed, not one inside a paste), and anything else waits for the chat (typed ahead; a key that
 * finds no room is dropped). */
static void take_key(tui *t, int key, int is_char, int alt)
{
    if (t->a) {
        tui_handle_key(t, key, is_char, alt);
        return;
    }
    if (!is_char && (key == K_PASTE_BEGIN || key == K_PASTE_END))
        t->typed_paste = key == K_PASTE_BEGIN;
    if (is_char && key == 3 && !t->typed_paste)
        t->load_cancelled = 1;
    else if (is_char && key == 26 && !t->typed_paste)
        t->suspend = 1;
    else if (!array_reserve(&t->typed_ahead, &t->typed_ahead_cap, t->n_typed_ahead + 1, sizeof *t->typed_ahead))
        t->typed_ahead[t->n_typed_ahead++] = (typed_key){key, is_char, alt};
}

/* get_wch, except that bytes which are not UTF-8 become U+FFFD, one for each maximal ill-formed
 * subpart (as pasted text and the plain REPL do), and the keys behind them still arrive:
 * ncurses' get_wch keeps collecting bytes after an ill-formed one and drops them all. A
 * sequence cut short (its next byte not there within CONTINUATION_WAIT_MS) is one U+FFFD: a
 * terminal writes a character's bytes together, but a slow link may split them. */
enum { CONTINUATION_WAIT_MS = 200 };

static int read_wch(wint_t *ch)
{
    int c = getch();
    if (c == ERR)
        return ERR;
    if (c >= KEY_MIN) {
        *ch = (wint_t)c;
        return KEY_CODE_YES;
    }
    uint8_t seq[4] = {(uint8_t)c};
    size_t n = 1, len = 1;
    int kind;
    while ((kind = utf8_sequence(seq, n, &len)) == UTF8_SHORT && n < sizeof seq) {
        timeout(CONTINUATION_WAIT_MS);
        c = getch();
        nodelay(stdscr, TRUE);
        if (c == ERR)
            break;
        if (c >= KEY_MIN || c < 0x80 || c > 0xBF) {
            ungetch(c); /* not a continuation byte: the cut sequence ends before it */
            break;
        }
        seq[n++] = (uint8_t)c;
    }
    if (kind == UTF8_OK) {
        size_t next;
        *ch = utf8_decode_valid(seq, 0, &next);
        return OK;
    }
    if (kind == UTF8_BAD && len < n)
        ungetch(seq[n - 1]); /* a byte that began no part of this sequence (at most the last) */
    *ch = 0xFFFD;
    return OK;
}

/* Enter with text right behind it (within the escape delay: faster than anyone types) is a
 * line break inside pasted text, where the terminal does not bracket pastes; only while the
 * input is being edited (Enter means something else in the transcript or a prompt). The key
 * read to tell goes to *next (rc in *next_rc; ERR when none came). */
static int enter_in_paste(const tui *t, wint_t *next, int *next_rc)
{
    *next_rc = ERR;
    if (t->paste || t->focus || t->help || t->approval >= 0 || input_searching(t->in))
        return 0;
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    if (poll(&p, 1, get_escdelay()) <= 0)
        return 0;
    *next_rc = read_wch(next);
    /* text follows; Enter then Esc (or a function key) are two keys */
    return *next_rc == OK && *next != 27 && *next != 127 && (*next >= 32 || *next == '\r' || *next == '\t');
}

void tui_read_keys(tui *t)
{
    wint_t ch;
    int rc;
    int read_ahead = 0; /* ch, rc hold a key already read */
    while (read_ahead || (rc = read_wch(&ch)) != ERR) {
        read_ahead = 0;
        int alt = 0;
        if (rc == OK && ch == 27 && !t->paste) {
            /* Esc with another key right behind it: Alt-key; alone: Esc */
            wint_t next;
            int rc2 = read_wch(&next);
            if (rc2 == ERR || rc2 == KEY_CODE_YES || next == 27) {
                /* alone, or before a function key (Esc then F1) or another Esc (Esc Esc
                   rewinds): two keys */
                take_key(t, 27, 1, 0);
                if (rc2 == ERR)
                    continue;
                if (rc2 == OK) {
                    ch = next;  /* that Esc may begin an Alt-key itself */
                    rc = rc2;
                    read_ahead = 1;
                    continue;
                }
            } else {
                alt = 1;
            }
            rc = rc2;
            ch = next;
        }
        if (rc == OK && ch == '\r' && !alt) {
            wint_t next;
            int next_rc;
            if (enter_in_paste(t, &next, &next_rc))
                ch = '\n'; /* a paste without bracketed paste: keep its line breaks */
            take_key(t, (int)ch, 1, 0);
            if (t->quit)
                break;
            if (next_rc != ERR) {
                ch = next;
                rc = next_rc;
                read_ahead = 1;
            }
            continue;
        }
        take_key(t, (int)ch, rc == OK, alt);
        if (t->quit)
            break;
    }
}

static void bind_key(const char *capname, const char *fallback, int code)
{
    const char *s = tigetstr(capname);
    if (s && s != (const char *)-1)
        define_key(s, code);
    if (fallback)
        define_key(fallback, code);
}

void tui_keys_bind(void)
{
    bind_key("kUP5", "\033[1;5A", K_CTRL_UP);
    bind_key("kDN5", "\033[1;5B", K_CTRL_DOWN);
    bind_key("kHOM5", "\033[1;5H", K_CTRL_HOME);
    bind_key("kEND5", "\033[1;5F", K_CTRL_END);
    bind_key("kUP", "\033[1;2A", K_SHIFT_UP);
    bind_key("kDN", "\033[1;2B", K_SHIFT_DOWN);
    /* Shift-Enter where the terminal tells it from Enter: as the kitty keyboard protocol
       writes it, and as xterm's modifyOtherKeys does (kitty, WezTerm, foot, Ghostty, iTerm2 and
       VS Code send one of these when set to; nothing asks a terminal to switch either on) */
    define_key("\033[13;2u", K_SHIFT_ENTER);
    define_key("\033[27;2;13~", K_SHIFT_ENTER);
    define_key("\033[200~", K_PASTE_BEGIN);
    define_key("\033[201~", K_PASTE_END);
}
