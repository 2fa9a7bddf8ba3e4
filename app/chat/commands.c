/* commands: one table of the slash commands, their argument grammar and value checks. */
#include "app/chat/commands.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/chat/sampling_range.h"

typedef enum { ARG_NONE, ARG_OPTIONAL, ARG_REQUIRED } arg_kind;

static const struct {
    const char *name;
    const char *alias;
    command_id id;
    arg_kind arg;
    const char *usage;
} table[] = {
    {"help", NULL, CMD_HELP, ARG_NONE, "/help                       this list"},
    {"quit", "exit", CMD_QUIT, ARG_NONE, "/quit, /exit                leave (the session is saved)"},
    {"new", "clear", CMD_NEW, ARG_NONE, "/new, /clear                start a new conversation (the system prompt stays)"},
    {"system", NULL, CMD_SYSTEM, ARG_OPTIONAL, "/system TEXT                set the system prompt (no TEXT: remove it)"},
    {"think", NULL, CMD_THINK, ARG_REQUIRED, "/think on|off               reasoning before answers"},
    {"set", NULL, CMD_SET, ARG_REQUIRED, "/set temperature|top_p|top_k|max_tokens|seed VALUE"},
    {"retry", NULL, CMD_RETRY, ARG_NONE, "/retry                      regenerate the last answer"},
    {"undo", NULL, CMD_UNDO, ARG_NONE, "/undo                       drop the last exchange (after a rewind or /edit: bring back what it cut off)"},
    {"edit", NULL, CMD_EDIT, ARG_NONE, "/edit                       put your last message back into the input (a rewind: /undo takes it back)"},
    {"tools", NULL, CMD_TOOLS, ARG_OPTIONAL, "/tools [enable|disable|ask NAME | expanded|folded]   list the tools and their policy, or change them (ask: take \"always\" back)"},
    {"save", NULL, CMD_SAVE, ARG_OPTIONAL, "/save [NAME]                save the session (NAME: a copy under that name)"},
    {"load", NULL, CMD_LOAD, ARG_REQUIRED, "/load NAME|FILE             open a saved session or a JSON export"},
    {"sessions", NULL, CMD_SESSIONS, ARG_NONE, "/sessions                   list saved sessions (full screen: a picker to load or delete one)"},
    {"export", NULL, CMD_EXPORT, ARG_OPTIONAL, "/export [md|json] [PATH] [--force]   write the transcript (default md, in the current folder; --force replaces PATH)"},
    {"compact", NULL, CMD_COMPACT, ARG_OPTIONAL, "/compact [INSTRUCTIONS]     the model summarises the conversation so far; it goes on from the summary and the last exchange (the session file keeps it all)"},
    {"permissions", NULL, CMD_PERMISSIONS, ARG_OPTIONAL, "/permissions [NAME ask|always|disabled]   each tool's permission, or change one (always: for this conversation)"},
    {"stats", NULL, CMD_STATS, ARG_NONE, "/stats                      tokens, cache reuse and speed of the last answer and the session"},
    {"theme", NULL, CMD_THEME, ARG_OPTIONAL, "/theme [NAME]               colours of the full-screen view (no NAME: list them)"},
    {"reasoning", NULL, CMD_REASONING, ARG_REQUIRED, "/reasoning collapsed|expanded|hidden   how reasoning is shown"},
};

const char *commands_name(int i)
{
    for (size_t k = 0; k < sizeof table / sizeof table[0]; k++) {
        if (i-- == 0)
            return table[k].name;
        if (table[k].alias && i-- == 0)
            return table[k].alias;
    }
    return NULL;
}

const char *commands_help(void)
{
    static char text[4096];
    if (!text[0]) {
        size_t used = 0;
        for (size_t i = 0; i < sizeof table / sizeof table[0] && used < sizeof text; i++)
            used += (size_t)snprintf(text + used, sizeof text - used, "%s\n", table[i].usage);
        used += (size_t)snprintf(text + used, sizeof text - used,
                                 "//TEXT                      send TEXT starting with a single /\n");
    }
    return text;
}

/* Split off the first word of s (in place); returns it, *rest after its spaces. */
static char *first_word(char *s, char **rest)
{
    char *end = s;
    while (*end && !isspace((unsigned char)*end))
        end++;
    char *next = end;
    while (isspace((unsigned char)*next))
        next++;
    *end = 0;
    *rest = next;
    return s;
}

static int parse_set(command *c, char *args, kimi_err *err)
{
    char *value, *key = first_word(args, &value);
    if (!*value || strpbrk(value, " \t"))
        return kimi_fail(err, KIMI_ERR_INPUT, "/set %s: give one value (/set temperature|top_p|top_k|max_tokens|seed VALUE)", key);
    static const struct {
        const char *key;
        setting_id id;
        sampling_setting range;
    } settings[] = {
        {"temperature", SET_TEMPERATURE, SAMPLING_TEMPERATURE}, {"top_p", SET_TOP_P, SAMPLING_TOP_P},
        {"top_k", SET_TOP_K, SAMPLING_TOP_K}, {"max_tokens", SET_MAX_TOKENS, SAMPLING_MAX_TOKENS},
        {"seed", SET_SEED, SAMPLING_SEED},
    };
    for (size_t i = 0; i < sizeof settings / sizeof *settings; i++)
        if (!strcmp(key, settings[i].key)) {
            char what[160];
            snprintf(what, sizeof what, "/set %s %.100s", key, value);
            c->setting = settings[i].id;
            return sampling_parse(settings[i].range, value, what, KIMI_ERR_INPUT, &c->number, &c->integer, err);
        }
    return kimi_fail(err, KIMI_ERR_INPUT, "/set %s: unknown setting (temperature, top_p, top_k, max_tokens, seed)", key);
}

static int parse_tools(command *c, char *args, kimi_err *err)
{
    char *rest, *action = first_word(args, &rest);
    static const struct { const char *word; tools_action action; int wants_name; } actions[] = {
        {"", TOOLS_LIST, 0}, {"list", TOOLS_LIST, 0}, {"enable", TOOLS_ENABLE, 1},
        {"disable", TOOLS_DISABLE, 1}, {"ask", TOOLS_ASK, 1}, {"expanded", TOOLS_EXPANDED, 0},
        {"folded", TOOLS_FOLDED, 0},
    };
    for (size_t i = 0; i < sizeof actions / sizeof actions[0]; i++) {
        if (strcmp(action, actions[i].word))
            continue;
        c->tools = actions[i].action;
        if (actions[i].wants_name && (!*rest || strpbrk(rest, " \t")))
            return kimi_fail(err, KIMI_ERR_INPUT, "/tools %s: give one tool name", action);
        if (!actions[i].wants_name && *rest)
            return kimi_fail(err, KIMI_ERR_INPUT, "/tools %s: takes nothing after it ('%s')", action, rest);
        memmove(c->arg, rest, strlen(rest) + 1);
        return 0;
    }
    return kimi_fail(err, KIMI_ERR_INPUT, "/tools %s: unknown (list, enable NAME, disable NAME, ask NAME, expanded, folded)", action);
}

static int parse_permissions(command *c, char *args, kimi_err *err)
{
    char *rest, *name = first_word(args, &rest);
    c->tools = TOOLS_LIST;
    if (!*name)
        return 0;
    static const struct { const char *word; tools_action action; } modes[] = {
        {"ask", TOOLS_ASK}, {"always", TOOLS_ALWAYS}, {"disabled", TOOLS_DISABLE},
    };
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (!strcmp(rest, modes[i].word)) {
            c->tools = modes[i].action;
            memmove(c->arg, name, strlen(name) + 1);
            return 0;
        }
    return kimi_fail(err, KIMI_ERR_INPUT, "/permissions %s: give ask, always or disabled after the tool's name ('%s')",
                     name, rest);
}

static int parse_export(command *c, char *args, kimi_err *err)
{
    /* "--force" as the last word: replace an existing file */
    char *end = args + strlen(args);
    if (end - args >= 7 && !strcmp(end - 7, "--force") && (end - 7 == args || isspace((unsigned char)end[-8]))) {
        c->force = 1;
        end -= 7;
        while (end > args && isspace((unsigned char)end[-1]))
            end--;
        *end = 0;
    }
    char *rest, *word = first_word(args, &rest);
    c->format = EXPORT_MARKDOWN;
    if (!strcmp(word, "md") || !strcmp(word, "markdown")) {
        memmove(c->arg, rest, strlen(rest) + 1);
    } else if (!strcmp(word, "json")) {
        c->format = EXPORT_JSON;
        memmove(c->arg, rest, strlen(rest) + 1);
    } else if (*rest) {
        return kimi_fail(err, KIMI_ERR_INPUT, "/export %s: the format is md or json (/export [md|json] [PATH])", word);
    } else if (*word && !strchr(word, '.') && !strchr(word, '/')) {
        /* a bare word like "html" is a format asked for, not a file name */
        return kimi_fail(err, KIMI_ERR_INPUT, "/export %s: the format is md or json (a file of that name: ./%s)", word,
                         word);
    } else {
        /* a lone word is the path; its extension picks the format */
        size_t n = strlen(word);
        if (n > 5 && !strcmp(word + n - 5, ".json"))
            c->format = EXPORT_JSON;
        memmove(c->arg, word, n + 1);
    }
    /* one PATH: "out.json extra" would be a file named so */
    if (strpbrk(c->arg, " \t"))
        return kimi_fail(err, KIMI_ERR_INPUT, "/export %s: one PATH, without spaces (/export [md|json] [PATH])", c->arg);
    return 0;
}

int command_parse(const char *line, size_t len, command *out, kimi_err *err)
{
    *out = (command){0};
    while (len && isspace((unsigned char)line[len - 1]))
        len--;
    if (!len || line[0] != '/')
        return kimi_fail(err, KIMI_ERR_INPUT, "not a command (commands start with /)");
    if (memchr(line, 0, len) || memchr(line, '\n', len))
        return kimi_fail(err, KIMI_ERR_INPUT, "a command is one line of text");
    if (len >= 7 && !memcmp(line, "/system", 7) && (len == 7 || isspace((unsigned char)line[7]))) {
        size_t start = 7;
        while (start < len && isspace((unsigned char)line[start]))
            start++;
        out->id = CMD_SYSTEM;
        out->name = "system";
        out->text = line + start;
        out->text_len = len - start;
        return 0;
    }
    if (len >= sizeof out->arg)
        return kimi_fail(err, KIMI_ERR_INPUT, "command too long (%zu bytes)", len);
    char buf[sizeof out->arg];
    memcpy(buf, line + 1, len - 1);
    buf[len - 1] = 0;
    char *args, *name = first_word(buf, &args);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(name, table[i].name) && !(table[i].alias && !strcmp(name, table[i].alias)))
            continue;
        out->id = table[i].id;
        out->name = table[i].name;
        if (table[i].arg == ARG_NONE && *args)
            return kimi_fail(err, KIMI_ERR_INPUT, "/%s takes no argument ('%s')", name, args);
        if (table[i].arg == ARG_REQUIRED && !*args) {
            const char *gap = strstr(table[i].usage, "  ");     /* the syntax, without its description */
            return kimi_fail(err, KIMI_ERR_INPUT, "/%s needs an argument: %.*s", name,
                             (int)(gap ? gap - table[i].usage : (long)strlen(table[i].usage)), table[i].usage);
        }
        switch (out->id) {
        case CMD_THINK:
            if (!strcmp(args, "on") || !strcmp(args, "off")) {
                out->on = !strcmp(args, "on");
                return 0;
            }
            return kimi_fail(err, KIMI_ERR_INPUT, "/think %s: on or off", args);
        case CMD_SET: return parse_set(out, args, err);
        case CMD_TOOLS: return parse_tools(out, args, err);
        case CMD_PERMISSIONS: return parse_permissions(out, args, err);
        case CMD_EXPORT: return parse_export(out, args, err);
        case CMD_REASONING:
            if (strcmp(args, "collapsed") && strcmp(args, "expanded") && strcmp(args, "hidden"))
                return kimi_fail(err, KIMI_ERR_INPUT, "/reasoning %s: collapsed, expanded or hidden", args);
            break;
        default: break;
        }
        memmove(out->arg, args, strlen(args) + 1);
        return 0;
    }
    return kimi_fail(err, KIMI_ERR_INPUT, "unknown command /%s (/help lists them)", name);
}
