/* tui_state: what the full-screen view's modules (tui, tui_mirror, tui_layout, tui_paint,
 * tui_keys) share: the view's state (struct tui) and the small helpers every one of them uses
 * (the clock, the one-line hint, notes in the transcript). Private to ui/tui*.c. */
#ifndef KIMI_UI_TUI_STATE_H
#define KIMI_UI_TUI_STATE_H

#include <stddef.h>

#include <curses.h>

#include "app/chat/app.h"
#include "app/chat/options.h"
#include "engine/base/array.h"
#include "ui/input.h"
#include "ui/paint.h"
#include "ui/render_model.h"
#include "ui/search.h"
#include "ui/session_picker.h"
#include "ui/theme.h"
#include "ui/tui.h"

enum {
    FRAME_US = 16667,               /* at most ~60 frames a second */
    FLASH_MS = 4000,                /* how long a one-line hint stays in the separator */
};

/* Keys that terminfo may not name; bound with define_key to these codes. */
enum {
    K_PASTE_BEGIN = KEY_MAX + 1, K_PASTE_END, K_CTRL_UP, K_CTRL_DOWN, K_CTRL_HOME, K_CTRL_END,
    K_SHIFT_UP, K_SHIFT_DOWN,
    K_SHIFT_ENTER,                  /* CSI 13;2u (kitty keyboard protocol), CSI 27;2;13~
                                       (xterm modifyOtherKeys); most terminals send a plain CR */
};

typedef enum {
    GEN_IDLE, GEN_LOADING, GEN_PREFILL, GEN_WAITING, GEN_THINKING, GEN_ANSWERING, GEN_CALLING,
    GEN_APPROVAL, GEN_TOOL, GEN_STOPPING,
} gen_state;

typedef struct {
    int key, is_char, alt;          /* as handle_key takes them */
} typed_key;

enum { SEARCH_OFF, SEARCH_TYPING, SEARCH_MOVING };

/* A big paste, shown in the input as its marker ("[pasted 200 lines, 11 KB]") and sent whole;
 * Ctrl-O shows it whole in the input (expanded) and folds it again. */
typedef struct {
    char marker[64];
    char *text;                     /* [len] as the input holds it (line breaks as LF) */
    size_t len;
    int expanded;                   /* the input shows the text, not the marker */
} tui_paste;

/* Free the folded pastes (the input was sent, or the view ends). */
void tui_pastes_clear(tui *t);

struct tui {
    const app_options *opt;
    app *a;                         /* NULL while app_open runs */
    render_model *rm;
    input *in;
    theme th;
    paint_palette pal;
    paint_depth depth;
    SCREEN *screen;
    int active;                     /* curses holds the terminal */
    int rows, cols;

    /* layout */
    int trans_h;                    /* transcript rows */
    int input_h;                    /* input rows shown */
    int input_top;                  /* first input row shown (scrolled) */
    int *row_block;                 /* [trans_h] the block on each transcript row (mouse) */

    /* the answer streaming */
    gen_state state;
    int live_reasoning, live_answer;    /* blocks, -1 none */
    int last_reasoning;             /* the reasoning block of the current generation */
    int reasoning_pieces;
    double reasoning_start;
    int *call_block;                /* [n_call_block] call index -> tool block */
    int n_call_block;
    int gen_tokens;
    double first_token;             /* when this generation's first token came */
    double tok_s;                   /* the last answer's decode speed, or live */
    int shown_messages;             /* session messages mirrored into the render model */
    int *block_message;             /* [n_block_message] the session message each block shows,
                                       -1 for a note (info, error); see tag_blocks */
    int n_block_message, block_message_cap;
    int streamed_message;           /* the message the streamed blocks will be (the answer to come) */
    int pending_rebuild;            /* session_reset came during app_open */
    int new_conversation;           /* /new or /load is running: its reset starts the view clean */
    strbuf startup_notes;           /* notes said during app_open ("\0"-separated) */
    typed_key *typed_ahead;         /* [n_typed_ahead] keys that came while the model loaded,
                                       handled once the chat is up */
    size_t n_typed_ahead, typed_ahead_cap;
    int typed_paste;                /* the keys typed ahead are inside a bracketed paste */
    int load_cancelled;             /* Ctrl-C or a signal while the model loaded */
    char progress[200];
    int approval;                   /* call index waiting for y/a/n, -1 none */
    int approval_always;            /* "a" pressed once: a second "a" allows it for the session */
    double approval_stray_at;       /* when a key that is no answer (or any key before the
                                       question) last came, 0 none */
    char approval_name[96];
    char save_state[24];

    /* the view */
    int focus;                      /* Tab mode: the transcript has the keys */
    int help;                       /* F1 overlay shown */
    WINDOW *help_win;
    int help_top;                   /* the first help line shown (the help scrolls when taller) */
    int help_rows;                  /* help lines the window shows */
    session_picker *picker;         /* the /sessions overlay, NULL when closed; it has the keys */
    int paste;                      /* inside a bracketed paste */
    strbuf paste_buf;
    tui_paste *pastes;              /* [n_pastes] big pastes in the input (folded or not) */
    int n_pastes;
    size_t pastes_cap;
    char flash[200];
    double flash_until;
    double last_esc;                /* when Esc was last pressed (Esc Esc rewinds) */

    /* transcript search (Ctrl-F) */
    int search_mode;                /* SEARCH_OFF, SEARCH_TYPING (the query), SEARCH_MOVING (n/N) */
    strbuf search_query;
    search_result search_hits;      /* texts numbered 2 * block (its text) and 2 * block + 1 (a
                                       tool's result) */
    int search_match;               /* the match shown, -1 none */
    int quit;
    int suspend;                    /* Ctrl-Z or SIGTSTP: stop once the keys are read */
    int dirty;                      /* something to paint */
    int force;                      /* repaint every row */
    int input_dirty;
    int new_below;                  /* the last frame: scrolled up and something came below */
    double last_paint;
    char last_sep[512], last_status[512];
    strbuf fatal;                   /* the core broke: printed after the terminal is back */
};

/* ---- terminal restore on every path ---- */

/* A one-line hint in the separator for FLASH_MS. */
void tui_hint(tui *t, const char *text);
/* Blocks from..(the last) show session message `message` (-1: they are notes). */
void tui_tag_blocks(tui *t, int from, int message);
/* A finished note (RM_NOTE, RM_ERROR) at the end of the transcript. */
void tui_add_block(tui *t, rm_block_kind kind, const char *text);
/* text[0..len) goes into the input before what is typed there (a blank line between), the
 * cursor at the end: a queued message taken back, a rewound message. */
void tui_input_put_back(tui *t, const char *text, size_t len);

#endif
