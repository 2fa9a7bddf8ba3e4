/* markdown: line-by-line markdown-lite layout with resumable state. Every source line is its own
 * paragraph (hard line breaks, as chat answers are written); a line's output depends only on
 * the state at its start, except tables, which are laid out as a whole. */
#include "ui/markdown.h"

#include <stdlib.h>
#include <string.h>

#include "engine/base/array.h"
#include "ui/text_width.h"
#include "ui/theme.h"
#include "ui/wrap.h"

enum { MAX_INDENT = 64, MAX_TABLE_COLUMNS = 64 };

static const char spaces[] =
    "                                                                                ";
enum { SPACES_LEN = sizeof spaces - 1 };

typedef struct {
    styled_lines *out;
    const md_options *o;
    md_state st;
    strbuf line;          /* the displayable form of the current line */
    wrap_piece *pieces;   /* inline pieces of the current line or table */
    size_t n_pieces, cap_pieces;
} ctx;

void md_checkpoint_init(md_checkpoint *cp)
{
    memset(cp, 0, sizeof *cp);
    cp->state.list_indent = -1;
}

static void add_piece(ctx *c, const char *s, size_t len, int element, int attrs)
{
    if (!len)
        return;
    if (c->n_pieces) {
        wrap_piece *last = &c->pieces[c->n_pieces - 1];
        if (last->s + last->len == s && last->element == element && last->attrs == attrs) {
            last->len += len;
            return;
        }
    }
    if (array_reserve(&c->pieces, &c->cap_pieces, c->n_pieces + 1, sizeof *c->pieces)) {
        c->out->failed = 1;
        return;
    }
    c->pieces[c->n_pieces++] = (wrap_piece){s, len, element, attrs};
}

static void add_line_spaces(styled_lines *out, int col, int n, int element)
{
    while (n > 0) {
        int k = n < SPACES_LEN ? n : SPACES_LEN;
        styled_lines_add(out, col, spaces, (size_t)k, k, element, 0);
        col += k;
        n -= k;
    }
}

static int is_punct(char ch)
{
    return (ch >= '!' && ch <= '/') || (ch >= ':' && ch <= '@') || (ch >= '[' && ch <= '`') ||
           (ch >= '{' && ch <= '~');
}

static int is_alnum(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static size_t run_length(const char *s, size_t n, size_t i)
{
    size_t j = i;
    while (j < n && s[j] == s[i])
        j++;
    return j - i;
}

/* Whether a delimiter run of k ch's that can close follows s[from..n). */
static int has_closer(const char *s, size_t n, size_t from, char ch, size_t k)
{
    for (size_t j = from; j < n;) {
        if (s[j] == '\\' && j + 1 < n && is_punct(s[j + 1])) {
            j += 2;
            continue;
        }
        if (s[j] == '`') {
            j += run_length(s, n, j);
            continue;
        }
        if (s[j] != ch) {
            j++;
            continue;
        }
        size_t r = run_length(s, n, j);
        char next = j + r < n ? s[j + r] : ' ';
        if (r == k && j > from && s[j - 1] != ' ' && (ch == '*' || !is_alnum(next)))
            return 1;
        j += r;
    }
    return 0;
}

/* Closing backtick run of exactly k at or after from; n when none. */
static size_t code_close(const char *s, size_t n, size_t from, size_t k)
{
    for (size_t j = from; j < n;) {
        if (s[j] != '`') {
            j++;
            continue;
        }
        size_t r = run_length(s, n, j);
        if (r == k)
            return j;
        j += r;
    }
    return n;
}

static size_t url_end(const char *s, size_t n, size_t i)
{
    size_t j = i;
    while (j < n && s[j] != ' ' && s[j] != '<' && s[j] != '>' && s[j] != '"' && s[j] != '`')
        j++;
    int parens = 0;
    for (size_t k = i; k < j; k++)
        parens += s[k] == '(' ? 1 : s[k] == ')' ? -1 : 0;
    while (j > i && strchr(".,;:!?'*_", s[j - 1]))
        j--;
    while (j > i && s[j - 1] == ')' && parens < 0) {
        j--;
        parens++;
    }
    return j;
}

static int starts_url(const char *s, size_t n, size_t i)
{
    if (i > 0 && is_alnum(s[i - 1]))
        return 0;
    if (n - i > 8 && !memcmp(s + i, "https://", 8))
        return 1;
    return n - i > 7 && !memcmp(s + i, "http://", 7);
}

/* Inline markdown of s[0..n) (displayable) as pieces: **bold**, *italic*, ***both*** (also with
 * _), `code`, backslash escapes and bare http(s) URLs. Unmatched delimiters stay literal. */
static void parse_inline(ctx *c, const char *s, size_t n, int element, int base_attrs)
{
    int bold = 0, italic = 0;
    size_t lit = 0;
#define STYLE (base_attrs | (bold ? THEME_ATTR_BOLD : 0) | (italic ? THEME_ATTR_ITALIC : 0))
    for (size_t i = 0; i < n;) {
        char ch = s[i];
        if (ch == '\\' && i + 1 < n && is_punct(s[i + 1])) {
            add_piece(c, s + lit, i - lit, element, STYLE);
            lit = i + 1;
            i += 2;
            continue;
        }
        if (ch == '`') {
            size_t k = run_length(s, n, i);
            size_t j = code_close(s, n, i + k, k);
            if (j == n) {
                i += k;
                continue;
            }
            add_piece(c, s + lit, i - lit, element, STYLE);
            size_t a = i + k, b = j;
            if (b - a >= 2 && s[a] == ' ' && s[b - 1] == ' ')
                a++, b--;
            add_piece(c, s + a, b - a, THEME_INLINE_CODE, base_attrs);
            i = lit = j + k;
            continue;
        }
        if (ch == '*' || ch == '_') {
            size_t k = run_length(s, n, i);
            char prev = i ? s[i - 1] : ' ', next = i + k < n ? s[i + k] : ' ';
            int can_open = next != ' ' && (ch == '*' || !is_alnum(prev));
            int can_close = prev != ' ' && (ch == '*' || !is_alnum(next));
            int wb = k >= 2, wi = k != 2; /* *: italic, **: bold, ***: both */
            int close = k <= 3 && can_close && (!wb || bold) && (!wi || italic);
            int open = !close && k <= 3 && can_open && !(wb && bold) && !(wi && italic) &&
                       has_closer(s, n, i + k, ch, k);
            if (!close && !open) {
                i += k;
                continue;
            }
            add_piece(c, s + lit, i - lit, element, STYLE);
            if (wb)
                bold = open;
            if (wi)
                italic = open;
            i = lit = i + k;
            continue;
        }
        if (ch == 'h' && starts_url(s, n, i)) {
            size_t j = url_end(s, n, i);
            add_piece(c, s + lit, i - lit, element, STYLE);
            add_piece(c, s + i, j - i, THEME_LINK, STYLE);
            i = lit = j;
            continue;
        }
        i++;
    }
    add_piece(c, s + lit, n - lit, element, STYLE);
#undef STYLE
}

static int leading_spaces(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && s[i] == ' ')
        i++;
    return (int)i;
}

static int is_blank(const char *s, size_t n)
{
    return (size_t)leading_spaces(s, n) == n;
}

static int cap_indent(const ctx *c, int indent)
{
    int cap = c->o->width / 2 < MAX_INDENT ? c->o->width / 2 : MAX_INDENT;
    return indent < cap ? indent : cap;
}

/* Start a content line: pay a blank line owed by the text above. */
static void begin_content(ctx *c)
{
    if (c->st.pending_blank && c->st.has_content)
        styled_lines_end_line(c->out);
    c->st.pending_blank = 0;
    c->st.has_content = 1;
}

static void wrap_current(ctx *c, const wrap_prefix *prefix)
{
    wrap_pieces(c->out, c->pieces, c->n_pieces, c->o->width, prefix);
    c->n_pieces = 0;
}

/* One fenced-code source line, not re-flowed: cut at the width, each row padded to it. */
static void code_line(ctx *c, const char *s, size_t n, int element)
{
    int width = c->o->width;
    size_t p = 0;
    do {
        int w = 0;
        styled_lines_add(c->out, 0, " ", 1, 1, element, 0);
        size_t len = text_fit(s + p, n - p, width - 1, &w);
        if (!len && p < n)
            len = text_cluster(s, n, p, &w);
        styled_lines_add(c->out, 1, s + p, len, w, element, 0);
        add_line_spaces(c->out, 1 + w, width - 1 - w, element);
        styled_lines_end_line(c->out);
        p += len;
    } while (p < n);
}

/* A fence line: ``` or ~~~ (3 or more) after the indent; *len its length. */
static int fence_at(const char *s, size_t n, int indent, char *ch, int *len)
{
    if ((size_t)indent >= n || (s[indent] != '`' && s[indent] != '~'))
        return 0;
    size_t k = run_length(s, n, (size_t)indent);
    if (k < 3)
        return 0;
    if (s[indent] == '`' && memchr(s + indent + k, '`', n - indent - k))
        return 0;
    *ch = s[indent];
    *len = (int)k;
    return 1;
}

static int heading_level(const char *s, size_t n, int indent)
{
    if (indent > 3)
        return 0;
    size_t k = (size_t)indent < n ? run_length(s, n, (size_t)indent) : 0;
    if (!k || s[indent] != '#' || k > 6)
        return 0;
    if ((size_t)indent + k < n && s[indent + k] != ' ')
        return 0;
    return (int)k;
}

static int is_rule(const char *s, size_t n, int indent)
{
    if (indent > 3 || (size_t)indent >= n)
        return 0;
    char ch = s[indent];
    if (ch != '-' && ch != '*' && ch != '_')
        return 0;
    int count = 0;
    for (size_t i = (size_t)indent; i < n; i++) {
        if (s[i] == ch)
            count++;
        else if (s[i] != ' ')
            return 0;
    }
    return count >= 3;
}

/* A list marker at s[indent]: "-", "*", "+" or digits then "." or ")", then a space or the
 * end. Returns the marker's length, 0 when none. */
static size_t list_marker(const char *s, size_t n, int indent)
{
    size_t i = (size_t)indent;
    if (i >= n)
        return 0;
    size_t m = 0;
    if (s[i] == '-' || s[i] == '*' || s[i] == '+') {
        m = 1;
    } else {
        while (i + m < n && m < 9 && s[i + m] >= '0' && s[i + m] <= '9')
            m++;
        if (!m || i + m >= n || (s[i + m] != '.' && s[i + m] != ')'))
            return 0;
        m++;
    }
    if (i + m < n && s[i + m] != ' ')
        return 0;
    return m;
}

static void rule_line(ctx *c)
{
    static const char bar[] = "─";
    for (int i = 0; i < c->o->width; i++)
        styled_lines_add(c->out, i, bar, sizeof bar - 1, 1, THEME_RULE, 0);
    styled_lines_end_line(c->out);
}

/* One markdown source line outside tables (s displayable). */
static void markdown_line(ctx *c, const char *s, size_t n)
{
    int el = c->o->element;
    int indent = leading_spaces(s, n);
    char fch;
    int flen;
    if (c->st.in_fence) {
        if (fence_at(s, n, indent, &fch, &flen) && fch == c->st.fence_char &&
            flen >= c->st.fence_len && is_blank(s + indent + flen, n - indent - (size_t)flen)) {
            c->st.in_fence = 0;
            return;
        }
        int strip = indent < c->st.fence_indent ? indent : c->st.fence_indent;
        begin_content(c);
        code_line(c, s + strip, n - (size_t)strip, THEME_CODE);
        return;
    }
    if (is_blank(s, n)) {
        if (c->st.has_content)
            c->st.pending_blank = 1;
        c->st.list_indent = -1;
        return;
    }
    begin_content(c);
    if (fence_at(s, n, indent, &fch, &flen)) {
        c->st.in_fence = 1;
        c->st.fence_char = fch;
        c->st.fence_len = flen;
        c->st.fence_indent = indent;
        size_t a = (size_t)indent + (size_t)flen;
        while (a < n && s[a] == ' ')
            a++;
        size_t b = a;
        while (b < n && s[b] != ' ')
            b++;
        if (b > a)
            code_line(c, s + a, b - a, THEME_CODE_LABEL);
        return;
    }
    int level = heading_level(s, n, indent);
    if (level) {
        size_t a = (size_t)indent + (size_t)level, b = n;
        while (a < n && s[a] == ' ')
            a++;
        while (b > a && (s[b - 1] == '#' || s[b - 1] == ' '))
            b--;
        c->st.list_indent = -1;
        parse_inline(c, s + a, b - a, THEME_HEADING, level == 1 ? THEME_ATTR_UNDERLINE : 0);
        wrap_current(c, NULL);
        return;
    }
    if (is_rule(s, n, indent)) {
        c->st.list_indent = -1;
        rule_line(c);
        return;
    }
    if (indent <= 3 && s[indent] == '>') {
        /* quote: one bar per level, the text wrapped inside */
        int depth = 0;
        size_t a = (size_t)indent;
        while (a < n && s[a] == '>') {
            depth++;
            a++;
            if (a < n && s[a] == ' ')
                a++;
            while (a < n && s[a] == ' ' && a + 1 < n && s[a + 1] == '>')
                a++;
        }
        static const char bar[] = "│ ";
        wrap_piece pre[16];
        int np = depth < 16 ? depth : 16;
        for (int i = 0; i < np; i++)
            pre[i] = (wrap_piece){bar, sizeof bar - 1, THEME_QUOTE, 0};
        wrap_prefix prefix = {pre, (size_t)np, pre, (size_t)np};
        c->st.list_indent = -1;
        parse_inline(c, s + a, n - a, THEME_QUOTE, 0);
        wrap_current(c, &prefix);
        return;
    }
    size_t m = list_marker(s, n, indent);
    int in = cap_indent(c, indent);
    if (m) {
        static const char bullet[] = "•";
        size_t a = (size_t)indent + m;
        while (a < n && s[a] == ' ')
            a++;
        int ordered = s[indent] >= '0' && s[indent] <= '9';
        int mw = ordered ? (int)m : 1;
        wrap_piece first[3] = {
            {spaces, (size_t)in, THEME_LIST_MARKER, 0},
            {ordered ? s + indent : bullet, ordered ? m : sizeof bullet - 1, THEME_LIST_MARKER, 0},
            {spaces, 1, el, 0},
        };
        wrap_piece next[1] = {{spaces, (size_t)(in + mw + 1), el, 0}};
        wrap_prefix prefix = {first, 3, next, 1};
        c->st.list_indent = in + mw + 1;
        parse_inline(c, s + a, n - a, el, 0);
        wrap_current(c, &prefix);
        return;
    }
    if (c->st.list_indent > in)
        in = c->st.list_indent;
    wrap_piece pad[1] = {{spaces, (size_t)in, el, 0}};
    wrap_prefix prefix = {pad, in ? 1 : 0, pad, in ? 1 : 0};
    parse_inline(c, s + indent, n - (size_t)indent, el, 0);
    wrap_current(c, &prefix);
}

typedef struct {
    size_t a, b; /* a cell's text: s[a..b) */
} span;

/* Split a table row into trimmed cells at '|' outside `code` and not escaped; a leading and a
 * trailing '|' enclose the row. Returns the cell count (at most max). */
static int split_cells(const char *s, size_t n, span *cells, int max)
{
    size_t a = 0, b = n;
    while (a < b && s[a] == ' ')
        a++;
    while (b > a && s[b - 1] == ' ')
        b--;
    if (a < b && s[a] == '|')
        a++;
    if (b > a && s[b - 1] == '|' && !(b - 1 > a && s[b - 2] == '\\'))
        b--;
    int count = 0;
    size_t start = a;
    for (size_t i = a; i <= b && count < max; i++) {
        if (i < b && s[i] == '\\') {
            i++;
            continue;
        }
        if (i < b && s[i] == '`') {
            size_t k = run_length(s, b, i);
            size_t j = code_close(s, b, i + k, k);
            i = j < b ? j + k - 1 : i + k - 1;
            continue;
        }
        if (i == b || s[i] == '|') {
            size_t x = start, y = i;
            while (x < y && s[x] == ' ')
                x++;
            while (y > x && s[y - 1] == ' ')
                y--;
            cells[count++] = (span){x, y};
            start = i + 1;
        }
    }
    return count;
}

enum { ALIGN_LEFT, ALIGN_CENTER, ALIGN_RIGHT };

/* A delimiter row (| --- | :-: | --: |): fills align[] and returns the column count, 0 when
 * the line is not one. */
static int delimiter_row(const char *s, size_t n, int *align)
{
    if (!memchr(s, '-', n))
        return 0;
    span cells[MAX_TABLE_COLUMNS];
    int count = split_cells(s, n, cells, MAX_TABLE_COLUMNS);
    for (int i = 0; i < count; i++) {
        size_t a = cells[i].a, b = cells[i].b;
        int left = a < b && s[a] == ':', right = b > a && s[b - 1] == ':';
        a += (size_t)left;
        b -= (size_t)right && b > a ? 1 : 0;
        if (a >= b)
            return 0;
        for (size_t k = a; k < b; k++)
            if (s[k] != '-')
                return 0;
        align[i] = left && right ? ALIGN_CENTER : right ? ALIGN_RIGHT : ALIGN_LEFT;
    }
    return count;
}

static int pieces_width(const wrap_piece *p, size_t n)
{
    int w = 0;
    for (size_t i = 0; i < n; i++)
        w += text_width(p[i].s, p[i].len);
    return w;
}

static void border_line(ctx *c, const int *colw, int ncol, const char *l, const char *mid,
                        const char *r)
{
    static const char h[] = "─";
    int col = 0;
    styled_lines_add(c->out, col++, l, strlen(l), 1, THEME_TABLE_BORDER, 0);
    for (int k = 0; k < ncol; k++) {
        for (int i = 0; i < colw[k] + 2; i++)
            styled_lines_add(c->out, col++, h, sizeof h - 1, 1, THEME_TABLE_BORDER, 0);
        const char *j = k + 1 < ncol ? mid : r;
        styled_lines_add(c->out, col++, j, strlen(j), 1, THEME_TABLE_BORDER, 0);
    }
    styled_lines_end_line(c->out);
}

/* Column widths that fit the budget: the natural widths when they fit, else every column
 * capped at the largest t that fits (water filling) with the rest handed out one column at a
 * time. Returns 0 when even that leaves a column narrower than 3. */
static int fit_columns(const int *natural, int ncol, int budget, int *colw)
{
    int sum = 0, maxw = 1;
    for (int k = 0; k < ncol; k++) {
        colw[k] = natural[k] > 1 ? natural[k] : 1;
        sum += colw[k];
        maxw = colw[k] > maxw ? colw[k] : maxw;
    }
    if (sum <= budget)
        return 1;
    int lo = 0, hi = maxw; /* largest t with sum(min(w, t)) <= budget */
    while (lo < hi) {
        int t = (lo + hi + 1) / 2, s = 0;
        for (int k = 0; k < ncol; k++)
            s += colw[k] < t ? colw[k] : t;
        if (s <= budget)
            lo = t;
        else
            hi = t - 1;
    }
    if (lo < 3)
        return 0;
    int used = 0;
    for (int k = 0; k < ncol; k++) {
        colw[k] = colw[k] < lo ? colw[k] : lo;
        used += colw[k];
    }
    for (int k = 0; k < ncol && used < budget; k++)
        if (natural[k] > colw[k]) {
            colw[k]++;
            used++;
        }
    return 1;
}

/* A table: rows[0] the header, rows[1] the delimiter, the rest the body, each displayable. */
static void table(ctx *c, const char *text, const span *rows, int n_rows)
{
    int align[MAX_TABLE_COLUMNS];
    int ncol = delimiter_row(text + rows[1].a, rows[1].b - rows[1].a, align);
    int n_cells = (n_rows - 1) * ncol;
    size_t *first = calloc((size_t)n_cells + 1, sizeof *first); /* piece ranges per cell */
    styled_lines *cell = calloc((size_t)ncol, sizeof *cell);
    if (!first || !cell) {
        free(first);
        free(cell);
        c->out->failed = 1;
        return;
    }
    int natural[MAX_TABLE_COLUMNS] = {0};
    c->n_pieces = 0;
    int ci = 0;
    for (int r = 0; r < n_rows; r++) {
        if (r == 1)
            continue;
        const char *s = text + rows[r].a;
        span cells[MAX_TABLE_COLUMNS];
        int got = split_cells(s, rows[r].b - rows[r].a, cells, MAX_TABLE_COLUMNS);
        for (int k = 0; k < ncol; k++, ci++) {
            first[ci] = c->n_pieces;
            if (k < got)
                parse_inline(c, s + cells[k].a, cells[k].b - cells[k].a,
                             r == 0 ? THEME_TABLE_HEADER : c->o->element, 0);
            int w = pieces_width(c->pieces + first[ci], c->n_pieces - first[ci]);
            natural[k] = w > natural[k] ? w : natural[k];
        }
    }
    first[n_cells] = c->n_pieces;
    int colw[MAX_TABLE_COLUMNS];
    if (!fit_columns(natural, ncol, c->o->width - (3 * ncol + 1), colw)) {
        /* Too narrow for boxed columns: each row as one wrapped line, cells between bars. */
        static const char sep[] = " │ ";
        for (int r = 0; r < n_rows - 1; r++) {
            wrap_piece *row = malloc(sizeof *row * (first[(r + 1) * ncol] - first[r * ncol] +
                                                    (size_t)ncol));
            if (!row) {
                c->out->failed = 1;
                break;
            }
            size_t nrow = 0;
            for (int k = 0; k < ncol; k++) {
                if (k)
                    row[nrow++] = (wrap_piece){sep, sizeof sep - 1, THEME_TABLE_BORDER, 0};
                for (size_t i = first[r * ncol + k]; i < first[r * ncol + k + 1]; i++)
                    row[nrow++] = c->pieces[i];
            }
            wrap_pieces(c->out, row, nrow, c->o->width, NULL);
            free(row);
        }
    } else {
        border_line(c, colw, ncol, "┌", "┬", "┐");
        for (int r = 0; r < n_rows - 1; r++) {
            size_t height = 1;
            for (int k = 0; k < ncol; k++) {
                int i = r * ncol + k;
                styled_lines_clear(&cell[k]);
                if (first[i + 1] > first[i])
                    wrap_pieces(&cell[k], c->pieces + first[i], first[i + 1] - first[i], colw[k],
                                NULL);
                height = cell[k].n_lines > height ? cell[k].n_lines : height;
            }
            for (size_t line = 0; line < height; line++) {
                static const char bar[] = "│";
                int col = 0;
                styled_lines_add(c->out, col, bar, sizeof bar - 1, 1, THEME_TABLE_BORDER, 0);
                for (int k = 0; k < ncol; k++) {
                    if (line < cell[k].n_lines) {
                        int lw = cell[k].lines[line].width, room = colw[k] - lw;
                        int shift = align[k] == ALIGN_RIGHT ? room
                                    : align[k] == ALIGN_CENTER ? room / 2
                                                               : 0;
                        styled_lines_copy_runs(c->out, &cell[k], line, col + 2 + shift);
                    }
                    col += colw[k] + 3;
                    styled_lines_add(c->out, col, bar, sizeof bar - 1, 1, THEME_TABLE_BORDER, 0);
                }
                styled_lines_end_line(c->out);
            }
            if (r == 0)
                border_line(c, colw, ncol, "├", "┼", "┤");
        }
        border_line(c, colw, ncol, "└", "┴", "┘");
    }
    for (int k = 0; k < ncol; k++)
        styled_lines_free(&cell[k]);
    free(cell);
    free(first);
    c->n_pieces = 0;
}

/* The line starting at text[p]: its end (the newline or n) and the next line's start. */
static size_t line_end(const char *text, size_t n, size_t p, size_t *next)
{
    const char *nl = memchr(text + p, '\n', n - p);
    size_t end = nl ? (size_t)(nl - text) : n;
    *next = nl ? end + 1 : n;
    return end;
}

/* If the line at text[p] starts a table (a row, then a delimiter row with as many cells), lay
 * it out with its body rows and return the offset after it; else return p. */
static size_t try_table(ctx *c, const char *text, size_t n, size_t p)
{
    size_t next, end = line_end(text, n, p, &next);
    if (next >= n && end == n)
        return p; /* no second line yet */
    strbuf rows_text = {0};
    span rows[1024];
    int n_rows = 0;
    size_t q = p;
    while (q < n && n_rows < (int)(sizeof rows / sizeof rows[0])) {
        size_t qn, qe = line_end(text, n, q, &qn);
        if (n_rows >= 1 && (is_blank(text + q, qe - q) || !memchr(text + q, '|', qe - q)))
            break;
        size_t a = rows_text.len;
        text_displayable(&rows_text, text + q, qe - q);
        rows[n_rows++] = (span){a, rows_text.len};
        /* apart: a row's last cell and the next row's first would be one piece (add_piece joins
           adjacent text) where the rows have no outer pipes */
        strbuf_add(&rows_text, "\n", 1);
        if (n_rows == 2) {
            int align[MAX_TABLE_COLUMNS];
            span cells[MAX_TABLE_COLUMNS];
            const char *t = rows_text.data ? rows_text.data : "";
            int header = split_cells(t + rows[0].a, rows[0].b - rows[0].a, cells, MAX_TABLE_COLUMNS);
            int delim = delimiter_row(t + rows[1].a, rows[1].b - rows[1].a, align);
            if (!delim || delim != header) {
                n_rows = 0;
                break;
            }
        }
        q = qn;
    }
    if (n_rows < 2 || rows_text.failed || q == p) {
        free(rows_text.data);
        return p;
    }
    begin_content(c);
    c->st.list_indent = -1;
    table(c, rows_text.data, rows, n_rows);
    free(rows_text.data);
    return q;
}

void md_layout(styled_lines *out, const char *text, size_t n, const md_options *o,
               md_checkpoint *cp)
{
    styled_lines_truncate(out, cp->n_lines);
    ctx c = {.out = out, .o = o, .st = cp->state};
    int plain = o->flags & MD_PLAIN;
    /* the line before had a '|': it may be a table's header or last row, decided by this line,
       so a checkpoint here waits until this line is whole */
    int after_pipe = 0;
    for (size_t p = cp->offset; p < n;) {
        size_t next, end = line_end(text, n, p, &next);
        int maybe_table = !plain && !c.st.in_fence && memchr(text + p, '|', end - p);
        if (!maybe_table) {
            if (!after_pipe || end < n) {
                cp->state = c.st;
                cp->offset = p;
                cp->n_lines = out->n_lines;
            }
        } else {
            size_t after = try_table(&c, text, n, p);
            if (after != p) {
                p = after;
                after_pipe = 1;
                continue;
            }
        }
        after_pipe = maybe_table;
        c.line.len = 0;
        text_displayable(&c.line, text + p, end - p);
        const char *s = c.line.data ? c.line.data : "";
        if (c.line.failed) {
            out->failed = 1;
            break;
        }
        if (plain) {
            c.n_pieces = 0;
            add_piece(&c, s, c.line.len, o->element, 0);
            wrap_current(&c, NULL);
        } else {
            markdown_line(&c, s, c.line.len);
        }
        p = next;
    }
    free(c.line.data);
    free(c.pieces);
}
