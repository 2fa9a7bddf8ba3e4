/* test_ui_theme: the shipped themes load, default.theme equals the built-in defaults, mono has
 * no colours, missing elements inherit, #rrggbb maps to the nearest xterm-256 colour, bad
 * lines are errors naming file:line, and every theme in themes/ keeps its contrast at every
 * colour depth on the backgrounds it is for. */
#include <dirent.h>
#include <string.h>

#include "tests/unit/check.h"
#include "ui/paint.h"
#include "ui/theme.h"

static int same_style(const theme_style *a, const theme_style *b)
{
    return a->fg.index == b->fg.index && a->bg.index == b->bg.index && a->attrs == b->attrs &&
           a->fg.is_rgb == b->fg.is_rgb && a->bg.is_rgb == b->bg.is_rgb &&
           a->fg.rgb == b->fg.rgb && a->bg.rgb == b->bg.rgb;
}

static void test_shipped(void)
{
    const char *names[] = {"default", "light", "high-contrast", "mono"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        theme t;
        kimi_err err = {0};
        char path[64];
        snprintf(path, sizeof path, "themes/%s.theme", names[i]);
        int rc = theme_load_file(&t, path, &err);
        CHECK_MSG(rc == 0, "%s: %s", names[i], err.msg);
    }
    theme builtin, file;
    theme_init_default(&builtin);
    kimi_err err = {0};
    CHECK_INT(theme_load_file(&file, "themes/default.theme", &err), 0);
    int same = 1;
    for (int e = 0; e < THEME_N_ELEMENTS; e++)
        same &= same_style(&builtin.style[e], &file.style[e]);
    CHECK_MSG(same, "themes/default.theme differs from the built-in defaults");

    theme mono;
    CHECK_INT(theme_load_file(&mono, "themes/mono.theme", &err), 0);
    int colourless = 1, attributed = 0;
    for (int e = 0; e < THEME_N_ELEMENTS; e++) {
        colourless &= mono.style[e].fg.index == THEME_COLOR_DEFAULT &&
                      mono.style[e].bg.index == THEME_COLOR_DEFAULT;
        attributed += mono.style[e].attrs != 0;
    }
    CHECK(colourless);
    CHECK(attributed > 20);
    CHECK_INT(mono.style[THEME_STATUS].attrs, THEME_ATTR_REVERSE);

    theme light;
    CHECK_INT(theme_load_file(&light, "themes/light.theme", &err), 0);
    CHECK(light.style[THEME_USER_LABEL].fg.is_rgb);
    CHECK_INT(light.style[THEME_USER_LABEL].fg.rgb, 0x005f87);
    CHECK_INT(light.style[THEME_USER_LABEL].fg.index, 24);

    /* every element has a name that maps back */
    int names_ok = 1;
    for (int e = 0; e < THEME_N_ELEMENTS; e++) {
        const char *n = theme_element_name(e);
        names_ok &= n && theme_element_from_name(n, strlen(n)) == e;
    }
    CHECK(names_ok);
    CHECK(theme_element_name(THEME_N_ELEMENTS) == NULL);
}

static void test_parse(void)
{
    const char *text = "# comment\n"
                       "\n"
                       "  heading = #ff0000 default bold underline\n"
                       "code = 7 bright_black\n"
                       "error = red 255 reverse dim italic\n";
    theme t, d;
    theme_init_default(&d);
    kimi_err err = {0};
    CHECK_INT(theme_load_text(&t, text, strlen(text), "x.theme", &err), 0);
    CHECK_INT(t.style[THEME_HEADING].fg.index, 196);
    CHECK(t.style[THEME_HEADING].fg.is_rgb);
    CHECK_INT(t.style[THEME_HEADING].bg.index, THEME_COLOR_DEFAULT);
    CHECK_INT(t.style[THEME_HEADING].attrs, THEME_ATTR_BOLD | THEME_ATTR_UNDERLINE);
    CHECK_INT(t.style[THEME_CODE].fg.index, 7);
    CHECK_INT(t.style[THEME_CODE].bg.index, 8);
    CHECK_INT(t.style[THEME_CODE].attrs, 0);
    CHECK_INT(t.style[THEME_ERROR].fg.index, 1);
    CHECK_INT(t.style[THEME_ERROR].bg.index, 255);
    CHECK_INT(t.style[THEME_ERROR].attrs, THEME_ATTR_REVERSE | THEME_ATTR_DIM | THEME_ATTR_ITALIC);
    /* not named: the built-in default */
    CHECK(same_style(&t.style[THEME_QUOTE], &d.style[THEME_QUOTE]));
    CHECK(same_style(&t.style[THEME_STATUS], &d.style[THEME_STATUS]));
}

static void check_bad(const char *text, const char *want)
{
    theme t;
    theme_init_default(&t);
    theme before = t;
    kimi_err err = {0};
    int rc = theme_load_text(&t, text, strlen(text), "bad.theme", &err);
    CHECK_MSG(rc == KIMI_ERR_INPUT && strstr(err.msg, want), "\"%s\": rc %d, \"%s\", want \"%s\"",
              text, rc, err.msg, want);
    CHECK(!memcmp(&t, &before, sizeof t)); /* untouched on error */
}

static void test_errors(void)
{
    check_bad("text = default default\nfoo = red blue\n", "bad.theme:2: unknown element 'foo'");
    check_bad("\n\ntext = reddish default\n", "bad.theme:3: text: bad foreground colour 'reddish'");
    check_bad("text = red 256\n", "bad.theme:1: text: bad background colour '256'");
    check_bad("text = red #12345\n", "bad.theme:1: text: bad background colour '#12345'");
    check_bad("text = red #12345g\n", "bad.theme:1: text: bad background colour '#12345g'");
    check_bad("text = red blue blink\n", "bad.theme:1: text: bad attribute 'blink'");
    check_bad("text = red\n", "bad.theme:1: text: missing background colour");
    check_bad("text red blue\n", "bad.theme:1: expected 'element = fg bg [attributes]'");
    check_bad("text = red blue\ntext = red blue\n", "bad.theme:2: element 'text' set twice (first on line 1)");
    check_bad(" = red blue\n", "bad.theme:1: missing element name");
    check_bad("background = dusk\n", "bad.theme:1: background: expected dark, light or any");
    check_bad("background = light dark\n", "bad.theme:1: background: expected dark, light or any");
    check_bad("background = light\nbackground = dark\n", "bad.theme:2: background set twice (first on line 1)");

    theme t;
    kimi_err err = {0};
    CHECK_INT(theme_load_file(&t, "themes/no-such.theme", &err), KIMI_ERR_USAGE);
    CHECK(strstr(err.msg, "themes/no-such.theme") != NULL);
}

static void test_colour_mapping(void)
{
    CHECK_INT(theme_rgb_to_256(0x000000), 16);
    CHECK_INT(theme_rgb_to_256(0xffffff), 231);
    CHECK_INT(theme_rgb_to_256(0xff0000), 196);
    CHECK_INT(theme_rgb_to_256(0x5f87af), 67);  /* exactly on the cube */
    CHECK_INT(theme_rgb_to_256(0x808080), 244); /* exactly on the grey ramp: 8 + 10 * 12 */
    CHECK_INT(theme_rgb_to_256(0xeeeeee), 255);
    CHECK_INT(theme_rgb_to_256(0x767676), 243);
    CHECK_INT(theme_rgb_to_256(0x010203), 16);  /* near black */
    CHECK_INT(theme_rgb_to_256(0x7f7f7f), 244); /* grey 128 is nearer than cube 95 or 135 */
    CHECK_INT(theme_rgb_to_256(0xd75f00), 166);
    CHECK_INT(theme_rgb_to_256(0x5fd703), 76);  /* cube (1, 4, 0) */
    /* the tables agree: every cube and ramp colour maps to itself */
    int self = 1;
    for (int i = 16; i < 256; i++)
        self &= theme_rgb_to_256(theme_256_to_rgb(i)) == i ||
                theme_256_to_rgb(theme_rgb_to_256(theme_256_to_rgb(i))) == theme_256_to_rgb(i);
    CHECK(self);
    CHECK_INT(theme_256_to_rgb(67), 0x5f87af);
    CHECK_INT(theme_256_to_rgb(232), 0x080808);
}

static void test_contrast_measure(void)
{
    CHECK(theme_contrast(0x000000, 0xffffff) > 20.99 && theme_contrast(0xffffff, 0x000000) < 21.01);
    CHECK(theme_contrast(0x777777, 0x777777) == 1.0);
    /* #767676 is the lightest grey that passes 4.5 on white (WCAG's own example) */
    CHECK(theme_contrast(0x767676, 0xffffff) > 4.5 && theme_contrast(0x777777, 0xffffff) < 4.5);
    /* dim halves the way to the background: #e5e5e5 dim on black is #727272 */
    CHECK(theme_painted_contrast(0xe5e5e5, 0, THEME_ATTR_DIM) == theme_contrast(0x727272, 0));
    CHECK(theme_painted_contrast(0xe5e5e5, 0, THEME_ATTR_REVERSE) == theme_contrast(0xe5e5e5, 0));
    CHECK(theme_min_contrast(THEME_TEXT) == 4.5 && theme_min_contrast(THEME_SEPARATOR) == 3.0);

    const char *text = "background = light\n";
    theme t;
    kimi_err err = {0};
    CHECK_INT(theme_load_text(&t, text, strlen(text), "x.theme", &err), 0);
    CHECK_INT(t.background, THEME_BACKGROUND_LIGHT);
    theme_init_default(&t);
    CHECK_INT(t.background, THEME_BACKGROUND_DARK);
}

static const char *depth_name(paint_depth d)
{
    return d == PAINT_COLORS_8 ? "8" : d == PAINT_COLORS_16 ? "16" : d == PAINT_COLORS_256 ? "256" : "truecolor";
}

/* Every theme file in themes/, at 8, 16, 256 colours and truecolor, on each terminal
 * background it is for (theme_terminal_colors: xterm's dark and light; an "any" theme on
 * both), paints every element with at least theme_min_contrast (WCAG 2 ratio, the xterm
 * palette for indexed colours): what paint_palette_init would allocate. */
static void test_themes_contrast(void)
{
    DIR *dir = opendir("themes");
    CHECK(dir != NULL);
    if (!dir)
        return;
    int themes = 0, checked = 0, backgrounds_seen[3] = {0};
    struct dirent *de;
    while ((de = readdir(dir))) {
        size_t len = strlen(de->d_name);
        if (len < 7 || strcmp(de->d_name + len - 6, ".theme"))
            continue;
        char path[300];
        snprintf(path, sizeof path, "themes/%s", de->d_name);
        theme th;
        kimi_err err = {0};
        CHECK_MSG(theme_load_file(&th, path, &err) == 0, "%s", err.msg);
        themes++;
        backgrounds_seen[th.background]++;
        for (int d = PAINT_COLORS_8; d <= PAINT_COLORS_DIRECT; d++)
            for (int b = THEME_BACKGROUND_DARK; b <= THEME_BACKGROUND_LIGHT; b++) {
                if (th.background != THEME_BACKGROUND_ANY && (int)th.background != b)
                    continue;
                uint32_t term_fg, term_bg;
                theme_terminal_colors((theme_background)b, &term_fg, &term_bg);
                for (int e = 0; e < THEME_N_ELEMENTS; e++) {
                    int fg, bg;
                    paint_style_colors(&th, e, (paint_depth)d, &fg, &bg);
                    uint32_t fg_rgb = paint_color_rgb(fg, (paint_depth)d, term_fg);
                    uint32_t bg_rgb = paint_color_rgb(bg, (paint_depth)d, term_bg);
                    double c = theme_painted_contrast(fg_rgb, bg_rgb, th.style[e].attrs);
                    CHECK_MSG(c >= theme_min_contrast(e),
                              "%s at %s colours on a %s background: %s #%06x on #%06x has contrast %.2f < %.1f",
                              de->d_name, depth_name((paint_depth)d), b ? "light" : "dark",
                              theme_element_name(e), fg_rgb, bg_rgb, c, theme_min_contrast(e));
                    checked++;
                }
            }
    }
    closedir(dir);
    CHECK(themes >= 4);
    /* both backgrounds are covered: a theme for each, or one for any */
    CHECK(backgrounds_seen[THEME_BACKGROUND_ANY] ||
          (backgrounds_seen[THEME_BACKGROUND_DARK] && backgrounds_seen[THEME_BACKGROUND_LIGHT]));
    CHECK(checked >= themes * 4 * THEME_N_ELEMENTS);
}

int main(void)
{
    test_shipped();
    test_parse();
    test_errors();
    test_colour_mapping();
    test_contrast_measure();
    test_themes_contrast();
    return check_finish();
}
