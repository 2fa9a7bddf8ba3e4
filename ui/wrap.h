/* wrap: breaks one paragraph of styled text into display lines of a given width: words break
 * at spaces and around wide (CJK, emoji) clusters, a word longer than a line is cut at
 * cluster boundaries, and every line starts with a prefix (list marker, quote bar, indent). */
#ifndef KIMI_UI_WRAP_H
#define KIMI_UI_WRAP_H

#include <stddef.h>

#include "ui/styled_lines.h"

/* A fragment of displayable text (text_displayable: no newline, tab or control) in one style. */
typedef struct {
    const char *s;
    size_t len;
    int element; /* theme_element */
    int attrs;   /* THEME_ATTR_* */
} wrap_piece;

typedef struct {
    const wrap_piece *first; /* painted from column 0 of the first line */
    size_t n_first;
    const wrap_piece *next;  /* painted from column 0 of every following line */
    size_t n_next;
} wrap_prefix;

/* Append pieces[0..n) to out as closed lines at most width columns wide (prefix included;
 * prefix may be NULL). Spaces where a line breaks are dropped; spaces that start the first
 * line are kept. A line always takes at least one cluster, so a cluster wider than the room
 * left by the prefix overflows rather than looping. An empty paragraph is one line holding the
 * first prefix. Returns the lines added. */
size_t wrap_pieces(styled_lines *out, const wrap_piece *pieces, size_t n, int width,
                   const wrap_prefix *prefix);

#endif
