/* ui_line_text: a styled_lines line as plain text (gaps between runs as spaces), for the ui
 * unit tests' comparisons. */
#ifndef KIMI_TEST_UI_LINE_TEXT_H
#define KIMI_TEST_UI_LINE_TEXT_H

#include <string.h>

#include "ui/styled_lines.h"

static inline const char *ui_line_text(const styled_lines *l, size_t i, char *buf, size_t cap)
{
    size_t n = 0;
    int col = 0;
    const styled_line *ln = &l->lines[i];
    for (unsigned r = 0; r < ln->n_runs; r++) {
        const styled_run *run = &l->runs[ln->first_run + r];
        while (col < run->col && n + 1 < cap) {
            buf[n++] = ' ';
            col++;
        }
        for (unsigned k = 0; k < run->len && n + 1 < cap; k++)
            buf[n++] = l->text[run->off + k];
        col += run->width;
    }
    buf[n] = 0;
    return buf;
}

#endif
