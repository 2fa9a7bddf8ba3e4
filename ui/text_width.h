/* text_width: display width of UTF-8 text by grapheme cluster (utf8proc), cutting text to a
 * width at cluster boundaries, and making raw text displayable (tabs, controls, bad UTF-8). */
#ifndef KIMI_UI_TEXT_WIDTH_H
#define KIMI_UI_TEXT_WIDTH_H

#include <stddef.h>

#include "engine/base/array.h"

enum { TEXT_TAB_STOP = 8 };

/* How the terminal draws what Unicode's grapheme rules join, as its cursor position reports
 * tell (ui/term_probe): a terminal that keeps the parts apart gives each its own columns, and
 * the layout must count them or every later column drifts. All zero (the default): the
 * cluster widths below, as kitty, WezTerm, foot, iTerm2 and Windows Terminal draw them. */
typedef struct {
    int splits_modifiers;   /* a skin tone after its emoji takes its own 2 columns (xterm, tmux 3.3) */
    int splits_zwj;         /* each member of a ZWJ sequence takes its own columns (xterm) */
    int narrow_vs16;        /* VS16 does not widen a narrow symbol: ❤️ is 1 column (xterm, tmux 3.3) */
} text_terminal;

/* Set how widths are counted from now on for the whole process (the full-screen view, once,
 * before laying anything out); NULL restores the cluster widths. */
void text_set_terminal(const text_terminal *t);

/* The grapheme cluster at s[pos..n) (pos < n, s displayable: see text_displayable): returns its
 * length in bytes (>= 1) and stores its width in columns in *width: 2 for East Asian wide
 * characters, emoji presentation (U+FE0F), ZWJ emoji sequences, skin tones and
 * regional-indicator flag pairs; 0 for a cluster of only zero-width marks or format
 * characters; 1 otherwise. A cluster's width is that of its widest code point, so combining
 * marks and joined emoji never add columns, except where text_set_terminal says the terminal
 * draws the parts apart: then each part (an emoji, a skin tone, a ZWJ member) adds its own. */
size_t text_cluster(const char *s, size_t n, size_t pos, int *width);

/* Display width of s[0..n). */
int text_width(const char *s, size_t n);

/* The longest prefix of s[0..n) made of whole clusters whose width is at most max_width:
 * returns its length in bytes and its width in *width (may be NULL). */
size_t text_fit(const char *s, size_t n, int max_width, int *width);

/* Append to out the displayable form of one line s[0..n) (no newline in it): ill-formed
 * UTF-8 becomes U+FFFD, a tab becomes spaces up to the next multiple of TEXT_TAB_STOP
 * columns from the line's start, C0 controls and DEL become caret notation (^[, ^?), C1
 * controls U+FFFD, and a CR at the end of the line is dropped. */
void text_displayable(strbuf *out, const char *s, size_t n);

/* Append to out text s[0..n) made safe to write to a terminal as it is (the plain front end):
 * the same cleaning as text_displayable, so no escape sequence, CR or other control survives,
 * except that newlines and tabs stay (the terminal lays them out) and a CR before a newline is
 * dropped. */
void text_terminal_safe(strbuf *out, const char *s, size_t n);

#endif
