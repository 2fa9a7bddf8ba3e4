/* paint: theme styles as curses attributes and colour pairs; frames of rows into a window. */
#include "ui/paint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>
#include <term.h>

#include "ui/text_width.h"

paint_depth paint_detect_depth(int no_color)
{
    if (no_color || !has_colors())
        return PAINT_COLORS_NONE;
    if (tigetflag("RGB") > 0 || COLORS >= 0x1000000)
        return PAINT_COLORS_DIRECT;
    if (COLORS >= 256)
        return PAINT_COLORS_256;
    return COLORS >= 16 ? PAINT_COLORS_16 : PAINT_COLORS_8;
}

static long rgb_distance(uint32_t a, uint32_t b)
{
    long dr = (long)(a >> 16 & 255) - (long)(b >> 16 & 255);
    long dg = (long)(a >> 8 & 255) - (long)(b >> 8 & 255);
    long db = (long)(a & 255) - (long)(b & 255);
    return dr * dr + dg * dg + db * db;
}

int paint_map_color(theme_color c, paint_depth depth)
{
    if (c.index == THEME_COLOR_DEFAULT && !c.is_rgb)
        return -1;
    uint32_t rgb = c.is_rgb ? c.rgb : theme_256_to_rgb(c.index);
    switch (depth) {
    case PAINT_COLORS_NONE: return -1;
    case PAINT_COLORS_DIRECT:
        /* direct-colour terminfo keeps 0..7 as the ANSI colours: named colours stay named, an
           RGB value that small is nudged to the next (visually equal) one */
        if (!c.is_rgb && c.index < 8)
            return c.index;
        return rgb < 8 ? 8 : (int)rgb;
    case PAINT_COLORS_256:
        return c.is_rgb ? theme_rgb_to_256(rgb) : c.index;
    case PAINT_COLORS_16:
    case PAINT_COLORS_8: {
        int n = depth == PAINT_COLORS_16 ? 16 : 8;
        if (!c.is_rgb && c.index < n)
            return c.index;
        if (!c.is_rgb && c.index < 16) /* bright named colour on an 8-colour terminal */
            return c.index - 8;
        int best = 0;
        long best_d = -1;
        for (int i = 0; i < n; i++) {
            long d = rgb_distance(rgb, theme_256_to_rgb(i));
            if (best_d < 0 || d < best_d) {
                best = i;
                best_d = d;
            }
        }
        return best;
    }
    }
    return -1;
}

uint32_t paint_color_rgb(int color, paint_depth depth, uint32_t dflt)
{
    if (color < 0)
        return dflt;
    if (depth == PAINT_COLORS_DIRECT && color >= 8)
        return (uint32_t)color;
    return theme_256_to_rgb(color);
}

/* The hue family of a colour, as the 8 ANSI hues are built: the channels at least half as
 * strong as the strongest (red 1, green 2, blue 4: 3 yellow, 5 magenta, 6 cyan); black,
 * white and the greys are 0, neutral. */
static int hue_family(uint32_t rgb)
{
    uint32_t ch[3] = {rgb >> 16 & 255, rgb >> 8 & 255, rgb & 255};
    uint32_t most = ch[0] > ch[1] ? ch[0] : ch[1];
    most = most > ch[2] ? most : ch[2];
    int family = 0;
    for (int i = 0; i < 3; i++)
        if (most && 2 * ch[i] >= most)
            family |= 1 << i;
    return family == 7 ? 0 : family;
}

/* Whether fg (a curses colour at depth, -1 the default) on bg keeps `least` contrast on
 * every terminal background t is for. */
static int readable(const theme *t, int fg, int bg, unsigned attrs, paint_depth depth, double least)
{
    for (int b = THEME_BACKGROUND_DARK; b <= THEME_BACKGROUND_LIGHT; b++) {
        if (t->background != THEME_BACKGROUND_ANY && (int)t->background != b)
            continue;
        uint32_t term_fg, term_bg;
        theme_terminal_colors((theme_background)b, &term_fg, &term_bg);
        if (theme_painted_contrast(paint_color_rgb(fg, depth, term_fg),
                                   paint_color_rgb(bg, depth, term_bg), attrs) < least)
            return 0;
    }
    return 1;
}

void paint_style_colors(const theme *t, int e, paint_depth depth, int *fg, int *bg)
{
    const theme_style *s = &t->style[e];
    *fg = paint_map_color(s->fg, depth);
    *bg = paint_map_color(s->bg, depth);
    if (depth != PAINT_COLORS_16 && depth != PAINT_COLORS_8)
        return;
    int n = depth == PAINT_COLORS_16 ? 16 : 8;
    if (*fg < 0 || (!s->fg.is_rgb && s->fg.index < n))
        return; /* the terminal has the colour itself */
    double least = theme_min_contrast(e);
    if (readable(t, *fg, *bg, s->attrs, depth, least))
        return;
    uint32_t want = s->fg.is_rgb ? s->fg.rgb : theme_256_to_rgb(s->fg.index);
    uint32_t term_fg, term_bg;
    theme_terminal_colors(t->background, &term_fg, &term_bg);
    /* the nearest is unreadable: the nearest readable colour of its hue; failing that a
       neutral one (the default foreground first), never another hue */
    int family = hue_family(want), best = *fg;
    long best_d = -1;
    for (int pass = 0; pass < 2 && best_d < 0; pass++) {
        for (int c = -1; c < n; c++) {
            if (c < 0 && *bg >= 0)
                continue; /* the default foreground is made for the default background only */
            int c_family = c < 0 ? 0 : hue_family(theme_256_to_rgb(c));
            if (c_family != (pass ? 0 : family) || !readable(t, c, *bg, s->attrs, depth, least))
                continue;
            long d = rgb_distance(want, paint_color_rgb(c, depth, term_fg));
            if (best_d < 0 || d < best_d) {
                best = c;
                best_d = d;
            }
        }
    }
    *fg = best;
}

attr_t paint_attrs(unsigned a)
{
    attr_t r = A_NORMAL;
    if (a & THEME_ATTR_BOLD)
        r |= A_BOLD;
    if (a & THEME_ATTR_DIM)
        r |= A_DIM;
    if (a & THEME_ATTR_ITALIC)
        r |= A_ITALIC;
    if (a & THEME_ATTR_UNDERLINE)
        r |= A_UNDERLINE;
    if (a & THEME_ATTR_REVERSE)
        r |= A_REVERSE;
    return r;
}

/* Without colours a search match in a theme that marks it by colour alone (the default's
 * black on yellow) would not show: reverse, and the current one reverse and bold. */
static attr_t colourless_search_attrs(int e, unsigned attrs)
{
    if ((e != THEME_SEARCH_MATCH && e != THEME_SEARCH_CURRENT) ||
        (attrs & (THEME_ATTR_REVERSE | THEME_ATTR_UNDERLINE)))
        return 0;
    return e == THEME_SEARCH_CURRENT ? A_REVERSE | A_BOLD : A_REVERSE;
}

void paint_palette_init(paint_palette *p, const theme *t, paint_depth depth)
{
    memset(p, 0, sizeof *p);
    p->depth = depth;
    int fgs[THEME_N_ELEMENTS], bgs[THEME_N_ELEMENTS];
    for (int e = 0; e < THEME_N_ELEMENTS; e++) {
        const theme_style *s = &t->style[e];
        p->attr[e] = paint_attrs(s->attrs);
        if (depth == PAINT_COLORS_NONE) {
            p->attr[e] |= colourless_search_attrs(e, s->attrs);
            continue;
        }
        int fg, bg;
        paint_style_colors(t, e, depth, &fg, &bg);
        if (fg < 0 && bg < 0)
            continue;
        int found = 0;
        for (int k = 0; k < p->pairs_used && !found; k++)
            if (fgs[k] == fg && bgs[k] == bg)
                found = k + 1;
        if (!found) {
            if (p->pairs_used + 1 >= COLOR_PAIRS || init_extended_pair(p->pairs_used + 1, fg, bg) != OK) {
                p->pairs_short++;
                continue;
            }
            fgs[p->pairs_used] = fg;
            bgs[p->pairs_used] = bg;
            found = ++p->pairs_used;
        }
        p->pair[e] = found;
    }
}

void paint_style(WINDOW *w, const paint_palette *p, int element, int extra)
{
    int pair = p->pair[element];
    wattr_set(w, p->attr[element] | paint_attrs((unsigned)extra), (short)0, &pair);
}

/* Clusters painted as placeholders, to be written over them after the next doupdate(): screen
 * position, the style they were painted in, and the cluster's bytes (NUL-terminated). */
typedef struct {
    int y, x;
    attr_t attrs;
    int pair;
    char *text;
} cluster_overlay;

static cluster_overlay *overlays;
static int n_overlays, cap_overlays;

static void overlay_add(WINDOW *w, int y, int x, const char *s, size_t len)
{
    if (n_overlays == cap_overlays) {
        int cap = cap_overlays ? cap_overlays * 2 : 16;
        cluster_overlay *grown = realloc(overlays, sizeof *grown * (size_t)cap);
        if (!grown)
            return; /* the placeholder stays: the layout is right, the cluster shows its first character */
        overlays = grown;
        cap_overlays = cap;
    }
    char *text = malloc(len + 1);
    if (!text)
        return;
    memcpy(text, s, len);
    text[len] = 0;
    cluster_overlay *o = &overlays[n_overlays++];
    o->y = getbegy(w) + y;
    o->x = getbegx(w) + x;
    short pair_short;
    o->pair = 0;
    wattr_get(w, &o->attrs, &pair_short, &o->pair);
    o->text = text;
}

void paint_overlays_discard(void)
{
    for (int i = 0; i < n_overlays; i++)
        free(overlays[i].text);
    n_overlays = 0;
}

void paint_overlays_flush(void)
{
    if (!n_overlays)
        return;
    int y0 = getcury(curscr), x0 = getcurx(curscr);
    for (int i = 0; i < n_overlays; i++) {
        cluster_overlay *o = &overlays[i];
        /* -1, -1: the cursor's place is not known after the terminal drew a cluster, so the
           move is absolute */
        mvcur(-1, -1, o->y, o->x);
        vid_attr(o->attrs, (short)o->pair, &o->pair);
        putp(o->text);
    }
    vid_attr(A_NORMAL, 0, NULL);
    mvcur(-1, -1, y0, x0);
    fflush(stdout);
    paint_overlays_discard();
}

/* ncurses measures a character at a time with wcwidth() and keeps at most CCHARW_MAX code
 * points in a cell; the render model measures grapheme clusters the way the terminal draws
 * them (text_set_terminal). Where the two disagree (an emoji with a skin tone or a ZWJ
 * sequence: 4+ columns to wcwidth, 2 on a terminal that joins them; a narrow symbol with VS16;
 * a cluster of more code points than a cell holds) curses gets a placeholder of the model's
 * width (the first character padded with spaces), so its idea of the cursor and the
 * terminal's never drift apart, and the whole cluster is written over the placeholder after
 * the update (paint_overlays_flush): every code point reaches the terminal. */
void paint_text(WINDOW *w, const char *s, size_t len)
{
    size_t ascii = 0;
    while (ascii < len && (unsigned char)s[ascii] < 0x80)
        ascii++;
    if (ascii == len) {
        waddnstr(w, s, (int)len);
        return;
    }
    size_t run = 0, p = 0;
    while (p < len) {
        int cw;
        size_t n = text_cluster(s, len, p, &cw);
        int curses_w = 0, cell_points = 0, most_points = 0;
        wchar_t first = 0;
        mbstate_t st = {0};
        for (size_t q = p; q < p + n;) {
            wchar_t wc;
            size_t k = mbrtowc(&wc, s + q, p + n - q, &st);
            if (k == 0 || k > n) {
                curses_w = -1;
                break;
            }
            int ww = wcwidth(wc);
            if (!first)
                first = wc;
            if (ww != 0)
                cell_points = 0;
            if (++cell_points > most_points)
                most_points = cell_points;
            curses_w += ww < 0 ? 1 : ww;
            q += k;
        }
        if (curses_w != cw || most_points > CCHARW_MAX) {
            waddnstr(w, s + run, (int)(p - run));
            int y = getcury(w), x = getcurx(w);
            int fw = first ? wcwidth(first) : -1;
            if (fw >= 0 && fw <= cw) {
                wchar_t one[2] = {first, 0};
                waddnwstr(w, one, 1);
            } else {
                fw = 0;
            }
            for (int k = fw; k < cw; k++)
                waddch(w, ' ');
            if (cw > 0 && x + cw <= getmaxx(w))
                overlay_add(w, y, x, s + p, n);
            run = p + n;
        }
        p += n;
    }
    waddnstr(w, s + run, (int)(len - run));
}

void paint_row(WINDOW *w, const paint_palette *p, int y, const rm_row *row)
{
    paint_style(w, p, THEME_TEXT, 0);
    wmove(w, y, 0);
    wclrtoeol(w);
    int maxx = getmaxx(w);
    for (int i = 0; i < row->n_spans; i++) {
        const rm_span *s = &row->spans[i];
        if (s->col >= maxx)
            break;
        paint_style(w, p, s->element, s->attrs);
        wmove(w, y, s->col);
        paint_text(w, s->s, s->len);
    }
}

int paint_frame(WINDOW *w, const paint_palette *p, int top, const rm_frame *f, int force)
{
    int painted = 0;
    for (int y = 0; y < f->n_rows; y++)
        if (force || f->rows[y].changed) {
            paint_row(w, p, top + y, &f->rows[y]);
            painted++;
        }
    return painted;
}
