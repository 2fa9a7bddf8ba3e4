/* input: the multi-line line editor of the full-screen view (no curses: unit-tested alone). */
#include "ui/input.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/array.h"
#include "engine/text/utf8.h"
#include "ui/text_width.h"

typedef struct {
    char *s;
    size_t len, cap;
} text;

struct input {
    text t;                 /* the text being edited */
    size_t cursor;          /* byte offset into t */
    text killed;            /* Ctrl-Y brings it back */
    char **hist;            /* [n_hist] oldest first */
    int n_hist;
    int hist_pos;           /* n_hist: the text being typed; else the entry shown */
    text typed;             /* what was being typed before walking the history */
    char *hist_path;        /* where new entries are appended; NULL: nowhere */
    /* Ctrl-R */
    int searching;
    text query;
    int match;              /* entry index of the match shown, -1 none */
    int failed;
    text before;            /* the text before the search began */
    size_t before_cursor;
};

static void text_set(text *t, const char *s, size_t n)
{
    t->len = 0;
    if (t->s)
        t->s[0] = 0;
    if (n)
        text_append(&t->s, &t->len, &t->cap, s, n);
}

static void text_insert(text *t, size_t at, const char *s, size_t n)
{
    size_t old = t->len;
    if (!n || text_append(&t->s, &t->len, &t->cap, s, n))
        return;
    memmove(t->s + at + n, t->s + at, old - at);
    memcpy(t->s + at, s, n);
    t->s[t->len] = 0;
}

static void text_erase(text *t, size_t from, size_t to)
{
    memmove(t->s + from, t->s + to, t->len - to);
    t->len -= to - from;
    t->s[t->len] = 0;
}

input *input_new(void)
{
    input *in = calloc(1, sizeof *in);
    if (in)
        in->match = -1;
    return in;
}

void input_free(input *in)
{
    if (!in)
        return;
    free(in->t.s);
    free(in->killed.s);
    free(in->typed.s);
    free(in->query.s);
    free(in->before.s);
    for (int i = 0; i < in->n_hist; i++)
        free(in->hist[i]);
    free(in->hist);
    free(in->hist_path);
    free(in);
}

const char *input_text(const input *in, size_t *len)
{
    if (len)
        *len = in->t.len;
    return in->t.s ? in->t.s : "";
}

size_t input_cursor(const input *in) { return in->cursor; }
int input_is_empty(const input *in) { return in->t.len == 0; }

void input_set_text(input *in, const char *s, size_t len)
{
    text_set(&in->t, "", 0);
    in->cursor = 0;
    input_insert(in, s, len);
}

void input_set_cursor(input *in, size_t pos)
{
    if (pos > in->t.len)
        pos = in->t.len;
    while (pos > 0 && pos < in->t.len && ((unsigned char)in->t.s[pos] & 0xC0) == 0x80)
        pos--;
    in->cursor = pos;
}

void input_clear(input *in)
{
    input_set_text(in, "", 0);
    in->hist_pos = in->n_hist;
}

void input_insert(input *in, const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    text clean = {0};
    for (size_t i = 0; i < len;) {
        if (u[i] == '\r') {
            text_append(&clean.s, &clean.len, &clean.cap, "\n", 1);
            i += i + 1 < len && u[i + 1] == '\n' ? 2 : 1;
        } else if (u[i] == '\n' || u[i] == '\t') {
            text_append(&clean.s, &clean.len, &clean.cap, s + i, 1);
            i++;
        } else if (u[i] < 0x20 || u[i] == 0x7f) {
            i++;
        } else {
            size_t n;
            if (utf8_sequence(u + i, len - i, &n) != UTF8_OK)
                n = 0; /* each byte of an ill-formed or cut sequence is one U+FFFD */
            if (n == 2 && u[i] == 0xc2 && u[i + 1] < 0xa0)
                ;   /* a C1 control, dropped as the C0 ones */
            else if (n)
                text_append(&clean.s, &clean.len, &clean.cap, s + i, n);
            else    /* shown and sent as U+FFFD, not dropped: the user sees that a byte was bad */
                text_append(&clean.s, &clean.len, &clean.cap, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
            i += n ? n : 1;
        }
    }
    text_insert(&in->t, in->cursor, clean.s, clean.len);
    if (clean.len && in->t.s && in->t.len >= in->cursor + clean.len)
        in->cursor += clean.len;
    free(clean.s);
}

/* ---- positions ---- */

static size_t line_start(const input *in, size_t pos)
{
    while (pos > 0 && in->t.s[pos - 1] != '\n')
        pos--;
    return pos;
}

static size_t line_end(const input *in, size_t pos)
{
    while (pos < in->t.len && in->t.s[pos] != '\n')
        pos++;
    return pos;
}

/* The cluster boundary after pos (a newline is one cluster). */
static size_t next_pos(const input *in, size_t pos)
{
    if (pos >= in->t.len)
        return in->t.len;
    if (in->t.s[pos] == '\n')
        return pos + 1;
    int w;
    size_t end = line_end(in, pos);
    return pos + text_cluster(in->t.s, end, pos, &w);
}

/* The cluster boundary before pos. */
static size_t prev_pos(const input *in, size_t pos)
{
    if (pos == 0)
        return 0;
    if (in->t.s[pos - 1] == '\n')
        return pos - 1;
    size_t p = line_start(in, pos - 1), last = p;
    while (p < pos) {
        last = p;
        p = next_pos(in, p);
    }
    return last;
}

static int is_word(unsigned char c) { return c >= 0x80 || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '_'; }

static size_t word_left(const input *in, size_t pos)
{
    while (pos > 0 && !is_word((unsigned char)in->t.s[pos - 1]))
        pos--;
    while (pos > 0 && is_word((unsigned char)in->t.s[pos - 1]))
        pos--;
    /* never stop inside a UTF-8 sequence */
    while (pos > 0 && ((unsigned char)in->t.s[pos] & 0xc0) == 0x80)
        pos--;
    return pos;
}

static size_t word_right(const input *in, size_t pos)
{
    while (pos < in->t.len && !is_word((unsigned char)in->t.s[pos]))
        pos++;
    while (pos < in->t.len && is_word((unsigned char)in->t.s[pos]))
        pos++;
    return pos;
}

static void kill_range(input *in, size_t from, size_t to)
{
    if (to <= from)
        return;
    text_set(&in->killed, in->t.s + from, to - from);
    text_erase(&in->t, from, to);
    in->cursor = from;
}

void input_edit_apply(input *in, input_edit op)
{
    size_t c = in->cursor;
    switch (op) {
    case INPUT_LEFT: in->cursor = prev_pos(in, c); break;
    case INPUT_RIGHT: in->cursor = next_pos(in, c); break;
    case INPUT_WORD_LEFT: in->cursor = word_left(in, c); break;
    case INPUT_WORD_RIGHT: in->cursor = word_right(in, c); break;
    case INPUT_LINE_START: in->cursor = line_start(in, c); break;
    case INPUT_LINE_END: in->cursor = line_end(in, c); break;
    case INPUT_BACKSPACE: {
        size_t p = prev_pos(in, c);
        if (p < c) {
            text_erase(&in->t, p, c);
            in->cursor = p;
        }
        break;
    }
    case INPUT_DELETE: {
        size_t p = next_pos(in, c);
        if (p > c)
            text_erase(&in->t, c, p);
        break;
    }
    case INPUT_KILL_TO_END: {
        size_t e = line_end(in, c);
        kill_range(in, c, e > c ? e : next_pos(in, c));
        break;
    }
    case INPUT_KILL_TO_START: kill_range(in, line_start(in, c), c); break;
    case INPUT_KILL_WORD_BACK: {
        size_t p = c;
        while (p > 0 && (in->t.s[p - 1] == ' ' || in->t.s[p - 1] == '\n'))
            p--;
        while (p > 0 && in->t.s[p - 1] != ' ' && in->t.s[p - 1] != '\n')
            p--;
        kill_range(in, p, c);
        break;
    }
    case INPUT_YANK:
        if (in->killed.len) {
            text_insert(&in->t, c, in->killed.s, in->killed.len);
            in->cursor = c + in->killed.len;
        }
        break;
    }
}

/* ---- layout ---- */

/* The cluster at s[p] of a row at column col (of room): a tab reaches the next tab stop, as
 * the view shows it (text_displayable), but never past the row's end. */
static size_t cluster_in_row(const char *s, size_t e, size_t p, int col, int room, int *w)
{
    if (s[p] == '\t') {
        *w = TEXT_TAB_STOP - col % TEXT_TAB_STOP;
        if (col < room && col + *w > room)
            *w = room - col;
        return 1;
    }
    return text_cluster(s, e, p, w);
}

int input_layout(const input *in, int width, input_row *rows, int cap, int *cur_row, int *cur_col)
{
    int room = width - INPUT_PROMPT_WIDTH;
    if (room < 1)
        room = 1;
    const char *s = in->t.s ? in->t.s : "";
    size_t n = in->t.len;
    int row = 0, col = 0;
    size_t start = 0;
    *cur_row = 0;
    *cur_col = INPUT_PROMPT_WIDTH;
    for (size_t p = 0;;) {
        if (p == in->cursor) {
            *cur_row = row;
            *cur_col = INPUT_PROMPT_WIDTH + col;
        }
        if (p >= n || s[p] == '\n') {
            if (row < cap)
                rows[row] = (input_row){start, p};
            if (p >= n)
                break;
            row++;
            col = 0;
            start = ++p;
            continue;
        }
        int w;
        size_t e = line_end(in, p);
        size_t len = cluster_in_row(s, e, p, col, room, &w);
        if (col + w > room && col > 0) {
            if (row < cap)
                rows[row] = (input_row){start, p};
            row++;
            col = 0;
            start = p;
            if (p == in->cursor) {
                *cur_row = row;
                *cur_col = INPUT_PROMPT_WIDTH;
            }
        }
        col += w;
        p += len;
    }
    /* a cursor after a full last row sits on a fresh row */
    if (*cur_col >= width && width > INPUT_PROMPT_WIDTH) {
        (*cur_row)++;
        *cur_col = INPUT_PROMPT_WIDTH;
        if (*cur_row > row) {
            row++;
            if (row < cap)
                rows[row] = (input_row){n, n};
        }
    }
    return row + 1;
}

/* The byte offset in row r whose column is the largest not past col. */
static size_t offset_at(const input *in, const input_row *r, int col)
{
    int x = INPUT_PROMPT_WIDTH, w;
    size_t p = r->start;
    while (p < r->end) {
        size_t len = cluster_in_row(in->t.s, r->end, p, x - INPUT_PROMPT_WIDTH, INT_MAX, &w);
        if (x + w > col)
            break;
        x += w;
        p += len;
    }
    return p;
}

static int line_step(input *in, int width, int dir)
{
    int cr, cc;
    int n = input_layout(in, width, NULL, 0, &cr, &cc);
    int target = cr + dir;
    if (target < 0 || target >= n)
        return 0;
    input_row *rows = malloc(sizeof *rows * (size_t)n);
    if (!rows)
        return 0;
    input_layout(in, width, rows, n, &cr, &cc);
    in->cursor = offset_at(in, &rows[target], cc);
    free(rows);
    return 1;
}

int input_line_up(input *in, int width) { return line_step(in, width, -1); }
int input_line_down(input *in, int width) { return line_step(in, width, 1); }

/* ---- history ---- */

static void hist_push(input *in, const char *s, size_t len)
{
    if (in->n_hist && strlen(in->hist[in->n_hist - 1]) == len && !memcmp(in->hist[in->n_hist - 1], s, len))
        return;
    char *copy = malloc(len + 1);
    if (!copy)
        return;
    memcpy(copy, s, len);
    copy[len] = 0;
    if (in->n_hist == INPUT_HISTORY_MAX) {
        free(in->hist[0]);
        memmove(in->hist, in->hist + 1, sizeof *in->hist * (size_t)(in->n_hist - 1));
        in->n_hist--;
    } else {
        char **grown = realloc(in->hist, sizeof *grown * (size_t)(in->n_hist + 1));
        if (!grown) {
            free(copy);
            return;
        }
        in->hist = grown;
    }
    in->hist[in->n_hist++] = copy;
}

void input_history_load(input *in, const char *path)
{
    free(in->hist_path);
    in->hist_path = path ? strdup(path) : NULL;
    FILE *f = path ? fopen(path, "r") : NULL;
    if (f) {
        char *line = NULL;
        size_t cap = 0;
        ssize_t got;
        text entry = {0};
        while ((got = getline(&line, &cap, f)) >= 0) {
            size_t n = (size_t)got;
            if (n && line[n - 1] == '\n')
                n--;
            if (n && line[n - 1] == '\\') {
                text_append(&entry.s, &entry.len, &entry.cap, line, n - 1);
                text_append(&entry.s, &entry.len, &entry.cap, "\n", 1);
                continue;
            }
            text_append(&entry.s, &entry.len, &entry.cap, line, n);
            if (entry.len)
                hist_push(in, entry.s, entry.len);
            entry.len = 0;
        }
        if (entry.len)
            hist_push(in, entry.s, entry.len);
        free(entry.s);
        free(line);
        fclose(f);
    }
    in->hist_pos = in->n_hist;
}

/* The history file for appending, 0600 like every file that holds conversation text: created
 * so, and an older one others can read (fopen "a" made them 0644) taken back to 0600. */
static FILE *open_private_append(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077))
        fchmod(fd, 0600);
    FILE *f = fdopen(fd, "a");
    if (!f)
        close(fd);
    return f;
}

void input_history_add(input *in, const char *s, size_t len)
{
    if (!len)
        return;
    int before = in->n_hist;
    const char *newest = before ? in->hist[before - 1] : NULL;
    int repeat = newest && strlen(newest) == len && !memcmp(newest, s, len);
    hist_push(in, s, len);
    in->hist_pos = in->n_hist;
    FILE *f = !repeat && in->hist_path ? open_private_append(in->hist_path) : NULL;
    if (f) {
        for (size_t i = 0; i < len; i++) {
            if (s[i] == '\n')
                fputc('\\', f);
            fputc(s[i], f);
        }
        fputc('\n', f);
        fclose(f);
    }
}

int input_history_count(const input *in) { return in->n_hist; }

int input_history_prev(input *in)
{
    if (in->hist_pos == 0)
        return 0;
    if (in->hist_pos == in->n_hist)
        text_set(&in->typed, in->t.s ? in->t.s : "", in->t.len);
    in->hist_pos--;
    input_set_text(in, in->hist[in->hist_pos], strlen(in->hist[in->hist_pos]));
    return 1;
}

int input_history_next(input *in)
{
    if (in->hist_pos >= in->n_hist)
        return 0;
    in->hist_pos++;
    if (in->hist_pos == in->n_hist)
        input_set_text(in, in->typed.s ? in->typed.s : "", in->typed.len);
    else
        input_set_text(in, in->hist[in->hist_pos], strlen(in->hist[in->hist_pos]));
    return 1;
}

/* ---- Ctrl-R ---- */

/* Find the newest entry at or before index from that contains the query. */
static void search_from(input *in, int from)
{
    for (int i = from; i >= 0; i--) {
        const char *hit = in->query.len ? strstr(in->hist[i], in->query.s) : NULL;
        if (hit) {
            in->match = i;
            in->failed = 0;
            input_set_text(in, in->hist[i], strlen(in->hist[i]));
            in->cursor = (size_t)(hit - in->hist[i]);
            return;
        }
    }
    in->failed = in->query.len > 0;
}

void input_search_start(input *in)
{
    if (in->searching)
        return;
    in->searching = 1;
    in->failed = 0;
    in->match = -1;
    text_set(&in->query, "", 0);
    text_set(&in->before, in->t.s ? in->t.s : "", in->t.len);
    in->before_cursor = in->cursor;
}

void input_search_type(input *in, const char *s, size_t len)
{
    text_append(&in->query.s, &in->query.len, &in->query.cap, s, len);
    search_from(in, in->match >= 0 ? in->match : in->n_hist - 1);
}

void input_search_backspace(input *in)
{
    if (!in->query.len)
        return;
    size_t p = in->query.len - 1;
    while (p > 0 && ((unsigned char)in->query.s[p] & 0xc0) == 0x80)
        p--;
    in->query.len = p;
    in->query.s[p] = 0;
    in->match = -1;
    in->failed = 0;
    if (p)
        search_from(in, in->n_hist - 1);
    else
        input_set_text(in, in->before.s ? in->before.s : "", in->before.len);
}

void input_search_older(input *in)
{
    if (!in->query.len)
        return;
    search_from(in, in->match >= 0 ? in->match - 1 : in->n_hist - 1);
}

void input_search_accept(input *in)
{
    in->searching = 0;
    in->failed = 0;
    in->hist_pos = in->n_hist;
}

void input_search_cancel(input *in)
{
    in->searching = 0;
    in->failed = 0;
    input_set_text(in, in->before.s ? in->before.s : "", in->before.len);
    in->cursor = in->before_cursor;
}

int input_searching(const input *in) { return in->searching; }
const char *input_search_query(const input *in) { return in->query.s ? in->query.s : ""; }
int input_search_failed(const input *in) { return in->failed; }
