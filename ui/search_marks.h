/* search_marks: where a search query (ui/search) shows in laid-out lines (styled_lines), for the
 * full screen's highlighting of the transcript search. Matching is search.h's (smart case, by
 * code point) over a line's text joined with the soft-wrapped lines around it, so a match split
 * by a wrap is found on both rows; the spaces a wrap dropped count as spaces, and a line's
 * prefix (list indent, quote bar: styled_line.text_col) is not text. A mark is a byte range of
 * the lines' text widened to whole grapheme clusters (a match never splits an emoji or a
 * letter from its combining marks). No curses.
 *
 * Cost: a line's marks cost that line plus the wrapped neighbours a match can reach (query
 * length), never the whole text; the n-th match of a text costs the text up to it. */
#ifndef KIMI_UI_SEARCH_MARKS_H
#define KIMI_UI_SEARCH_MARKS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/array.h"
#include "ui/search.h"
#include "ui/styled_lines.h"

/* A mark lies inside one run of its line (a match over two runs is two marks). */
typedef struct {
    uint32_t from, to;         /* bytes of the lines' text (styled_lines.text) */
    uint16_t col_from, col_to; /* the columns they start and end at (as styled_run.col) */
} search_mark;

typedef struct {
    uint32_t at, len;  /* joined[at .. at + len) ... */
    uint32_t off;      /* ... is the lines' text[off .. off + len) */
    uint32_t line;     /* on this line */
    uint32_t run_off;  /* in the run that starts at this byte ... */
    uint16_t run_col;  /* ... and column */
} search_piece;

/* Scratch reused from call to call; zero it to start, search_marks_free to end. */
typedef struct {
    strbuf joined;          /* the text of the lines being searched, joined */
    search_piece *pieces;   /* [n_pieces] where joined's bytes come from */
    size_t n_pieces, cap_pieces;
    search_result found;
    search_mark *marks;     /* [n_marks] of the last search_marks_line, in order */
    int n_marks;
    size_t cap_marks;
} search_marks;

void search_marks_free(search_marks *m);

/* The matches of q on line `line` of l into m->marks, clipped to that line's text, in order and
 * not overlapping. Returns m->n_marks (0 also when out of memory). */
int search_marks_line(search_marks *m, const styled_lines *l, size_t line, const search_query *q);

/* The n-th (0-based) match of q in l's lines from line `first` on (a line that starts a line
 * of its text: join 0), as bytes [*from, *to) of l->text (its first and last cluster, which may
 * be on different lines; *last_line the line of its end). 0 when found, -1 when there are fewer
 * matches (or out of memory). */
int search_marks_nth(search_marks *m, const styled_lines *l, const search_query *q, size_t first, int n,
                     uint32_t *from, uint32_t *to, size_t *last_line);
/* The matches of q in lines [first, end) of l (both starting a line of their text): a count
 * that lets search_marks_nth start later. -1 when out of memory. */
int search_marks_count(search_marks *m, const styled_lines *l, const search_query *q, size_t first,
                       size_t end);

#endif
