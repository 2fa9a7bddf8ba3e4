/* generator_local: answers from the in-process engine: the conversation is rendered with the
 * checkpoint's chat format, submitted as token ids (the engine reuses the cached prefix), and
 * the generated ids go through the stream parser. */
#ifndef KIMI_APP_GENERATOR_LOCAL_H
#define KIMI_APP_GENERATOR_LOCAL_H

#include "app/chat/generator.h"
#include "engine/runtime/engine.h"

typedef struct {
    const char *model_dir;
    const char *model_name;         /* for the status bar; NULL: the folder's name */
    engine_options engine;          /* model_dir and the load callbacks are filled from here */
    /* Optional: lines to say once, before the weights load (the engine's memory plan, then
       its note on the checkpoint's KV-cache request, when there is one); the generator's
       summary is then "". Without it they are the summary, said after the load. */
    void (*on_note)(void *user, const char *line);
    /* Optional: load progress while open runs, about 10 times a second; a non-zero return
       stops the load: open then fails with KIMI_ERR_CANCELLED. */
    int (*on_load)(void *user, const generator_progress *p);
    void *load_user;                /* the user argument of on_note and on_load */
} generator_local_options;

/* Load the tokenizer and open the engine (which loads the weights). */
int generator_local_open(generator **out, const generator_local_options *o, kimi_err *err);

#endif
