/* fuzz_sse: any bytes as a server's reply to a streamed chat-completions request, through the
 * event-stream framing (sse) and the chunk reader (openai_stream). Byte 0 picks how the rest is
 * cut into feeds (the sizes cycle through (byte0 % 7) + 1, 1, 2, ...). The events must not depend
 * on the cuts (they equal those of one whole feed), and must be well-formed: whole UTF-8,
 * NUL-terminated; one call open at a time, begun in order, each ended once; notes and END reasons
 * in one line; one STOP, last; and the assembled message agrees with them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "app/chat/openai_stream.h"
#include "app/chat/sse.h"
#include "engine/base/array.h"
#include "engine/text/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(cond)          \
    do {                       \
        if (!(cond))           \
            __builtin_trap();  \
    } while (0)

typedef struct {
    openai_stream *stream;
    strbuf log;             /* every event, for comparing the two runs */
    int open_call, calls_begun, calls_ended, stops;
    size_t reasoning_len, content_len;
} observed;

static void on_event(void *user, const parse_event *ev)
{
    observed *o = user;
    REQUIRE(o->stops == 0);
    REQUIRE(ev->text && ev->name && ev->text[ev->len] == 0);
    REQUIRE(utf8_is_valid((const uint8_t *)ev->text, ev->len));
    REQUIRE(utf8_is_valid((const uint8_t *)ev->name, strlen(ev->name)));
    switch (ev->kind) {
    case PARSE_REASONING_TEXT: REQUIRE(ev->len > 0); o->reasoning_len += ev->len; break;
    case PARSE_CONTENT_TEXT: REQUIRE(ev->len > 0); o->content_len += ev->len; break;
    case PARSE_TOOL_CALL_BEGIN:
        REQUIRE(o->open_call < 0 && ev->call == o->calls_begun);
        o->open_call = o->calls_begun++;
        break;
    case PARSE_TOOL_CALL_ID:
    case PARSE_TOOL_CALL_ARGS: REQUIRE(ev->call == o->open_call && o->open_call >= 0); break;
    case PARSE_TOOL_CALL_END:
        REQUIRE(ev->call == o->open_call && o->open_call >= 0);
        REQUIRE(ev->valid ? ev->len == 0 : ev->len > 0 && !memchr(ev->text, '\n', ev->len));
        o->open_call = -1;
        o->calls_ended++;
        break;
    case PARSE_NOTE: REQUIRE(ev->len > 0 && !memchr(ev->text, '\n', ev->len)); break;
    case PARSE_STOP: REQUIRE(o->open_call < 0); o->stops++; break;
    }
    char head[32];
    int n = snprintf(head, sizeof head, "%d/%d/%d/%d:", (int)ev->kind, ev->call, ev->valid,
                     (int)ev->stop);
    strbuf_add(&o->log, head, (size_t)n);
    strbuf_add(&o->log, ev->text, ev->len);
    strbuf_str(&o->log, "|");
    strbuf_str(&o->log, ev->name);
    strbuf_str(&o->log, "\n");
}

static int on_sse(void *user, const char *type, const char *payload, size_t len)
{
    observed *o = user;
    kimi_err err;
    (void)type;
    REQUIRE(payload[len] == 0);
    REQUIRE(openai_stream_data(o->stream, payload, len, &err) == 0);
    return openai_stream_done(o->stream) || openai_stream_error(o->stream)[0];
}

/* One run; cut == 0: one feed. Returns the event log (malloc'ed). */
static char *run(const uint8_t *text, size_t n, unsigned cut)
{
    observed o = {.open_call = -1};
    sse_parser *p;
    kimi_err err;
    REQUIRE(sse_create(&p, 1 << 16, &err) == 0);
    REQUIRE(openai_stream_create(&o.stream, on_event, &o, &err) == 0);
    int rc = 0;
    for (size_t at = 0, k = cut; at < n && rc == 0; k = k % 7 + 1) {
        size_t piece = cut ? k : n;
        if (piece > n - at)
            piece = n - at;
        rc = sse_feed(p, (const char *)text + at, piece, on_sse, &o, &err);
        REQUIRE(rc >= 0 || err.code == KIMI_ERR_INPUT);
        at += piece;
    }
    if (rc == 0)
        REQUIRE(sse_end(p, on_sse, &o, &err) >= 0);
    if (rc < 0)
        strbuf_str(&o.log, "framing failed\n");
    parse_stop_reason reason = openai_stream_error(o.stream)[0] ? PARSE_STOP_ERROR
                               : openai_stream_done(o.stream) || openai_stream_has_finish(o.stream)
                                   ? openai_stream_finish_stop(o.stream) : PARSE_STOP_ERROR;
    REQUIRE(openai_stream_finish(o.stream, reason, &err) == 0);
    REQUIRE(o.stops == 1 && openai_stream_stopped(o.stream));
    REQUIRE(o.calls_begun == o.calls_ended);
    const chat_message *m = openai_stream_message(o.stream);
    REQUIRE(m->n_tool_calls == o.calls_ended);
    REQUIRE(m->reasoning.len == o.reasoning_len && m->content.len == o.content_len);
    const char *e = openai_stream_error(o.stream);
    REQUIRE(utf8_is_valid((const uint8_t *)e, strlen(e)) && !strchr(e, '\n'));
    openai_stream_free(o.stream);
    sse_free(p);
    char *log = strbuf_take(&o.log);
    REQUIRE(log);
    return log;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    char *whole = run(data + 1, size - 1, 0);
    char *cut = run(data + 1, size - 1, data[0] % 7 + 1);
    REQUIRE(!strcmp(whole, cut));
    free(whole);
    free(cut);
    char msg[64];
    openai_error_message((const char *)data, size, msg, sizeof msg);
    REQUIRE(strlen(msg) < sizeof msg && utf8_is_valid((const uint8_t *)msg, strlen(msg)));
    return 0;
}
