/* app: the chat core every mode shares (full screen, plain REPL, script, one-shot prompt): the
 * session, the turn loop (render, generate, stream, tool calls with approval, up to 8 tool
 * rounds, autosave), the slash commands, and the front-end interface it reports through. It
 * never blocks: the front end polls app_poll_fds and calls app_dispatch when one is readable.
 * No curses here. */
#ifndef KIMI_APP_APP_H
#define KIMI_APP_APP_H

#include <poll.h>
#include <stddef.h>

#include "app/chat/generator.h"
#include "app/chat/options.h"
#include "app/chat/session.h"
#include "app/chat/tools.h"
#include "engine/base/error.h"
#include "engine/text/parse.h"

#define APP_MAX_TOOL_ROUNDS 8       /* generations after tool results within one user turn */

/* /compact [INSTRUCTIONS]: the model, reasoning off and without tools, is shown the
 * conversation it sees up to the user's last message followed by this request (and "Also:
 * INSTRUCTIONS"); its answer, at most APP_COMPACT_MAX_TOKENS (fewer when the context has less
 * room left after that prompt: the cap shrinks, the request is not refused), goes into the session as a user
 * message marked summary (session_context_start) before that last message. A failure (the model
 * or the server, a stop, a summary that runs past the cap, an empty one) leaves the
 * conversation as it was and ends the "turn" with a one-line message. */
#define APP_COMPACT_PROMPT                                                                          \
    "Summarise our conversation so far for yourself: the summary will replace it, and you will "    \
    "not see the conversation again. Keep what is needed to go on: the user's goals and "           \
    "constraints, decisions taken, facts found (tool results included), names, numbers and code "   \
    "that matter, open questions, and what was about to happen next. Plain text, at most 300 words."
#define APP_COMPACT_MAX_TOKENS 1024

typedef enum { TOOL_APPROVE_ONCE, TOOL_APPROVE_ALWAYS, TOOL_DENY } tool_approval;

/* Where a tool call is; the names (app_tool_state_name) are the words the session file's
 * meta and the exports use. */
typedef enum {
    APP_TOOL_WAITING,               /* "waiting for approval" */
    APP_TOOL_RUNNING,               /* "running" */
    APP_TOOL_DONE,                  /* "done": it ran and exited (exit_status says how) */
    APP_TOOL_DENIED,                /* "denied" */
    APP_TOOL_FAILED,                /* "failed": it could not start */
    APP_TOOL_TIMEOUT,               /* "timeout" */
    APP_TOOL_BAD_ARGUMENTS,         /* "bad arguments" */
    APP_TOOL_UNKNOWN_TOOL,          /* "unknown tool" */
    APP_TOOL_CANCELLED,             /* "cancelled" */
} app_tool_state;

/* "waiting for approval", "running", ...; never NULL. */
const char *app_tool_state_name(app_tool_state s);
/* The state of a name, or -1 for a word no state has (a session file from elsewhere). */
int app_tool_state_from_name(const char *name);

/* One tool call of the current answer, as the front end sees it. */
typedef struct {
    int index;                      /* 0.. within the answer */
    const char *id;                 /* "functions.now:0" */
    const char *name;               /* "now" */
    const char *arguments;          /* [arguments_len] as the model wrote them */
    size_t arguments_len;
    app_tool_state state;
    int exit_status;                /* APP_TOOL_DONE: the tool's exit status */
    double seconds;                 /* run time */
    const char *result;             /* [result_len] what goes back to the model (after the run) */
    size_t result_len;
} app_tool_call;

typedef enum {
    APP_TURN_DONE,                  /* the answer is complete */
    APP_TURN_STOPPED,               /* the user stopped it (kept) */
    APP_TURN_FAILED,                /* the engine/server failed or the context is full */
    APP_TURN_TOOL_LIMIT,            /* APP_MAX_TOOL_ROUNDS tool rounds, then stopped */
} app_turn_outcome;

/* How the core reports to the front end. Every callback is optional (NULL: ignored). Text
 * arguments are valid during the call only. */
typedef struct {
    void *user;
    /* a generation of the current turn begins (round 0 after the user's message, 1.. after
       tool results) */
    void (*generation_begin)(void *user, int round);
    /* the answer as it streams: reasoning, content, tool-call pieces, notes, the stop */
    void (*stream)(void *user, const parse_event *ev);
    void (*progress)(void *user, const generator_progress *p);
    /* while the model loads (before app_open), asked with every progress report: non-zero
       when the user wants the load stopped (Ctrl-C, SIGINT, SIGTERM, SIGHUP) */
    int (*load_cancel_requested)(void *user);
    /* the answer is complete and appended to the session (meta: its stats) */
    void (*answer_done)(void *user, const chat_message *m, const session_message_meta *meta);
    /* A call needs the user's decision: answer with app_approve (now or later). Without this
       callback, calls that policy does not allow are denied. */
    void (*tool_approval)(void *user, const app_tool_call *call);
    /* a call's state changed (running, done, denied, ...) */
    void (*tool_update)(void *user, const app_tool_call *call);
    /* the whole turn is over; the core is idle */
    void (*turn_done)(void *user, app_turn_outcome outcome, const char *message);
    /* command output and messages: info is one or more lines for the user; error one line */
    void (*info)(void *user, const char *text);
    void (*error)(void *user, const char *line);
    /* the session was replaced or cut (/new, /undo, /edit, /retry, /system, /load): messages
       [0, kept) are as they were, the rest is to be redrawn from app_session */
    void (*session_reset)(void *user, int kept);
    /* the save state changed (after an autosave, or a failed one) */
    void (*saved)(void *user, const char *path, int ok);
    /* the queue of messages sent while a turn ran changed (one was queued, sent or taken back) */
    void (*queue_changed)(void *user);
    /* A turn that did not end with a whole answer (failed, stopped, the tool limit) leaves the
       queued messages unsent: their text, joined by blank lines, comes back here for the input,
       and the queue is empty. Without this callback they stay queued (app_unqueue). */
    void (*queue_returned)(void *user, const char *text, size_t len);
    /* view commands the core does not own (/theme, /reasoning, /tools expanded|folded, /edit,
       /quit): return 0 when handled, else fill err (one line) */
    int (*view_command)(void *user, const char *name, const char *arg, kimi_err *err);
} app_frontend;

typedef struct app app;

/* Start the core on an open generator (the app owns it from here, also on failure): load the
 * tools (opt->tools_path) and the session (--resume / --load). The generator's summary is not
 * said here (app/main.c says it with --verbose); /stats shows it. opt must outlive the app. */
int app_open(app **out, const app_options *opt, const app_frontend *fe, generator *gen, kimi_err *err);
void app_close(app *a);

/* The fds to poll (POLLIN) while anything runs: at most APP_MAX_POLL_FDS. */
#define APP_MAX_POLL_FDS 2
int app_poll_fds(const app *a, struct pollfd *fds);
/* Handle whatever is ready; never blocks. Nonzero only when the core itself broke (err). */
int app_dispatch(app *a, kimi_err *err);

/* A line the user entered: a slash command (leading '/', except "//" which sends text that
 * starts with '/'), or a message that starts a turn; while a turn runs the message is queued
 * and sent when that turn ends with a whole answer (see queue_returned for the other ends).
 * Returns 0, or the error (also reported through fe->error) for a bad command. app_send and
 * app_command only return their errors (scripts name the line); app_send refuses while a turn
 * runs. */
int app_submit_line(app *a, const char *text, size_t len, kimi_err *err);
/* Send text as the user's message (no command parsing). */
int app_send(app *a, const char *text, size_t len, kimi_err *err);
/* Run one slash command ("/set temperature 0"). */
int app_command(app *a, const char *line, kimi_err *err);
/* Check a slash command line without running it (scripts check every line first). */
int app_command_check(const char *line, kimi_err *err);

/* The queued messages, oldest first: [0, app_queue_length). */
int app_queue_length(const app *a);
const char *app_queued(const app *a, int i, size_t *len);
/* Take the newest queued message back (to edit it): malloc'ed, *len bytes plus a NUL; NULL
 * when none is queued. */
char *app_unqueue(app *a, size_t *len);

/* Rewind: cut the conversation back to before message `index`, which must be one of the
 * user's, and hand its text back (malloc'ed, *len bytes plus a NUL) to edit and send again.
 * Cutting before a user message never parts a tool call from its result. The part cut off is
 * kept while this process runs: /undo, once the conversation is again what the rewind left,
 * brings it back (rewinds stack; /new, /load, /system and /retry forget those they change).
 * The engine's cache still holds the kept part, so the resend prefills only what is new: the
 * first answer after a rewind says (fe->info) how many prompt positions were reused. Idle
 * only. /edit is the rewind to the last user message. */
int app_rewind(app *a, int index, char **text, size_t *len, kimi_err *err);

/* Stop the running generation or tool run; what came is kept. */
void app_stop(app *a);
/* Stop the running turn, if any, and handle its end for at most `seconds` (a cancelled
 * generation or tool ends in milliseconds), so that what is saved next is whole: every tool
 * call of the answer has its result. For quitting (SIGTERM, /quit, Ctrl-D while busy).
 * Returns 0 when the core is idle after it. */
int app_wind_down(app *a, double seconds, kimi_err *err);
/* Answer a pending tool_approval. */
void app_approve(app *a, int call_index, tool_approval decision);

/* The declared tools' names (completion): [0, app_tool_count). */
int app_tool_count(const app *a);
const char *app_tool_name(const app *a, int i);

int app_busy(const app *a);         /* a turn is running (generating, waiting, or running tools) */
int app_quit_requested(const app *a);   /* /quit was given */

const session *app_session(const app *a);
const generator *app_generator(const app *a);
/* The last answer's text, for /expect: content and the names of the tools it called. */
const chat_message *app_last_answer(const app *a);
/* Tool names called during the last user turn (all rounds), for /expect tool. */
int app_last_turn_called(const app *a, const char *tool_name);
/* Context used by the conversation so far (prompt + generated of the last answer). */
long app_context_used(const app *a);

/* Autosave now (after a turn the core does it itself); 0 when saved or saving is off. */
int app_save(app *a, kimi_err *err);
/* The user's last message, for /edit and the input history (NULL when none). */
const char *app_last_user_text(const app *a, size_t *len);
/* The sessions folder (/sessions, /load NAME); NULL when saving is off. */
const char *app_sessions_dir(const app *a);
/* Delete the saved session at path (the /sessions picker): never this conversation's own file
 * (KIMI_ERR_STATE: autosave would write it again) nor one another kimi-chat continues
 * (session_delete). */
int app_delete_session(app *a, const char *path, kimi_err *err);

#endif
