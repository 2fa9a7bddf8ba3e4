/* search: finding a query in the transcript's texts (messages, reasoning, tool arguments and
 * output: whatever texts the caller hands in), as the full screen's Ctrl-F does. Smart case:
 * the query matches without regard to case unless it has a capital letter itself. Matches are
 * byte ranges of the texts, in order, never overlapping; no curses here. */
#ifndef KIMI_UI_SEARCH_H
#define KIMI_UI_SEARCH_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/error.h"

typedef struct {
    uint32_t *points;           /* [n_points] the query's code points, lower-cased unless
                                   case_sensitive */
    int n_points;
    int case_sensitive;         /* the query has a capital: case counts */
} search_query;

typedef struct {
    int text;                   /* which text (the caller's numbering: a block, a message) */
    size_t offset;              /* byte offset of the match in that text */
    size_t len;                 /* bytes */
} search_match;

typedef struct {
    search_match *matches;      /* [n] ordered by text, then offset */
    int n, cap;
} search_result;

/* Compile query[0..len). An empty query compiles to one that matches nothing. Ill-formed
 * UTF-8 in it matches nothing either (a text's own ill-formed bytes never equal a query's). */
int search_query_init(search_query *q, const char *query, size_t len, kimi_err *err);
void search_query_free(search_query *q);

/* Append the matches of q in text[0..len), numbered text_index, to r. Texts must be added in
 * increasing text_index for r to stay ordered. */
int search_add_text(search_result *r, const search_query *q, int text_index, const char *text, size_t len,
                    kimi_err *err);
void search_result_clear(search_result *r);     /* no matches; the memory stays for reuse */
void search_result_free(search_result *r);

/* The first match that starts at or after (text, offset): its index, r->n when none. */
int search_first_from(const search_result *r, int text, size_t offset);
/* The match after (direction 1) or before (-1) match `current`, wrapping around; -1 when r
 * has none. current may be -1 (no match chosen yet): the first (or last) one. */
int search_step(const search_result *r, int current, int direction);

#endif
