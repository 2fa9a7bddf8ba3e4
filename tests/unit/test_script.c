/* test_script: the script-file format (docs/UI.md "Script files", app/chat/script.h): every kind of
 * line, every error with its file:line, CRLF files, a missing final newline, NUL bytes, invalid
 * UTF-8, a 1 MB turn, and script_expect_holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/chat/script.h"
#include "tests/unit/check.h"

static int parse_n(script *s, const char *text, size_t len, kimi_err *err)
{
    memset(err, 0, sizeof *err);
    return script_parse(s, "t.kc", text, len, err);
}

static int parse(script *s, const char *text, kimi_err *err) { return parse_n(s, text, strlen(text), err); }

#define CHECK_ITEM(s, i, k, ln, txt)                                                 \
    do {                                                                             \
        CHECK((i) < (s).n_items);                                                    \
        if ((i) < (s).n_items) {                                                     \
            CHECK_INT((s).items[i].kind, k);                                         \
            CHECK_INT((s).items[i].line, ln);                                        \
            CHECK_STR((s).items[i].text, txt);                                       \
            CHECK_INT((s).items[i].len, strlen(txt));                                \
        }                                                                            \
    } while (0)

/* The parse fails with KIMI_ERR_INPUT and exactly this message. */
static void expect_error(const char *text, const char *msg)
{
    script s;
    kimi_err err;
    CHECK_INT(parse(&s, text, &err), KIMI_ERR_INPUT);
    CHECK_STR(err.msg, msg);
    CHECK(s.items == NULL && s.n_items == 0 && s.name == NULL);
}

static const char ui_example[] =
    "# a comment; blank lines are ignored\n"
    "/system You are terse.\n"
    "/set temperature 0\n"
    "What is 2+2?\n"
    "\n"
    "\"\"\"\n"
    "a multi-line user turn\n"
    "ends at the closing triple quote\n"
    "\"\"\"\n"
    "/expect contains 4\n"
    "/export out.md\n";

static void check_ui_example(const script *s)
{
    CHECK_INT(s->n_items, 6);
    CHECK_ITEM(*s, 0, SCRIPT_COMMAND, 2, "/system You are terse.");
    CHECK_ITEM(*s, 1, SCRIPT_COMMAND, 3, "/set temperature 0");
    CHECK_ITEM(*s, 2, SCRIPT_TURN, 4, "What is 2+2?");
    CHECK_ITEM(*s, 3, SCRIPT_TURN, 6, "a multi-line user turn\nends at the closing triple quote");
    CHECK_ITEM(*s, 4, SCRIPT_EXPECT, 10, "4");
    CHECK_ITEM(*s, 5, SCRIPT_COMMAND, 11, "/export out.md");
    if (s->n_items > 4) {
        CHECK_INT(s->items[4].expect, SCRIPT_EXPECT_CONTAINS);
        CHECK(s->items[4].regex == NULL);
    }
}

static void test_ui_example(void)
{
    script s;
    kimi_err err;
    CHECK_MSG(parse(&s, ui_example, &err) == 0, "%s", err.msg);
    CHECK_STR(s.name, "t.kc");
    check_ui_example(&s);
    script_free(&s);
}

/* The same file with CRLF line ends reads the same; no \r is left in any text. */
static void test_crlf(void)
{
    char crlf[sizeof ui_example * 2];
    size_t n = 0;
    for (const char *p = ui_example; *p; p++) {
        if (*p == '\n')
            crlf[n++] = '\r';
        crlf[n++] = *p;
    }
    crlf[n] = 0;
    script s;
    kimi_err err;
    CHECK_MSG(parse(&s, crlf, &err) == 0, "%s", err.msg);
    check_ui_example(&s);
    script_free(&s);
    /* A \r inside a line is the user's and stays. */
    CHECK(parse(&s, "a\rb\r\n\"\"\"\r\nx\ry\r\n\r\n\"\"\"\r\n", &err) == 0);
    CHECK_ITEM(s, 0, SCRIPT_TURN, 1, "a\rb");
    CHECK_ITEM(s, 1, SCRIPT_TURN, 2, "x\ry\n");
    script_free(&s);
}

static void test_comments_and_turns(void)
{
    script s;
    kimi_err err;
    CHECK(parse(&s, "", &err) == 0 && s.n_items == 0 && s.items == NULL);
    script_free(&s);
    CHECK(parse(&s, "  # indented comment\n\t\n   \n#\n\r\n", &err) == 0 && s.n_items == 0);
    script_free(&s);
    CHECK(parse(&s, "  hello there \t\nWhat is C#? # not a comment\n", &err) == 0);
    CHECK_INT(s.n_items, 2);
    CHECK_ITEM(s, 0, SCRIPT_TURN, 1, "hello there");
    CHECK_ITEM(s, 1, SCRIPT_TURN, 2, "What is C#? # not a comment");
    script_free(&s);
    /* "//" escapes a message that starts with '/'. */
    CHECK(parse(&s, "//etc/passwd is a path\n  //x\n//\n", &err) == 0);
    CHECK_INT(s.n_items, 3);
    CHECK_ITEM(s, 0, SCRIPT_TURN, 1, "/etc/passwd is a path");
    CHECK_ITEM(s, 1, SCRIPT_TURN, 2, "/x");
    CHECK_ITEM(s, 2, SCRIPT_TURN, 3, "/");
    script_free(&s);
}

static void test_commands(void)
{
    script s;
    kimi_err err;
    CHECK(parse(&s, "  /set top_p 1  \n/\n/expectation\n/foo bar\t\n", &err) == 0);
    CHECK_INT(s.n_items, 4);
    CHECK_ITEM(s, 0, SCRIPT_COMMAND, 1, "/set top_p 1");
    CHECK_ITEM(s, 1, SCRIPT_COMMAND, 2, "/");
    CHECK_ITEM(s, 2, SCRIPT_COMMAND, 3, "/expectation");
    CHECK_ITEM(s, 3, SCRIPT_COMMAND, 4, "/foo bar");
    script_free(&s);
}

static void test_multiline(void)
{
    script s;
    kimi_err err;
    const char *text =
        "first\n"
        "  \"\"\"  \n"
        "  indented stays\n"
        "# not a comment\n"
        "\n"
        "/not a command\n"
        "\"\"\" not the end\n"
        "\t\"\"\"\t\n"
        "last\n";
    CHECK_MSG(parse(&s, text, &err) == 0, "%s", err.msg);
    CHECK_INT(s.n_items, 3);
    CHECK_ITEM(s, 0, SCRIPT_TURN, 1, "first");
    CHECK_ITEM(s, 1, SCRIPT_TURN, 2, "  indented stays\n# not a comment\n\n/not a command\n\"\"\" not the end");
    CHECK_ITEM(s, 2, SCRIPT_TURN, 9, "last");
    script_free(&s);
    /* A blank last line of the body keeps its newline before it. */
    CHECK(parse(&s, "\"\"\"\nx\n\n\"\"\"\n", &err) == 0);
    CHECK_ITEM(s, 0, SCRIPT_TURN, 1, "x\n");
    script_free(&s);
    /* """TEXT""" on one line: TEXT verbatim. */
    CHECK(parse(&s, "\"\"\"  two spaces\"\"\"\n\"\"\"#hash\"\"\"\n\"\"\"/slash\"\"\"\n\"\"\"\"\"\"\"\"\n", &err) == 0);
    CHECK_INT(s.n_items, 4);
    CHECK_ITEM(s, 0, SCRIPT_TURN, 1, "  two spaces");
    CHECK_ITEM(s, 1, SCRIPT_TURN, 2, "#hash");
    CHECK_ITEM(s, 2, SCRIPT_TURN, 3, "/slash");
    CHECK_ITEM(s, 3, SCRIPT_TURN, 4, "\"\"");
    script_free(&s);
}

static int in_list(const void *user, const char *name)
{
    for (const char *const *p = user; p && *p; p++)
        if (!strcmp(*p, name))
            return 1;
    return 0;
}

/* script_expect_holds on a NUL-terminated answer and a NULL-terminated list of tools called. */
static int holds(const script_item *it, const char *content, const char *const *called)
{
    return script_expect_holds(it, content, strlen(content), in_list, called);
}

static void test_expect(void)
{
    script s;
    kimi_err err;
    const char *text =
        "/expect contains   the answer is 4  \n"
        "/expect\tmatches ^[0-9]+( apples)?$\n"
        "/expect tool word_count\n";
    CHECK_MSG(parse(&s, text, &err) == 0, "%s", err.msg);
    CHECK_INT(s.n_items, 3);
    CHECK_ITEM(s, 0, SCRIPT_EXPECT, 1, "the answer is 4");
    CHECK_ITEM(s, 1, SCRIPT_EXPECT, 2, "^[0-9]+( apples)?$");
    CHECK_ITEM(s, 2, SCRIPT_EXPECT, 3, "word_count");
    if (s.n_items == 3) {
        CHECK_INT(s.items[0].expect, SCRIPT_EXPECT_CONTAINS);
        CHECK_INT(s.items[1].expect, SCRIPT_EXPECT_MATCHES);
        CHECK_INT(s.items[2].expect, SCRIPT_EXPECT_TOOL);
        CHECK(s.items[1].regex != NULL);
        CHECK(s.items[0].regex == NULL && s.items[2].regex == NULL);

        CHECK_INT(holds(&s.items[0], "so: the answer is 4.", NULL), 1);
        CHECK_INT(holds(&s.items[0], "the answer is 5", NULL), 0);
        CHECK_INT(script_expect_holds(&s.items[0], NULL, 0, NULL, NULL), 0);
        CHECK_INT(holds(&s.items[1], "12 apples", NULL), 1);
        CHECK_INT(holds(&s.items[1], "12", NULL), 1);
        CHECK_INT(holds(&s.items[1], "twelve apples", NULL), 0);
        CHECK_INT(holds(&s.items[1], "12 pears", NULL), 0);
        const char *called[] = {"now", "word_count", NULL};
        const char *only_now[] = {"now", NULL};
        CHECK_INT(holds(&s.items[2], "", called), 1);
        CHECK_INT(holds(&s.items[2], "", only_now), 0);
        CHECK_INT(holds(&s.items[2], "word_count", NULL), 0);
        /* NUL bytes in the answer: text after one is searched too */
        CHECK_INT(script_expect_holds(&s.items[0], "x\0the answer is 4", 18, NULL, NULL), 1);
    }
    script_free(&s);
}

static void test_errors(void)
{
    expect_error("hi\n/expect\n", "t.kc:2: /expect: needs contains TEXT, matches ERE or tool NAME");
    expect_error("/expect   \n", "t.kc:1: /expect: needs contains TEXT, matches ERE or tool NAME");
    expect_error("\n\n/expect equals 4\n", "t.kc:3: /expect equals: unknown kind (contains, matches or tool)");
    expect_error("/expect contains\n", "t.kc:1: /expect contains: missing text");
    expect_error("/expect contains   \t\n", "t.kc:1: /expect contains: missing text");
    expect_error("/expect matches\n", "t.kc:1: /expect matches: missing regular expression");
    expect_error("/expect tool\n", "t.kc:1: /expect tool: missing tool name");
    expect_error("/expect tool get weather\n", "t.kc:1: /expect tool: 'get weather' is not one tool name");
    /* The regex message is the C library's; the prefix is ours. */
    script s;
    kimi_err err;
    CHECK_INT(parse(&s, "ok\n# c\n/expect matches a(b\n", &err), KIMI_ERR_INPUT);
    CHECK_MSG(!strncmp(err.msg, "t.kc:3: /expect matches: bad regular expression: ", 49) && strlen(err.msg) > 49,
              "%s", err.msg);
    CHECK_INT(parse(&s, "/expect matches [z-a]\n", &err), KIMI_ERR_INPUT);
    CHECK_MSG(!strncmp(err.msg, "t.kc:1: /expect matches: bad regular expression: ", 49), "%s", err.msg);

    /* Repeats that regcomp would spell out into gigabytes are refused first; big sane ones pass. */
    expect_error("/expect matches x++++++++++++++++++++++++++++++\n",
                 "t.kc:1: /expect matches: regular expression too big once its repeats are spelled out "
                 "(over 10000 parts)");
    expect_error("\n/expect matches ((a{30}){30}){30}\n",
                 "t.kc:2: /expect matches: regular expression too big once its repeats are spelled out "
                 "(over 10000 parts)");
    expect_error("/expect matches ((a{,30}){,30}){,30}\n",
                 "t.kc:1: /expect matches: regular expression too big once its repeats are spelled out "
                 "(over 10000 parts)");
    expect_error("/expect matches (x{2,}|y){5000}\n",
                 "t.kc:1: /expect matches: regular expression too big once its repeats are spelled out "
                 "(over 10000 parts)");
    const char *fine[] = {"/expect matches (a{99}){99}", "/expect matches a{9999}",
                          "/expect matches [0-9]{1,3}(\\.[0-9]{1,3}){3}", "/expect matches [[:digit:]]+]{2}",
                          "/expect matches []{9999}]{9999}x", "/expect matches a{,9999}"};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        int rc = parse(&s, fine[i], &err);
        CHECK_MSG(rc == 0 || !strstr(err.msg, "spelled out"), "%s: %s", fine[i], err.msg);
        if (rc == 0)
            script_free(&s);
    }

    expect_error("a\n\"\"\"\nb\nc\n", "t.kc:2: unterminated \"\"\" turn (opened here)");
    expect_error("a\n  \"\"\"\n", "t.kc:2: unterminated \"\"\" turn (opened here)");
    expect_error("\"\"\"\n\"\"\"\n", "t.kc:1: empty \"\"\" turn");
    expect_error("x\n\"\"\"\n  \n\t\n\"\"\"\n", "t.kc:2: empty \"\"\" turn");
    expect_error("\"\"\"   \"\"\"\n", "t.kc:1: empty \"\"\" turn");
    expect_error("\"\"\"\"\"\"\n", "t.kc:1: empty \"\"\" turn");
    expect_error("x\n\"\"\"hello\n", "t.kc:2: \"\"\" opens a multi-line turn only alone on its line "
                 "(or write \"\"\"TEXT\"\"\" on one line)");
    expect_error("\"\"\"\"\n", "t.kc:1: \"\"\" opens a multi-line turn only alone on its line "
                 "(or write \"\"\"TEXT\"\"\" on one line)");
}

static void test_nul_and_utf8(void)
{
    script s;
    kimi_err err;
    static const char text[] = "a\0b\n\"\"\"\nx\0\n\"\"\"\n\xff\xfe bad \xc3\n";
    CHECK_MSG(parse_n(&s, text, sizeof text - 1, &err) == 0, "%s", err.msg);
    CHECK_INT(s.n_items, 3);
    if (s.n_items == 3) {
        CHECK_INT(s.items[0].len, 3);
        CHECK(!memcmp(s.items[0].text, "a\0b", 4));
        CHECK_INT(s.items[1].len, 2);
        CHECK(!memcmp(s.items[1].text, "x\0", 3));
        CHECK_INT(s.items[1].line, 2);
        CHECK_STR(s.items[2].text, "\xff\xfe bad \xc3");
        CHECK_INT(s.items[2].line, 5);
    }
    script_free(&s);
    static const char cmd[] = "ok\n/set\0x\n";
    CHECK_INT(parse_n(&s, cmd, sizeof cmd - 1, &err), KIMI_ERR_INPUT);
    CHECK_STR(err.msg, "t.kc:2: NUL byte in a command line");
    static const char exp[] = "/expect contains a\0b\n";
    CHECK_INT(parse_n(&s, exp, sizeof exp - 1, &err), KIMI_ERR_INPUT);
    CHECK_STR(err.msg, "t.kc:1: NUL byte in a command line");
}

static void test_no_final_newline(void)
{
    script s;
    kimi_err err;
    CHECK(parse(&s, "a\n/cmd", &err) == 0);
    CHECK_INT(s.n_items, 2);
    CHECK_ITEM(s, 1, SCRIPT_COMMAND, 2, "/cmd");
    script_free(&s);
    CHECK(parse(&s, "\"\"\"\nx\n\"\"\"", &err) == 0);
    CHECK_ITEM(s, 0, SCRIPT_TURN, 1, "x");
    script_free(&s);
    CHECK(parse(&s, "\"\"\"\r\nx\r\n\"\"\"\r", &err) == 0);
    CHECK_ITEM(s, 0, SCRIPT_TURN, 1, "x");
    script_free(&s);
    CHECK(parse(&s, "last turn\r", &err) == 0);
    CHECK_ITEM(s, 0, SCRIPT_TURN, 1, "last turn");
    script_free(&s);
    expect_error("\"\"\"\nx", "t.kc:1: unterminated \"\"\" turn (opened here)");
}

static void test_stdin_name(void)
{
    script s;
    kimi_err err = {0};
    CHECK_INT(script_parse(&s, "-", "\n\"\"\"\n", 5, &err), KIMI_ERR_INPUT);
    CHECK_STR(err.msg, "<stdin>:2: unterminated \"\"\" turn (opened here)");
    CHECK(script_parse(&s, "-", "hi", 2, &err) == 0);
    CHECK_STR(s.name, "<stdin>");
    script_free(&s);
}

/* 1 MB turns: one line, and 16 Ki lines of 64 bytes in a block (CRLF), then an item after. */
static void test_big_turn(void)
{
    enum { BIG = 1 << 20, LINE = 64 };
    char *text = malloc(BIG + 64);
    CHECK(text != NULL);
    if (!text)
        return;
    memset(text, 'x', BIG);
    strcpy(text + BIG, "\n/after\n");
    script s;
    kimi_err err;
    CHECK(parse(&s, text, &err) == 0);
    CHECK_INT(s.n_items, 2);
    if (s.n_items == 2) {
        CHECK_INT(s.items[0].len, BIG);
        CHECK(s.items[0].text[BIG] == 0 && s.items[0].text[BIG - 1] == 'x');
        CHECK_ITEM(s, 1, SCRIPT_COMMAND, 2, "/after");
    }
    script_free(&s);
    free(text);

    size_t n_lines = BIG / LINE, size = 5 + n_lines * (LINE + 1) + 32;
    char *block = malloc(size), *p = block;
    CHECK(block != NULL);
    if (!block)
        return;
    p += sprintf(p, "\"\"\"\r\n");
    for (size_t i = 0; i < n_lines; i++) {
        memset(p, 'a' + (char)(i % 26), LINE - 1);
        p += LINE - 1;
        *p++ = '\r';
        *p++ = '\n';
    }
    p += sprintf(p, "\"\"\"\r\nend\r\n");
    CHECK(parse_n(&s, block, (size_t)(p - block), &err) == 0);
    CHECK_INT(s.n_items, 2);
    if (s.n_items == 2) {
        CHECK_INT(s.items[0].len, n_lines * LINE - 1);
        CHECK(memchr(s.items[0].text, '\r', s.items[0].len) == NULL);
        CHECK(s.items[0].text[LINE - 1] == '\n' && s.items[0].text[LINE] == 'b');
        CHECK_ITEM(s, 1, SCRIPT_TURN, (int)n_lines + 3, "end");
    }
    script_free(&s);
    free(block);
}

/* Several bad lines: every one is reported, in file order, each as file:line; the first is in
 * err. An unterminated """ still ends the parse (it takes the rest of the file). */
static void test_every_bad_line(void)
{
    const char text[] = "hi\n/expect sometimes x\nok\n\"\"\"x\n/expect matches (\n/set top_p 1\n"
                        "\"\"\"\nnever closed\n/expect nothing\n";
    script s;
    kimi_err err = {0};
    strbuf all = {0};
    CHECK_INT(script_parse_all(&s, "t.kc", text, sizeof text - 1, &all, &err), KIMI_ERR_INPUT);
    CHECK_STR(err.msg, "t.kc:2: /expect sometimes: unknown kind (contains, matches or tool)");
    CHECK(!all.failed && all.data);
    const char *want[] = {"t.kc:2: ", "t.kc:4: ", "t.kc:5: ", "t.kc:7: unterminated"};
    const char *p = all.data ? all.data : "";
    int lines = 0;
    for (const char *nl; (nl = strchr(p, '\n')); p = nl + 1, lines++)
        if (lines < 4)
            CHECK_MSG(!strncmp(p, want[lines], strlen(want[lines])), "line %d: %.*s", lines, (int)(nl - p), p);
    CHECK_INT(lines, 4);
    CHECK(s.items == NULL && s.name == NULL);
    free(all.data);
}

/* /expect matches on a 1 MB answer (issue 18): unanchored patterns that never match made
 * glibc's regexec quadratic (53 s on 150 KB); each now answers in one pass. It runs alone
 * (test_script_big_answer) under a 30 s ctest timeout, which is what catches a slow matcher;
 * the checks are the answers. Back-references,
 * which only backtracking can match, are refused. */
static void test_expect_big_answer(void)
{
    size_t n = 1000000;     /* ten-byte lines: it ends "gh \n" */
    char *answer = malloc(n);
    for (size_t i = 0; i < n; i++)
        answer[i] = "abcdefgh \n"[i % 10];
    memcpy(answer + n / 2, "MIDDLE", 6);
    answer[n / 4] = 0;     /* a NUL byte does not end the answer */
    static const struct { const char *pattern; int holds; } cases[] = {
        {"a.*q", 0}, {"[a-z ]+q", 0}, {"(x|y)+z", 0}, {"b.{1,100}q", 0}, {"h$", 0}, {"^b", 0},
        {"MIDDLE", 1}, {"^abc", 1}, {"a.*MIDDLE", 1}, {"fh \n$", 0}, {"gh \n$", 1},
        {"E.*MIDDLE", 0}, {"M(I|J)DDLE.*h $", 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char text[128];
        snprintf(text, sizeof text, "/expect matches %s\n", cases[k].pattern);
        script s;
        kimi_err err;
        CHECK_MSG(parse(&s, text, &err) == 0, "%s", err.msg);
        if (s.n_items == 1)
            CHECK_MSG(script_expect_holds(&s.items[0], answer, n, NULL, NULL) == cases[k].holds, "%s",
                      cases[k].pattern);
        script_free(&s);
    }
    script s;
    kimi_err err;
    CHECK(parse(&s, "/expect matches (a)\\1\n", &err) != 0 && strstr(err.msg, "back-references"));
    CHECK(parse(&s, "/expect matches [\\1]x\n", &err) == 0);    /* a bracket's backslash is a character */
    script_free(&s);
    free(answer);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--big-answer")) {   /* alone, under its own timeout */
        test_expect_big_answer();
        return check_finish();
    }
    test_ui_example();
    test_crlf();
    test_comments_and_turns();
    test_commands();
    test_multiline();
    test_expect();
    test_errors();
    test_nul_and_utf8();
    test_no_final_newline();
    test_stdin_name();
    test_big_turn();
    test_every_bad_line();
    return check_finish();
}
