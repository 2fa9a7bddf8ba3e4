/* tui: the full-screen ncurses view (docs/UI.md "Full-screen layout"): the transcript from the
 * render model, the multi-line input, the status bar, the tool approval prompt, progress and
 * the help overlay; the keys; the poll loop over the terminal, the app's fds and a signal
 * self-pipe, with frames paced to at most ~60 per second; and the terminal's restoration on
 * every way out (quit, error, SIGTERM/SIGHUP, a crash signal). It knows the app only through
 * app/chat/app.h. */
#ifndef KIMI_UI_TUI_H
#define KIMI_UI_TUI_H

#include "app/chat/app.h"
#include "app/chat/options.h"

typedef struct tui tui;

/* Take the terminal (curses, signals). NULL when the terminal cannot be used full-screen
 * (the caller falls back to the plain REPL); nothing is left changed then. */
tui *tui_new(const app_options *opt);
/* The callbacks to open the app with (load progress is shown while app_open runs). */
app_frontend tui_frontend(tui *t);
/* Run until Ctrl-D, /quit, SIGTERM/SIGHUP or a broken core. Gives the terminal back before it
 * returns (the conversation is then printed to the normal screen) and returns the exit code:
 * 0, 3 (the core broke: the message is on stderr) or 130 (SIGTERM, SIGHUP). */
int tui_run(tui *t, app *a);
/* Give the terminal back if tui_run did not, and free. */
void tui_free(tui *t);

#endif
