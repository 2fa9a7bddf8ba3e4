/* plain: the line-oriented front end (docs/UI.md "Modes"): the answer streams to stdout, the
 * reasoning, tool calls, progress and messages to stderr (dimmed only on a terminal), tool
 * approval as a y/a/n question; the readline REPL, and the waiting loop that scripts and
 * one-shot prompts share. Signals: SIGINT stops a generation (kept), SIGTERM/SIGHUP end. */
#ifndef KIMI_UI_PLAIN_H
#define KIMI_UI_PLAIN_H

#include "app/chat/app.h"
#include "app/chat/options.h"

typedef struct plain_ui plain_ui;

/* ask_tools: whether calls the policy does not allow are asked about (the REPL) or denied
 * (scripts, --prompt). Installs the signal handlers. */
plain_ui *plain_ui_new(const app_options *opt, int ask_tools);
void plain_ui_free(plain_ui *ui);

/* The callbacks to open the app with. */
app_frontend plain_ui_frontend(plain_ui *ui);

typedef enum {
    PLAIN_WAIT_IDLE,            /* the turn ended (its outcome in *outcome) */
    PLAIN_WAIT_INTERRUPTED,     /* SIGINT stopped it (kept); the turn has ended */
    PLAIN_WAIT_TERMINATED,      /* SIGTERM or SIGHUP: stop everything (the turn was stopped
                                   and, unless it hung, ended: what came is kept) */
    PLAIN_WAIT_BROKEN,          /* the core failed (err) */
} plain_wait_result;

/* Run the app until its turn ends. */
plain_wait_result plain_ui_wait(plain_ui *ui, app *a, app_turn_outcome *outcome, kimi_err *err);

/* The interactive REPL: `you> ` lines until Ctrl-D or /quit. Returns the exit code. */
int plain_ui_repl(plain_ui *ui, app *a);

/* Print "you> text" as scripts echo their turns. */
void plain_ui_echo_turn(plain_ui *ui, const char *text, size_t len);

/* The errno of the first write to stdout that failed (a full disk, a closed descriptor, a
 * reader gone: EPIPE), else 0. */
int plain_ui_stdout_errno(const plain_ui *ui);

/* Text from the model, a server or a tool (an answer quoted by a failed /expect) to standard
 * error, made safe for a terminal (text_terminal_safe) when standard error is one. */
void plain_ui_err_text(const plain_ui *ui, const char *text, size_t len);

#endif
