/* term_probe: how the terminal draws emoji clusters (a skin tone, VS16, a ZWJ pair), asked
 * with cursor position reports, so the layout counts the columns the terminal really uses. */
#ifndef KIMI_UI_TERM_PROBE_H
#define KIMI_UI_TERM_PROBE_H

#include "ui/text_width.h"

/* Write three sample clusters to out_fd, each after a carriage return and followed by a
 * cursor position request (ESC [ 6 n), read the replies from in_fd (a terminal: put in raw
 * mode for the duration, then restored) for up to timeout_ms, erase the line, and fill *t
 * from the columns the cursor moved. Returns 0 when all three replies came, -1 otherwise
 * (*t untouched). Keys typed while it waits are lost. */
int term_probe_clusters(int in_fd, int out_fd, int timeout_ms, text_terminal *t);

/* The same from the three cursor columns (1-based, as reported) after each sample; exposed
 * for the tests. */
void term_probe_decide(int thumbs_col, int heart_col, int pair_col, text_terminal *t);

#endif
