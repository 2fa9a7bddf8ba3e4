/* tool_declaration: the tools' declaration in K2.5's TypeScript style, as the checkpoint's chat
 * template and tokenizer print it from OpenAI-style function definitions (JSON Schema). */
#ifndef KIMI_TOOL_DECLARATION_H
#define KIMI_TOOL_DECLARATION_H

#include <stddef.h>

#include <jansson.h>

#include "engine/base/error.h"

/* "# Tools\n\n## functions\nnamespace functions {\n...}\n" for a list of tools. When a schema
 * cannot be expressed that way the template declares the tools as compact JSON instead: *text
 * (malloc'ed) is that JSON and note says why (note may be NULL). */
int tool_declaration_render(const json_t *tools, char **text, char *note, size_t note_cap,
                            kimi_err *err);

#endif
