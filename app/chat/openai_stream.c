/* openai_stream: chat-completion chunks -> parse events; see the header for the mapping. */
#include "app/chat/openai_stream.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/base/array.h"
#include "engine/text/utf8.h"

enum { NOTE_EXCERPT_MAX = 2000 };

typedef struct {
    long server_index;      /* the index the server gave the call */
    char *id, *name;
    char *args;             /* [args_len + 1] the argument pieces so far */
    size_t args_len, args_cap;
    int ended;
} call_state;

struct openai_stream {
    parse_event_fn on_event;
    void *user;
    call_state *calls;      /* [n_calls], in the order they began: our call index */
    size_t n_calls, cap_calls;
    long open;              /* the open call, -1 when none */
    chat_message message;
    int reasoning_seen, answer_seen;
    int done, has_finish, stopped, noted_choices;
    parse_stop_reason finish_stop;
    char error[512];
    openai_usage usage;
    int text_chunks;
    int oom;
};

int openai_stream_create(openai_stream **out, parse_event_fn on_event, void *user,
                         kimi_err *err)
{
    openai_stream *s = calloc(1, sizeof *s);
    if (!s)
        return kimi_fail(err, KIMI_ERR_NOMEM, "server stream: out of memory");
    s->on_event = on_event;
    s->user = user;
    s->open = -1;
    s->message.role = CHAT_ROLE_ASSISTANT;
    s->finish_stop = PARSE_STOP_ERROR;
    s->usage = (openai_usage){-1, -1, -1};
    *out = s;
    return 0;
}

void openai_stream_free(openai_stream *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_calls; i++) {
        free(s->calls[i].id);
        free(s->calls[i].name);
        free(s->calls[i].args);
    }
    free(s->calls);
    chat_message_free(&s->message);
    free(s);
}

int openai_stream_done(const openai_stream *s) { return s->done; }
int openai_stream_has_finish(const openai_stream *s) { return s->has_finish; }
const char *openai_stream_error(const openai_stream *s) { return s->error; }
const openai_usage *openai_stream_usage(const openai_stream *s) { return &s->usage; }
int openai_stream_text_chunks(const openai_stream *s) { return s->text_chunks; }
parse_stop_reason openai_stream_finish_stop(const openai_stream *s) { return s->finish_stop; }
int openai_stream_stopped(const openai_stream *s) { return s->stopped; }
const chat_message *openai_stream_message(const openai_stream *s) { return &s->message; }

/* ---- events ---- */

static void emit(openai_stream *s, parse_event ev)
{
    if (!ev.text) {
        ev.text = "";
        ev.len = 0;
    }
    if (!ev.name)
        ev.name = "";
    s->on_event(s->user, &ev);
}

static void note(openai_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(openai_stream *s, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    emit(s, (parse_event){.kind = PARSE_NOTE, .text = line, .len = len});
}

/* A note that quotes text: prefix, then the text as a JSON string (one line, nothing lost). */
static void note_quoting(openai_stream *s, const char *prefix, const char *text, size_t len)
{
    json_t *str = json_stringn(text, len);
    char *quoted = str ? json_dumps(str, JSON_ENCODE_ANY) : NULL;
    json_decref(str);
    strbuf b = {0};
    strbuf_str(&b, prefix);
    strbuf_str(&b, quoted ? quoted : "(unprintable)");
    free(quoted);
    char *line = strbuf_take(&b);
    if (!line) {
        s->oom = 1;
        return;
    }
    emit(s, (parse_event){.kind = PARSE_NOTE, .text = line, .len = strlen(line)});
    free(line);
}

static void close_call(openai_stream *s)
{
    if (s->open < 0)
        return;
    call_state *c = &s->calls[s->open];
    char why[300] = "";
    if (!c->args_len) {
        snprintf(why, sizeof why, "no arguments came for the call");
    } else {
        json_error_t jerr;
        json_t *args = json_loadb(c->args, c->args_len, JSON_DECODE_ANY, &jerr);
        if (!args) {
            char text[160];
            utf8_one_line(jerr.text, strlen(jerr.text), text, sizeof text);
            snprintf(why, sizeof why, "invalid JSON arguments: %s (at byte %d)", text,
                     jerr.position);
        } else if (!json_is_object(args)) {
            snprintf(why, sizeof why, "the arguments are not a JSON object");
        }
        json_decref(args);
    }
    emit(s, (parse_event){.kind = PARSE_TOOL_CALL_END, .valid = !why[0], .text = why,
                          .len = strlen(why), .call = (int)s->open});
    kimi_err err = {0};
    if (chat_add_tool_call(&s->message, c->id, c->name, c->args ? c->args : "", c->args_len,
                           &err))
        s->oom = 1;
    c->ended = 1;
    s->open = -1;
}

static void take_text(openai_stream *s, parse_event_kind kind, const char *text, size_t len)
{
    if (!len)
        return;
    close_call(s);
    kimi_err err = {0};
    chat_text *t = kind == PARSE_REASONING_TEXT ? &s->message.reasoning : &s->message.content;
    if (chat_text_append(t, text, len, &err))
        s->oom = 1;
    if (kind == PARSE_REASONING_TEXT)
        s->reasoning_seen = 1;
    else
        s->answer_seen = 1;
    emit(s, (parse_event){.kind = kind, .text = text, .len = len});
}

static const char *string_member(const json_t *obj, const char *key, size_t *len)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        return NULL;
    *len = json_string_length(v);
    return json_string_value(v);
}

static char *dup_text(const char *s, size_t len)
{
    char *d = malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = 0;
    }
    return d;
}

static call_state *begin_call(openai_stream *s, long server_index, const char *id, size_t id_len,
                              const char *name, size_t name_len)
{
    close_call(s);
    if (array_reserve(&s->calls, &s->cap_calls, s->n_calls + 1, sizeof *s->calls)) {
        s->oom = 1;
        return NULL;
    }
    call_state *c = &s->calls[s->n_calls];
    *c = (call_state){.server_index = server_index};
    int call = (int)s->n_calls;
    c->name = name ? dup_text(name, name_len) : NULL;
    if (!name && id)
        c->name = chat_tool_name_from_id(id);
    if (!c->name) {
        c->name = dup_text("", 0);
        if (!c->name) {
            s->oom = 1;
            return NULL;
        }
    }
    if (id) {
        c->id = dup_text(id, id_len);
    } else if (asprintf(&c->id, "functions.%s:%d", c->name, call) < 0) {
        c->id = NULL;
    }
    if (!c->id) {
        free(c->name);
        s->oom = 1;
        return NULL;
    }
    s->n_calls++;
    s->open = call;
    s->answer_seen = 1;
    emit(s, (parse_event){.kind = PARSE_TOOL_CALL_BEGIN, .call = call});
    emit(s, (parse_event){.kind = PARSE_TOOL_CALL_ID, .text = c->id, .len = strlen(c->id),
                          .name = c->name, .call = call});
    if (!id) {
        char shown[200];
        utf8_one_line(c->id, strlen(c->id), shown, sizeof shown);
        note(s, "the server sent no id for tool call %d; it is called %s here", call, shown);
    }
    return c;
}

static void take_tool_call(openai_stream *s, const json_t *tc)
{
    if (!json_is_object(tc)) {
        note(s, "a tool_calls entry that is not an object, ignored");
        return;
    }
    const json_t *jindex = json_object_get(tc, "index");
    const json_t *function = json_object_get(tc, "function");
    size_t id_len = 0, name_len = 0, args_len = 0;
    const char *id = string_member(tc, "id", &id_len);
    const char *name = json_is_object(function) ? string_member(function, "name", &name_len) : NULL;
    const char *args = json_is_object(function) ? string_member(function, "arguments", &args_len) : NULL;
    if (id && !id_len)
        id = NULL;
    if (name && !name_len)
        name = NULL;
    call_state *c = NULL;
    long index;
    if (json_is_integer(jindex)) {
        index = (long)json_integer_value(jindex);
        for (size_t i = 0; i < s->n_calls; i++)
            if (s->calls[i].server_index == index)
                c = &s->calls[i];
    } else if (!id && s->open >= 0) {
        c = &s->calls[s->open];     /* no index: a piece of the open call */
        index = c->server_index;
    } else {
        index = (long)s->n_calls;
    }
    if (!c) {
        c = begin_call(s, index, id, id_len, name, name_len);
        if (!c)
            return;
    } else if (c->ended) {
        if (args && args_len) {
            char prefix[160];
            snprintf(prefix, sizeof prefix,
                     "arguments for tool call %d came after it was closed: ", (int)(c - s->calls));
            note_quoting(s, prefix, args, args_len);
        }
        return;
    } else if (id && (strlen(c->id) != id_len || memcmp(c->id, id, id_len))) {
        note(s, "tool call %d changed its id midway; the first one is kept", (int)(c - s->calls));
    }
    if (args && args_len) {
        if (text_append(&c->args, &c->args_len, &c->args_cap, args, args_len)) {
            s->oom = 1;
            return;
        }
        emit(s, (parse_event){.kind = PARSE_TOOL_CALL_ARGS, .text = args, .len = args_len,
                              .call = (int)(c - s->calls)});
    }
}

static int usage_int(const json_t *obj, const char *key, int *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0x7fffffff)
        return 0;
    *out = (int)json_integer_value(v);
    return 1;
}

static void take_usage(openai_stream *s, const json_t *usage)
{
    if (!json_is_object(usage))
        return;
    usage_int(usage, "prompt_tokens", &s->usage.prompt_tokens);
    usage_int(usage, "completion_tokens", &s->usage.completion_tokens);
    const json_t *details = json_object_get(usage, "prompt_tokens_details");
    if (!(json_is_object(details) && usage_int(details, "cached_tokens", &s->usage.cached_tokens)))
        usage_int(usage, "cached_tokens", &s->usage.cached_tokens);
}

static void take_finish(openai_stream *s, const char *reason)
{
    s->has_finish = 1;
    if (!strcmp(reason, "stop") || !strcmp(reason, "tool_calls") ||
        !strcmp(reason, "function_call")) {
        s->finish_stop = PARSE_STOP_END_OF_TURN;
    } else if (!strcmp(reason, "length")) {
        s->finish_stop = s->reasoning_seen && !s->answer_seen
                             ? PARSE_STOP_MAX_TOKENS_WHILE_THINKING : PARSE_STOP_MAX_TOKENS;
    } else if (!strcmp(reason, "abort")) {
        s->finish_stop = PARSE_STOP_ERROR;
        snprintf(s->error, sizeof s->error, "the server aborted the answer (finish_reason \"abort\")");
    } else {
        s->finish_stop = PARSE_STOP_END_OF_TURN;
        char text[120];
        utf8_one_line(reason, strlen(reason), text, sizeof text);
        note(s, "the server ended the answer with finish_reason \"%s\"", text);
    }
}

/* The message of an error object (a stream's chunk) or of an error reply (with_detail: FastAPI's
 * "detail" too); 1 when j is one. */
static int error_from_json(const json_t *j, int with_detail, char *out, size_t cap)
{
    const json_t *e = json_object_get(j, "error");
    const json_t *object = json_object_get(j, "object");
    const json_t *msg = NULL;
    if (json_is_object(e)) {
        msg = json_object_get(e, "message");
        if (!json_is_string(msg))
            msg = json_object_get(e, "type");
    } else if (json_is_string(e)) {
        msg = e;
    } else if (json_is_string(object) && !strcmp(json_string_value(object), "error")) {
        msg = json_object_get(j, "message");
        if (!json_is_string(msg))
            msg = json_object_get(j, "type");
    } else if (with_detail) {
        const json_t *detail = json_object_get(j, "detail");
        if (json_is_array(detail))
            detail = json_object_get(json_array_get(detail, 0), "msg");
        if (!json_is_string(detail))
            return 0;
        msg = detail;
    } else {
        return 0;
    }
    if (json_is_string(msg) && json_string_length(msg)) {
        utf8_one_line(json_string_value(msg), json_string_length(msg), out, cap);
    } else {
        char *dump = json_dumps(j, JSON_COMPACT);
        utf8_one_line(dump ? dump : "", dump ? strlen(dump) : 0, out, cap);
        free(dump);
    }
    return 1;
}

/* \uD800-\uDFFF escapes that are not a proper pair become \ufffd, in place (same length). */
static void fix_lone_surrogates(char *t, size_t n)
{
    int in_string = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '"') {
            in_string = !in_string;
        } else if (in_string && t[i] == '\\' && i + 1 < n) {
            if (t[i + 1] != 'u' || i + 6 > n) {
                i++;
                continue;
            }
            unsigned v;
            char hex[5] = {t[i + 2], t[i + 3], t[i + 4], t[i + 5], 0};
            if (strspn(hex, "0123456789abcdefABCDEF") != 4) {
                i++;
                continue;
            }
            v = (unsigned)strtoul(hex, NULL, 16);
            if (v >= 0xD800 && v <= 0xDBFF && i + 12 <= n && t[i + 6] == '\\' && t[i + 7] == 'u') {
                char lo[5] = {t[i + 8], t[i + 9], t[i + 10], t[i + 11], 0};
                unsigned w = strspn(lo, "0123456789abcdefABCDEF") == 4
                                 ? (unsigned)strtoul(lo, NULL, 16) : 0;
                if (w >= 0xDC00 && w <= 0xDFFF) {
                    i += 11;
                    continue;
                }
            }
            if (v >= 0xD800 && v <= 0xDFFF)
                memcpy(t + i + 2, "fffd", 4);
            i += 5;
        }
    }
}

/* Parse a chunk; text a strict parser refuses for ill-formed UTF-8 or a lone surrogate escape
 * is read with U+FFFD in their place. */
static json_t *load_chunk(const char *data, size_t len, json_error_t *jerr)
{
    json_t *j = json_loadb(data, len, JSON_ALLOW_NUL, jerr);
    if (j || len > SIZE_MAX / 3)
        return j;
    char *fixed = malloc(3 * len + 1);
    if (!fixed)
        return NULL;
    size_t n = utf8_replace_ill_formed((const uint8_t *)data, len, (uint8_t *)fixed);
    fix_lone_surrogates(fixed, n);
    json_error_t again;
    j = json_loadb(fixed, n, JSON_ALLOW_NUL, &again);
    free(fixed);
    return j;
}

static void take_choice(openai_stream *s, const json_t *choice)
{
    take_usage(s, json_object_get(choice, "usage"));
    const json_t *delta = json_object_get(choice, "delta");
    if (json_is_object(delta)) {
        size_t len = 0;
        const char *text = string_member(delta, "reasoning_content", &len);
        if (!text || !len)
            text = string_member(delta, "reasoning", &len);
        int carried = 0;
        if (text && len) {
            take_text(s, PARSE_REASONING_TEXT, text, len);
            carried = 1;
        }
        text = string_member(delta, "content", &len);
        if (text && len) {
            take_text(s, PARSE_CONTENT_TEXT, text, len);
            carried = 1;
        }
        const json_t *calls = json_object_get(delta, "tool_calls");
        if (json_is_array(calls) && json_array_size(calls)) {
            size_t i;
            const json_t *tc;
            json_array_foreach(calls, i, tc) take_tool_call(s, tc);
            carried = 1;
        }
        s->text_chunks += carried;
    } else if (json_is_object(json_object_get(choice, "message"))) {
        note(s, "the server sent a whole message instead of a stream; it is not shown");
    }
    const json_t *finish = json_object_get(choice, "finish_reason");
    if (json_is_string(finish)) {
        close_call(s);
        take_finish(s, json_string_value(finish));
    }
}

int openai_stream_data(openai_stream *s, const char *data, size_t len, kimi_err *err)
{
    if (s->done || s->stopped || s->error[0])
        return 0;
    size_t skip = 0;
    while (skip < len && (data[skip] == ' ' || data[skip] == '\t'))
        skip++;
    if (len - skip >= 6 && !memcmp(data + skip, "[DONE]", 6)) {
        s->done = 1;
        return 0;
    }
    json_error_t jerr;
    json_t *j = load_chunk(data, len, &jerr);
    if (!json_is_object(j)) {
        char excerpt[NOTE_EXCERPT_MAX];
        utf8_one_line(data, len, excerpt, sizeof excerpt);
        strbuf b = {0};
        strbuf_str(&b, j ? "the server sent a chunk that is not a JSON object: "
                         : "the server sent a chunk that is not JSON: ");
        strbuf_str(&b, excerpt);
        char *line = strbuf_take(&b);
        if (line)
            emit(s, (parse_event){.kind = PARSE_NOTE, .text = line, .len = strlen(line)});
        else
            s->oom = 1;
        free(line);
    } else if (error_from_json(j, 0, s->error, sizeof s->error)) {
        if (!s->error[0])
            snprintf(s->error, sizeof s->error, "(no message)");
    } else {
        take_usage(s, json_object_get(j, "usage"));
        const json_t *choices = json_object_get(j, "choices");
        size_t i;
        const json_t *choice;
        if (json_is_array(choices)) {
            json_array_foreach(choices, i, choice) {
                const json_t *index = json_object_get(choice, "index");
                if (!json_is_object(choice))
                    continue;
                if (index && !(json_is_integer(index) && json_integer_value(index) == 0)) {
                    if (!s->noted_choices++)
                        note(s, "the server sent more than one choice; only the first is shown");
                    continue;
                }
                take_choice(s, choice);
            }
        }
    }
    json_decref(j);
    if (s->oom)
        return kimi_fail(err, KIMI_ERR_NOMEM, "server stream: out of memory");
    return 0;
}

int openai_stream_finish(openai_stream *s, parse_stop_reason reason, kimi_err *err)
{
    if (s->stopped)
        return 0;
    close_call(s);
    s->stopped = 1;
    emit(s, (parse_event){.kind = PARSE_STOP, .stop = reason});
    if (s->oom)
        return kimi_fail(err, KIMI_ERR_NOMEM, "server stream: out of memory");
    return 0;
}

void openai_error_message(const char *body, size_t len, char *out, size_t cap)
{
    out[0] = 0;
    json_error_t jerr;
    json_t *j = json_loadb(body, len, 0, &jerr);
    if (json_is_object(j) && error_from_json(j, 1, out, cap)) {
        json_decref(j);
        return;
    }
    json_decref(j);
    size_t skip = 0;
    while (skip < len && (body[skip] == ' ' || body[skip] == '\r' || body[skip] == '\n' || body[skip] == '\t'))
        skip++;
    if (skip == len || body[skip] == '<' || body[skip] == '{' || body[skip] == '[')
        return;     /* HTML pages and JSON without a message say nothing useful in one line */
    const char *end = memchr(body + skip, '\n', len - skip);
    size_t n = end ? (size_t)(end - body - skip) : len - skip;
    utf8_one_line(body + skip, n < 300 ? n : 300, out, cap);
}
