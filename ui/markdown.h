/* markdown: lays out one message's text as display lines of styled runs, either as
 * markdown-lite (headings, bold/italic, `code`, fenced code not re-flowed, lists with hanging
 * indents, quotes, rules, tables aligned by display width) or as plain wrapped text, and can
 * resume from the last finished line so that a streaming message costs its last line, not its
 * whole text. */
#ifndef KIMI_UI_MARKDOWN_H
#define KIMI_UI_MARKDOWN_H

#include <stddef.h>

#include "ui/styled_lines.h"

/* Parser state at a line start (a plain value: checkpoints copy it). */
typedef struct {
    int in_fence;       /* inside a fenced code block */
    char fence_char;    /* '`' or '~' */
    int fence_len;      /* length of the opening fence */
    int fence_indent;   /* spaces before the opening fence, removed from code lines */
    int list_indent;    /* content column of the list item above (-1: none), for lazy lines */
    int pending_blank;  /* a blank line is owed before the next content */
    int has_content;    /* a line was laid out (blank lines before the first are dropped) */
} md_state;

/* Where layout may resume: the state at a line start, the byte offset of that line in the
 * text, and how many output lines come from the text before it. Zero it (md_checkpoint_init)
 * for a full layout. */
typedef struct {
    md_state state;
    size_t offset;
    size_t n_lines;
} md_checkpoint;

enum {
    MD_PLAIN = 1, /* no markdown: every line wrapped as it is, blank lines kept */
};

typedef struct {
    int width;   /* columns, >= 1 */
    int element; /* theme_element of ordinary text (THEME_TEXT, THEME_USER_TEXT, ...) */
    int flags;   /* MD_* */
} md_options;

void md_checkpoint_init(md_checkpoint *cp);

/* Lay out text[0..n): out is cut to cp->n_lines lines (those of text[0..cp->offset), laid out
 * before with the same options), then text[cp->offset..n) is laid out after them and *cp moves
 * to the last line start whose lines cannot change when more text is appended (not the start
 * of a possible table). So: a fresh checkpoint gives a full layout; after appending to the
 * text, calling again with the same checkpoint redoes only the unfinished tail. out->failed
 * tells of an allocation failure. */
void md_layout(styled_lines *out, const char *text, size_t n, const md_options *o,
               md_checkpoint *cp);

#endif
