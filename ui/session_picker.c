/* session_picker: the /sessions overlay. */
#include "ui/session_picker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/array.h"
#include "ui/text_width.h"

/* The widest the overlay gets: a row's fields and a title of 60 bytes, with room to spare. */
enum { PICKER_MAX_WIDTH = 110 };

int session_picker_open(session_picker *p, const char *dir, kimi_err *err)
{
    *p = (session_picker){.page = 1};
    if (!(p->dir = strdup(dir)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    int rc = session_list(p->dir, &p->entries, &p->n, err);
    if (rc) {
        free(p->dir);
        *p = (session_picker){0};
    }
    return rc;
}

int session_picker_reload(session_picker *p, kimi_err *err)
{
    session_entry *entries;
    int n;
    if (session_list(p->dir, &entries, &n, err))
        return err->code;
    session_list_free(p->entries, p->n);
    p->entries = entries;
    p->n = n;
    if (p->selected >= n)
        p->selected = n ? n - 1 : 0;
    return 0;
}

void session_picker_close(session_picker *p)
{
    if (p->win)
        delwin(p->win);
    session_list_free(p->entries, p->n);
    free(p->dir);
    *p = (session_picker){0};
}

const char *session_picker_path(const session_picker *p)
{
    return p->selected < p->n ? p->entries[p->selected].path : NULL;
}

char *session_picker_name(const session_picker *p)
{
    const char *path = session_picker_path(p);
    if (!path)
        return NULL;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    return strndup(base, len > 5 && !strcmp(base + len - 5, ".json") ? len - 5 : len);
}

void session_picker_note(session_picker *p, const char *text)
{
    snprintf(p->note, sizeof p->note, "%s", text);
}

static void move_to(session_picker *p, int i)
{
    p->selected = i < 0 || !p->n ? 0 : i >= p->n ? p->n - 1 : i;
}

picker_action session_picker_key(session_picker *p, int key, int is_char)
{
    p->note[0] = 0;
    if (p->confirm) {
        p->confirm = 0;
        if (is_char && (key == 'y' || key == 'Y'))
            return PICKER_DELETE;
        session_picker_note(p, "not deleted");
        return PICKER_KEEP;
    }
    if (is_char) {
        switch (key) {
        case 27: case 'q': case 3: return PICKER_CLOSE;   /* Esc, q, Ctrl-C */
        case '\r': case '\n': return p->n ? PICKER_LOAD : PICKER_KEEP;
        case 'k': move_to(p, p->selected - 1); break;
        case 'j': move_to(p, p->selected + 1); break;
        case 'd': case 'D': p->confirm = p->n > 0; break;
        }
        return PICKER_KEEP;
    }
    switch (key) {
    case KEY_UP: move_to(p, p->selected - 1); break;
    case KEY_DOWN: move_to(p, p->selected + 1); break;
    case KEY_PPAGE: move_to(p, p->selected - p->page); break;
    case KEY_NPAGE: move_to(p, p->selected + p->page); break;
    case KEY_HOME: move_to(p, 0); break;
    case KEY_END: move_to(p, p->n - 1); break;
    case KEY_ENTER: return p->n ? PICKER_LOAD : PICKER_KEEP;
    case KEY_DC: p->confirm = p->n > 0; break;
    }
    return PICKER_KEEP;
}

/* text (made displayable) at row y from column x, cut to width columns. */
static void put_cut(WINDOW *w, int y, int x, const char *text, int width)
{
    if (width <= 0)
        return;
    strbuf shown = {0};
    text_displayable(&shown, text, strlen(text));
    if (!shown.failed && shown.len) {
        wmove(w, y, x);
        paint_text(w, shown.data, text_fit(shown.data, shown.len, width, NULL));
    }
    free(shown.data);
}

/* The length of entry i's name (its file name without .json); *base: where it starts. */
static int name_length(const session_picker *p, int i, const char **base)
{
    const char *path = p->entries[i].path;
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    size_t len = strlen(*base);
    return (int)(len > 5 && !strcmp(*base + len - 5, ".json") ? len - 5 : len);
}

/* One entry's row: "NAME  2026-12-01 11:40  12 messages  first user line", the name padded to
 * name_width. */
static void entry_row(const session_picker *p, int i, int name_width, char *out, size_t size)
{
    const session_entry *e = &p->entries[i];
    const char *base;
    int name_len = name_length(p, i, &base);
    char when[32] = "";
    struct tm tm;
    if (localtime_r(&e->modified, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
    snprintf(out, size, "%-*.*s  %s  %3d message%s  %s", name_width, name_len, base, when, e->n_messages,
             e->n_messages == 1 ? "" : "s", e->title ? e->title : "");
}

void session_picker_paint(session_picker *p, const paint_palette *pal, int rows, int cols)
{
    if (p->win)
        delwin(p->win);
    p->win = NULL;
    int w = cols < PICKER_MAX_WIDTH ? cols : PICKER_MAX_WIDTH;
    int want = (p->n ? p->n : 1) + 3;     /* borders, the list, the line under it */
    int h = want < rows ? want : rows;
    if (h < 3 || w < 4)
        return;     /* no room for even the line under the list: the keys still work */
    if (!(p->win = newwin(h, w, (rows - h) / 2, (cols - w) / 2)))
        return;
    int body = h - 3;
    p->page = body > 1 ? body : 1;
    if (p->selected < p->top)
        p->top = p->selected;
    if (p->selected >= p->top + body)
        p->top = p->selected - body + 1;
    if (p->top > p->n - body)
        p->top = p->n - body;
    if (p->top < 0)
        p->top = 0;

    WINDOW *win = p->win;
    attr_t base = pal->attr[THEME_STATUS] & ~A_REVERSE;
    int pair = pal->pair[THEME_STATUS];
    wattr_set(win, base, 0, &pair);
    werase(win);
    box(win, 0, 0);
    char line[512];
    snprintf(line, sizeof line, " sessions (%d) ", p->n);
    put_cut(win, 0, 2, line, w - 4);
    int name_width = 0;     /* the names' column, as wide as the longest shown (at most 32) */
    for (int i = p->top; i < p->top + body && i < p->n; i++) {
        const char *base;
        int len = name_length(p, i, &base);
        name_width = len > name_width ? (len < 32 ? len : 32) : name_width;
    }
    for (int r = 0; r < body; r++) {
        int i = p->top + r;
        if (i >= p->n) {
            if (!p->n && r == 0) {
                snprintf(line, sizeof line, "no saved sessions in %s", p->dir);
                put_cut(win, 1, 2, line, w - 3);
            }
            break;
        }
        entry_row(p, i, name_width, line, sizeof line);
        wattr_set(win, i == p->selected ? base | A_REVERSE : base, 0, &pair);
        mvwhline(win, 1 + r, 1, ' ', w - 2);
        put_cut(win, 1 + r, 2, line, w - 3);
        wattr_set(win, base, 0, &pair);
    }
    char *name = p->confirm ? session_picker_name(p) : NULL;
    if (name) {
        snprintf(line, sizeof line, "delete %s? y/n", name);
        int accent = pal->pair[THEME_STATUS_ACCENT];
        wattr_set(win, (pal->attr[THEME_STATUS_ACCENT] & ~A_REVERSE) | A_BOLD, 0, &accent);
    } else {
        snprintf(line, sizeof line, "%s", p->note[0] ? p->note
                                          : p->n   ? "↑↓ move · Enter load · d delete · Esc close"
                                                   : "Esc close");
    }
    free(name);
    put_cut(win, h - 2, 2, line, w - 3);
    wattr_set(win, base, 0, &pair);
    if (p->top > 0 && w > 4)
        mvwaddstr(win, 0, w - 3, "↑");
    if (p->top + body < p->n && w > 4)
        mvwaddstr(win, h - 1, w - 3, "↓");
    wnoutrefresh(win);
}
