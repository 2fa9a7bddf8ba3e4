/* session: one conversation as kimi-chat keeps it (the chat messages plus, per message, the
 * stats, generated ids and tool-run details) and its files: the JSON form (OpenAI chat messages
 * + "meta", docs/UI.md "Transcripts and sessions") that autosave writes atomically and that
 * loads back, the Markdown export, and the sessions folder. */
#ifndef KIMI_APP_SESSION_H
#define KIMI_APP_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "engine/chat.h"
#include "engine/error.h"

#define SESSION_FORMAT_VERSION 1   /* meta.version written; a file with a larger one is refused */

/* What kimi-chat knows of one message beyond its chat fields. All zero / NULL when unknown
 * (a loaded OpenAI file without meta, a user message). */
typedef struct {
    int has_stats;              /* assistant: the fields below up to stop_reason are set */
    int prompt_tokens;          /* tokens of the rendered conversation it answered */
    int reused_tokens;          /* of those, taken from the KV cache (or the server's cache) */
    int generated_tokens;
    double ttft_seconds;        /* submit to first generated token */
    double prefill_tok_s;
    double decode_tok_s;
    double reasoning_seconds;   /* first reasoning token to the end of the reasoning */
    int reasoning_tokens;
    char *stop_reason;          /* "end of turn", "stopped while thinking (max tokens)", ... */
    int32_t *ids;               /* [n_ids] generated ids of an assistant message (stop id
                                   included); NULL for other messages and remote answers */
    size_t n_ids;
    /* tool messages */
    char *tool_state;           /* "done", "denied", "failed", "timeout", "bad arguments",
                                   "unknown tool", "cancelled" */
    int exit_status;            /* when tool_state is "done" */
    double tool_seconds;
} session_message_meta;

typedef struct {
    float temperature;
    float top_p;
    int top_k;                  /* 0 = off */
    int max_tokens;             /* per answer; 0 = until the context is full */
    uint64_t seed;
    int thinking;               /* 1 = on */
} session_settings;

typedef struct {
    chat_conversation conv;     /* the messages; a system prompt is messages[0] with role system */
    session_message_meta *meta; /* [conv.n_messages] */
    int cap_meta;
    session_settings settings;
    char *model;                /* "Kimi-K2.5-NVFP4", "demo model", or the server's model name */
    char *backend;              /* "cpu TP=1", "cuda TP=8", "server http://host:8000" */
    time_t created;             /* first save */
    char *path;                 /* where autosave writes; NULL until the first save */
} session;

void session_init(session *s);
void session_free(session *s);

/* Append deep copies of m and meta (meta may be NULL: all unknown). */
int session_append(session *s, const chat_message *m, const session_message_meta *meta,
                   kimi_err *err);
/* Drop messages n.. (undo, retry, new). */
void session_truncate(session *s, int n);
void session_meta_free(session_message_meta *m);

/* {"meta": {"format": "kimi-chat-session", "version", "model", "backend", "created",
 * "settings": {...}, "messages": [per-message meta or null]}, "messages": [OpenAI messages]}.
 * New reference, NULL when out of memory. */
json_t *session_to_json(const session *s);
/* From that form, or from any {"messages": [...]} / bare [...] of OpenAI messages (meta is
 * optional). where names the source in errors ("chat.json"). A newer version is an error. */
int session_from_json(session *s, const json_t *root, const char *where, kimi_err *err);

/* Write the JSON form to path atomically (temp file beside it, fsync, rename, fsync of the
 * folder): a crash leaves either the old or the new file, never a torn one. */
int session_save(const session *s, const char *path, kimi_err *err);
/* Load path; a corrupt, truncated or newer-version file is one error naming the file, and *s
 * is left empty. */
int session_load(session *s, const char *path, kimi_err *err);

/* The Markdown export for people (docs/UI.md), written atomically to path. */
int session_export_markdown(const session *s, const char *path, kimi_err *err);

typedef struct {
    char *path;
    time_t modified;
    int n_messages;
    char *title;                /* the first user message, cut to one line of at most 60 bytes */
} session_entry;

/* The session files in dir, newest first; files that do not parse are listed with title
 * "(unreadable: <why>)". A missing dir is an empty list. */
int session_list(const char *dir, session_entry **out, int *n_out, kimi_err *err);
void session_list_free(session_entry *entries, int n);

/* A new file name in dir for a session started at t: dir/2026-12-01T11-40-03.json (with -2,
 * -3, ... when taken). Malloc'ed. */
char *session_new_path(const char *dir, time_t t);

#endif
