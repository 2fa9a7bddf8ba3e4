/* theme: built-in default styles, the .theme parser and xterm-256 colour mapping. */
#include "ui/theme.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/file_io.h"

static const char *const element_names[THEME_N_ELEMENTS] = {
    [THEME_TEXT] = "text",
    [THEME_USER_LABEL] = "user_label",
    [THEME_USER_TEXT] = "user_text",
    [THEME_ASSISTANT_LABEL] = "assistant_label",
    [THEME_REASONING] = "reasoning",
    [THEME_REASONING_HEADER] = "reasoning_header",
    [THEME_HEADING] = "heading",
    [THEME_CODE] = "code",
    [THEME_CODE_LABEL] = "code_label",
    [THEME_INLINE_CODE] = "inline_code",
    [THEME_QUOTE] = "quote",
    [THEME_LIST_MARKER] = "list_marker",
    [THEME_LINK] = "link",
    [THEME_RULE] = "rule",
    [THEME_TABLE_BORDER] = "table_border",
    [THEME_TABLE_HEADER] = "table_header",
    [THEME_TOOL_BORDER] = "tool_border",
    [THEME_TOOL_NAME] = "tool_name",
    [THEME_TOOL_ID] = "tool_id",
    [THEME_TOOL_ARGS] = "tool_args",
    [THEME_TOOL_RESULT] = "tool_result",
    [THEME_TOOL_WAITING] = "tool_waiting",
    [THEME_TOOL_RUNNING] = "tool_running",
    [THEME_TOOL_OK] = "tool_ok",
    [THEME_TOOL_FAILED] = "tool_failed",
    [THEME_TOOL_DENIED] = "tool_denied",
    [THEME_FOLD_HINT] = "fold_hint",
    [THEME_NOTE] = "note",
    [THEME_ERROR] = "error",
    [THEME_STATUS] = "status",
    [THEME_STATUS_ACCENT] = "status_accent",
    [THEME_SEPARATOR] = "separator",
    [THEME_INPUT] = "input",
    [THEME_INPUT_PROMPT] = "input_prompt",
    [THEME_SELECTION] = "selection",
    [THEME_SEARCH_MATCH] = "search_match",
    [THEME_SEARCH_CURRENT] = "search_current",
};

/* The dark defaults; themes/default.theme writes out the same values (a unit test keeps the
 * two equal). */
static const char default_theme_text[] =
    "text = default default\n"
    "user_label = bright_cyan default bold\n"
    "user_text = default default\n"
    "assistant_label = bright_magenta default bold\n"
    "reasoning = 245 default italic\n"
    "reasoning_header = 245 default\n"
    "heading = 221 default bold\n"
    "code = 252 236\n"
    "code_label = 244 236 italic\n"
    "inline_code = 216 236\n"
    "quote = 250 default italic\n"
    "list_marker = 75 default bold\n"
    "link = 75 default underline\n"
    "rule = 241 default\n"
    "table_border = 241 default\n"
    "table_header = default default bold\n"
    "tool_border = 241 default\n"
    "tool_name = bright_white default bold\n"
    "tool_id = 244 default\n"
    "tool_args = 250 default\n"
    "tool_result = 252 default\n"
    "tool_waiting = yellow default bold\n"
    "tool_running = cyan default\n"
    "tool_ok = green default\n"
    "tool_failed = bright_red default bold\n"
    "tool_denied = 208 default\n"
    "fold_hint = 244 default italic\n"
    "note = 246 default\n"
    "error = bright_red default bold\n"
    "status = 252 237\n"
    "status_accent = 117 237 bold\n"
    "separator = 241 default\n"
    "input = default default\n"
    "input_prompt = bright_cyan default bold\n"
    "selection = bright_cyan default bold\n"
    "search_match = black 222\n"
    "search_current = black 208 bold\n";

static const char *const color_names[16] = {
    "black", "red", "green", "yellow", "blue", "magenta", "cyan", "white",
    "bright_black", "bright_red", "bright_green", "bright_yellow", "bright_blue",
    "bright_magenta", "bright_cyan", "bright_white",
};

static const struct {
    const char *name;
    unsigned bit;
} attr_names[] = {
    {"bold", THEME_ATTR_BOLD},         {"dim", THEME_ATTR_DIM},
    {"italic", THEME_ATTR_ITALIC},     {"underline", THEME_ATTR_UNDERLINE},
    {"reverse", THEME_ATTR_REVERSE},
};

const char *theme_element_name(int element)
{
    return element >= 0 && element < THEME_N_ELEMENTS ? element_names[element] : NULL;
}

static int word_is(const char *s, size_t len, const char *word)
{
    return strlen(word) == len && !memcmp(s, word, len);
}

int theme_element_from_name(const char *name, size_t len)
{
    for (int e = 0; e < THEME_N_ELEMENTS; e++)
        if (word_is(name, len, element_names[e]))
            return e;
    return -1;
}

static const int cube_levels[6] = {0, 95, 135, 175, 215, 255};

uint32_t theme_256_to_rgb(int index)
{
    static const uint32_t ansi[16] = {
        0x000000, 0xcd0000, 0x00cd00, 0xcdcd00, 0x0000ee, 0xcd00cd, 0x00cdcd, 0xe5e5e5,
        0x7f7f7f, 0xff0000, 0x00ff00, 0xffff00, 0x5c5cff, 0xff00ff, 0x00ffff, 0xffffff,
    };
    if (index < 0 || index > 255)
        return 0;
    if (index < 16)
        return ansi[index];
    if (index < 232) {
        int i = index - 16;
        return (uint32_t)cube_levels[i / 36] << 16 | (uint32_t)cube_levels[i / 6 % 6] << 8 |
               (uint32_t)cube_levels[i % 6];
    }
    uint32_t g = (uint32_t)(8 + 10 * (index - 232));
    return g << 16 | g << 8 | g;
}

static long rgb_distance(uint32_t a, uint32_t b)
{
    long dr = (long)(a >> 16 & 255) - (long)(b >> 16 & 255);
    long dg = (long)(a >> 8 & 255) - (long)(b >> 8 & 255);
    long db = (long)(a & 255) - (long)(b & 255);
    return dr * dr + dg * dg + db * db;
}

int theme_rgb_to_256(uint32_t rgb)
{
    int best = 16;
    long best_d = -1;
    for (int i = 16; i < 256; i++) {
        long d = rgb_distance(rgb, theme_256_to_rgb(i));
        if (best_d < 0 || d < best_d) {
            best = i;
            best_d = d;
        }
    }
    return best;
}

/* sRGB channel 0..255 to linear light (the WCAG 2 formula). */
static double linear_channel(uint32_t v)
{
    double c = (double)v / 255.0;
    return c <= 0.04045 ? c / 12.92 : pow((c + 0.055) / 1.055, 2.4);
}

static double relative_luminance(uint32_t rgb)
{
    return 0.2126 * linear_channel(rgb >> 16 & 255) + 0.7152 * linear_channel(rgb >> 8 & 255) +
           0.0722 * linear_channel(rgb & 255);
}

double theme_contrast(uint32_t a, uint32_t b)
{
    double la = relative_luminance(a), lb = relative_luminance(b);
    return la > lb ? (la + 0.05) / (lb + 0.05) : (lb + 0.05) / (la + 0.05);
}

double theme_painted_contrast(uint32_t fg, uint32_t bg, unsigned attrs)
{
    if (attrs & THEME_ATTR_DIM) {
        uint32_t mixed = 0;
        for (int shift = 0; shift <= 16; shift += 8)
            mixed |= (((fg >> shift & 255) + (bg >> shift & 255)) / 2) << shift;
        fg = mixed;
    }
    return theme_contrast(fg, bg);
}

double theme_min_contrast(int element)
{
    switch (element) {
    case THEME_USER_LABEL:
    case THEME_ASSISTANT_LABEL:
    case THEME_TOOL_WAITING:
    case THEME_TOOL_RUNNING:
    case THEME_TOOL_OK:
    case THEME_TOOL_FAILED:
    case THEME_TOOL_DENIED:
    case THEME_ERROR:
    case THEME_REASONING:
    case THEME_REASONING_HEADER:
    case THEME_CODE_LABEL:
    case THEME_LIST_MARKER:
    case THEME_RULE:
    case THEME_TABLE_BORDER:
    case THEME_TOOL_BORDER:
    case THEME_TOOL_ID:
    case THEME_FOLD_HINT:
    case THEME_NOTE:
    case THEME_SEPARATOR:
    case THEME_INPUT_PROMPT:
    case THEME_SELECTION:
        return 3.0;
    default:
        return 4.5;
    }
}

void theme_terminal_colors(theme_background background, uint32_t *fg, uint32_t *bg)
{
    int light = background == THEME_BACKGROUND_LIGHT;
    *fg = light ? 0x000000 : 0xe5e5e5;
    *bg = light ? 0xffffff : 0x000000;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int parse_color(const char *s, size_t len, theme_color *c)
{
    memset(c, 0, sizeof *c);
    if (word_is(s, len, "default")) {
        c->index = THEME_COLOR_DEFAULT;
        return 0;
    }
    for (int i = 0; i < 16; i++)
        if (word_is(s, len, color_names[i])) {
            c->index = (int16_t)i;
            return 0;
        }
    if (len == 7 && s[0] == '#') {
        uint32_t rgb = 0;
        for (size_t i = 1; i < 7; i++) {
            int d = hex_digit(s[i]);
            if (d < 0)
                return -1;
            rgb = rgb << 4 | (uint32_t)d;
        }
        c->index = (int16_t)theme_rgb_to_256(rgb);
        c->is_rgb = 1;
        c->rgb = rgb;
        return 0;
    }
    if (len >= 1 && len <= 3) {
        int v = 0;
        for (size_t i = 0; i < len; i++) {
            if (s[i] < '0' || s[i] > '9')
                return -1;
            v = v * 10 + (s[i] - '0');
        }
        if (v > 255)
            return -1;
        c->index = (int16_t)v;
        return 0;
    }
    return -1;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* The next whitespace-separated word of line[*pos..end); 0 when none is left. */
static int next_word(const char *line, size_t end, size_t *pos, const char **w, size_t *wlen)
{
    size_t p = *pos;
    while (p < end && is_space(line[p]))
        p++;
    if (p == end)
        return 0;
    size_t start = p;
    while (p < end && !is_space(line[p]))
        p++;
    *w = line + start;
    *wlen = p - start;
    *pos = p;
    return 1;
}

/* `background = dark|light|any`: the terminal background the theme is made for; seen[] has
 * one slot past the elements for it. */
static int parse_background(theme *t, const char *line, size_t end, size_t pos, const char *where,
                            int lineno, int *seen, kimi_err *err)
{
    static const char *const kinds[] = {
        [THEME_BACKGROUND_DARK] = "dark",
        [THEME_BACKGROUND_LIGHT] = "light",
        [THEME_BACKGROUND_ANY] = "any",
    };
    if (seen[THEME_N_ELEMENTS])
        return kimi_fail(err, KIMI_ERR_INPUT, "%s:%d: background set twice (first on line %d)",
                         where, lineno, seen[THEME_N_ELEMENTS]);
    seen[THEME_N_ELEMENTS] = lineno;
    const char *w, *extra;
    size_t len, extra_len;
    int kind = -1;
    if (next_word(line, end, &pos, &w, &len) && !next_word(line, end, &pos, &extra, &extra_len))
        for (int k = 0; k < 3; k++)
            if (word_is(w, len, kinds[k]))
                kind = k;
    if (kind < 0)
        return kimi_fail(err, KIMI_ERR_INPUT, "%s:%d: background: expected dark, light or any",
                         where, lineno);
    t->background = (theme_background)kind;
    return 0;
}

static int parse_line(theme *t, const char *line, size_t end, const char *where, int lineno,
                      int *seen, kimi_err *err)
{
    const char *eq = memchr(line, '=', end);
    if (!eq)
        return kimi_fail(err, KIMI_ERR_INPUT, "%s:%d: expected 'element = fg bg [attributes]'",
                         where, lineno);
    size_t pos = 0, len;
    const char *w;
    size_t name_end = (size_t)(eq - line);
    if (!next_word(line, name_end, &pos, &w, &len))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s:%d: missing element name before '='", where,
                         lineno);
    size_t rest = pos;
    const char *extra;
    size_t extra_len;
    if (next_word(line, name_end, &rest, &extra, &extra_len))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s:%d: element name '%.*s %.*s' has a space",
                         where, lineno, (int)len, w, (int)extra_len, extra);
    if (word_is(w, len, "background"))
        return parse_background(t, line, end, name_end + 1, where, lineno, seen, err);
    int e = theme_element_from_name(w, len);
    if (e < 0)
        return kimi_fail(err, KIMI_ERR_INPUT, "%s:%d: unknown element '%.*s'", where, lineno,
                         (int)len, w);
    if (seen[e])
        return kimi_fail(err, KIMI_ERR_INPUT, "%s:%d: element '%s' set twice (first on line %d)",
                         where, lineno, element_names[e], seen[e]);
    seen[e] = lineno;

    theme_style st = {0};
    pos = name_end + 1;
    const char *what[2] = {"foreground", "background"};
    theme_color *col[2] = {&st.fg, &st.bg};
    for (int i = 0; i < 2; i++) {
        if (!next_word(line, end, &pos, &w, &len))
            return kimi_fail(err, KIMI_ERR_INPUT, "%s:%d: %s: missing %s colour", where, lineno,
                             element_names[e], what[i]);
        if (parse_color(w, len, col[i]))
            return kimi_fail(err, KIMI_ERR_INPUT,
                             "%s:%d: %s: bad %s colour '%.*s' (a name, default, 0-255 or "
                             "#rrggbb)",
                             where, lineno, element_names[e], what[i], (int)len, w);
    }
    while (next_word(line, end, &pos, &w, &len)) {
        unsigned bit = 0;
        for (size_t i = 0; i < sizeof attr_names / sizeof attr_names[0]; i++)
            if (word_is(w, len, attr_names[i].name))
                bit = attr_names[i].bit;
        if (!bit)
            return kimi_fail(err, KIMI_ERR_INPUT,
                             "%s:%d: %s: bad attribute '%.*s' (bold, dim, italic, underline, "
                             "reverse)",
                             where, lineno, element_names[e], (int)len, w);
        st.attrs |= bit;
    }
    t->style[e] = st;
    return 0;
}

static int load_text_over(theme *t, const char *text, size_t n, const char *where, kimi_err *err)
{
    int seen[THEME_N_ELEMENTS + 1] = {0}; /* the line each element was set on; then background */
    int lineno = 0;
    for (size_t p = 0; p < n;) {
        const char *nl = memchr(text + p, '\n', n - p);
        size_t end = nl ? (size_t)(nl - text) : n;
        lineno++;
        const char *line = text + p;
        size_t len = end - p, i = 0;
        while (i < len && is_space(line[i]))
            i++;
        if (i < len && line[i] != '#' && memchr(line, 0, len))
            return kimi_fail(err, KIMI_ERR_INPUT, "%s:%d: NUL byte in the line", where, lineno);
        if (i < len && line[i] != '#') {
            int rc = parse_line(t, line, len, where, lineno, seen, err);
            if (rc)
                return rc;
        }
        p = end + 1;
    }
    return 0;
}

void theme_init_default(theme *t)
{
    memset(t, 0, sizeof *t);
    for (int e = 0; e < THEME_N_ELEMENTS; e++)
        t->style[e].fg.index = t->style[e].bg.index = THEME_COLOR_DEFAULT;
    /* The built-in text is checked by the unit tests; it cannot fail. */
    load_text_over(t, default_theme_text, sizeof default_theme_text - 1, "built-in default", NULL);
}

int theme_load_text(theme *t, const char *text, size_t n, const char *where, kimi_err *err)
{
    theme tmp;
    theme_init_default(&tmp);
    int rc = load_text_over(&tmp, text, n, where, err);
    if (rc)
        return rc;
    *t = tmp;
    return 0;
}

int theme_load_file(theme *t, const char *path, kimi_err *err)
{
    char *data = NULL;
    size_t size = 0;
    int rc = file_read_all(path, &data, &size, err);
    if (rc) {
        if (err)
            err->code = KIMI_ERR_USAGE;
        return KIMI_ERR_USAGE;
    }
    rc = theme_load_text(t, data, size, path, err);
    free(data);
    return rc;
}
