/* tui_mirror: the session and the streamed answer mirrored into the render model: the app's
 * callbacks (app_frontend) of the full-screen view, except load_cancel_requested (tui.c: it
 * reads the keys and signals). Private to ui/tui*.c. */
#ifndef KIMI_UI_TUI_MIRROR_H
#define KIMI_UI_TUI_MIRROR_H

#include "ui/tui_state.h"

/* The callbacks, user = t; load_cancel_requested is left NULL. */
app_frontend tui_mirror_frontend(tui *t);
/* Mirror session messages from..n into blocks (from is not a tool message). */
void tui_mirror_from(tui *t, int from);
/* The live reasoning and answer blocks end (the turn or the view ends). */
void tui_mirror_end_live(tui *t);

#endif
