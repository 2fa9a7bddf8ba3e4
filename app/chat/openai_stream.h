/* openai_stream: the reply of an OpenAI-compatible server to a streamed chat-completions
 * request (the data of its server-sent events: JSON chunks, [DONE], error objects, as vLLM,
 * SGLang and Moonshot's API write them) turned into the stream parser's events
 * (engine/text/parse.h), and the one-line message of an error reply. */
#ifndef KIMI_APP_OPENAI_STREAM_H
#define KIMI_APP_OPENAI_STREAM_H

#include <stddef.h>

#include "engine/text/chat.h"
#include "engine/base/error.h"
#include "engine/text/parse.h"

typedef struct {
    int prompt_tokens;      /* usage.prompt_tokens; -1 when not reported */
    int completion_tokens;  /* usage.completion_tokens; -1 when not reported */
    int cached_tokens;      /* usage.prompt_tokens_details.cached_tokens (vLLM, SGLang) or
                               usage.cached_tokens (Moonshot); -1 when not reported */
} openai_usage;

typedef struct openai_stream openai_stream;

/* Events go to on_event(user, ev) as the chunks come, with the guarantees engine/text/parse.h
 * gives: whole UTF-8 text, one tool call open at a time (BEGIN, ID, ARGS..., END), one STOP,
 * last (from openai_stream_finish). */
int openai_stream_create(openai_stream **out, parse_event_fn on_event, void *user,
                         kimi_err *err);
void openai_stream_free(openai_stream *s);

/* One event's data: a chunk {"choices":[{"delta":{...},"finish_reason"}], "usage"}, "[DONE]",
 * or an error object ({"error":{"message"}} or {"object":"error","message"}). Per chunk:
 * delta.reasoning_content or delta.reasoning (vLLM) -> PARSE_REASONING_TEXT (reasoning_content
 * wins when a server sends both), delta.content -> PARSE_CONTENT_TEXT, delta.tool_calls by
 * index: the first piece of an index opens a call (BEGIN, then ID with the id kept verbatim and
 * function.name), argument pieces -> ARGS, and a new index, text or the finish closes it (END,
 * valid when the arguments are one JSON object). Usage is read at the top level and in
 * choices[0] (Moonshot). What cannot be read becomes a PARSE_NOTE that keeps its text; data
 * after [DONE], an error or the finish's STOP is ignored. Fails only when out of memory. */
int openai_stream_data(openai_stream *s, const char *data, size_t len, kimi_err *err);

int openai_stream_done(const openai_stream *s);          /* "[DONE]" came */
int openai_stream_has_finish(const openai_stream *s);    /* a finish_reason came */
/* The server's error object mid-stream, in one line ("" when none came). */
const char *openai_stream_error(const openai_stream *s);
const openai_usage *openai_stream_usage(const openai_stream *s);
/* Chunks that carried generated text or call pieces: about one a token on vLLM and SGLang. */
int openai_stream_text_chunks(const openai_stream *s);

/* The stop the finish_reason asks for: "stop" and "tool_calls" -> END_OF_TURN, "length" ->
 * MAX_TOKENS, or MAX_TOKENS_WHILE_THINKING when reasoning came and no answer or call yet;
 * "abort" -> ERROR; others -> END_OF_TURN (a note names them). ERROR when no finish came. */
parse_stop_reason openai_stream_finish_stop(const openai_stream *s);

/* End the turn: close the open call (its arguments judged as they are) and emit PARSE_STOP
 * with reason. Nothing happens when already stopped. Fails only when out of memory. */
int openai_stream_finish(openai_stream *s, parse_stop_reason reason, kimi_err *err);
int openai_stream_stopped(const openai_stream *s);

/* The assistant message the events describe: reasoning, content (NULL while empty) and the
 * tool calls (id, name, arguments as sent). Owned by the stream. */
const chat_message *openai_stream_message(const openai_stream *s);

/* The message an error reply's body carries, in one line: {"error":{"message"}},
 * {"error":"..."}, {"message"} (vLLM and SGLang's {"object":"error"}), {"detail":"..."} or
 * FastAPI's {"detail":[{"msg"}]}; else the body's first line when it is short plain text.
 * Writes "" when there is nothing to show. out has cap bytes (cap >= 4). */
void openai_error_message(const char *body, size_t len, char *out, size_t cap);

#endif
