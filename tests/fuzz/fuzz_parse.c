/* fuzz_parse: the stream parser on arbitrary id sequences of the tiny checkpoint. Byte 0: bit 0
 * starts in the answer (else the reasoning), bits 1-3 the reason the engine finally stops with
 * (modulo the reasons there are; ignored when a stop token came first). Then 16-bit little-endian values: with the top bit set, one of the
 * specials by name; otherwise an id, up to 4 past the vocabulary, or -1 for 0x7fff. Every event
 * must be well-formed (whole UTF-8, calls opened before they are used and closed once, one stop,
 * last) and agree with the assembled message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/parse.h"
#include "engine/text/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const specials[] = {
    "<|im_end|>", "[EOS]", "<think>", "</think>", "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
    "<|tool_call_end|>", "<|im_user|>", "<|im_middle|>", "[BOS]",
};
enum { N_SPECIALS = sizeof specials / sizeof specials[0] };

static const tokenizer *tok;
static int32_t special_ids[N_SPECIALS];

typedef struct {
    int open_call;          /* index of the open call, -1 when none */
    int calls_begun, calls_ended, stops;
    size_t reasoning_len, content_len;
} observed;

static void on_event(void *user, const parse_event *ev)
{
    observed *o = user;
    REQUIRE(o->stops == 0);
    REQUIRE(ev->text && fuzz_valid_utf8((const uint8_t *)ev->text, ev->len));
    switch (ev->kind) {
    case PARSE_REASONING_TEXT: o->reasoning_len += ev->len; break;
    case PARSE_CONTENT_TEXT: o->content_len += ev->len; break;
    case PARSE_TOOL_CALL_BEGIN:
        REQUIRE(o->open_call < 0 && ev->call == o->calls_begun);
        o->open_call = o->calls_begun++;
        break;
    case PARSE_TOOL_CALL_ID:
    case PARSE_TOOL_CALL_ARGS: REQUIRE(ev->call == o->open_call && o->open_call >= 0); break;
    case PARSE_TOOL_CALL_END:
        REQUIRE(ev->call == o->open_call && o->open_call >= 0);
        REQUIRE(ev->valid ? ev->len == 0 : ev->len > 0);
        o->open_call = -1;
        o->calls_ended++;
        break;
    case PARSE_NOTE: REQUIRE(ev->len > 0); break;
    case PARSE_STOP: REQUIRE(o->open_call < 0); o->stops++; break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok) {
        tok = fuzz_tiny_tokenizer();
        for (int i = 0; i < N_SPECIALS; i++)
            special_ids[i] = tokenizer_special_id(tok, specials[i]);
    }
    if (size == 0)
        return 0;
    observed o = {.open_call = -1};
    stream_parser *p;
    kimi_err err;
    REQUIRE(parse_create(&p, tok, data[0] & 1 ? PARSE_START_CONTENT : PARSE_START_REASONING,
                         on_event, &o, &err) == 0);
    int vocab = tokenizer_vocab_size(tok);
    size_t pushed = 0;
    for (size_t i = 1; i + 1 < size; i += 2) {
        unsigned v = data[i] | (unsigned)data[i + 1] << 8;
        int32_t id = v & 0x8000 ? special_ids[(v & 0xff) % N_SPECIALS]
                   : v == 0x7fff ? -1 : (int32_t)(v % (unsigned)(vocab + 4));
        REQUIRE(parse_push(p, id, &err) == 0);
        pushed++;
    }
    int reason = ((data[0] >> 1) & 7) % (PARSE_STOP_ERROR + 1);
    REQUIRE(parse_finish(p, (parse_stop_reason)reason, &err) == 0);
    REQUIRE(o.stops == 1 && parse_stopped(p));
    REQUIRE(o.calls_begun == o.calls_ended);
    size_t n_ids;
    parse_ids(p, &n_ids);
    REQUIRE(n_ids <= pushed);
    const chat_message *m = parse_message(p);
    REQUIRE(m->n_tool_calls == o.calls_ended);
    REQUIRE(m->reasoning.len == o.reasoning_len);
    REQUIRE(m->content.len == o.content_len);
    parse_free(p);
    return 0;
}
