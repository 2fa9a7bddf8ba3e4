/* tui_state: the helpers the full-screen view's modules share. */
#include "ui/tui_state.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/monotonic.h"

void tui_hint(tui *t, const char *text)
{
    snprintf(t->flash, sizeof t->flash, "%s", text);
    t->flash_until = monotonic_seconds() + FLASH_MS / 1000.0;
    t->dirty = 1;
}

/* Blocks from..(the last) show session message `message` (-1: they are notes). A block never
 * tagged (out of memory) counts as a message that a reset drops, so a note may go but no message
 * is ever shown twice. */
void tui_tag_blocks(tui *t, int from, int message)
{
    int n = render_model_block_count(t->rm);
    if (from < 0 || from >= n)
        return;
    if (n > t->block_message_cap) {
        int cap = n > 2 * t->block_message_cap ? n : 2 * t->block_message_cap;
        int *grown = realloc(t->block_message, sizeof *grown * (size_t)cap);
        if (!grown)
            return;
        t->block_message = grown;
        t->block_message_cap = cap;
    }
    for (int b = t->n_block_message; b < from; b++)
        t->block_message[b] = INT_MAX;
    for (int b = from; b < n; b++)
        t->block_message[b] = message;
    t->n_block_message = n;
}

void tui_add_block(tui *t, rm_block_kind kind, const char *text)
{
    int b = render_model_append(t->rm, kind, text, strlen(text), NULL);
    if (b >= 0)
        render_model_finish(t->rm, b);
    tui_tag_blocks(t, b, -1);
    t->dirty = 1;
}
