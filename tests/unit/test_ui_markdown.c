/* test_ui_markdown: markdown-lite layout: each construct's lines and styles, tables aligned by
 * display width (CJK cells) and degrading when too wide, fenced code not re-flowed, plain mode,
 * and resumed (streamed) layout equal to a full one. */
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"
#include "tests/unit/ui_line_text.h"
#include "ui/markdown.h"
#include "ui/text_width.h"
#include "ui/theme.h"

#define ZHONG "\xE4\xB8\xAD"
#define WEN "\xE6\x96\x87"
#define ZI "\xE5\xAD\x97"
#define DONG "\xE6\x9D\xB1"
#define JING "\xE4\xBA\xAC"

static styled_lines layout(const char *text, int width, int flags)
{
    styled_lines l;
    styled_lines_init(&l);
    md_checkpoint cp;
    md_checkpoint_init(&cp);
    md_options o = {.width = width, .element = THEME_TEXT, .flags = flags};
    md_layout(&l, text, strlen(text), &o, &cp);
    return l;
}

static const char *line(const styled_lines *l, size_t i)
{
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    if (i >= l->n_lines)
        return "(no such line)";
    return ui_line_text(l, i, buf[k], sizeof buf[k]);
}

static const styled_run *run(const styled_lines *l, size_t i, size_t r)
{
    return &l->runs[l->lines[i].first_run + r];
}

/* The run of line i that contains text s, NULL when none. */
static const styled_run *run_with(const styled_lines *l, size_t i, const char *s)
{
    for (size_t r = 0; r < l->lines[i].n_runs; r++) {
        const styled_run *x = run(l, i, r);
        if (x->len >= strlen(s) && memmem(l->text + x->off, x->len, s, strlen(s)))
            return x;
    }
    return NULL;
}

static void test_headings_and_inline(void)
{
    styled_lines l = layout("# Title\n## Sub *it*\nplain **bold** *ital* ***both*** `co de` end\n",
                            60, 0);
    CHECK_INT(l.n_lines, 3);
    CHECK_STR(line(&l, 0), "Title");
    CHECK_INT(run(&l, 0, 0)->element, THEME_HEADING);
    CHECK_INT(run(&l, 0, 0)->attrs, THEME_ATTR_UNDERLINE);
    CHECK_STR(line(&l, 1), "Sub it");
    CHECK_INT(run_with(&l, 1, "it")->attrs, THEME_ATTR_ITALIC);
    CHECK_INT(run_with(&l, 1, "it")->element, THEME_HEADING);
    CHECK_STR(line(&l, 2), "plain bold ital both co de end");
    CHECK_INT(run_with(&l, 2, "bold")->attrs, THEME_ATTR_BOLD);
    CHECK_INT(run_with(&l, 2, "ital")->attrs, THEME_ATTR_ITALIC);
    CHECK_INT(run_with(&l, 2, "both")->attrs, THEME_ATTR_BOLD | THEME_ATTR_ITALIC);
    CHECK_INT(run_with(&l, 2, "co de")->element, THEME_INLINE_CODE);
    CHECK_INT(run_with(&l, 2, "plain")->attrs, 0);
    CHECK_INT(run_with(&l, 2, "end")->attrs, 0);
    styled_lines_free(&l);

    /* unmatched and intraword delimiters stay literal; escapes; URLs */
    l = layout("**open and snake_case_name 2*3 \\*lit\\* see https://example.com/a_b.\n", 80, 0);
    CHECK_STR(line(&l, 0), "**open and snake_case_name 2*3 *lit* see https://example.com/a_b.");
    CHECK_INT(run_with(&l, 0, "snake_case")->attrs, 0);
    const styled_run *url = run_with(&l, 0, "https://example.com/a_b");
    CHECK(url && url->element == THEME_LINK && url->len == strlen("https://example.com/a_b"));
    styled_lines_free(&l);

    l = layout("a `` code with ` tick `` b _under_ c\n", 80, 0);
    CHECK_STR(line(&l, 0), "a code with ` tick b under c");
    CHECK_INT(run_with(&l, 0, "code with ` tick")->element, THEME_INLINE_CODE);
    CHECK_INT(run_with(&l, 0, "under")->attrs, THEME_ATTR_ITALIC);
    styled_lines_free(&l);
}

static void test_blocks(void)
{
    styled_lines l = layout("\n\npara one\n\n\n\npara two\n---\n> quoted words that wrap here\n"
                            "> > nested\n\n\n",
                            20, 0);
    CHECK_INT(l.n_lines, 7);
    CHECK_STR(line(&l, 0), "para one"); /* leading blank lines dropped */
    CHECK_STR(line(&l, 1), "");         /* blank lines collapse to one */
    CHECK_STR(line(&l, 2), "para two");
    CHECK_STR(line(&l, 3), "────────────────────");
    CHECK_INT(run(&l, 3, 0)->element, THEME_RULE);
    CHECK_INT(l.lines[3].width, 20);
    CHECK_STR(line(&l, 4), "│ quoted words that");
    CHECK_STR(line(&l, 5), "│ wrap here");
    CHECK_INT(run(&l, 5, 0)->element, THEME_QUOTE);
    CHECK_INT(run_with(&l, 5, "wrap")->element, THEME_QUOTE);
    CHECK_STR(line(&l, 6), "│ │ nested"); /* trailing blank lines are not shown */
    styled_lines_free(&l);
}

static void test_lists(void)
{
    styled_lines l = layout("- alpha beta gamma delta\n  * nested item words\n12. twelve items here\n"
                            "lazy continuation line\n\nafter\n",
                            16, 0);
    CHECK_STR(line(&l, 0), "• alpha beta");
    CHECK_INT(run(&l, 0, 0)->element, THEME_LIST_MARKER);
    CHECK_STR(line(&l, 1), "  gamma delta"); /* hanging indent under the text */
    CHECK_STR(line(&l, 2), "  • nested item");
    CHECK_STR(line(&l, 3), "    words");
    CHECK_STR(line(&l, 4), "12. twelve items");
    CHECK_STR(line(&l, 5), "    here");
    CHECK_STR(line(&l, 6), "    lazy");      /* a line under an item hangs with it */
    CHECK_STR(line(&l, 7), "    continuation");
    CHECK_STR(line(&l, 8), "    line");
    CHECK_STR(line(&l, 9), "");
    CHECK_STR(line(&l, 10), "after");        /* a blank line ends the list */
    CHECK_INT(l.n_lines, 11);
    styled_lines_free(&l);
}

static void test_fenced_code(void)
{
    const char *text = "Code:\n```python\ndef f(x):  # a long comment that is not reflowed\n"
                       "\n    return x\n```\nafter **bold** ``` here\n";
    styled_lines l = layout(text, 20, 0);
    CHECK_STR(line(&l, 0), "Code:");
    CHECK_STR(line(&l, 1), " python             "); /* the label, padded to the width */
    CHECK_INT(run(&l, 1, 0)->element, THEME_CODE_LABEL);
    /* cut at 19 columns after the 1-column margin, mid-word, spaces kept as they are */
    CHECK_STR(line(&l, 2), " def f(x):  # a long");
    CHECK_STR(line(&l, 3), "  comment that is no");
    CHECK_STR(line(&l, 4), " t reflowed         ");
    CHECK_STR(line(&l, 5), "                    "); /* a blank code line stays */
    CHECK_STR(line(&l, 6), "     return x       ");
    int code_ok = 1;
    for (size_t i = 2; i <= 6; i++) {
        code_ok &= l.lines[i].width == 20;
        for (size_t r = 0; r < l.lines[i].n_runs; r++)
            code_ok &= run(&l, i, r)->element == THEME_CODE && run(&l, i, r)->attrs == 0;
    }
    CHECK(code_ok);
    CHECK_STR(line(&l, 7), "after bold ``` here");
    CHECK_INT(l.n_lines, 8);
    styled_lines_free(&l);

    /* **, lists and headings inside a fence are code; an unclosed fence runs to the end */
    l = layout("~~~\n# not a heading\n- **x**\n", 30, 0);
    CHECK_INT(l.n_lines, 2);
    CHECK_STR(line(&l, 0), " # not a heading              ");
    CHECK_STR(line(&l, 1), " - **x**                      ");
    styled_lines_free(&l);
}

/* Each line of l from..to-1 is code (THEME_CODE runs only) and reads as expected[]. */
static void check_code_lines(const styled_lines *l, size_t from, const char *const *expected, size_t n,
                             const char *what)
{
    for (size_t i = 0; i < n; i++) {
        CHECK_MSG(!strcmp(line(l, from + i), expected[i]), "%s: line %zu is '%s', expected '%s'", what, from + i,
                  line(l, from + i), expected[i]);
        for (size_t r = 0; from + i < l->n_lines && r < l->lines[from + i].n_runs; r++)
            CHECK_MSG(run(l, from + i, r)->element == THEME_CODE, "%s: line %zu is not code", what, from + i);
    }
}

/* CommonMark fences: a fence closes only with the same character, at least as many of them and
 * nothing but spaces after, so a shorter fence or the other character inside is code. The
 * Markdown export writes fences longer than any backtick run in the text to rely on this. */
static void test_fence_lengths(void)
{
    static const char *const chars[] = {"`", "~"};
    for (int c = 0; c < 2; c++) {
        const char *ch = chars[c], *other = chars[1 - c];
        for (int len = 3; len <= 5; len++) {
            char open[8] = "", shorter[8] = "", longer[8] = "", alien[8] = "", text[256], what[64];
            for (int k = 0; k < len; k++)
                strcat(open, ch);
            for (int k = 0; k < len - 1; k++)
                strcat(shorter, ch);
            strcat(strcpy(longer, open), ch);
            for (int k = 0; k < len; k++)
                strcat(alien, other);
            snprintf(what, sizeof what, "fence of %d %s", len, ch);

            /* Inside: a shorter fence (bare and with an info string), the other character's fence,
             * the same fence followed by text; then a longer fence closes it. */
            snprintf(text, sizeof text, "%smd\n%s\n%spy\n%s\n%s x\nin\n%s\nafter\n", open, shorter, shorter,
                     alien, open, longer);
            styled_lines l = layout(text, 16, 0);
            CHECK_STR(line(&l, 0), " md             ");
            char row[4][32];
            snprintf(row[0], sizeof row[0], " %-15s", shorter);
            snprintf(row[1], sizeof row[1], " %spy%*s", shorter, 15 - (len - 1) - 2, "");
            snprintf(row[2], sizeof row[2], " %-15s", alien);
            snprintf(row[3], sizeof row[3], " %s x%*s", open, 15 - len - 2, "");
            const char *const code[] = {row[0], row[1], row[2], row[3], " in             "};
            check_code_lines(&l, 1, code, 5, what);
            CHECK_MSG(!strcmp(line(&l, 6), "after") && l.n_lines == 7, "%s: %zu lines, line 6 '%s'", what,
                      l.n_lines, line(&l, 6));
            styled_lines_free(&l);

            /* The same length, indented up to 3 spaces and with trailing spaces, closes too. */
            snprintf(text, sizeof text, "%s\ncode\n   %s  \nafter\n", open, open);
            l = layout(text, 16, 0);
            CHECK_MSG(l.n_lines == 2 && !strcmp(line(&l, 1), "after"), "%s: same length did not close", what);
            styled_lines_free(&l);
        }
    }

    /* Two characters are no fence: the lines after them are text, not code. */
    styled_lines two = layout("``\nnot code\n\n~~\nnor this\n", 40, 0);
    CHECK_MSG(two.n_lines >= 2, "two-character fence: %zu lines", two.n_lines);
    for (size_t i = 0; i < two.n_lines; i++)
        for (size_t r = 0; r < two.lines[i].n_runs; r++)
            CHECK_MSG(run(&two, i, r)->element == THEME_TEXT, "two-character fence: line %zu '%s' is not text", i,
                      line(&two, i));
    styled_lines_free(&two);

    /* Nested: a 5-backtick block holding a 4-backtick block holding a 3-backtick block stays one
     * block; its own closing fence ends it. */
    styled_lines l = layout("`````\n````md\n```c\nx\n```\n````\n`````\nafter\n", 16, 0);
    const char *const nested[] = {" ````md         ", " ```c           ", " x              ", " ```            ",
                                  " ````           "};
    check_code_lines(&l, 0, nested, 5, "nested");
    CHECK_MSG(l.n_lines == 6 && !strcmp(line(&l, 5), "after"), "nested: %zu lines", l.n_lines);
    styled_lines_free(&l);

    /* A tilde block holding backtick fences, and a backtick block holding tilde fences. */
    l = layout("~~~~\n```\n~~~\n~~~~\nafter\n", 16, 0);
    const char *const mixed[] = {" ```            ", " ~~~            "};
    check_code_lines(&l, 0, mixed, 2, "mixed");
    CHECK_MSG(l.n_lines == 3 && !strcmp(line(&l, 2), "after"), "mixed: %zu lines", l.n_lines);
    styled_lines_free(&l);
}

/* Columns of the border characters of line i (display columns, from the runs). */
static int bar_columns(const styled_lines *l, size_t i, int *cols, int max)
{
    int n = 0;
    for (size_t r = 0; r < l->lines[i].n_runs && n < max; r++) {
        const styled_run *x = run(l, i, r);
        if (x->element != THEME_TABLE_BORDER)
            continue;
        for (uint32_t k = 0; k < x->len;) {
            int w;
            size_t len = text_cluster(l->text + x->off, x->len, k, &w);
            const char *c = l->text + x->off + k;
            int col = x->col + text_width(l->text + x->off, k);
            if (!memcmp(c, "│", 3) || !memcmp(c, "┬", 3) || !memcmp(c, "┼", 3) ||
                !memcmp(c, "┴", 3) || !memcmp(c, "┌", 3) || !memcmp(c, "┐", 3) ||
                !memcmp(c, "├", 3) || !memcmp(c, "┤", 3) || !memcmp(c, "└", 3) ||
                !memcmp(c, "┘", 3))
                cols[n++] = col;
            k += (uint32_t)len;
        }
    }
    return n;
}

static void test_table_cjk(void)
{
    const char *text = "| name | " DONG JING " | n |\n"
                       "|---|:-:|--:|\n"
                       "| " ZHONG WEN ZI " | x | 1 |\n"
                       "| **ab** | " DONG JING ZHONG WEN " | 12345 |\n"
                       "after\n";
    styled_lines l = layout(text, 60, 0);
    CHECK_INT(l.n_lines, 7); /* top, header, rule, 2 rows, bottom, after */
    int want[8], got[8];
    int nw = bar_columns(&l, 0, want, 8);
    CHECK_INT(nw, 4);
    int aligned = 1;
    for (size_t i = 0; i < 6; i++) {
        int n = bar_columns(&l, i, got, 8);
        aligned &= n == nw && !memcmp(got, want, sizeof(int) * (size_t)nw);
    }
    CHECK_MSG(aligned, "column borders differ between rows");
    /* column widths: name = width of 中文字 (6), 東京 column = 東京中文 (8), n = 12345 (5) */
    CHECK_INT(want[1] - want[0], 6 + 3);
    CHECK_INT(want[2] - want[1], 8 + 3);
    CHECK_INT(want[3] - want[2], 5 + 3);
    CHECK_STR(line(&l, 0), "┌────────┬──────────┬───────┐");
    CHECK_STR(line(&l, 1), "│ name   │   " DONG JING "   │     n │"); /* centred, right */
    CHECK_STR(line(&l, 2), "├────────┼──────────┼───────┤");
    CHECK_STR(line(&l, 3), "│ " ZHONG WEN ZI " │    x     │     1 │");
    CHECK_STR(line(&l, 4), "│ ab     │ " DONG JING ZHONG WEN " │ 12345 │");
    CHECK_INT(run_with(&l, 1, "name")->element, THEME_TABLE_HEADER);
    CHECK_INT(run_with(&l, 4, "ab")->attrs, THEME_ATTR_BOLD);
    CHECK_STR(line(&l, 6), "after");
    int widths_ok = 1;
    for (size_t i = 0; i < 6; i++)
        widths_ok &= l.lines[i].width == l.lines[0].width;
    CHECK(widths_ok);
    styled_lines_free(&l);

    /* narrower than natural: cells wrap inside their columns, borders still line up */
    const char *wide = "| a | b |\n|---|---|\n| one two three four five | six seven eight nine |\n";
    l = layout(wide, 24, 0);
    int ok = 1, top[4];
    int nt = bar_columns(&l, 0, top, 4);
    CHECK_INT(nt, 3);
    for (size_t i = 0; i < l.n_lines; i++) {
        ok &= l.lines[i].width <= 24;
        int n = bar_columns(&l, i, got, 8);
        ok &= n == nt && !memcmp(got, top, sizeof(int) * 3);
    }
    CHECK(ok);
    CHECK(l.n_lines > 5); /* body rows took more than one line */
    styled_lines_free(&l);

    /* far too narrow for boxes: each row as one wrapped line, never wider than the screen */
    l = layout(wide, 8, 0);
    ok = 1;
    for (size_t i = 0; i < l.n_lines; i++)
        ok &= l.lines[i].width <= 8;
    CHECK(ok);
    CHECK_STR(line(&l, 0), "a │ b");
    styled_lines_free(&l);

    /* not a table: pipes in prose, or a delimiter row of another width */
    l = layout("a | b\nplain\n| x | y |\n|---|\n", 40, 0);
    CHECK_INT(l.n_lines, 4);
    CHECK_STR(line(&l, 0), "a | b");
    CHECK_STR(line(&l, 2), "| x | y |");
    styled_lines_free(&l);
}

static void test_plain(void)
{
    styled_lines l = layout("# not markdown **x**\n\n\n  indented\tline\n", 40, MD_PLAIN);
    CHECK_INT(l.n_lines, 4);
    CHECK_STR(line(&l, 0), "# not markdown **x**");
    CHECK_STR(line(&l, 1), "");
    CHECK_STR(line(&l, 2), "");
    CHECK_STR(line(&l, 3), "  indented      line");
    styled_lines_free(&l);
}

/* Feed text in chunks of k bytes (or, with a seed, of random sizes 1..64), resuming each
 * time; the result must equal a full layout. */
static void check_streamed_by(const char *text, int width, int flags, size_t k, unsigned *seed)
{
    styled_lines full = layout(text, width, flags);
    styled_lines l;
    styled_lines_init(&l);
    md_checkpoint cp;
    md_checkpoint_init(&cp);
    md_options o = {.width = width, .element = THEME_TEXT, .flags = flags};
    size_t n = strlen(text);
    size_t max_redo = 0;
    for (size_t end = 0; end < n;) {
        if (seed) {
            *seed = *seed * 1103515245u + 12345u;
            k = 1 + (*seed >> 16) % 64;
        }
        end = end + k < n ? end + k : n;
        size_t redo = end - cp.offset;
        max_redo = redo > max_redo ? redo : max_redo;
        md_layout(&l, text, end, &o, &cp);
    }
    int same = l.n_lines == full.n_lines && l.n_runs == full.n_runs &&
               l.text_len == full.text_len && (!l.text_len || !memcmp(l.text, full.text, l.text_len));
    for (size_t i = 0; same && i < l.n_runs; i++) {
        const styled_run *a = &l.runs[i], *b = &full.runs[i];
        same = a->off == b->off && a->len == b->len && a->col == b->col && a->width == b->width &&
               a->element == b->element && a->attrs == b->attrs;
    }
    CHECK_MSG(same, "streamed in %s%zu-byte chunks at width %d: %zu lines, full layout %zu",
              seed ? "random (the last " : "", k, width, l.n_lines, full.n_lines);
    for (size_t i = 0; !same && i < l.n_lines && i < full.n_lines; i++)
        if (strcmp(line(&l, i), line(&full, i)) || l.lines[i].n_runs != full.lines[i].n_runs)
            fprintf(stderr, "  line %zu: streamed \"%s\" (%u runs), full \"%s\" (%u runs)\n", i,
                    line(&l, i), l.lines[i].n_runs, line(&full, i), full.lines[i].n_runs);
    /* resuming redoes at most a line or a table, not the text */
    CHECK_MSG(max_redo < 400, "a resume redid %zu bytes", max_redo);
    styled_lines_free(&l);
    styled_lines_free(&full);
}

static void check_streamed(const char *text, int width, int flags, size_t k)
{
    check_streamed_by(text, width, flags, k, NULL);
}

static void test_streaming(void)
{
    const char *doc =
        "# Heading\n\nSome **bold** text and *italic* text, `code`, and a long line that wraps "
        "around a few times at a narrow width " ZHONG WEN " too.\n\n"
        "- item one\n  continued\n- item two with **bold\n  across** lines\n\n"
        "| k | " DONG JING " |\n|---|---|\n| 1 | " ZHONG " |\n| 2 | " WEN " |\n\n"
        "```c\nint main(void) { return 0; }\n\n```\n> quote\n\n---\nThe end.\n";
    for (size_t k = 1; k <= 13; k += 3) {
        check_streamed(doc, 24, 0, k);
        check_streamed(doc, 80, 0, k);
        check_streamed(doc, 30, MD_PLAIN, k);
    }
}

/* Tables without outer pipes are tables (cells apart, not merged). */
static void test_table_no_outer_pipes(void)
{
    styled_lines l = layout("one | two\n--- | :-:\nalpha | beta\n", 40, 0);
    CHECK_INT(l.n_lines, 5); /* top border, header, rule, one row, bottom border */
    CHECK_STR(line(&l, 1), "│ one   │ two  │");
    CHECK_STR(line(&l, 3), "│ alpha │ beta │");
    styled_lines_free(&l);
}

/* Property: any of these texts laid out whole equals the same text streamed in random chunks of
 * 1..64 bytes: tables with and without outer pipes, alignment colons, CJK cells, escaped pipes
 * and code spans with pipes, lists and fenced code around them. */
static void test_streamed_corpus(void)
{
    static const char *corpus[] = {
        "Intro line.\n| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\nAfter.\n",
        "one | two\n--- | ---\nalpha | beta\ngamma | delta\n\nThe end.\n",
        "| left | center | right |\n|:-----|:------:|------:|\n| l | c | r |\n| long cell | x | 1.5 |\n",
        "name | " DONG JING "\n:-- | --:\n" ZHONG WEN " | " ZI "\nx | " ZHONG "\n",
        "| cmd | what |\n|---|---|\n| `a | b` | a code span with a pipe |\n| x \\| y | escaped \\| pipe |\n",
        "- item one\n- item two\n  | not | a table |\n\n1. first\n2. second\n",
        "```\n| in | code |\n|---|---|\n```\n| out | side |\n|---|---|\n| 1 | 2 |\n",
        "a | b\n-|-\n1 | 2\nplain text after a table without a blank line\n",
        "| only | header |\nnot a delimiter\n| x | y |\n",
        "text | with | pipes but no table\n- a list after it\n- and | pipes\n",
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n| c | d |\n|---|---|\n| 3 | 4 |",
    };
    unsigned seed = 2026;
    for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++)
        for (int round = 0; round < 40; round++) {
            check_streamed_by(corpus[i], round % 2 ? 24 : 80, 0, 0, &seed);
            check_streamed_by(corpus[i], 30, 0, 1 + (size_t)round % 7, NULL);
        }
}

/* Random text made of markdown's characters, wide and combining clusters, controls and broken
 * UTF-8: layout never fails (the sanitizer build watches memory), streamed equals full, and
 * lines stay within the width where no prefix or single cluster forces more. */
static void test_random(void)
{
    static const char *atoms[] = {
        "a", "b", " ", " ", "  ", "\n", "\n", "\n\n", "*", "**", "_", "`", "```", "~~~", "#", "# ",
        "- ", "1. ", "> ", "|", "| ", "---", ":-:", "\\", "http://x.y/z", "\t", "\x1b", "\xff",
        "\xe4\xb8", ZHONG, WEN, "e\xcc\x81", "\xf0\x9f\x87\xab\xf0\x9f\x87\xb7", "word", "longerword",
    };
    unsigned seed = 12345;
    char text[600];
    int bad_width = 0, width_checked = 0;
    for (int round = 0; round < 300; round++) {
        size_t n = 0;
        while (n < sizeof text - 40) {
            seed = seed * 1103515245u + 12345u;
            const char *a = atoms[(seed >> 16) % (sizeof atoms / sizeof atoms[0])];
            memcpy(text + n, a, strlen(a));
            n += strlen(a);
            if ((seed >> 8) % 97 == 0)
                break;
        }
        text[n] = 0;
        int width = 8 + (int)((seed >> 4) % 50);
        check_streamed(text, width, (seed >> 3) % 4 == 0 ? MD_PLAIN : 0, 1 + (seed >> 5) % 9);
        styled_lines l = layout(text, width, 0);
        CHECK(!l.failed);
        /* nested quotes take two columns a level; anything else fits (a wide cluster may
         * overflow by one where a prefix leaves a single column) */
        int quotes = memchr(text, '>', n) != NULL;
        width_checked += !quotes;
        for (size_t i = 0; i < l.n_lines && !quotes; i++)
            if (l.lines[i].width > width + 1) {
                bad_width++;
                fprintf(stderr, "width %d: line %zu is %d wide: \"%s\"\n", width, i,
                        l.lines[i].width, line(&l, i));
            }
        styled_lines_free(&l);
    }
    CHECK_INT(bad_width, 0);
    CHECK(width_checked > 20);
}

int main(void)
{
    test_headings_and_inline();
    test_blocks();
    test_lists();
    test_fenced_code();
    test_fence_lengths();
    test_table_cjk();
    test_plain();
    test_streaming();
    test_table_no_outer_pipes();
    test_streamed_corpus();
    test_random();
    return check_finish();
}
