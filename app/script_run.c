/* script_run: the script loop, /expect checks and exit codes. */
#include "app/script_run.h"

#include <stdio.h>
#include <string.h>

/* what may quote the model or a server (an /expect's answer, a server's refusal): through the
 * view's cleaning for a terminal, when there is a view (script_check runs before it). */
static void line_error(const plain_ui *ui, const script *s, const script_item *it, const char *what)
{
    fprintf(stderr, "%s:%d: ", s->name, it->line);
    if (ui)
        plain_ui_err_text(ui, what, strlen(what));
    else
        fputs(what, stderr);
    fputc('\n', stderr);
}

static int last_turn_called(const void *a, const char *name) { return app_last_turn_called(a, name); }

/* 0 when the last answer meets the expectation (script_expect_holds, the one check), else 1
 * with the reason printed. */
static int check_expect(const plain_ui *ui, const script *s, const script_item *it, app *a)
{
    const chat_message *m = app_last_answer(a);
    const char *content = m && m->content.s ? m->content.s : "";
    size_t len = m ? m->content.len : 0;
    if (script_expect_holds(it, content, len, last_turn_called, a))
        return 0;
    char why[700];
    switch (it->expect) {
    case SCRIPT_EXPECT_CONTAINS:
        snprintf(why, sizeof why, "/expect contains \"%s\": the last answer does not contain it", it->text);
        break;
    case SCRIPT_EXPECT_MATCHES:
        snprintf(why, sizeof why, "/expect matches '%s': the last answer does not match", it->text);
        break;
    case SCRIPT_EXPECT_TOOL:
        snprintf(why, sizeof why, "/expect tool %s: the last turn did not run it", it->text);
        break;
    }
    line_error(ui, s, it, why);
    if (m) {
        fputs("  the last answer was: ", stderr);
        plain_ui_err_text(ui, content, len > 300 ? 300 : len);
        fputs(len > 300 ? "…\n" : "\n", stderr);
    }
    return 1;
}

int script_check(const script *s)
{
    int bad = 0;
    for (int i = 0; i < s->n_items; i++) {
        const script_item *it = &s->items[i];
        kimi_err err = {0};
        if (it->kind == SCRIPT_COMMAND && app_command_check(it->text, &err)) {
            line_error(NULL, s, it, err.msg);
            bad = 1;
        }
    }
    return bad;
}

int script_run(const script *s, app *a, plain_ui *ui, int keep_going)
{
    int failed = 0;
    for (int i = 0; i < s->n_items && !app_quit_requested(a); i++) {
        const script_item *it = &s->items[i];
        kimi_err err = {0};
        int line_failed = 0;
        int starts_turn = 0;
        if (it->kind == SCRIPT_EXPECT) {
            line_failed = check_expect(ui, s, it, a);
        } else if (it->kind == SCRIPT_COMMAND) {
            fprintf(stdout, "%s\n", it->text);
            fflush(stdout);
            line_failed = app_command(a, it->text, &err) != 0;
            if (line_failed)
                line_error(ui, s, it, err.msg);
            starts_turn = !line_failed && app_busy(a);     /* /retry */
        } else {
            plain_ui_echo_turn(ui, it->text, it->len);
            if (app_send(a, it->text, it->len, &err)) {
                /* the core is idle here: a turn that cannot start is the model's or the
                   engine's failure (the conversation is larger than the context, out of
                   memory, a server refusing), not a bad line */
                line_error(ui, s, it, err.msg);
                return 3;
            }
            starts_turn = 1;
        }
        if (starts_turn) {
            app_turn_outcome outcome = APP_TURN_DONE;
            switch (plain_ui_wait(ui, a, &outcome, &err)) {
            case PLAIN_WAIT_IDLE: break;
            case PLAIN_WAIT_INTERRUPTED:
            case PLAIN_WAIT_TERMINATED:
                app_save(a, &err);
                return 130;
            case PLAIN_WAIT_BROKEN:
                fprintf(stderr, "kimi-chat: %s\n", err.msg);
                return 3;
            }
            if (outcome == APP_TURN_FAILED) {
                /* the view has just said why, in the transcript ("[reason]") */
                line_error(ui, s, it, "the script stops here: this turn failed (the reason is on the line above)");
                return 3;
            }
        }
        if (line_failed) {
            failed = 1;
            if (!keep_going)
                return 1;
        }
    }
    return failed;
}
