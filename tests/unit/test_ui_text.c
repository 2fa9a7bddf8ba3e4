/* test_ui_text: grapheme-cluster widths (ASCII, CJK, combining marks, ZWJ emoji, flags,
 * Hangul, tabs, controls), cutting to a width, and word wrapping with prefixes. */
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"
#include "tests/unit/ui_line_text.h"
#include "ui/styled_lines.h"
#include "ui/text_width.h"
#include "ui/term_probe.h"
#include "ui/theme.h"
#include "ui/wrap.h"

#define FAMILY "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7" /* 👨‍👩‍👧 */
#define FLAG_FR "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7"                                         /* 🇫🇷 */
#define E_ACUTE "e\xCC\x81"                                                                  /* e + U+0301 */
#define HEART_VS16 "\xE2\x9D\xA4\xEF\xB8\x8F"                                                /* ❤️ */
#define THUMBS_TONE "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD"                                       /* 👍🏽 */
#define ZHONG "\xE4\xB8\xAD"                                                                 /* 中 */
#define WEN "\xE6\x96\x87"                                                                   /* 文 */

static void check_cluster(const char *s, size_t want_len, int want_width)
{
    int w = -1;
    size_t len = text_cluster(s, strlen(s), 0, &w);
    CHECK_MSG(len == want_len && w == want_width, "\"%s\": cluster %zu bytes width %d, want %zu and %d",
              s, len, w, want_len, want_width);
}

static void test_clusters(void)
{
    check_cluster("a", 1, 1);
    check_cluster("ab", 1, 1);
    check_cluster(ZHONG WEN, 3, 2);
    check_cluster(E_ACUTE "x", 3, 1);
    check_cluster(FAMILY "x", sizeof FAMILY - 1, 2);
    check_cluster(FLAG_FR FLAG_FR, sizeof FLAG_FR - 1, 2);
    check_cluster(HEART_VS16, sizeof HEART_VS16 - 1, 2);
    check_cluster(THUMBS_TONE, sizeof THUMBS_TONE - 1, 2);
    check_cluster("\xE1\x84\x80\xE1\x85\xA1", 6, 2); /* Hangul L + V jamo: one syllable */
    check_cluster("\xE2\x80\x8B", 3, 0);              /* zero-width space */
    check_cluster("\xEF\xBD\x81", 3, 2);              /* fullwidth a */

    CHECK_INT(text_width("hello", 5), 5);
    CHECK_INT(text_width(ZHONG WEN "ab", 8), 6);
    CHECK_INT(text_width(E_ACUTE E_ACUTE, 6), 2);
    CHECK_INT(text_width(FAMILY FLAG_FR "x", strlen(FAMILY FLAG_FR "x")), 5);

    int w = -1;
    const char *cjk = ZHONG WEN ZHONG;
    CHECK_INT(text_fit(cjk, 9, 5, &w), 6); /* 中文 fits, the third would need columns 5-6 */
    CHECK_INT(w, 4);
    CHECK_INT(text_fit(FAMILY "ab", strlen(FAMILY "ab"), 1, &w), 0); /* never half a cluster */
    CHECK_INT(text_fit(E_ACUTE "b", 4, 1, &w), 3);                   /* the mark stays attached */
    CHECK_INT(w, 1);
}

/* A terminal that draws the parts of a cluster apart (tmux 3.3, xterm): the layout counts each
 * part's columns, so the columns after it are where the terminal puts them. */
static void test_terminal_profiles(void)
{
    text_set_terminal(&(text_terminal){.splits_modifiers = 1, .narrow_vs16 = 1});
    check_cluster(THUMBS_TONE "x", sizeof THUMBS_TONE - 1, 4); /* one cluster, two glyphs */
    check_cluster(HEART_VS16 "x", sizeof HEART_VS16 - 1, 1);
    check_cluster(FAMILY "x", sizeof FAMILY - 1, 2);           /* ZWJ still joins */
    check_cluster(FLAG_FR, sizeof FLAG_FR - 1, 2);
    check_cluster(E_ACUTE "x", 3, 1);
    text_set_terminal(&(text_terminal){.splits_zwj = 1});
    check_cluster(FAMILY "x", sizeof FAMILY - 1, 6);
    check_cluster(THUMBS_TONE, sizeof THUMBS_TONE - 1, 2);
    check_cluster(HEART_VS16, sizeof HEART_VS16 - 1, 2);
    CHECK_INT(text_fit(FAMILY "ab", strlen(FAMILY "ab"), 5, NULL), 0); /* never part of a cluster */
    /* what the cursor reports after 👍🏽, ❤️ and 👨‍👩 tell (columns 1-based) */
    text_terminal t;
    term_probe_decide(5, 2, 3, &t);
    CHECK(t.splits_modifiers && t.narrow_vs16 && !t.splits_zwj);
    term_probe_decide(3, 3, 5, &t);
    CHECK(!t.splits_modifiers && !t.narrow_vs16 && t.splits_zwj);
    text_set_terminal(NULL);
    check_cluster(FAMILY "x", sizeof FAMILY - 1, 2);
    check_cluster(THUMBS_TONE, sizeof THUMBS_TONE - 1, 2);
}

static void check_displayable(const char *in, size_t n, const char *want)
{
    strbuf b = {0};
    text_displayable(&b, in, n);
    char *got = strbuf_take(&b);
    CHECK_STR(got, want);
    free(got);
}

static void test_displayable(void)
{
    check_displayable("a\tb", 3, "a       b");
    check_displayable("\tx", 2, "        x");
    check_displayable("abcdefgh\tx", 10, "abcdefgh        x");
    check_displayable(ZHONG "\tx", 5, ZHONG "      x"); /* the tab stop counts 中 as 2 */
    check_displayable("\x1b[31mred", 8, "^[[31mred");
    check_displayable("del\x7f", 4, "del^?");
    check_displayable("bad\xff!", 5, "bad\xEF\xBF\xBD!");
    check_displayable("c1\xC2\x85.", 5, "c1\xEF\xBF\xBD.");
    check_displayable("crlf\r", 5, "crlf");
    check_displayable("cut" "\xE4\xB8", 5, "cut\xEF\xBF\xBD");
}

static void check_terminal_safe(const char *in, const char *want)
{
    strbuf b = {0};
    text_terminal_safe(&b, in, strlen(in));
    char *got = strbuf_take(&b);
    CHECK_STR(got, want);
    free(got);
}

/* The plain front end's form: the full screen's cleaning, newlines and tabs kept (issue 18: an
 * id with \r\e[2K rewrote the approval line, OSC 0/52 set the title or the clipboard). */
static void test_terminal_safe(void)
{
    check_terminal_safe("a\tb\nc", "a\tb\nc");
    check_terminal_safe("x\r\ny\r\n", "x\ny\n");
    check_terminal_safe("id\r\x1b[2Kother", "id^M^[[2Kother");
    check_terminal_safe("\x1b]0;title\a", "^[]0;title^G");
    check_terminal_safe("\x1b]52;c;aGk=\x1b\\", "^[]52;c;aGk=^[\\");
    check_terminal_safe("csi\xC2\x9b" "31m", "csi\xEF\xBF\xBD" "31m");   /* C1 CSI */
    check_terminal_safe("bad\xff " ZHONG, "bad\xEF\xBF\xBD " ZHONG);
    check_terminal_safe("del\x7f\b", "del^?^H");
}

typedef struct {
    styled_lines l;
    char buf[16][256];
} wrapped;

static size_t wrap_text(wrapped *w, const char *s, int width, const wrap_prefix *prefix)
{
    styled_lines_init(&w->l);
    wrap_piece p = {s, strlen(s), THEME_TEXT, 0};
    size_t n = wrap_pieces(&w->l, &p, 1, width, prefix);
    for (size_t i = 0; i < w->l.n_lines && i < 16; i++)
        ui_line_text(&w->l, i, w->buf[i], sizeof w->buf[i]);
    return n;
}

static void test_wrap_ascii(void)
{
    wrapped w;
    CHECK_INT(wrap_text(&w, "hello world", 11, NULL), 1);
    CHECK_STR(w.buf[0], "hello world");
    CHECK_INT(w.l.lines[0].width, 11);
    styled_lines_free(&w.l);

    CHECK_INT(wrap_text(&w, "hello world", 10, NULL), 2);
    CHECK_STR(w.buf[0], "hello");
    CHECK_STR(w.buf[1], "world");
    styled_lines_free(&w.l);

    CHECK_INT(wrap_text(&w, "hello world", 5, NULL), 2); /* exact width; the space is dropped */
    CHECK_STR(w.buf[0], "hello");
    CHECK_STR(w.buf[1], "world");
    styled_lines_free(&w.l);

    CHECK_INT(wrap_text(&w, "abcdefghij", 4, NULL), 3); /* a long word is cut */
    CHECK_STR(w.buf[0], "abcd");
    CHECK_STR(w.buf[1], "efgh");
    CHECK_STR(w.buf[2], "ij");
    styled_lines_free(&w.l);

    CHECK_INT(wrap_text(&w, "ab verylongword", 6, NULL), 3); /* to a new line, then cut */
    CHECK_STR(w.buf[0], "ab");
    CHECK_STR(w.buf[1], "verylo");
    CHECK_STR(w.buf[2], "ngword");
    styled_lines_free(&w.l);

    CHECK_INT(wrap_text(&w, "  indented text", 40, NULL), 1); /* leading spaces are kept */
    CHECK_STR(w.buf[0], "  indented text");
    styled_lines_free(&w.l);

    CHECK_INT(wrap_text(&w, "", 10, NULL), 1);
    CHECK_STR(w.buf[0], "");
    styled_lines_free(&w.l);
}

/* Every line at most width columns (or one cluster where a cluster is wider), whole clusters
 * only, and nothing lost or reordered. */
static void check_wrap_keeps(const char *s, int width, size_t cluster_bytes)
{
    wrapped w;
    size_t n = wrap_text(&w, s, width, NULL);
    char joined[1024] = "";
    int ok = n == w.l.n_lines;
    for (size_t i = 0; i < n && i < 16; i++) {
        ok &= w.l.lines[i].width <= width || strlen(w.buf[i]) == cluster_bytes;
        ok &= strlen(w.buf[i]) % cluster_bytes == 0;
        strcat(joined, w.buf[i]);
    }
    CHECK_MSG(ok, "\"%s\" at width %d", s, width);
    CHECK_STR(joined, s);
    styled_lines_free(&w.l);
}

static void test_wrap_unicode(void)
{
    const char *cjk = ZHONG WEN ZHONG WEN ZHONG;
    wrapped w;
    CHECK_INT(wrap_text(&w, cjk, 5, NULL), 3); /* 4 + 4 + 2 columns: a wide cluster never splits */
    CHECK_INT(w.l.lines[0].width, 4);
    CHECK_INT(w.l.lines[2].width, 2);
    styled_lines_free(&w.l);
    check_wrap_keeps(cjk, 5, 3);
    check_wrap_keeps(cjk, 1, 3); /* narrower than a cluster: one per line, overflowing */
    check_wrap_keeps(E_ACUTE E_ACUTE E_ACUTE E_ACUTE E_ACUTE E_ACUTE, 3, 3);
    check_wrap_keeps(FAMILY FAMILY FAMILY, 5, sizeof FAMILY - 1);
    check_wrap_keeps(FLAG_FR FLAG_FR FLAG_FR, 3, sizeof FLAG_FR - 1);

    CHECK_INT(wrap_text(&w, "ab" ZHONG WEN, 5, NULL), 2); /* lines break between CJK clusters */
    CHECK_STR(w.buf[0], "ab" ZHONG);
    CHECK_STR(w.buf[1], WEN);
    styled_lines_free(&w.l);
}

static void test_wrap_prefix_and_styles(void)
{
    wrap_piece first[1] = {{"- ", 2, THEME_LIST_MARKER, 0}};
    wrap_piece next[1] = {{"  ", 2, THEME_TEXT, 0}};
    wrap_prefix prefix = {first, 1, next, 1};
    wrapped w;
    CHECK_INT(wrap_text(&w, "one two three four", 10, &prefix), 3);
    CHECK_STR(w.buf[0], "- one two");
    CHECK_STR(w.buf[1], "  three");
    CHECK_STR(w.buf[2], "  four");
    CHECK_INT(w.l.runs[w.l.lines[0].first_run].element, THEME_LIST_MARKER);
    styled_lines_free(&w.l);

    /* styles survive breaks; runs of one style merge */
    wrap_piece p[3] = {
        {"plain ", 6, THEME_TEXT, 0},
        {"bold words", 10, THEME_TEXT, THEME_ATTR_BOLD},
        {" end", 4, THEME_TEXT, 0},
    };
    styled_lines l;
    styled_lines_init(&l);
    CHECK_INT(wrap_pieces(&l, p, 3, 11, NULL), 2);
    char buf[64];
    CHECK_STR(ui_line_text(&l, 0, buf, sizeof buf), "plain bold");
    CHECK_STR(ui_line_text(&l, 1, buf, sizeof buf), "words end");
    CHECK_INT(l.lines[0].n_runs, 2);
    CHECK_INT(l.runs[l.lines[0].first_run + 1].attrs, THEME_ATTR_BOLD);
    CHECK_INT(l.runs[l.lines[1].first_run].attrs, THEME_ATTR_BOLD);
    CHECK_INT(l.runs[l.lines[1].first_run].col, 0);
    CHECK_INT(l.runs[l.lines[1].first_run + 1].col, 5);

    styled_lines_truncate(&l, 1);
    CHECK_INT(l.n_lines, 1);
    CHECK_INT(l.n_runs, 2);
    CHECK_INT(l.text_len, 10);
    styled_lines_free(&l);
}

int main(void)
{
    test_clusters();
    test_terminal_profiles();
    test_displayable();
    test_terminal_safe();
    test_wrap_ascii();
    test_wrap_unicode();
    test_wrap_prefix_and_styles();
    return check_finish();
}
