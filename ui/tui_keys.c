/* tui_keys: the full-screen view's keys. */
#include "ui/tui_keys.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#include <term.h>

#include "app/chat/commands.h"
#include "engine/base/array.h"
#include "engine/base/monotonic.h"
#include "engine/text/utf8.h"
#include "ui/tui_paint.h"

static void copy_block(tui *t, int b)
{
    size_t len;
    const char *s = render_model_block_text(t->rm, b, &len);
    if (render_model_block_kind(t->rm, b) == RM_TOOL) {
        size_t rlen;
        const char *r = render_model_tool_result(t->rm, b, &rlen);
        if (rlen) {
            s = r;
            len = rlen;
        }
    }
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    strbuf out = {0};
    strbuf_str(&out, "\033]52;c;");
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)u[i] << 16 | (i + 1 < len ? (unsigned)u[i + 1] << 8 : 0) | (i + 2 < len ? u[i + 2] : 0);
        char q[4] = {b64[v >> 18 & 63], b64[v >> 12 & 63], i + 1 < len ? b64[v >> 6 & 63] : '=',
                     i + 2 < len ? b64[v & 63] : '='};
        strbuf_add(&out, q, 4);
    }
    strbuf_str(&out, "\a");
    if (out.data) {
        ssize_t ignored = write(STDOUT_FILENO, out.data, out.len);
        (void)ignored;
        char msg[96];
        snprintf(msg, sizeof msg, "copied %zu bytes to the clipboard (OSC 52)", len);
        tui_hint(t, msg);
    }
    free(out.data);
}

static void submit(tui *t)
{
    size_t len;
    const char *text = input_text(t->in, &len);
    /* a copy: input_set_text must not be given the input's own text */
    char *copy = strndup(text, len);
    if (!copy)
        return;
    if (len && copy[len - 1] == '\\') {
        input_set_text(t->in, copy, len - 1);
        input_insert(t->in, "\n", 1);
        free(copy);
        return;
    }
    input_history_add(t->in, copy, len);
    kimi_err err = {0};
    /* cleared first: /edit fills the input while the line runs; a message that could not be
       sent comes back, a command that failed does not (its error is on screen, Up recalls it,
       and the next command is not typed onto its end) */
    input_clear(t->in);
    command c;
    kimi_err parse_err = {0};
    t->new_conversation = copy[0] == '/' && command_parse(copy, len, &c, &parse_err) == 0 &&
                          (c.id == CMD_NEW || c.id == CMD_LOAD);
    int rc = app_submit_line(t->a, copy, len, &err);
    t->new_conversation = 0;
    if (rc == 0)
        render_model_scroll_to_bottom(t->rm);
    else if (copy[0] != '/')
        input_set_text(t->in, copy, len);
    free(copy);
}

static void stop(tui *t)
{
    if (app_busy(t->a)) {
        /* before app_stop: stopping at the approval prompt ends the turn at once (turn_done) */
        t->state = GEN_STOPPING;
        t->approval = -1;
        t->dirty = 1;
        app_stop(t->a);
    }
}

static void scroll_key(tui *t, int key)
{
    switch (key) {
    case KEY_PPAGE: render_model_scroll_page(t->rm, -1); break;
    case KEY_NPAGE: render_model_scroll_page(t->rm, 1); break;
    case KEY_SR: case K_SHIFT_UP: render_model_scroll(t->rm, -1); break;
    case KEY_SF: case K_SHIFT_DOWN: render_model_scroll(t->rm, 1); break;
    case K_CTRL_HOME: render_model_scroll_to_top(t->rm); break;
    case K_CTRL_END: render_model_scroll_to_bottom(t->rm); break;
    case K_CTRL_UP: render_model_jump_user(t->rm, -1); break;
    case K_CTRL_DOWN: render_model_jump_user(t->rm, 1); break;
    }
}

static int is_scroll_key(int key)
{
    return key == KEY_PPAGE || key == KEY_NPAGE || key == KEY_SR || key == KEY_SF || key == K_SHIFT_UP ||
           key == K_SHIFT_DOWN || key == K_CTRL_HOME || key == K_CTRL_END || key == K_CTRL_UP || key == K_CTRL_DOWN;
}

static void mouse_event(tui *t)
{
    MEVENT ev;
    if (getmouse(&ev) != OK)
        return;
    if (ev.bstate & BUTTON4_PRESSED)
        render_model_scroll(t->rm, -3);
#ifdef BUTTON5_PRESSED
    else if (ev.bstate & BUTTON5_PRESSED)
        render_model_scroll(t->rm, 3);
#endif
    else if ((ev.bstate & (BUTTON1_CLICKED | BUTTON1_PRESSED)) && ev.y >= 0 && ev.y < t->trans_h && t->row_block &&
             t->row_block[ev.y] >= 0)
        render_model_toggle_fold(t->rm, t->row_block[ev.y]);
}

/* A key in Tab mode. */
static void focus_key(tui *t, int key, int is_char)
{
    int b = render_model_focused(t->rm);
    if ((is_char && (key == '\t' || key == 27)) || (!is_char && key == KEY_BTAB)) {
        t->focus = 0;
        render_model_focus(t->rm, -1);
    } else if ((!is_char && key == KEY_UP) || (is_char && key == 'k')) {
        render_model_focus_move(t->rm, -1);
    } else if ((!is_char && key == KEY_DOWN) || (is_char && key == 'j')) {
        render_model_focus_move(t->rm, 1);
    } else if ((is_char && (key == '\r' || key == '\n' || key == ' ')) || (!is_char && key == KEY_ENTER)) {
        if (b >= 0)
            render_model_toggle_fold(t->rm, b);
    } else if (is_char && key == 'y') {
        if (b >= 0)
            copy_block(t, b);
    } else if (!is_char && is_scroll_key(key)) {
        scroll_key(t, key);
    }
    t->input_dirty = 1;
}

/* A key while a call waits for approval; 1 when it was taken. The keyboard belongs to the
 * question (issue 18: typing "Cancel" answered it with the "a" and left "Cncel" in the input):
 * y, n and a twice answer; Esc and Ctrl-C stop the turn and the view's keys (scrolling, the
 * mouse, Tab focus) work as ever; every other key, Enter too, types nothing and says what the
 * question wants. A y, a or n within APPROVAL_TYPING_S of such a key is a word being typed
 * ("Cancel"), not an answer. */
#define APPROVAL_TYPING_S 0.5      /* keys closer than this to a non-answer are typing */

static int approval_key(tui *t, int key, int is_char, int alt)
{
    if (!is_char) {
        if (is_scroll_key(key) || key == KEY_BTAB)
            return 0;
        tui_hint(t, "answer y, a or n");
        return 1;
    }
    if (!alt && (key == 27 || key == 3 || key == '\t'))
        return 0;
    int answer = alt ? 0 : key == 'Y' ? 'y' : key == 'A' ? 'a' : key == 'N' ? 'n' : key;
    double now = monotonic_seconds();
    if (t->approval_stray_at && now - t->approval_stray_at < APPROVAL_TYPING_S)
        answer = 0;
    if (answer == 'a' && !t->approval_always) {
        t->approval_always = 1;
        t->flash[0] = 0;            /* the question's "a again ..." shows at once */
        return 1;
    }
    if (answer != 'y' && answer != 'a' && answer != 'n') {
        t->approval_stray_at = now;
        t->approval_always = 0;     /* the a before it is no longer a deliberate first a */
        tui_hint(t, "answer y, a or n");
        return 1;
    }
    int index = t->approval;
    t->approval = -1;
    t->approval_always = 0;
    app_approve(t->a, index, answer == 'y' ? TOOL_APPROVE_ONCE : answer == 'a' ? TOOL_APPROVE_ALWAYS : TOOL_DENY);
    return 1;
}

/* One key from read_wch (is_char: a character, else a KEY_ code); alt: Esc came before it. */
void tui_handle_key(tui *t, int key, int is_char, int alt)
{
    t->dirty = 1;
    t->input_dirty = 1;
    if (t->paste) {
        if (!is_char && key == K_PASTE_END) {
            t->paste = 0;
            if (t->approval >= 0)   /* pasted text is no answer and does not go to the input */
                tui_hint(t, "answer y, a or n");
            else
                input_insert(t->in, t->paste_buf.data ? t->paste_buf.data : "", t->paste_buf.len);
            free(t->paste_buf.data);
            t->paste_buf = (strbuf){0};
        } else if (is_char) {
            char mb[8];
            wchar_t wc = (wchar_t)key;
            int n = wctomb(mb, wc);
            if (n > 0)
                strbuf_add(&t->paste_buf, mb, (size_t)n);
        }
        return;
    }
    if (!is_char && key == K_PASTE_BEGIN) {
        t->paste = 1;
        return;
    }
    if (!is_char && key == KEY_RESIZE)
        return;
    if (t->help) {
        tui_help_toggle(t, 0);
        return;
    }
    if (!is_char && key == KEY_F(1)) {
        tui_help_toggle(t, 1);
        return;
    }
    if (!is_char && key == KEY_MOUSE) {
        mouse_event(t);
        return;
    }
    if (is_char && key == 12) { /* Ctrl-L */
        tui_full_redraw(t);
        return;
    }
    if (t->approval >= 0 && approval_key(t, key, is_char, alt))
        return;
    if (t->focus) {
        focus_key(t, key, is_char);
        return;
    }
    if (input_searching(t->in)) {
        if (is_char && key == 18) {
            input_search_older(t->in);
            return;
        }
        if (is_char && (key == 27 || key == 7)) {
            input_search_cancel(t->in);
            return;
        }
        if ((is_char && (key == 127 || key == 8)) || (!is_char && key == KEY_BACKSPACE)) {
            input_search_backspace(t->in);
            return;
        }
        if (is_char && key >= 32 && !alt) {
            char mb[8];
            int n = wctomb(mb, (wchar_t)key);
            if (n > 0)
                input_search_type(t->in, mb, (size_t)n);
            return;
        }
        input_search_accept(t->in);
        if (is_char && (key == '\r' || key == '\n'))
            return; /* Enter keeps the match in the input for a look before sending */
    }
    if (!is_char && is_scroll_key(key)) {
        scroll_key(t, key);
        return;
    }
    if (alt && is_char) {
        switch (key) {
        case 'b': case 'B': input_edit_apply(t->in, INPUT_WORD_LEFT); return;
        case 'f': case 'F': input_edit_apply(t->in, INPUT_WORD_RIGHT); return;
        case '\r': case '\n': input_insert(t->in, "\n", 1); return;
        }
        return;
    }
    if (!is_char) {
        switch (key) {
        case KEY_LEFT: input_edit_apply(t->in, INPUT_LEFT); break;
        case KEY_RIGHT: input_edit_apply(t->in, INPUT_RIGHT); break;
        case KEY_HOME: input_edit_apply(t->in, INPUT_LINE_START); break;
        case KEY_END: input_edit_apply(t->in, INPUT_LINE_END); break;
        case KEY_BACKSPACE: input_edit_apply(t->in, INPUT_BACKSPACE); break;
        case KEY_DC: input_edit_apply(t->in, INPUT_DELETE); break;
        case KEY_ENTER: submit(t); break;
        case KEY_UP:
            if (!input_line_up(t->in, t->cols))
                input_history_prev(t->in);
            break;
        case KEY_DOWN:
            if (!input_line_down(t->in, t->cols))
                input_history_next(t->in);
            break;
        case KEY_BTAB: break;
        }
        return;
    }
    switch (key) {
    case 27: /* Esc */
        stop(t);
        return;
    case 3: /* Ctrl-C */
        if (app_busy(t->a)) {
            stop(t);
        } else if (!input_is_empty(t->in)) {
            input_clear(t->in);
        } else {
            tui_hint(t, "Ctrl-D on an empty input or /quit leaves kimi-chat");
        }
        return;
    case 4: /* Ctrl-D */
        if (input_is_empty(t->in)) {
            stop(t);
            t->quit = 1;
        } else {
            input_edit_apply(t->in, INPUT_DELETE);
        }
        return;
    case '\r': submit(t); return;
    case '\n': input_insert(t->in, "\n", 1); return;
    case '\t':
        t->focus = 1;
        render_model_focus_move(t->rm, -1);
        return;
    case 1: input_edit_apply(t->in, INPUT_LINE_START); return;
    case 5: input_edit_apply(t->in, INPUT_LINE_END); return;
    case 2: input_edit_apply(t->in, INPUT_LEFT); return;
    case 6: input_edit_apply(t->in, INPUT_RIGHT); return;
    case 11: input_edit_apply(t->in, INPUT_KILL_TO_END); return;
    case 21: input_edit_apply(t->in, INPUT_KILL_TO_START); return;
    case 23: input_edit_apply(t->in, INPUT_KILL_WORD_BACK); return;
    case 25: input_edit_apply(t->in, INPUT_YANK); return;
    case 8: case 127: input_edit_apply(t->in, INPUT_BACKSPACE); return;
    case 18: input_search_start(t->in); return;
    case 20: /* Ctrl-T */
        render_model_toggle_all_reasoning(t->rm);
        return;
    case 16: /* Ctrl-P / Ctrl-N: history, as readline */
        input_history_prev(t->in);
        return;
    case 14:
        input_history_next(t->in);
        return;
    }
    if (key >= 32 && key != 127) {
        char mb[8];
        int n = wctomb(mb, (wchar_t)key);
        if (n > 0)
            input_insert(t->in, mb, (size_t)n);
    }
}

/* A key, handled at once, or while the model loads (no chat yet): Ctrl-C stops the load (one
 * typed, not one inside a paste), and anything else waits for the chat (typed ahead; a key that
 * finds no room is dropped). */
static void take_key(tui *t, int key, int is_char, int alt)
{
    if (t->a) {
        tui_handle_key(t, key, is_char, alt);
        return;
    }
    if (!is_char && (key == K_PASTE_BEGIN || key == K_PASTE_END))
        t->typed_paste = key == K_PASTE_BEGIN;
    if (is_char && key == 3 && !t->typed_paste)
        t->load_cancelled = 1;
    else if (!array_reserve(&t->typed_ahead, &t->typed_ahead_cap, t->n_typed_ahead + 1, sizeof *t->typed_ahead))
        t->typed_ahead[t->n_typed_ahead++] = (typed_key){key, is_char, alt};
}

/* get_wch, except that bytes which are not UTF-8 become U+FFFD, one for each maximal ill-formed
 * subpart (as pasted text and the plain REPL do), and the keys behind them still arrive:
 * ncurses' get_wch keeps collecting bytes after an ill-formed one and drops them all. A
 * sequence cut short (its next byte not there within CONTINUATION_WAIT_MS) is one U+FFFD: a
 * terminal writes a character's bytes together, but a slow link may split them. */
enum { CONTINUATION_WAIT_MS = 200 };

static int read_wch(wint_t *ch)
{
    int c = getch();
    if (c == ERR)
        return ERR;
    if (c >= KEY_MIN) {
        *ch = (wint_t)c;
        return KEY_CODE_YES;
    }
    uint8_t seq[4] = {(uint8_t)c};
    size_t n = 1, len = 1;
    int kind;
    while ((kind = utf8_sequence(seq, n, &len)) == UTF8_SHORT && n < sizeof seq) {
        timeout(CONTINUATION_WAIT_MS);
        c = getch();
        nodelay(stdscr, TRUE);
        if (c == ERR)
            break;
        if (c >= KEY_MIN || c < 0x80 || c > 0xBF) {
            ungetch(c); /* not a continuation byte: the cut sequence ends before it */
            break;
        }
        seq[n++] = (uint8_t)c;
    }
    if (kind == UTF8_OK) {
        size_t next;
        *ch = utf8_decode_valid(seq, 0, &next);
        return OK;
    }
    if (kind == UTF8_BAD && len < n)
        ungetch(seq[n - 1]); /* a byte that began no part of this sequence (at most the last) */
    *ch = 0xFFFD;
    return OK;
}

/* Enter with text right behind it (within the escape delay: faster than anyone types) is a
 * line break inside pasted text, where the terminal does not bracket pastes; only while the
 * input is being edited (Enter means something else in the transcript or a prompt). The key
 * read to tell goes to *next (rc in *next_rc; ERR when none came). */
static int enter_in_paste(const tui *t, wint_t *next, int *next_rc)
{
    *next_rc = ERR;
    if (t->paste || t->focus || t->help || t->approval >= 0 || input_searching(t->in))
        return 0;
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    if (poll(&p, 1, get_escdelay()) <= 0)
        return 0;
    *next_rc = read_wch(next);
    /* text follows; Enter then Esc (or a function key) are two keys */
    return *next_rc == OK && *next != 27 && *next != 127 && (*next >= 32 || *next == '\r' || *next == '\t');
}

void tui_read_keys(tui *t)
{
    wint_t ch;
    int rc;
    int read_ahead = 0; /* ch, rc hold a key already read */
    while (read_ahead || (rc = read_wch(&ch)) != ERR) {
        read_ahead = 0;
        int alt = 0;
        if (rc == OK && ch == 27 && !t->paste) {
            /* Esc with another key right behind it: Alt-key; alone: Esc */
            wint_t next;
            int rc2 = read_wch(&next);
            if (rc2 == ERR || rc2 == KEY_CODE_YES) {
                /* alone, or before a function key (Esc then F1): two keys */
                take_key(t, 27, 1, 0);
                if (rc2 == ERR)
                    continue;
            } else {
                alt = 1;
            }
            rc = rc2;
            ch = next;
        }
        if (rc == OK && ch == '\r' && !alt) {
            wint_t next;
            int next_rc;
            if (enter_in_paste(t, &next, &next_rc))
                ch = '\n'; /* a paste without bracketed paste: keep its line breaks */
            take_key(t, (int)ch, 1, 0);
            if (t->quit)
                break;
            if (next_rc != ERR) {
                ch = next;
                rc = next_rc;
                read_ahead = 1;
            }
            continue;
        }
        take_key(t, (int)ch, rc == OK, alt);
        if (t->quit)
            break;
    }
}

static void bind_key(const char *capname, const char *fallback, int code)
{
    const char *s = tigetstr(capname);
    if (s && s != (const char *)-1)
        define_key(s, code);
    if (fallback)
        define_key(fallback, code);
}

void tui_keys_bind(void)
{
    bind_key("kUP5", "\033[1;5A", K_CTRL_UP);
    bind_key("kDN5", "\033[1;5B", K_CTRL_DOWN);
    bind_key("kHOM5", "\033[1;5H", K_CTRL_HOME);
    bind_key("kEND5", "\033[1;5F", K_CTRL_END);
    bind_key("kUP", "\033[1;2A", K_SHIFT_UP);
    bind_key("kDN", "\033[1;2B", K_SHIFT_DOWN);
    define_key("\033[200~", K_PASTE_BEGIN);
    define_key("\033[201~", K_PASTE_END);
}
