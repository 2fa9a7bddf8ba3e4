/* wrap: greedy line breaking over styled pieces by grapheme cluster. */
#include "ui/wrap.h"

#include "ui/text_width.h"

typedef struct {
    size_t pi, off; /* pieces[pi].s + off */
} pos;

typedef struct {
    styled_lines *out;
    const wrap_piece *p;
    size_t n;
    int width;
    const wrap_prefix *prefix;
    int col;        /* next free column of the open line */
    int text_col;   /* where the open line's text starts (after its prefix) */
    size_t lines;
} wrapper;

static int is_end(const wrapper *w, pos a)
{
    return a.pi >= w->n;
}

/* Skip empty pieces and piece ends so that a names a cluster or the end. */
static pos normalize(const wrapper *w, pos a)
{
    while (a.pi < w->n && a.off >= w->p[a.pi].len) {
        a.pi++;
        a.off = 0;
    }
    return a;
}

static size_t cluster_at(const wrapper *w, pos a, int *width)
{
    return text_cluster(w->p[a.pi].s, w->p[a.pi].len, a.off, width);
}

static void emit_prefix(wrapper *w, const wrap_piece *pre, size_t n)
{
    w->col = 0;
    for (size_t i = 0; i < n; i++) {
        int pw = text_width(pre[i].s, pre[i].len);
        styled_lines_add(w->out, w->col, pre[i].s, pre[i].len, pw, pre[i].element, pre[i].attrs);
        w->col += pw;
    }
    w->text_col = w->col;
}

/* A soft wrap; `spaces` spaces of the text dropped at it. */
static void break_line(wrapper *w, int spaces)
{
    styled_lines_set_text_col(w->out, w->text_col);
    styled_lines_end_line(w->out);
    styled_lines_set_join(w->out, spaces);
    w->lines++;
    if (w->prefix)
        emit_prefix(w, w->prefix->next, w->prefix->n_next);
    else
        w->col = w->text_col = 0;
}

/* Emit [a, b) on the open line without breaking. */
static void emit_range(wrapper *w, pos a, pos b)
{
    while (a.pi < b.pi || (a.pi == b.pi && a.off < b.off)) {
        const wrap_piece *pc = &w->p[a.pi];
        size_t end = a.pi == b.pi ? b.off : pc->len;
        int rw = text_width(pc->s + a.off, end - a.off);
        styled_lines_add(w->out, w->col, pc->s + a.off, end - a.off, rw, pc->element, pc->attrs);
        w->col += rw;
        a.pi++;
        a.off = 0;
    }
}

/* Emit the word [a, b) cluster by cluster, breaking lines where it does not fit. */
static void emit_broken(wrapper *w, pos a, pos b)
{
    while (a.pi < b.pi || (a.pi == b.pi && a.off < b.off)) {
        a = normalize(w, a);
        if (a.pi > b.pi || (a.pi == b.pi && a.off >= b.off))
            break;
        const wrap_piece *pc = &w->p[a.pi];
        size_t end = a.pi == b.pi ? b.off : pc->len;
        /* As many whole clusters of this piece as fit; at least one on an empty line. */
        int fw;
        size_t len = text_fit(pc->s + a.off, end - a.off, w->width - w->col, &fw);
        if (!len) {
            if (w->col > w->text_col) {
                break_line(w, 0);
                continue;
            }
            len = text_cluster(pc->s, end, a.off, &fw);
        }
        styled_lines_add(w->out, w->col, pc->s + a.off, len, fw, pc->element, pc->attrs);
        w->col += fw;
        a.off += len;
    }
}

size_t wrap_pieces(styled_lines *out, const wrap_piece *pieces, size_t n, int width,
                   const wrap_prefix *prefix)
{
    wrapper w = {.out = out, .p = pieces, .n = n, .width = width, .prefix = prefix};
    if (prefix)
        emit_prefix(&w, prefix->first, prefix->n_first);
    int first_line = 1; /* nothing broken yet: leading spaces are kept */
    pos a = normalize(&w, (pos){0, 0});
    while (!is_end(&w, a)) {
        /* spaces */
        pos sp = a;
        int sw = 0;
        while (!is_end(&w, a) && w.p[a.pi].s[a.off] == ' ') {
            sw++;
            a.off++;
            a = normalize(&w, a);
        }
        if (is_end(&w, a))
            break; /* trailing spaces are not painted */
        /* a word: clusters up to the next space; a wide cluster is a word of its own */
        pos b = a;
        int ww = 0, cw;
        size_t len = cluster_at(&w, b, &cw);
        ww = cw;
        b.off += len;
        b = normalize(&w, b);
        if (cw < 2) {
            while (!is_end(&w, b) && w.p[b.pi].s[b.off] != ' ') {
                len = cluster_at(&w, b, &cw);
                if (cw == 2)
                    break;
                ww += cw;
                b.off += len;
                b = normalize(&w, b);
            }
        }
        int line_empty = w.col == w.text_col;
        if (line_empty && !first_line) {
            /* a wrapped line does not start with the spaces of the break */
            styled_lines_set_join(out, out->open_join - 1 + sw);
            sw = 0;
        } else if (w.col + sw + ww > w.width && !line_empty) {
            break_line(&w, sw);
            first_line = 0;
            sw = 0;
        }
        if (sw) {
            if (w.col + sw > w.width) {
                /* leading spaces wider than the line: keep what fits */
                sw = w.width - w.col > 0 ? w.width - w.col : 0;
            }
            pos sp_end = sp;
            for (int i = 0; i < sw; i++) {
                sp_end.off++;
                sp_end = normalize(&w, sp_end);
            }
            emit_range(&w, sp, sp_end);
        }
        if (w.col + ww <= w.width)
            emit_range(&w, a, b);
        else
            emit_broken(&w, a, b);
        if (w.lines)
            first_line = 0;
        a = b;
    }
    styled_lines_set_text_col(out, w.text_col);
    styled_lines_end_line(out);
    return w.lines + 1;
}
