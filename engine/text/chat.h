/* chat: the conversation model (messages with reasoning and tool calls, their OpenAI-style JSON
 * form) and its rendering into Kimi-K2.5 prompt token ids as the checkpoint's chat template does. */
#ifndef KIMI_CHAT_H
#define KIMI_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/base/error.h"
#include "engine/text/tokenizer.h"

typedef enum {
    CHAT_ROLE_SYSTEM,
    CHAT_ROLE_USER,
    CHAT_ROLE_ASSISTANT,
    CHAT_ROLE_TOOL,
    CHAT_ROLE_OTHER,       /* any other role string: rendered like system, under its own name */
} chat_role;

/* Text that may hold NUL bytes (the model can emit byte 0, a user can paste it): s[len] is
 * always 0, so it also reads as a C string up to its first NUL; s == NULL when absent. */
typedef struct {
    char *s;               /* [len + 1], owned */
    size_t len;
    size_t cap;            /* bytes allocated at s when chat_text_append grew it; 0 = len + 1 */
} chat_text;

typedef struct {
    char *id;              /* "functions.get_weather:0", sent back as the tool message's tool_call_id */
    char *name;            /* "get_weather" */
    chat_text arguments;   /* the JSON text of the arguments, exactly as rendered */
} chat_tool_call;

/* Every string is owned (malloc'ed) and NULL when absent. */
typedef struct {
    chat_role role;
    char *other_role;      /* the role as written, for CHAT_ROLE_OTHER only */
    char *name;            /* replaces the role in the message header when set */
    chat_text content;
    chat_text reasoning;   /* reasoning_content of an assistant message */
    chat_tool_call *tool_calls;  /* [n_tool_calls] */
    int n_tool_calls;
    char *tool_call_id;    /* for CHAT_ROLE_TOOL: the id of the call this message answers */
} chat_message;

typedef struct {
    chat_message *messages;  /* [n_messages] */
    int n_messages;
    int cap_messages;
} chat_conversation;

void chat_conversation_init(chat_conversation *c);
void chat_conversation_free(chat_conversation *c);
/* Drop messages n.. (undo, retry). */
void chat_conversation_truncate(chat_conversation *c, int n);

/* Append a message of role with content[0..content_len) (content may be NULL: absent); returns
 * it, or NULL with err set. The pointer stays valid until the next append. */
chat_message *chat_append(chat_conversation *c, chat_role role, const char *content,
                          size_t content_len, kimi_err *err);
/* Append a deep copy of m. */
int chat_append_copy(chat_conversation *c, const chat_message *m, kimi_err *err);

/* Replace an owned string field of a message (text may be NULL). */
int chat_set_text(char **field, const char *text, kimi_err *err);
/* Replace t with a copy of s[0..len) (s NULL: absent), or append s[0..len) to it. */
int chat_text_set(chat_text *t, const char *s, size_t len, kimi_err *err);
int chat_text_append(chat_text *t, const char *s, size_t len, kimi_err *err);
void chat_text_free(chat_text *t);
int chat_add_tool_call(chat_message *m, const char *id, const char *name, const char *arguments,
                       size_t arguments_len, kimi_err *err);
void chat_message_free(chat_message *m);

/* The function a tool-call id names: "functions.get_weather:0" -> "get_weather" (the part
 * between the last '.' before the first ':' and that ':', so arguments the model ran into the
 * id do not change it); "" for a bare counter id ("0"). Malloc'ed; NULL when out of memory. */
char *chat_tool_name_from_id(const char *id);

/* "system", "user", "assistant", "tool" or the other role's text. */
const char *chat_role_text(const chat_message *m);

/* OpenAI-style JSON: role, content (string, null or a list of {"type":"text","text"} parts),
 * name, reasoning_content, tool_calls [{id, type, function {name, arguments}}], tool_call_id.
 * Arguments given as a JSON value instead of a string are kept as the template would print
 * them (Python's json.dumps). where names the message in errors ("messages[2]"). */
int chat_message_from_json(chat_message *m, const json_t *obj, const char *where, kimi_err *err);
json_t *chat_message_to_json(const chat_message *m);
int chat_conversation_from_json(chat_conversation *c, const json_t *messages, kimi_err *err);
json_t *chat_conversation_to_json(const chat_conversation *c);

typedef struct {
    const json_t *tools;       /* OpenAI-style [{type:function, function{name, description,
                                  parameters}}], or NULL */
    int thinking;              /* 0: every assistant message and the prompt get <think></think> */
    int add_generation_prompt; /* end with the assistant header and <think> (or <think></think>) */
} chat_render_options;

typedef struct {
    char *text;            /* the template's string: specials spelled out, NUL-terminated */
    size_t text_len;
    int32_t *ids;          /* [n_ids]; NULL when rendered without a tokenizer */
    size_t n_ids;
    char tools_note[256];  /* why the tools were declared as JSON rather than TypeScript, or "" */
} chat_rendering;

/* A render request as kimi-probe render reads it and chat_cases.jsonl holds it: {"messages",
 * "tools", "thinking", "add_generation_prompt"}, the last two true when absent or null.
 * opt->tools points into req. */
int chat_request_from_json(const json_t *req, chat_conversation *c, chat_render_options *opt,
                           kimi_err *err);

/* Render the conversation. Special tokens come only from the template structure; message text,
 * reasoning, tool arguments and tool output are encoded as plain text. tok may be NULL: then
 * only the text is produced. */
int chat_render(const tokenizer *tok, const chat_conversation *c, const chat_render_options *opt,
                chat_rendering *out, kimi_err *err);
void chat_rendering_free(chat_rendering *r);

#endif
