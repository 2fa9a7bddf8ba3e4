/* test_ui_theme: the shipped themes load, default.theme equals the built-in defaults, mono has
 * no colours, missing elements inherit, #rrggbb maps to the nearest xterm-256 colour, and bad
 * lines are errors naming file:line. */
#include <string.h>

#include "tests/unit/check.h"
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

int main(void)
{
    test_shipped();
    test_parse();
    test_errors();
    test_colour_mapping();
    return check_finish();
}
