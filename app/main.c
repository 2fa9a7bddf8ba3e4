/* main: kimi-chat's entry point: options, then the mode (full screen, plain REPL, script,
 * one-shot prompt) over one chat core, and the exit codes of docs/UI.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "app/options.h"
#include "app/script.h"
#include "app/script_run.h"
#include "engine/file_io.h"
#include "ui/plain.h"
#include "ui/tui.h"

enum { EXIT_OK = 0, EXIT_SCRIPT = 1, EXIT_USAGE = 2, EXIT_ENGINE = 3, EXIT_INTERRUPTED = 130 };

static int fail(int code, const char *message)
{
    fprintf(stderr, "kimi-chat: %s\n", message);
    return code;
}

/* Exit code for a failure of app_open: the user's input (flags, files) or the model/engine. */
static int open_failure_code(const kimi_err *err)
{
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
    int rc = script_parse(s, o->script_path, text, size, &err);
    free(text);
    if (rc) {
        fprintf(stderr, "%s\n", err.msg);
        *code = EXIT_SCRIPT;
        return -1;
    }
    return 0;
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

/* The full-screen view over the core; the terminal is given back before any message. */
static int run_tui(const app_options *o, tui *view)
{
    kimi_err err = {0};
    app_frontend fe = tui_frontend(view);
    app *a = NULL;
    int code;
    if (app_open(&a, o, &fe, &err)) {
        tui_free(view);
        return fail(open_failure_code(&err), err.msg);
    }
    code = tui_run(view, a);
    if (app_save(a, &err))
        fprintf(stderr, "kimi-chat: %s\n", err.msg);
    app_close(a);
    tui_free(view);
    return code;
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
            printf("kimi-chat %s\n", options_version());
        options_free(&o);
        return EXIT_OK;
    }
    if (o.load_path && access(o.load_path, R_OK)) {
        char message[600];
        snprintf(message, sizeof message, "--load %s: cannot read the file", o.load_path);
        options_free(&o);
        return fail(EXIT_USAGE, message);
    }
    script s = {0};
    int code = EXIT_OK;
    if (o.mode == APP_MODE_SCRIPT && read_script(&o, &s, &code)) {
        options_free(&o);
        return code;
    }

    /* The full screen, when the terminal can take it; else the plain REPL. */
    if (o.mode == APP_MODE_TUI) {
        tui *view = tui_new(&o);
        if (view) {
            code = run_tui(&o, view);
            options_free(&o);
            return code;
        }
        o.mode = APP_MODE_PLAIN;
    }

    /* Only the interactive REPL asks before running a tool. */
    plain_ui *ui = plain_ui_new(&o, o.mode == APP_MODE_PLAIN);
    app_frontend fe = plain_ui_frontend(ui);
    app *a = NULL;
    if (!ui) {
        code = fail(EXIT_ENGINE, "out of memory");
    } else if (app_open(&a, &o, &fe, &err)) {
        code = fail(open_failure_code(&err), err.msg);
    } else {
        switch (o.mode) {
        case APP_MODE_PROMPT: code = run_prompt(&o, a, ui); break;
        case APP_MODE_SCRIPT: code = script_run(&s, a, ui, o.keep_going); break;
        case APP_MODE_TUI:
        case APP_MODE_PLAIN: code = plain_ui_repl(ui, a); break;
        }
        if (app_save(a, &err))
            fprintf(stderr, "kimi-chat: %s\n", err.msg);
    }
    app_close(a);
    plain_ui_free(ui);
    script_free(&s);
    options_free(&o);
    return code;
}
