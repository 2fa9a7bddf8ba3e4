/* main: kimi-chat's entry point: options, then the mode (full screen, plain REPL, script,
 * one-shot prompt) over one chat core, and the exit codes of docs/UI.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/chat/app.h"
#include "app/chat/generator_local.h"
#include "app/chat/generator_remote.h"
#include "app/chat/options.h"
#include "app/chat/paths.h"
#include "app/chat/self_check.h"
#include "app/chat/script.h"
#include "app/script_run.h"
#include "engine/backend/device_plan.h"
#include "engine/base/file_io.h"
#include "engine/text/utf8.h"
#include "ui/plain.h"
#include "ui/tui.h"

enum { EXIT_OK = 0, EXIT_SCRIPT = 1, EXIT_VERIFY_FAILED = 1, EXIT_USAGE = 2, EXIT_ENGINE = 3, EXIT_INTERRUPTED = 130 };

/* The last line on stderr, made one line without controls (utf8_one_line): a message may quote
 * a file (a session's JSON error "near '...'") or a server's reply, and stderr is often the
 * terminal, where views' own cleaning no longer runs. */
static void say_error(const char *message)
{
    char line[2048];
    utf8_one_line(message, strlen(message), line, sizeof line);
    fprintf(stderr, "kimi-chat: %s\n", line);
}

static int fail(int code, const char *message)
{
    say_error(message);
    return code;
}

/* Exit code for a failure of app_open: the user's input (flags, files) or the model/engine. */
static int open_failure_code(const kimi_err *err)
{
    if (err->code == KIMI_ERR_CANCELLED)
        return EXIT_INTERRUPTED;    /* the load, stopped by Ctrl-C or a signal: nothing to save yet */
    return err->code == KIMI_ERR_USAGE || err->code == KIMI_ERR_INPUT ? EXIT_USAGE : EXIT_ENGINE;
}

static int read_script(const app_options *o, script *s, int *code)
{
    kimi_err err = {0};
    char *text = NULL;
    size_t size = 0;
    const char *name = o->script_path;
    if (!strcmp(name, "-")) {
        name = "<stdin>";
        size_t cap = 0;
        for (;;) {
            if (size + 65536 + 1 > cap) {
                cap = (size + 65536 + 1) * 2;
                char *grown = realloc(text, cap);
                if (!grown) {
                    free(text);
                    *code = fail(EXIT_USAGE, "--script -: out of memory");
                    return -1;
                }
                text = grown;
            }
            size_t got = fread(text + size, 1, cap - size - 1, stdin);
            size += got;
            if (got == 0)
                break;
        }
        if (ferror(stdin)) {
            free(text);
            *code = fail(EXIT_USAGE, "--script -: cannot read standard input");
            return -1;
        }
    } else if (file_read_all(name, &text, &size, &err)) {
        char message[600];
        snprintf(message, sizeof message, "--script: %s", err.msg);
        *code = fail(EXIT_USAGE, message);
        return -1;
    }
    strbuf every_error = {0};
    int rc = script_parse_all(s, o->script_path, text, size, &every_error, &err);
    free(text);
    if (rc) {
        if (every_error.failed || !every_error.len)
            fprintf(stderr, "%s\n", err.msg);
        else
            fputs(every_error.data, stderr);
        free(every_error.data);
        *code = EXIT_SCRIPT;
        return -1;
    }
    if (script_check(s)) {
        script_free(s);
        *code = EXIT_SCRIPT;
        return -1;
    }
    return 0;
}

/* The engine's load, shown by the front end, which also says when the user wants it stopped. */
static int relay_load_progress(void *user, const generator_progress *p)
{
    const app_frontend *fe = user;
    if (fe->progress)
        fe->progress(fe->user, p);
    return fe->load_cancel_requested && fe->load_cancel_requested(fe->user);
}

/* Whether the generator's summary (the memory plan, the KV-cache note, a server's details) is
 * said at start: with --verbose, and in plain modes whose stderr is a log (not a terminal); else
 * it waits in /stats and the first screen says what to do instead. */
static int say_plan;

/* The memory plan (and the note on the checkpoint's KV-cache request) before the load. */
static void relay_note(void *user, const char *line)
{
    const app_frontend *fe = user;
    if (say_plan && fe->info)
        fe->info(fe->user, line);
}

/* Without --model or --server: the bundled demo model, with its tools. */
static int choose_demo_model(app_options *o, kimi_err *err)
{
    if (o->model_dir || o->server_url)
        return 0;
    if (!(o->model_dir = paths_demo_model_dir(err)))
        return err->code;
    o->model_is_demo = 1;
    if (!o->tools_path && !o->no_tools && asprintf(&o->tools_path, "%s/tools.json", o->model_dir) < 0) {
        o->tools_path = NULL;
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    }
    return 0;
}

/* --verify: the self-check before anything else starts (the full screen included), so its
 * lines stay on the terminal; verdict [cap] receives its one-line verdict. Returns EXIT_OK to
 * go on into the chat. */
static int run_verify(app_options *o, char *verdict, size_t cap)
{
    kimi_err err = {0};
    int passed = 0;
    if (choose_demo_model(o, &err) || self_check_run(o, o->model_dir, &passed, verdict, cap, &err))
        return fail(open_failure_code(&err), err.msg);
    return passed ? EXIT_OK : EXIT_VERIFY_FAILED;
}

/* An OpenAI-compatible server (--server), the in-process engine on --model, or the engine on
 * the bundled demo model (with its tools). */
static int open_generator(app_options *o, const app_frontend *fe, generator **gen, kimi_err *err)
{
    if (o->server_url) {
        remote_options ro;
        remote_options_init(&ro);
        ro.url = o->server_url;
        ro.model = o->server_model;
        ro.api_key_env = o->api_key_env;
        ro.api_key_file = o->api_key_file;
        return generator_remote_open(gen, &ro, err);
    }
    int devices[DEVICE_MAX_RANKS], n_devices = 0;
    if (choose_demo_model(o, err) ||
        (o->devices && device_list_parse("--devices", o->devices, devices, &n_devices, err)))
        return err->code;
    generator_local_options lo = {
        .model_dir = o->model_dir, .model_name = o->model_is_demo ? "demo model" : NULL,
        .engine = {.backend = (backend_kind)o->backend, .tp = o->tp, .dcp = o->dcp, .threads_per_rank = o->threads,
                   .max_context = o->max_context,
                   .memory_budget_bytes = (size_t)(o->mem_gib * 1073741824.0),
                   .devices = n_devices ? devices : NULL, .n_devices = n_devices, .speculate = o->speculate,
                   .kv_cache = (kv_cache_format)o->kv_cache,
                   .activations = (cpu_activations)o->cpu_activations,
                   .weights = (cpu_weights)o->cpu_weights},
        .on_note = relay_note, .on_load = relay_load_progress, .load_user = (void *)fe,
    };
    return generator_local_open(gen, &lo, err);
}

/* The generator, then the core on it; a server's details are said like the local plan. */
static int open_chat(app_options *o, const app_frontend *fe, generator **gen, app **a, kimi_err *err)
{
    if (open_generator(o, fe, gen, err))
        return err->code;
    if (o->server_url && say_plan && fe->info && (*gen)->summary[0])
        fe->info(fe->user, (*gen)->summary);
    /* the full screen says it in its first screen's note */
    if (o->model_is_demo && o->mode != APP_MODE_TUI && fe->info)
        fe->info(fe->user, "demo model: a 3.6 M-parameter toy; use --model DIR for Kimi-K2.5");
    return app_open(a, o, fe, *gen, err);
}

static int run_prompt(const app_options *o, app *a, plain_ui *ui)
{
    kimi_err err = {0};
    if (app_send(a, o->prompt_text, strlen(o->prompt_text), &err))
        return fail(EXIT_ENGINE, err.msg);
    app_turn_outcome outcome = APP_TURN_DONE;
    switch (plain_ui_wait(ui, a, &outcome, &err)) {
    case PLAIN_WAIT_IDLE: break;
    case PLAIN_WAIT_INTERRUPTED:
    case PLAIN_WAIT_TERMINATED: return EXIT_INTERRUPTED;
    case PLAIN_WAIT_BROKEN: return fail(EXIT_ENGINE, err.msg);
    }
    return outcome == APP_TURN_FAILED ? EXIT_ENGINE : EXIT_OK;
}

int main(int argc, char **argv)
{
    app_options o;
    kimi_err err = {0};
    if (options_parse(&o, argc, argv, &err)) {
        options_free(&o);
        return fail(EXIT_USAGE, err.msg);
    }
    if (o.show_help || o.show_version) {
        if (o.show_help)
            fputs(options_help(), stdout);
        else
            printf("%s\n", options_version());
        options_free(&o);
        return EXIT_OK;
    }
    struct stat st;
    if (o.load_path && (access(o.load_path, R_OK) || (stat(o.load_path, &st) == 0 && S_ISDIR(st.st_mode)))) {
        char message[600];
        snprintf(message, sizeof message, "--load %s: %s", o.load_path,
                 access(o.load_path, R_OK) ? "cannot read the file" : "is a folder, not a session file");
        options_free(&o);
        return fail(EXIT_USAGE, message);
    }
    if (o.load_path) {
        /* read and checked now, not after a load of minutes; app_open reads it again */
        session loaded;
        int rc = session_load_conversation(&loaded, o.load_path, &err);
        session_free(&loaded);
        if (rc) {
            options_free(&o);
            return fail(open_failure_code(&err), err.msg);
        }
    }
    errno = 0;
    if (o.model_dir && !o.server_url && (stat(o.model_dir, &st) || !S_ISDIR(st.st_mode))) {
        char message[600];
        snprintf(message, sizeof message, "--model %s: %s", o.model_dir,
                 errno == ENOENT ? "no such folder" : errno ? strerror(errno) : "not a folder");
        options_free(&o);
        return fail(EXIT_ENGINE, message);
    }
    script s = {0};
    int code = EXIT_OK;
    if (o.mode == APP_MODE_SCRIPT && read_script(&o, &s, &code)) {
        options_free(&o);
        return code;
    }
    char verdict[512] = "";
    if (o.verify && (code = run_verify(&o, verdict, sizeof verdict)) != EXIT_OK) {
        script_free(&s);
        options_free(&o);
        return code;
    }

    /* The full screen when the terminal can take it, else the plain front end; only the
       interactive REPL on a terminal asks before running a tool (on a pipe the next line would
       be taken as the answer). */
    tui *view = o.mode == APP_MODE_TUI ? tui_new(&o) : NULL;
    if (o.mode == APP_MODE_TUI && !view)
        o.mode = APP_MODE_PLAIN;
    plain_ui *ui = view ? NULL : plain_ui_new(&o, o.mode == APP_MODE_PLAIN && isatty(0));
    app_frontend fe = view ? tui_frontend(view) : ui ? plain_ui_frontend(ui) : (app_frontend){0};
    if (view && *verdict && fe.info)   /* the full screen hides what scrolled by before it */
        fe.info(fe.user, verdict);
    say_plan = o.verbose || (!view && !isatty(STDERR_FILENO));
    app *a = NULL;
    generator *gen = NULL;
    if (!view && !ui) {
        code = fail(EXIT_ENGINE, "out of memory");
    } else if (open_chat(&o, &fe, &gen, &a, &err)) {
        tui_free(view);     /* the terminal is given back before the message */
        view = NULL;
        code = fail(open_failure_code(&err), err.msg);
    } else {
        switch (o.mode) {
        case APP_MODE_PROMPT: code = run_prompt(&o, a, ui); break;
        case APP_MODE_SCRIPT: code = script_run(&s, a, ui, o.keep_going); break;
        case APP_MODE_TUI: code = tui_run(view, a); break;
        case APP_MODE_PLAIN: code = plain_ui_repl(ui, a); break;
        }
        /* a turn cut by a signal or a quit is wound down first: the session saved is whole */
        if (app_wind_down(a, 3.0, &err))
            say_error(err.msg);
        err = (kimi_err){0};
        if (app_save(a, &err))
            say_error(err.msg);
        /* an answer that did not reach stdout (a full disk, a closed descriptor) is not a
           success; a reader that left early (`| head`) is its own choice */
        int out_errno = ui ? plain_ui_stdout_errno(ui) : 0;
        if (out_errno && out_errno != EPIPE && code == EXIT_OK) {
            char message[200];
            snprintf(message, sizeof message, "standard output: cannot write the answer: %s", strerror(out_errno));
            code = fail(EXIT_USAGE, message);
        }
    }
    app_close(a);
    tui_free(view);
    plain_ui_free(ui);
    script_free(&s);
    options_free(&o);
    return code;
}
