/* parse: a state machine over the output ids (reasoning, answer, tool-call section, call id,
 * call arguments) that emits events, holds back incomplete UTF-8 and assembles the message. */
#include "engine/text/parse.h"
#include "engine/base/array.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

enum {
    SP_IM_END, SP_EOS, SP_THINK, SP_THINK_END, SP_SECTION_BEGIN, SP_SECTION_END, SP_CALL_BEGIN,
    SP_ARGUMENT_BEGIN, SP_CALL_END, N_SP
};

static const char *const special_names[N_SP] = {
    "<|im_end|>", "[EOS]", "<think>", "</think>", "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
};

typedef enum {
    IN_REASONING, IN_CONTENT, IN_SECTION, IN_CALL_ID, IN_CALL_ARGS, STOPPED
} parse_state;

static const char *const state_names[] = {
    "reasoning", "answer", "tool-call section", "tool-call id", "tool-call arguments", "stopped",
};

typedef struct {
    char *data;     /* [len + 1], NUL-terminated once anything was added */
    size_t len, cap;
} textbuf;

struct stream_parser {
    const tokenizer *tok;
    int32_t special_ids[N_SP];     /* -1 where the vocabulary lacks one */
    parse_event_fn on_event;
    void *user;
    parse_state state;
    parse_stop_reason stop;
    token_stream stream;           /* holds back an incomplete UTF-8 tail */
    char *piece;                   /* [piece_cap] the text one id adds */
    size_t piece_cap;
    int32_t *ids;                  /* [n_ids] the turn's raw ids */
    size_t n_ids, cap_ids;
    textbuf call_id, call_args;    /* the open call */
    textbuf stray;                 /* text inside the section but outside any call */
    textbuf reasoning, content;
    int n_calls;                   /* calls begun this turn */
    chat_message message;
    int oom;
};

static void tb_add(stream_parser *p, textbuf *b, const char *s, size_t n)
{
    if (!p->oom && text_append(&b->data, &b->len, &b->cap, s, n))
        p->oom = 1;
}

static void tb_clear(textbuf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = 0;
}

static void emit(stream_parser *p, parse_event ev)
{
    if (!ev.text) {
        ev.text = "";
        ev.len = 0;
    }
    if (!ev.name)
        ev.name = "";
    p->on_event(p->user, &ev);
}

static void note(stream_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(stream_parser *p, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    emit(p, (parse_event){.kind = PARSE_NOTE, .text = line, .len = len});
}

/* Text goes where the parser is: reasoning, answer, call id, arguments, or stray. */
static void take_text(stream_parser *p, const char *text, size_t len)
{
    if (!len)
        return;
    switch (p->state) {
    case IN_REASONING:
        tb_add(p, &p->reasoning, text, len);
        emit(p, (parse_event){.kind = PARSE_REASONING_TEXT, .text = text, .len = len});
        break;
    case IN_CONTENT:
        tb_add(p, &p->content, text, len);
        emit(p, (parse_event){.kind = PARSE_CONTENT_TEXT, .text = text, .len = len});
        break;
    case IN_SECTION:
        tb_add(p, &p->stray, text, len);
        break;
    case IN_CALL_ID:
        tb_add(p, &p->call_id, text, len);
        break;
    case IN_CALL_ARGS:
        tb_add(p, &p->call_args, text, len);
        emit(p, (parse_event){.kind = PARSE_TOOL_CALL_ARGS, .text = text, .len = len,
                              .call = p->n_calls - 1});
        break;
    case STOPPED:
        break;
    }
}

/* Before the state changes: a held-back incomplete character belongs to the old state. */
static void flush_pending(stream_parser *p)
{
    size_t n = token_stream_flush(&p->stream, p->piece, p->piece_cap);
    take_text(p, p->piece, n);
}

/* Stray text in the section is reported unless it is only whitespace (between calls). */
static void flush_stray(stream_parser *p)
{
    if (strspn(p->stray.data ? p->stray.data : "", " \t\r\n") < p->stray.len) {
        textbuf line = {0};
        static const char prefix[] = "text outside a tool call: ";
        tb_add(p, &line, prefix, sizeof prefix - 1);
        tb_add(p, &line, p->stray.data, p->stray.len);
        if (!p->oom)
            emit(p, (parse_event){.kind = PARSE_NOTE, .text = line.data, .len = line.len});
        free(line.data);
    }
    tb_clear(&p->stray);
}

static void emit_call_id(stream_parser *p)
{
    char *name = chat_tool_name_from_id(p->call_id.data ? p->call_id.data : "");
    if (!name) {
        p->oom = 1;
        return;
    }
    emit(p, (parse_event){.kind = PARSE_TOOL_CALL_ID, .text = p->call_id.data,
                          .len = p->call_id.len, .name = name, .call = p->n_calls - 1});
    free(name);
}

/* Close the open call. problem: why it is unusable, or NULL to judge its arguments. */
static void end_call(stream_parser *p, const char *problem)
{
    if (p->state == IN_CALL_ID) {
        emit_call_id(p);
        if (!problem)
            problem = "no <|tool_call_argument_begin|> in the call";
    }
    char why[300] = "";
    if (problem) {
        snprintf(why, sizeof why, "%s", problem);
    } else {
        json_error_t jerr;
        json_t *args = json_loadb(p->call_args.data ? p->call_args.data : "", p->call_args.len,
                                  JSON_DECODE_ANY, &jerr);
        if (!args)
            snprintf(why, sizeof why, "invalid JSON arguments: %s (at byte %d)", jerr.text,
                     jerr.position);
        else if (!json_is_object(args))
            snprintf(why, sizeof why, "the arguments are not a JSON object");
        json_decref(args);
    }
    emit(p, (parse_event){.kind = PARSE_TOOL_CALL_END, .valid = !why[0], .text = why,
                          .len = strlen(why), .call = p->n_calls - 1});
    char *name = chat_tool_name_from_id(p->call_id.data ? p->call_id.data : "");
    kimi_err err = {0};
    if (!name || chat_add_tool_call(&p->message, p->call_id.data ? p->call_id.data : "", name,
                                    p->call_args.data ? p->call_args.data : "", p->call_args.len, &err))
        p->oom = 1;
    free(name);
    tb_clear(&p->call_id);
    tb_clear(&p->call_args);
    p->state = IN_SECTION;
}

static void begin_call(stream_parser *p)
{
    p->state = IN_CALL_ID;
    emit(p, (parse_event){.kind = PARSE_TOOL_CALL_BEGIN, .call = p->n_calls++});
}

static int in_call(const stream_parser *p)
{
    return p->state == IN_CALL_ID || p->state == IN_CALL_ARGS;
}

/* End the turn. from_token: a stop token ended it (lenient about what is left open); otherwise
 * the engine stopped it and an open call is cut off. */
static void stop_turn(stream_parser *p, parse_stop_reason reason, int from_token)
{
    flush_pending(p);
    flush_stray(p);
    if (p->state == IN_REASONING) {
        if (reason == PARSE_STOP_MAX_TOKENS)
            reason = PARSE_STOP_MAX_TOKENS_WHILE_THINKING;
        else if (from_token)
            note(p, "the turn ended inside the reasoning (no </think>)");
    }
    if (in_call(p)) {
        if (from_token)
            note(p, "tool call %d not closed by <|tool_call_end|>", p->n_calls - 1);
        end_call(p, from_token ? NULL : "cut off before <|tool_call_end|>");
    }
    if (p->state == IN_SECTION && from_token)
        note(p, "tool-call section not closed by <|tool_calls_section_end|>");
    p->state = STOPPED;
    p->stop = reason;
    emit(p, (parse_event){.kind = PARSE_STOP, .stop = reason});
}

static void unexpected(stream_parser *p, const char *token)
{
    note(p, "unexpected %s in the %s, ignored", token, state_names[p->state]);
}

static void on_special(stream_parser *p, int which)
{
    switch (which) {
    case SP_IM_END:
    case SP_EOS:
        stop_turn(p, which == SP_EOS ? PARSE_STOP_EOS : PARSE_STOP_END_OF_TURN, 1);
        return;
    case SP_THINK:
        if (p->n_ids == 1 && (p->state == IN_REASONING || p->state == IN_CONTENT))
            p->state = IN_REASONING;  /* a stray <think> at the very start */
        else
            unexpected(p, special_names[which]);
        return;
    case SP_THINK_END:
        if (p->state == IN_REASONING)
            p->state = IN_CONTENT;
        else
            unexpected(p, special_names[which]);
        return;
    case SP_SECTION_BEGIN:
        if (p->state == IN_REASONING)
            note(p, "tool calls began before </think>: the reasoning ends there");
        if (p->state == IN_REASONING || p->state == IN_CONTENT)
            p->state = IN_SECTION;
        else
            unexpected(p, special_names[which]);
        return;
    case SP_CALL_BEGIN:
        if (in_call(p)) {
            note(p, "tool call %d not closed by <|tool_call_end|>", p->n_calls - 1);
            end_call(p, NULL);
        } else if (p->state != IN_SECTION) {
            note(p, "<|tool_call_begin|> outside a tool-call section (in the %s)",
                 state_names[p->state]);
        }
        begin_call(p);
        return;
    case SP_ARGUMENT_BEGIN:
        if (p->state == IN_CALL_ID) {
            emit_call_id(p);
            p->state = IN_CALL_ARGS;
        } else {
            unexpected(p, special_names[which]);
        }
        return;
    case SP_CALL_END:
        if (in_call(p))
            end_call(p, NULL);
        else
            unexpected(p, special_names[which]);
        return;
    case SP_SECTION_END:
        if (in_call(p)) {
            note(p, "tool call %d not closed by <|tool_call_end|>", p->n_calls - 1);
            end_call(p, NULL);
        }
        if (p->state == IN_SECTION)
            p->state = IN_CONTENT;
        else
            unexpected(p, special_names[which]);
        return;
    }
}

static int record_id(stream_parser *p, int32_t id)
{
    if (array_reserve(&p->ids, &p->cap_ids, p->n_ids + 1, sizeof *p->ids))
        return -1;
    p->ids[p->n_ids++] = id;
    return 0;
}

int parse_push(stream_parser *p, int32_t id, kimi_err *err)
{
    if (p->state == STOPPED)
        return 0;
    if (record_id(p, id))
        return kimi_fail(err, KIMI_ERR_NOMEM, "stream parser: out of memory");
    int which = -1;
    for (int i = 0; i < N_SP && which < 0; i++)
        if (p->special_ids[i] >= 0 && id == p->special_ids[i])
            which = i;
    size_t len;
    const char *bytes = tokenizer_token_bytes(p->tok, id, &len);
    if (which >= 0 || !bytes || tokenizer_is_special(p->tok, id)) {
        flush_pending(p);
        flush_stray(p);
        if (which >= 0)
            on_special(p, which);
        else if (!bytes)
            note(p, "id %d is not in the vocabulary, ignored", (int)id);
        else
            note(p, "unexpected %.*s in the %s, ignored", (int)(len < 64 ? len : 64), bytes,
                 state_names[p->state]);
    } else {
        take_text(p, p->piece, token_stream_push(&p->stream, id, p->piece, p->piece_cap));
    }
    if (p->oom)
        return kimi_fail(err, KIMI_ERR_NOMEM, "stream parser: out of memory");
    return 0;
}

int parse_push_ids(stream_parser *p, const int32_t *ids, size_t n, kimi_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (parse_push(p, ids[i], err))
            return err ? err->code : KIMI_ERR_NOMEM;
    return 0;
}

int parse_finish(stream_parser *p, parse_stop_reason reason, kimi_err *err)
{
    if (p->state == STOPPED)
        return 0;
    stop_turn(p, reason, 0);
    if (p->oom)
        return kimi_fail(err, KIMI_ERR_NOMEM, "stream parser: out of memory");
    return 0;
}

int parse_create(stream_parser **out, const tokenizer *tok, parse_start start,
                 parse_event_fn on_event, void *user, kimi_err *err)
{
    *out = NULL;
    stream_parser *p = calloc(1, sizeof *p);
    if (!p)
        return kimi_fail(err, KIMI_ERR_NOMEM, "stream parser: out of memory");
    p->tok = tok;
    p->on_event = on_event;
    p->user = user;
    p->state = start == PARSE_START_CONTENT ? IN_CONTENT : IN_REASONING;
    p->message.role = CHAT_ROLE_ASSISTANT;
    for (int i = 0; i < N_SP; i++)
        p->special_ids[i] = tokenizer_special_id(tok, special_names[i]);
    token_stream_init(&p->stream, tok);
    p->piece_cap = token_stream_min_cap(tok);
    p->piece = malloc(p->piece_cap);
    if (!p->piece) {
        free(p);
        return kimi_fail(err, KIMI_ERR_NOMEM, "stream parser: out of memory");
    }
    *out = p;
    return 0;
}

void parse_free(stream_parser *p)
{
    if (!p)
        return;
    free(p->piece);
    free(p->ids);
    free(p->call_id.data);
    free(p->call_args.data);
    free(p->stray.data);
    free(p->reasoning.data);
    free(p->content.data);
    p->message.reasoning = p->message.content = (chat_text){0};
    chat_message_free(&p->message);
    free(p);
}

int parse_stopped(const stream_parser *p) { return p->state == STOPPED; }

parse_stop_reason parse_stop(const stream_parser *p) { return p->stop; }

const int32_t *parse_ids(const stream_parser *p, size_t *n_ids)
{
    *n_ids = p->n_ids;
    return p->ids;
}

const chat_message *parse_message(stream_parser *p)
{
    /* the text fields alias the parser's buffers */
    p->message.reasoning = p->reasoning.len ? (chat_text){.s = p->reasoning.data, .len = p->reasoning.len} : (chat_text){0};
    p->message.content = p->content.len ? (chat_text){.s = p->content.data, .len = p->content.len} : (chat_text){0};
    return &p->message;
}

const char *parse_stop_text(parse_stop_reason reason)
{
    switch (reason) {
    case PARSE_STOP_END_OF_TURN: return "end of turn";
    case PARSE_STOP_EOS: return "end of sequence";
    case PARSE_STOP_MAX_TOKENS: return "max tokens";
    case PARSE_STOP_MAX_TOKENS_WHILE_THINKING: return "stopped while thinking (max tokens)";
    case PARSE_STOP_CANCELLED: return "cancelled";
    case PARSE_STOP_CONTEXT_FULL: return "context full";
    case PARSE_STOP_ERROR: return "engine error";
    }
    return "unknown";
}
