/* generator_local: the in-process engine behind the generator interface (render, submit, parse). */
#include "app/chat/generator_local.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/monotonic.h"
#include "engine/runtime/speculate.h"
#include "engine/text/tokenizer.h"

typedef struct {
    generator base;
    engine *eng;
    tokenizer *tok;
    int32_t stop_ids[2];            /* <|im_end|>, [EOS] */
    int n_stop_ids;
    stream_parser *parser;          /* the running answer's; NULL when idle */
    uint64_t request;
    int running;
    int tokens;                     /* generated so far */
    double started;                 /* clock when the request was submitted */
    generator_event_fn on_event;    /* set for the duration of one pump */
    void *user;
    generator_result result;
} local_generator;

static void forward_parse_event(void *user, const parse_event *ev)
{
    local_generator *g = user;
    generator_event out = {.kind = GENERATOR_EVENT_PARSE, .parse = *ev, .tokens = g->tokens};
    g->on_event(g->user, &out);
}

static generator_progress progress_of(const engine_progress *p)
{
    return (generator_progress){
        .kind = p->kind == ENGINE_PROGRESS_LOAD ? GENERATOR_PROGRESS_LOAD : GENERATOR_PROGRESS_PREFILL,
        .done = p->done, .total = p->total, .seconds = p->seconds, .rate = p->rate, .eta_seconds = p->eta_seconds,
    };
}

/* The engine's load callbacks, passed on to the caller's while engine_open runs. */
static int relay_load_progress(void *user, const engine_progress *p)
{
    const generator_local_options *o = user;
    generator_progress out = progress_of(p);
    return o->on_load(o->load_user, &out);
}

static void relay_plan(void *user, const engine_info *info)
{
    const generator_local_options *o = user;
    o->on_note(o->load_user, info->summary);
    if (info->kv_cache_note[0])
        o->on_note(o->load_user, info->kv_cache_note);
}

static int local_start(generator *base, const generator_request *req, kimi_err *err)
{
    local_generator *g = (local_generator *)base;
    if (g->running)
        return kimi_fail(err, KIMI_ERR_STATE, "an answer is already being generated");
    chat_render_options ro = {.tools = req->tools, .thinking = req->thinking, .add_generation_prompt = 1};
    chat_rendering r;
    if (chat_render(g->tok, req->conv, &ro, &r, err))
        return err->code;
    engine_request er = {
        .tokens = r.ids, .n_tokens = (int)r.n_ids, .max_new_tokens = req->max_tokens,
        .stop_ids = g->stop_ids, .n_stop_ids = g->n_stop_ids,
        .sampling = {.temperature = req->temperature, .top_k = req->top_k, .top_p = req->top_p,
                     .seed = req->seed},
    };
    /* the engine's rule (engine_positions_needed): a conversation of exactly the context still
     * gets its first answer token; a max_tokens that does not fit is the engine's message */
    if (r.n_ids > (size_t)INT_MAX || engine_positions_needed((int)r.n_ids, 0) > g->base.context_limit) {
        int rc = kimi_fail(err, KIMI_ERR_STATE, "the conversation is %zu tokens, more than the %ld-token context: /new starts afresh, /undo drops the last exchange",
                           r.n_ids, g->base.context_limit);
        chat_rendering_free(&r);
        return rc;
    }
    long room = g->base.context_limit - (long)r.n_ids + 1;     /* >= 1 after the check above */
    if (req->max_tokens_fit && er.max_new_tokens > room)
        er.max_new_tokens = (int)room;
    parse_free(g->parser);
    g->parser = NULL;
    int rc = parse_create(&g->parser, g->tok, req->thinking ? PARSE_START_REASONING : PARSE_START_CONTENT,
                          forward_parse_event, g, err) ||
             engine_submit(g->eng, &er, &g->request, err);
    chat_rendering_free(&r);
    if (rc)
        return err->code ? err->code : KIMI_ERR_STATE;
    g->result = (generator_result){.prompt_tokens = (int)er.n_tokens};
    g->running = 1;
    g->tokens = 0;
    g->started = monotonic_seconds();
    return 0;
}

static int local_event_fd(const generator *base)
{
    return engine_event_fd(((const local_generator *)base)->eng);
}

static parse_stop_reason stop_from_engine(engine_stop_reason reason)
{
    switch (reason) {
    case ENGINE_STOP_MAX_TOKENS: return PARSE_STOP_MAX_TOKENS;
    case ENGINE_STOP_CANCELLED: return PARSE_STOP_CANCELLED;
    case ENGINE_STOP_CONTEXT_FULL: return PARSE_STOP_CONTEXT_FULL;
    case ENGINE_STOP_TOKEN: return PARSE_STOP_END_OF_TURN;
    case ENGINE_STOP_ERROR: break;
    }
    return PARSE_STOP_ERROR;
}

static int finish_answer(local_generator *g, const engine_stats *st, kimi_err *err)
{
    generator_result *res = &g->result;
    res->prompt_tokens = st->prompt_tokens;
    res->reused_tokens = st->reused_tokens;
    res->generated_tokens = st->generated_tokens;
    res->prefill_tok_s = st->prefill_tok_s;
    res->decode_tok_s = st->decode_tok_s;
    res->drafted_tokens = st->drafted_tokens;
    res->accepted_tokens = st->accepted_tokens;
    /* A stop id has already stopped the parser; any other end is told to it. */
    if (!parse_stopped(g->parser) && parse_finish(g->parser, stop_from_engine(st->stop_reason), err))
        return err->code;
    res->ids = parse_ids(g->parser, &res->n_ids);
    g->running = 0;
    return 1;
}

static int local_pump(generator *base, generator_event_fn on_event, void *user, kimi_err *err)
{
    local_generator *g = (local_generator *)base;
    g->on_event = on_event;
    g->user = user;
    engine_event ev;
    while (g->running && engine_next_event(g->eng, &ev, 0) == 1) {
        if (ev.request != g->request)
            continue;  /* a cancelled earlier answer's leftovers */
        switch (ev.kind) {
        case ENGINE_EVENT_TOKEN:
            if (ev.index == 0)
                g->result.ttft_seconds = monotonic_seconds() - g->started;
            g->tokens = ev.index + 1;
            if (parse_push(g->parser, ev.token, err))
                return err->code;
            break;
        case ENGINE_EVENT_ERROR:
            snprintf(g->result.error, sizeof g->result.error, "%s", ev.message);
            break;
        case ENGINE_EVENT_DONE:
            return finish_answer(g, &ev.stats, err);
        case ENGINE_EVENT_PROGRESS: {
            generator_event out = {.kind = GENERATOR_EVENT_PROGRESS, .progress = progress_of(&ev.progress)};
            on_event(user, &out);
            break;
        }
        }
    }
    return 0;
}

static void local_cancel(generator *base)
{
    local_generator *g = (local_generator *)base;
    if (g->running)
        engine_cancel(g->eng, g->request, NULL);
}

static const generator_result *local_result(const generator *base)
{
    return &((const local_generator *)base)->result;
}

static void local_close(generator *base)
{
    local_generator *g = (local_generator *)base;
    if (!g)
        return;
    engine_close(g->eng);
    parse_free(g->parser);
    tokenizer_free(g->tok);
    free(g);
}

static const generator_ops local_ops = {
    .start = local_start, .event_fd = local_event_fd, .pump = local_pump,
    .cancel = local_cancel, .result = local_result, .close = local_close,
};

static const char *folder_name(const char *dir, char *buf, size_t cap)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    snprintf(buf, cap, "%.*s", (int)(len - start), dir + start);
    return buf;
}

int generator_local_open(generator **out, const generator_local_options *o, kimi_err *err)
{
    *out = NULL;
    local_generator *g = calloc(1, sizeof *g);
    if (!g)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    g->base.ops = &local_ops;
    engine_options eo = o->engine;
    eo.model_dir = o->model_dir;
    eo.on_load_progress = o->on_load ? relay_load_progress : NULL;
    eo.on_plan = o->on_note ? relay_plan : NULL;
    eo.progress_user = (void *)o;
    if (engine_open(&g->eng, &eo, err))
        goto fail;
    if (tokenizer_load(&g->tok, o->model_dir, engine_model_config(g->eng), err))
        goto fail;
    static const char *const stop_names[] = {"<|im_end|>", "[EOS]"};
    for (size_t i = 0; i < sizeof stop_names / sizeof stop_names[0]; i++) {
        int32_t id = tokenizer_special_id(g->tok, stop_names[i]);
        if (id >= 0)
            g->stop_ids[g->n_stop_ids++] = id;
    }
    if (g->n_stop_ids == 0) {
        kimi_fail(err, KIMI_ERR_MODEL, "%s: the tokenizer has neither <|im_end|> nor [EOS]", o->model_dir);
        goto fail;
    }
    const engine_info *info = engine_get_info(g->eng);
    if (o->model_name)
        snprintf(g->base.model, sizeof g->base.model, "%s", o->model_name);
    else
        folder_name(o->model_dir, g->base.model, sizeof g->base.model);
    snprintf(g->base.backend, sizeof g->base.backend, "%s TP=%d",
             info->backend == BACKEND_CUDA ? "cuda" : "cpu", info->tp);
    snprintf(g->base.summary, sizeof g->base.summary, "%s%s%s", info->summary, info->kv_cache_note[0] ? "\n" : "",
                 info->kv_cache_note);
    g->base.context_limit = info->max_context;
    if (info->speculate == SPECULATE_AUTO)
        snprintf(g->base.speculation, sizeof g->base.speculation, "auto");
    else if (info->speculate == SPECULATE_OFF)
        snprintf(g->base.speculation, sizeof g->base.speculation, "off%s",
                 o->engine.speculate != SPECULATE_OFF ? " (not on this backend yet)" : "");
    else
        snprintf(g->base.speculation, sizeof g->base.speculation, "%d tokens", info->speculate);
    *out = &g->base;
    return 0;
fail:
    local_close(&g->base);
    return err->code;
}
