/* test_ui_paint: theme colours mapped to what a terminal can show (direct colour, 256, the
 * nearest of 16 and of 8, none), and THEME_ATTR_* as curses attributes; no screen needed. */
#include "check.h"
#include "ui/paint.h"

static theme_color rgb(uint32_t v) { return (theme_color){.index = (int16_t)theme_rgb_to_256(v), .is_rgb = 1, .rgb = v}; }
static theme_color idx(int i) { return (theme_color){.index = (int16_t)i}; }

int main(void)
{
    theme_color def = idx(THEME_COLOR_DEFAULT);
    for (int d = PAINT_COLORS_NONE; d <= PAINT_COLORS_DIRECT; d++)
        CHECK_INT(paint_map_color(def, (paint_depth)d), -1);
    /* direct: #rrggbb as given; named 0..7 stay ANSI; palette indexes as their RGB */
    CHECK_INT(paint_map_color(rgb(0xffaa00), PAINT_COLORS_DIRECT), 0xffaa00);
    CHECK_INT(paint_map_color(rgb(0x000001), PAINT_COLORS_DIRECT), 8);
    CHECK_INT(paint_map_color(idx(3), PAINT_COLORS_DIRECT), 3);
    CHECK_INT(paint_map_color(idx(196), PAINT_COLORS_DIRECT), 0xff0000);
    /* 256: indexes as they are, #rrggbb to the nearest of the cube and greys */
    CHECK_INT(paint_map_color(idx(245), PAINT_COLORS_256), 245);
    CHECK_INT(paint_map_color(rgb(0xff0000), PAINT_COLORS_256), 196);
    CHECK_INT(paint_map_color(rgb(0x808080), PAINT_COLORS_256), 244);
    /* 16 and 8: the nearest of xterm's first 16 / 8; a bright name falls back to its dark twin */
    CHECK_INT(paint_map_color(rgb(0xffaa00), PAINT_COLORS_16), 3);  /* cdcd00 is nearer than ffff00 */
    CHECK_INT(paint_map_color(rgb(0xffaa00), PAINT_COLORS_8), 3);
    CHECK_INT(paint_map_color(rgb(0x202040), PAINT_COLORS_8), 0);
    CHECK_INT(paint_map_color(idx(9), PAINT_COLORS_16), 9);
    CHECK_INT(paint_map_color(idx(9), PAINT_COLORS_8), 1);
    CHECK_INT(paint_map_color(idx(245), PAINT_COLORS_8), 7);
    CHECK_INT(paint_map_color(idx(21), PAINT_COLORS_16), 4);
    CHECK_INT(paint_map_color(rgb(0xff5555), PAINT_COLORS_16), 9);
    CHECK_INT(paint_map_color(rgb(0xffaa00), PAINT_COLORS_NONE), -1);
    CHECK(paint_attrs(THEME_ATTR_BOLD | THEME_ATTR_ITALIC) == (A_BOLD | A_ITALIC));
    CHECK(paint_attrs(THEME_ATTR_DIM | THEME_ATTR_UNDERLINE | THEME_ATTR_REVERSE) ==
          (A_DIM | A_UNDERLINE | A_REVERSE));
    CHECK(paint_attrs(0) == A_NORMAL);
    return check_finish();
}
