/* search_marks: search matches located in styled lines, joined across soft wraps. */
#include "ui/search_marks.h"

#include <stdlib.h>

#include "ui/text_width.h"

void search_marks_free(search_marks *m)
{
    free(m->joined.data);
    free(m->pieces);
    search_result_free(&m->found);
    free(m->marks);
    *m = (search_marks){0};
}

static const char spaces[] = "                                ";

static void add_spaces(strbuf *b, int n)
{
    for (; n > 0; n -= (int)sizeof spaces - 1)
        strbuf_add(b, spaces, n < (int)sizeof spaces - 1 ? (size_t)n : sizeof spaces - 1);
}

/* Code points on line i (an upper bound of what a match can take from it). */
static size_t line_points(const styled_lines *l, size_t i)
{
    const styled_line *ln = &l->lines[i];
    size_t n = 0;
    for (uint32_t r = 0; r < ln->n_runs; r++) {
        const styled_run *run = &l->runs[ln->first_run + r];
        for (uint32_t k = 0; k < run->len; k++)
            n += ((unsigned char)l->text[run->off + k] & 0xC0) != 0x80;
    }
    return n;
}

/* Lines [first, last] (a soft-wrapped chain) into m->joined and m->pieces: each line's text from
 * its text column, gaps between runs as spaces, the spaces a wrap dropped between lines. */
static int join_lines(search_marks *m, const styled_lines *l, size_t first, size_t last)
{
    m->joined.len = 0;
    m->joined.failed = 0;
    m->n_pieces = 0;
    for (size_t i = first; i <= last; i++) {
        const styled_line *ln = &l->lines[i];
        if (i > first)
            add_spaces(&m->joined, ln->join ? ln->join - 1 : 1);
        int end_col = ln->text_col;
        for (uint32_t r = 0; r < ln->n_runs; r++) {
            const styled_run *run = &l->runs[ln->first_run + r];
            const char *s = l->text + run->off;
            size_t skip = 0;
            int col = run->col;
            while (skip < run->len && col < ln->text_col) {
                int w;
                skip += text_cluster(s, run->len, skip, &w);
                col += w;
            }
            if (skip == run->len)
                continue;
            add_spaces(&m->joined, col - end_col);
            end_col = run->col + run->width;
            if (array_reserve(&m->pieces, &m->cap_pieces, m->n_pieces + 1, sizeof *m->pieces))
                return -1;
            m->pieces[m->n_pieces++] = (search_piece){
                .at = (uint32_t)m->joined.len,
                .len = (uint32_t)(run->len - skip),
                .off = (uint32_t)(run->off + skip),
                .line = (uint32_t)i,
                .run_off = run->off,
                .run_col = run->col,
            };
            strbuf_add(&m->joined, s + skip, run->len - skip);
        }
    }
    return m->joined.failed ? -1 : 0;
}

static int find(search_marks *m, const search_query *q)
{
    search_result_clear(&m->found);
    kimi_err err = {0};
    return search_add_text(&m->found, q, 0, m->joined.data ? m->joined.data : "", m->joined.len, &err);
}

/* [from, to) (bytes of piece p's text, relative to it) widened to whole clusters of the piece. */
static void snap(const styled_lines *l, const search_piece *p, uint32_t *from, uint32_t *to)
{
    const char *s = l->text + p->off;
    uint32_t a = 0;
    while (a < p->len) {
        int w;
        uint32_t n = (uint32_t)text_cluster(s, p->len, a, &w);
        if (a + n > *from) {
            *from = a;
            break;
        }
        a += n;
    }
    for (a = *from; a < *to;) {
        int w;
        a += (uint32_t)text_cluster(s, p->len, a, &w);
    }
    *to = a;
}

int search_marks_line(search_marks *m, const styled_lines *l, size_t line, const search_query *q)
{
    m->n_marks = 0;
    if (!q->n_points || line >= l->n_lines)
        return 0;
    /* as far back and on as a match through this line can reach */
    size_t reach = (size_t)q->n_points - 1, first = line, last = line, got = 0;
    while (got < reach && first > 0 && l->lines[first].join) {
        got += l->lines[first].join - 1u;
        got += line_points(l, --first);
    }
    for (got = 0; got < reach && last + 1 < l->n_lines && l->lines[last + 1].join;) {
        got += l->lines[last + 1].join - 1u;
        got += line_points(l, ++last);
    }
    if (join_lines(m, l, first, last) || find(m, q))
        return 0;
    size_t p = 0;
    for (int k = 0; k < m->found.n; k++) {
        size_t a = m->found.matches[k].offset, b = a + m->found.matches[k].len;
        while (p < m->n_pieces && (m->pieces[p].line < line || m->pieces[p].at + m->pieces[p].len <= a))
            p++;
        for (size_t i = p; i < m->n_pieces && m->pieces[i].line == line && m->pieces[i].at < b; i++) {
            const search_piece *pc = &m->pieces[i];
            uint32_t from = a > pc->at ? (uint32_t)(a - pc->at) : 0;
            uint32_t to = b < pc->at + pc->len ? (uint32_t)(b - pc->at) : pc->len;
            if (from >= to)
                continue;
            snap(l, pc, &from, &to);
            from += pc->off;
            to += pc->off;
            if (m->n_marks && from < m->marks[m->n_marks - 1].to)
                from = m->marks[m->n_marks - 1].to; /* widened into the last one */
            if (from >= to)
                continue;
            if (array_reserve(&m->marks, &m->cap_marks, (size_t)m->n_marks + 1, sizeof *m->marks))
                return m->n_marks;
            const char *run = l->text + pc->run_off;
            int col_from = pc->run_col + text_width(run, from - pc->run_off);
            int col_to = col_from + text_width(l->text + from, to - from);
            m->marks[m->n_marks++] = (search_mark){from, to, (uint16_t)col_from, (uint16_t)col_to};
        }
    }
    return m->n_marks;
}

/* Where joined offset a is in l->text: the start of a match (a piece's byte, or the start of the
 * piece after the joining spaces it falls in), or its end (!start: just after the byte before a,
 * or the end of the piece before). 0 when found. */
static int text_offset(const search_marks *m, size_t a, int start, uint32_t *off, size_t *line)
{
    int found = -1;
    for (size_t i = 0; i < m->n_pieces; i++) {
        const search_piece *pc = &m->pieces[i];
        if (start && a < pc->at + pc->len) {
            *off = pc->off + (a > pc->at ? (uint32_t)(a - pc->at) : 0);
            *line = pc->line;
            return 0;
        }
        if (!start && pc->at < a) {
            *off = pc->off + (a - pc->at < pc->len ? (uint32_t)(a - pc->at) : pc->len);
            *line = pc->line;
            found = 0;
        }
    }
    return found;
}

int search_marks_nth(search_marks *m, const styled_lines *l, const search_query *q, size_t first, int n,
                     uint32_t *from, uint32_t *to, size_t *last_line)
{
    if (!q->n_points || n < 0)
        return -1;
    while (first < l->n_lines) {
        size_t last = first;
        while (last + 1 < l->n_lines && l->lines[last + 1].join)
            last++;
        if (join_lines(m, l, first, last) || find(m, q))
            return -1;
        if (n < m->found.n) {
            const search_match *k = &m->found.matches[n];
            size_t first_line;
            return text_offset(m, k->offset, 1, from, &first_line) ||
                           text_offset(m, k->offset + k->len, 0, to, last_line) ? -1 : 0;
        }
        n -= m->found.n;
        first = last + 1;
    }
    return -1;
}

int search_marks_count(search_marks *m, const styled_lines *l, const search_query *q, size_t first,
                       size_t end)
{
    int count = 0;
    if (!q->n_points)
        return 0;
    while (first < end && first < l->n_lines) {
        size_t last = first;
        while (last + 1 < end && last + 1 < l->n_lines && l->lines[last + 1].join)
            last++;
        if (join_lines(m, l, first, last) || find(m, q))
            return -1;
        count += m->found.n;
        first = last + 1;
    }
    return count;
}
