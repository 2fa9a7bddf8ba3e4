/* test_openai_stream: the recorded streams of tests/remote (vLLM, SGLang, Moonshot) through sse +
 * openai_stream, whole, split at every byte position and byte by byte, give exactly the
 * expected events and usage; and the corners: both reasoning fields, calls without ids or with
 * bad arguments, late argument pieces, broken JSON and UTF-8, NUL, several choices, finish
 * reasons; the one-line error messages of error replies. */
#include <stdlib.h>
#include <string.h>

#include "app/chat/openai_stream.h"
#include "app/chat/sse.h"
#include "engine/base/file_io.h"
#include "tests/unit/check.h"
#include "tests/unit/event_log.h"

typedef struct {
    openai_stream *stream;
    event_log log;
} run;

static void on_parse(void *user, const parse_event *ev)
{
    event_log_add(&((run *)user)->log, ev);
}

static int on_sse(void *user, const char *type, const char *data, size_t len)
{
    run *r = user;
    kimi_err err;
    (void)type;
    CHECK(openai_stream_data(r->stream, data, len, &err) == 0);
    return openai_stream_done(r->stream) || openai_stream_error(r->stream)[0];
}

/* The stop a caller gives at the end: an error, the finish, or an early end. */
static void finish(run *r)
{
    kimi_err err;
    parse_stop_reason reason = openai_stream_error(r->stream)[0] ? PARSE_STOP_ERROR
                               : openai_stream_done(r->stream) || openai_stream_has_finish(r->stream)
                                   ? openai_stream_finish_stop(r->stream) : PARSE_STOP_ERROR;
    CHECK(openai_stream_finish(r->stream, reason, &err) == 0);
}

/* Feed bytes in pieces cut at the given offsets (sorted, ending with n). */
static void feed(run *r, const char *bytes, const size_t *cuts, size_t n_cuts)
{
    sse_parser *p;
    kimi_err err;
    *r = (run){0};
    CHECK(sse_create(&p, 0, &err) == 0);
    CHECK(openai_stream_create(&r->stream, on_parse, r, &err) == 0);
    size_t at = 0;
    int stopped = 0;
    for (size_t i = 0; i < n_cuts && !stopped; i++) {
        int rc = sse_feed(p, bytes + at, cuts[i] - at, on_sse, r, &err);
        CHECK(rc >= 0);
        stopped = rc > 0;
        at = cuts[i];
    }
    if (!stopped)
        CHECK(sse_end(p, on_sse, r, &err) >= 0);
    finish(r);
    sse_free(p);
}

static void free_run(run *r)
{
    openai_stream_free(r->stream);
    event_log_reset(&r->log);
}

typedef struct {
    const char *file;
    const char *events;
    int prompt, completion, cached;
    const char *error;
} fixture;

static const fixture fixtures[] = {
    {"vllm_plain.sse",
     "C|Hello\nC|! 你好\nC|，世界 \nC|🌍\nC| done.\nS|end_of_turn\n", 21, 7, -1, ""},
    {"vllm_reasoning.sse",
     "R|The user\nR| greets me\nR| in Chinese\nR|; answer \nR|briefly.\nC|你好！\nC|How can I\n"
     "C| help?\nS|end_of_turn\n", 40, 12, 32, ""},
    {"vllm_tool_calls.sse",
     "R|Two cities\nR|: call the\nR| tool twice.\nB|0\nI|0|functions.get_weather:0|get_weather\n"
     "A|0|{\"city\nA|0|\": \"Par\nA|0|is\", \"unit\": \"c\"\nA|0|}\nE|0|valid\nB|1\n"
     "I|1|functions.get_weather:1|get_weather\nA|1|{\"city\": \"東\nA|1|京\"}\nE|1|valid\n"
     "S|end_of_turn\n", 230, 32, -1, ""},
    {"vllm_tool_answer.sse",
     "R|Both results\nR| are in.\nC|Paris: 18 °C\nC|, Tokyo: 22 °C.\nS|end_of_turn\n", 300, 12, 256,
     ""},
    {"vllm_length_thinking.sse",
     "R|Let me think\nR| about this\nR| very carefully\nS|max_tokens_while_thinking\n", 12, 3, -1,
     ""},
    {"vllm_error_midstream.sse", "C|Partial\nC| answer\nS|error\n", -1, -1, -1,
     "EngineCore encountered an issue. See stack trace for the root cause."},
    {"moonshot_reasoning.sse",
     "R|用户在\nR|打招呼\nR|。\nC|你好\nC|！有什么\nC|可以帮你？\nS|end_of_turn\n", 19, 13, 16, ""},
    {"moonshot_tool_call.sse",
     "R|I need the weather.\nB|0\nI|0|functions.get_weather:0|get_weather\nA|0|{\"city\":\n"
     "A|0|\"Berlin\"}\nE|0|valid\nS|end_of_turn\n", 120, 20, -1, ""},
    {"sglang_reasoning.sse", "R|Short\nR| thought.\nC|Short\nC| answer.\nS|end_of_turn\n", 9, 4, -1,
     ""},
    {"framing_crlf.sse", "C|multi-line \nC|no space after the colon\nS|end_of_turn\n", 5, 2, -1, ""},
};

static void check_run(const fixture *f, run *r, const char *how)
{
    CHECK_MSG(!strcmp(event_log_text(&r->log), f->events), "%s (%s):\n%s---\nexpected:\n%s",
              f->file, how, event_log_text(&r->log), f->events);
    CHECK_MSG(r->log.bad == 0 && r->log.stops == 1, "%s (%s): malformed events", f->file, how);
    const openai_usage *u = openai_stream_usage(r->stream);
    CHECK_MSG(u->prompt_tokens == f->prompt && u->completion_tokens == f->completion &&
              u->cached_tokens == f->cached, "%s (%s): usage %d %d %d", f->file, how,
              u->prompt_tokens, u->completion_tokens, u->cached_tokens);
    CHECK_MSG(!strcmp(openai_stream_error(r->stream), f->error), "%s (%s): error \"%s\"", f->file,
              how, openai_stream_error(r->stream));
}

static void test_fixtures(void)
{
    for (size_t k = 0; k < sizeof fixtures / sizeof fixtures[0]; k++) {
        const fixture *f = &fixtures[k];
        char path[256], *bytes;
        size_t n;
        kimi_err err;
        snprintf(path, sizeof path, "tests/remote/%s", f->file);
        if (file_read_all(path, &bytes, &n, &err)) {
            CHECK_MSG(0, "%s", err.msg);
            continue;
        }
        run r;
        feed(&r, bytes, &n, 1);
        check_run(f, &r, "whole");
        /* the assembled message agrees with the events */
        const chat_message *m = openai_stream_message(r.stream);
        if (!strcmp(f->file, "vllm_tool_calls.sse")) {
            CHECK_INT(m->n_tool_calls, 2);
            CHECK_STR(m->tool_calls[1].id, "functions.get_weather:1");
            CHECK_STR(m->tool_calls[0].arguments.s, "{\"city\": \"Paris\", \"unit\": \"c\"}");
            CHECK_STR(m->reasoning.s, "Two cities: call the tool twice.");
            CHECK(m->content.s == NULL);
        }
        if (!strcmp(f->file, "vllm_reasoning.sse"))
            CHECK_STR(m->content.s, "你好！How can I help?");
        free_run(&r);
        /* every split into two pieces, then byte by byte */
        int same = 1;
        for (size_t cut = 0; cut <= n; cut++) {
            size_t cuts[2] = {cut, n};
            feed(&r, bytes, cuts, 2);
            if (strcmp(event_log_text(&r.log), f->events) || r.log.bad) {
                if (same)
                    check_run(f, &r, "split");
                same = 0;
            }
            free_run(&r);
        }
        CHECK_MSG(same, "%s: some split changed the events", f->file);
        size_t *cuts = malloc(n * sizeof *cuts);
        for (size_t i = 0; i < n; i++)
            cuts[i] = i + 1;
        feed(&r, bytes, cuts, n);
        check_run(f, &r, "byte by byte");
        free_run(&r);
        free(cuts);
        free(bytes);
    }
}

/* One stream given as SSE text, fed whole. */
static const char *events_of(const char *sse, run *r)
{
    size_t n = strlen(sse);
    feed(r, sse, &n, 1);
    CHECK_MSG(r->log.bad == 0, "malformed events for %s", sse);
    return event_log_text(&r->log);
}

#define EXPECT_EVENTS(sse, expected)                                              \
    do {                                                                          \
        run r_;                                                                   \
        const char *got_ = events_of(sse, &r_);                                   \
        CHECK_MSG(!strcmp(got_, expected), "got:\n%s---\nexpected:\n%s", got_, expected); \
        free_run(&r_);                                                            \
    } while (0)

static void test_corners(void)
{
    /* a server that sends both reasoning fields with the same text: once */
    EXPECT_EVENTS("data: {\"choices\":[{\"delta\":{\"reasoning\":\"a\",\"reasoning_content\":\"a\"}}]}\n\n"
                  "data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\n"
                  "data: [DONE]\n\n",
                  "R|a\nC|b\nS|end_of_turn\n");
    /* no id: one is made and said; bad arguments are judged; text closes the call */
    EXPECT_EVENTS("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":\"}}]}}]}\n\n"
                  "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
                  "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]}}]}\n\n"
                  "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"functions.g:1\",\"function\":{\"name\":\"g\",\"arguments\":\"[1]\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n"
                  "data: [DONE]\n\n",
                  "B|0\nI|0|functions.f:0|f\nN|the server sent no id for tool call 0; it is called functions.f:0 here\n"
                  "A|0|{\"a\":\nE|0|invalid|invalid JSON arguments: unexpected token near end of file (at byte 5)\n"
                  "C|x\nN|arguments for tool call 0 came after it was closed: \"1}\"\n"
                  "B|1\nI|1|functions.g:1|g\nA|1|[1]\nE|1|invalid|the arguments are not a JSON object\n"
                  "S|end_of_turn\n");
    /* an id repeated on every piece is fine; a different one is said */
    EXPECT_EVENTS("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"functions.f:0\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n\n"
                  "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"functions.f:0\",\"function\":{\"arguments\":\"}\"}}]}}]}\n\n"
                  "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_9\"}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
                  "B|0\nI|0|functions.f:0|f\nA|0|{\nA|0|}\nN|tool call 0 changed its id midway; the first one is kept\n"
                  "E|0|valid\nS|end_of_turn\n");
    /* a call cut off by the end of the stream, and a call with no arguments */
    EXPECT_EVENTS("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"functions.f:0\",\"function\":{\"name\":\"f\"}}]}}]}\n\n"
                  "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"id\":\"functions.h:3\",\"function\":{\"name\":\"h\",\"arguments\":\"{\\\"q\\\": \"}}]}}]}\n\n",
                  "B|0\nI|0|functions.f:0|f\nE|0|invalid|no arguments came for the call\nB|1\n"
                  "I|1|functions.h:3|h\nA|1|{\"q\": \nE|1|invalid|invalid JSON arguments: "
                  "unexpected token near end of file (at byte 6)\nS|error\n");
    /* not JSON, not an object, several choices, an unknown finish */
    EXPECT_EVENTS("data: {\"choices\":[{\"delta\":{\"content\":\"a\"\n\n"
                  "data: [1,2]\n\n"
                  "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"other\"}},{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n"
                  "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"other\"}}]}\n\n"
                  "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"content_filter\"}]}\n\n"
                  "data: [DONE]\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"after done\"}}]}\n\n",
                  "N|the server sent a chunk that is not JSON: {\"choices\":[{\"delta\":{\"content\":\"a\"\n"
                  "N|the server sent a chunk that is not a JSON object: [1,2]\n"
                  "N|the server sent more than one choice; only the first is shown\nC|b\n"
                  "N|the server ended the answer with finish_reason \"content_filter\"\nS|end_of_turn\n");
    /* broken UTF-8 and lone surrogates become U+FFFD; a proper pair and NUL come through */
    static const char expected_nul[] = "C|a\xEF\xBF\xBD" "b\nC|\xEF\xBF\xBD|\xEF\xBF\xBD|\xF0\x9F\x98\x80\n"
                                       "C|nul\0byte\nS|max_tokens\n";
    run r;
    events_of("data: {\"choices\":[{\"delta\":{\"content\":\"a\xff" "b\"}}]}\n\n"
              "data: {\"choices\":[{\"delta\":{\"content\":\"\\ud83d|\\ude00|\\ud83d\\ude00\"}}]}\n\n"
              "data: {\"choices\":[{\"delta\":{\"content\":\"nul\\u0000byte\"},\"finish_reason\":\"length\"}]}\n\n",
              &r);
    CHECK(r.log.text.len == sizeof expected_nul - 1 &&
          !memcmp(r.log.text.data, expected_nul, sizeof expected_nul - 1));
    CHECK_INT(openai_stream_message(r.stream)->content.len, 1 + 3 + 1 + 3 + 1 + 3 + 1 + 4 + 8);
    free_run(&r);
    /* "abort" and error objects in the forms servers write them */
    events_of("data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"abort\"}]}\n\n", &r);
    CHECK(strstr(openai_stream_error(r.stream), "abort") != NULL);
    CHECK_STR(event_log_text(&r.log), "C|a\nS|error\n");
    free_run(&r);
    events_of("data: {\"object\":\"error\",\"message\":\"bad\\nthing\",\"type\":\"BadRequestError\",\"code\":400}\n\n", &r);
    CHECK_STR(openai_stream_error(r.stream), "bad thing");
    free_run(&r);
    /* a long name without an id: the made id keeps it whole, the note stays one UTF-8 line */
    strbuf long_chunk = {0};
    strbuf_str(&long_chunk, "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"");
    for (int i = 0; i < 150; i++)
        strbuf_str(&long_chunk, "é");
    strbuf_str(&long_chunk, "\",\"arguments\":\"{}\"}}]}}]}\n\n");
    events_of(long_chunk.data, &r);
    CHECK_INT(openai_stream_message(r.stream)->n_tool_calls, 1);
    CHECK_INT(strlen(openai_stream_message(r.stream)->tool_calls[0].id), strlen("functions.:0") + 300);
    free_run(&r);
    free(long_chunk.data);
    /* "error": null and a "detail" member in a chunk are no errors */
    events_of("data: {\"error\":null,\"detail\":\"x\",\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n", &r);
    CHECK_STR(openai_stream_error(r.stream), "");
    CHECK_STR(event_log_text(&r.log), "C|ok\nS|end_of_turn\n");
    free_run(&r);
    events_of("data: {\"error\":{\"code\":503}}\n\n", &r);
    CHECK_STR(openai_stream_error(r.stream), "{\"error\":{\"code\":503}}");
    free_run(&r);
    /* usage: top level wins nothing over choices[0]; both are read */
    events_of("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\",\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}]}\n\n"
              "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n", &r);
    CHECK_INT(openai_stream_usage(r.stream)->prompt_tokens, 5);
    CHECK_INT(openai_stream_usage(r.stream)->cached_tokens, 2);
    CHECK_STR(event_log_text(&r.log), "S|end_of_turn\n");
    free_run(&r);
}

static void test_error_messages(void)
{
    char out[120];
    struct {
        const char *body, *expected;
    } cases[] = {
        {"{\"error\":{\"message\":\"Invalid key\",\"type\":\"auth\"}}", "Invalid key"},
        {"{\"error\":\"plain string\"}", "plain string"},
        {"{\"object\":\"error\",\"message\":\"The model `x` does not exist.\",\"code\":404}",
         "The model `x` does not exist."},
        {"{\"detail\":\"Not Found\"}", "Not Found"},
        {"{\"detail\":[{\"loc\":[\"body\",\"messages\"],\"msg\":\"Field required\"}]}", "Field required"},
        {"<html><body>502 Bad Gateway</body></html>", ""},
        {"upstream connect error\r\nsecond line", "upstream connect error"},
        {"{\"something\":\"else\"}", ""},
        {"", ""},
        {"{\"error\":{\"message\":\"tab\\tand\\u0001control   runs\"}}", "tab and control runs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        openai_error_message(cases[i].body, strlen(cases[i].body), out, sizeof out);
        CHECK_MSG(!strcmp(out, cases[i].expected), "%s -> \"%s\"", cases[i].body, out);
    }
    /* too long: cut at a character, with an ellipsis, still UTF-8 */
    char longtext[400];
    strcpy(longtext, "{\"error\":{\"message\":\"");
    for (int i = 0; i < 60; i++)
        strcat(longtext, "é€");
    strcat(longtext, "\"}}");
    openai_error_message(longtext, strlen(longtext), out, sizeof out);
    CHECK(strlen(out) < sizeof out && utf8_is_valid((const uint8_t *)out, strlen(out)));
    CHECK(strlen(out) >= 3 && !strcmp(out + strlen(out) - 3, "\xE2\x80\xA6"));
}

int main(void)
{
    test_fixtures();
    test_corners();
    test_error_messages();
    return check_finish();
}
