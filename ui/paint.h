/* paint: the ncurses side of the render model: the theme's styles as curses attributes and
 * colour pairs (direct colour, the 256 palette or the nearest of 16/8, within the terminal's
 * pair budget; none at all for NO_COLOR) and frames of rows painted into a window. */
#ifndef KIMI_UI_PAINT_H
#define KIMI_UI_PAINT_H

#include <curses.h>

#include "ui/render_model.h"
#include "ui/theme.h"

typedef enum {
    PAINT_COLORS_NONE,      /* NO_COLOR or a terminal without colours: attributes only */
    PAINT_COLORS_8,
    PAINT_COLORS_16,
    PAINT_COLORS_256,
    PAINT_COLORS_DIRECT,    /* 24-bit: #rrggbb as given */
} paint_depth;

typedef struct {
    paint_depth depth;
    attr_t attr[THEME_N_ELEMENTS];  /* A_BOLD, A_DIM, ... of each element */
    int pair[THEME_N_ELEMENTS];     /* its colour pair (0: the terminal's defaults) */
    int pairs_used;                 /* pairs allocated (distinct fg/bg combinations) */
    int pairs_short;                /* elements left with pair 0: the budget ran out */
} paint_palette;

/* What the terminal can show (call after start_color()); no_color forces NONE. */
paint_depth paint_detect_depth(int no_color);

/* A theme colour as a curses colour number for the depth: -1 for the terminal's default, the
 * RGB value itself for DIRECT, the xterm-256 index for 256, the nearest of the first 16 / 8
 * (by RGB distance to xterm's defaults) below that. */
int paint_map_color(theme_color c, paint_depth depth);

/* The curses colours element e of t is painted in at depth (-1: the terminal's default).
 * At 16 and 8 colours a colour the terminal lacks becomes the nearest it has (as
 * paint_map_color); where that one would not keep theme_min_contrast(e) against the
 * background on the terminals t is for (theme_background; "default" as theme_terminal_colors)
 * it becomes the nearest readable colour of the same hue, else the nearest readable neutral
 * one (the default foreground, black, white, grey), never another hue. So a dark grey rule is
 * never mapped onto a black background. */
void paint_style_colors(const theme *t, int e, paint_depth depth, int *fg, int *bg);

/* The RGB value a curses colour of paint_map_color shows as at depth, `dflt` for -1. */
uint32_t paint_color_rgb(int color, paint_depth depth, uint32_t dflt);

/* Allocate the pairs for t (init_extended_pair; pairs are reused across elements with the same
 * colours and reallocated from 1 on every call, so /theme does not leak pairs). Without colours
 * (NONE) only attributes: a search match that its theme marks by colour alone gets reverse,
 * the current one reverse and bold. */
void paint_palette_init(paint_palette *p, const theme *t, paint_depth depth);

/* Set w's drawing style to element plus extra THEME_ATTR_* attributes. */
void paint_style(WINDOW *w, const paint_palette *p, int element, int extra);

/* Add UTF-8 text at the cursor, each grapheme cluster as wide as text_width says: a cluster
 * wcwidth() would measure otherwise (skin tones, ZWJ sequences, VS16) or one with more code
 * points than a curses cell holds is painted as its first character padded with spaces, so
 * curses and the terminal agree on every later column, and remembered to be written whole
 * over that placeholder by paint_overlays_flush. */
void paint_text(WINDOW *w, const char *s, size_t len);

/* After doupdate(): write the clusters painted as placeholders since the last call over their
 * placeholders, in their style, and put the cursor back where curses has it. */
void paint_overlays_flush(void);

/* Forget the placeholders painted since the last flush (what they are on is hidden, e.g. under
 * the F1 help). */
void paint_overlays_discard(void);

/* Paint one transcript row at screen row y (cleared first, in the text style), each span at
 * its column. */
void paint_row(WINDOW *w, const paint_palette *p, int y, const rm_row *row);

/* Paint the frame's changed rows (all when force) from screen row top; returns rows painted. */
int paint_frame(WINDOW *w, const paint_palette *p, int top, const rm_frame *f, int force);

/* THEME_ATTR_* as curses attributes. */
attr_t paint_attrs(unsigned theme_attrs);

#endif
