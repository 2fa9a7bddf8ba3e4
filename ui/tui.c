/* tui: the full-screen ncurses view over the chat core (app.h) and the render model. */
#include "ui/tui.h"

#include <errno.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <curses.h>
#include <term.h>

#include "app/chat/commands.h"
#include "app/chat/paths.h"
#include "engine/base/array.h"
#include "engine/base/monotonic.h"
#include "ui/input.h"
#include "ui/paint.h"
#include "ui/progress_text.h"
#include "ui/render_model.h"
#include "ui/signal_pipe.h"
#include "ui/term_probe.h"
#include "ui/text_width.h"
#include "ui/theme.h"

enum {
    FRAME_US = 16667,               /* at most ~60 frames a second */
    FLASH_MS = 4000,                /* how long a one-line hint stays in the separator */
};

/* Keys that terminfo may not name; bound with define_key to these codes. */
enum {
    K_PASTE_BEGIN = KEY_MAX + 1, K_PASTE_END, K_CTRL_UP, K_CTRL_DOWN, K_CTRL_HOME, K_CTRL_END,
    K_SHIFT_UP, K_SHIFT_DOWN,
};

typedef enum {
    GEN_IDLE, GEN_LOADING, GEN_PREFILL, GEN_WAITING, GEN_THINKING, GEN_ANSWERING, GEN_CALLING,
    GEN_APPROVAL, GEN_TOOL, GEN_STOPPING,
} gen_state;

typedef struct {
    int key, is_char, alt;          /* as handle_key takes them */
} typed_key;

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
    double approval_stray_at;       /* when a key that is no answer last came, 0 none */
    char approval_name[96];
    char save_state[24];

    /* the view */
    int focus;                      /* Tab mode: the transcript has the keys */
    int help;                       /* F1 overlay shown */
    WINDOW *help_win;
    int paste;                      /* inside a bracketed paste */
    strbuf paste_buf;
    char flash[200];
    double flash_until;
    int quit;
    int dirty;                      /* something to paint */
    int force;                      /* repaint every row */
    int input_dirty;
    int new_below;                  /* the last frame: scrolled up and something came below */
    double last_paint;
    char last_sep[512], last_status[512];
    strbuf fatal;                   /* the core broke: printed after the terminal is back */
};

/* ---- terminal restore on every path ---- */

static struct termios saved_termios;
static int have_saved_termios;
static char crash_reset[256];       /* written by the crash handler: what endwin would send */
static size_t crash_reset_len;
static volatile sig_atomic_t curses_on;

/* A crash: endwin is not async-signal-safe, so do what it does by hand (the saved terminal
 * modes back, the alternate screen left, the cursor shown, attributes reset, paste and mouse
 * reporting off), then die of the same signal. */
static void on_crash(int sig)
{
    if (curses_on) {
        ssize_t ignored = write(STDOUT_FILENO, crash_reset, crash_reset_len);
        (void)ignored;
        if (have_saved_termios)
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_termios);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void add_reset(const char *s)
{
    if (!s || s == (const char *)-1)
        return;
    size_t n = strlen(s);
    if (crash_reset_len + n < sizeof crash_reset) {
        memcpy(crash_reset + crash_reset_len, s, n);
        crash_reset_len += n;
    }
}

static void install_signals(void)
{
    static const int handled[] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH};
    if (signal_pipe_install(handled, 4, 1))
        return;
    struct sigaction crash = {.sa_handler = on_crash, .sa_flags = SA_RESETHAND | SA_NODEFER};
    sigemptyset(&crash.sa_mask);
    /* a crash always gives the terminal back (a sanitizer's own handler included: on_crash
       re-raises with the default action) */
    int crashes[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof crashes / sizeof *crashes; i++)
        sigaction(crashes[i], &crash, NULL);
    /* every other signal whose default action ends the process (kill -QUIT, -USR1, an alarm, a
       CPU or file size limit); one already ignored or handled is left as it is */
    int fatal[] = {SIGQUIT, SIGTRAP, SIGSYS, SIGUSR1, SIGUSR2,
                   SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGPOLL,
#ifdef SIGSTKFLT
                   SIGSTKFLT,
#endif
#ifdef SIGPWR
                   SIGPWR,
#endif
    };
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++) {
        struct sigaction now;
        if (sigaction(fatal[i], NULL, &now) == 0 && now.sa_handler == SIG_DFL)
            sigaction(fatal[i], &crash, NULL);
    }
}


static void paste_mode(int on)
{
    const char *s = on ? "\033[?2004h" : "\033[?2004l";
    ssize_t ignored = write(STDOUT_FILENO, s, strlen(s));
    (void)ignored;
}

static void curses_end(tui *t)
{
    if (!t->active)
        return;
    if (t->help_win)
        delwin(t->help_win);
    t->help_win = NULL;
    endwin();
    paste_mode(0);
    t->active = 0;
    curses_on = 0;
}

static tui *atexit_tui;
static void restore_at_exit(void)
{
    if (atexit_tui)
        curses_end(atexit_tui);
}

/* ---- small helpers ---- */

static void hint(tui *t, const char *text)
{
    snprintf(t->flash, sizeof t->flash, "%s", text);
    t->flash_until = monotonic_seconds() + FLASH_MS / 1000.0;
    t->dirty = 1;
}

/* Blocks from..(the last) show session message `message` (-1: they are notes). A block never
 * tagged (out of memory) counts as a message that a reset drops, so a note may go but no message
 * is ever shown twice. */
static void tag_blocks(tui *t, int from, int message)
{
    int n = render_model_block_count(t->rm);
    if (from < 0 || from >= n)
        return;
    if (n > t->block_message_cap) {
        int cap = n > 2 * t->block_message_cap ? n : 2 * t->block_message_cap;
        int *grown = realloc(t->block_message, sizeof *grown * (size_t)cap);
        if (!grown)
            return;
        t->block_message = grown;
        t->block_message_cap = cap;
    }
    for (int b = t->n_block_message; b < from; b++)
        t->block_message[b] = INT_MAX;
    for (int b = from; b < n; b++)
        t->block_message[b] = message;
    t->n_block_message = n;
}

static void add_block(tui *t, rm_block_kind kind, const char *text)
{
    int b = render_model_append(t->rm, kind, text, strlen(text), NULL);
    if (b >= 0)
        render_model_finish(t->rm, b);
    tag_blocks(t, b, -1);
    t->dirty = 1;
}

/* The palette for the theme; says so when the terminal's colour pairs ran out. */
static void apply_palette(tui *t)
{
    paint_palette_init(&t->pal, &t->th, t->depth);
    int pair = t->pal.pair[THEME_TEXT];
    wbkgdset(stdscr, ' ' | (pair < 256 ? COLOR_PAIR(pair) : 0));
    if (t->pal.pairs_short) {
        char line[160];
        snprintf(line, sizeof line, "the terminal has %d colour pairs: %d theme elements keep its default colours",
                 COLOR_PAIRS, t->pal.pairs_short);
        add_block(t, RM_NOTE, line);
    }
}

static int load_theme(tui *t, const char *name, kimi_err *err)
{
    char *file = paths_theme_file(name, err);
    if (!file)
        return err->code;
    theme th;
    theme_init_default(&th);
    int rc = theme_load_file(&th, file, err);
    free(file);
    if (rc)
        return rc;
    t->th = th;
    if (t->active) {
        apply_palette(t);
        render_model_repaint(t->rm);
        t->force = t->dirty = 1;
    }
    return 0;
}

/* ---- mirroring the session into the render model ---- */

/* The render model's state and label of a call: state is an app_tool_state, or -1 for a word
 * of a session file that names none (shown as failed, in its own words). */
static rm_tool_state tool_state_of(int state, const char *word, int exit_status, const char **label, char *buf,
                                   size_t cap)
{
    *label = NULL;
    const char *name = state >= 0 ? app_tool_state_name((app_tool_state)state) : word;
    switch (state) {
    case APP_TOOL_RUNNING: return RM_TOOL_RUNNING;
    case APP_TOOL_WAITING: return RM_TOOL_WAITING;
    case APP_TOOL_DONE:
        if (exit_status) {
            snprintf(buf, cap, "exit %d", exit_status);
            *label = buf;
            return RM_TOOL_FAILED;
        }
        return RM_TOOL_DONE;
    case APP_TOOL_DENIED:
    case APP_TOOL_CANCELLED:
        *label = name;
        return RM_TOOL_DENIED;
    default:
        *label = name;
        return RM_TOOL_FAILED;
    }
}

static void set_tool(tui *t, int b, int state, const char *word, int exit_status, double seconds,
                     const char *result, size_t result_len)
{
    char buf[32];
    const char *label;
    rm_tool_state s = tool_state_of(state, word, exit_status, &label, buf, sizeof buf);
    render_model_set_tool_state(t->rm, b, s, label, s == RM_TOOL_WAITING ? -1 : seconds, NULL);
    if (result && s != RM_TOOL_RUNNING && s != RM_TOOL_WAITING)
        render_model_set_tool_result(t->rm, b, result, result_len, NULL);
    t->dirty = 1;
}

static void mirror_message(tui *t, const session *s, int i, int *call_blocks, int *n_calls)
{
    const chat_message *m = &s->conv.messages[i];
    const session_message_meta *meta = &s->meta[i];
    const char *content = m->content.s ? m->content.s : "";
    switch (m->role) {
    case CHAT_ROLE_USER:
        render_model_finish(t->rm, render_model_append(t->rm, RM_USER, content, m->content.len, NULL));
        break;
    case CHAT_ROLE_ASSISTANT: {
        if (m->reasoning.len) {
            int b = render_model_append(t->rm, RM_REASONING, m->reasoning.s, m->reasoning.len, NULL);
            if (meta->has_stats)
                render_model_set_reasoning_stats(t->rm, b, meta->reasoning_tokens, meta->reasoning_seconds);
            render_model_finish(t->rm, b);
        }
        if (m->content.len)
            render_model_finish(t->rm, render_model_append(t->rm, RM_ANSWER, content, m->content.len, NULL));
        *n_calls = 0;
        for (int k = 0; k < m->n_tool_calls && k < 64; k++) {
            const chat_tool_call *c = &m->tool_calls[k];
            int b = render_model_append_tool(t->rm, c->name ? c->name : "", c->id ? c->id : "", NULL);
            if (b < 0)
                continue;
            render_model_append_text(t->rm, b, c->arguments.s ? c->arguments.s : "", c->arguments.len, NULL);
            render_model_set_tool_state(t->rm, b, RM_TOOL_DENIED, "not run", -1, NULL);
            render_model_finish(t->rm, b);
            call_blocks[(*n_calls)++] = b;
        }
        break;
    }
    case CHAT_ROLE_TOOL: {
        /* the result goes into the box of the call it answers */
        const chat_message *owner = NULL;
        for (int j = i - 1; j >= 0 && !owner; j--)
            if (s->conv.messages[j].role == CHAT_ROLE_ASSISTANT)
                owner = &s->conv.messages[j];
        const char *state = meta->tool_state ? meta->tool_state : "done";
        for (int k = 0; owner && k < owner->n_tool_calls && k < *n_calls; k++)
            if (m->tool_call_id && owner->tool_calls[k].id && !strcmp(m->tool_call_id, owner->tool_calls[k].id))
                set_tool(t, call_blocks[k], app_tool_state_from_name(state), state, meta->exit_status,
                         meta->tool_state ? meta->tool_seconds : -1, content, m->content.len);
        break;
    }
    case CHAT_ROLE_SYSTEM: {
        strbuf b = {0};
        strbuf_str(&b, "system prompt: ");
        strbuf_add(&b, content, m->content.len);
        if (b.data)
            add_block(t, RM_NOTE, b.data);
        free(b.data);
        break;
    }
    case CHAT_ROLE_OTHER:
        add_block(t, RM_NOTE, content);
        break;
    }
}

/* Mirror session messages from..n into blocks (from is not a tool message: tool messages
 * always follow their assistant message within the range). */
static void mirror_from(tui *t, int from)
{
    const session *s = app_session(t->a);
    int call_blocks[64], n_calls = 0;
    for (int i = from; i < s->conv.n_messages; i++) {
        int first = render_model_block_count(t->rm);
        mirror_message(t, s, i, call_blocks, &n_calls);
        tag_blocks(t, first, i);
    }
    t->shown_messages = s->conv.n_messages;
    t->dirty = 1;
}

/* Session messages kept.. were cut or replaced: the view drops their blocks and shows the session
 * again from there. The notes among the dropped blocks (command output, errors) come back after
 * it, in their order, so none moves above the messages it followed: the user asked to drop
 * messages, not what was said. The blocks before the cut (the startup notes) stay as they are. */
static void show_session_from(tui *t, int kept)
{
    const session *s = app_session(t->a);
    if (kept > t->shown_messages)
        kept = t->shown_messages;
    if (kept > s->conv.n_messages)
        kept = s->conv.n_messages;
    while (kept > 0 && kept < s->conv.n_messages && s->conv.messages[kept].role == CHAT_ROLE_TOOL)
        kept--;
    int n = render_model_block_count(t->rm);
    int cut = t->n_block_message < n ? t->n_block_message : n;
    for (int b = 0; b < cut; b++)
        if (t->block_message[b] >= kept) {
            cut = b;
            break;
        }
    strbuf notes = {0}; /* the kept notes: kind byte, text, NUL; one after the other */
    for (int b = cut; b < t->n_block_message && b < n; b++)
        if (t->block_message[b] < 0) {
            size_t len;
            const char *text = render_model_block_text(t->rm, b, &len);
            char kind = (char)render_model_block_kind(t->rm, b);
            strbuf_add(&notes, &kind, 1);
            strbuf_add(&notes, text, len);
            strbuf_add(&notes, "", 1);
        }
    render_model_truncate(t->rm, cut);
    t->n_block_message = cut;
    t->live_answer = t->live_reasoning = t->last_reasoning = -1;
    t->n_call_block = 0;
    mirror_from(t, kept);
    for (size_t off = 0; !notes.failed && off < notes.len; off += strlen(notes.data + off + 1) + 2)
        add_block(t, (rm_block_kind)notes.data[off], notes.data + off + 1);
    free(notes.data);
    render_model_scroll_to_bottom(t->rm);
}

/* ---- app callbacks ---- */

static void end_reasoning(tui *t)
{
    if (t->live_reasoning >= 0) {
        render_model_set_reasoning_stats(t->rm, t->live_reasoning, t->reasoning_pieces, monotonic_seconds() - t->reasoning_start);
        render_model_finish(t->rm, t->live_reasoning);
        t->live_reasoning = -1;
        t->dirty = 1;
    }
}

static void end_answer(tui *t)
{
    if (t->live_answer >= 0) {
        render_model_finish(t->rm, t->live_answer);
        t->live_answer = -1;
    }
}

static void on_generation_begin(void *user, int round)
{
    tui *t = user;
    if (round == 0 && t->a)
        mirror_from(t, t->shown_messages);
    t->streamed_message = t->a ? app_session(t->a)->conv.n_messages : t->shown_messages;
    t->live_answer = t->live_reasoning = t->last_reasoning = -1;
    t->n_call_block = 0;
    t->gen_tokens = 0;
    t->first_token = 0;
    t->state = GEN_WAITING;
    t->dirty = 1;
}

static int call_box(tui *t, int call, const char *name, const char *id)
{
    if (call < 0 || call >= 1024)
        return -1;
    if (call >= t->n_call_block) {
        int *grown = realloc(t->call_block, sizeof *grown * (size_t)(call + 1));
        if (!grown)
            return -1;
        t->call_block = grown;
        for (int i = t->n_call_block; i <= call; i++)
            t->call_block[i] = -1;
        t->n_call_block = call + 1;
    }
    if (t->call_block[call] < 0) {
        t->call_block[call] = render_model_append_tool(t->rm, name ? name : "", id ? id : "", NULL);
        tag_blocks(t, t->call_block[call], t->streamed_message);
        /* a new box would say "waiting for approval": it is still being written */
        if (t->call_block[call] >= 0)
            render_model_set_tool_state(t->rm, t->call_block[call], RM_TOOL_RUNNING, "writing", -1, NULL);
    }
    return t->call_block[call];
}

static void on_stream(void *user, const parse_event *ev)
{
    tui *t = user;
    t->dirty = 1;
    double now = monotonic_seconds();
    if (ev->kind == PARSE_REASONING_TEXT || ev->kind == PARSE_CONTENT_TEXT || ev->kind == PARSE_TOOL_CALL_ARGS) {
        if (!t->first_token)
            t->first_token = now;
        t->gen_tokens++;
        t->progress[0] = 0;
    }
    switch (ev->kind) {
    case PARSE_REASONING_TEXT:
        if (t->live_reasoning < 0) {
            t->live_reasoning = t->last_reasoning = render_model_append(t->rm, RM_REASONING, "", 0, NULL);
            tag_blocks(t, t->live_reasoning, t->streamed_message);
            t->reasoning_pieces = 0;
            t->reasoning_start = now;
        }
        render_model_append_text(t->rm, t->live_reasoning, ev->text, ev->len, NULL);
        t->reasoning_pieces++;
        render_model_set_reasoning_stats(t->rm, t->live_reasoning, t->reasoning_pieces, now - t->reasoning_start);
        t->state = GEN_THINKING;
        break;
    case PARSE_CONTENT_TEXT:
        end_reasoning(t);
        if (t->live_answer < 0) {
            t->live_answer = render_model_append(t->rm, RM_ANSWER, "", 0, NULL);
            tag_blocks(t, t->live_answer, t->streamed_message);
        }
        render_model_append_text(t->rm, t->live_answer, ev->text, ev->len, NULL);
        t->state = GEN_ANSWERING;
        break;
    case PARSE_TOOL_CALL_BEGIN:
        end_reasoning(t);
        end_answer(t);
        t->state = GEN_CALLING;
        break;
    case PARSE_TOOL_CALL_ID:
        call_box(t, ev->call, ev->name, ev->text);
        break;
    case PARSE_TOOL_CALL_ARGS: {
        int b = call_box(t, ev->call, "", "");
        if (b >= 0)
            render_model_append_text(t->rm, b, ev->text, ev->len, NULL);
        break;
    }
    case PARSE_TOOL_CALL_END: {
        int b = call_box(t, ev->call, "", "");
        if (b >= 0 && !ev->valid)
            render_model_set_tool_state(t->rm, b, RM_TOOL_FAILED, "bad arguments", -1, NULL);
        break;
    }
    case PARSE_NOTE: {
        end_answer(t);
        strbuf b = {0};
        strbuf_str(&b, "note: ");
        strbuf_add(&b, ev->text, ev->len);
        if (b.data)
            add_block(t, RM_NOTE, b.data);
        free(b.data);
        break;
    }
    case PARSE_STOP:
        end_reasoning(t);
        end_answer(t);
        if (t->first_token && now > t->first_token)
            t->tok_s = t->gen_tokens / (now - t->first_token);
        break;
    }
}

static void paint_now(tui *t);

static void on_progress(void *user, const generator_progress *p)
{
    tui *t = user;
    progress_text(t->progress, sizeof t->progress, p);
    t->state = p->kind == GENERATOR_PROGRESS_LOAD ? GEN_LOADING
               : p->kind == GENERATOR_PROGRESS_PREFILL ? GEN_PREFILL : GEN_WAITING;
    if (p->total > 0 && p->done >= p->total) {
        t->progress[0] = 0;
        if (t->state == GEN_LOADING)
            t->state = GEN_IDLE;
    }
    t->dirty = 1;
    /* app_open blocks while the model loads: paint from here, at the frame rate */
    if (!t->a && monotonic_seconds() - t->last_paint >= FRAME_US / 1e6)
        paint_now(t);
}

static void on_answer_done(void *user, const chat_message *m, const session_message_meta *meta)
{
    tui *t = user;
    (void)m;
    if (t->last_reasoning >= 0 && meta->has_stats && meta->reasoning_tokens > 0)
        render_model_set_reasoning_stats(t->rm, t->last_reasoning, meta->reasoning_tokens, meta->reasoning_seconds);
    if (meta->has_stats && meta->decode_tok_s > 0)
        t->tok_s = meta->decode_tok_s;
    if (t->a)
        t->shown_messages = app_session(t->a)->conv.n_messages;
    t->dirty = 1;
}

static void on_tool_approval(void *user, const app_tool_call *c)
{
    tui *t = user;
    int b = call_box(t, c->index, c->name, c->id);
    if (b >= 0)
        set_tool(t, b, APP_TOOL_WAITING, NULL, 0, -1, NULL, 0);
    t->approval = c->index;
    t->approval_always = 0;
    t->approval_stray_at = 0;
    snprintf(t->approval_name, sizeof t->approval_name, "%s", c->name);
    t->state = GEN_APPROVAL;
    render_model_scroll_to_bottom(t->rm);
}

static void on_tool_update(void *user, const app_tool_call *c)
{
    tui *t = user;
    int b = call_box(t, c->index, c->name, c->id);
    if (b >= 0) {
        set_tool(t, b, (int)c->state, NULL, c->exit_status, c->seconds, c->result, c->result_len);
        if (c->state != APP_TOOL_RUNNING)
            render_model_finish(t->rm, b);
    }
    t->state = c->state == APP_TOOL_RUNNING ? GEN_TOOL : GEN_WAITING;
    if (t->a)
        t->shown_messages = app_session(t->a)->conv.n_messages;
}

static void on_turn_done(void *user, app_turn_outcome outcome, const char *message)
{
    tui *t = user;
    end_reasoning(t);
    end_answer(t);
    t->state = GEN_IDLE;
    t->approval = -1;
    t->progress[0] = 0;
    if (outcome != APP_TURN_DONE && message && *message)
        add_block(t, outcome == APP_TURN_STOPPED ? RM_NOTE : RM_ERROR, message);
    if (t->a)
        t->shown_messages = app_session(t->a)->conv.n_messages;
}

static void on_info(void *user, const char *text)
{
    tui *t = user;
    add_block(t, RM_NOTE, text);
    if (!t->a) {
        strbuf_add(&t->startup_notes, text, strlen(text) + 1);
        paint_now(t);
    }
}

static void on_error(void *user, const char *line)
{
    tui *t = user;
    add_block(t, RM_ERROR, line);
}

static void on_session_reset(void *user, int kept)
{
    tui *t = user;
    if (t->a && t->new_conversation) {
        /* another conversation: what was said about the old one (errors, /stats, /help) goes */
        render_model_truncate(t->rm, 0);
        t->n_block_message = 0;
        t->shown_messages = 0;
        show_session_from(t, 0);
    } else if (t->a)
        show_session_from(t, kept);
    else
        t->pending_rebuild = 1;
}

static void on_saved(void *user, const char *path, int ok)
{
    tui *t = user;
    (void)path;
    snprintf(t->save_state, sizeof t->save_state, "%s", ok ? "saved" : "save failed");
    t->dirty = 1;
}

static void help_toggle(tui *t, int on);

static int on_view_command(void *user, const char *name, const char *arg, kimi_err *err)
{
    tui *t = user;
    if (!strcmp(name, "theme")) {
        if (load_theme(t, arg, err))
            return err->code;
        char line[160];
        snprintf(line, sizeof line, "theme %s", arg);
        add_block(t, RM_NOTE, line);
    } else if (!strcmp(name, "reasoning")) {
        rm_reasoning_mode mode = !strcmp(arg, "expanded") ? RM_REASONING_EXPANDED
                                 : !strcmp(arg, "hidden") ? RM_REASONING_HIDDEN
                                                          : RM_REASONING_COLLAPSED;
        render_model_set_reasoning_mode(t->rm, mode);
        char line[64];
        snprintf(line, sizeof line, "reasoning %s", arg);
        add_block(t, RM_NOTE, line);
    } else if (!strcmp(name, "tools")) {
        render_model_set_tools_expanded(t->rm, !strcmp(arg, "expanded"));
        add_block(t, RM_NOTE, !strcmp(arg, "expanded") ? "tool results expanded" : "tool results folded");
    } else if (!strcmp(name, "edit")) {
        input_set_text(t->in, arg, strlen(arg));
        t->input_dirty = 1;
    } else if (!strcmp(name, "quit")) {
        t->quit = 1;
    } else if (!strcmp(name, "help")) {
        help_toggle(t, 1);
    }
    t->dirty = 1;
    return 0;
}

static void read_keys(tui *t);
static void resize(tui *t);

/* While the model loads: the keys typed so far (Ctrl-C among them?) and the signals; a resize
 * is followed, any other signal stops the load like Ctrl-C. */
static int on_load_cancel_requested(void *user)
{
    tui *t = user;
    int sig;
    while ((sig = signal_pipe_take())) {
        if (sig == SIGWINCH)
            resize(t);
        else
            t->load_cancelled = 1;
    }
    read_keys(t);
    return t->load_cancelled;
}

app_frontend tui_frontend(tui *t)
{
    return (app_frontend){
        .user = t, .generation_begin = on_generation_begin, .stream = on_stream,
        .progress = on_progress, .load_cancel_requested = on_load_cancel_requested, .answer_done = on_answer_done, .tool_approval = on_tool_approval,
        .tool_update = on_tool_update, .turn_done = on_turn_done, .info = on_info, .error = on_error,
        .session_reset = on_session_reset, .saved = on_saved, .view_command = on_view_command,
    };
}

/* ---- layout and painting ---- */

static void layout(tui *t)
{
    int max_input = t->rows / 3 > 1 ? t->rows / 3 : 1;
    int cr, cc;
    int n = input_layout(t->in, t->cols, NULL, 0, &cr, &cc);
    int h = n < max_input ? n : max_input;
    if (t->rows - h - 2 < 1)
        h = t->rows - 3 > 1 ? t->rows - 3 : 1;
    if (cr < t->input_top)
        t->input_top = cr;
    if (cr >= t->input_top + h)
        t->input_top = cr - h + 1;
    if (t->input_top > n - h)
        t->input_top = n - h > 0 ? n - h : 0;
    int trans = t->rows - h - 2;
    if (trans < 1)
        trans = 1;
    if (h != t->input_h || trans != t->trans_h) {
        t->input_h = h;
        t->trans_h = trans;
        render_model_set_size(t->rm, t->cols, trans);
        int *rb = realloc(t->row_block, sizeof *rb * (size_t)trans);
        if (rb) {
            t->row_block = rb;
            for (int i = 0; i < trans; i++)
                rb[i] = -1;
        }
        t->force = 1;
    }
}

/* printf at the end of buf (cut at cap) */
static void append(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t n = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

/* "3.2k" */
static void count_text(char *buf, size_t cap, long n)
{
    if (n < 1000)
        snprintf(buf, cap, "%ld", n);
    else if (n < 100000)
        snprintf(buf, cap, "%.1fk", n / 1000.0);
    else
        snprintf(buf, cap, "%ldk", n / 1000);
}

static const char *state_word(const tui *t)
{
    switch (t->state) {
    case GEN_IDLE: return "ready";
    case GEN_LOADING: return "loading";
    case GEN_PREFILL: return "reading the prompt";
    case GEN_WAITING: return "waiting";
    case GEN_THINKING: return "thinking…";
    case GEN_ANSWERING: return "answering…";
    case GEN_CALLING: return "writing a tool call";
    case GEN_APPROVAL: return "approve? y/a/n";
    case GEN_TOOL: return "running a tool";
    case GEN_STOPPING: return "stopping";
    }
    return "";
}

static void status_text(tui *t, char *buf, size_t cap)
{
    if (!t->a) {
        snprintf(buf, cap, " kimi-chat · %s", t->progress[0] ? t->progress : "starting");
        return;
    }
    const generator *g = app_generator(t->a);
    const session *s = app_session(t->a);
    long used = app_context_used(t->a);
    if (app_busy(t->a))
        used += t->gen_tokens;
    char u[32], l[32], speed[32] = "";
    count_text(u, sizeof u, used);
    count_text(l, sizeof l, g->context_limit);
    double tps = t->tok_s;
    int decoding = t->state == GEN_THINKING || t->state == GEN_ANSWERING || t->state == GEN_CALLING;
    if (decoding && t->first_token && monotonic_seconds() - t->first_token > 0.2)
        tps = t->gen_tokens / (monotonic_seconds() - t->first_token);
    if (tps > 0)
        snprintf(speed, sizeof speed, tps < 100 ? " · %.1f tok/s" : " · %.0f tok/s", tps);
    /* the full line, then shorter ones until it fits (room for "↓ new" kept): "thinking" as
       "think", then without the backend, then without the temperature, then without thinking
       and the save state, then without the speed: a narrow terminal loses whole fields, not
       the end of one */
    int room = t->cols - (t->new_below ? 8 : 0);
    for (int level = 0; level < 6; level++) {
        buf[0] = 0;
        append(buf, cap, " %s │ %s", state_word(t), g->model);
        if (level < 2)
            append(buf, cap, " · %s", g->backend);
        append(buf, cap, " · ctx %s/%s%s", u, l, level < 5 ? speed : "");
        if (level < 4)
            append(buf, cap, " · %s %s", level ? "think" : "thinking", s->settings.thinking ? "on" : "off");
        if (level < 3)
            append(buf, cap, " · T %g", (double)s->settings.temperature);
        if (t->save_state[0] && level < 4)
            append(buf, cap, " · %s", t->save_state);
        if (text_width(buf, strlen(buf)) <= room)
            break;
    }
}

/* Paint text from column x, cut to the width; returns the column after it. */
static int put_cut(tui *t, int y, int x, const char *s, int element, int extra)
{
    int room = t->cols - x;
    if (room <= 0)
        return x;
    int w;
    size_t len = text_fit(s, strlen(s), room, &w);
    paint_style(stdscr, &t->pal, element, extra);
    move(y, x);
    paint_text(stdscr, s, len);
    return x + w;
}

static void separator_text(tui *t, char *buf, size_t cap, int *element)
{
    *element = THEME_SEPARATOR;
    buf[0] = 0;
    if (t->approval >= 0) {
        if (t->flash[0] && monotonic_seconds() < t->flash_until)
            snprintf(buf, cap, " %s ", t->flash);
        else if (t->approval_always)
            snprintf(buf, cap, " a again to allow %s for this session · [y] once · [n] deny ", t->approval_name);
        else
            snprintf(buf, cap, " run %s? [y] once · [a] always for %s · [n] deny ", t->approval_name,
                     t->approval_name);
        *element = THEME_TOOL_WAITING;
    } else if (input_searching(t->in)) {
        snprintf(buf, cap, " %s history search: %s ", input_search_failed(t->in) ? "failing" : "reverse",
                 input_search_query(t->in));
        *element = THEME_STATUS_ACCENT;
    } else if (t->flash[0] && monotonic_seconds() < t->flash_until) {
        snprintf(buf, cap, " %s ", t->flash);
        *element = THEME_NOTE;
    } else if (t->progress[0]) {
        snprintf(buf, cap, " %s ", t->progress);
        *element = THEME_NOTE;
    } else if (t->focus) {
        snprintf(buf, cap, " transcript: ↑↓ select · Enter fold · y copy · Tab back ");
        *element = THEME_STATUS_ACCENT;
    }
}

static void paint_separator(tui *t, int y)
{
    char text[400];
    int element;
    separator_text(t, text, sizeof text, &element);
    char key[512];
    snprintf(key, sizeof key, "%d|%s", element, text);
    if (!t->force && !strcmp(key, t->last_sep))
        return;
    snprintf(t->last_sep, sizeof t->last_sep, "%s", key);
    paint_style(stdscr, &t->pal, THEME_SEPARATOR, 0);
    move(y, 0);
    for (int x = 0; x < t->cols; x++)
        addstr("─");
    if (text[0])
        put_cut(t, y, 1, text, element, 0);
}

static void paint_status(tui *t, int y)
{
    char text[400];
    status_text(t, text, sizeof text);
    int new_below = t->new_below;
    char key[512];
    snprintf(key, sizeof key, "%d|%s", new_below, text);
    if (!t->force && !strcmp(key, t->last_status))
        return;
    snprintf(t->last_status, sizeof t->last_status, "%s", key);
    paint_style(stdscr, &t->pal, THEME_STATUS, 0);
    move(y, 0);
    for (int x = 0; x < t->cols; x++)
        addch(' ');
    int right = new_below ? 8 : 0;
    int w;
    size_t len = text_fit(text, strlen(text), t->cols - right > 0 ? t->cols - right : 0, &w);
    move(y, 0);
    paint_text(stdscr, text, len);
    if (new_below && t->cols > 8)
        put_cut(t, y, t->cols - 7, "↓ new", THEME_STATUS_ACCENT, 0);
}

static void paint_input(tui *t, int top)
{
    int cr, cc;
    int n = input_layout(t->in, t->cols, NULL, 0, &cr, &cc);
    input_row *rows = malloc(sizeof *rows * (size_t)n);
    if (!rows)
        return;
    input_layout(t->in, t->cols, rows, n, &cr, &cc);
    const char *text = input_text(t->in, NULL);
    for (int i = 0; i < t->input_h; i++) {
        int r = t->input_top + i;
        paint_style(stdscr, &t->pal, THEME_INPUT, 0);
        move(top + i, 0);
        clrtoeol();
        if (r >= n)
            continue;
        if (r == 0)
            put_cut(t, top + i, 0, t->focus ? "· " : "> ", THEME_INPUT_PROMPT, 0);
        else if (i == 0)
            put_cut(t, top + i, 0, "↑ ", THEME_FOLD_HINT, 0);
        paint_style(stdscr, &t->pal, THEME_INPUT, 0);
        move(top + i, INPUT_PROMPT_WIDTH);
        /* tabs as input_layout counts them: to the next stop, cut at the row's end */
        strbuf shown = {0};
        text_displayable(&shown, text + rows[r].start, rows[r].end - rows[r].start);
        if (!shown.failed && shown.len)
            paint_text(stdscr, shown.data, text_fit(shown.data, shown.len, t->cols - INPUT_PROMPT_WIDTH, NULL));
        free(shown.data);
    }
    if (t->input_top + t->input_h < n)
        put_cut(t, top + t->input_h - 1, t->cols - 2, "↓", THEME_FOLD_HINT, 0);
    free(rows);
}

static const char *const help_lines[] = {
    "kimi-chat keys",
    "",
    "Enter              send (a line ending in \\ continues)",
    "Alt-Enter, Ctrl-J  new line (pasted newlines are kept)",
    "Ctrl-A/E/B/F/K/U/W/Y, Alt-B/F, Home/End, arrows   edit",
    "Up/Down            input history (first/last line); Ctrl-R search",
    "Esc, Ctrl-C        stop the answer (what came is kept)",
    "Ctrl-C when idle   clear the input",
    "Ctrl-D (empty), /quit   quit",
    "PgUp/PgDn, Shift-Up/Down, Ctrl-Home/End   scroll",
    "Ctrl-T             fold/unfold all reasoning",
    "Ctrl-Up/Ctrl-Down  previous/next of your messages",
    "Tab                transcript focus: Up/Down select,",
    "                   Enter/Space fold, y copy (OSC 52), Tab/Esc back",
    "Ctrl-L             redraw",
    "y / a a / n        approve a tool call once / always (a twice) / deny;",
    "                   while it waits, other keys type nothing",
    "/help lists the commands · any key closes this",
};

static void paint_help(tui *t)
{
    int n = (int)(sizeof help_lines / sizeof *help_lines);
    int w = 0;
    for (int i = 0; i < n; i++) {
        int lw = text_width(help_lines[i], strlen(help_lines[i]));
        w = lw > w ? lw : w;
    }
    int h = n + 2 < t->rows ? n + 2 : t->rows;
    w = w + 4 < t->cols ? w + 4 : t->cols;
    if (t->help_win)
        delwin(t->help_win);
    t->help_win = newwin(h, w, (t->rows - h) / 2, (t->cols - w) / 2);
    if (!t->help_win)
        return;
    int pair = t->pal.pair[THEME_STATUS];
    wattr_set(t->help_win, t->pal.attr[THEME_STATUS] & ~A_REVERSE, 0, &pair);
    werase(t->help_win);
    box(t->help_win, 0, 0);
    for (int i = 0; i < n && i + 1 < h - 1; i++) {
        int lw;
        size_t len = text_fit(help_lines[i], strlen(help_lines[i]), w - 4, &lw);
        mvwaddnstr(t->help_win, i + 1, 2, help_lines[i], (int)len);
    }
    wnoutrefresh(t->help_win);
}

static void help_toggle(tui *t, int on)
{
    t->help = on;
    if (!on && t->help_win) {
        delwin(t->help_win);
        t->help_win = NULL;
        touchwin(stdscr);
    }
    t->force = t->dirty = 1;
}

static void paint_now(tui *t)
{
    if (!t->active)
        return;
    layout(t);
    const rm_frame *f = render_model_frame(t->rm);
    if (t->force)
        render_model_repaint(t->rm), f = render_model_frame(t->rm);
    paint_frame(stdscr, &t->pal, 0, f, t->force);
    t->new_below = f->new_below;
    for (int i = 0; i < f->n_rows && i < t->trans_h && t->row_block; i++)
        t->row_block[i] = f->rows[i].block;
    paint_separator(t, t->trans_h);
    if (t->input_dirty || t->force)
        paint_input(t, t->trans_h + 1);
    paint_status(t, t->rows - 1);
    int cr, cc;
    input_layout(t->in, t->cols, NULL, 0, &cr, &cc);
    if (!t->focus && !t->help && t->approval < 0) {
        curs_set(1);
        move(t->trans_h + 1 + cr - t->input_top, cc < t->cols ? cc : t->cols - 1);
    } else {
        curs_set(0);
    }
    wnoutrefresh(stdscr);
    if (t->help) {
        paint_overlays_discard(); /* under the help window */
        paint_help(t);
    }
    doupdate();
    paint_overlays_flush();
    t->dirty = t->force = t->input_dirty = 0;
    t->last_paint = monotonic_seconds();
}

static void full_redraw(tui *t)
{
    clearok(curscr, TRUE);
    render_model_repaint(t->rm);
    t->force = t->dirty = 1;
}

static void resize(tui *t)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0)
        resizeterm(ws.ws_row, ws.ws_col);
    t->rows = LINES;
    t->cols = COLS;
    t->trans_h = -1;
    if (t->help)
        help_toggle(t, 1);
    erase();
    full_redraw(t);
}

/* ---- keys ---- */

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
        hint(t, msg);
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
        hint(t, "answer y, a or n");
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
        hint(t, "answer y, a or n");
        return 1;
    }
    int index = t->approval;
    t->approval = -1;
    t->approval_always = 0;
    app_approve(t->a, index, answer == 'y' ? TOOL_APPROVE_ONCE : answer == 'a' ? TOOL_APPROVE_ALWAYS : TOOL_DENY);
    return 1;
}

/* One key from get_wch (is_char: a character, else a KEY_ code); alt: Esc came before it. */
static void handle_key(tui *t, int key, int is_char, int alt)
{
    t->dirty = 1;
    t->input_dirty = 1;
    if (t->paste) {
        if (!is_char && key == K_PASTE_END) {
            t->paste = 0;
            if (t->approval >= 0)   /* pasted text is no answer and does not go to the input */
                hint(t, "answer y, a or n");
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
        help_toggle(t, 0);
        return;
    }
    if (!is_char && key == KEY_F(1)) {
        help_toggle(t, 1);
        return;
    }
    if (!is_char && key == KEY_MOUSE) {
        mouse_event(t);
        return;
    }
    if (is_char && key == 12) { /* Ctrl-L */
        full_redraw(t);
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
            hint(t, "Ctrl-D on an empty input or /quit leaves kimi-chat");
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
        handle_key(t, key, is_char, alt);
        return;
    }
    if (!is_char && (key == K_PASTE_BEGIN || key == K_PASTE_END))
        t->typed_paste = key == K_PASTE_BEGIN;
    if (is_char && key == 3 && !t->typed_paste)
        t->load_cancelled = 1;
    else if (!array_reserve(&t->typed_ahead, &t->typed_ahead_cap, t->n_typed_ahead + 1, sizeof *t->typed_ahead))
        t->typed_ahead[t->n_typed_ahead++] = (typed_key){key, is_char, alt};
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
    *next_rc = get_wch(next);
    /* text follows; Enter then Esc (or a function key) are two keys */
    return *next_rc == OK && *next != 27 && *next != 127 && (*next >= 32 || *next == '\r' || *next == '\t');
}

static void read_keys(tui *t)
{
    wint_t ch;
    int rc;
    int read_ahead = 0; /* ch, rc hold a key already read */
    while (read_ahead || (rc = get_wch(&ch)) != ERR) {
        read_ahead = 0;
        int alt = 0;
        if (rc == OK && ch == 27 && !t->paste) {
            /* Esc with another key right behind it: Alt-key; alone: Esc */
            wint_t next;
            int rc2 = get_wch(&next);
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

/* ---- start, run, end ---- */

static void bind_key(const char *capname, const char *fallback, int code)
{
    const char *s = tigetstr(capname);
    if (s && s != (const char *)-1)
        define_key(s, code);
    if (fallback)
        define_key(fallback, code);
}

tui *tui_new(const app_options *opt)
{
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
        return NULL;
    tui *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->opt = opt;
    t->approval = -1;
    t->live_answer = t->live_reasoning = t->last_reasoning = -1;
    t->trans_h = -1;
    t->rm = render_model_new();
    t->in = input_new();
    if (!t->rm || !t->in) {
        tui_free(t);
        return NULL;
    }
    theme_init_default(&t->th);
    kimi_err err = {0};
    if (opt->theme && load_theme(t, opt->theme, &err)) {
        fprintf(stderr, "kimi-chat: %s (using the built-in theme)\n", err.msg);
        theme_init_default(&t->th);
    }
    char *history = paths_history_file(NULL);
    if (history) {
        char *slash = strrchr(history, '/');
        if (slash) {
            *slash = 0;
            paths_mkdir_p(history, NULL);
            *slash = '/';
        }
    }
    input_history_load(t->in, history);
    free(history);

    setlocale(LC_ALL, "");
    /* the view is UTF-8 throughout; a C locale (ssh, cron-like shells) would make ncursesw
       print it as escapes */
    if (strcmp(nl_langinfo(CODESET), "UTF-8") && !setlocale(LC_CTYPE, "C.UTF-8"))
        setlocale(LC_CTYPE, "en_US.UTF-8");
    if (tcgetattr(STDIN_FILENO, &saved_termios) == 0)
        have_saved_termios = 1;
    /* widths as this terminal draws emoji clusters; one that does not answer in time gets
       Unicode's cluster widths */
    text_terminal drawn;
    if (term_probe_clusters(STDIN_FILENO, STDOUT_FILENO, 300, &drawn) == 0)
        text_set_terminal(&drawn);
    if (opt->no_alt_screen) {
        /* push what the screen shows into the scrollback: the view is drawn over a blank screen */
        struct winsize ws;
        int n = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 ? ws.ws_row : 24;
        for (int i = 0; i < n; i++) {
            ssize_t ignored = write(STDOUT_FILENO, "\n", 1);
            (void)ignored;
        }
    }
    /* before newterm: a resize while starting up reaches the pipe (and curses then leaves
       SIGWINCH to us) */
    install_signals();
    t->screen = newterm(NULL, stdout, stdin);
    if (!t->screen) {
        tui_free(t);
        return NULL;
    }
    set_term(t->screen);
    if (opt->no_alt_screen) {
        /* newterm has switched to the alternate screen already: switch back, and drop the
           capabilities so neither refresh nor endwin switch again */
        char *rmcup = exit_ca_mode ? strdup(exit_ca_mode) : NULL;
        enter_ca_mode = NULL;
        exit_ca_mode = NULL;
        refresh(); /* sends what newterm buffered (smcup) */
        if (rmcup) {
            ssize_t ignored = write(STDOUT_FILENO, rmcup, strlen(rmcup));
            (void)ignored;
            free(rmcup);
        }
    }
    t->active = 1;
    curses_on = 1;
    atexit_tui = t;
    atexit(restore_at_exit);
    add_reset(exit_attribute_mode);
    add_reset(cursor_normal);
    add_reset(keypad_local);
    add_reset(exit_ca_mode);
    add_reset("\033[?2004l");
    if (opt->mouse)
        add_reset("\033[?1000l\033[?1002l\033[?1006l");
    add_reset("\r\n");
    raw();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    nodelay(stdscr, TRUE);
    set_escdelay(25);
    bind_key("kUP5", "\033[1;5A", K_CTRL_UP);
    bind_key("kDN5", "\033[1;5B", K_CTRL_DOWN);
    bind_key("kHOM5", "\033[1;5H", K_CTRL_HOME);
    bind_key("kEND5", "\033[1;5F", K_CTRL_END);
    bind_key("kUP", "\033[1;2A", K_SHIFT_UP);
    bind_key("kDN", "\033[1;2B", K_SHIFT_DOWN);
    define_key("\033[200~", K_PASTE_BEGIN);
    define_key("\033[201~", K_PASTE_END);
    if (has_colors()) {
        start_color();
        use_default_colors();
    }
    t->depth = paint_detect_depth(opt->no_color);
    apply_palette(t);
    if (opt->mouse)
        mousemask(BUTTON1_CLICKED | BUTTON4_PRESSED
#ifdef BUTTON5_PRESSED
                  | BUTTON5_PRESSED
#endif
                  , NULL);
    render_model_set_reasoning_mode(t->rm, opt->reasoning == REASONING_EXPANDED ? RM_REASONING_EXPANDED
                                           : opt->reasoning == REASONING_HIDDEN ? RM_REASONING_HIDDEN
                                                                                : RM_REASONING_COLLAPSED);
    paste_mode(1);
    resize(t);
    snprintf(t->save_state, sizeof t->save_state, "%s", opt->no_save ? "not saved" : "");
    paint_now(t);
    return t;
}

/* The conversation as plain text on the normal screen (it stays in the scrollback), however
 * long: a frame is at most RM_PAGE rows (render_model caps the height), so it goes out a page at
 * a time. */
static void print_transcript(tui *t)
{
    enum { RM_PAGE = 2000 };
    if (!render_model_block_count(t->rm))
        return;
    render_model_focus(t->rm, -1);
    render_model_set_size(t->rm, t->cols > 0 ? t->cols : 80, 1);
    long total = render_model_total_rows(t->rm);
    if (total < 1)
        return;
    int page = total < RM_PAGE ? (int)total : RM_PAGE;
    render_model_set_size(t->rm, t->cols > 0 ? t->cols : 80, page);
    render_model_scroll_to_top(t->rm);
    /* Without the alternate screen the view is still on the screen: write over it from the top
       (erasing each line's rest, then below the end) rather than clearing it, which terminals
       like tmux would push into the scrollback as a stale frame. */
    int inline_view = t->opt->no_alt_screen;
    if (inline_view)
        fputs("\033[H", stdout);
    char buf[8192];
    for (long printed = 0; printed < total;) {
        if (printed)
            render_model_scroll(t->rm, page);
        const rm_frame *f = render_model_frame(t->rm);
        /* the last page is the bottom one: it starts at total - page, over rows already out */
        long top = printed < total - page ? printed : total - page;
        int first = (int)(printed - top);
        if (first >= f->n_rows)
            break;
        for (int i = first; i < f->n_rows; i++) {
            size_t n = render_model_row_text(&f->rows[i], buf, sizeof buf);
            while (n && buf[n - 1] == ' ')
                n--;
            buf[n] = 0;
            printf(inline_view ? "%s\033[K\n" : "%s\n", buf);
        }
        printed = top + f->n_rows;
    }
    if (inline_view)
        fputs("\033[J", stdout);
    fflush(stdout);
}

static void frame_tick(tui *t, int *timeout_ms)
{
    double now = monotonic_seconds();
    if (t->flash[0] && now >= t->flash_until) {
        t->flash[0] = 0;
        t->dirty = 1;
    }
    if (t->dirty || t->input_dirty) {
        double wait = t->last_paint + FRAME_US / 1e6 - now;
        if (wait <= 0) {
            paint_now(t);
        } else {
            int ms = (int)(wait * 1000) + 1;
            *timeout_ms = *timeout_ms < 0 || ms < *timeout_ms ? ms : *timeout_ms;
        }
    }
    if (t->flash[0]) {
        int ms = (int)((t->flash_until - now) * 1000) + 1;
        *timeout_ms = *timeout_ms < 0 || ms < *timeout_ms ? ms : *timeout_ms;
    }
    /* the status bar's speed and the live reasoning's seconds move while generating */
    if (app_busy(t->a)) {
        int ms = 500;
        *timeout_ms = *timeout_ms < 0 || ms < *timeout_ms ? ms : *timeout_ms;
    }
}

int tui_run(tui *t, app *a)
{
    t->a = a;
    if (t->pending_rebuild) {
        /* a session loaded with the model: its messages first, then what loading said */
        render_model_truncate(t->rm, 0);
        t->n_block_message = 0;
        t->live_answer = t->live_reasoning = t->last_reasoning = -1;
        mirror_from(t, 0);
        render_model_scroll_to_bottom(t->rm);
        for (size_t off = 0; t->startup_notes.data && off < t->startup_notes.len;
             off += strlen(t->startup_notes.data + off) + 1)
            add_block(t, RM_NOTE, t->startup_notes.data + off);
    } else {
        t->shown_messages = app_session(a)->conv.n_messages;
    }
    t->state = GEN_IDLE;
    t->progress[0] = 0;
    resize(t); /* the terminal may have changed size while the model loaded */
    for (size_t i = 0; i < t->n_typed_ahead && !t->quit; i++)
        handle_key(t, t->typed_ahead[i].key, t->typed_ahead[i].is_char, t->typed_ahead[i].alt);
    t->n_typed_ahead = 0;
    int code = 0;
    while (!t->quit && !app_quit_requested(a)) {
        int timeout = -1;
        frame_tick(t, &timeout);
        struct pollfd fds[APP_MAX_POLL_FDS + 2];
        fds[0] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN};
        fds[1] = (struct pollfd){.fd = signal_pipe_fd(), .events = POLLIN};
        int n = 2 + app_poll_fds(a, fds + 2);
        if (poll(fds, (nfds_t)n, timeout) < 0 && errno != EINTR) {
            strbuf_printf(&t->fatal, "poll: %s", strerror(errno));
            code = 3;
            break;
        }
        int sig;
        while ((sig = signal_pipe_take())) {
            if (sig == SIGWINCH) {
                resize(t);
            } else if (sig == SIGINT) {
                handle_key(t, 3, 1, 0);
            } else {
                app_stop(a);
                code = 130;
                t->quit = 1;
            }
        }
        if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) {
            code = 130;
            break;
        }
        if (fds[0].revents & POLLIN) {
            read_keys(t);
            /* keys paint at once (typing stays instant); streamed text waits for the frame timer */
            if (!t->quit && (t->dirty || t->input_dirty))
                paint_now(t);
        }
        kimi_err err = {0};
        if (n > 2 && app_dispatch(a, &err)) {
            strbuf_str(&t->fatal, err.msg);
            code = 3;
            break;
        }
    }
    if (t->quit && app_busy(a))
        app_stop(a);
    end_reasoning(t);
    end_answer(t);
    curses_end(t);
    print_transcript(t);
    if (t->fatal.data)
        fprintf(stderr, "kimi-chat: %s\n", t->fatal.data);
    return code;
}

void tui_free(tui *t)
{
    if (!t)
        return;
    curses_end(t);
    if (atexit_tui == t)
        atexit_tui = NULL;
    if (t->screen)
        delscreen(t->screen);
    render_model_free(t->rm);
    input_free(t->in);
    free(t->row_block);
    free(t->call_block);
    free(t->startup_notes.data);
    free(t->block_message);
    free(t->typed_ahead);
    free(t->paste_buf.data);
    free(t->fatal.data);
    free(t);
}
