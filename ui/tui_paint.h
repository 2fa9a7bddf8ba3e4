/* tui_paint: the full-screen view painted with curses: the theme's palette, the transcript
 * frame, the separator, the input, the status bar and the F1 help overlay; redraws and resizes.
 * Private to ui/tui*.c. */
#ifndef KIMI_UI_TUI_PAINT_H
#define KIMI_UI_TUI_PAINT_H

#include "ui/tui_state.h"

/* The palette for t->th at t->depth; a note when the terminal's colour pairs ran out. */
void tui_apply_palette(tui *t);
/* Load theme `name` (a built-in or a file) and repaint with it. */
int tui_load_theme(tui *t, const char *name, kimi_err *err);
/* Paint what changed now (nothing while curses is off). */
void tui_paint_now(tui *t);
/* Repaint every row on the next paint (Ctrl-L). */
void tui_full_redraw(tui *t);
/* Follow the terminal's size (SIGWINCH) and repaint. */
void tui_resize(tui *t);
/* Show (on) or hide the F1 help overlay. */
void tui_help_toggle(tui *t, int on);

#endif
