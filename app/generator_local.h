/* generator_local: answers from the in-process engine: the conversation is rendered with the
 * checkpoint's chat format, submitted as token ids (the engine reuses the cached prefix), and
 * the generated ids go through the stream parser. */
#ifndef KIMI_APP_GENERATOR_LOCAL_H
#define KIMI_APP_GENERATOR_LOCAL_H

#include "app/generator.h"
#include "engine/engine.h"

typedef struct {
    const char *model_dir;
    const char *model_name;         /* for the status bar; NULL: the folder's name */
    engine_options engine;          /* model_dir is filled from above */
    generator_event_fn on_load;     /* optional: load progress while open runs */
    void *load_user;
} generator_local_options;

/* Load the tokenizer and open the engine (which loads the weights). */
int generator_local_open(generator **out, const generator_local_options *o, kimi_err *err);

#endif
