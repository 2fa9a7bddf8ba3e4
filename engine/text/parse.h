/* parse: the stream parser that turns the model's output token ids, one at a time, into events
 * (reasoning text, answer text, tool calls, stop) per docs/CHAT_FORMAT.md, tolerating
 * malformed output: it reports it as notes and never loses text. */
#ifndef KIMI_PARSE_H
#define KIMI_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/text/chat.h"
#include "engine/base/error.h"
#include "engine/text/tokenizer.h"

typedef enum {
    PARSE_REASONING_TEXT,   /* text: a piece of reasoning */
    PARSE_CONTENT_TEXT,     /* text: a piece of the answer */
    PARSE_TOOL_CALL_BEGIN,  /* call: index of the new call in this turn (0, 1, ...) */
    PARSE_TOOL_CALL_ID,     /* text: the call id as written; name: the function it names */
    PARSE_TOOL_CALL_ARGS,   /* text: a piece of the argument JSON */
    PARSE_TOOL_CALL_END,    /* valid: the arguments are one JSON object and the call was
                               closed; otherwise text says what is wrong, in one line */
    PARSE_NOTE,             /* text: malformed structure, in one line (the text it concerns
                               is never dropped: it is in the note or in a text event) */
    PARSE_STOP,             /* stop: why the turn ended; the last event of a turn */
} parse_event_kind;

typedef enum {
    PARSE_STOP_END_OF_TURN,              /* <|im_end|> */
    PARSE_STOP_EOS,                      /* [EOS] */
    PARSE_STOP_MAX_TOKENS,
    PARSE_STOP_MAX_TOKENS_WHILE_THINKING,  /* hit max tokens inside the reasoning: no answer */
    PARSE_STOP_CANCELLED,
    PARSE_STOP_CONTEXT_FULL,
    PARSE_STOP_ERROR,                    /* the engine failed mid-turn */
} parse_stop_reason;

typedef struct {
    parse_event_kind kind;
    const char *text;       /* valid UTF-8, NUL-terminated, len bytes; "" when unused. Valid
                               only during the callback */
    size_t len;
    const char *name;       /* PARSE_TOOL_CALL_ID: "get_weather" ("" for a bare counter id) */
    int call;               /* PARSE_TOOL_CALL_*: index of the call */
    int valid;              /* PARSE_TOOL_CALL_END */
    parse_stop_reason stop; /* PARSE_STOP */
} parse_event;

typedef void (*parse_event_fn)(void *user, const parse_event *ev);

typedef enum {
    PARSE_START_REASONING,  /* the prompt ended with <think> (thinking on) */
    PARSE_START_CONTENT,    /* the prompt ended with <think></think> (thinking off) */
} parse_start;

typedef struct stream_parser stream_parser;

/* Special ids are looked up by name in tok. Events go to on_event(user, ev) as they happen.
 * A <think> as the very first id is swallowed (after a thinking-off prompt it starts the
 * reasoning: the model chose to think). */
int parse_create(stream_parser **out, const tokenizer *tok, parse_start start,
                 parse_event_fn on_event, void *user, kimi_err *err);
void parse_free(stream_parser *p);

/* Feed one generated id. Ids after the stop are ignored. Fails only when out of memory. */
int parse_push(stream_parser *p, int32_t id, kimi_err *err);
int parse_push_ids(stream_parser *p, const int32_t *ids, size_t n, kimi_err *err);

/* The engine stopped for a reason other than a stop token (max tokens, cancel, context full,
 * error): flush held-back text, close what is open, and emit PARSE_STOP. MAX_TOKENS inside the
 * reasoning becomes MAX_TOKENS_WHILE_THINKING. Nothing happens when already stopped. */
int parse_finish(stream_parser *p, parse_stop_reason reason, kimi_err *err);

int parse_stopped(const stream_parser *p);
parse_stop_reason parse_stop(const stream_parser *p);  /* meaningful once stopped */

/* The raw ids of the turn, the stop token included. */
const int32_t *parse_ids(const stream_parser *p, size_t *n_ids);

/* The assistant message assembled so far: reasoning, content (NULL while empty) and the tool
 * calls (name from the id, arguments as written). Owned by the parser. */
const chat_message *parse_message(stream_parser *p);

/* "end of turn", "stopped while thinking (max tokens)", ... for status lines and exports. */
const char *parse_stop_text(parse_stop_reason reason);

#endif
