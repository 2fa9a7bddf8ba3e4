/* fuzz_script: the script-file parser on arbitrary bytes. A parse either fails with one
 * "fuzz.kc:LINE: ..." message and leaves the script empty, or gives items in file order (lines
 * strictly increasing, within the file), each text NUL-terminated at its len and well-formed
 * for its kind; script_free releases everything (LeakSanitizer checks). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "app/chat/script.h"

/* A failed expectation crashes the target, which is how libFuzzer learns of it (as in
 * fuzz_support.h, whose tokenizer this target does not need). */
#define REQUIRE(cond)              \
    do {                           \
        if (!(cond))               \
            __builtin_trap();      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int blank(char c) { return c == ' ' || c == '\t'; }

/* the tool that was called: the one named by user */
static int called_this(const void *user, const char *name) { return !strcmp(user, name); }

static int count_lines(const uint8_t *data, size_t size)
{
    size_t n = 1;
    for (size_t i = 0; i < size; i++)
        n += data[i] == '\n';
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

static void check_item(const script_item *it)
{
    REQUIRE(it->text && it->len > 0 && it->text[it->len] == 0);
    switch (it->kind) {
    case SCRIPT_TURN: REQUIRE(it->regex == NULL); break;
    case SCRIPT_COMMAND:
        REQUIRE(it->text[0] == '/' && it->regex == NULL);
        REQUIRE(strlen(it->text) == it->len && !strchr(it->text, '\n'));
        REQUIRE(!blank(it->text[it->len - 1]));
        break;
    case SCRIPT_EXPECT:
        REQUIRE(strlen(it->text) == it->len && !strchr(it->text, '\n'));
        REQUIRE(!blank(it->text[0]) && !blank(it->text[it->len - 1]));
        switch (it->expect) {
        case SCRIPT_EXPECT_CONTAINS:
            REQUIRE(it->regex == NULL && script_expect_holds(it, it->text, it->len, NULL, NULL));
            break;
        case SCRIPT_EXPECT_MATCHES:
            REQUIRE(it->regex != NULL);  /* regexec is the C library's; only regcomp is ours */
            break;
        case SCRIPT_EXPECT_TOOL: {
            REQUIRE(it->regex == NULL && !strpbrk(it->text, " \t"));
            REQUIRE(script_expect_holds(it, "", 0, called_this, it->text) && !script_expect_holds(it, "", 0, NULL, NULL));
            break;
        }
        default: REQUIRE(0);
        }
        break;
    default: REQUIRE(0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    script s;
    kimi_err err = {0};
    int rc = script_parse(&s, "fuzz.kc", (const char *)data, size, &err);
    if (rc) {
        REQUIRE(rc == err.code && (rc == KIMI_ERR_INPUT || rc == KIMI_ERR_NOMEM));
        REQUIRE(s.items == NULL && s.n_items == 0 && s.name == NULL);
        REQUIRE(!strncmp(err.msg, "fuzz.kc:", 8));
        char *end;
        long line = strtol(err.msg + 8, &end, 10);
        REQUIRE(line >= 1 && line <= count_lines(data, size) && end[0] == ':' && end[1] == ' ');
        return 0;
    }
    REQUIRE(s.n_items >= 0 && (s.n_items == 0 || s.items));
    int last = 0, lines = count_lines(data, size);
    for (int i = 0; i < s.n_items; i++) {
        REQUIRE(s.items[i].line > last && s.items[i].line <= lines);
        last = s.items[i].line;
        check_item(&s.items[i]);
    }
    script_free(&s);
    REQUIRE(s.items == NULL && s.n_items == 0);
    return 0;
}
