/* commands: the slash commands of docs/UI.md, parsed and checked (names, argument counts and
 * values) without touching any state, so every mode shares one grammar and a script can be
 * checked before it runs. The app executes the parsed command. */
#ifndef KIMI_APP_COMMANDS_H
#define KIMI_APP_COMMANDS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/error.h"

typedef enum {
    CMD_HELP, CMD_QUIT, CMD_NEW, CMD_SYSTEM, CMD_THINK, CMD_SET, CMD_RETRY, CMD_UNDO, CMD_EDIT,
    CMD_TOOLS, CMD_SAVE, CMD_LOAD, CMD_SESSIONS, CMD_EXPORT, CMD_STATS, CMD_THEME, CMD_REASONING,
    CMD_COMPACT, CMD_PERMISSIONS,
} command_id;

typedef enum { SET_TEMPERATURE, SET_TOP_P, SET_TOP_K, SET_MAX_TOKENS, SET_SEED } setting_id;

typedef enum {
    TOOLS_LIST, TOOLS_ENABLE, TOOLS_DISABLE, TOOLS_ASK, TOOLS_EXPANDED, TOOLS_FOLDED,
    TOOLS_ALWAYS,               /* /permissions NAME always */
} tools_action;

typedef enum { EXPORT_MARKDOWN, EXPORT_JSON } export_format;

typedef struct {
    command_id id;
    const char *name;           /* canonical name without '/', "set" */
    char arg[4096];             /* the rest of the line, trimmed (file, name, value) */
    const char *text;           /* CMD_SYSTEM: the text, [text_len] bytes inside the parsed line
                                   (valid while it is; any length: a system prompt is often
                                   longer than a command) */
    size_t text_len;
    int on;                     /* CMD_THINK */
    setting_id setting;         /* CMD_SET */
    double number;              /* CMD_SET: temperature, top_p */
    uint64_t integer;           /* CMD_SET: top_k, max_tokens, seed */
    tools_action tools;         /* CMD_TOOLS; arg holds NAME for enable/disable/ask.
                                   CMD_PERMISSIONS: LIST, or ASK, ALWAYS, DISABLE for arg NAME */
    export_format format;       /* CMD_EXPORT; arg holds the path or "" */
    int force;                  /* CMD_EXPORT: "--force" at the end, replace an existing PATH */
} command;

/* Parse line ("/set temperature 0.7"); errors are one line naming the command and the value
 * ("/set temperature -1: must be a finite number >= 0"). */
int command_parse(const char *line, size_t len, command *out, kimi_err *err);

/* The command names without '/', aliases included ("exit" after "quit"), for completion:
 * i = 0, 1, ... until NULL. */
const char *commands_name(int i);

/* The /help text: every command, one line each. */
const char *commands_help(void);

#endif
