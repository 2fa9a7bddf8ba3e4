/* script: the script-file format of `kimi-chat --script FILE` (docs/UI.md "Script files"):
 * comments, one-line and triple-quoted user turns, slash commands and /expect assertions,
 * parsed up front so that a bad line is reported as file:line before anything runs.
 *
 * Line by line, each line judged by its text without the blanks around it (a trailing \r is
 * dropped first, so CRLF files read the same; "blank" is space or tab):
 *   - blank, or '#' as the first non-blank character: ignored;
 *   - exactly """ (blanks around allowed): opens a multi-line turn that ends at the next line
 *     that is exactly """; the lines between, verbatim (blanks and '#' lines kept), joined by
 *     \n, are the turn; a turn of blanks only is an error;
 *   - """TEXT""" on one line: the turn TEXT, verbatim (a way to send leading blanks, '#'
 *     or '/'); a line that starts with """ in any other way is an error (a missed newline
 *     after """ would otherwise swallow the rest of the file);
 *   - "//TEXT": the turn "/TEXT" (the escape for a message beginning with '/');
 *   - "/expect KIND TEXT" (KIND contains | matches | tool; blanks between the words):
 *     SCRIPT_EXPECT; "matches" compiles TEXT as a POSIX ERE now; "tool" takes one name;
 *   - any other line beginning with '/': SCRIPT_COMMAND, the line without its surrounding blanks;
 *   - anything else: a one-line turn, without its surrounding blanks.
 * NUL bytes are kept in turns (len counts them) and are an error in commands and /expect;
 * invalid UTF-8 is kept as it is. */
#ifndef KIMI_APP_SCRIPT_H
#define KIMI_APP_SCRIPT_H

#include <regex.h>
#include <stddef.h>

#include "engine/base/array.h"
#include "engine/base/error.h"

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
    regex_t *regex;             /* SCRIPT_EXPECT_MATCHES: "^(.|[^.])*(TEXT)" compiled
                                   (REG_EXTENDED | REG_NOSUB): TEXT anywhere, in one pass;
                                   NULL otherwise */
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

/* The same, and every bad line's message, newline-terminated, in file order, appended to
 * every_error: parsing goes on after a bad line (unless memory runs out or an unterminated """
 * takes the rest of the file), so one run reports them all; err holds the first. */
int script_parse_all(script *s, const char *name, const char *text, size_t len, strbuf *every_error,
                     kimi_err *err);
void script_free(script *s);

/* Whether the /expect item holds for the last answer: its content[0..content_len) (NUL bytes
 * included; NULL reads as "") and was_called(user, NAME), whether the last turn called the tool
 * NAME (NULL: none was). 1 holds, 0 does not. Time is linear in content_len for every kind:
 * a pattern is matched in one pass (script_parse compiles it anchored behind a match-anything
 * prefix and refuses back-references), never retried from each position of the answer. */
int script_expect_holds(const script_item *item, const char *content, size_t content_len,
                        int (*was_called)(const void *user, const char *name), const void *user);

#endif
