/* tui_mirror: the session and the app's stream mirrored into the full-screen view's render
 * model. */
#include "ui/tui_mirror.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/monotonic.h"
#include "ui/progress_text.h"
#include "ui/tui_paint.h"

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
        /* a /compact summary is the model's text, shown as a note where it took effect */
        render_model_finish(t->rm, render_model_append(t->rm, meta->summary ? RM_NOTE : RM_USER, content,
                                                       m->content.len, NULL));
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
            tui_add_block(t, RM_NOTE, b.data);
        free(b.data);
        break;
    }
    case CHAT_ROLE_OTHER:
        tui_add_block(t, RM_NOTE, content);
        break;
    }
}

/* Mirror session messages from..n into blocks (from is not a tool message: tool messages
 * always follow their assistant message within the range). */
void tui_mirror_from(tui *t, int from)
{
    const session *s = app_session(t->a);
    int call_blocks[64], n_calls = 0;
    for (int i = from; i < s->conv.n_messages; i++) {
        int first = render_model_block_count(t->rm);
        mirror_message(t, s, i, call_blocks, &n_calls);
        tui_tag_blocks(t, first, i);
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
    tui_mirror_from(t, kept);
    for (size_t off = 0; !notes.failed && off < notes.len; off += strlen(notes.data + off + 1) + 2)
        tui_add_block(t, (rm_block_kind)notes.data[off], notes.data + off + 1);
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
        tui_mirror_from(t, t->shown_messages);
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
        tui_tag_blocks(t, t->call_block[call], t->streamed_message);
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
            tui_tag_blocks(t, t->live_reasoning, t->streamed_message);
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
            tui_tag_blocks(t, t->live_answer, t->streamed_message);
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
            tui_add_block(t, RM_NOTE, b.data);
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
        tui_paint_now(t);
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
    t->approval_always = 0;         /* approval_stray_at stays: keys typed just before count */
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
        tui_add_block(t, outcome == APP_TURN_STOPPED ? RM_NOTE : RM_ERROR, message);
    if (t->a)
        t->shown_messages = app_session(t->a)->conv.n_messages;
}

static void on_info(void *user, const char *text)
{
    tui *t = user;
    tui_add_block(t, RM_NOTE, text);
    if (!t->a) {
        strbuf_add(&t->startup_notes, text, strlen(text) + 1);
        tui_paint_now(t);
    }
}

static void on_error(void *user, const char *line)
{
    tui *t = user;
    tui_add_block(t, RM_ERROR, line);
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

static int on_view_command(void *user, const char *name, const char *arg, kimi_err *err)
{
    tui *t = user;
    if (!strcmp(name, "theme")) {
        if (tui_load_theme(t, arg, err))
            return err->code;
        char line[160];
        snprintf(line, sizeof line, "theme %s", arg);
        tui_add_block(t, RM_NOTE, line);
    } else if (!strcmp(name, "reasoning")) {
        rm_reasoning_mode mode = !strcmp(arg, "expanded") ? RM_REASONING_EXPANDED
                                 : !strcmp(arg, "hidden") ? RM_REASONING_HIDDEN
                                                          : RM_REASONING_COLLAPSED;
        render_model_set_reasoning_mode(t->rm, mode);
        char line[64];
        snprintf(line, sizeof line, "reasoning %s", arg);
        tui_add_block(t, RM_NOTE, line);
    } else if (!strcmp(name, "tools")) {
        render_model_set_tools_expanded(t->rm, !strcmp(arg, "expanded"));
        tui_add_block(t, RM_NOTE, !strcmp(arg, "expanded") ? "tool results expanded" : "tool results folded");
    } else if (!strcmp(name, "edit")) {
        input_set_text(t->in, arg, strlen(arg));
        t->input_dirty = 1;
    } else if (!strcmp(name, "quit")) {
        t->quit = 1;
    } else if (!strcmp(name, "help")) {
        tui_help_toggle(t, 1);
    }
    t->dirty = 1;
    return 0;
}

static void on_queue_changed(void *user) { ((tui *)user)->dirty = 1; }

static void on_queue_returned(void *user, const char *text, size_t len)
{
    tui *t = user;
    tui_input_put_back(t, text, len);
    tui_hint(t, "the queued message is back in the input: the turn did not finish");
}

app_frontend tui_mirror_frontend(tui *t)
{
    return (app_frontend){
        .user = t, .generation_begin = on_generation_begin, .stream = on_stream,
        .progress = on_progress, .answer_done = on_answer_done, .tool_approval = on_tool_approval,
        .tool_update = on_tool_update, .turn_done = on_turn_done, .info = on_info, .error = on_error,
        .session_reset = on_session_reset, .saved = on_saved, .view_command = on_view_command,
        .queue_changed = on_queue_changed, .queue_returned = on_queue_returned,
    };
}

void tui_mirror_end_live(tui *t)
{
    end_reasoning(t);
    end_answer(t);
}
