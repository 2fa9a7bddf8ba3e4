/* script_run: runs a parsed script against the chat core through the plain front end: echo
 * each turn, stream its answer, run commands, check /expect, and map the result to the exit
 * codes of docs/UI.md (0 ok, 1 a line failed, 3 model or engine failure, 130 interrupted). */
#ifndef KIMI_APP_SCRIPT_RUN_H
#define KIMI_APP_SCRIPT_RUN_H

#include "app/app.h"
#include "app/script.h"
#include "ui/plain.h"

/* Check every command line first (a bad one fails before anything runs), then run. */
int script_run(const script *s, app *a, plain_ui *ui, int keep_going);

#endif
