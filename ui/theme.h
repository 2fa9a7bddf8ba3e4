/* theme: the styles of the full-screen view's elements and the `.theme` file loader (lines
 * `element = fg bg [attr ...]`, colours by name, 0-255 or #rrggbb, errors naming file:line). */
#ifndef KIMI_UI_THEME_H
#define KIMI_UI_THEME_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/error.h"

/* What the view paints; every styled run of the render model names one. The names in
 * theme files are these without the prefix, in lower case (themes/README.md). */
typedef enum {
    THEME_TEXT,             /* answer text */
    THEME_USER_LABEL,       /* "you" in the gutter */
    THEME_USER_TEXT,        /* the user's messages */
    THEME_ASSISTANT_LABEL,  /* "kimi" in the gutter */
    THEME_REASONING,        /* reasoning text */
    THEME_REASONING_HEADER, /* "thinking · N tokens · X s", "▸ thought for X s · N tokens" */
    THEME_HEADING,          /* markdown headings */
    THEME_CODE,             /* fenced code lines (padded to the full width) */
    THEME_CODE_LABEL,       /* the language line over a fenced code block */
    THEME_INLINE_CODE,      /* `code` */
    THEME_QUOTE,            /* block quotes, bar and text */
    THEME_LIST_MARKER,      /* "•", "1." */
    THEME_LINK,             /* bare http(s) URLs */
    THEME_RULE,             /* thematic break (---) */
    THEME_TABLE_BORDER,
    THEME_TABLE_HEADER,
    THEME_TOOL_BORDER,      /* the tool-call box */
    THEME_TOOL_NAME,
    THEME_TOOL_ID,
    THEME_TOOL_ARGS,
    THEME_TOOL_RESULT,
    THEME_TOOL_WAITING,     /* state: waiting for approval */
    THEME_TOOL_RUNNING,
    THEME_TOOL_OK,          /* done */
    THEME_TOOL_FAILED,      /* failed, timeout, bad arguments, unknown tool */
    THEME_TOOL_DENIED,      /* denied, cancelled */
    THEME_FOLD_HINT,        /* "… +N lines" */
    THEME_NOTE,             /* info lines, command output */
    THEME_ERROR,            /* error lines */
    THEME_STATUS,           /* status bar */
    THEME_STATUS_ACCENT,    /* highlighted status fields, "↓ new" */
    THEME_SEPARATOR,        /* the rule between transcript and input */
    THEME_INPUT,
    THEME_INPUT_PROMPT,     /* "> " */
    THEME_SELECTION,        /* the focused block's marker in Tab mode */
    THEME_SEARCH_MATCH,     /* a match of the transcript search (Ctrl-F) */
    THEME_SEARCH_CURRENT,   /* the match the search is on ("match i/n") */
    THEME_N_ELEMENTS
} theme_element;

/* Attributes, or'ed: a style's own, and those a run adds (markdown bold, italic). */
enum {
    THEME_ATTR_BOLD = 1,
    THEME_ATTR_DIM = 2,
    THEME_ATTR_ITALIC = 4,
    THEME_ATTR_UNDERLINE = 8,
    THEME_ATTR_REVERSE = 16,
};

#define THEME_COLOR_DEFAULT (-1) /* the terminal's own foreground or background */

typedef struct {
    int16_t index;  /* THEME_COLOR_DEFAULT or 0..255; for #rrggbb the nearest of the 256 */
    uint8_t is_rgb; /* given as #rrggbb: rgb holds it, for terminals with direct colour */
    uint32_t rgb;   /* 0xRRGGBB when is_rgb */
} theme_color;

typedef struct {
    theme_color fg, bg;
    unsigned attrs; /* THEME_ATTR_* */
} theme_style;

/* The terminal background a theme is made for (its `background =` line; dark when absent). */
typedef enum {
    THEME_BACKGROUND_DARK,
    THEME_BACKGROUND_LIGHT,
    THEME_BACKGROUND_ANY, /* readable on both: every colour explicit, or none at all */
} theme_background;

typedef struct {
    theme_style style[THEME_N_ELEMENTS];
    theme_background background;
} theme;

/* The built-in dark defaults (what themes/default.theme spells out); a file's missing
 * elements keep these. */
void theme_init_default(theme *t);

/* Load a theme file over the built-in defaults. Errors are KIMI_ERR_INPUT, "path:line: why"
 * (unknown element, bad colour, bad attribute, duplicate element, missing '='); a missing or
 * unreadable file is KIMI_ERR_USAGE naming it. *t is written only on success. */
int theme_load_file(theme *t, const char *path, kimi_err *err);

/* The same from text[0..n); where names it in errors ("default.theme"). */
int theme_load_text(theme *t, const char *text, size_t n, const char *where, kimi_err *err);

/* "user_label" for THEME_USER_LABEL; NULL when out of range. */
const char *theme_element_name(int element);
/* The element of a name, or -1. */
int theme_element_from_name(const char *name, size_t len);

/* The nearest xterm-256 colour (16..255: the 6x6x6 cube and the grey ramp; the first 16 are
 * left out because terminals redefine them) by squared RGB distance. */
int theme_rgb_to_256(uint32_t rgb);
/* The RGB value of xterm colour 0..255 (the first 16 as xterm's defaults). */
uint32_t theme_256_to_rgb(int index);

/* Contrast, as WCAG 2 measures it: (L1 + 0.05) / (L2 + 0.05) of the relative luminances of
 * the sRGB colours, lighter over darker; 1 (same) .. 21 (black on white). */
double theme_contrast(uint32_t a, uint32_t b);

/* The contrast of text in fg on bg as painted with attrs: dim draws the foreground halfway
 * to the background (what VTE and xterm's faint do), reverse swaps the two. */
double theme_painted_contrast(uint32_t fg, uint32_t bg, unsigned attrs);

/* The least contrast an element must keep: 4.5 (WCAG AA for text) for what is read, 3 (WCAG's
 * minimum for large text and for interface parts) for labels, borders, rules, the bold state
 * words and error lines (whose hue carries the meaning: red stays red on 8 colours) and the
 * deliberately quiet secondary text (reasoning, notes, ids, hints). */
double theme_min_contrast(int element);

/* The terminal's own colours ("default") on a dark or a light terminal, as xterm draws them:
 * dark is #e5e5e5 on #000000, light #000000 on #ffffff. */
void theme_terminal_colors(theme_background background, uint32_t *fg, uint32_t *bg);

#endif
