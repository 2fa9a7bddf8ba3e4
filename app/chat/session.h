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

#include "engine/text/chat.h"
#include "engine/base/error.h"

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
    int summary;                /* a user message /compact wrote: the model's summary of the
                                   messages before it, which the model no longer sees */
} session_message_meta;

typedef struct {
    float temperature;
    float top_p;
    int top_k;                  /* 0 = off */
    int max_tokens;             /* per answer; 0 = until the context is full */
    uint64_t seed;              /* in the file as a decimal string ("18446744073709551615"):
                                   exact in every JSON reader (JSON numbers above 2^53 are not,
                                   and jansson's integers stop at 2^63 - 1) */
    int thinking;               /* 1 = on */
} session_settings;

typedef struct {
    chat_conversation conv;     /* the messages; a system prompt is messages[0] with role system */
    session_message_meta *meta; /* [conv.n_messages] */
    int cap_meta;
    session_settings settings;
    char *model;                /* "Kimi-K2.5-NVFP4", "demo model", or the server's model name */
    char *backend;              /* "cpu TP=1", "cuda TP=8", "server http://host:8000" */
    time_t created;             /* when the session began (the caller sets it); 0: the JSON form
                                   writes the time of writing */
    char *path;                 /* where autosave writes; NULL until the first save. session_load
                                   sets it only on success, so a file that did not load is never
                                   autosaved over */
    int has_settings;           /* the settings came from a loaded file's meta.settings (an OpenAI
                                   file without them leaves session_init's defaults) */
} session;

/* An empty session with Moonshot's defaults (temperature 1.0, top_p 0.95, thinking on). */
void session_init(session *s);
void session_free(session *s);

/* Append deep copies of m and meta (meta may be NULL: all unknown). */
int session_append(session *s, const chat_message *m, const session_message_meta *meta,
                   kimi_err *err);
/* Where the conversation the model sees begins: the last user message marked summary
 * (/compact), 0 when there is none. The messages before it stay in the session, its file and its
 * exports; the model sees a leading system prompt, then messages from here on. */
int session_context_start(const session *s);
/* Drop messages n.. (undo, retry, new). */
void session_truncate(session *s, int n);
void session_meta_free(session_message_meta *m);

/* {"meta": {"format": "kimi-chat-session", "version", "model", "backend", "created",
 * "settings": {...}, "messages": [per-message meta or null]}, "messages": [OpenAI messages]}.
 * New reference, NULL when out of memory. */
json_t *session_to_json(const session *s);
/* From that form, or from any {"messages": [...]} / bare [...] of OpenAI messages (meta is
 * optional). where names the source in errors ("chat.json"). A newer version is an error.
 * Errors (KIMI_ERR_INPUT) read "WHERE: JSON.PATH: problem". *s is an output (the caller frees
 * any session it held first): filled on success, left as after session_init on failure. */
int session_from_json(session *s, const json_t *root, const char *where, kimi_err *err);

/* The text session_save writes: session_to_json pretty-printed with an indent of 2, lists of
 * token ids kept on few lines, numbers in their shortest exact form. Malloc'ed, *len bytes
 * plus a NUL. Ill-formed UTF-8 in a text becomes U+FFFD (the tokenizer reads it so anyway, so
 * the rendered ids do not change). */
int session_to_text(const session *s, char **text, size_t *len, kimi_err *err);
/* Parse data[0..size) (JSON text, \u0000 allowed) like session_from_json; syntax errors read
 * "WHERE:LINE:COLUMN: invalid JSON: ...". */
int session_parse(session *s, const char *data, size_t size, const char *where, kimi_err *err);

/* Write the JSON form to path atomically (temp file beside it, fsync, rename, fsync of the
 * folder): a crash leaves either the old or the new file, never a torn one. The file's mode is
 * 0600. The folder must exist (the caller makes it). The temp file is ".NAME.PID-N.tmp", locked
 * (flock) while it is written; a failed save removes its own, and each save removes those no
 * process holds (a writer killed mid-save), so at most one per killed writer lingers until the
 * next save. A folder that cannot be synced after the rename is an error although the new file
 * is in place (its survival of a power cut is not sure). */
int session_save(const session *s, const char *path, kimi_err *err);
/* Load path; a corrupt, truncated or newer-version file is one error naming the file
 * (KIMI_ERR_INPUT; KIMI_ERR_IO when it cannot be read), and *s is left empty with path NULL.
 * On success s->path is path. *s is an output, as in session_from_json. */
int session_load(session *s, const char *path, kimi_err *err);
/* session_load for a conversation to continue (--load, /load): a file with no messages (`[]`,
 * a session emptied by /undo) is an error, "PATH: no messages to load (an empty
 * conversation)" (KIMI_ERR_INPUT), since loading it would replace the conversation with
 * nothing and say so only as "0 messages". */
int session_load_conversation(session *s, const char *path, kimi_err *err);

/* An advisory lock on a session file, held by one kimi-chat for as long as it continues that
 * session, so that two processes never write one file in turn (each would drop the other's
 * turns): flock(2) on ".NAME.lock" beside it, which holds the holder's pid for the message.
 * The system drops the lock when the holder exits, however it ends; flock works across PID
 * namespaces (containers) sharing the folder. */
typedef struct {
    int fd;                     /* the locked lock file; -1 when none is held */
    char *lock_path;
} session_lock;

#define SESSION_LOCK_NONE ((session_lock){.fd = -1})

/* Lock the session file path. 0 when this process holds it now; KIMI_ERR_STATE when another
 * process does (*holder: its pid as it wrote it, 0 when unknown); KIMI_ERR_IO when the lock
 * file cannot be made (a read-only folder). *l must be SESSION_LOCK_NONE or released. */
int session_lock_take(session_lock *l, const char *path, long *holder, kimi_err *err);
/* Let go of the lock (the lock file is removed); nothing when none is held. */
void session_lock_release(session_lock *l);
/* Remove the session file path (the /sessions picker's d): under its lock, so a session another
 * kimi-chat continues is never removed under it (KIMI_ERR_STATE, "PATH: open in another kimi-chat
 * (pid N); not deleted"). Only that file goes (a link, not what it points to); its lock file is
 * gone again afterwards. */
int session_delete(const char *path, kimi_err *err);

/* The Markdown export for people (docs/UI.md): the text, malloc'ed, *len bytes plus a NUL. */
int session_to_markdown(const session *s, char **text, size_t *len, kimi_err *err);
/* The same, written atomically to path as session_save writes. */
int session_export_markdown(const session *s, const char *path, kimi_err *err);

typedef struct {
    char *path;
    time_t modified;
    int n_messages;
    char *title;                /* the first user message, cut to one line of at most 60 bytes
                                   (at a character boundary; "" when there is none) */
    int unreadable;             /* the file did not load: title is "(unreadable: <why>)" */
} session_entry;

/* The session files in dir (its *.json files, hidden ones excepted), newest first by
 * modification time (then by name, later first); files that do not parse are listed with title
 * "(unreadable: <why>)". A missing dir is an empty list. */
int session_list(const char *dir, session_entry **out, int *n_out, kimi_err *err);
void session_list_free(session_entry *entries, int n);
/* Only the names of those files, without ".json", in name order, read from the folder alone
 * (no file is opened: Tab completion asks on every press). A missing dir is an empty list. */
int session_list_names(const char *dir, char ***out, int *n_out, kimi_err *err);
void session_names_free(char **names, int n);

/* A new file name in dir for a session started at t: dir/KIND2026-12-01T11-40-03.json (UTC, as
 * meta.created; with -2, -3, ... when taken; kind "" for a chat, "prompt-" for a --prompt
 * run, "script-" for a --script run, so that /sessions and ls tell one-shot runs apart). The name is reserved: the file is created empty
 * (0600) with O_EXCL, so another process asking for the same second gets the next name; the
 * caller saves over it right away (or removes it when that fails). Malloc'ed; NULL when out of
 * memory. */
char *session_new_path(const char *dir, const char *kind, time_t t);

#endif
