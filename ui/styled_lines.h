/* styled_lines: a growable list of display lines, each a row of styled runs (text, column,
 * width, theme element, attributes) whose text the list owns; what layout produces and the
 * view paints. */
#ifndef KIMI_UI_STYLED_LINES_H
#define KIMI_UI_STYLED_LINES_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t off;     /* the run's bytes: text[off .. off + len) of its styled_lines */
    uint32_t len;
    uint16_t col;     /* first column, from the line's start */
    uint16_t width;   /* columns */
    uint8_t element;  /* theme_element */
    uint8_t attrs;    /* THEME_ATTR_* added to the element's style */
} styled_run;

typedef struct {
    uint32_t first_run; /* runs[first_run .. first_run + n_runs), in column order */
    uint32_t n_runs;
    uint16_t width;     /* columns up to the end of the last run */
    uint8_t join;       /* 0: the line starts a line of its text; 1 + k: a soft wrap, it
                           continues the line above, k spaces (<= 254) dropped at the break */
    uint8_t text_col;   /* columns before it are a prefix (list indent, quote bar), not text */
} styled_line;

typedef struct {
    char *text;            /* [text_len] run bytes, not NUL-terminated */
    size_t text_len, text_cap;
    styled_run *runs;      /* [n_runs] */
    size_t n_runs, runs_cap;
    styled_line *lines;    /* [n_lines] closed lines */
    size_t n_lines, lines_cap;
    int open;              /* a line is being built (runs after the last closed line) */
    uint8_t open_join, open_text_col; /* what styled_lines_end_line gives the open line */
    int failed;            /* an allocation failed: the content is incomplete */
} styled_lines;

void styled_lines_init(styled_lines *l);
void styled_lines_free(styled_lines *l);
/* Drop every line, keeping the memory. */
void styled_lines_clear(styled_lines *l);
/* Keep the first n closed lines; drop the rest and any open line. */
void styled_lines_truncate(styled_lines *l, size_t n);

/* Add a run to the open line (opening one) at column col. Runs must come in column order; one
 * that continues the last run (same style, next column) extends it. Zero-length text is
 * ignored. On out of memory sets l->failed and drops the run. */
void styled_lines_add(styled_lines *l, int col, const char *s, size_t len, int width,
                      int element, int attrs);
/* Close the open line (an empty line if nothing was added since the last close). */
void styled_lines_end_line(styled_lines *l);
/* The open line continues the line above: a soft wrap that dropped `spaces` spaces (capped at
 * 254). Search highlighting joins such lines to find matches across the wrap. */
void styled_lines_set_join(styled_lines *l, int spaces);
/* The open line's text starts at column col (capped at 255); what is before is a prefix. */
void styled_lines_set_text_col(styled_lines *l, int col);
/* Columns used so far by the open line (0 when none is open). */
int styled_lines_open_width(const styled_lines *l);
/* Add the runs of closed line i of src to the open line of dst, shifted right by col_shift
 * columns. */
void styled_lines_copy_runs(styled_lines *dst, const styled_lines *src, size_t i, int col_shift);

#endif
