/* completion: what Tab can complete at the start of the input: slash command names, and their
 * arguments (/think on|off, /set keys, /tools actions and tool names, /theme names, /reasoning
 * modes, session names for /load and /save, file paths for /load and /export, export formats).
 * The caller hands in the lists that live elsewhere (themes, sessions, tools); file paths are
 * read from the folder the word names. No curses here. */
#ifndef KIMI_APP_COMPLETION_H
#define KIMI_APP_COMPLETION_H

#include <stddef.h>

#include "engine/base/error.h"

typedef struct {
    const char *const *themes;      /* [n_themes] names as /theme takes them */
    int n_themes;
    const char *const *sessions;    /* [n_sessions] names as /load takes them ("notes" for
                                       notes.json in the sessions folder) */
    int n_sessions;
    const char *const *tools;       /* [n_tools] */
    int n_tools;
} completion_sources;

typedef struct {
    char **items;                   /* [n] sorted, unique: each the whole word that replaces
                                       input[start, len) ("/theme", "light", "notes/a.json") */
    int n;
    size_t start;                   /* byte offset of the word being completed */
} completion;

/* The candidates for the word that ends input[0..len) (the text before the cursor): none when
 * the input does not start with '/' or the command takes nothing there. Folders among file
 * candidates end in '/'; hidden files are offered only for a word that starts with '.'. */
int completion_find(const char *input, size_t len, const completion_sources *src, completion *out, kimi_err *err);
void completion_free(completion *c);
/* How many bytes all candidates share from the start (what Tab can insert at once). */
size_t completion_common_prefix(const completion *c);

#endif
