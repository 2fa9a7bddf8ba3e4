/* test_app: the chat core against a scripted generator: answers, tool rounds (allowed, asked,
 * denied, unknown, bad arguments, the round limit), stop while generating and while a tool
 * runs, engine failures and a full context, the conversation commands, NUL bytes, sessions
 * saved and loaded, and a corrupt session never overwritten. */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app/chat/app.h"
#include "tests/unit/check.h"

/* ---- a generator that plays scripted answers ---- */

typedef struct {
    const char *reasoning, *content;
    const char *call_name;      /* a tool call, or NULL */
    const char *call_args;
    int call_valid;
    parse_stop_reason stop;
    const char *error;          /* the generator fails with this */
    int endless;                /* emits content until cancelled */
} answer;

typedef struct {
    generator base;
    const answer *script;       /* the answers in order; the last repeats */
    int n_script, started;
    int fd[2];
    int running, cancelled, emitted;
    const char *refuse;         /* start fails with this (a server down) */
    generator_result result;
    char last_request_system[64];
    int last_request_n, last_request_thinking, last_request_tools, last_request_max_tokens;
    char last_request_first[160], last_request_last[600];   /* the first and last messages' text */
} fake_generator;

static int fake_start(generator *g, const generator_request *req, kimi_err *err)
{
    fake_generator *f = (fake_generator *)g;
    if (f->refuse)
        return kimi_fail(err, KIMI_ERR_IO, "%s", f->refuse);
    f->running = 1;
    f->cancelled = f->emitted = 0;
    f->started++;
    f->result = (generator_result){.prompt_tokens = 10 * req->conv->n_messages, .reused_tokens = 5};
    snprintf(f->last_request_system, sizeof f->last_request_system, "%s",
             req->conv->n_messages && req->conv->messages[0].role == CHAT_ROLE_SYSTEM
                 ? req->conv->messages[0].content.s : "");
    const chat_conversation *c = req->conv;
    f->last_request_n = c->n_messages;
    f->last_request_thinking = req->thinking;
    f->last_request_tools = req->tools != NULL;
    f->last_request_max_tokens = req->max_tokens;
    snprintf(f->last_request_first, sizeof f->last_request_first, "%s",
             c->n_messages && c->messages[0].content.s ? c->messages[0].content.s : "");
    snprintf(f->last_request_last, sizeof f->last_request_last, "%s",
             c->n_messages && c->messages[c->n_messages - 1].content.s ? c->messages[c->n_messages - 1].content.s : "");
    char byte = 1;
    return write(f->fd[1], &byte, 1) == 1 ? 0 : -1;
}

static int fake_event_fd(const generator *g) { return ((const fake_generator *)g)->fd[0]; }

static void emit(fake_generator *f, generator_event_fn fn, void *user, parse_event pe)
{
    if (!pe.text)
        pe.text = "";
    pe.len = strlen(pe.text);
    generator_event ev = {.kind = GENERATOR_EVENT_PARSE, .parse = pe, .tokens = ++f->emitted};
    fn(user, &ev);
}

static int fake_pump(generator *g, generator_event_fn fn, void *user, kimi_err *err)
{
    fake_generator *f = (fake_generator *)g;
    (void)err;
    if (!f->running)
        return 0;
    const answer *a = &f->script[f->started - 1 < f->n_script ? f->started - 1 : f->n_script - 1];
    if (a->endless && !f->cancelled) {
        emit(f, fn, user, (parse_event){.kind = PARSE_CONTENT_TEXT, .text = "more "});
        return 0;  /* the fd stays readable: the loop comes back */
    }
    char byte;
    while (read(f->fd[0], &byte, 1) == 1)
        ;
    if (a->reasoning)
        emit(f, fn, user, (parse_event){.kind = PARSE_REASONING_TEXT, .text = a->reasoning});
    if (a->content && !a->endless)
        emit(f, fn, user, (parse_event){.kind = PARSE_CONTENT_TEXT, .text = a->content});
    if (a->call_name && !f->cancelled) {
        char id[64];
        snprintf(id, sizeof id, "functions.%s:0", a->call_name);
        emit(f, fn, user, (parse_event){.kind = PARSE_TOOL_CALL_BEGIN});
        emit(f, fn, user, (parse_event){.kind = PARSE_TOOL_CALL_ID, .text = id, .name = a->call_name});
        emit(f, fn, user, (parse_event){.kind = PARSE_TOOL_CALL_ARGS, .text = a->call_args});
        emit(f, fn, user, (parse_event){.kind = PARSE_TOOL_CALL_END, .valid = a->call_valid,
                                        .text = a->call_valid ? "" : "invalid JSON arguments: x"});
    }
    parse_stop_reason stop = f->cancelled ? PARSE_STOP_CANCELLED : a->error ? PARSE_STOP_ERROR : a->stop;
    if (a->error)
        snprintf(f->result.error, sizeof f->result.error, "%s", a->error);
    emit(f, fn, user, (parse_event){.kind = PARSE_STOP, .stop = stop});
    f->result.generated_tokens = f->emitted;
    f->running = 0;
    return 1;
}

static void fake_cancel(generator *g)
{
    fake_generator *f = (fake_generator *)g;
    f->cancelled = 1;
    char byte = 1;
    if (write(f->fd[1], &byte, 1) != 1)
        f->running = 0;
}

static const generator_result *fake_result(const generator *g) { return &((const fake_generator *)g)->result; }

static void fake_close(generator *g)
{
    fake_generator *f = (fake_generator *)g;
    close(f->fd[0]);
    close(f->fd[1]);
}

static const generator_ops fake_ops = {fake_start, fake_event_fd, fake_pump, fake_cancel, fake_result, fake_close};

static fake_generator fake;

static generator *fake_open(const answer *script, int n)
{
    fake = (fake_generator){.base = {.ops = &fake_ops, .model = "fake", .backend = "cpu TP=1",
                                     .summary = "fake generator", .context_limit = 1000},
                            .script = script, .n_script = n};
    if (pipe2(fake.fd, O_NONBLOCK))
        abort();
    return &fake.base;
}

/* ---- a front end that records ---- */

typedef struct {
    int turns_done;
    app_turn_outcome outcome;
    char message[256];
    int approvals, updates, resets, errors;
    int reset_kept;             /* the last reset's count of messages kept as they were */
    int saved_ok;               /* the last save's outcome */
    int refuse_edit;            /* the front end has no input for /edit */
    int refuse_after_tool;      /* the generator refuses to start once a tool is done */
    tool_approval answer;       /* what the approval callback says */
    int answer_later;           /* leave the approval pending */
    int pending_call;
    char info[4096];
    char infos[8192];           /* every info line since the app opened */
    char edit[256];
    char returned[256];         /* what the last queue_returned gave back */
    int returns, queue_changes;
    int refuse_after_turn;      /* the generator refuses to start once a turn is done */
    app *a;
} recorder;

static void on_turn_done(void *user, app_turn_outcome outcome, const char *message)
{
    recorder *r = user;
    r->turns_done++;
    r->outcome = outcome;
    snprintf(r->message, sizeof r->message, "%s", message ? message : "");
    if (r->refuse_after_turn)
        fake.refuse = "server down";
}

static void on_queue_returned(void *user, const char *text, size_t len)
{
    recorder *r = user;
    r->returns++;
    snprintf(r->returned, sizeof r->returned, "%.*s", (int)len, text);
}

static void on_queue_changed(void *user) { ((recorder *)user)->queue_changes++; }

static void on_approval(void *user, const app_tool_call *c)
{
    recorder *r = user;
    r->approvals++;
    r->pending_call = c->index;
    if (!r->answer_later)
        app_approve(r->a, c->index, r->answer);
}

static void on_update(void *user, const app_tool_call *c)
{
    recorder *r = user;
    r->updates++;
    if (r->refuse_after_tool && c->state == APP_TOOL_DONE)
        fake.refuse = "server down";
}
static void on_reset(void *user, int kept)
{
    ((recorder *)user)->resets++;
    ((recorder *)user)->reset_kept = kept;
}
static void on_saved(void *user, const char *path, int ok) { (void)path; ((recorder *)user)->saved_ok = ok; }
static void on_error(void *user, const char *line) { (void)line; ((recorder *)user)->errors++; }

static void on_info(void *user, const char *text)
{
    recorder *r = user;
    snprintf(r->info, sizeof r->info, "%s", text);
    size_t used = strlen(r->infos);
    snprintf(r->infos + used, sizeof r->infos - used, "%s\n", text);
}

static int on_view(void *user, const char *name, const char *arg, kimi_err *err)
{
    recorder *r = user;
    if (!strcmp(name, "edit") && r->refuse_edit)
        return kimi_fail(err, KIMI_ERR_INPUT, "/edit needs the interactive prompt");
    if (!strcmp(name, "edit"))
        snprintf(r->edit, sizeof r->edit, "%s", arg);
    return 0;
}

/* Run the core until the turn ends (or a deadline). */
static void wait_idle(app *a, double seconds)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (app_busy(a)) {
        struct pollfd fds[APP_MAX_POLL_FDS];
        int n = app_poll_fds(a, fds);
        if (n == 0)
            break;  /* waiting for an approval */
        poll(fds, (nfds_t)n, 100);
        kimi_err err = {0};
        CHECK(app_dispatch(a, &err) == 0);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) * 1e-9 > seconds) {
            CHECK_MSG(0, "the turn did not end within %g s", seconds);
            break;
        }
    }
}

static char tmp_dir[256], tools_file[300];
static app_options opt;
static recorder rec;

static app *open_app(const answer *script, int n)
{
    rec = (recorder){.answer = TOOL_APPROVE_ONCE, .pending_call = -1};
    app_frontend fe = {.user = &rec, .turn_done = on_turn_done, .tool_update = on_update,
                       .session_reset = on_reset, .error = on_error, .info = on_info,
                       .view_command = on_view, .saved = on_saved, .queue_returned = on_queue_returned,
                       .queue_changed = on_queue_changed};
    app *a = NULL;
    kimi_err err = {0};
    CHECK_MSG(app_open(&a, &opt, &fe, fake_open(script, n), &err) == 0, "%s", err.msg);
    rec.a = a;
    return a;
}

static void send(app *a, const char *text)
{
    kimi_err err = {0};
    CHECK_MSG(app_submit_line(a, text, strlen(text), &err) == 0, "%s: %s", text, err.msg);
    wait_idle(a, 10);
}

static const chat_message *msg(app *a, int i) { return &app_session(a)->conv.messages[i]; }
static int n_msgs(app *a) { return app_session(a)->conv.n_messages; }

static void test_answer_and_commands(void)
{
    static const answer script[] = {{.reasoning = "hmm", .content = "four", .stop = PARSE_STOP_END_OF_TURN}};
    app *a = open_app(script, 1);
    send(a, "2+2?");
    CHECK(rec.turns_done == 1 && rec.outcome == APP_TURN_DONE);
    CHECK_INT(n_msgs(a), 2);
    CHECK_STR(msg(a, 1)->content.s, "four");
    CHECK_STR(msg(a, 1)->reasoning.s, "hmm");
    CHECK(app_session(a)->meta[1].has_stats && app_session(a)->meta[1].reused_tokens == 5);
    CHECK(app_session(a)->path != NULL);            /* autosaved */
    struct stat st;
    CHECK(app_session(a)->path && stat(app_session(a)->path, &st) == 0);

    kimi_err err = {0};
    CHECK(app_command(a, "/system Be terse.", &err) == 0);
    CHECK(msg(a, 0)->role == CHAT_ROLE_SYSTEM && n_msgs(a) == 3);
    CHECK_INT(rec.reset_kept, 0);                   /* every message moved down one */
    send(a, "again?");
    CHECK_STR(fake.last_request_system, "Be terse.");
    CHECK_INT(n_msgs(a), 5);
    CHECK(app_command(a, "/undo", &err) == 0 && n_msgs(a) == 3);
    CHECK_INT(rec.reset_kept, 3);                   /* the view keeps all before the question */
    CHECK(app_command(a, "/retry", &err) == 0);
    CHECK_INT(rec.reset_kept, 2);                   /* ... all before the answer */
    wait_idle(a, 10);
    CHECK_INT(n_msgs(a), 3);                        /* the answer replaced */
    /* /retry that cannot start keeps the answer it was to replace */
    fake.refuse = "server down";
    CHECK(app_command(a, "/retry", &err) != 0 && strstr(err.msg, "server down"));
    fake.refuse = NULL;
    CHECK(!app_busy(a) && n_msgs(a) == 3 && !strcmp(msg(a, 2)->content.s, "four"));
    /* a front end without an input to edit in refuses /edit: the exchange stays */
    rec.refuse_edit = 1;
    CHECK(app_command(a, "/edit", &err) != 0 && n_msgs(a) == 3);
    rec.refuse_edit = 0;
    CHECK(app_command(a, "/edit", &err) == 0 && n_msgs(a) == 1);
    CHECK_INT(rec.reset_kept, 1);
    CHECK_STR(rec.edit, "2+2?");
    CHECK(app_command(a, "/system", &err) == 0 && n_msgs(a) == 0);
    /* a 100 KB system prompt, typed as a command */
    size_t big = 100 * 1024;
    char *line = malloc(big + 9);
    memcpy(line, "/system ", 8);
    memset(line + 8, 's', big);
    line[big + 8] = 0;
    CHECK_MSG(app_submit_line(a, line, big + 8, &err) == 0, "%s", err.msg);
    CHECK(n_msgs(a) == 1 && msg(a, 0)->role == CHAT_ROLE_SYSTEM && msg(a, 0)->content.len == big);
    free(line);
    CHECK(app_command(a, "/system", &err) == 0 && n_msgs(a) == 0);
    CHECK(app_command(a, "/system Be brief.", &err) == 0);
    send(a, "q");
    CHECK(app_command(a, "/new", &err) == 0 && n_msgs(a) == 1);
    CHECK_INT(rec.reset_kept, 1);                   /* the system prompt stays */
    CHECK(app_command(a, "/stats", &err) == 0 && strstr(rec.info, "session: 1 message, 0 answers,"));
    CHECK(app_command(a, "/system", &err) == 0 && n_msgs(a) == 0);
    CHECK(app_command(a, "/set temperature 0", &err) == 0 && app_session(a)->settings.temperature == 0);
    CHECK(app_command(a, "/think off", &err) == 0 && app_session(a)->settings.thinking == 0);
    CHECK(app_command(a, "/stats", &err) == 0 && strstr(rec.info, "temperature 0"));
    CHECK(app_command(a, "/theme", &err) == 0 && strstr(rec.info, "themes: default, high-contrast, light, mono"));
    CHECK(app_command(a, "/bogus", &err) != 0 && strstr(err.msg, "/bogus"));
    CHECK(app_command(a, "/undo", &err) != 0 && strstr(err.msg, "no exchange to drop"));
    CHECK(app_command(a, "/edit", &err) != 0 && strstr(err.msg, "/edit: there is no exchange to edit"));

    /* NUL bytes in what the user sends are kept with their length */
    CHECK(app_send(a, "a\0b", 3, &err) == 0);
    wait_idle(a, 10);
    CHECK(msg(a, 0)->content.len == 3 && msg(a, 0)->content.s[2] == 'b');
    /* "//" sends text that starts with '/' */
    send(a, "//etc/passwd?");
    CHECK_STR(msg(a, 2)->content.s, "/etc/passwd?");
    /* blank lines send nothing */
    send(a, "  \t ");
    CHECK_INT(n_msgs(a), 4);
    app_close(a);
}

static void test_tool_rounds(void)
{
    static const answer script[] = {
        {.reasoning = "call", .call_name = "echo", .call_args = "{\"text\": \"hi there\"}", .call_valid = 1,
         .stop = PARSE_STOP_END_OF_TURN},
        {.content = "done", .stop = PARSE_STOP_END_OF_TURN},
    };
    opt.allow_tools = "echo";
    app *a = open_app(script, 2);
    send(a, "use the tool");
    CHECK(rec.outcome == APP_TURN_DONE && fake.started == 2);
    CHECK_INT(n_msgs(a), 4);
    CHECK(msg(a, 2)->role == CHAT_ROLE_TOOL && !strcmp(msg(a, 2)->content.s, "hi there\n"));
    CHECK_STR(msg(a, 2)->tool_call_id, "functions.echo:0");
    CHECK_STR(msg(a, 2)->name, "echo");
    CHECK_STR(app_session(a)->meta[2].tool_state, "done");
    CHECK(app_last_turn_called(a, "echo") && !app_last_turn_called(a, "ech"));
    long used = app_context_used(a);
    CHECK(used > 0);
    kimi_err nerr = {0};
    CHECK(app_command(a, "/new", &nerr) == 0);
    CHECK(!app_last_turn_called(a, "echo") && app_context_used(a) == 0);   /* /expect tool after /new */
    app_close(a);

    /* the generation after the tool results cannot start: the turn fails with that one line,
       said once (the outcome), not twice */
    a = open_app(script, 2);
    rec.refuse_after_tool = 1;
    send(a, "use the tool");
    fake.refuse = NULL;
    CHECK(rec.outcome == APP_TURN_FAILED && strstr(rec.message, "server down"));
    CHECK_INT(rec.errors, 0);
    CHECK(n_msgs(a) == 3 && msg(a, 2)->role == CHAT_ROLE_TOOL);
    app_close(a);
    opt.allow_tools = NULL;

    /* without a policy or an approval callback the call is not run and the model told that
       nobody was asked (not "the user denied") and what would allow it */
    a = open_app(script, 2);
    send(a, "use the tool");
    CHECK_MSG(strstr(msg(a, 2)->content.s, "nobody could be asked") && strstr(msg(a, 2)->content.s, "--allow-tools echo") &&
                  !strstr(msg(a, 2)->content.s, "The user denied"),
              "%s", msg(a, 2)->content.s);
    CHECK(!strcmp(app_session(a)->meta[2].tool_state, "denied"));
    CHECK(!app_last_turn_called(a, "echo"));
    app_close(a);
}

static void test_approval(void)
{
    static const answer script[] = {
        {.call_name = "echo", .call_args = "{\"text\": \"1\"}", .call_valid = 1, .stop = PARSE_STOP_END_OF_TURN},
        {.call_name = "echo", .call_args = "{\"text\": \"2\"}", .call_valid = 1, .stop = PARSE_STOP_END_OF_TURN},
        {.content = "ok", .stop = PARSE_STOP_END_OF_TURN},
    };
    app *a = open_app(script, 3);
    app_frontend fe = {0};
    (void)fe;
    /* approval asked later: the core waits without blocking */
    rec.answer_later = 1;
    app_close(a);
    rec = (recorder){0};
    app_frontend f2 = {.user = &rec, .turn_done = on_turn_done, .tool_approval = on_approval,
                       .tool_update = on_update, .info = on_info};
    kimi_err err = {0};
    CHECK(app_open(&a, &opt, &f2, fake_open(script, 3), &err) == 0);
    rec.a = a;
    rec.answer_later = 1;
    CHECK(app_send(a, "go", 2, &err) == 0);
    wait_idle(a, 10);
    CHECK(app_busy(a) && rec.approvals == 1 && rec.pending_call == 0);
    struct pollfd fds[APP_MAX_POLL_FDS];
    CHECK_INT(app_poll_fds(a, fds), 0);             /* nothing to wait on but the user */
    rec.answer_later = 0;
    rec.answer = TOOL_APPROVE_ALWAYS;
    app_approve(a, 0, TOOL_APPROVE_ALWAYS);
    wait_idle(a, 10);
    CHECK_INT(rec.approvals, 1);                    /* "always": the second call ran unasked */
    CHECK(!app_busy(a) && rec.outcome == APP_TURN_DONE);
    CHECK(n_msgs(a) == 6 && !strcmp(msg(a, 4)->content.s, "2\n"));
    /* the grant is visible and revocable (issue 18): /tools names it, /tools ask takes it
       back, and /new ends it */
    CHECK(app_command(a, "/tools", &err) == 0);
    CHECK_MSG(strstr(rec.info, "echo") && strstr(rec.info, "always (a)"), "%s", rec.info);
    CHECK(app_command(a, "/tools ask echo", &err) == 0);
    CHECK(app_command(a, "/tools", &err) == 0);
    CHECK_MSG(strstr(rec.info, " asks ") && !strstr(rec.info, "always (a)"), "%s", rec.info);
    CHECK(app_command(a, "/tools ask nosuch", &err) != 0 && strstr(err.msg, "no tool named 'nosuch'"));
    app_close(a);
    rec = (recorder){0};
    CHECK(app_open(&a, &opt, &f2, fake_open(script, 3), &err) == 0);
    rec.a = a;
    rec.answer = TOOL_APPROVE_ALWAYS;
    CHECK(app_send(a, "go", 2, &err) == 0);
    wait_idle(a, 10);
    CHECK_INT(rec.approvals, 1);
    CHECK(app_command(a, "/tools", &err) == 0 && strstr(rec.info, "always (a)"));
    CHECK(app_command(a, "/new", &err) == 0);
    CHECK(app_command(a, "/tools", &err) == 0);
    CHECK_MSG(strstr(rec.info, " asks ") && !strstr(rec.info, "always (a)"), "%s", rec.info);
    app_close(a);

    /* the tool disabled while its question is open: "yes" does not run it */
    rec = (recorder){0};
    CHECK(app_open(&a, &opt, &f2, fake_open(script, 3), &err) == 0);
    rec.a = a;
    rec.answer_later = 1;
    CHECK(app_send(a, "go", 2, &err) == 0);
    wait_idle(a, 10);
    CHECK(app_busy(a) && rec.approvals == 1);
    CHECK(app_command(a, "/tools disable echo", &err) == 0);
    rec.answer_later = 0;
    rec.answer = TOOL_APPROVE_ONCE;
    app_approve(a, 0, TOOL_APPROVE_ONCE);
    wait_idle(a, 10);
    CHECK_MSG(n_msgs(a) >= 3 && !strcmp(app_session(a)->meta[2].tool_state, "unknown tool") &&
              !app_last_turn_called(a, "echo"), "%s", app_session(a)->meta[2].tool_state);
    app_close(a);
}

static void test_bad_calls_and_limit(void)
{
    static const answer unknown[] = {
        {.call_name = "nosuch", .call_args = "{}", .call_valid = 1, .stop = PARSE_STOP_END_OF_TURN},
        {.call_name = "echo", .call_args = "{\"text\": ", .call_valid = 0, .stop = PARSE_STOP_END_OF_TURN},
        {.content = "ok", .stop = PARSE_STOP_END_OF_TURN},
    };
    opt.allow_tools = "all";
    app *a = open_app(unknown, 3);
    send(a, "go");
    CHECK(strstr(msg(a, 2)->content.s, "unknown tool 'nosuch'") && strstr(msg(a, 2)->content.s, "echo"));
    CHECK_MSG(strstr(msg(a, 4)->content.s, "[not run: invalid JSON arguments"), "%s", msg(a, 4)->content.s);
    CHECK_STR(app_session(a)->meta[4].tool_state, "bad arguments");
    app_close(a);

    static const answer forever[] = {
        {.call_name = "echo", .call_args = "{\"text\": \"x\"}", .call_valid = 1, .stop = PARSE_STOP_END_OF_TURN},
    };
    a = open_app(forever, 1);
    send(a, "loop");
    CHECK(rec.outcome == APP_TURN_TOOL_LIMIT && strstr(rec.message, "8 rounds"));
    CHECK_INT(fake.started, APP_MAX_TOOL_ROUNDS + 1);
    /* every call has its result, the last ones "not run" */
    const chat_message *last = msg(a, n_msgs(a) - 1);
    CHECK_MSG(last->role == CHAT_ROLE_TOOL && strstr(last->content.s, "[not run: 8 rounds"), "%d %s", last->role, last->content.s);
    app_close(a);
    opt.allow_tools = NULL;
}

static void test_stop_and_failures(void)
{
    static const answer endless[] = {{.endless = 1, .stop = PARSE_STOP_END_OF_TURN}};
    app *a = open_app(endless, 1);
    kimi_err err = {0};
    CHECK(app_send(a, "talk", 4, &err) == 0);
    struct pollfd fds[APP_MAX_POLL_FDS];
    for (int i = 0; i < 5; i++) {
        poll(fds, (nfds_t)app_poll_fds(a, fds), 100);
        app_dispatch(a, &err);
    }
    CHECK(app_command(a, "/new", &err) != 0 && strstr(err.msg, "still coming"));
    CHECK(app_send(a, "x", 1, &err) != 0);
    app_stop(a);
    wait_idle(a, 5);
    CHECK(rec.outcome == APP_TURN_STOPPED);
    CHECK(n_msgs(a) == 2 && msg(a, 1)->content.s && !strncmp(msg(a, 1)->content.s, "more more ", 10));
    app_close(a);

    static const answer slow_tool[] = {
        {.call_name = "sleep", .call_args = "{\"s\": \"30\"}", .call_valid = 1, .stop = PARSE_STOP_END_OF_TURN},
    };
    opt.allow_tools = "all";
    a = open_app(slow_tool, 1);
    CHECK(app_send(a, "nap", 3, &err) == 0);
    for (int i = 0; i < 20 && app_poll_fds(a, fds) && fds[0].fd == fake.fd[0]; i++) {
        poll(fds, 1, 100);
        app_dispatch(a, &err);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    app_stop(a);
    wait_idle(a, 5);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = t1.tv_sec - t0.tv_sec + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    CHECK_MSG(seconds < 2, "stopping a running tool took %.2f s", seconds);
    CHECK(rec.outcome == APP_TURN_STOPPED && !strcmp(app_session(a)->meta[2].tool_state, "cancelled"));
    app_close(a);

    /* quitting while a tool runs (SIGTERM, /quit in the full screen): wound down, the call
       answered before the session is saved */
    a = open_app(slow_tool, 1);
    CHECK(app_send(a, "nap", 3, &err) == 0);
    for (int i = 0; i < 20 && app_poll_fds(a, fds) && fds[0].fd == fake.fd[0]; i++) {
        poll(fds, 1, 100);
        app_dispatch(a, &err);
    }
    CHECK(app_busy(a) && n_msgs(a) == 2);
    CHECK(app_wind_down(a, 3, &err) == 0 && !app_busy(a));
    CHECK(n_msgs(a) == 3 && msg(a, 2)->role == CHAT_ROLE_TOOL && !strcmp(app_session(a)->meta[2].tool_state, "cancelled"));
    CHECK(app_wind_down(a, 3, &err) == 0);         /* idle: nothing to do */
    app_close(a);
    opt.allow_tools = NULL;

    static const answer broken[] = {{.content = "par", .error = "device lost"}};
    a = open_app(broken, 1);
    send(a, "x");
    CHECK(rec.outcome == APP_TURN_FAILED && !strcmp(rec.message, "device lost"));
    CHECK(n_msgs(a) == 2 && !strcmp(msg(a, 1)->content.s, "par"));   /* what came is kept */
    app_close(a);

    static const answer full[] = {{.content = "long", .stop = PARSE_STOP_CONTEXT_FULL}};
    a = open_app(full, 1);
    send(a, "x");
    CHECK(rec.outcome == APP_TURN_FAILED && strstr(rec.message, "context is full"));
    app_close(a);
}

static void test_sessions(void)
{
    static const answer script[] = {{.content = "saved", .stop = PARSE_STOP_END_OF_TURN}};
    app *a = open_app(script, 1);
    send(a, "keep this");
    kimi_err err = {0};
    CHECK(app_command(a, "/save mine", &err) == 0);
    CHECK(app_command(a, "/new", &err) == 0 && n_msgs(a) == 0);
    CHECK_MSG(app_command(a, "/load mine", &err) == 0, "%s", err.msg);
    CHECK(app_context_used(a) > 0);     /* /stats after a load: what its last answer filled */
    CHECK(n_msgs(a) == 2 && !strcmp(msg(a, 1)->content.s, "saved"));

    /* /save NAME never replaces a file of the user's that happens to have that name */
    FILE *notes = fopen("notes", "w");
    fputs("my notes\n", notes);
    fclose(notes);
    CHECK_MSG(app_command(a, "/save notes", &err) == 0, "%s", err.msg);
    char text[64] = "";
    notes = fopen("notes", "r");
    CHECK(notes && fgets(text, sizeof text, notes));
    fclose(notes);
    CHECK_STR(text, "my notes\n");
    CHECK(app_command(a, "/load notes", &err) == 0 && n_msgs(a) == 2);   /* the session copy */
    CHECK(app_command(a, "/save ./notes", &err) != 0 && strstr(err.msg, "not a kimi-chat session"));
    CHECK(app_command(a, "/save ..", &err) != 0 && strstr(err.msg, "'.'"));
    CHECK(app_command(a, "/save mine", &err) == 0);                      /* its own copy again */

    /* two exports in one second: two files, the first one kept */
    CHECK(app_command(a, "/export", &err) == 0 && app_command(a, "/export", &err) == 0);
    CHECK_MSG(system("test $(ls kimi-chat-*.md | wc -l) -eq 2") == 0, "%s", rec.info);

    /* /export PATH never replaces a file, nor what a link there points to, unless told to
       (issue 18: it silently replaced both while /save refused) */
    FILE *mine = fopen("mine.md", "w");
    fputs("my notes\n", mine);
    fclose(mine);
    err = (kimi_err){0};
    CHECK_MSG(app_command(a, "/export mine.md", &err) != 0 && strstr(err.msg, "mine.md exists") &&
                  strstr(err.msg, "/export md mine.md --force"),
              "%s", err.msg);
    CHECK(symlink("mine.md", "link.md") == 0);
    CHECK_MSG(app_command(a, "/export json link.md", &err) != 0 && strstr(err.msg, "link.md exists"), "%s", err.msg);
    CHECK(symlink("/nonexistent-dir/target", "dangling.md") == 0);
    CHECK(app_command(a, "/export dangling.md", &err) != 0);
    CHECK_MSG(app_command(a, "/export md link.md --force", &err) == 0, "%s", err.msg);
    struct stat lst;
    CHECK(lstat("link.md", &lst) == 0 && S_ISREG(lst.st_mode));   /* the link replaced, not followed */
    mine = fopen("mine.md", "r");
    CHECK(mine && fgets(text, sizeof text, mine));
    fclose(mine);
    CHECK_STR(text, "my notes\n");
    CHECK_MSG(app_command(a, "/export md mine.md --force", &err) == 0, "%s", err.msg);
    CHECK(lstat("mine.md", &lst) == 0 && (lst.st_mode & 0777) == 0600);   /* conversation text: 0600 */
    mine = fopen("mine.md", "r");
    CHECK(mine && fgets(text, sizeof text, mine) && strcmp(text, "my notes\n"));
    fclose(mine);

    /* a corrupt file: an error, the session unchanged, and the file never written */
    char corrupt[400];
    snprintf(corrupt, sizeof corrupt, "%s/corrupt.json", tmp_dir);
    FILE *f = fopen(corrupt, "w");
    fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"trunc", f);
    fclose(f);
    CHECK(app_command(a, "/load /nonexistent-dir/x.json", &err) != 0);
    mkdir("adir", 0700);
    CHECK_MSG(app_command(a, "/load adir", &err) != 0 && strstr(err.msg, "adir: cannot read: it is a folder"), "%s", err.msg);
    err = (kimi_err){0};
    CHECK(app_command(a, "/load corrupt.json", &err) != 0 && strstr(err.msg, "corrupt.json"));
    CHECK_INT(n_msgs(a), 2);
    /* an empty conversation ([] or no messages) is an error naming the file, not a silent
       swap of the conversation for nothing */
    for (int k = 0; k < 2; k++) {
        f = fopen("empty.json", "w");
        fputs(k ? "{\"messages\": []}" : "[]", f);
        fclose(f);
        err = (kimi_err){0};
        CHECK_MSG(app_command(a, "/load empty.json", &err) == KIMI_ERR_INPUT &&
                      strstr(err.msg, "empty.json: no messages to load (an empty conversation)"),
                  "%s", err.msg);
        CHECK_INT(n_msgs(a), 2);
    }
    app_close(a);

    /* a file from outside the sessions folder is read, never written: autosave goes elsewhere */
    opt.load_path = corrupt;
    rec = (recorder){0};
    app_frontend fe = {.user = &rec};
    CHECK(app_open(&a, &opt, &fe, fake_open(script, 1), &err) != 0 && strstr(err.msg, "corrupt.json"));
    opt.load_path = NULL;
    struct stat st;
    CHECK(stat(corrupt, &st) == 0 && st.st_size == 48);

    /* the sessions folder unwritable mid-session: the save fails (said), the conversation
       stays in memory, and once the folder is back /save writes it, with no empty file left */
    char sessions[400], moved[400];
    snprintf(sessions, sizeof sessions, "%s/data/kimi-chat/sessions", tmp_dir);
    snprintf(moved, sizeof moved, "%s/sessions.away", tmp_dir);
    a = open_app(script, 1);
    CHECK(rename(sessions, moved) == 0);
    f = fopen(sessions, "w");                   /* a file where the folder was */
    fclose(f);
    int errors = rec.errors;
    send(a, "not saved yet");
    CHECK(rec.errors > errors && !rec.saved_ok && n_msgs(a) == 2);
    CHECK(unlink(sessions) == 0 && rename(moved, sessions) == 0);
    CHECK_MSG(app_command(a, "/save", &err) == 0 && rec.saved_ok, "%s", err.msg);
    CHECK(app_session(a)->path && stat(app_session(a)->path, &st) == 0 && st.st_size > 0);
    app_close(a);

    /* --resume with a corrupt newest session: says so, skips it, resumes the one before, and
       never writes the corrupt one */
    char newest[400];
    snprintf(newest, sizeof newest, "%s/data/kimi-chat/sessions/2099-01-01T00-00-00.json", tmp_dir);
    f = fopen(newest, "w");
    fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"trunc", f);
    fclose(f);
    opt.resume = 1;
    a = open_app(script, 1);
    opt.resume = 0;
    CHECK_MSG(strstr(rec.infos, "skipped") && strstr(rec.infos, "2099-01-01T00-00-00.json"), "%s", rec.infos);
    CHECK_MSG(strstr(rec.infos, "resumed "), "%s", rec.infos);
    CHECK(n_msgs(a) == 2 && !strcmp(msg(a, 1)->content.s, "saved"));
    send(a, "more");
    app_close(a);
    CHECK(stat(newest, &st) == 0 && st.st_size == 48);
}

/* Settings given on the command line win over a loaded session's, for --load, --resume and
 * /load (issue 18); the ones not given are the file's. */
static void test_flags_override_loaded(void)
{
    static const answer script[] = {{.content = "ok", .stop = PARSE_STOP_END_OF_TURN}};
    app *a = open_app(script, 1);
    kimi_err err = {0};
    CHECK(app_command(a, "/set temperature 0", &err) == 0 && app_command(a, "/set top_k 7", &err) == 0);
    send(a, "cold");
    CHECK_MSG(app_command(a, "/save cold", &err) == 0, "%s", err.msg);
    app_close(a);

    char path[400];
    snprintf(path, sizeof path, "%s/data/kimi-chat/sessions/cold.json", tmp_dir);
    app_options saved = opt;
    opt.temperature = 0.7f;
    opt.has_temperature = 1;
    opt.flag_settings = OPTIONS_SET_TEMPERATURE;
    for (int how = 0; how < 3; how++) {
        opt.load_path = how == 0 ? path : NULL;
        opt.resume = how == 1;
        a = open_app(script, 1);
        if (how == 2)
            CHECK_MSG(app_command(a, "/load cold", &err) == 0, "%s", err.msg);
        const session_settings *st = &app_session(a)->settings;
        CHECK_MSG(st->temperature == 0.7f, "way %d: temperature %g", how, (double)st->temperature);
        CHECK_MSG(st->top_k == 7, "way %d: top_k %d (the file's)", how, st->top_k);
        app_close(a);
    }
    /* an OpenAI file without kimi-chat's settings keeps the ones the session had */
    char openai[400];
    snprintf(openai, sizeof openai, "%s/openai.json", tmp_dir);
    FILE *f = fopen(openai, "w");
    fputs("[{\"role\": \"user\", \"content\": \"hi\"}]", f);
    fclose(f);
    opt = saved;
    opt.top_k = 5;
    opt.load_path = openai;
    a = open_app(script, 1);
    CHECK_INT(app_session(a)->settings.top_k, 5);
    app_close(a);
    opt = saved;
}

/* Ill-formed UTF-8 typed or piped in becomes U+FFFD in the conversation, said once (issue 18):
 * a message, the system prompt. */
static void test_invalid_utf8_input(void)
{
    static const answer script[] = {{.content = "ok", .stop = PARSE_STOP_END_OF_TURN}};
    app *a = open_app(script, 1);
    kimi_err err = {0};
    CHECK(app_command(a, "/system be \xc3 brief", &err) == 0);
    CHECK_STR(msg(a, 0)->content.s, "be \xEF\xBF\xBD brief");
    send(a, "\xff\xfe bad");
    CHECK_INT(n_msgs(a), 3);
    CHECK_STR(msg(a, 1)->content.s, "\xEF\xBF\xBD\xEF\xBF\xBD bad");
    send(a, "\xed\xa0\x80 again");
    CHECK_STR(msg(a, 3)->content.s, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD again");
    const char *said = strstr(rec.infos, "not valid UTF-8");
    CHECK_MSG(said && !strstr(said + 1, "not valid UTF-8"), "%s", rec.infos);
    app_close(a);
}

static void submit(app *a, const char *text)
{
    kimi_err err = {0};
    CHECK_MSG(app_submit_line(a, text, strlen(text), &err) == 0, "%s: %s", text, err.msg);
}

static const char *queued(app *a, int i)
{
    size_t len;
    const char *text = app_queued(a, i, &len);
    return text ? text : "(none)";
}

/* Messages sent while a turn runs wait in order and go out when it ends with a whole answer;
 * a failed, stopped or unstartable turn hands them back rather than lose them. */
static void test_queue(void)
{
    static const answer fine[] = {{.content = "ok", .stop = PARSE_STOP_END_OF_TURN}};
    app *a = open_app(fine, 1);
    submit(a, "one");
    CHECK(app_busy(a));
    submit(a, "two");
    submit(a, "//three");
    submit(a, "four");
    submit(a, "   ");                               /* blank: nothing queued */
    CHECK_INT(app_queue_length(a), 3);
    CHECK_STR(queued(a, 0), "two");
    CHECK_STR(queued(a, 1), "/three");
    CHECK_STR(queued(a, 2), "four");
    size_t len = 0;
    char *back = app_unqueue(a, &len);              /* the newest comes back to be edited */
    CHECK(back && len == 4 && !strcmp(back, "four"));
    free(back);
    CHECK_INT(app_queue_length(a), 2);
    CHECK(rec.queue_changes == 4);
    /* a command while busy is not queued: it runs or says why not */
    kimi_err err = {0};
    CHECK(app_submit_line(a, "/undo", 5, &err) != 0 && strstr(err.msg, "still coming"));
    wait_idle(a, 10);
    CHECK_INT(fake.started, 3);
    CHECK_INT(n_msgs(a), 6);
    CHECK_STR(msg(a, 2)->content.s, "two");
    CHECK_STR(msg(a, 4)->content.s, "/three");
    CHECK(app_queue_length(a) == 0 && rec.returns == 0 && app_unqueue(a, &len) == NULL);
    app_close(a);

    /* the turn fails: the queued messages come back, in order, and none is sent */
    static const answer broken[] = {{.error = "engine broke"}, {.content = "ok", .stop = PARSE_STOP_END_OF_TURN}};
    a = open_app(broken, 2);
    submit(a, "q1");
    submit(a, "q2");
    submit(a, "q3");
    wait_idle(a, 10);
    CHECK(rec.outcome == APP_TURN_FAILED && fake.started == 1);
    CHECK_INT(rec.returns, 1);
    CHECK_STR(rec.returned, "q2\n\nq3");
    CHECK_INT(app_queue_length(a), 0);
    app_close(a);

    /* stopped: the same */
    static const answer endless[] = {{.endless = 1, .stop = PARSE_STOP_END_OF_TURN}};
    a = open_app(endless, 1);
    submit(a, "go on");
    submit(a, "then this");
    app_stop(a);
    wait_idle(a, 10);
    CHECK(rec.outcome == APP_TURN_STOPPED && rec.returns == 1 && !strcmp(rec.returned, "then this"));
    CHECK_INT(fake.started, 1);
    app_close(a);

    /* the queued message cannot start (the server went down): said, and handed back */
    a = open_app(fine, 1);
    rec.refuse_after_turn = 1;
    submit(a, "first");
    submit(a, "second");
    wait_idle(a, 10);
    fake.refuse = NULL;
    CHECK(rec.outcome == APP_TURN_DONE && rec.errors == 1);
    CHECK(rec.returns == 1 && !strcmp(rec.returned, "second"));
    CHECK(n_msgs(a) == 2 && !app_busy(a));
    app_close(a);
}

/* Each assistant tool call has its tool message before the next user message. */
static int calls_answered(app *a)
{
    for (int i = 0; i < n_msgs(a); i++)
        for (int k = 0; k < msg(a, i)->n_tool_calls; k++) {
            int found = 0;
            for (int j = i + 1; j < n_msgs(a) && msg(a, j)->role == CHAT_ROLE_TOOL && !found; j++)
                found = !strcmp(msg(a, j)->tool_call_id, msg(a, i)->tool_calls[k].id);
            if (!found)
                return 0;
        }
    return 1;
}

static void rewind_to(app *a, int index, const char *expect)
{
    char *text = NULL;
    size_t len = 0;
    kimi_err err = {0};
    CHECK_MSG(app_rewind(a, index, &text, &len, &err) == 0, "rewind %d: %s", index, err.msg);
    CHECK_MSG(text && len == strlen(expect) && !strcmp(text, expect), "rewind %d gave '%s'", index, text ? text : "");
    CHECK_INT(n_msgs(a), index);
    CHECK_INT(rec.reset_kept, index);
    free(text);
}

static void test_rewind(void)
{
    static const answer script[] = {{.content = "ans", .stop = PARSE_STOP_END_OF_TURN}};
    app *a = open_app(script, 1);
    kimi_err err = {0};
    send(a, "q1");
    send(a, "q2");
    send(a, "q3");
    CHECK_INT(n_msgs(a), 6);
    char *text = NULL;
    size_t len;
    CHECK(app_rewind(a, 1, &text, &len, &err) != 0 && strstr(err.msg, "message 1 is not one of your messages") && !text);
    CHECK(app_rewind(a, 6, &text, &len, &err) != 0 && n_msgs(a) == 6);
    rewind_to(a, 2, "q2");
    /* the session file holds what is left */
    session saved;
    session_init(&saved);
    CHECK(session_load(&saved, app_session(a)->path, &err) == 0 && saved.conv.n_messages == 2);
    session_free(&saved);
    /* the resend says what the cache saved: the fake reuses 5 of 10 per message sent */
    send(a, "q2 again");
    CHECK_MSG(strstr(rec.infos, "after the rewind: 5 of 30 prompt positions reused from the cache, 25 prefilled"), "%s",
              rec.infos);
    CHECK_INT(n_msgs(a), 4);
    /* /undo drops the resent exchange, and once more brings the cut-off part back */
    CHECK(app_command(a, "/undo", &err) == 0 && n_msgs(a) == 2);
    CHECK(app_command(a, "/undo", &err) == 0 && n_msgs(a) == 6);
    CHECK_STR(rec.info, "brought back the 4 messages the rewind cut off");
    CHECK_INT(rec.reset_kept, 2);
    CHECK_STR(msg(a, 2)->content.s, "q2");
    CHECK_STR(msg(a, 4)->content.s, "q3");
    CHECK(app_session(a)->meta[3].has_stats);       /* the meta came back too */
    /* rewinds stack */
    rewind_to(a, 4, "q3");
    rewind_to(a, 0, "q1");
    CHECK(app_command(a, "/undo", &err) == 0 && n_msgs(a) == 4);
    CHECK(app_command(a, "/undo", &err) == 0 && n_msgs(a) == 6);
    /* /edit is a rewind to the last message: /undo brings the exchange back */
    CHECK(app_command(a, "/edit", &err) == 0 && n_msgs(a) == 4 && !strcmp(rec.edit, "q3"));
    CHECK(app_command(a, "/undo", &err) == 0 && n_msgs(a) == 6);
    /* /new forgets what was cut */
    rewind_to(a, 2, "q2");
    CHECK(app_command(a, "/new", &err) == 0 && n_msgs(a) == 0);
    CHECK(app_command(a, "/undo", &err) != 0 && strstr(err.msg, "no exchange to drop"));
    /* an /undo below the cut forgets it too: the part it came from is gone */
    send(a, "r1");
    send(a, "r2");
    rewind_to(a, 2, "r2");
    CHECK(app_command(a, "/undo", &err) == 0 && n_msgs(a) == 6 - 2);   /* restored: r1, r2 */
    rewind_to(a, 2, "r2");
    CHECK(app_command(a, "/retry", &err) == 0);     /* the answer to r1 changes */
    wait_idle(a, 10);
    send(a, "r2b");
    CHECK(app_command(a, "/undo", &err) == 0 && n_msgs(a) == 2);
    CHECK(app_command(a, "/undo", &err) == 0 && n_msgs(a) == 0);       /* r1's exchange, not r2's */
    /* not while an answer is coming */
    static const answer endless[] = {{.endless = 1, .stop = PARSE_STOP_END_OF_TURN}};
    app_close(a);
    a = open_app(endless, 1);
    submit(a, "x");
    CHECK(app_rewind(a, 0, &text, &len, &err) != 0 && strstr(err.msg, "still coming") && !text);
    app_stop(a);
    wait_idle(a, 10);
    app_close(a);

    /* rewinding a conversation with tool rounds keeps every call with its result */
    static const answer tools[] = {
        {.call_name = "echo", .call_args = "{\"text\": \"a\"}", .call_valid = 1, .stop = PARSE_STOP_END_OF_TURN},
        {.content = "done", .stop = PARSE_STOP_END_OF_TURN},
        {.call_name = "echo", .call_args = "{\"text\": \"b\"}", .call_valid = 1, .stop = PARSE_STOP_END_OF_TURN},
        {.content = "done", .stop = PARSE_STOP_END_OF_TURN},
    };
    opt.allow_tools = "echo";
    a = open_app(tools, 4);
    send(a, "t1");
    send(a, "t2");
    CHECK_INT(n_msgs(a), 8);
    rewind_to(a, 4, "t2");
    CHECK(calls_answered(a) && msg(a, 2)->role == CHAT_ROLE_TOOL);
    CHECK(app_command(a, "/undo", &err) == 0 && n_msgs(a) == 8 && calls_answered(a));
    app_close(a);
    opt.allow_tools = NULL;
}

static void compact(app *a, const char *line)
{
    kimi_err err = {0};
    CHECK_MSG(app_command(a, line, &err) == 0, "%s: %s", line, err.msg);
    CHECK(app_busy(a));
    wait_idle(a, 10);
}

/* /compact: the model's summary goes in before the last exchange and the model sees only it,
 * the system prompt and what follows; the session keeps everything; every failure leaves the
 * conversation as it was. */
static void test_compact(void)
{
    static const answer script[] = {
        {.content = "a1", .stop = PARSE_STOP_END_OF_TURN}, {.content = "a2", .stop = PARSE_STOP_END_OF_TURN},
        {.content = "  the gist\n", .stop = PARSE_STOP_END_OF_TURN}, {.content = "a3", .stop = PARSE_STOP_END_OF_TURN},
    };
    opt.allow_tools = "echo";
    app *a = open_app(script, 4);
    kimi_err err = {0};
    CHECK(app_command(a, "/compact", &err) != 0 && strstr(err.msg, "nothing to compact"));
    CHECK(app_command(a, "/system Be brief.", &err) == 0);
    send(a, "q1");
    CHECK(app_command(a, "/compact", &err) != 0 && strstr(err.msg, "nothing to compact"));
    send(a, "q2");
    CHECK_INT(n_msgs(a), 5);
    compact(a, "/compact keep the numbers");
    CHECK_MSG(rec.outcome == APP_TURN_DONE, "%s", rec.message);
    /* what the model was asked: the system prompt, the first exchange, the request; no
       reasoning, no tools, a cap */
    CHECK_INT(fake.last_request_n, 4);
    CHECK_STR(fake.last_request_first, "Be brief.");
    CHECK(strstr(fake.last_request_last, "Summarise our conversation so far") &&
          strstr(fake.last_request_last, "\n\nAlso: keep the numbers"));
    CHECK(!fake.last_request_thinking && !fake.last_request_tools && fake.last_request_max_tokens == APP_COMPACT_MAX_TOKENS);
    /* the summary sits before the last exchange, trimmed; nothing else changed */
    CHECK_INT(n_msgs(a), 6);
    CHECK(msg(a, 3)->role == CHAT_ROLE_USER && app_session(a)->meta[3].summary);
    CHECK_STR(msg(a, 3)->content.s, "[Summary of the earlier conversation]\n\nthe gist\n");
    CHECK_STR(msg(a, 1)->content.s, "q1");
    CHECK_STR(msg(a, 4)->content.s, "q2");
    CHECK_INT(session_context_start(app_session(a)), 3);
    CHECK_INT(rec.reset_kept, 3);
    CHECK(strstr(rec.infos, "compacted: the model now sees a summary of"));
    /* the next turn: the system prompt, the summary and what follows it */
    send(a, "q3");
    CHECK_INT(fake.last_request_n, 5);
    CHECK_STR(fake.last_request_first, "Be brief.");
    CHECK_STR(fake.last_request_last, "q3");
    /* the file and the export keep the whole conversation; it loads back as it was */
    session back;
    session_init(&back);
    CHECK(session_load(&back, app_session(a)->path, &err) == 0 && back.conv.n_messages == 8 && back.meta[3].summary &&
          !back.meta[4].summary && session_context_start(&back) == 3);
    session_free(&back);
    char *md = NULL;
    size_t md_len;
    CHECK(session_to_markdown(app_session(a), &md, &md_len, &err) == 0 && strstr(md, "### Summary (/compact)") &&
          strstr(md, "q1"));
    free(md);
    /* /undo and rewinds never take the summary for the user's message */
    CHECK(app_command(a, "/undo", &err) == 0 && n_msgs(a) == 6);
    CHECK_STR(app_last_user_text(a, &md_len), "q2");
    char *text = NULL;
    CHECK(app_rewind(a, 3, &text, &md_len, &err) != 0 && !text);
    app_close(a);
    opt.allow_tools = NULL;

    /* failures: the model fails, the user stops it, the summary runs past the cap, it is empty */
    static const answer fine[] = {{.content = "ans", .stop = PARSE_STOP_END_OF_TURN}};
    static const answer broken[] = {{.error = "engine broke"}};
    static const answer endless[] = {{.endless = 1, .stop = PARSE_STOP_END_OF_TURN}};
    static const answer too_long[] = {{.content = "on and on", .stop = PARSE_STOP_MAX_TOKENS}};
    static const answer empty[] = {{.content = " \n", .stop = PARSE_STOP_END_OF_TURN}};
    struct { const answer *summary; const char *message; app_turn_outcome outcome; } failures[] = {
        {broken, "/compact: engine broke; the conversation is as it was", APP_TURN_FAILED},
        {endless, "/compact: stopped; the conversation is as it was", APP_TURN_STOPPED},
        {too_long, "/compact: the summary itself was too long (over 1024 tokens); the conversation is as it was", APP_TURN_FAILED},
        {empty, "/compact: the model wrote no summary; the conversation is as it was", APP_TURN_FAILED},
    };
    for (size_t f = 0; f < sizeof failures / sizeof *failures; f++) {
        a = open_app(fine, 1);
        send(a, "q1");
        send(a, "q2");
        long used = app_context_used(a);
        fake.script = failures[f].summary;
        CHECK(app_command(a, "/compact", &err) == 0 && app_busy(a));
        if (failures[f].summary == endless)
            app_stop(a);
        wait_idle(a, 10);
        CHECK_MSG(rec.outcome == failures[f].outcome && !strcmp(rec.message, failures[f].message), "%s", rec.message);
        CHECK(n_msgs(a) == 4 && !strcmp(msg(a, 2)->content.s, "q2") && session_context_start(app_session(a)) == 0);
        CHECK(app_context_used(a) == used && !app_busy(a));
        app_close(a);
    }

    /* the context 90% full: /compact is offered, once */
    a = open_app(fine, 1);
    fake.base.context_limit = 34;
    send(a, "q1");                                  /* 10 prompt + 2 generated tokens */
    CHECK(!strstr(rec.infos, "/compact"));
    send(a, "q2");                                  /* 30 + 2 */
    send(a, "q3");
    const char *offer = strstr(rec.infos, "the context is 94% full (32 of 34 tokens): /compact summarises");
    CHECK_MSG(offer && !strstr(offer + 60, "/compact summarises"), "%s", rec.infos);
    app_close(a);

    /* a file whose summary mark is not a boolean is refused, naming it */
    session bad;
    session_init(&bad);
    const char *json = "{\"meta\": {\"messages\": [{\"summary\": 1}]}, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}";
    CHECK(session_parse(&bad, json, strlen(json), "s.json", &err) != 0 && strstr(err.msg, "summary"));
    session_free(&bad);
    /* a summary mark on a message that is not the user's (a file from elsewhere) starts nothing:
       the model's view would begin with a tool result whose call it cut off */
    const char *marked_tool =
        "{\"meta\": {\"messages\": [null, null, {\"summary\": true}, null, null]}, \"messages\": ["
        "{\"role\": \"user\", \"content\": \"time?\"},"
        "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"functions.now:0\", "
        "\"type\": \"function\", \"function\": {\"name\": \"now\", \"arguments\": \"{}\"}}]},"
        "{\"role\": \"tool\", \"tool_call_id\": \"functions.now:0\", \"content\": \"12:00\"},"
        "{\"role\": \"assistant\", \"content\": \"noon\"}, {\"role\": \"user\", \"content\": \"thanks\"}]}";
    CHECK_MSG(session_parse(&bad, marked_tool, strlen(marked_tool), "t.json", &err) == 0, "%s", err.msg);
    CHECK_INT(session_context_start(&bad), 0);
    session_free(&bad);
}

/* /permissions: each tool as ask, always or disabled, and each change taking effect on the
 * next call. */
static void test_permissions(void)
{
    static const answer script[] = {
        {.call_name = "echo", .call_args = "{\"text\": \"hi\"}", .call_valid = 1, .stop = PARSE_STOP_END_OF_TURN},
        {.content = "done", .stop = PARSE_STOP_END_OF_TURN},
    };
    app *a = open_app(script, 2);
    kimi_err err = {0};
    CHECK(app_command(a, "/permissions", &err) == 0);
    CHECK_MSG(strstr(rec.info, "\n  echo           ask (nobody to ask here: not run)") &&
              strstr(rec.info, "\n  sleep          ask"), "%s", rec.info);
    CHECK(app_command(a, "/permissions echo always", &err) == 0 && strstr(rec.info, "echo: always"));
    CHECK(app_command(a, "/permissions", &err) == 0 && strstr(rec.info, "\n  echo           always"));
    send(a, "echo it");
    CHECK_STR(app_session(a)->meta[2].tool_state, "done");
    CHECK(app_command(a, "/permissions echo disabled", &err) == 0);
    CHECK(app_command(a, "/permissions", &err) == 0 && strstr(rec.info, "\n  echo           disabled"));
    fake.started = 0;
    send(a, "echo it");
    CHECK_STR(app_session(a)->meta[6].tool_state, "unknown tool");
    CHECK(app_command(a, "/permissions echo ask", &err) == 0);
    CHECK(app_command(a, "/permissions", &err) == 0 && strstr(rec.info, "\n  echo           ask"));
    CHECK(app_command(a, "/permissions nope always", &err) != 0 && strstr(err.msg, "no tool named 'nope'"));
    app_close(a);
    /* "ask" wins over --allow-tools, as /tools ask does */
    opt.allow_tools = "echo";
    a = open_app(script, 2);
    CHECK(app_command(a, "/permissions", &err) == 0 && strstr(rec.info, "\n  echo           always"));
    CHECK(app_command(a, "/permissions echo ask", &err) == 0);
    send(a, "echo it");
    CHECK_STR(app_session(a)->meta[2].tool_state, "denied");    /* nobody to ask */
    app_close(a);
    opt.allow_tools = NULL;
}

/* The tool states the front ends get as an enum, by the names the session files keep. */
static void test_tool_state_names(void)
{
    static const char *const words[] = {"waiting for approval", "running", "done", "denied", "failed",
                                        "timeout", "bad arguments", "unknown tool", "cancelled"};
    for (int s = APP_TOOL_WAITING; s <= APP_TOOL_CANCELLED; s++) {
        CHECK_STR(app_tool_state_name((app_tool_state)s), words[s]);
        CHECK_INT(app_tool_state_from_name(words[s]), s);
    }
    CHECK_INT(app_tool_state_from_name("exploded"), -1);
    CHECK_INT(app_tool_state_from_name(NULL), -1);
}

int main(void)
{
    test_tool_state_names();
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/test_app.XXXXXX");
    if (!mkdtemp(tmp_dir))
        return 1;
    char data[300];
    snprintf(data, sizeof data, "%s/data", tmp_dir);
    setenv("XDG_DATA_HOME", data, 1);
    snprintf(tools_file, sizeof tools_file, "%s/tools.json", tmp_dir);
    FILE *f = fopen(tools_file, "w");
    fputs("[{\"type\": \"function\", \"function\": {\"name\": \"echo\", \"parameters\": {\"type\": \"object\","
          " \"properties\": {\"text\": {\"type\": \"string\"}}}}, \"exec\": {\"argv\": [\"echo\", \"{text}\"]}},"
          " {\"type\": \"function\", \"function\": {\"name\": \"sleep\", \"parameters\": {\"type\": \"object\","
          " \"properties\": {\"s\": {\"type\": \"string\"}}}}, \"exec\": {\"argv\": [\"sleep\", \"{s}\"]}}]", f);
    fclose(f);
    if (chdir(tmp_dir))
        return 1;
    opt = (app_options){.thinking = 1, .tools_path = tools_file};
    test_answer_and_commands();
    test_tool_rounds();
    test_approval();
    test_bad_calls_and_limit();
    test_stop_and_failures();
    test_sessions();
    test_flags_override_loaded();
    test_invalid_utf8_input();
    test_queue();
    test_rewind();
    test_compact();
    test_permissions();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
    if (system(cmd))
        return 1;
    return check_finish();
}
