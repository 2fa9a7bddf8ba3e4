/* render_model: the transcript as the full-screen view shows it, without curses: blocks (user
 * message, reasoning, answer, tool call, note, error) laid out lazily into display rows cached
 * per block and width, their fold state, a scroll position that follows the stream only at the
 * bottom, block focus, and frames of the visible rows with per-row change flags.
 *
 * How the view uses it: render_model_set_size() on start and SIGWINCH; the app appends blocks
 * and streams text into the last one; whenever render_model_dirty() says so, the view takes
 * render_model_frame() and repaints only the rows marked changed (erase the row, paint each
 * span at its column with theme style[span.element] plus span.attrs).
 *
 * Cost: a streamed token re-lays out only the unfinished last line of its block (a table: the
 * table); a frame lays out only the blocks it shows (each once per width and change); scrolling
 * walks only the blocks it passes; fold-all, mode changes and resizes are O(1) and re-lay out
 * lazily what is shown next. Nothing is proportional to the transcript's length.
 * Block indexes are stable until render_model_truncate(). */
#ifndef KIMI_UI_RENDER_MODEL_H
#define KIMI_UI_RENDER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/error.h"

typedef enum {
    RM_USER,      /* the user's message: plain text, "you" in the gutter */
    RM_REASONING, /* the model's reasoning: plain text, dimmed, folds */
    RM_ANSWER,    /* the model's answer: markdown-lite */
    RM_TOOL,      /* a tool call box: name, id, arguments (streamed), state, result (folds) */
    RM_NOTE,      /* info lines and command output */
    RM_ERROR,     /* error lines */
} rm_block_kind;

typedef enum {
    RM_REASONING_COLLAPSED, /* one line "▸ thought for X s · N tokens" (the default) */
    RM_REASONING_EXPANDED,  /* the header and the whole text */
    RM_REASONING_HIDDEN,    /* nothing once done; only the live header while streaming */
} rm_reasoning_mode;

typedef enum {
    RM_TOOL_WAITING,  /* waiting for approval */
    RM_TOOL_RUNNING,
    RM_TOOL_DONE,
    RM_TOOL_FAILED,   /* failed, timeout, bad arguments, unknown tool */
    RM_TOOL_DENIED,   /* denied, cancelled */
} rm_tool_state;

enum {
    RM_GUTTER = 7,           /* columns left of the messages ("  kimi "); RM_GUTTER_NARROW below
                                RM_GUTTER_MIN */
    RM_GUTTER_MIN = 30,      /* narrower transcripts drop the labels */
    RM_GUTTER_NARROW = 1,    /* the focus marker's column: it never covers a box's corner */
    RM_LIVE_REASONING_ROWS = 6,
    RM_FOLDED_RESULT_ROWS = 3,
};

typedef struct render_model render_model;

/* One painted piece of a row: s[0..len) (UTF-8) from screen column col, width columns wide. */
typedef struct {
    const char *s;
    uint32_t len;
    uint16_t col;
    uint16_t width;
    uint8_t element; /* theme_element */
    uint8_t attrs;   /* THEME_ATTR_* to add to the element's style */
} rm_span;

typedef struct {
    const rm_span *spans; /* [n_spans], in column order; an empty row has none */
    int n_spans;
    int block;            /* the block shown, -1 for an empty row below the transcript */
    int changed;          /* differs from the same screen row of the previous frame */
} rm_row;

typedef struct {
    const rm_row *rows;   /* [n_rows] = the height; valid until the next call on the model */
    int n_rows;
    int any_changed;
    int following;        /* the view is at the bottom and follows the stream */
    int new_below;        /* scrolled up and something changed below: show "↓ new" */
} rm_frame;

render_model *render_model_new(void); /* NULL when out of memory */
void render_model_free(render_model *rm);

/* The transcript area in cells (clamped to >= 1). Layouts are redone lazily. */
void render_model_set_size(render_model *rm, int width, int height);

/* Append a block with its first text (may be empty). Returns its index, or -1 with err filled
 * (KIMI_ERR_NOMEM). A reasoning, answer or tool block starts live (streaming). */
int render_model_append(render_model *rm, rm_block_kind kind, const char *text, size_t len,
                        kimi_err *err);
/* Append a tool-call box; the arguments follow through render_model_append_text(). */
int render_model_append_tool(render_model *rm, const char *name, const char *call_id,
                             kimi_err *err);
/* Stream text into block b: message text, or a tool call's arguments (shown raw while they are
 * not valid JSON, pretty-printed once they are). 0, or KIMI_ERR_NOMEM with err filled. */
int render_model_append_text(render_model *rm, int b, const char *text, size_t len,
                             kimi_err *err);
/* The end of block b's stream: live reasoning folds to one line (unless expanded). */
void render_model_finish(render_model *rm, int b);
/* Reasoning header numbers (tokens < 0 or seconds < 0: unknown, left out). */
void render_model_set_reasoning_stats(render_model *rm, int b, int tokens, double seconds);
/* Tool names, ids and labels are shown in their displayable form (controls as ^X).
 * A tool call's state and duration (seconds < 0: not shown); label replaces the state's
 * default word ("waiting for approval", "running", "done", "failed", "denied") when not NULL,
 * e.g. "timeout", "exit 3". */
int render_model_set_tool_state(render_model *rm, int b, rm_tool_state state, const char *label,
                                double seconds, kimi_err *err);
/* A tool call's result (replaces any earlier one). */
int render_model_set_tool_result(render_model *rm, int b, const char *text, size_t len,
                                 kimi_err *err);
/* Drop blocks n.. (/undo, /retry, /new). Focus and scroll position are kept where they can be. */
void render_model_truncate(render_model *rm, int n);
int render_model_block_count(const render_model *rm);
rm_block_kind render_model_block_kind(const render_model *rm, int b);
/* Block b's text as given (markdown source, reasoning, a tool call's arguments), for `y`
 * (copy) and export; "" for none. Valid until the block changes. */
const char *render_model_block_text(const render_model *rm, int b, size_t *len);
/* A tool call's result as given; "" for none. */
const char *render_model_tool_result(const render_model *rm, int b, size_t *len);

/* Fold or unfold one reasoning or tool block (others ignore it); it then stays so until the
 * next global change below. */
void render_model_toggle_fold(render_model *rm, int b);
/* Whether block b shows less than all of it (collapsed or hidden reasoning, folded result). */
int render_model_is_folded(render_model *rm, int b);
/* /reasoning collapsed|expanded|hidden: every reasoning block, O(1). */
void render_model_set_reasoning_mode(render_model *rm, rm_reasoning_mode mode);
rm_reasoning_mode render_model_reasoning_mode(const render_model *rm);
/* Ctrl-T: expanded when not, else collapsed; returns the new mode. */
rm_reasoning_mode render_model_toggle_all_reasoning(render_model *rm);
/* /tools expanded|folded: every tool result, O(1). */
void render_model_set_tools_expanded(render_model *rm, int expanded);

/* Scroll by rows (< 0 up). Reaching the bottom resumes following the stream. */
void render_model_scroll(render_model *rm, int rows);
/* PgUp (pages < 0) / PgDn: a page is the height less one row, kept for context. */
void render_model_scroll_page(render_model *rm, int pages);
void render_model_scroll_to_top(render_model *rm);
void render_model_scroll_to_bottom(render_model *rm);
/* Ctrl-Up (dir < 0) / Ctrl-Down: put the previous / next user message at the top of the view.
 * Returns its block, or -1 when there is none (nothing moves). */
int render_model_jump_user(render_model *rm, int dir);

/* Rows of the transcript below the view (0 while it follows the end): "↑ 37 lines above the
 * end". Walks the blocks below the view (their rows are cached per width): call it when idle
 * and scrolled up, not for every streamed token. */
long render_model_rows_below(render_model *rm);

/* Tab mode: the focused block (-1: none), shown with a marker in the gutter and scrolled into
 * view. render_model_focus_move() steps to the previous (dir < 0) or next shown block, starting
 * from the bottom of the view when none is focused; returns the focused block. */
void render_model_focus(render_model *rm, int b);
int render_model_focus_move(render_model *rm, int dir);
int render_model_focused(const render_model *rm);

/* Search highlighting (Ctrl-F): every occurrence of query[0..len) in the texts the frames show
 * (messages, reasoning, tool arguments and results; not labels, headers or borders) is painted
 * in THEME_SEARCH_MATCH, and the current_ordinal-th (from 0) of text current_text in
 * THEME_SEARCH_CURRENT (texts numbered as the view's search does: 2 * block its text, 2 * block
 * + 1 a tool's result; -1 none). Matching is ui/search's (smart case), on the text as shown, a
 * match split by a soft wrap marked on both rows. len 0 turns it off. Unchanged arguments cost
 * nothing; a change repaints the rows it touches. A frame finds the matches of each row it
 * shows (and the wrapped rows around it as far as the query reaches), the current match once per
 * change of the search, its block or the width: never the whole transcript. 0, or
 * KIMI_ERR_NOMEM with err filled (then off). */
int render_model_set_search(render_model *rm, const char *query, size_t len, int current_text,
                            int current_ordinal, kimi_err *err);

/* Whether anything changed since the last frame (content, fold, scroll, focus, size). */
int render_model_dirty(const render_model *rm);
/* The next frame marks every row changed: after a theme change, or when something else (help,
 * a dialog) was painted over the transcript. */
void render_model_repaint(render_model *rm);
/* The visible rows now. Valid until the next call on rm. */
const rm_frame *render_model_frame(render_model *rm);

/* Rows block b takes at the current width (laying it out). */
int render_model_block_rows(render_model *rm, int b);
/* The sum over all blocks: O(transcript), for tests and export, never per keystroke. */
long render_model_total_rows(render_model *rm);
/* A row as plain text, gaps filled with spaces (tests, plain dumps). Returns the bytes
 * written to buf (NUL-terminated, cut to cap - 1). */
size_t render_model_row_text(const rm_row *row, char *buf, size_t cap);

#endif
