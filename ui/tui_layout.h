/* tui_layout: where the full-screen view's parts go (transcript, separator, input, status bar)
 * and what the separator and the status bar say at the terminal's width. Private to
 * ui/tui*.c. */
#ifndef KIMI_UI_TUI_LAYOUT_H
#define KIMI_UI_TUI_LAYOUT_H

#include "ui/tui_state.h"

/* The rows of the transcript and the input for the terminal's size and the input's text
 * (t->trans_h, t->input_h, t->input_top); a change sizes the render model and forces a repaint. */
void tui_layout(tui *t);
/* The status bar's text, fitted to the width by dropping whole fields. */
void tui_status_text(tui *t, char *buf, size_t cap);
/* The separator's text ("" for a plain rule) and its theme element. */
void tui_separator_text(tui *t, char *buf, size_t cap, int *element);

#endif
