/* tui_keys: the full-screen view's keys and mouse: reading them (Alt as Esc-prefix, pastes with
 * and without bracketed paste), the input's editing, scrolling, Tab focus, the tool approval
 * prompt, submitting a line. Private to ui/tui*.c. */
#ifndef KIMI_UI_TUI_KEYS_H
#define KIMI_UI_TUI_KEYS_H

#include "ui/tui_state.h"

/* Bind the keys terminfo may not name (Ctrl/Shift arrows, bracketed paste) to the K_ codes. */
void tui_keys_bind(void);
/* Read and handle every key waiting (while the model loads: Ctrl-C cancels, the rest waits in
 * t->typed_ahead). */
void tui_read_keys(tui *t);
/* One key (is_char: a character, else a KEY_ code); alt: Esc came before it. */
void tui_handle_key(tui *t, int key, int is_char, int alt);

#endif
