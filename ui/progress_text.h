/* progress_text: the one-line text of a progress report (loading the model, reading the
 * prompt, waiting for a server), the same in every front end. */
#ifndef KIMI_UI_PROGRESS_TEXT_H
#define KIMI_UI_PROGRESS_TEXT_H

#include <stddef.h>

#include "app/chat/generator.h"

/* "loading 123.4/590.0 GB · 6.8 GB/s · ETA 1m12s" (MB below a gigabyte; no ETA while it is
 * unknown), "reading the prompt: 512 of 8000 tokens · 420 tok/s · ETA 18s", "waiting for the
 * server · 2.5 s". Cut to fit buf [cap] (cap >= 1). */
void progress_text(char *buf, size_t cap, const generator_progress *p);

/* A duration as an ETA says it, rounded up to the second: "8s", "1m12s", "2h05m". */
void duration_text(char *buf, size_t cap, double seconds);

#endif
