/* styled_lines: storage of display lines as runs over one text buffer. */
#include "ui/styled_lines.h"

#include <stdlib.h>
#include <string.h>

#include "engine/base/array.h"

void styled_lines_init(styled_lines *l)
{
    memset(l, 0, sizeof *l);
}

void styled_lines_free(styled_lines *l)
{
    free(l->text);
    free(l->runs);
    free(l->lines);
    memset(l, 0, sizeof *l);
}

void styled_lines_clear(styled_lines *l)
{
    l->text_len = l->n_runs = l->n_lines = 0;
    l->open = l->failed = 0;
    l->open_join = l->open_text_col = 0;
}

void styled_lines_truncate(styled_lines *l, size_t n)
{
    if (n < l->n_lines) {
        l->n_runs = l->lines[n].first_run;
        l->n_lines = n;
    } else {
        l->n_runs = l->n_lines ? l->lines[l->n_lines - 1].first_run + l->lines[l->n_lines - 1].n_runs
                               : 0;
    }
    l->text_len = l->n_runs ? l->runs[l->n_runs - 1].off + l->runs[l->n_runs - 1].len : 0;
    l->open = 0;
    l->open_join = l->open_text_col = 0;
}

static size_t open_first_run(const styled_lines *l)
{
    return l->n_lines ? l->lines[l->n_lines - 1].first_run + l->lines[l->n_lines - 1].n_runs : 0;
}

void styled_lines_set_join(styled_lines *l, int spaces)
{
    l->open_join = (uint8_t)(1 + (spaces < 0 ? 0 : spaces > 254 ? 254 : spaces));
}

void styled_lines_set_text_col(styled_lines *l, int col)
{
    l->open_text_col = (uint8_t)(col < 0 ? 0 : col > 255 ? 255 : col);
}

int styled_lines_open_width(const styled_lines *l)
{
    if (!l->open || l->n_runs == open_first_run(l))
        return 0;
    const styled_run *r = &l->runs[l->n_runs - 1];
    return r->col + r->width;
}

void styled_lines_add(styled_lines *l, int col, const char *s, size_t len, int width,
                      int element, int attrs)
{
    if (!len)
        return;
    if (l->text_len + len > UINT32_MAX || col < 0 || col > UINT16_MAX || width > UINT16_MAX ||
        array_reserve(&l->text, &l->text_cap, l->text_len + len, 1) ||
        array_reserve(&l->runs, &l->runs_cap, l->n_runs + 1, sizeof *l->runs)) {
        l->failed = 1;
        return;
    }
    memcpy(l->text + l->text_len, s, len);
    styled_run *last = l->open && l->n_runs > open_first_run(l) ? &l->runs[l->n_runs - 1] : NULL;
    if (last && last->element == element && last->attrs == attrs &&
        last->col + last->width == col && last->off + last->len == l->text_len &&
        last->width + width <= UINT16_MAX) {
        /* Contiguous text of one style is one run: a wrapped paragraph costs a run per
         * style change, not per word. */
        last->len += (uint32_t)len;
        last->width = (uint16_t)(last->width + width);
        l->text_len += len;
        return;
    }
    l->open = 1;
    l->runs[l->n_runs++] = (styled_run){
        .off = (uint32_t)l->text_len,
        .len = (uint32_t)len,
        .col = (uint16_t)col,
        .width = (uint16_t)width,
        .element = (uint8_t)element,
        .attrs = (uint8_t)attrs,
    };
    l->text_len += len;
}

void styled_lines_end_line(styled_lines *l)
{
    if (array_reserve(&l->lines, &l->lines_cap, l->n_lines + 1, sizeof *l->lines)) {
        l->failed = 1;
        styled_lines_truncate(l, l->n_lines);
        return;
    }
    size_t first = open_first_run(l);
    int width = styled_lines_open_width(l);
    l->lines[l->n_lines++] = (styled_line){
        .first_run = (uint32_t)first,
        .n_runs = (uint32_t)(l->n_runs - first),
        .width = (uint16_t)(width > UINT16_MAX ? UINT16_MAX : width),
        .join = l->open_join,
        .text_col = l->open_text_col,
    };
    l->open = 0;
    l->open_join = l->open_text_col = 0;
}

void styled_lines_copy_runs(styled_lines *dst, const styled_lines *src, size_t i, int col_shift)
{
    const styled_line *ln = &src->lines[i];
    for (uint32_t r = 0; r < ln->n_runs; r++) {
        const styled_run *run = &src->runs[ln->first_run + r];
        styled_lines_add(dst, run->col + col_shift, src->text + run->off, run->len, run->width,
                         run->element, run->attrs);
    }
}
