/* session_picker: the full screen's /sessions overlay (docs/UI.md, issue 24): the saved sessions
 * of the sessions folder, newest first, one row each (name, date, number of messages, first
 * user line); the keys move the selection, pick one to load, or ask "delete NAME? y/n" before a
 * deletion. It lists and paints; loading and deleting are the caller's (the chat core's /load
 * and app_delete_session), which reports back through session_picker_note/_reload. */
#ifndef KIMI_UI_SESSION_PICKER_H
#define KIMI_UI_SESSION_PICKER_H

#include <curses.h>

#include "app/chat/session.h"
#include "engine/base/error.h"
#include "ui/paint.h"

typedef enum {
    PICKER_KEEP,        /* the key moved, asked or was ignored: the picker stays */
    PICKER_CLOSE,       /* Esc, q, Ctrl-C */
    PICKER_LOAD,        /* Enter on a session: load session_picker_path */
    PICKER_DELETE,      /* y to "delete NAME? y/n": delete session_picker_path */
} picker_action;

typedef struct {
    char *dir;                  /* the sessions folder listed */
    session_entry *entries;     /* [n] newest first (session_list) */
    int n;
    int selected;               /* the entry the keys act on; 0 when the list is empty */
    int top;                    /* the first entry shown (the list scrolls) */
    int page;                   /* entries the last paint showed (PgUp/PgDn step), >= 1 */
    int confirm;                /* "delete NAME? y/n" is asked: y deletes, any other key not */
    char note[256];             /* one line under the list (a refusal, what was deleted); "" none */
    WINDOW *win;
} session_picker;

/* List dir into a new picker (p is an output). */
int session_picker_open(session_picker *p, const char *dir, kimi_err *err);
/* List the folder again (after a deletion), keeping the selection's place. */
int session_picker_reload(session_picker *p, kimi_err *err);
void session_picker_close(session_picker *p);

/* One key (is_char: a character, else a KEY_ code). */
picker_action session_picker_key(session_picker *p, int key, int is_char);
/* The selected session's file, NULL when the list is empty. */
const char *session_picker_path(const session_picker *p);
/* Its name as /load takes it (the file name without .json), malloc'ed; NULL when none. */
char *session_picker_name(const session_picker *p);
/* Show text on the line under the list until the next key. */
void session_picker_note(session_picker *p, const char *text);

/* Paint the overlay centred on a rows x cols screen (a new window each time: the screen may have
 * been resized); wnoutrefresh only. Too small a screen shows what fits, down to nothing. */
void session_picker_paint(session_picker *p, const paint_palette *pal, int rows, int cols);

#endif
