/* plain: text front end on stdout/stderr, the readline REPL and the signal self-pipe. */
#include "ui/plain.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "app/chat/paths.h"
#include "engine/base/monotonic.h"
#include "ui/progress_text.h"
#include "ui/signal_pipe.h"
#include "ui/text_width.h"
#include "engine/base/array.h"

#define DIM "\033[2m"
#define BOLD "\033[1m"
#define RESET "\033[0m"

struct plain_ui {
    const app_options *opt;
    int ask_tools;
    int color_err;              /* stderr is a terminal and colours are allowed */
    int clean_out, clean_err;   /* stdout / stderr is a terminal: text from the model, the server
                                   or a tool goes out as text_terminal_safe makes it (no escape
                                   sequence of theirs reaches the terminal); a pipe or file gets
                                   the answer byte for byte */
    int progress_line;          /* stderr is a terminal: progress on one updating line */
    int show_reasoning;
    /* the answer on screen */
    int in_reasoning;           /* reasoning printed and not yet closed with a newline */
    int content_open;           /* content printed without a final newline */
    int progress_shown;
    int pending_approval;       /* index of the call waiting for y/a/n, or -1 */
    int asked_call;             /* the call the last question was about, or -1 */
    char pending_name[128];
    app_turn_outcome outcome;
    int turn_over;
    app *a;                     /* set while waiting */
    int stdout_errno;           /* the first failed write of the answer to stdout, else 0 */
};

/* ---- printing ---- */

/* text to f, cleaned of controls and escape sequences when clean (text_terminal_safe). */
static void put_text(FILE *f, int clean, const char *text, size_t len)
{
    if (!clean) {
        fwrite(text, 1, len, f);
        return;
    }
    strbuf b = {0};
    text_terminal_safe(&b, text, len);
    if (b.data)
        fwrite(b.data, 1, b.len, f);
    free(b.data);
}

static void err_text(plain_ui *ui, const char *style, const char *text, size_t len)
{
    if (ui->color_err && style)
        fputs(style, stderr);
    put_text(stderr, ui->clean_err, text, len);
    if (ui->color_err && style)
        fputs(RESET, stderr);
}

/* A line about a tool call (name, arguments and id come from the model or the server): always
 * cleaned, whatever stderr is, since it is what the user approves. */
static void call_line(const app_tool_call *c)
{
    strbuf b = {0};
    strbuf_printf(&b, "→ %s ", c->name);
    strbuf_add(&b, c->arguments, c->arguments_len);
    strbuf_printf(&b, "  (%s)", c->id);
    put_text(stderr, 1, b.data ? b.data : "", b.len);
    fputc('\n', stderr);
    free(b.data);
}

static void clear_progress(plain_ui *ui)
{
    if (ui->progress_shown) {
        fputs("\r\033[K", stderr);
        ui->progress_shown = 0;
    }
}

static void close_reasoning(plain_ui *ui)
{
    if (ui->in_reasoning) {
        fputc('\n', stderr);
        ui->in_reasoning = 0;
    }
}

/* The answer is flushed as it streams; the first failure is kept for the exit code. */
static void flush_stdout(plain_ui *ui)
{
    if (fflush(stdout) == EOF && !ui->stdout_errno)
        ui->stdout_errno = errno;
}

static void close_content(plain_ui *ui)
{
    if (ui->content_open) {
        fputc('\n', stdout);
        flush_stdout(ui);
        ui->content_open = 0;
    }
}

static void on_stream(void *user, const parse_event *ev)
{
    plain_ui *ui = user;
    clear_progress(ui);
    switch (ev->kind) {
    case PARSE_REASONING_TEXT:
        if (!ui->show_reasoning)
            break;
        ui->in_reasoning = 1;
        err_text(ui, DIM, ev->text, ev->len);
        fflush(stderr);
        break;
    case PARSE_CONTENT_TEXT:
        close_reasoning(ui);
        put_text(stdout, ui->clean_out, ev->text, ev->len);
        flush_stdout(ui);
        if (ev->len)
            ui->content_open = ev->text[ev->len - 1] != '\n';
        break;
    case PARSE_TOOL_CALL_BEGIN:
        close_reasoning(ui);
        close_content(ui);
        break;
    case PARSE_TOOL_CALL_END:
        if (!ev->valid) {
            char line[400];
            int n = snprintf(line, sizeof line, "[tool call %d: %s]\n", ev->call, ev->text);
            err_text(ui, NULL, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        }
        break;
    case PARSE_NOTE: {
        char line[600];
        int n = snprintf(line, sizeof line, "[note: %s]\n", ev->text);
        close_reasoning(ui);
        err_text(ui, DIM, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        break;
    }
    case PARSE_STOP:
        close_reasoning(ui);
        close_content(ui);
        if (ev->stop != PARSE_STOP_END_OF_TURN && ev->stop != PARSE_STOP_EOS &&
            ev->stop != PARSE_STOP_CANCELLED && ev->stop != PARSE_STOP_ERROR)
            fprintf(stderr, "[%s]\n", parse_stop_text(ev->stop));
        break;
    case PARSE_TOOL_CALL_ID:
    case PARSE_TOOL_CALL_ARGS:
        break;
    }
}

static void on_progress(void *user, const generator_progress *p)
{
    plain_ui *ui = user;
    if (!ui->progress_line)
        return;
    char text[200];
    progress_text(text, sizeof text, p);
    fprintf(stderr, "\r\033[K%s", text);
    ui->progress_shown = p->total <= 0 || p->done < p->total;
    if (!ui->progress_shown)
        fputs("\r\033[K", stderr);
    fflush(stderr);
}

/* Every signal the plain front end takes (SIGINT, SIGTERM, SIGHUP) stops a load. */
static int on_load_cancel_requested(void *user)
{
    plain_ui *ui = user;
    int stop = 0;
    while (signal_pipe_take())
        stop = 1;
    if (stop)
        clear_progress(ui);
    return stop;
}

/* The first lines of a tool's result, the rest counted. */
static void print_result_head(plain_ui *ui, const char *text, size_t len)
{
    size_t shown = 0;
    int lines = 0;
    while (shown < len && lines < 3) {
        const char *nl = memchr(text + shown, '\n', len - shown);
        size_t end = nl ? (size_t)(nl - text) + 1 : len;
        err_text(ui, DIM, "  │ ", 6);
        err_text(ui, DIM, text + shown, end - shown);
        if (!nl)
            fputc('\n', stderr);
        shown = end;
        lines++;
    }
    int more = 0;
    for (size_t i = shown; i < len; i++)
        more += text[i] == '\n' || i == len - 1;
    if (more)
        fprintf(stderr, "  │ … +%d lines\n", more);
}

static void on_tool_update(void *user, const app_tool_call *c)
{
    plain_ui *ui = user;
    clear_progress(ui);
    if (c->state == APP_TOOL_RUNNING) {
        if (ui->asked_call != c->index)     /* the approval question showed it already */
            call_line(c);
        ui->asked_call = -1;
        return;
    }
    char head[256];
    if (c->state == APP_TOOL_DONE)
        snprintf(head, sizeof head, "← %s: done in %.2f s, exit %d\n", c->name, c->seconds, c->exit_status);
    else
        snprintf(head, sizeof head, "← %s: %s\n", c->name, app_tool_state_name(c->state));
    put_text(stderr, 1, head, strlen(head));
    print_result_head(ui, c->result, c->result_len);
}

static void on_tool_approval(void *user, const app_tool_call *c)
{
    plain_ui *ui = user;
    clear_progress(ui);
    call_line(c);
    ui->pending_approval = ui->asked_call = c->index;
    snprintf(ui->pending_name, sizeof ui->pending_name, "%s", c->name);
}

static void on_turn_done(void *user, app_turn_outcome outcome, const char *message)
{
    plain_ui *ui = user;
    clear_progress(ui);
    close_reasoning(ui);
    close_content(ui);
    ui->outcome = outcome;
    ui->turn_over = 1;
    if (outcome != APP_TURN_DONE && message) {
        fputc('[', stderr);
        err_text(ui, NULL, message, strlen(message));
        fputs("]\n", stderr);
    }
}

static void on_info(void *user, const char *text)
{
    plain_ui *ui = user;
    clear_progress(ui);
    err_text(ui, NULL, text, strlen(text));
    fputc('\n', stderr);
}

static void on_error(void *user, const char *line)
{
    plain_ui *ui = user;
    clear_progress(ui);
    close_reasoning(ui);
    close_content(ui);
    fputs("kimi-chat: ", stderr);
    err_text(ui, NULL, line, strlen(line));
    fputc('\n', stderr);
}

static int on_view_command(void *user, const char *name, const char *arg, kimi_err *err)
{
    plain_ui *ui = user;
    if (!strcmp(name, "reasoning"))
        ui->show_reasoning = strcmp(arg, "hidden") != 0 && !ui->opt->hide_reasoning;
    else if (!strcmp(name, "edit")) {
        /* the next prompt starts with the dropped message; without a terminal there is no
           prompt to put it in, and /edit would only drop it */
        if (!ui->ask_tools || !isatty(0))
            return kimi_fail(err, KIMI_ERR_INPUT, "/edit needs the interactive prompt (/undo drops the last exchange)");
        rl_insert_text(arg);
    } else if (!strcmp(name, "theme") || (!strcmp(name, "tools") && arg[0]))
        fprintf(stderr, "(/%s %s applies to the full-screen view)\n", name, arg);
    return 0;
}

plain_ui *plain_ui_new(const app_options *opt, int ask_tools)
{
    plain_ui *ui = calloc(1, sizeof *ui);
    if (!ui)
        return NULL;
    ui->opt = opt;
    ui->ask_tools = ask_tools;
    ui->color_err = isatty(2) && !opt->no_color;
    ui->clean_out = isatty(1);
    ui->clean_err = isatty(2);
    ui->progress_line = isatty(2);
    ui->show_reasoning = !opt->hide_reasoning && opt->reasoning != REASONING_HIDDEN;
    ui->pending_approval = ui->asked_call = -1;
    static const int handled[] = {SIGINT, SIGTERM, SIGHUP};
    signal_pipe_install(handled, 3, 0);    /* no SA_RESTART: the approval read sees EINTR */
    return ui;
}

void plain_ui_free(plain_ui *ui) { free(ui); }

app_frontend plain_ui_frontend(plain_ui *ui)
{
    return (app_frontend){
        .user = ui, .stream = on_stream, .progress = on_progress, .load_cancel_requested = on_load_cancel_requested,
        .tool_approval = ui->ask_tools ? on_tool_approval : NULL, .tool_update = on_tool_update,
        .turn_done = on_turn_done, .info = on_info, .error = on_error,
        .view_command = on_view_command,
    };
}


void plain_ui_echo_turn(plain_ui *ui, const char *text, size_t len)
{
    fputs("you> ", stdout);
    put_text(stdout, ui->clean_out, text, len);
    fputc('\n', stdout);
    flush_stdout(ui);
}

int plain_ui_stdout_errno(const plain_ui *ui) { return ui->stdout_errno; }

void plain_ui_err_text(const plain_ui *ui, const char *text, size_t len)
{
    put_text(stderr, ui->clean_err, text, len);
}

/* y/a/n on the terminal; anything else asks again, end of input or a signal denies. */
static tool_approval ask_approval(plain_ui *ui, int *signalled)
{
    for (;;) {
        fputs("run ", stderr);
        put_text(stderr, 1, ui->pending_name, strlen(ui->pending_name));
        fputs("? [y]es once, [a]lways for this tool, [n]o: ", stderr);
        fflush(stderr);
        char answer[64];
        size_t n = 0;
        for (;;) {
            /* through stdin's buffer: on a pipe, the REPL's getline has read ahead, and the
               answer is in that buffer, not on fd 0 */
            errno = 0;
            int ch = getc(stdin);
            if (ch == EOF && errno == EINTR) {
                clearerr(stdin);
                *signalled = signal_pipe_take();
                if (*signalled) {
                    fputc('\n', stderr);
                    return TOOL_DENY;
                }
                continue;
            }
            if (ch == EOF) {
                fputc('\n', stderr);
                return TOOL_DENY;
            }
            if (ch == '\n')
                break;
            if (n < sizeof answer - 1)
                answer[n++] = (char)ch;
        }
        answer[n] = 0;
        if (!strcmp(answer, "y") || !strcmp(answer, "yes"))
            return TOOL_APPROVE_ONCE;
        if (!strcmp(answer, "a") || !strcmp(answer, "always"))
            return TOOL_APPROVE_ALWAYS;
        if (!strcmp(answer, "n") || !strcmp(answer, "no"))
            return TOOL_DENY;
    }
}

/* How long SIGTERM/SIGHUP waits for the stopped turn to wind down (a cancelled generation or
 * tool ends in milliseconds) before giving up on it. */
#define TERMINATE_GRACE_S 3.0

plain_wait_result plain_ui_wait(plain_ui *ui, app *a, app_turn_outcome *outcome, kimi_err *err)
{
    int interrupted = 0;
    double terminated_at = 0;   /* SIGTERM/SIGHUP came: the turn is stopped and wound down so
                                   that what is saved is whole (every tool call answered) */
    ui->turn_over = 0;
    while (app_busy(a)) {
        if (terminated_at && monotonic_seconds() - terminated_at > TERMINATE_GRACE_S)
            return PLAIN_WAIT_TERMINATED;
        if (ui->pending_approval >= 0) {
            int sig = 0;
            int index = ui->pending_approval;
            ui->pending_approval = -1;
            tool_approval decision = ask_approval(ui, &sig);
            if (sig) {
                app_stop(a);
                if (sig == SIGINT)
                    interrupted = 1;
                else if (!terminated_at)
                    terminated_at = monotonic_seconds();
            } else {
                app_approve(a, index, decision);
            }
            continue;
        }
        struct pollfd fds[APP_MAX_POLL_FDS + 1];
        int n = app_poll_fds(a, fds);
        fds[n++] = (struct pollfd){.fd = signal_pipe_fd(), .events = POLLIN};
        if (poll(fds, (nfds_t)n, terminated_at ? 100 : -1) < 0 && errno != EINTR)
            return kimi_fail(err, KIMI_ERR_IO, "poll: %s", strerror(errno)), PLAIN_WAIT_BROKEN;
        int sig;
        while ((sig = signal_pipe_take())) {
            app_stop(a);
            if (sig == SIGINT)
                interrupted = 1;
            else if (!terminated_at)
                terminated_at = monotonic_seconds();
        }
        if (app_dispatch(a, err))
            return PLAIN_WAIT_BROKEN;
    }
    *outcome = ui->turn_over ? ui->outcome : APP_TURN_DONE;
    if (terminated_at)
        return PLAIN_WAIT_TERMINATED;
    return interrupted ? PLAIN_WAIT_INTERRUPTED : PLAIN_WAIT_IDLE;
}

/* ---- the REPL ---- */

static char *repl_line;         /* the line readline handed over, or NULL */
static int repl_eof;

static void on_readline_line(char *line)
{
    if (!line)
        repl_eof = 1;
    repl_line = line;
    rl_callback_handler_remove();
}

/* One line from a terminal through readline, polled with the signal pipe; NULL at Ctrl-D. */
static char *read_line_tty(int *terminated)
{
    repl_line = NULL;
    repl_eof = 0;
    rl_callback_handler_install("you> ", on_readline_line);
    while (!repl_line && !repl_eof) {
        struct pollfd fds[2] = {{.fd = 0, .events = POLLIN}, {.fd = signal_pipe_fd(), .events = POLLIN}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR)
            break;
        int sig;
        while ((sig = signal_pipe_take())) {
            if (sig != SIGINT) {
                *terminated = 1;
                rl_callback_handler_remove();
                return NULL;
            }
            /* Ctrl-C at the prompt clears the line */
            rl_replace_line("", 0);
            rl_crlf();
            rl_on_new_line();
            rl_redisplay();
        }
        if (fds[0].revents)
            rl_callback_read_char();
    }
    return repl_eof ? NULL : repl_line;
}

/* One line from a pipe or file (no prompt, no editing), *len bytes: NUL bytes in it are kept. */
static char *read_line_pipe(int *terminated, size_t *len)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) < 0 && errno == EINTR) {
        if (signal_pipe_take() != SIGINT) {
            *terminated = 1;
            break;
        }
        clearerr(stdin);
    }
    if (n < 0) {
        free(line);
        return NULL;
    }
    if (n && line[n - 1] == '\n')
        line[--n] = 0;
    *len = (size_t)n;
    return line;
}

int plain_ui_repl(plain_ui *ui, app *a)
{
    int tty = isatty(0);
    char *history = paths_history_file(NULL);
    char *state_dir = paths_state_dir(NULL);
    if (state_dir && paths_mkdir_p(state_dir, NULL)) {
        free(history);
        history = NULL;     /* no history file rather than an error on every line */
    }
    free(state_dir);
    /* readline creates it 0600; one an older kimi-chat left readable by others is taken back
       (it holds what the user typed) */
    struct stat st;
    if (history && stat(history, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077))
        chmod(history, 0600);
    if (tty) {
        rl_catch_signals = 0;
        rl_catch_sigwinch = 1;
        using_history();
        if (history)
            read_history(history);
    }
    int code = 0, terminated = 0;
    strbuf pending = {0};       /* lines joined by a trailing backslash */
    int at_end = 0;
    while (!app_quit_requested(a) && !at_end) {
        size_t len = 0;
        char *line = tty ? read_line_tty(&terminated) : read_line_pipe(&terminated, &len);
        if (!line && (terminated || !pending.len))
            break;
        if (!line) {
            /* the input ended after a line continued with '\': what was typed is sent, not
               dropped (without the newline the backslash promised) */
            at_end = 1;
            pending.len--;
            if (!(line = strdup("")))
                break;
        }
        if (tty)
            len = strlen(line);
        if (len && line[len - 1] == '\\') {
            strbuf_add(&pending, line, len - 1);
            strbuf_add(&pending, "\n", 1);
            free(line);
            continue;
        }
        strbuf_add(&pending, line, len);
        free(line);
        if (tty && pending.len) {
            add_history(pending.data);
            if (history && append_history(1, history) != 0)
                write_history(history);
        }
        kimi_err err = {0};
        int rc = app_submit_line(a, pending.data ? pending.data : "", pending.len, &err);
        free(pending.data);
        pending = (strbuf){0};
        if (rc)
            continue;
        app_turn_outcome outcome;
        plain_wait_result w = plain_ui_wait(ui, a, &outcome, &err);
        if (w == PLAIN_WAIT_TERMINATED) {
            terminated = 1;
            break;
        }
        if (w == PLAIN_WAIT_BROKEN) {
            fprintf(stderr, "kimi-chat: %s\n", err.msg);
            code = 3;
            break;
        }
    }
    free(pending.data);
    if (terminated) {
        app_stop(a);
        code = 130;
    }
    free(history);
    return code;
}
