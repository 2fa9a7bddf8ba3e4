/* tui: the full-screen ncurses view over the chat core (app.h) and the render model: taking and
 * giving back the terminal, the poll loop. The rest: tui_mirror (the app callbacks), tui_layout,
 * tui_paint, tui_keys; the state they share: tui_state. */
#include "ui/tui.h"

#include <errno.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <curses.h>
#include <term.h>

#include "app/chat/paths.h"
#include "engine/base/monotonic.h"
#include "ui/signal_pipe.h"
#include "ui/term_probe.h"
#include "ui/text_width.h"
#include "ui/tui_keys.h"
#include "ui/tui_layout.h"
#include "ui/tui_mirror.h"
#include "ui/tui_paint.h"
#include "ui/tui_state.h"

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
    /* SIGTSTP too: curses then installs no handler of its own (it would call endwin inside
       the handler) */
    static const int handled[] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP};
    if (signal_pipe_install(handled, 5, 1))
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
    if (t->picker && t->picker->win)
        delwin(t->picker->win);
    if (t->picker)
        t->picker->win = NULL;
    endwin();
    paste_mode(0);
    t->active = 0;
    curses_on = 0;
}

/* Ctrl-Z or SIGTSTP: the terminal goes back as on exit (endwin: the saved modes, the alternate
 * screen left, mouse reporting off; bracketed paste off), the process stops as SIGTSTP's default
 * action stops it, and on fg (SIGCONT) curses takes the terminal again and repaints it all, at
 * the size it has now. */
static void suspend(tui *t)
{
    t->suspend = 0;
    if (!t->active)
        return;
    endwin();
    paste_mode(0);
    curses_on = 0;
    struct sigaction stop = {.sa_handler = SIG_DFL}, caught;
    sigemptyset(&stop.sa_mask);
    sigaction(SIGTSTP, &stop, &caught);
    raise(SIGTSTP);
    sigaction(SIGTSTP, &caught, NULL);
    curses_on = 1;
    paste_mode(1);
    tui_resize(t);
    tui_paint_now(t);
}

static tui *atexit_tui;
static void restore_at_exit(void)
{
    if (atexit_tui)
        curses_end(atexit_tui);
}

/* While the model loads: the keys typed so far (Ctrl-C among them?) and the signals; a resize
 * is followed, any other signal stops the load like Ctrl-C. */
static int on_load_cancel_requested(void *user)
{
    tui *t = user;
    int sig;
    while ((sig = signal_pipe_take())) {
        if (sig == SIGWINCH)
            tui_resize(t);
        else if (sig == SIGTSTP)
            t->suspend = 1;
        else
            t->load_cancelled = 1;
    }
    tui_read_keys(t);
    if (t->suspend)
        suspend(t);
    return t->load_cancelled;
}

app_frontend tui_frontend(tui *t)
{
    app_frontend f = tui_mirror_frontend(t);
    f.load_cancel_requested = on_load_cancel_requested;
    return f;
}

/* ---- start, run, end ---- */

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
    if (opt->theme && tui_load_theme(t, opt->theme, &err)) {
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
    tui_keys_bind();
    if (has_colors()) {
        start_color();
        use_default_colors();
    }
    t->depth = paint_detect_depth(opt->no_color);
    tui_apply_palette(t);
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
    tui_resize(t);
    snprintf(t->save_state, sizeof t->save_state, "%s", opt->no_save ? "not saved" : "");
    tui_paint_now(t);
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
            tui_paint_now(t);
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

/* The first screen's note: what this is (model, backend, context), what it can do and that
 * tools ask first, and where the keys and commands are. The memory plan is in /stats (and said
 * at start with --verbose). */
static void welcome(tui *t)
{
    const app_options *o = t->opt;
    const generator *g = app_generator(t->a);
    strbuf b = {0};
    strbuf_printf(&b, "kimi-chat · %s · %s", g->model, g->backend);
    if (g->context_limit > 0)
        strbuf_printf(&b, " · context %ld tokens", g->context_limit);
    const char *what = o->model_is_demo ? "A 3.6 M-parameter toy (--model DIR runs Kimi-K2.5): it can tell the time, "
                                          "count the words in a file and list a folder"
                                        : "Ask anything";
    if (!o->tools_path || o->no_tools)
        strbuf_printf(&b, "\n%s; no tools are loaded (--tools FILE adds them).", what);
    else if (o->allow_tools)
        strbuf_printf(&b, "\n%s; the tools in --allow-tools run at once, the others ask first (y/a/n).", what);
    else
        strbuf_printf(&b, "\n%s; every tool call asks first (y once, a always, n no).", what);
    strbuf_str(&b, "\nF1 keys · /help commands");
    if (b.data && !b.failed)
        tui_add_block(t, RM_NOTE, b.data);
    free(b.data);
}

int tui_run(tui *t, app *a)
{
    t->a = a;
    if (t->pending_rebuild) {
        /* a session loaded with the model: its messages first, then what loading said */
        render_model_truncate(t->rm, 0);
        t->n_block_message = 0;
        t->live_answer = t->live_reasoning = t->last_reasoning = -1;
        tui_mirror_from(t, 0);
        render_model_scroll_to_bottom(t->rm);
        for (size_t off = 0; t->startup_notes.data && off < t->startup_notes.len;
             off += strlen(t->startup_notes.data + off) + 1)
            tui_add_block(t, RM_NOTE, t->startup_notes.data + off);
    } else {
        t->shown_messages = app_session(a)->conv.n_messages;
    }
    welcome(t);
    render_model_scroll_to_bottom(t->rm);
    t->state = GEN_IDLE;
    t->progress[0] = 0;
    tui_resize(t); /* the terminal may have changed size while the model loaded */
    for (size_t i = 0; i < t->n_typed_ahead && !t->quit; i++)
        tui_handle_key(t, t->typed_ahead[i].key, t->typed_ahead[i].is_char, t->typed_ahead[i].alt);
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
                tui_resize(t);
            } else if (sig == SIGTSTP) {
                t->suspend = 1;
            } else if (sig == SIGINT) {
                tui_handle_key(t, 3, 1, 0);
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
            tui_read_keys(t);
            /* keys paint at once (typing stays instant); streamed text waits for the frame timer */
            if (!t->quit && (t->dirty || t->input_dirty))
                tui_paint_now(t);
        }
        if (t->suspend && !t->quit)
            suspend(t);
        kimi_err err = {0};
        if (n > 2 && app_dispatch(a, &err)) {
            strbuf_str(&t->fatal, err.msg);
            code = 3;
            break;
        }
    }
    if (t->quit && app_busy(a))
        app_stop(a);
    tui_mirror_end_live(t);
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
    free(t->search_query.data);
    tui_pastes_clear(t);
    if (t->picker)
        session_picker_close(t->picker);
    free(t->picker);
    search_result_free(&t->search_hits);
    free(t->fatal.data);
    free(t);
}
