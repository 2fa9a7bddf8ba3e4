/* tui_paint: the full-screen view painted with curses. */
#include "ui/tui_paint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "app/chat/paths.h"
#include "engine/base/monotonic.h"
#include "ui/text_width.h"
#include "ui/tui_layout.h"
#include "ui/wrap.h"

/* The palette for the theme; says so when the terminal's colour pairs ran out. */
void tui_apply_palette(tui *t)
{
    paint_palette_init(&t->pal, &t->th, t->depth);
    int pair = t->pal.pair[THEME_TEXT];
    wbkgdset(stdscr, ' ' | (pair < 256 ? COLOR_PAIR(pair) : 0));
    if (t->pal.pairs_short) {
        char line[160];
        snprintf(line, sizeof line, "the terminal has %d colour pairs: %d theme elements keep its default colours",
                 COLOR_PAIRS, t->pal.pairs_short);
        tui_add_block(t, RM_NOTE, line);
    }
}

int tui_load_theme(tui *t, const char *name, kimi_err *err)
{
    char *file = paths_theme_file(name, err);
    if (!file)
        return err->code;
    theme th;
    theme_init_default(&th);
    int rc = theme_load_file(&th, file, err);
    free(file);
    if (rc)
        return rc;
    t->th = th;
    if (t->active) {
        tui_apply_palette(t);
        render_model_repaint(t->rm);
        t->force = t->dirty = 1;
    }
    return 0;
}

/* Paint text from column x, cut to the width; returns the column after it. */
static int put_cut(tui *t, int y, int x, const char *s, int element, int extra)
{
    int room = t->cols - x;
    if (room <= 0)
        return x;
    int w;
    size_t len = text_fit(s, strlen(s), room, &w);
    paint_style(stdscr, &t->pal, element, extra);
    move(y, x);
    paint_text(stdscr, s, len);
    return x + w;
}

static void paint_separator(tui *t, int y)
{
    char text[400];
    int element;
    tui_separator_text(t, text, sizeof text, &element);
    char key[512];
    snprintf(key, sizeof key, "%d|%s", element, text);
    if (!t->force && !strcmp(key, t->last_sep))
        return;
    snprintf(t->last_sep, sizeof t->last_sep, "%s", key);
    paint_style(stdscr, &t->pal, THEME_SEPARATOR, 0);
    move(y, 0);
    for (int x = 0; x < t->cols; x++)
        addstr("─");
    if (text[0])
        put_cut(t, y, 1, text, element, 0);
}

static void paint_status(tui *t, int y)
{
    char text[400];
    /* "↓ new" keeps its 8 columns unless the state alone needs them */
    int new_below = t->new_below && t->cols > 8;
    if (!tui_status_text(t, text, sizeof text, t->cols - (new_below ? 8 : 0)) && new_below) {
        new_below = 0;
        tui_status_text(t, text, sizeof text, t->cols);
    }
    char key[512];
    snprintf(key, sizeof key, "%d|%s", new_below, text);
    if (!t->force && !strcmp(key, t->last_status))
        return;
    snprintf(t->last_status, sizeof t->last_status, "%s", key);
    paint_style(stdscr, &t->pal, THEME_STATUS, 0);
    move(y, 0);
    for (int x = 0; x < t->cols; x++)
        addch(' ');
    int right = new_below ? 8 : 0;
    int w;
    size_t len = text_fit(text, strlen(text), t->cols - right > 0 ? t->cols - right : 0, &w);
    move(y, 0);
    paint_text(stdscr, text, len);
    if (new_below && t->cols > 8)
        put_cut(t, y, t->cols - 7, "↓ new", THEME_STATUS_ACCENT, 0);
}

static void paint_input(tui *t, int top)
{
    int cr, cc;
    int n = input_layout(t->in, t->cols, NULL, 0, &cr, &cc);
    input_row *rows = malloc(sizeof *rows * (size_t)n);
    if (!rows)
        return;
    input_layout(t->in, t->cols, rows, n, &cr, &cc);
    const char *text = input_text(t->in, NULL);
    for (int i = 0; i < t->input_h; i++) {
        int r = t->input_top + i;
        paint_style(stdscr, &t->pal, THEME_INPUT, 0);
        move(top + i, 0);
        clrtoeol();
        if (r >= n)
            continue;
        if (r == 0)
            put_cut(t, top + i, 0, t->focus ? "· " : "> ", THEME_INPUT_PROMPT, 0);
        else if (i == 0)
            put_cut(t, top + i, 0, "↑ ", THEME_FOLD_HINT, 0);
        paint_style(stdscr, &t->pal, THEME_INPUT, 0);
        move(top + i, INPUT_PROMPT_WIDTH);
        /* tabs as input_layout counts them: to the next stop, cut at the row's end */
        strbuf shown = {0};
        text_displayable(&shown, text + rows[r].start, rows[r].end - rows[r].start);
        if (!shown.failed && shown.len)
            paint_text(stdscr, shown.data, text_fit(shown.data, shown.len, t->cols - INPUT_PROMPT_WIDTH, NULL));
        free(shown.data);
    }
    if (t->input_top + t->input_h < n)
        put_cut(t, top + t->input_h - 1, t->cols - 2, "↓", THEME_FOLD_HINT, 0);
    free(rows);
}

static const char *const help_lines[] = {
    "kimi-chat keys",
    "",
    "Enter              send (a line ending in \\ continues); while the",
    "                   model answers, queue it (Esc takes it back)",
    "Alt-Enter, Ctrl-J  new line (Shift-Enter too where the terminal sends it",
    "                   apart: CSI 13;2u or CSI 27;2;13~)",
    "Ctrl-O             a paste of 20+ lines shows as one marker: show it",
    "                   whole to read or edit, and fold it again",
    "Ctrl-A/E/B/K/U/W/Y, Alt-B/F, Home/End, arrows   edit",
    "Up/Down            input history (first/last line); Ctrl-R search",
    "Esc, Ctrl-C        stop the answer (what came is kept)",
    "Esc Esc            rewind to your last message (/undo takes it back)",
    "Ctrl-C when idle   clear the input",
    "Ctrl-D (empty), /quit   quit",
    "Ctrl-Z             suspend (fg comes back)",
    "PgUp/PgDn, Shift-Up/Down, Ctrl-Home/End   scroll",
    "Ctrl-T, Ctrl-L     fold/unfold all reasoning; redraw",
    "Ctrl-F             search the transcript (a capital: case counts);",
    "                   matches highlighted, the current one stronger;",
    "                   Enter, then n or Enter / N or Shift-Enter next /",
    "                   previous match; Esc ends",
    "Ctrl-Up/Ctrl-Down  previous/next of your messages",
    "Tab                on a /command: complete it; else transcript focus:",
    "                   Up/Down select, Enter/Space fold, y copy (OSC 52),",
    "                   e rewind to it, / search, Tab/Esc back",
    "/sessions          pick a saved session: ↑↓ PgUp/PgDn Home/End move,",
    "                   Enter loads, d deletes (y confirms), Esc closes",
    "y / a a / n        approve a tool call once / always (a twice) / deny;",
    "                   while it waits, other keys type nothing",
    "Up/Down, PgUp/PgDn  scroll this help when it does not fit",
    "/help lists the commands · any other key closes this",
};

/* The column a help line's description starts at (after the key and two or more spaces; the
 * continuation lines' indent), 0 when it has none. */
static int help_indent(const char *line)
{
    const char *gap = strstr(line, "  ");
    if (!gap)
        return 0;
    const char *desc = gap + strspn(gap, " ");
    return *desc ? text_width(line, (size_t)(desc - line)) : 0;
}

/* The help text wrapped to width columns, continuation lines under the description (or, where
 * that is more than half the width, two columns in). */
static void help_wrap(styled_lines *out, int width)
{
    static const char spaces[] = "                                        ";
    int n = (int)(sizeof help_lines / sizeof *help_lines);
    for (int i = 0; i < n; i++) {
        const char *line = help_lines[i];
        int indent = help_indent(line);
        if (indent > width / 2 || indent >= (int)sizeof spaces)
            indent = 2;
        wrap_piece text = {line, strlen(line), THEME_STATUS, 0};
        wrap_piece lead = {spaces, (size_t)indent, THEME_STATUS, 0};
        wrap_prefix prefix = {NULL, 0, &lead, 1};
        wrap_pieces(out, &text, 1, width, &prefix);
    }
}

/* The F1 overlay: the keys, wrapped to the window; taller than the window, it scrolls
 * (t->help_top) with an arrow on the border saying which way there is more. */
static void paint_help(tui *t)
{
    int n = (int)(sizeof help_lines / sizeof *help_lines);
    int w = 0;
    for (int i = 0; i < n; i++) {
        int lw = text_width(help_lines[i], strlen(help_lines[i]));
        w = lw > w ? lw : w;
    }
    w = w + 4 < t->cols ? w + 4 : t->cols;
    styled_lines lines;
    styled_lines_init(&lines);
    help_wrap(&lines, w - 4 > 1 ? w - 4 : 1);
    int total = (int)lines.n_lines;
    int h = total + 2 < t->rows ? total + 2 : t->rows;
    int body = h - 2 > 0 ? h - 2 : 0;
    t->help_rows = body;
    if (t->help_top > total - body)
        t->help_top = total - body;
    if (t->help_top < 0)
        t->help_top = 0;
    if (t->help_win)
        delwin(t->help_win);
    t->help_win = newwin(h, w, (t->rows - h) / 2, (t->cols - w) / 2);
    if (!t->help_win) {
        styled_lines_free(&lines);
        return;
    }
    int pair = t->pal.pair[THEME_STATUS];
    wattr_set(t->help_win, t->pal.attr[THEME_STATUS] & ~A_REVERSE, 0, &pair);
    werase(t->help_win);
    box(t->help_win, 0, 0);
    for (int i = 0; i < body && t->help_top + i < total; i++) {
        const styled_line *line = &lines.lines[t->help_top + i];
        for (uint32_t r = 0; r < line->n_runs; r++) {
            const styled_run *run = &lines.runs[line->first_run + r];
            mvwaddnstr(t->help_win, i + 1, 2 + run->col, lines.text + run->off, (int)run->len);
        }
    }
    if (t->help_top > 0 && w > 4)
        mvwaddstr(t->help_win, 0, w - 3, "↑");
    if (t->help_top + body < total && w > 4)
        mvwaddstr(t->help_win, h - 1, w - 3, "↓");
    styled_lines_free(&lines);
    wnoutrefresh(t->help_win);
}

void tui_help_toggle(tui *t, int on)
{
    if (on && !t->help)
        t->help_top = 0;
    t->help = on;
    if (!on && t->help_win) {
        delwin(t->help_win);
        t->help_win = NULL;
        touchwin(stdscr);
    }
    t->force = t->dirty = 1;
}

/* The transcript search's query and the match it is on, for the render model to highlight
 * (nothing once the search ended). */
static void search_highlight(tui *t)
{
    const search_result *r = &t->search_hits;
    int on = t->search_mode != SEARCH_OFF && t->search_query.len;
    int text = -1, ordinal = 0;
    if (on && t->search_match >= 0 && t->search_match < r->n) {
        text = r->matches[t->search_match].text;
        ordinal = t->search_match - search_first_from(r, text, 0);
    }
    render_model_set_search(t->rm, on ? t->search_query.data : "", on ? t->search_query.len : 0, text, ordinal,
                            NULL);
}

void tui_paint_now(tui *t)
{
    if (!t->active)
        return;
    tui_layout(t);
    search_highlight(t);
    const rm_frame *f = render_model_frame(t->rm);
    if (t->force)
        render_model_repaint(t->rm), f = render_model_frame(t->rm);
    paint_frame(stdscr, &t->pal, 0, f, t->force);
    t->new_below = f->new_below;
    for (int i = 0; i < f->n_rows && i < t->trans_h && t->row_block; i++)
        t->row_block[i] = f->rows[i].block;
    paint_separator(t, t->trans_h);
    if (t->input_dirty || t->force)
        paint_input(t, t->trans_h + 1);
    paint_status(t, t->rows - 1);
    int cr, cc;
    input_layout(t->in, t->cols, NULL, 0, &cr, &cc);
    if (!t->focus && !t->help && !t->picker && t->approval < 0) {
        curs_set(1);
        move(t->trans_h + 1 + cr - t->input_top, cc < t->cols ? cc : t->cols - 1);
    } else {
        curs_set(0);
    }
    wnoutrefresh(stdscr);
    if (t->picker) {
        paint_overlays_discard(); /* under the picker */
        session_picker_paint(t->picker, &t->pal, t->rows, t->cols);
    }
    if (t->help) {
        paint_overlays_discard(); /* under the help window */
        paint_help(t);
    }
    doupdate();
    paint_overlays_flush();
    t->dirty = t->force = t->input_dirty = 0;
    t->last_paint = monotonic_seconds();
}

void tui_full_redraw(tui *t)
{
    /* inline (--no-alt-screen), a clear of the screen (ED from the top left) would push the
       frame it shows into the terminal's scrollback (tmux, VTE): every line is rewritten instead */
    if (t->opt->no_alt_screen)
        redrawwin(stdscr);
    else
        clearok(curscr, TRUE);
    render_model_repaint(t->rm);
    t->force = t->dirty = 1;
}

void tui_resize(tui *t)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0)
        resizeterm(ws.ws_row, ws.ws_col);
    t->rows = LINES;
    t->cols = COLS;
    t->trans_h = -1;
    if (t->help)
        tui_help_toggle(t, 1);
    erase();
    tui_full_redraw(t);
}
