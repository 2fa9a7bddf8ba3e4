/* script: the script-file format of `kimi-chat --script FILE` (docs/UI.md "Script files"):
 * comments, one-line and triple-quoted user turns, slash commands and /expect assertions,
 * parsed up front so that a bad line is reported as file:line before anything runs. */
#ifndef KIMI_APP_SCRIPT_H
#define KIMI_APP_SCRIPT_H

#include <stddef.h>

#include "engine/error.h"

typedef enum {
    SCRIPT_TURN,            /* text: the user's message (may span lines, may contain NULs) */
    SCRIPT_COMMAND,         /* text: a slash command line other than /expect, "/set top_p 1" */
    SCRIPT_EXPECT,          /* expect + text: an assertion on the last answer */
} script_item_kind;

typedef enum {
    SCRIPT_EXPECT_CONTAINS, /* the last answer's content contains text */
    SCRIPT_EXPECT_MATCHES,  /* the last answer's content matches text, a POSIX ERE */
    SCRIPT_EXPECT_TOOL,     /* the last turn called the tool named text */
} script_expect_kind;

typedef struct {
    script_item_kind kind;
    script_expect_kind expect;  /* SCRIPT_EXPECT */
    int line;                   /* 1-based line where the item starts */
    char *text;                 /* [len], NUL-terminated */
    size_t len;
} script_item;

typedef struct {
    char *name;                 /* the file name as given ("-" reads as "<stdin>") */
    script_item *items;         /* [n_items] in file order */
    int n_items;
} script;

/* Parse text[0..len). Errors name name:line ("demo.kc:12: unterminated \"\"\" turn (opened
 * here)", "demo.kc:7: /expect matches: bad regular expression: ..."). Unknown slash commands
 * are not this parser's business (commands.h checks them before the script runs). */
int script_parse(script *s, const char *name, const char *text, size_t len, kimi_err *err);
void script_free(script *s);

#endif
