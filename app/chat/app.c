/* app: the chat core: session, turn loop with tool rounds, slash commands, autosave. */
#include "app/chat/app.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "app/chat/commands.h"
#include "app/chat/paths.h"
#include "engine/base/array.h"
#include "engine/base/monotonic.h"
#include "engine/text/utf8.h"

typedef enum { TURN_IDLE, TURN_GENERATING, TURN_APPROVAL, TURN_TOOL_RUNNING, TURN_COMPACTING } turn_state;

typedef struct {
    char *text;                     /* [len] as the user typed it */
    size_t len;
} queued_message;

typedef struct {
    int at;                         /* the conversation had this many messages after the cut */
    session cut;                    /* the messages cut off, with their meta */
} rewound_part;

/* One tool call of the answer being generated, as it streams. */
typedef struct {
    strbuf id, name, args;
    int valid;                      /* the parser judged the arguments one JSON object */
    char problem[300];              /* why not, when !valid */
    /* the run */
    app_tool_state state;
    int exit_status;
    double seconds;
    char *result;                   /* [result_len] the tool message's content */
    size_t result_len;
} pending_call;

struct app {
    const app_options *opt;
    app_frontend fe;
    generator *gen;
    tool_set tools;
    int have_tools;
    int *grant;                     /* [tools.n_tools] GRANT_* of that tool this session */
    session sess;
    session_lock lock;              /* held on sess.path while this process continues it */
    char *locked;                   /* the path lock is held on; NULL when none */
    char *sessions_dir;             /* NULL: autosave off */
    int temperature_follows_thinking;   /* the user never chose a temperature */
    int top_p_follows_thinking;
    int quit;
    int said_replaced;              /* the note on ill-formed UTF-8 in the input was given */

    /* the running turn */
    turn_state state;
    int tool_rounds;                /* tool rounds done in this turn */
    int stop_requested;
    int turn_start_message;         /* the user's message that began the turn */
    strbuf called;                  /* "\nname\n..." tools called this turn (for /expect tool) */
    strbuf reasoning, content;      /* the answer being generated */
    pending_call *calls;            /* [n_calls] */
    int n_calls, cap_calls;
    int next_call;                  /* the call the tool phase handles next */
    double generation_started, reasoning_started, reasoning_ended;
    int reasoning_tokens, tokens;
    int answer_open_reasoning;      /* reasoning text came and the answer has not begun */
    parse_stop_reason stop_reason;  /* of the answer that just ended */
    long context_used;
    long drafted_tokens, accepted_tokens;   /* speculative decoding, since the start */

    /* the tool thread */
    int tool_pipe[2];               /* the thread writes one byte when the run ends */
    pthread_t tool_thread;
    atomic_int tool_cancel;
    tool_result tool_out;
    kimi_err tool_err;
    int tool_rc;
    const tool_def *tool_running;

    /* messages sent while a turn ran, oldest first: each goes out when the turn before it ends */
    queued_message *queue;          /* [n_queue] */
    int n_queue, cap_queue;

    /* what rewinds cut off, newest last: the top one goes back (/undo) while the conversation
       is again exactly the part the rewind kept */
    rewound_part *rewinds;          /* [n_rewinds] */
    int n_rewinds, cap_rewinds;
    int say_reuse;                  /* the next answer follows a rewind: say what the cache saved */

    int compact_at;                 /* /compact running: the summary goes in before this message */
    int offered_compact;            /* the context is 90% full and /compact was offered */
};

static void say_info(app *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say_info(app *a, const char *fmt, ...)
{
    if (!a->fe.info)
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    a->fe.info(a->fe.user, line);
}

static int report(app *a, kimi_err *err)
{
    if (a->fe.error)
        a->fe.error(a->fe.user, err->msg);
    return err->code;
}

/* ---- settings ---- */

static void apply_thinking_defaults(app *a)
{
    /* Moonshot's published settings for K2.5 (docs/CHAT_FORMAT.md) */
    if (a->temperature_follows_thinking)
        a->sess.settings.temperature = a->sess.settings.thinking ? 1.0f : 0.6f;
    if (a->top_p_follows_thinking)
        a->sess.settings.top_p = 0.95f;
}

static void settings_from_options(app *a)
{
    const app_options *o = a->opt;
    session_settings *s = &a->sess.settings;
    s->thinking = o->thinking;
    s->temperature = o->temperature;
    s->top_p = o->top_p;
    s->top_k = o->top_k;
    s->max_tokens = o->max_tokens;
    s->seed = o->has_seed ? o->seed : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull;
    a->temperature_follows_thinking = !o->has_temperature;
    a->top_p_follows_thinking = !o->has_top_p;
    apply_thinking_defaults(a);
}

/* ---- saving ---- */

static int conversation_is_empty(const session *s)
{
    for (int i = 0; i < s->conv.n_messages; i++)
        if (s->conv.messages[i].role != CHAT_ROLE_SYSTEM)
            return 0;
    return 1;
}

static void release_session_file(app *a)
{
    session_lock_release(&a->lock);
    free(a->locked);
    a->locked = NULL;
}

/* Lock the file at sess.path (reserved just now: no other process has it). A lock that cannot
 * be taken (the folder refuses the lock file) leaves the session unlocked: its saves fail
 * there too and say why. */
static void lock_new_file(app *a)
{
    long holder;
    kimi_err ignored = {0};
    release_session_file(a);
    if (session_lock_take(&a->lock, a->sess.path, &holder, &ignored) == 0 && !(a->locked = strdup(a->sess.path)))
        session_lock_release(&a->lock);
}

int app_save(app *a, kimi_err *err)
{
    if (!a->sessions_dir || conversation_is_empty(&a->sess))
        return 0;
    int reserved = 0;
    if (!a->sess.path) {
        if (!a->sess.created)
            a->sess.created = time(NULL);
        const char *kind = a->opt->mode == APP_MODE_PROMPT   ? "prompt-"
                           : a->opt->mode == APP_MODE_SCRIPT ? "script-"
                                                             : "";
        if (!(a->sess.path = session_new_path(a->sessions_dir, kind, a->sess.created)))
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
        reserved = 1;
        lock_new_file(a);
    }
    int rc = session_save(&a->sess, a->sess.path, err);
    if (a->fe.saved)
        a->fe.saved(a->fe.user, a->sess.path, rc == 0);
    struct stat st;
    if (rc && reserved && (stat(a->sess.path, &st) || st.st_size == 0)) {
        /* nothing was written: no empty reserved file left behind, and the next save picks a
           name again. A file that was written (the rename done, syncing the folder failed)
           stays this session's: the next save replaces it rather than start a duplicate. */
        unlink(a->sess.path);
        free(a->sess.path);
        a->sess.path = NULL;
        release_session_file(a);
    }
    return rc;
}

/* Hold the lock of the session file sess.path (none when it is NULL). When another kimi-chat
 * holds it, this one continues in a new file of the sessions folder, saved at once, and says
 * so: two processes writing one file in turn would each drop the other's turns. */
static void hold_session_file(app *a)
{
    if (a->sess.path && a->locked && !strcmp(a->locked, a->sess.path))
        return;
    release_session_file(a);
    if (!a->sess.path)
        return;
    long holder;
    kimi_err err = {0};
    int rc = session_lock_take(&a->lock, a->sess.path, &holder, &err);
    if (rc == 0 && !(a->locked = strdup(a->sess.path)))
        session_lock_release(&a->lock);
    if (rc != KIMI_ERR_STATE)
        return;     /* locked, or a folder that takes no lock file (its saves say why) */
    char *taken = a->sess.path;
    a->sess.path = NULL;
    err = (kimi_err){0};
    if (app_save(a, &err))
        report(a, &err);
    char pid[32] = "";
    if (holder > 0)
        snprintf(pid, sizeof pid, " (pid %ld)", holder);
    say_info(a, "session %s is open in another kimi-chat%s; continuing in %s", taken, pid,
             a->sess.path ? a->sess.path : "a new file");
    free(taken);
}

static void autosave(app *a)
{
    kimi_err err = {0};
    if (app_save(a, &err))
        report(a, &err);
}

/* ---- the answer as it streams ---- */

static void calls_clear(app *a)
{
    for (int i = 0; i < a->n_calls; i++) {
        pending_call *c = &a->calls[i];
        free(c->id.data);
        free(c->name.data);
        free(c->args.data);
        free(c->result);
    }
    a->n_calls = 0;
}

static void answer_reset(app *a)
{
    free(a->reasoning.data);
    free(a->content.data);
    a->reasoning = a->content = (strbuf){0};
    calls_clear(a);
    a->reasoning_started = a->reasoning_ended = 0;
    a->reasoning_tokens = a->tokens = 0;
    a->answer_open_reasoning = 0;
    a->stop_reason = PARSE_STOP_END_OF_TURN;
}

static void end_reasoning(app *a, int tokens)
{
    if (a->answer_open_reasoning) {
        a->answer_open_reasoning = 0;
        a->reasoning_ended = monotonic_seconds();
        /* a server counts no tokens as they stream (tokens stays 0): unknown, 0, not -1 */
        a->reasoning_tokens = tokens > 0 ? tokens : 0;
    }
}

static pending_call *current_call(app *a, int index)
{
    return index >= 0 && index < a->n_calls ? &a->calls[index] : NULL;
}

static void on_generator_event(void *user, const generator_event *ev)
{
    app *a = user;
    if (ev->kind == GENERATOR_EVENT_PROGRESS) {
        if (a->fe.progress)
            a->fe.progress(a->fe.user, &ev->progress);
        return;
    }
    const parse_event *pe = &ev->parse;
    a->tokens = ev->tokens;
    pending_call *c;
    switch (pe->kind) {
    case PARSE_REASONING_TEXT:
        if (!a->answer_open_reasoning && !a->reasoning_started) {
            a->reasoning_started = monotonic_seconds();
            a->answer_open_reasoning = 1;
        }
        strbuf_add(&a->reasoning, pe->text, pe->len);
        break;
    case PARSE_CONTENT_TEXT:
        end_reasoning(a, ev->tokens - 1);
        strbuf_add(&a->content, pe->text, pe->len);
        break;
    case PARSE_TOOL_CALL_BEGIN:
        end_reasoning(a, ev->tokens - 1);
        if (a->n_calls == a->cap_calls) {
            int cap = a->cap_calls ? a->cap_calls * 2 : 4;
            pending_call *grown = realloc(a->calls, (size_t)cap * sizeof *grown);
            if (!grown)
                break;
            a->calls = grown;
            a->cap_calls = cap;
        }
        a->calls[a->n_calls++] = (pending_call){.valid = 0};
        break;
    case PARSE_TOOL_CALL_ID:
        if ((c = current_call(a, pe->call))) {
            strbuf_add(&c->id, pe->text, pe->len);
            strbuf_str(&c->name, pe->name ? pe->name : "");
        }
        break;
    case PARSE_TOOL_CALL_ARGS:
        if ((c = current_call(a, pe->call)))
            strbuf_add(&c->args, pe->text, pe->len);
        break;
    case PARSE_TOOL_CALL_END:
        if ((c = current_call(a, pe->call))) {
            c->valid = pe->valid;
            snprintf(c->problem, sizeof c->problem, "%s", pe->valid ? "" : pe->text);
        }
        break;
    case PARSE_STOP:
        end_reasoning(a, ev->tokens);
        a->stop_reason = pe->stop;
        break;
    case PARSE_NOTE:
        break;
    }
    if (a->fe.stream && a->state != TURN_COMPACTING)   /* a summary is no answer to show */
        a->fe.stream(a->fe.user, pe);
}

/* ---- the turn ---- */

/* What the model sees of messages [0, to), then extra (NULL: none): a leading system prompt and
 * the messages from the last summary on (/compact). view->messages is a malloc'ed array of
 * shallow copies (free the array only); *view is the session's own conversation when nothing is
 * left out and nothing added. */
static int model_view(app *a, int to, const chat_message *extra, chat_conversation *view, kimi_err *err)
{
    const chat_conversation *conv = &a->sess.conv;
    int from = session_context_start(&a->sess);
    if (!from && !extra && to == conv->n_messages) {
        *view = *conv;
        return 0;
    }
    *view = (chat_conversation){0};
    int system = from > 0 && conv->messages[0].role == CHAT_ROLE_SYSTEM;
    if (!(view->messages = malloc((size_t)(system + to - from + 1) * sizeof *view->messages)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    if (system)
        view->messages[view->n_messages++] = conv->messages[0];
    for (int i = from; i < to; i++)
        view->messages[view->n_messages++] = conv->messages[i];
    if (extra)
        view->messages[view->n_messages++] = *extra;
    view->cap_messages = view->n_messages;
    return 0;
}

static void model_view_free(app *a, chat_conversation *view)
{
    if (view->messages != a->sess.conv.messages)
        free(view->messages);
}

static int start_generation(app *a, kimi_err *err)
{
    answer_reset(a);
    chat_conversation view;
    if (model_view(a, a->sess.conv.n_messages, NULL, &view, err))
        return err->code;
    json_t *declaration = a->have_tools && !a->opt->no_tools ? tools_declaration(&a->tools) : NULL;
    const session_settings *s = &a->sess.settings;
    generator_request req = {
        .conv = &view, .tools = declaration, .thinking = s->thinking,
        .temperature = s->temperature, .top_p = s->top_p, .top_k = s->top_k,
        .max_tokens = s->max_tokens, .seed = s->seed + (uint64_t)a->sess.conv.n_messages,
    };
    int rc = a->gen->ops->start(a->gen, &req, err);
    json_decref(declaration);
    model_view_free(a, &view);
    if (rc)
        return rc;
    a->state = TURN_GENERATING;
    a->generation_started = monotonic_seconds();
    if (a->fe.generation_begin)
        a->fe.generation_begin(a->fe.user, a->tool_rounds);
    return 0;
}

static void queue_next(app *a, app_turn_outcome outcome);

static void end_turn(app *a, app_turn_outcome outcome, const char *message)
{
    a->state = TURN_IDLE;
    a->stop_requested = 0;
    autosave(a);
    if (a->fe.turn_done)
        a->fe.turn_done(a->fe.user, outcome, message);
    queue_next(a, outcome);
}

/* The answer is complete: make it a message of the session. */
static int append_answer(app *a, const generator_result *res, parse_stop_reason stop, kimi_err *err)
{
    chat_message m = {.role = CHAT_ROLE_ASSISTANT};
    int rc = chat_text_set(&m.content, a->content.data ? a->content.data : NULL, a->content.len, err) ||
             chat_text_set(&m.reasoning, a->reasoning.data ? a->reasoning.data : NULL, a->reasoning.len, err);
    for (int i = 0; !rc && i < a->n_calls; i++) {
        pending_call *c = &a->calls[i];
        rc = chat_add_tool_call(&m, c->id.data ? c->id.data : "", c->name.data ? c->name.data : "",
                                c->args.data ? c->args.data : "", c->args.len, err);
    }
    if (a->content.failed || a->reasoning.failed)
        rc = kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the answer");
    a->drafted_tokens += res->drafted_tokens;
    a->accepted_tokens += res->accepted_tokens;
    session_message_meta meta = {
        .has_stats = 1, .prompt_tokens = res->prompt_tokens, .reused_tokens = res->reused_tokens,
        .generated_tokens = res->generated_tokens, .ttft_seconds = res->ttft_seconds,
        .prefill_tok_s = res->prefill_tok_s, .decode_tok_s = res->decode_tok_s,
        .reasoning_seconds = a->reasoning_started ? a->reasoning_ended - a->reasoning_started : 0,
        .reasoning_tokens = a->reasoning_tokens, .stop_reason = (char *)parse_stop_text(stop),
        .ids = (int32_t *)res->ids, .n_ids = res->n_ids,
    };
    if (!rc)
        rc = session_append(&a->sess, &m, &meta, err);
    chat_message_free(&m);
    if (rc)
        return rc;
    a->context_used = (long)res->prompt_tokens + res->generated_tokens;
    long limit = a->gen->context_limit;
    if (limit > 0 && a->context_used >= limit - limit / 10) {
        if (!a->offered_compact)
            say_info(a, "the context is %ld%% full (%ld of %ld tokens): /compact summarises the conversation so far to make room",
                     100 * a->context_used / limit, a->context_used, limit);
        a->offered_compact = 1;
    } else {
        a->offered_compact = 0;
    }
    if (a->say_reuse) {
        /* the engine's prefix cache still holds the part the rewind kept */
        a->say_reuse = 0;
        if (res->reused_tokens > 0 || res->ids)
            say_info(a, "after the rewind: %d of %d prompt positions reused from the cache, %d prefilled",
                     res->reused_tokens, res->prompt_tokens, res->prompt_tokens - res->reused_tokens);
    }
    if (a->fe.answer_done)
        a->fe.answer_done(a->fe.user, &a->sess.conv.messages[a->sess.conv.n_messages - 1],
                          &a->sess.meta[a->sess.conv.n_messages - 1]);
    return 0;
}

static void advance_tools(app *a);

static app_tool_call view_of(const app *a, int i)
{
    const pending_call *c = &a->calls[i];
    return (app_tool_call){
        .index = i, .id = c->id.data ? c->id.data : "", .name = c->name.data ? c->name.data : "",
        .arguments = c->args.data ? c->args.data : "", .arguments_len = c->args.len,
        .state = c->state, .exit_status = c->exit_status, .seconds = c->seconds,
        .result = c->result ? c->result : "", .result_len = c->result_len,
    };
}

/* The call's result is known: tell the front end and add the tool message. */
static void finish_call(app *a, int i, app_tool_state state, char *result, size_t result_len)
{
    pending_call *c = &a->calls[i];
    c->state = state;
    c->result = result;
    c->result_len = result ? result_len : 0;
    kimi_err err = {0};
    chat_message m = {.role = CHAT_ROLE_TOOL};
    char state_name[32]; /* the meta's strings are copied, not kept */
    snprintf(state_name, sizeof state_name, "%s", app_tool_state_name(c->state));
    session_message_meta meta = {.tool_state = state_name, .exit_status = c->exit_status,
                                 .tool_seconds = c->seconds};
    if (!result || chat_text_set(&m.content, result, result_len, &err) ||
        chat_set_text(&m.tool_call_id, c->id.data ? c->id.data : "", &err) ||
        chat_set_text(&m.name, c->name.data && *c->name.data ? c->name.data : "tool", &err) ||
        session_append(&a->sess, &m, &meta, &err)) {
        if (!err.code)
            kimi_fail(&err, KIMI_ERR_NOMEM, "out of memory for a tool result");
        report(a, &err);
    }
    chat_message_free(&m);
    if (a->fe.tool_update) {
        app_tool_call v = view_of(a, i);
        a->fe.tool_update(a->fe.user, &v);
    }
    a->next_call = i + 1;
}

static char *text_copy(const char *s, size_t *len)
{
    *len = strlen(s);
    char *d = malloc(*len + 1);
    if (d)
        memcpy(d, s, *len + 1);
    return d;
}

static void finish_call_text(app *a, int i, app_tool_state state, const char *text)
{
    size_t len = 0;
    char *copy = text_copy(text, &len);
    finish_call(a, i, state, copy, len);
}

static void *tool_thread_main(void *arg)
{
    app *a = arg;
    pending_call *c = &a->calls[a->next_call];
    a->tool_rc = tools_run(a->tool_running, c->args.data ? c->args.data : "", c->args.len,
                           &a->tool_cancel, &a->tool_out, &a->tool_err);
    char byte = 1;
    while (write(a->tool_pipe[1], &byte, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

static void run_call(app *a, int i, const tool_def *t)
{
    pending_call *c = &a->calls[i];
    c->state = APP_TOOL_RUNNING;
    strbuf_printf(&a->called, "%s\n", t->name);
    if (a->fe.tool_update) {
        app_tool_call v = view_of(a, i);
        a->fe.tool_update(a->fe.user, &v);
    }
    a->tool_running = t;
    a->tool_out = (tool_result){0};
    a->tool_err = (kimi_err){0};
    atomic_store(&a->tool_cancel, 0);
    a->state = TURN_TOOL_RUNNING;
    if (pthread_create(&a->tool_thread, NULL, tool_thread_main, a)) {
        finish_call_text(a, i, APP_TOOL_FAILED, "[not run: kimi-chat could not start a thread]");
        a->state = TURN_GENERATING;  /* not waiting on anything: advance */
        advance_tools(a);
    }
}

static const char *const tool_state_names[] = {
    [APP_TOOL_WAITING] = "waiting for approval",
    [APP_TOOL_RUNNING] = "running",
    [APP_TOOL_DONE] = "done",
    [APP_TOOL_DENIED] = "denied",
    [APP_TOOL_FAILED] = "failed",
    [APP_TOOL_TIMEOUT] = "timeout",
    [APP_TOOL_BAD_ARGUMENTS] = "bad arguments",
    [APP_TOOL_UNKNOWN_TOOL] = "unknown tool",
    [APP_TOOL_CANCELLED] = "cancelled",
};

const char *app_tool_state_name(app_tool_state s)
{
    return (unsigned)s < sizeof tool_state_names / sizeof *tool_state_names ? tool_state_names[s] : "failed";
}

int app_tool_state_from_name(const char *name)
{
    for (size_t s = 0; name && s < sizeof tool_state_names / sizeof *tool_state_names; s++)
        if (!strcmp(name, tool_state_names[s]))
            return (int)s;
    return -1;
}

static app_tool_state state_of_result(const tool_result *r)
{
    switch (r->status) {
    case TOOL_RUN_DONE: return APP_TOOL_DONE;
    case TOOL_RUN_FAILED_START: return APP_TOOL_FAILED;
    case TOOL_RUN_TIMEOUT: return APP_TOOL_TIMEOUT;
    case TOOL_RUN_CANCELLED: return APP_TOOL_CANCELLED;
    case TOOL_RUN_BAD_ARGUMENTS: return APP_TOOL_BAD_ARGUMENTS;
    }
    return APP_TOOL_FAILED;
}

static void tool_run_finished(app *a)
{
    pthread_join(a->tool_thread, NULL);
    int i = a->next_call;
    pending_call *c = &a->calls[i];
    size_t len = 0;
    char *text;
    app_tool_state state;
    if (a->tool_rc) {
        text = text_copy(a->tool_err.msg, &len);
        state = APP_TOOL_FAILED;
    } else {
        c->exit_status = a->tool_out.exit_status;
        c->seconds = a->tool_out.seconds;
        text = tool_result_message(&a->tool_out, &len);
        state = state_of_result(&a->tool_out);
    }
    tool_result_free(&a->tool_out);
    a->state = TURN_GENERATING;
    finish_call(a, i, state, text, len);
    advance_tools(a);
}

/* What the user said about a tool this session, over --allow-tools. */
enum { GRANT_NONE, GRANT_ALWAYS /* "a" answered */, GRANT_ASK /* /tools ask NAME */ };

static int named_by_allow_tools(const app *a, const tool_def *t)
{
    const char *allow = a->opt->allow_tools;
    if (!allow)
        return 0;
    if (!strcmp(allow, "all"))
        return 1;
    size_t n = strlen(t->name);
    for (const char *p = allow; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !memcmp(p, t->name, n))
            return 1;
        p += len + (end != NULL);
    }
    return 0;
}

static int allowed_by_policy(const app *a, const tool_def *t)
{
    int grant = a->grant[t - a->tools.tools];
    return grant == GRANT_ALWAYS || (grant != GRANT_ASK && named_by_allow_tools(a, t));
}

/* Handle the calls from next_call on until one has to wait (approval or a run), then, when all
 * are answered, generate again or end the turn. */
static void advance_tools(app *a)
{
    while (a->next_call < a->n_calls) {
        int i = a->next_call;
        pending_call *c = &a->calls[i];
        const char *name = c->name.data ? c->name.data : "";
        tool_def *t = a->have_tools ? tools_find(&a->tools, name) : NULL;
        if (a->stop_requested) {
            finish_call_text(a, i, APP_TOOL_CANCELLED, "[not run: the user stopped the turn]");
        } else if (a->tool_rounds >= APP_MAX_TOOL_ROUNDS) {
            char note[128];
            snprintf(note, sizeof note, "[not run: %d rounds of tool calls in one turn is the limit]", APP_MAX_TOOL_ROUNDS);
            finish_call_text(a, i, APP_TOOL_CANCELLED, note);
        } else if (!c->valid) {
            char note[400];
            snprintf(note, sizeof note, "[not run: %s]", c->problem[0] ? c->problem : "invalid arguments");
            finish_call_text(a, i, APP_TOOL_BAD_ARGUMENTS, note);
        } else if (!t || !t->enabled || a->opt->no_tools) {
            char *text = tools_message_unknown(&a->tools, name);
            finish_call(a, i, APP_TOOL_UNKNOWN_TOOL, text, text ? strlen(text) : 0);
        } else if (allowed_by_policy(a, t)) {
            run_call(a, i, t);
            return;
        } else if (a->fe.tool_approval) {
            a->state = TURN_APPROVAL;
            c->state = APP_TOOL_WAITING;
            app_tool_call v = view_of(a, i);
            a->fe.tool_approval(a->fe.user, &v);
            return;
        } else {
            /* nobody to ask: "the user denied" would be untrue */
            char *text = tool_message_not_asked(name);
            finish_call(a, i, APP_TOOL_DENIED, text, text ? strlen(text) : 0);
        }
    }
    /* every call has its result */
    if (a->stop_requested) {
        end_turn(a, APP_TURN_STOPPED, "stopped");
        return;
    }
    if (a->tool_rounds >= APP_MAX_TOOL_ROUNDS) {
        char message[128];
        snprintf(message, sizeof message, "stopped after %d rounds of tool calls in one turn", APP_MAX_TOOL_ROUNDS);
        end_turn(a, APP_TURN_TOOL_LIMIT, message);
        return;
    }
    a->tool_rounds++;
    kimi_err err = {0};
    if (start_generation(a, &err))
        end_turn(a, APP_TURN_FAILED, err.msg);     /* said once, as the turn's outcome */
}

void app_approve(app *a, int call_index, tool_approval decision)
{
    if (a->state != TURN_APPROVAL || call_index != a->next_call)
        return;
    pending_call *c = &a->calls[call_index];
    tool_def *t = tools_find(&a->tools, c->name.data ? c->name.data : "");
    if (!t || !t->enabled || a->opt->no_tools) {
        /* disabled while the question was open (/tools disable): reported, never run */
        a->state = TURN_GENERATING;
        advance_tools(a);
        return;
    }
    if (decision == TOOL_DENY) {
        char *text = tool_message_denied(t->name);
        a->state = TURN_GENERATING;
        finish_call(a, call_index, APP_TOOL_DENIED, text, text ? strlen(text) : 0);
        advance_tools(a);
        return;
    }
    if (decision == TOOL_APPROVE_ALWAYS)
        a->grant[t - a->tools.tools] = GRANT_ALWAYS;
    run_call(a, call_index, t);
}

static void generation_finished(app *a)
{
    const generator_result *res = a->gen->ops->result(a->gen);
    kimi_err err = {0};
    int nothing = !a->content.len && !a->reasoning.len && !a->n_calls && !res->generated_tokens;
    if (!nothing && append_answer(a, res, a->stop_reason, &err))
        report(a, &err);
    if (res->error[0]) {
        end_turn(a, APP_TURN_FAILED, res->error);
        return;
    }
    if (a->stop_requested) {
        end_turn(a, APP_TURN_STOPPED, "stopped; the answer so far is kept");
        return;
    }
    if (a->stop_reason == PARSE_STOP_CONTEXT_FULL) {
        char message[160];
        snprintf(message, sizeof message, "the context is full (%ld tokens): /new starts afresh, /undo drops the last exchange",
                 a->gen->context_limit);
        end_turn(a, APP_TURN_FAILED, message);
        return;
    }
    /* calls run only when the model finished its turn (not when cut off mid-section) */
    if (a->n_calls && (a->stop_reason == PARSE_STOP_END_OF_TURN || a->stop_reason == PARSE_STOP_EOS)) {
        a->next_call = 0;
        advance_tools(a);
        return;
    }
    end_turn(a, APP_TURN_DONE, NULL);
}

static void compaction_finished(app *a);

int app_dispatch(app *a, kimi_err *err)
{
    if (a->state == TURN_GENERATING || a->state == TURN_COMPACTING) {
        int rc = a->gen->ops->pump(a->gen, on_generator_event, a, err);
        if (rc < 0 || (rc > 1))
            return err->code;
        if (rc == 1 && a->state == TURN_COMPACTING)
            compaction_finished(a);
        else if (rc == 1)
            generation_finished(a);
        else if (err->code)
            return err->code;
    }
    if (a->state == TURN_TOOL_RUNNING) {
        char byte;
        if (read(a->tool_pipe[0], &byte, 1) == 1)
            tool_run_finished(a);
    }
    return 0;
}

int app_poll_fds(const app *a, struct pollfd *fds)
{
    int n = 0;
    if (a->state == TURN_GENERATING || a->state == TURN_COMPACTING)
        fds[n++] = (struct pollfd){.fd = a->gen->ops->event_fd(a->gen), .events = POLLIN};
    if (a->state == TURN_TOOL_RUNNING)
        fds[n++] = (struct pollfd){.fd = a->tool_pipe[0], .events = POLLIN};
    return n;
}

void app_stop(app *a)
{
    if (a->state == TURN_IDLE)
        return;
    a->stop_requested = 1;
    if (a->state == TURN_GENERATING || a->state == TURN_COMPACTING)
        a->gen->ops->cancel(a->gen);
    else if (a->state == TURN_TOOL_RUNNING)
        atomic_store(&a->tool_cancel, 1);
    else if (a->state == TURN_APPROVAL) {
        a->state = TURN_GENERATING;
        advance_tools(a);
    }
}

int app_wind_down(app *a, double seconds, kimi_err *err)
{
    if (a->state == TURN_IDLE)
        return 0;
    app_stop(a);
    double deadline = monotonic_seconds() + seconds;
    while (a->state != TURN_IDLE && monotonic_seconds() < deadline) {
        struct pollfd fds[APP_MAX_POLL_FDS];
        int n = app_poll_fds(a, fds);
        if (n && poll(fds, (nfds_t)n, 100) < 0 && errno != EINTR)
            return kimi_fail(err, KIMI_ERR_IO, "poll: %s", strerror(errno));
        if (app_dispatch(a, err))
            return err->code;
    }
    if (a->state != TURN_IDLE)
        return kimi_fail(err, KIMI_ERR_STATE, "the stopped turn did not end within %g s", seconds);
    return 0;
}

int app_busy(const app *a) { return a->state != TURN_IDLE; }
int app_tool_count(const app *a) { return a->have_tools ? a->tools.n_tools : 0; }
const char *app_tool_name(const app *a, int i) { return i >= 0 && i < app_tool_count(a) ? a->tools.tools[i].name : NULL; }
int app_quit_requested(const app *a) { return a->quit; }
const session *app_session(const app *a) { return &a->sess; }
const generator *app_generator(const app *a) { return a->gen; }
long app_context_used(const app *a) { return a->context_used; }

const chat_message *app_last_answer(const app *a)
{
    for (int i = a->sess.conv.n_messages - 1; i >= 0; i--)
        if (a->sess.conv.messages[i].role == CHAT_ROLE_ASSISTANT)
            return &a->sess.conv.messages[i];
    return NULL;
}

int app_last_turn_called(const app *a, const char *tool_name)
{
    if (!a->called.data)
        return 0;
    size_t n = strlen(tool_name);
    for (const char *p = a->called.data; (p = strstr(p, tool_name)); p++)
        if ((p == a->called.data || p[-1] == '\n') && p[n] == '\n')
            return 1;
    return 0;
}

/* The user's last message (a /compact summary is not one). */
static int last_user_index(const app *a)
{
    for (int i = a->sess.conv.n_messages - 1; i >= 0; i--)
        if (a->sess.conv.messages[i].role == CHAT_ROLE_USER && !a->sess.meta[i].summary)
            return i;
    return -1;
}

const char *app_last_user_text(const app *a, size_t *len)
{
    int i = last_user_index(a);
    if (i < 0)
        return NULL;
    *len = a->sess.conv.messages[i].content.len;
    return a->sess.conv.messages[i].content.s ? a->sess.conv.messages[i].content.s : "";
}

static int begin_turn(app *a, kimi_err *err)
{
    a->tool_rounds = 0;
    a->stop_requested = 0;
    free(a->called.data);
    a->called = (strbuf){0};
    a->turn_start_message = a->sess.conv.n_messages - 1;
    return start_generation(a, err);
}

/* Text the user gave (typed, piped, pasted, a script's turn, --prompt, --system), as the
 * conversation keeps it: ill-formed UTF-8 becomes U+FFFD, which the tokenizer would read anyway
 * and which is all a server's JSON can carry (unreplaced, a --server request failed as "out of
 * memory building the body"). The first time, the user is told. Points *text and *len at the clean
 * text; *owned is what to free (NULL when the text was well-formed). */
static int clean_input(app *a, const char **text, size_t *len, char **owned, kimi_err *err)
{
    *owned = NULL;
    if (!*text || utf8_is_valid((const uint8_t *)*text, *len))
        return 0;
    if (*len > (SIZE_MAX - 1) / 3 || !(*owned = malloc(3 * *len + 1)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    *len = utf8_replace_ill_formed((const uint8_t *)*text, *len, (uint8_t *)*owned);
    (*owned)[*len] = 0;
    *text = *owned;
    if (!a->said_replaced) {
        a->said_replaced = 1;
        say_info(a, "the input is not valid UTF-8: each bad sequence was replaced with U+FFFD (\xEF\xBF\xBD)");
    }
    return 0;
}

/* ---- the queue ---- */

static void queue_changed(app *a)
{
    if (a->fe.queue_changed)
        a->fe.queue_changed(a->fe.user);
}

static int queue_add(app *a, int at, char *text, size_t len, kimi_err *err)
{
    if (a->n_queue == a->cap_queue) {
        int cap = a->cap_queue ? 2 * a->cap_queue : 4;
        queued_message *grown = realloc(a->queue, (size_t)cap * sizeof *grown);
        if (!grown)
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the queued message");
        a->queue = grown;
        a->cap_queue = cap;
    }
    memmove(a->queue + at + 1, a->queue + at, (size_t)(a->n_queue - at) * sizeof *a->queue);
    a->queue[at] = (queued_message){.text = text, .len = len};
    a->n_queue++;
    queue_changed(a);
    return 0;
}

static int queue_message(app *a, const char *text, size_t len, kimi_err *err)
{
    char *copy = malloc(len + 1);
    if (!copy)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the queued message");
    memcpy(copy, text, len);
    copy[len] = 0;
    if (queue_add(a, a->n_queue, copy, len, err)) {
        free(copy);
        return err->code;
    }
    return 0;
}

/* Every queued message goes back to the front end's input, joined by blank lines (in order),
 * and the queue is empty; without a front end to take them they stay queued. */
static void queue_return(app *a)
{
    if (!a->fe.queue_returned || !a->n_queue)
        return;
    strbuf joined = {0};
    for (int i = 0; i < a->n_queue; i++) {
        if (i)
            strbuf_add(&joined, "\n\n", 2);
        strbuf_add(&joined, a->queue[i].text, a->queue[i].len);
    }
    if (joined.failed) {
        free(joined.data);
        return;     /* out of memory: they stay queued rather than vanish */
    }
    for (int i = 0; i < a->n_queue; i++)
        free(a->queue[i].text);
    a->n_queue = 0;
    a->fe.queue_returned(a->fe.user, joined.data ? joined.data : "", joined.len);
    free(joined.data);
    queue_changed(a);
}

/* The turn ended: after a whole answer the oldest queued message is sent; after a failed,
 * stopped or cut-short turn the queue goes back to the input, because what the user queued
 * likely assumed an answer that did not come. */
static void queue_next(app *a, app_turn_outcome outcome)
{
    if (!a->n_queue || a->state != TURN_IDLE)
        return;
    if (outcome != APP_TURN_DONE) {
        queue_return(a);
        return;
    }
    queued_message m = a->queue[0];
    a->n_queue--;
    memmove(a->queue, a->queue + 1, (size_t)a->n_queue * sizeof *a->queue);
    queue_changed(a);
    kimi_err err = {0};
    if (app_send(a, m.text, m.len, &err)) {
        report(a, &err);
        kimi_err ignored = {0};
        if (queue_add(a, 0, m.text, m.len, &ignored) == 0)
            m.text = NULL;
        queue_return(a);
    }
    free(m.text);
}

int app_queue_length(const app *a) { return a->n_queue; }

const char *app_queued(const app *a, int i, size_t *len)
{
    if (i < 0 || i >= a->n_queue)
        return NULL;
    *len = a->queue[i].len;
    return a->queue[i].text;
}

char *app_unqueue(app *a, size_t *len)
{
    if (!a->n_queue)
        return NULL;
    queued_message m = a->queue[--a->n_queue];
    *len = m.len;
    queue_changed(a);
    return m.text;
}

int app_send(app *a, const char *text, size_t len, kimi_err *err)
{
    if (a->state != TURN_IDLE)
        return kimi_fail(err, KIMI_ERR_STATE, "an answer is still coming: wait, or stop it (Esc / Ctrl-C)");
    char *owned;
    if (clean_input(a, &text, &len, &owned, err))
        return err->code;
    chat_message m = {.role = CHAT_ROLE_USER};
    int rc = chat_text_set(&m.content, text, len, err) || session_append(&a->sess, &m, NULL, err);
    chat_message_free(&m);
    free(owned);
    if (rc)
        return err->code;
    if (begin_turn(a, err)) {
        session_truncate(&a->sess, a->sess.conv.n_messages - 1);
        return err->code;
    }
    return 0;
}

static int submit_line(app *a, const char *text, size_t len, kimi_err *err)
{
    if (len >= 2 && text[0] == '/' && text[1] == '/')
        return a->state != TURN_IDLE ? queue_message(a, text + 1, len - 1, err) : app_send(a, text + 1, len - 1, err);
    if (len && text[0] == '/') {
        if (memchr(text, 0, len))
            return kimi_fail(err, KIMI_ERR_INPUT, "a command is one line of text");
        char *line = strndup(text, len);    /* any length: /system takes long text */
        if (!line)
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
        int rc = app_command(a, line, err);
        free(line);
        return rc;
    }
    int blank = 1;
    for (size_t i = 0; i < len && blank; i++)
        blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r';
    if (blank)
        return 0;
    if (a->state != TURN_IDLE)
        return queue_message(a, text, len, err);
    return app_send(a, text, len, err);
}

int app_submit_line(app *a, const char *text, size_t len, kimi_err *err)
{
    return submit_line(a, text, len, err) ? report(a, err) : 0;
}

/* ---- commands ---- */

int app_command_check(const char *line, kimi_err *err)
{
    command c;
    return command_parse(line, strlen(line), &c, err);
}

static int require_idle(app *a, const command *c, kimi_err *err)
{
    if (a->state != TURN_IDLE)
        return kimi_fail(err, KIMI_ERR_STATE, "/%s: an answer is still coming: wait, or stop it first", c->name);
    return 0;
}

static int replace_system(app *a, const char *text, size_t len, kimi_err *err)
{
    chat_conversation *conv = &a->sess.conv;
    if (conv->n_messages && conv->messages[0].role == CHAT_ROLE_SYSTEM) {
        if (len)
            return chat_text_set(&conv->messages[0].content, text, len, err);
        session s2;
        session_init(&s2);
        for (int i = 1; i < conv->n_messages; i++)
            if (session_append(&s2, &conv->messages[i], &a->sess.meta[i], err)) {
                session_free(&s2);
                return err->code;
            }
        session_truncate(&a->sess, 0);
        int rc = 0;
        for (int i = 0; !rc && i < s2.conv.n_messages; i++)
            rc = session_append(&a->sess, &s2.conv.messages[i], &s2.meta[i], err);
        session_free(&s2);
        return rc ? err->code : 0;     /* not err->code alone: it may hold a caller's old error */
    }
    if (!len)
        return 0;
    /* insert the system prompt in front */
    session s2;
    session_init(&s2);
    chat_message sys = {.role = CHAT_ROLE_SYSTEM};
    int rc = chat_text_set(&sys.content, text, len, err) || session_append(&s2, &sys, NULL, err);
    chat_message_free(&sys);
    for (int i = 0; !rc && i < conv->n_messages; i++)
        rc = session_append(&s2, &conv->messages[i], &a->sess.meta[i], err);
    if (rc) {
        session_free(&s2);
        return err->code;
    }
    session_truncate(&a->sess, 0);
    for (int i = 0; !rc && i < s2.conv.n_messages; i++)
        rc = session_append(&a->sess, &s2.conv.messages[i], &s2.meta[i], err);
    session_free(&s2);
    return rc ? err->code : 0;
}

/* The system prompt set to text (/system, --system); empty removes it. */
static int set_system(app *a, const char *text, size_t len, kimi_err *err)
{
    char *owned;
    if (clean_input(a, &text, &len, &owned, err))
        return err->code;
    int rc = replace_system(a, text, len, err);
    free(owned);
    return rc;
}

/* ---- rewinding ---- */

static void session_changed(app *a, int kept);
static void session_changed_keep_context(app *a, int kept);

/* Drop what rewinds cut off at more than keep messages (-1: all): the conversation no longer
 * has the part they were cut from (an /undo below it, /retry, /system, /new, /load). */
static void forget_rewinds(app *a, int keep)
{
    int n = 0;
    for (int i = 0; i < a->n_rewinds; i++) {
        if (a->rewinds[i].at > keep)
            session_free(&a->rewinds[i].cut);
        else
            a->rewinds[n++] = a->rewinds[i];
    }
    a->n_rewinds = n;
    if (keep < 0)
        a->say_reuse = 0;
}

/* Cut the conversation back to its first `at` messages, keeping the rest for /undo. */
static int cut_at(app *a, int at, kimi_err *err)
{
    if (a->n_rewinds == a->cap_rewinds) {
        int cap = a->cap_rewinds ? 2 * a->cap_rewinds : 4;
        rewound_part *grown = realloc(a->rewinds, (size_t)cap * sizeof *grown);
        if (!grown)
            return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
        a->rewinds = grown;
        a->cap_rewinds = cap;
    }
    rewound_part *r = &a->rewinds[a->n_rewinds];
    r->at = at;
    session_init(&r->cut);
    for (int i = at; i < a->sess.conv.n_messages; i++)
        if (session_append(&r->cut, &a->sess.conv.messages[i], &a->sess.meta[i], err)) {
            session_free(&r->cut);
            return err->code;
        }
    a->n_rewinds++;
    session_truncate(&a->sess, at);
    session_changed(a, at);
    a->say_reuse = 1;
    autosave(a);
    return 0;
}

/* The newest rewind's cut-off part back, when the conversation is again just what it kept;
 * 1 when it was brought back, 0 when there is none to bring back. */
static int restore_rewound(app *a, kimi_err *err)
{
    if (!a->n_rewinds || a->rewinds[a->n_rewinds - 1].at != a->sess.conv.n_messages)
        return 0;
    rewound_part *r = &a->rewinds[a->n_rewinds - 1];
    for (int i = 0; i < r->cut.conv.n_messages; i++)
        if (session_append(&a->sess, &r->cut.conv.messages[i], &r->cut.meta[i], err)) {
            session_truncate(&a->sess, r->at);
            return -1;
        }
    int at = r->at, n = r->cut.conv.n_messages;
    session_free(&r->cut);
    a->n_rewinds--;
    a->say_reuse = 0;
    session_changed(a, at);
    autosave(a);
    say_info(a, "brought back the %d message%s the rewind cut off", n, n == 1 ? "" : "s");
    return 1;
}

int app_rewind(app *a, int index, char **text, size_t *len, kimi_err *err)
{
    *text = NULL;
    if (a->state != TURN_IDLE)
        return kimi_fail(err, KIMI_ERR_STATE, "rewind: an answer is still coming: wait, or stop it first");
    if (index < 0 || index >= a->sess.conv.n_messages || a->sess.conv.messages[index].role != CHAT_ROLE_USER ||
        a->sess.meta[index].summary)
        return kimi_fail(err, KIMI_ERR_INPUT, "rewind: message %d is not one of your messages", index);
    const chat_text *t = &a->sess.conv.messages[index].content;
    size_t n = t->len;
    char *copy = malloc(n + 1);
    if (!copy)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    if (n)
        memcpy(copy, t->s, n);
    copy[n] = 0;
    if (cut_at(a, index, err)) {
        free(copy);
        return err->code;
    }
    *text = copy;
    *len = n;
    return 0;
}

/* ---- /compact ---- */

#define SUMMARY_HEADING "[Summary of the earlier conversation]\n\n"

/* The model summarises what it sees before the user's last message (reasoning off, no tools);
 * the summary goes in before that message and the model sees it, and what follows, from then
 * on. */
static int start_compaction(app *a, const char *instructions, kimi_err *err)
{
    int from = session_context_start(&a->sess);
    int at = last_user_index(a);
    int material = 0;      /* messages the summary replaces (the system prompt and an older summary
                              are no news) */
    for (int i = from; i < at; i++)
        material += a->sess.conv.messages[i].role != CHAT_ROLE_SYSTEM && !a->sess.meta[i].summary;
    if (at < 0 || !material)
        return kimi_fail(err, KIMI_ERR_STATE, "/compact: nothing to compact: the model already sees only the last exchange");
    chat_message ask = {.role = CHAT_ROLE_USER};
    strbuf prompt = {0};
    strbuf_str(&prompt, APP_COMPACT_PROMPT);
    if (*instructions)
        strbuf_printf(&prompt, "\n\nAlso: %s", instructions);
    chat_conversation view = {0};
    int rc = prompt.failed ? kimi_fail(err, KIMI_ERR_NOMEM, "out of memory")
             : chat_text_set(&ask.content, prompt.data, prompt.len, err) ? err->code
                                                                        : model_view(a, at, &ask, &view, err);
    const session_settings *s = &a->sess.settings;
    if (!rc) {
        answer_reset(a);
        generator_request req = {
            /* Moonshot's non-thinking temperature, or the session's when lower (0: greedy) */
            .conv = &view, .thinking = 0, .temperature = s->temperature < 0.6f ? s->temperature : 0.6f,
            .top_p = s->top_p, .top_k = s->top_k,
            .max_tokens = APP_COMPACT_MAX_TOKENS, .max_tokens_fit = 1, .seed = s->seed,
        };
        rc = a->gen->ops->start(a->gen, &req, err);
        model_view_free(a, &view);
    }
    chat_message_free(&ask);
    free(prompt.data);
    if (rc)
        return rc;
    a->state = TURN_COMPACTING;
    a->stop_requested = 0;
    a->compact_at = at;
    say_info(a, "compacting: the model summarises %d message%s (Esc or Ctrl-C stops it)", material,
             material == 1 ? "" : "s");
    return 0;
}

/* Put message m (with meta) in at index `at`, moving the rest up one. */
static int insert_message(app *a, int at, const chat_message *m, const session_message_meta *meta, kimi_err *err)
{
    session tail;
    session_init(&tail);
    int n = a->sess.conv.n_messages, rc = 0;
    for (int i = at; !rc && i < n; i++)
        rc = session_append(&tail, &a->sess.conv.messages[i], &a->sess.meta[i], err);
    if (!rc) {
        session_truncate(&a->sess, at);
        rc = session_append(&a->sess, m, meta, err);
        for (int i = 0; !rc && i < tail.conv.n_messages; i++)
            rc = session_append(&a->sess, &tail.conv.messages[i], &tail.meta[i], err);
        if (rc) {
            /* back as it was: the tail's copies are still whole */
            session_truncate(&a->sess, at);
            for (int i = 0; i < tail.conv.n_messages; i++) {
                kimi_err ignored = {0};
                session_append(&a->sess, &tail.conv.messages[i], &tail.meta[i], &ignored);
            }
        }
    }
    session_free(&tail);
    return rc ? err->code : 0;
}

static void compaction_finished(app *a)
{
    const generator_result *res = a->gen->ops->result(a->gen);
    char why[600] = "";
    int stopped = 0;
    size_t start = 0;
    while (start < a->content.len && strchr(" \t\r\n", a->content.data[start]))
        start++;
    if (res->error[0])
        snprintf(why, sizeof why, "%s", res->error);
    else if (a->stop_requested || a->stop_reason == PARSE_STOP_CANCELLED)
        stopped = snprintf(why, sizeof why, "stopped");
    else if ((a->stop_reason == PARSE_STOP_MAX_TOKENS || a->stop_reason == PARSE_STOP_MAX_TOKENS_WHILE_THINKING) &&
             (a->gen->context_limit <= 0 || (long)res->prompt_tokens + res->generated_tokens < a->gen->context_limit))
        snprintf(why, sizeof why, "the summary itself was too long (over %d tokens)", APP_COMPACT_MAX_TOKENS);
    else if (a->stop_reason == PARSE_STOP_CONTEXT_FULL || a->stop_reason == PARSE_STOP_MAX_TOKENS ||
             a->stop_reason == PARSE_STOP_MAX_TOKENS_WHILE_THINKING) /* its cap shrunk to the room left */
        snprintf(why, sizeof why, "the context filled up while the model wrote the summary");
    else if (a->content.failed || a->reasoning.failed)
        snprintf(why, sizeof why, "out of memory for the summary");
    else if (start == a->content.len)
        snprintf(why, sizeof why, "the model wrote no summary");
    else if (res->prompt_tokens > 0 && res->generated_tokens >= res->prompt_tokens)
        /* a server that reports no usage (0) is not judged */
        snprintf(why, sizeof why, "the summary itself was too long (%d tokens, no fewer than the %d it summarised)",
                 res->generated_tokens, res->prompt_tokens);
    if (!why[0]) {
        kimi_err err = {0};
        chat_message m = {.role = CHAT_ROLE_USER};
        session_message_meta meta = {.summary = 1};
        strbuf text = {0};
        strbuf_str(&text, SUMMARY_HEADING);
        strbuf_add(&text, a->content.data + start, a->content.len - start);
        if (text.failed || chat_text_set(&m.content, text.data, text.len, &err) ||
            insert_message(a, a->compact_at, &m, &meta, &err))
            snprintf(why, sizeof why, "%s", err.msg[0] ? err.msg : "out of memory for the summary");
        chat_message_free(&m);
        free(text.data);
    }
    if (why[0]) {
        char message[800];
        snprintf(message, sizeof message, "/compact: %s; the conversation is as it was", why);
        end_turn(a, stopped ? APP_TURN_STOPPED : APP_TURN_FAILED, message);
        return;
    }
    int at = a->compact_at;
    /* What the model sees now, about (the next answer counts it exactly): what it saw before,
       less the part replaced, plus the summary. The part replaced is about the prompt of the
       first answer to the last message (which also held the system prompt and that message),
       else the summary request's prompt (which also held the request). */
    long before = a->context_used;
    const session_message_meta *first = at + 2 < a->sess.conv.n_messages ? &a->sess.meta[at + 2] : NULL;
    long replaced = first && first->has_stats ? first->prompt_tokens : res->prompt_tokens;
    long estimate = before - replaced + res->generated_tokens;
    a->context_used = estimate > res->generated_tokens ? estimate : res->generated_tokens;
    a->offered_compact = 0;
    forget_rewinds(a, at);
    session_changed_keep_context(a, at);
    say_info(a, "compacted: the model now sees a summary of %d tokens and the last exchange (about %ld of %ld tokens "
                "before); the whole conversation stays in the session file and exports",
             res->generated_tokens, a->context_used, before);
    end_turn(a, APP_TURN_DONE, NULL);
}

/* The conversation was replaced or cut from message kept on: the context it fills is what its
 * last answer filled (unknown, 0, when no answer has stats), and no tool counts as called in the
 * current turn. */
static void session_changed_keep_context(app *a, int kept)
{
    free(a->called.data);
    a->called = (strbuf){0};
    if (a->fe.session_reset)
        a->fe.session_reset(a->fe.user, kept);
}

static void session_changed(app *a, int kept)
{
    a->context_used = 0;
    for (int i = a->sess.conv.n_messages - 1; i >= 0 && !a->context_used; i--)
        if (a->sess.meta[i].has_stats)
            a->context_used = (long)a->sess.meta[i].prompt_tokens + a->sess.meta[i].generated_tokens;
    session_changed_keep_context(a, kept);
}

/* Where /load NAME reads: a session of that name in the sessions folder (what /save NAME
 * wrote), else the file NAME as given. */
static char *resolve_session_name(const app *a, const char *name)
{
    if (strchr(name, '/') || !a->sessions_dir)
        return strdup(name);
    size_t len = strlen(name);
    char *path;
    if (asprintf(&path, "%s/%s%s", a->sessions_dir, name,
                 len > 5 && !strcmp(name + len - 5, ".json") ? "" : ".json") < 0)
        return NULL;
    struct stat st;
    if (stat(path, &st) == 0 || stat(name, &st) != 0)
        return path;
    free(path);
    return strdup(name);
}

/* Where /save NAME writes: a bare NAME is always a file of the sessions folder (never a file
 * of the current folder that happens to have that name); a path with '/' is taken as given. A
 * target that exists and is not a session (someone's notes, a folder) is never replaced. */
static char *save_target(const app *a, const char *name, kimi_err *err)
{
    if (!strchr(name, '/') && name[0] == '.') {
        kimi_fail(err, KIMI_ERR_INPUT, "/save %s: a session name cannot start with '.'", name);
        return NULL;
    }
    char *path;
    if (strchr(name, '/') || !a->sessions_dir) {
        path = strdup(name);
    } else {
        size_t len = strlen(name);
        const char *ext = len > 5 && !strcmp(name + len - 5, ".json") ? "" : ".json";
        if (asprintf(&path, "%s/%s%s", a->sessions_dir, name, ext) < 0)
            path = NULL;
    }
    if (!path) {
        kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) == 0) {
        session existing;
        session_init(&existing);
        kimi_err why = {0};
        int is_session = S_ISREG(st.st_mode) && session_load(&existing, path, &why) == 0;
        session_free(&existing);
        if (!is_session) {
            kimi_fail(err, KIMI_ERR_INPUT, "/save %s: %s exists and is not a kimi-chat session; not replaced",
                      name, path);
            free(path);
            return NULL;
        }
    }
    return path;
}

static int inside_dir(const char *path, const char *dir)
{
    if (!dir)
        return 0;
    char *real_path = realpath(path, NULL), *real_dir = realpath(dir, NULL);
    size_t n = real_dir ? strlen(real_dir) : 0;
    int inside = real_path && real_dir && !strncmp(real_path, real_dir, n) && real_path[n] == '/' &&
                 !strchr(real_path + n + 1, '/');
    free(real_path);
    free(real_dir);
    return inside;
}

/* The settings given on the command line win over a loaded session's (the README: flags
 * override), and the status bar and /stats show them. */
static void apply_flag_settings(app *a)
{
    const app_options *o = a->opt;
    session_settings *s = &a->sess.settings;
    unsigned set = o->flag_settings;
    if (set & OPTIONS_SET_THINKING)
        s->thinking = o->thinking;
    if (set & OPTIONS_SET_TEMPERATURE)
        s->temperature = o->temperature;
    if (set & OPTIONS_SET_TOP_P)
        s->top_p = o->top_p;
    if (set & OPTIONS_SET_TOP_K)
        s->top_k = o->top_k;
    if (set & OPTIONS_SET_MAX_TOKENS)
        s->max_tokens = o->max_tokens;
    if (set & OPTIONS_SET_SEED)
        s->seed = o->seed;
}

/* Replace the session with the file at path; on failure the current one stays. */
static int load_session(app *a, const char *path, kimi_err *err)
{
    session loaded;
    session_init(&loaded);
    if (session_load_conversation(&loaded, path, err)) {
        session_free(&loaded);
        return err->code;
    }
    if (!loaded.has_settings)   /* an OpenAI file without kimi-chat's meta: the settings stay */
        loaded.settings = a->sess.settings;
    else
        a->temperature_follows_thinking = a->top_p_follows_thinking = 0;
    session_free(&a->sess);
    a->sess = loaded;
    forget_rewinds(a, -1);
    free(a->sess.path);
    /* A file of the sessions folder is continued; any other file (an export someone sent) is
       never written: autosave goes to a new file. */
    a->sess.path = inside_dir(path, a->sessions_dir) ? strdup(path) : NULL;
    apply_flag_settings(a);
    session_changed(a, 0);
    hold_session_file(a);
    return 0;
}

static void list_tools(app *a)
{
    if (!a->have_tools || !a->tools.n_tools) {
        say_info(a, "no tools (--tools FILE declares them)");
        return;
    }
    strbuf b = {0};
    strbuf_printf(&b, "tools from %s%s (/tools ask NAME takes an \"always\" back):\n", a->tools.path,
                  a->opt->no_tools ? " (all off: --no-tools)" : "");
    for (int i = 0; i < a->tools.n_tools; i++) {
        const tool_def *t = &a->tools.tools[i];
        const char *description = json_string_value(
            json_object_get(json_object_get(t->definition, "function"), "description"));
        int grant = a->grant[t - a->tools.tools];
        const char *policy = grant == GRANT_ALWAYS            ? "always (a)"
                             : allowed_by_policy(a, t)        ? "always (--allow-tools)"
                             : a->fe.tool_approval            ? "asks"
                                                              : "not run (nobody to ask)";
        strbuf_printf(&b, "  %-14s %-4s %-23s %s\n", t->name, t->enabled ? "on" : "off", policy,
                      description ? description : "");
    }
    if (b.data)
        say_info(a, "%.*s", (int)b.len - 1, b.data);
    free(b.data);
}

/* /permissions: each tool as ask, always or disabled, as the next call would find it. */
static void list_permissions(app *a)
{
    if (!a->have_tools || !a->tools.n_tools) {
        say_info(a, "no tools (--tools FILE declares them)");
        return;
    }
    strbuf b = {0};
    strbuf_printf(&b, "tool permissions (/permissions NAME ask|always|disabled):");
    for (int i = 0; i < a->tools.n_tools; i++) {
        const tool_def *t = &a->tools.tools[i];
        const char *p = !t->enabled || a->opt->no_tools ? "disabled"
                        : allowed_by_policy(a, t)       ? "always"
                        : a->fe.tool_approval           ? "ask"
                                                        : "ask (nobody to ask here: not run)";
        strbuf_printf(&b, "\n  %-14s %s", t->name, p);
    }
    if (a->opt->no_tools)
        strbuf_printf(&b, "\n(all disabled by --no-tools)");
    if (b.data)
        say_info(a, "%s", b.data);
    free(b.data);
}

static void show_stats(app *a)
{
    const session *s = &a->sess;
    int answers = 0, generated = 0;
    const session_message_meta *last = NULL;
    for (int i = 0; i < s->conv.n_messages; i++)
        if (s->meta[i].has_stats) {
            answers++;
            generated += s->meta[i].generated_tokens;
            last = &s->meta[i];
        }
    strbuf b = {0};
    strbuf_printf(&b, "model %s · %s · context %ld of %ld tokens\n", a->gen->model, a->gen->backend,
                  a->context_used, a->gen->context_limit);
    if (last)
        strbuf_printf(&b, "last answer: prompt %d tokens (%d reused from the cache, %d prefilled) · "
                          "%d generated · first token after %.2f s · prefill %.1f tok/s · decode %.1f tok/s · %s\n",
                      last->prompt_tokens, last->reused_tokens, last->prompt_tokens - last->reused_tokens,
                      last->generated_tokens, last->ttft_seconds, last->prefill_tok_s, last->decode_tok_s,
                      last->stop_reason ? last->stop_reason : "");
    if (a->gen->summary[0])
        strbuf_printf(&b, "%s\n", a->gen->summary);
    if (a->gen->speculation[0])
        strbuf_printf(&b, "speculation %s: %ld of %ld drafted tokens accepted (%.0f%%) since the start\n",
                      a->gen->speculation, a->accepted_tokens, a->drafted_tokens,
                      a->drafted_tokens ? 100.0 * (double)a->accepted_tokens / (double)a->drafted_tokens : 0.0);
    strbuf_printf(&b, "session: %d message%s, %d answer%s, %d tokens generated · temperature %g · top_p %g · "
                      "top_k %d · max_tokens %d · seed %llu · thinking %s",
                  s->conv.n_messages, s->conv.n_messages == 1 ? "" : "s", answers, answers == 1 ? "" : "s", generated, (double)s->settings.temperature,
                  (double)s->settings.top_p, s->settings.top_k, s->settings.max_tokens,
                  (unsigned long long)s->settings.seed, s->settings.thinking ? "on" : "off");
    if (b.data)
        say_info(a, "%s", b.data);
    free(b.data);
}

static int list_sessions(app *a, kimi_err *err)
{
    if (!a->sessions_dir)
        return kimi_fail(err, KIMI_ERR_STATE, "/sessions: no sessions folder (saving is off)");
    session_entry *entries;
    int n;
    if (session_list(a->sessions_dir, &entries, &n, err))
        return err->code;
    strbuf b = {0};
    if (!n)
        strbuf_printf(&b, "no saved sessions in %s", a->sessions_dir);
    else
        strbuf_printf(&b, "%d saved sessions in %s (newest first; /load NAME):", n, a->sessions_dir);
    for (int i = 0; i < n; i++) {
        const char *base = strrchr(entries[i].path, '/');
        base = base ? base + 1 : entries[i].path;
        char when[32];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime(&entries[i].modified));
        strbuf_printf(&b, "\n  %-28s %s  %3d messages  %s", base, when, entries[i].n_messages,
                      entries[i].title ? entries[i].title : "");
    }
    if (b.data)
        say_info(a, "%s", b.data);
    free(b.data);
    session_list_free(entries, n);
    return 0;
}

const char *app_sessions_dir(const app *a)
{
    return a->sessions_dir;
}

int app_delete_session(app *a, const char *path, kimi_err *err)
{
    char *real = realpath(path, NULL), *own = a->sess.path ? realpath(a->sess.path, NULL) : NULL;
    int is_own = real && own && !strcmp(real, own);
    free(real);
    free(own);
    if (is_own)
        return kimi_fail(err, KIMI_ERR_STATE, "%s: this conversation's file (/new first to delete it)", path);
    return session_delete(path, err);
}

static int export_session(app *a, const command *c, kimi_err *err)
{
    char path[4096];
    if (c->arg[0]) {
        snprintf(path, sizeof path, "%s", c->arg);
    } else {
        char stamp[32];
        time_t t = time(NULL);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&t));
        /* a second export in the same second gets its own file, not the first one's */
        const char *ext = c->format == EXPORT_JSON ? "json" : "md";
        struct stat st;
        snprintf(path, sizeof path, "kimi-chat-%s.%s", stamp, ext);
        for (int k = 2; lstat(path, &st) == 0; k++)
            snprintf(path, sizeof path, "kimi-chat-%s-%d.%s", stamp, k, ext);
    }
    /* an existing file (or a link: lstat) is replaced only when asked; the atomic rename that
       writes it replaces a link itself, never the file it points to */
    struct stat st;
    if (!c->force && lstat(path, &st) == 0)
        return kimi_fail(err, KIMI_ERR_INPUT, "/export: %s exists (/export %s %s --force replaces it)", path,
                         c->format == EXPORT_JSON ? "json" : "md", path);
    int rc = c->format == EXPORT_JSON ? session_save(&a->sess, path, err)
                                      : session_export_markdown(&a->sess, path, err);
    if (!rc)
        say_info(a, "exported %d messages to %s", a->sess.conv.n_messages, path);
    return rc;
}

/* The confirmation of /load and --load. */
static void say_loaded(app *a, const char *path)
{
    int n = a->sess.conv.n_messages;
    say_info(a, "loaded %s (%d message%s)", path, n, n == 1 ? "" : "s");
}

static int view_command(app *a, const command *c, const char *arg, kimi_err *err)
{
    if (a->fe.view_command)
        return a->fe.view_command(a->fe.user, c->name, arg, err);
    return 0;
}

static int run_command(app *a, command *c, kimi_err *err)
{
    switch (c->id) {
    case CMD_HELP:
        say_info(a, "%s", commands_help());
        return view_command(a, c, "", err);
    case CMD_QUIT:
        a->quit = 1;
        return view_command(a, c, "", err);
    case CMD_NEW:
        if (require_idle(a, c, err))
            return err->code;
        session_truncate(&a->sess, a->sess.conv.n_messages && a->sess.conv.messages[0].role == CHAT_ROLE_SYSTEM);
        free(a->sess.path);
        a->sess.path = NULL;
        a->sess.created = 0;
        release_session_file(a);
        forget_rewinds(a, -1);
        session_changed(a, a->sess.conv.n_messages);
        /* "always" was said about the conversation that ended */
        for (int i = 0; a->grant && i < a->tools.n_tools; i++)
            if (a->grant[i] == GRANT_ALWAYS)
                a->grant[i] = GRANT_NONE;
        say_info(a, "new conversation");
        return 0;
    case CMD_SYSTEM:
        if (require_idle(a, c, err) || set_system(a, c->text, c->text_len, err))
            return err->code;
        forget_rewinds(a, -1);
        session_changed(a, 0);
        say_info(a, c->text_len ? "system prompt set" : "system prompt removed");
        return 0;
    case CMD_THINK:
        a->sess.settings.thinking = c->on;
        apply_thinking_defaults(a);
        say_info(a, "thinking %s (temperature %g, top_p %g)", c->on ? "on" : "off",
                 (double)a->sess.settings.temperature, (double)a->sess.settings.top_p);
        return 0;
    case CMD_SET:
        switch (c->setting) {
        case SET_TEMPERATURE:
            a->sess.settings.temperature = (float)c->number;
            a->temperature_follows_thinking = 0;
            break;
        case SET_TOP_P:
            a->sess.settings.top_p = (float)c->number;
            a->top_p_follows_thinking = 0;
            break;
        case SET_TOP_K: a->sess.settings.top_k = (int)c->integer; break;
        case SET_MAX_TOKENS: a->sess.settings.max_tokens = (int)c->integer; break;
        case SET_SEED: a->sess.settings.seed = c->integer; break;
        }
        say_info(a, "temperature %g · top_p %g · top_k %d · max_tokens %d · seed %llu",
                 (double)a->sess.settings.temperature, (double)a->sess.settings.top_p,
                 a->sess.settings.top_k, a->sess.settings.max_tokens,
                 (unsigned long long)a->sess.settings.seed);
        return 0;
    case CMD_RETRY: {
        if (require_idle(a, c, err))
            return err->code;
        int u = last_user_index(a);
        if (u < 0)
            return kimi_fail(err, KIMI_ERR_STATE, "/retry: there is no question to answer again");
        /* the answer is dropped only once the new one is on its way: when the generation
           cannot start (a server down, the context), the old answer stays */
        session kept;
        session_init(&kept);
        int rc = 0;
        for (int i = u + 1; !rc && i < a->sess.conv.n_messages; i++)
            rc = session_append(&kept, &a->sess.conv.messages[i], &a->sess.meta[i], err);
        if (!rc) {
            session_truncate(&a->sess, u + 1);
            rc = begin_turn(a, err);
            if (!rc)
                forget_rewinds(a, u + 1);
            for (int i = 0; rc && i < kept.conv.n_messages; i++) {
                kimi_err restore = {0};
                if (session_append(&a->sess, &kept.conv.messages[i], &kept.meta[i], &restore))
                    break;
            }
            session_changed(a, u + 1);
        }
        session_free(&kept);
        return rc;
    }
    case CMD_UNDO:
    case CMD_EDIT: {
        if (require_idle(a, c, err))
            return err->code;
        if (c->id == CMD_UNDO) {
            int restored = restore_rewound(a, err);
            if (restored)
                return restored < 0 ? err->code : 0;
        }
        int u = last_user_index(a);
        if (u < 0)
            return kimi_fail(err, KIMI_ERR_STATE, "/%s: there is no exchange to %s", c->name,
                             c->id == CMD_EDIT ? "edit" : "drop");
        const chat_text *t = &a->sess.conv.messages[u].content;
        if (c->id == CMD_EDIT) {
            /* the front end takes the text first: one that has no input to put it in (a
               script, a pipe) refuses, and the exchange stays rather than vanish */
            char *text = strndup(t->s ? t->s : "", t->len);
            int rc = text ? view_command(a, c, text, err) : kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
            free(text);
            if (rc)
                return rc;
        }
        if (c->id == CMD_EDIT)
            return cut_at(a, u, err);
        session_truncate(&a->sess, u);
        forget_rewinds(a, u);
        session_changed(a, u);
        autosave(a);
        say_info(a, "dropped the last exchange");
        return 0;
    }
    case CMD_TOOLS:
        if (c->tools == TOOLS_LIST) {
            list_tools(a);
            return 0;
        }
        if (c->tools == TOOLS_EXPANDED || c->tools == TOOLS_FOLDED)
            return view_command(a, c, c->tools == TOOLS_EXPANDED ? "expanded" : "folded", err);
        {
            tool_def *t = a->have_tools ? tools_find(&a->tools, c->arg) : NULL;
            if (!t)
                return kimi_fail(err, KIMI_ERR_INPUT, "/tools: no tool named '%s' (/tools lists them)", c->arg);
            if (c->tools == TOOLS_ASK) {
                a->grant[t - a->tools.tools] = GRANT_ASK;
                say_info(a, "%s asks before every call again", t->name);
                return 0;
            }
            t->enabled = c->tools == TOOLS_ENABLE;
            say_info(a, "%s %s", t->name, t->enabled ? "enabled" : "disabled");
        }
        return 0;
    case CMD_SAVE:
        if (c->arg[0]) {
            char *path = save_target(a, c->arg, err);
            int rc = path ? session_save(&a->sess, path, err) : err->code;
            if (!rc)
                say_info(a, "saved to %s", path);
            free(path);
            return rc;
        }
        if (!a->sessions_dir)
            return kimi_fail(err, KIMI_ERR_STATE, "/save: saving is off (--no-save); /save NAME writes a file");
        if (app_save(a, err))
            return err->code;
        say_info(a, "saved to %s", a->sess.path ? a->sess.path : "(nothing to save yet)");
        return 0;
    case CMD_LOAD: {
        if (require_idle(a, c, err))
            return err->code;
        char *path = resolve_session_name(a, c->arg);
        int rc = path ? load_session(a, path, err) : kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
        if (!rc)
            say_loaded(a, path);
        free(path);
        return rc;
    }
    case CMD_COMPACT:
        if (require_idle(a, c, err))
            return err->code;
        return start_compaction(a, c->arg, err);
    case CMD_PERMISSIONS: {
        if (c->tools == TOOLS_LIST) {
            list_permissions(a);
            return 0;
        }
        tool_def *t = a->have_tools ? tools_find(&a->tools, c->arg) : NULL;
        if (!t)
            return kimi_fail(err, KIMI_ERR_INPUT, "/permissions: no tool named '%s' (/permissions lists them)", c->arg);
        t->enabled = c->tools != TOOLS_DISABLE;
        if (c->tools != TOOLS_DISABLE)
            a->grant[t - a->tools.tools] = c->tools == TOOLS_ALWAYS ? GRANT_ALWAYS : GRANT_ASK;
        say_info(a, "%s: %s", t->name, c->tools == TOOLS_ALWAYS ? "always (runs without asking in this conversation)"
                                       : c->tools == TOOLS_ASK  ? "ask before every call"
                                                                : "disabled (the model is told it is not available)");
        return 0;
    }
    case CMD_SESSIONS: return list_sessions(a, err);
    case CMD_EXPORT: return export_session(a, c, err);
    case CMD_STATS: show_stats(a); return 0;
    case CMD_THEME:
        if (!c->arg[0]) { /* which there are */
            char *names = paths_theme_names();
            if (!names)
                return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
            say_info(a, "themes: %s (/theme NAME to switch)", *names ? names : "none installed");
            free(names);
            return 0;
        }
        return view_command(a, c, c->arg, err);
    case CMD_REASONING: return view_command(a, c, c->arg, err);
    }
    return 0;
}

int app_command(app *a, const char *line, kimi_err *err)
{
    command c;
    if (command_parse(line, strlen(line), &c, err) || run_command(a, &c, err))
        return err->code;
    return 0;
}

/* ---- open and close ---- */

static int open_tools(app *a, kimi_err *err)
{
    if (!a->opt->tools_path)
        return 0;
    if (tools_load(&a->tools, a->opt->tools_path, err))
        return err->code;
    a->have_tools = 1;
    /* the API key is the server's business, never a tool's (a tool's output goes back to the
       server and into the session file) */
    const char *key_env = a->opt->api_key_env && *a->opt->api_key_env ? a->opt->api_key_env : "OPENAI_API_KEY";
    if (tools_withhold_env(&a->tools, key_env, err))
        return err->code;
    if (a->tools.notes)
        say_info(a, "%s", a->tools.notes);
    if (!(a->grant = calloc((size_t)a->tools.n_tools + 1, sizeof *a->grant)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    return 0;
}

int app_open(app **out, const app_options *opt, const app_frontend *fe, generator *gen, kimi_err *err)
{
    *out = NULL;
    app *a = calloc(1, sizeof *a);
    if (!a) {
        gen->ops->close(gen);
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    }
    a->opt = opt;
    a->fe = *fe;
    a->gen = gen;
    a->tool_pipe[0] = a->tool_pipe[1] = -1;
    a->lock = SESSION_LOCK_NONE;
    session_init(&a->sess);
    if (pipe2(a->tool_pipe, O_CLOEXEC | O_NONBLOCK)) {
        kimi_fail(err, KIMI_ERR_IO, "pipe: %s", strerror(errno));
        goto fail;
    }
    if (open_tools(a, err))
        goto fail;
    if (!opt->no_save) {
        a->sessions_dir = paths_sessions_dir(err);
        if (!a->sessions_dir || paths_mkdir_p(a->sessions_dir, err)) {
            say_info(a, "sessions are not saved: %s", err->msg);
            free(a->sessions_dir);
            a->sessions_dir = NULL;
            *err = (kimi_err){0};
        }
    }
    settings_from_options(a);
    if (opt->load_path) {
        if (load_session(a, opt->load_path, err))
            goto fail;
        say_loaded(a, opt->load_path);
    } else if (opt->resume) {
        /* with saving off (--no-save, or a folder that cannot be made) the newest session is
           still read, and never written */
        char *dir = a->sessions_dir ? strdup(a->sessions_dir) : paths_sessions_dir(err);
        if (!dir) {
            if (a->sessions_dir)
                kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
            goto fail;
        }
        session_entry *entries = NULL;
        int n = 0;
        if (session_list(dir, &entries, &n, err)) {
            if (err->code == KIMI_ERR_IO)   /* the user's folder, not the engine: exit code 2 */
                err->code = KIMI_ERR_USAGE;
            free(dir);
            goto fail;
        }
        int found = -1;
        for (int i = 0; i < n && found < 0; i++) {
            if (entries[i].n_messages > 0)
                found = i;
            else if (entries[i].unreadable)     /* said, skipped, and never written */
                say_info(a, "--resume: skipped %s: %s", entries[i].path, entries[i].title);
        }
        if (found < 0) {
            session_list_free(entries, n);
            kimi_fail(err, KIMI_ERR_USAGE, "--resume: no saved session in %s", dir);
            free(dir);
            goto fail;
        }
        int rc = load_session(a, entries[found].path, err);
        if (!rc)
            say_info(a, "resumed %s (%d messages)", entries[found].path, a->sess.conv.n_messages);
        session_list_free(entries, n);
        free(dir);
        if (rc)
            goto fail;
    }
    if (opt->system_prompt && set_system(a, opt->system_prompt, strlen(opt->system_prompt), err))
        goto fail;
    free(a->sess.model);
    free(a->sess.backend);
    a->sess.model = strdup(a->gen->model);
    a->sess.backend = strdup(a->gen->backend);
    *out = a;
    return 0;
fail:
    app_close(a);
    return err->code;
}

void app_close(app *a)
{
    if (!a)
        return;
    if (a->state == TURN_TOOL_RUNNING) {
        atomic_store(&a->tool_cancel, 1);
        pthread_join(a->tool_thread, NULL);
        tool_result_free(&a->tool_out);
    }
    if (a->gen)
        a->gen->ops->close(a->gen);
    answer_reset(a);
    free(a->calls);
    free(a->called.data);
    if (a->have_tools)
        tools_free(&a->tools);
    free(a->grant);
    for (int i = 0; i < a->n_queue; i++)
        free(a->queue[i].text);
    free(a->queue);
    forget_rewinds(a, -1);
    free(a->rewinds);
    session_free(&a->sess);
    release_session_file(a);
    free(a->sessions_dir);
    if (a->tool_pipe[0] >= 0) {
        close(a->tool_pipe[0]);
        close(a->tool_pipe[1]);
    }
    free(a);
}
