/* test_sse: event-stream framing: line ends (LF, CRLF, CR, a CR and its LF in two feeds),
 * comments, fields, multi-line data, the byte-order mark, the end of the stream, the size bound
 * and stopping early; a recorded stream cut at every position gives the same events. */
#include <stdlib.h>
#include <string.h>

#include "app/chat/sse.h"
#include "engine/base/array.h"
#include "engine/base/file_io.h"
#include "tests/unit/check.h"

typedef struct {
    strbuf log;
    int stop_at;        /* return 7 from this event on (1-based), 0: never */
    int count;
} sink;

static int on_event(void *user, const char *type, const char *data, size_t len)
{
    sink *s = user;
    CHECK(data[len] == 0);
    strbuf_str(&s->log, "[");
    strbuf_str(&s->log, type);
    strbuf_str(&s->log, "|");
    strbuf_add(&s->log, data, len);
    strbuf_str(&s->log, "]");
    s->count++;
    return s->stop_at && s->count >= s->stop_at ? 7 : 0;
}

/* Feed text in pieces of `piece` bytes (0: whole), then end; the events, in one string. */
static char *events(const char *text, size_t n, size_t piece, int with_end)
{
    sse_parser *p;
    kimi_err err;
    sink s = {0};
    CHECK(sse_create(&p, 0, &err) == 0);
    for (size_t at = 0; at < n;) {
        size_t k = piece && piece < n - at ? piece : n - at;
        CHECK(sse_feed(p, text + at, k, on_event, &s, &err) == 0);
        at += k;
    }
    if (with_end)
        CHECK(sse_end(p, on_event, &s, &err) == 0);
    sse_free(p);
    char *out = strbuf_take(&s.log);
    return out;
}

#define EXPECT(text, expected)                                                     \
    do {                                                                           \
        for (size_t piece_ = 0; piece_ <= 3; piece_++) {                          \
            char *got_ = events(text, sizeof(text) - 1, piece_, 1);                \
            CHECK_MSG(!strcmp(got_, expected), "pieces of %zu: %s", piece_, got_); \
            free(got_);                                                            \
        }                                                                          \
    } while (0)

static void test_framing(void)
{
    EXPECT("data: a\n\ndata: b\n\n", "[message|a][message|b]");
    EXPECT("data: a\r\n\r\ndata: b\r\n\r\n", "[message|a][message|b]");
    EXPECT("data: a\r\rdata: b\r\r", "[message|a][message|b]");
    EXPECT("data: a\r\n\ndata: b\n\r\n", "[message|a][message|b]");
    EXPECT(": comment\ndata: x\n: another\n\n", "[message|x]");
    EXPECT("data:no space\ndata:  two spaces\n\n", "[message|no space\n two spaces]");
    EXPECT("data\ndata\n\n", "[message|\n]");
    EXPECT("event: delta\nid: 7\nretry: 10\ndata: y\n\ndata: z\n\n", "[delta|y][message|z]");
    EXPECT("\n\nid: 1\n\nevent: lonely\n\ndata: after\n\n", "[message|after]");
    EXPECT("\xEF\xBB\xBF" "data: bom\n\n", "[message|bom]");
    EXPECT("\xEF\xBB" "data: x\n\n", "");                 /* a broken mark is a field name */
    EXPECT("\xEF\xBB\xBF\xEF\xBB\xBF" "data: x\n\n", "");  /* only one mark is skipped */
    EXPECT("data: {\"a\":\ndata: 1}\n\n", "[message|{\"a\":\n1}]");
    EXPECT("data: 中文🌍\n\n", "[message|中文🌍]");
    EXPECT("data: nul\0inside\n\n", "[message|nul\0inside]");
    EXPECT("dat", "");
    /* the end: complete lines still make an event; a cut line does not */
    EXPECT("data: [DONE]\n", "[message|[DONE]]");
    EXPECT("data: [DONE]", "");
    EXPECT("data: a\ndata: b", "[message|a]");
    char *got = events("data: a\n", 8, 0, 0);
    CHECK_STR(got, "");
    free(got);
}

static void test_nul_data(void)
{
    static const char text[] = "data: nul\0inside\n\n";
    sse_parser *p;
    kimi_err err;
    sink s = {0};
    CHECK(sse_create(&p, 0, &err) == 0);
    CHECK(sse_feed(p, text, sizeof text - 1, on_event, &s, &err) == 0);
    CHECK(s.log.len == strlen("[message|nul") + 1 + strlen("inside]"));
    sse_free(p);
    free(s.log.data);
}

static void test_limits_and_stop(void)
{
    sse_parser *p;
    kimi_err err = {0};
    sink s = {0};
    CHECK(sse_create(&p, 16, &err) == 0);
    CHECK(sse_feed(p, "data: 0123456789\n\n", 18, on_event, &s, &err) == 0);
    CHECK(sse_feed(p, "data: 0123456789abcdef", 22, on_event, &s, &err) == -1);
    CHECK_INT(err.code, KIMI_ERR_INPUT);
    CHECK(strstr(err.msg, "longer than the limit") != NULL);
    CHECK(sse_feed(p, "\n\n", 2, on_event, &s, &err) == -1);
    CHECK(sse_end(p, on_event, &s, &err) == -1);
    sse_free(p);
    free(s.log.data);
    /* an event's data is bounded too, over several lines */
    s = (sink){0};
    CHECK(sse_create(&p, 16, &err) == 0);
    CHECK(sse_feed(p, "data: 01234\ndata: 56789\ndata: abcde\n", 36, on_event, &s, &err) == -1);
    sse_free(p);
    free(s.log.data);
    /* the callback's value stops the feed */
    s = (sink){.stop_at = 1};
    CHECK(sse_create(&p, 0, &err) == 0);
    CHECK(sse_feed(p, "data: 1\n\ndata: 2\n\n", 18, on_event, &s, &err) == 7);
    CHECK_INT(s.count, 1);
    sse_free(p);
    free(s.log.data);
}

static void test_recorded_splits(void)
{
    static const char *const files[] = {"tests/remote/framing_crlf.sse",
                                        "tests/remote/vllm_tool_calls.sse"};
    for (size_t f = 0; f < 2; f++) {
        char *text;
        size_t n;
        kimi_err err;
        if (file_read_all(files[f], &text, &n, &err)) {
            CHECK_MSG(0, "%s", err.msg);
            continue;
        }
        char *whole = events(text, n, 0, 1);
        CHECK(strstr(whole, "[DONE]") != NULL);
        int same = 1;
        for (size_t cut = 0; cut <= n; cut++) {
            sse_parser *p;
            sink s = {0};
            CHECK(sse_create(&p, 0, &err) == 0);
            CHECK(sse_feed(p, text, cut, on_event, &s, &err) == 0);
            CHECK(sse_feed(p, text + cut, n - cut, on_event, &s, &err) == 0);
            CHECK(sse_end(p, on_event, &s, &err) == 0);
            char *got = strbuf_take(&s.log);
            same &= !strcmp(got, whole);
            free(got);
            sse_free(p);
        }
        CHECK_MSG(same, "%s: a split changed the events", files[f]);
        char *bytewise = events(text, n, 1, 1);
        CHECK_STR(bytewise, whole);
        free(bytewise);
        free(whole);
        free(text);
    }
}

int main(void)
{
    test_framing();
    test_nul_data();
    test_limits_and_stop();
    test_recorded_splits();
    return check_finish();
}
