/* script_run: runs a parsed script against the chat core through the plain front end: echo
 * each turn, stream its answer, run commands, check /expect, and map the result to the exit
 * codes of docs/UI.md (0 ok, 1 a line failed, 3 model or engine failure, 130 interrupted). */
#ifndef KIMI_APP_SCRIPT_RUN_H
#define KIMI_APP_SCRIPT_RUN_H

#include "app/chat/app.h"
#include "app/chat/script.h"
#include "ui/plain.h"

/* Check every command line (before the model loads): 0, or 1 with "file:line: why" printed for
 * each bad one. */
int script_check(const script *s);
/* Run the items in order; stops at the first failing line unless keep_going. */
int script_run(const script *s, app *a, plain_ui *ui, int keep_going);

#endif
