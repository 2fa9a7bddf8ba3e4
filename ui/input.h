/* input: the full-screen view's multi-line line editor without curses: UTF-8 text edited by
 * grapheme cluster with Emacs keys (move, kill, yank, words), an input history shared with the
 * plain REPL's file, incremental reverse search (Ctrl-R), and the layout of the text into rows
 * of a width with the cursor's row and column. */
#ifndef KIMI_UI_INPUT_H
#define KIMI_UI_INPUT_H

#include <stddef.h>

enum {
    INPUT_HISTORY_MAX = 1000,   /* entries kept in memory (the newest) */
    INPUT_PROMPT_WIDTH = 2,     /* "> " on the first row, "  " on the others */
};

typedef struct input input;

input *input_new(void);         /* NULL when out of memory */
void input_free(input *in);

/* The text being edited (NUL-terminated, len bytes) and the cursor as a byte offset. */
const char *input_text(const input *in, size_t *len);
size_t input_cursor(const input *in);
/* Replace the text (cursor at the end): /edit, history; cleaned as input_insert cleans. */
void input_set_text(input *in, const char *s, size_t len);
/* Put the cursor at byte pos (clamped to the text, moved back to a character's start). */
void input_set_cursor(input *in, size_t pos);
void input_clear(input *in);
int input_is_empty(const input *in);

/* Insert text at the cursor. CR LF and CR become LF; a tab stays a tab (sent as typed, shown
 * up to the next multiple of TEXT_TAB_STOP columns); other control characters are dropped
 * (pasted text cannot smuggle escapes in); each byte of ill-formed UTF-8 becomes U+FFFD. */
void input_insert(input *in, const char *s, size_t len);

typedef enum {
    INPUT_LEFT, INPUT_RIGHT,            /* one cluster (Ctrl-B, Ctrl-F, arrows) */
    INPUT_WORD_LEFT, INPUT_WORD_RIGHT,  /* Alt-B, Alt-F */
    INPUT_LINE_START, INPUT_LINE_END,   /* Ctrl-A / Home, Ctrl-E / End: of the current line */
    INPUT_BACKSPACE, INPUT_DELETE,      /* the cluster before / under the cursor (Ctrl-H, Ctrl-D) */
    INPUT_KILL_TO_END,                  /* Ctrl-K: to the end of the line (at its end: the newline) */
    INPUT_KILL_TO_START,                /* Ctrl-U: to the start of the line */
    INPUT_KILL_WORD_BACK,               /* Ctrl-W: the word before the cursor */
    INPUT_YANK,                         /* Ctrl-Y: the last killed text */
} input_edit;

void input_edit_apply(input *in, input_edit op);

/* Up/Down: move to the previous/next line of the text keeping the column. Returns 0 when the
 * cursor is already on the first/last line (the caller then walks the history). */
int input_line_up(input *in, int width);
int input_line_down(input *in, int width);

/* History: load the file (one entry per line; a line ending in '\' continues on the next, as
 * the plain REPL reads typed lines), add an entry (appended to the file when one was loaded or
 * given; an entry equal to the newest is not repeated), and walk it. Walking keeps what was
 * being typed: going past the newest entry brings it back. */
void input_history_load(input *in, const char *path);
void input_history_add(input *in, const char *s, size_t len);
int input_history_prev(input *in);   /* 0 when there is no older entry (nothing changes) */
int input_history_next(input *in);   /* 0 when already at the text being typed */
int input_history_count(const input *in);

/* Ctrl-R: incremental search back through the history for entries containing the query. While
 * searching the text shown is the match (or what was typed when nothing matches). */
void input_search_start(input *in);
void input_search_type(input *in, const char *s, size_t len);  /* extend the query */
void input_search_backspace(input *in);
void input_search_older(input *in);   /* Ctrl-R again: the next older match */
void input_search_accept(input *in);  /* keep the match as the text being edited */
void input_search_cancel(input *in);  /* back to what was typed before the search */
int input_searching(const input *in);
const char *input_search_query(const input *in);
int input_search_failed(const input *in); /* the query matches nothing */

/* The text laid out in rows of width columns (prompt included: each row starts at column
 * INPUT_PROMPT_WIDTH); rows break at newlines and at the width, between clusters; a tab
 * reaches the next tab stop from the row's start, cut at the row's end (text_displayable
 * shows a row that way). */
typedef struct {
    size_t start, end;  /* the row's bytes of the text (no newline) */
} input_row;

/* Lay out: returns the number of rows (>= 1); rows[0..min(n, cap)) are filled; the cursor's row
 * and column (screen column, prompt included) go to *cur_row and *cur_col. */
int input_layout(const input *in, int width, input_row *rows, int cap, int *cur_row, int *cur_col);

#endif
