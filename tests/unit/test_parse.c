/* test_parse: the output stream parser on token streams built from the tiny checkpoint's
 * vocabulary, each fed whole, one id at a time, split at every point and in chunks; the events,
 * merged, must read as CHAT_FORMAT.md says. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/config.h"
#include "engine/text/parse.h"
#include "engine/text/tokenizer.h"
#include "tests/unit/check.h"

#define TINY "tests/golden/fixtures/tiny-k25"

static const tokenizer *tok;

/* ---- building streams ---- */

typedef struct {
    int32_t ids[512];
    size_t n;
} stream;

static void add_id(stream *s, int32_t id)
{
    if (s->n < sizeof s->ids / sizeof s->ids[0])
        s->ids[s->n++] = id;
}

static void add_text(stream *s, const char *text)
{
    int32_t *ids = NULL;
    size_t n = 0;
    kimi_err err = {0};
    CHECK(tokenizer_encode(tok, text, strlen(text), 0, &ids, &n, &err) == 0);
    for (size_t i = 0; i < n; i++)
        add_id(s, ids[i]);
    free(ids);
}

static void add_special(stream *s, const char *name)
{
    int32_t id = tokenizer_special_id(tok, name);
    CHECK_MSG(id >= 0, "no special %s", name);
    add_id(s, id);
}

/* One id per byte: splits multi-byte characters across ids. */
static void add_bytes_one_by_one(stream *s, const char *bytes)
{
    for (const char *b = bytes; *b; b++) {
        int32_t found = -1;
        for (int32_t id = 0; id < tokenizer_vocab_size(tok) && found < 0; id++) {
            size_t len;
            const char *t = tokenizer_token_bytes(tok, id, &len);
            if (t && len == 1 && *t == *b && !tokenizer_is_special(tok, id))
                found = id;
        }
        CHECK_MSG(found >= 0, "no single-byte token for 0x%02x", (unsigned char)*b);
        add_id(s, found);
    }
}

/* ---- recording events as one line: adjacent text of one kind merged ---- */

typedef struct {
    char text[4096];
    char last_kind;          /* kind of the last text piece, to merge */
    int stops;
} recording;

static void rec_add(recording *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rec_add(recording *r, const char *fmt, ...)
{
    size_t used = strlen(r->text);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->text + used, sizeof r->text - used, fmt, ap);
    va_end(ap);
}

static void on_event(void *user, const parse_event *ev)
{
    recording *r = user;
    static const char text_kinds[] = {[PARSE_REASONING_TEXT] = 'R', [PARSE_CONTENT_TEXT] = 'C',
                                      [PARSE_TOOL_CALL_ARGS] = 'A'};
    CHECK(strlen(ev->text) == ev->len);
    if (ev->kind == PARSE_REASONING_TEXT || ev->kind == PARSE_CONTENT_TEXT ||
        ev->kind == PARSE_TOOL_CALL_ARGS) {
        CHECK(ev->len > 0);
        if (r->last_kind != text_kinds[ev->kind])
            rec_add(r, "%s%c:", r->text[0] ? "|" : "", text_kinds[ev->kind]);
        rec_add(r, "%s", ev->text);
        r->last_kind = text_kinds[ev->kind];
        return;
    }
    r->last_kind = 0;
    const char *sep = r->text[0] ? "|" : "";
    switch (ev->kind) {
    case PARSE_TOOL_CALL_BEGIN: rec_add(r, "%sB%d", sep, ev->call); break;
    case PARSE_TOOL_CALL_ID: rec_add(r, "%sI%d:%s=%s", sep, ev->call, ev->text, ev->name); break;
    case PARSE_TOOL_CALL_END:
        /* an invalid call's message is checked apart: its JSON wording is jansson's */
        rec_add(r, "%sE%d:%s", sep, ev->call, ev->valid ? "ok" : "bad");
        CHECK(ev->valid ? ev->len == 0 : ev->len > 0);
        break;
    case PARSE_NOTE: rec_add(r, "%sN:%s", sep, ev->text); break;
    case PARSE_STOP: rec_add(r, "%sS:%s", sep, parse_stop_text(ev->stop)); r->stops++; break;
    default: break;
    }
}

/* ---- one scenario, fed every way ---- */

typedef struct {
    const char *name;
    parse_start start;
    int finish;                  /* -1: none (ends on a stop token), else a parse_stop_reason */
    const char *expected;
} scenario;

static void feed(const scenario *sc, const stream *s, const size_t *cuts, size_t n_cuts,
                 recording *r, stream_parser **out)
{
    kimi_err err = {0};
    stream_parser *p;
    *r = (recording){0};
    CHECK(parse_create(&p, tok, sc->start, on_event, r, &err) == 0);
    size_t from = 0;
    for (size_t c = 0; c <= n_cuts; c++) {
        size_t to = c < n_cuts ? cuts[c] : s->n;
        CHECK(parse_push_ids(p, s->ids + from, to - from, &err) == 0);
        from = to;
    }
    if (sc->finish >= 0)
        CHECK(parse_finish(p, (parse_stop_reason)sc->finish, &err) == 0);
    *out = p;
}

static void check_scenario(const scenario *sc, const stream *s)
{
    recording r;
    stream_parser *p;
    feed(sc, s, NULL, 0, &r, &p);
    CHECK_MSG(!strcmp(r.text, sc->expected), "%s:\n  got      %s\n  expected %s", sc->name, r.text, sc->expected);
    CHECK_MSG(r.stops == 1 && parse_stopped(p), "%s: %d stops", sc->name, r.stops);
    /* The turn's ids are kept, up to and including the stop token. */
    size_t n_ids;
    const int32_t *ids = parse_ids(p, &n_ids);
    CHECK(n_ids <= s->n && !memcmp(ids, s->ids, n_ids * sizeof *ids));
    parse_free(p);

    /* Split at every point, and in chunks of 1, 2, 3 and 7: the same events. */
    for (size_t cut = 0; cut <= s->n; cut++) {
        feed(sc, s, &cut, 1, &r, &p);
        CHECK_MSG(!strcmp(r.text, sc->expected), "%s split at %zu: %s", sc->name, cut, r.text);
        parse_free(p);
    }
    static const size_t chunks[] = {1, 2, 3, 7};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        size_t cuts[512], n_cuts = 0;
        for (size_t at = chunks[k]; at < s->n && n_cuts < 512; at += chunks[k])
            cuts[n_cuts++] = at;
        feed(sc, s, cuts, n_cuts, &r, &p);
        CHECK_MSG(!strcmp(r.text, sc->expected), "%s in chunks of %zu: %s", sc->name, chunks[k], r.text);
        parse_free(p);
    }
}

/* The first invalid call's message, for checks of its wording. */
typedef struct {
    char why[512];
} end_capture;

static void capture_end(void *user, const parse_event *ev)
{
    end_capture *c = user;
    if (ev->kind == PARSE_TOOL_CALL_END && !ev->valid && !c->why[0])
        snprintf(c->why, sizeof c->why, "%s", ev->text);
}

static void check_end_message(const stream *s, parse_start start, const char *prefix)
{
    end_capture c = {{0}};
    stream_parser *p;
    kimi_err err = {0};
    CHECK(parse_create(&p, tok, start, capture_end, &c, &err) == 0);
    CHECK(parse_push_ids(p, s->ids, s->n, &err) == 0);
    CHECK(parse_finish(p, PARSE_STOP_MAX_TOKENS, &err) == 0);
    CHECK_MSG(!strncmp(c.why, prefix, strlen(prefix)), "message '%s' does not start with '%s'", c.why, prefix);
    parse_free(p);
}

static void silent(void *user, const parse_event *ev) { (void)user; (void)ev; }

/* ---- the scenarios ---- */

static void test_answer_after_reasoning(void)
{
    stream s = {0};
    add_text(&s, "Five, seven, five.");
    add_special(&s, "</think>");
    add_text(&s, "Silicon rivers hum.");
    add_special(&s, "<|im_end|>");
    scenario sc = {"answer", PARSE_START_REASONING, -1,
                   "R:Five, seven, five.|C:Silicon rivers hum.|S:end of turn"};
    check_scenario(&sc, &s);

    /* A stray <think> at the very start is swallowed. */
    stream t = {0};
    add_special(&t, "<think>");
    for (size_t i = 0; i < s.n; i++)
        add_id(&t, s.ids[i]);
    sc.name = "stray think";
    check_scenario(&sc, &t);

    /* Thinking off: the output starts in the answer; [EOS] also stops. */
    stream u = {0};
    add_text(&u, "Hi there");
    add_special(&u, "[EOS]");
    scenario off = {"thinking off", PARSE_START_CONTENT, -1, "C:Hi there|S:end of sequence"};
    check_scenario(&off, &u);
}

static void test_tool_calls(void)
{
    stream s = {0};
    add_text(&s, "I should call the weather tool.");
    add_special(&s, "</think>");
    add_text(&s, "Checking.");
    add_special(&s, "<|tool_calls_section_begin|>");
    add_special(&s, "<|tool_call_begin|>");
    add_text(&s, "functions.get_weather:0");
    add_special(&s, "<|tool_call_argument_begin|>");
    add_text(&s, "{\"city\": \"Paris\", \"days\": 2}");
    add_special(&s, "<|tool_call_end|>");
    add_special(&s, "<|tool_call_begin|>");
    add_text(&s, "functions.now:1");
    add_special(&s, "<|tool_call_argument_begin|>");
    add_text(&s, "{}");
    add_special(&s, "<|tool_call_end|>");
    add_special(&s, "<|tool_calls_section_end|>");
    add_special(&s, "<|im_end|>");
    scenario sc = {"two calls", PARSE_START_REASONING, -1,
                   "R:I should call the weather tool.|C:Checking.|B0|I0:functions.get_weather:0=get_weather"
                   "|A:{\"city\": \"Paris\", \"days\": 2}|E0:ok|B1|I1:functions.now:1=now|A:{}|E1:ok|S:end of turn"};
    check_scenario(&sc, &s);

    /* The assembled message carries the reasoning, the answer and both calls. */
    recording r;
    stream_parser *p;
    feed(&sc, &s, NULL, 0, &r, &p);
    const chat_message *m = parse_message(p);
    CHECK_INT(m->role, CHAT_ROLE_ASSISTANT);
    CHECK_STR(m->reasoning.s, "I should call the weather tool.");
    CHECK_STR(m->content.s, "Checking.");
    CHECK_INT(m->n_tool_calls, 2);
    if (m->n_tool_calls == 2) {
        CHECK_STR(m->tool_calls[0].id, "functions.get_weather:0");
        CHECK_STR(m->tool_calls[0].name, "get_weather");
        CHECK_STR(m->tool_calls[0].arguments.s, "{\"city\": \"Paris\", \"days\": 2}");
        CHECK_STR(m->tool_calls[1].name, "now");
    }
    CHECK_INT(parse_stop(p), PARSE_STOP_END_OF_TURN);
    parse_free(p);
}

static void test_malformed(void)
{
    /* No </think>: the turn ends inside the reasoning. */
    stream a = {0};
    add_text(&a, "hmm");
    add_special(&a, "<|im_end|>");
    scenario sa = {"no think end", PARSE_START_REASONING, -1,
                   "R:hmm|N:the turn ended inside the reasoning (no </think>)|S:end of turn"};
    check_scenario(&sa, &a);

    /* The section begins inside the reasoning: that ends the reasoning; a bare counter id. */
    stream b = {0};
    add_text(&b, "plan");
    add_special(&b, "<|tool_calls_section_begin|>");
    add_special(&b, "<|tool_call_begin|>");
    add_text(&b, "0");
    add_special(&b, "<|tool_call_argument_begin|>");
    add_text(&b, "{\"a\": 1}");
    add_special(&b, "<|tool_call_end|>");
    add_special(&b, "<|tool_calls_section_end|>");
    add_special(&b, "<|im_end|>");
    scenario sb = {"section in reasoning", PARSE_START_REASONING, -1,
                   "R:plan|N:tool calls began before </think>: the reasoning ends there|B0|I0:0=|A:{\"a\": 1}|E0:ok|S:end of turn"};
    check_scenario(&sb, &b);

    /* A call without <|tool_call_argument_begin|>: the id keeps all its text. */
    stream c = {0};
    add_special(&c, "<|tool_calls_section_begin|>");
    add_special(&c, "<|tool_call_begin|>");
    add_text(&c, "functions.f:0{\"x\": 1}");
    add_special(&c, "<|tool_call_end|>");
    add_special(&c, "<|tool_calls_section_end|>");
    add_special(&c, "<|im_end|>");
    scenario scc = {"no argument begin", PARSE_START_CONTENT, -1,
                    "B0|I0:functions.f:0{\"x\": 1}=f|E0:bad|S:end of turn"};
    check_scenario(&scc, &c);
    check_end_message(&c, PARSE_START_CONTENT, "no <|tool_call_argument_begin|>");

    /* Invalid JSON, and valid JSON that is not an object. */
    stream d = {0};
    add_special(&d, "<|tool_calls_section_begin|>");
    add_special(&d, "<|tool_call_begin|>");
    add_text(&d, "functions.f:0");
    add_special(&d, "<|tool_call_argument_begin|>");
    add_text(&d, "{\"city\": Paris}");
    add_special(&d, "<|tool_call_end|>");
    add_special(&d, "<|tool_call_begin|>");
    add_text(&d, "functions.g:1");
    add_special(&d, "<|tool_call_argument_begin|>");
    add_text(&d, "[1, 2]");
    add_special(&d, "<|tool_call_end|>");
    add_special(&d, "<|tool_calls_section_end|>");
    add_special(&d, "<|im_end|>");
    scenario sd = {"bad arguments", PARSE_START_CONTENT, -1,
                   "B0|I0:functions.f:0=f|A:{\"city\": Paris}|E0:bad|B1|I1:functions.g:1=g|A:[1, 2]|E1:bad|S:end of turn"};
    check_scenario(&sd, &d);
    check_end_message(&d, PARSE_START_CONTENT, "invalid JSON arguments: ");

    /* A call not closed before the next one or the section end; stray text in the section;
     * unexpected specials elsewhere are noted and the text goes on. */
    stream e = {0};
    add_text(&e, "A");
    add_special(&e, "<|im_user|>");
    add_text(&e, "B");
    add_special(&e, "<|tool_calls_section_begin|>");
    add_special(&e, "<|tool_call_begin|>");
    add_text(&e, "functions.f:0");
    add_special(&e, "<|tool_call_argument_begin|>");
    add_text(&e, "{}");
    add_special(&e, "<|tool_call_begin|>");
    add_text(&e, "functions.g:1");
    add_special(&e, "<|tool_call_argument_begin|>");
    add_text(&e, "{}");
    add_special(&e, "<|tool_call_end|>");
    add_text(&e, " junk ");
    add_special(&e, "</think>");
    add_special(&e, "<|tool_calls_section_end|>");
    add_text(&e, "after");
    add_special(&e, "<|im_end|>");
    scenario se = {"unclosed and stray", PARSE_START_CONTENT, -1,
                   "C:A|N:unexpected <|im_user|> in the answer, ignored|C:B|B0|I0:functions.f:0=f|A:{}"
                   "|N:tool call 0 not closed by <|tool_call_end|>|E0:ok|B1|I1:functions.g:1=g|A:{}|E1:ok"
                   "|N:text outside a tool call:  junk |N:unexpected </think> in the tool-call section, ignored"
                   "|C:after|S:end of turn"};
    check_scenario(&se, &e);

    /* A call outside any section, and a section the turn leaves open. */
    stream f = {0};
    add_special(&f, "<|tool_call_begin|>");
    add_text(&f, "functions.f:0");
    add_special(&f, "<|tool_call_argument_begin|>");
    add_text(&f, "{}");
    add_special(&f, "<|tool_call_end|>");
    add_special(&f, "<|im_end|>");
    scenario sf = {"call outside section", PARSE_START_CONTENT, -1,
                   "N:<|tool_call_begin|> outside a tool-call section (in the answer)|B0|I0:functions.f:0=f|A:{}|E0:ok"
                   "|N:tool-call section not closed by <|tool_calls_section_end|>|S:end of turn"};
    check_scenario(&sf, &f);

    /* An id outside the vocabulary is noted, never looked up. */
    stream g = {0};
    add_text(&g, "x");
    add_id(&g, tokenizer_vocab_size(tok) + 5);
    add_id(&g, -1);
    add_text(&g, "y");
    add_special(&g, "<|im_end|>");
    char expected[256];
    snprintf(expected, sizeof expected,
             "C:x|N:id %d is not in the vocabulary, ignored|N:id -1 is not in the vocabulary, ignored|C:y|S:end of turn",
             tokenizer_vocab_size(tok) + 5);
    scenario sg = {"out of range", PARSE_START_CONTENT, -1, expected};
    check_scenario(&sg, &g);
}

/* <think> and </think> after the first id are out of place: noted and ignored, the text on either
 * side stays where it was (a <think> mid-answer must not fold the rest of the answer away). */
static void test_think_out_of_place(void)
{
    stream a = {0};
    add_text(&a, "plan");
    add_special(&a, "</think>");
    add_text(&a, "Part one.");
    add_special(&a, "<think>");
    add_text(&a, " Part two.");
    add_special(&a, "<|im_end|>");
    scenario sa = {"think mid-answer", PARSE_START_REASONING, -1,
                   "R:plan|C:Part one.|N:unexpected <think> in the answer, ignored|C: Part two.|S:end of turn"};
    check_scenario(&sa, &a);
    recording r;
    stream_parser *p;
    feed(&sa, &a, NULL, 0, &r, &p);
    CHECK_STR(parse_message(p)->reasoning.s, "plan");
    CHECK_STR(parse_message(p)->content.s, "Part one. Part two.");
    parse_free(p);

    /* Thinking off: <think> and </think> mid-answer. */
    stream b = {0};
    add_text(&b, "A");
    add_special(&b, "<think>");
    add_text(&b, "B");
    add_special(&b, "</think>");
    add_text(&b, "C");
    add_special(&b, "<|im_end|>");
    scenario sb = {"think mid-answer, thinking off", PARSE_START_CONTENT, -1,
                   "C:A|N:unexpected <think> in the answer, ignored|C:B"
                   "|N:unexpected </think> in the answer, ignored|C:C|S:end of turn"};
    check_scenario(&sb, &b);

    /* A second <think> inside the reasoning. */
    stream c = {0};
    add_text(&c, "a");
    add_special(&c, "<think>");
    add_text(&c, "b");
    add_special(&c, "</think>");
    add_text(&c, "c");
    add_special(&c, "<|im_end|>");
    scenario sc = {"think mid-reasoning", PARSE_START_REASONING, -1,
                   "R:a|N:unexpected <think> in the reasoning, ignored|R:b|C:c|S:end of turn"};
    check_scenario(&sc, &c);

    /* Inside a tool call's id and arguments: the call and its JSON come through whole. */
    stream d = {0};
    add_special(&d, "</think>");
    add_special(&d, "<|tool_calls_section_begin|>");
    add_special(&d, "<|tool_call_begin|>");
    add_text(&d, "functions.f:0");
    add_special(&d, "<think>");
    add_special(&d, "<|tool_call_argument_begin|>");
    add_text(&d, "{\"a\": ");
    add_special(&d, "<think>");
    add_text(&d, "1");
    add_special(&d, "</think>");
    add_text(&d, "}");
    add_special(&d, "<|tool_call_end|>");
    add_special(&d, "<|tool_calls_section_end|>");
    add_text(&d, "done");
    add_special(&d, "<|im_end|>");
    scenario sd = {"think mid-tool-call", PARSE_START_REASONING, -1,
                   "B0|N:unexpected <think> in the tool-call id, ignored|I0:functions.f:0=f|A:{\"a\": "
                   "|N:unexpected <think> in the tool-call arguments, ignored|A:1"
                   "|N:unexpected </think> in the tool-call arguments, ignored|A:}|E0:ok|C:done|S:end of turn"};
    check_scenario(&sd, &d);
    feed(&sd, &d, NULL, 0, &r, &p);
    CHECK_INT(parse_message(p)->n_tool_calls, 1);
    if (parse_message(p)->n_tool_calls == 1)
        CHECK_STR(parse_message(p)->tool_calls[0].arguments.s, "{\"a\": 1}");
    CHECK(!parse_message(p)->reasoning.s || !parse_message(p)->reasoning.s[0]);
    parse_free(p);
}

static void test_engine_stops(void)
{
    /* Max tokens inside the reasoning: reported as stopped while thinking. */
    stream a = {0};
    add_text(&a, "Let me count");
    scenario sa = {"max tokens thinking", PARSE_START_REASONING, PARSE_STOP_MAX_TOKENS,
                   "R:Let me count|S:stopped while thinking (max tokens)"};
    check_scenario(&sa, &a);

    /* Max tokens inside the arguments: the call is cut off. */
    stream b = {0};
    add_special(&b, "</think>");
    add_special(&b, "<|tool_calls_section_begin|>");
    add_special(&b, "<|tool_call_begin|>");
    add_text(&b, "functions.f:0");
    add_special(&b, "<|tool_call_argument_begin|>");
    add_text(&b, "{\"a\": 1");
    scenario sb = {"max tokens in call", PARSE_START_REASONING, PARSE_STOP_MAX_TOKENS,
                   "B0|I0:functions.f:0=f|A:{\"a\": 1|E0:bad|S:max tokens"};
    check_scenario(&sb, &b);
    check_end_message(&b, PARSE_START_REASONING, "cut off before <|tool_call_end|>");

    /* Cancelled in the answer, and inside a call id (the id still comes out). */
    stream c = {0};
    add_text(&c, "Partial answer");
    scenario sc = {"cancelled", PARSE_START_CONTENT, PARSE_STOP_CANCELLED, "C:Partial answer|S:cancelled"};
    check_scenario(&sc, &c);
    stream d = {0};
    add_special(&d, "<|tool_calls_section_begin|>");
    add_special(&d, "<|tool_call_begin|>");
    add_text(&d, "functions.lo");
    scenario sd = {"cut in id", PARSE_START_CONTENT, PARSE_STOP_CONTEXT_FULL,
                   "B0|I0:functions.lo=lo|E0:bad|S:context full"};
    check_scenario(&sd, &d);

    /* Ids after the stop are ignored and not kept; finish after a stop does nothing. */
    stream e = {0};
    add_text(&e, "done");
    add_special(&e, "<|im_end|>");
    size_t n_turn = e.n;
    add_text(&e, "more");
    scenario se = {"after stop", PARSE_START_CONTENT, PARSE_STOP_MAX_TOKENS, "C:done|S:end of turn"};
    check_scenario(&se, &e);
    recording r;
    stream_parser *p;
    feed(&se, &e, NULL, 0, &r, &p);
    size_t n_ids;
    parse_ids(p, &n_ids);
    CHECK_INT(n_ids, n_turn);
    parse_free(p);
}

static void test_utf8(void)
{
    /* "é" and "你" arrive one byte per id: emitted whole, never half. */
    stream a = {0};
    add_bytes_one_by_one(&a, "caf\xc3\xa9 \xe4\xbd\xa0");
    add_special(&a, "</think>");
    add_bytes_one_by_one(&a, "\xf0\x9f\x98\x80!");
    add_special(&a, "<|im_end|>");
    scenario sa = {"utf8 split", PARSE_START_REASONING, -1,
                   "R:caf\xc3\xa9 \xe4\xbd\xa0|C:\xf0\x9f\x98\x80!|S:end of turn"};
    check_scenario(&sa, &a);

    /* A character cut by a special or by the end becomes U+FFFD in the stream it began in. */
    stream b = {0};
    add_bytes_one_by_one(&b, "x\xe4\xbd");
    add_special(&b, "</think>");
    add_bytes_one_by_one(&b, "y\xf0\x9f");
    scenario sb = {"utf8 cut", PARSE_START_REASONING, PARSE_STOP_MAX_TOKENS,
                   "R:x\xef\xbf\xbd|C:y\xef\xbf\xbd|S:max tokens"};
    check_scenario(&sb, &b);

    /* Every text event is whole characters: each piece is valid UTF-8 on its own. */
    stream c = {0};
    add_bytes_one_by_one(&c, "\xe4\xbd\xa0\xe5\xa5\xbd");
    stream_parser *p;
    kimi_err err = {0};
    CHECK(parse_create(&p, tok, PARSE_START_CONTENT, silent, NULL, &err) == 0);
    CHECK(parse_push_ids(p, c.ids, c.n, &err) == 0);
    CHECK(parse_message(p)->content.s && !strcmp(parse_message(p)->content.s, "\xe4\xbd\xa0\xe5\xa5\xbd"));
    parse_free(p);
}

/* Text holding NUL bytes (the model can emit byte 0) survives the whole round trip: parser ->
 * history -> render (the generated ids reappear exactly) -> JSON -> load -> render (same ids). */
static void add_raw(stream *s, const char *bytes, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    kimi_err err = {0};
    CHECK(tokenizer_encode(tok, bytes, len, 0, &ids, &n, &err) == 0);
    for (size_t i = 0; i < n; i++)
        add_id(s, ids[i]);
    free(ids);
}

static int contains_run(const int32_t *hay, size_t n_hay, const int32_t *needle, size_t n_needle)
{
    for (size_t i = 0; i + n_needle <= n_hay; i++)
        if (!memcmp(hay + i, needle, n_needle * sizeof *needle))
            return 1;
    return 0;
}

static void test_nul_round_trip(void)
{
    static const char reasoning[] = "think\0hard", content[] = "a\0b\0", args[] = "{\"p\": \"x\"}";
    stream s = {0};
    add_raw(&s, reasoning, sizeof reasoning - 1);
    add_special(&s, "</think>");
    add_raw(&s, content, sizeof content - 1);
    add_special(&s, "<|tool_calls_section_begin|>");
    add_special(&s, "<|tool_call_begin|>");
    add_text(&s, "functions.f:0");
    add_special(&s, "<|tool_call_argument_begin|>");
    add_text(&s, args);
    add_special(&s, "<|tool_call_end|>");
    add_special(&s, "<|tool_calls_section_end|>");
    add_special(&s, "<|im_end|>");

    stream_parser *p = NULL;
    kimi_err err = {0};
    CHECK(parse_create(&p, tok, PARSE_START_REASONING, silent, NULL, &err) == 0);
    CHECK(parse_push_ids(p, s.ids, s.n, &err) == 0);
    const chat_message *m = parse_message(p);
    CHECK(m->reasoning.len == sizeof reasoning - 1 && !memcmp(m->reasoning.s, reasoning, m->reasoning.len));
    CHECK(m->content.len == sizeof content - 1 && !memcmp(m->content.s, content, m->content.len));

    chat_conversation c;
    chat_conversation_init(&c);
    CHECK(chat_append(&c, CHAT_ROLE_USER, "q\0r", 3, &err) != NULL);
    CHECK(chat_append_copy(&c, m, &err) == 0);
    chat_message *result = chat_append(&c, CHAT_ROLE_TOOL, "out\0put", 7, &err);
    CHECK(result && chat_set_text(&result->tool_call_id, "functions.f:0", &err) == 0);
    chat_render_options opt = {.thinking = 1, .add_generation_prompt = 1};
    chat_rendering first, second;
    CHECK(chat_render(tok, &c, &opt, &first, &err) == 0);
    CHECK(contains_run(first.ids, first.n_ids, s.ids, s.n));

    json_t *exported = chat_conversation_to_json(&c);
    char *text = json_dumps(exported, JSON_COMPACT);
    json_error_t jerr;
    json_t *loaded = text ? json_loads(text, JSON_ALLOW_NUL, &jerr) : NULL;
    chat_conversation back;
    chat_conversation_init(&back);
    CHECK(loaded && chat_conversation_from_json(&back, loaded, &err) == 0);
    CHECK(back.n_messages == 3 && back.messages[0].content.len == 3 && back.messages[2].content.len == 7);
    CHECK(chat_render(tok, &back, &opt, &second, &err) == 0);
    CHECK(first.n_ids == second.n_ids && !memcmp(first.ids, second.ids, first.n_ids * sizeof *first.ids));
    chat_rendering_free(&first);
    chat_rendering_free(&second);
    json_decref(loaded);
    free(text);
    json_decref(exported);
    chat_conversation_free(&back);
    chat_conversation_free(&c);
    parse_free(p);
}

int main(void)
{
    model_config cfg;
    tokenizer *t = NULL;
    kimi_err err = {0};
    if (config_load(&cfg, TINY, &err) || tokenizer_load(&t, TINY, &cfg, &err)) {
        fprintf(stderr, "test_parse: %s\n", err.msg);
        return 1;
    }
    tok = t;
    test_answer_after_reasoning();
    test_tool_calls();
    test_malformed();
    test_think_out_of_place();
    test_engine_stops();
    test_utf8();
    test_nul_round_trip();
    CHECK_STR(parse_stop_text(PARSE_STOP_MAX_TOKENS_WHILE_THINKING), "stopped while thinking (max tokens)");
    tokenizer_free(t);
    config_free(&cfg);
    return check_finish();
}
