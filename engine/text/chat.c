/* chat: the conversation model, its OpenAI-style JSON form, and the renderer that reproduces the
 * checkpoint's chat_template.jinja (the tool declaration comes from tool_declaration) as token ids. */
#include "engine/text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/array.h"
#include "engine/text/pyformat.h"
#include "engine/text/tool_declaration.h"

static char *dup_text(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---- conversation model ---- */

void chat_conversation_init(chat_conversation *c) { *c = (chat_conversation){0}; }

void chat_message_free(chat_message *m)
{
    free(m->other_role);
    free(m->name);
    chat_text_free(&m->content);
    chat_text_free(&m->reasoning);
    for (int i = 0; i < m->n_tool_calls; i++) {
        free(m->tool_calls[i].id);
        free(m->tool_calls[i].name);
        chat_text_free(&m->tool_calls[i].arguments);
    }
    free(m->tool_calls);
    free(m->tool_call_id);
    *m = (chat_message){0};
}

void chat_conversation_truncate(chat_conversation *c, int n)
{
    if (n < 0)
        n = 0;
    while (c->n_messages > n)
        chat_message_free(&c->messages[--c->n_messages]);
}

void chat_conversation_free(chat_conversation *c)
{
    chat_conversation_truncate(c, 0);
    free(c->messages);
    *c = (chat_conversation){0};
}

static chat_message *append_slot(chat_conversation *c, kimi_err *err)
{
    if (c->n_messages == c->cap_messages) {
        if (c->cap_messages > (1 << 24)) {
            kimi_fail(err, KIMI_ERR_NOMEM, "conversation: too many messages");
            return NULL;
        }
        int cap = c->cap_messages ? c->cap_messages * 2 : 16;
        chat_message *grown = realloc(c->messages, (size_t)cap * sizeof *grown);
        if (!grown) {
            kimi_fail(err, KIMI_ERR_NOMEM, "conversation: out of memory");
            return NULL;
        }
        c->messages = grown;
        c->cap_messages = cap;
    }
    chat_message *m = &c->messages[c->n_messages++];
    *m = (chat_message){0};
    return m;
}

int chat_set_text(char **field, const char *text, kimi_err *err)
{
    char *copy = NULL;
    if (text && !(copy = dup_text(text)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "conversation: out of memory");
    free(*field);
    *field = copy;
    return 0;
}

int chat_text_set(chat_text *t, const char *s, size_t len, kimi_err *err)
{
    chat_text copy = {0};
    if (s) {
        if (len == SIZE_MAX || !(copy.s = malloc(len + 1)))
            return kimi_fail(err, KIMI_ERR_NOMEM, "conversation: out of memory");
        memcpy(copy.s, s, len);
        copy.s[len] = 0;
        copy.len = len;
    }
    chat_text_free(t);
    *t = copy;
    return 0;
}

int chat_text_append(chat_text *t, const char *s, size_t len, kimi_err *err)
{
    if (len > SIZE_MAX - 1 - t->len)
        return kimi_fail(err, KIMI_ERR_NOMEM, "conversation: text too long");
    /* grown geometrically: a streamed answer arrives in thousands of small pieces */
    size_t need = t->len + len + 1;
    if (need > (t->cap ? t->cap : t->len + 1)) {
        size_t cap = t->len + 1 > SIZE_MAX / 2 ? need : 2 * (t->len + 1);
        cap = cap < need ? need : cap;
        char *grown = realloc(t->s, cap);
        if (!grown)
            return kimi_fail(err, KIMI_ERR_NOMEM, "conversation: out of memory");
        t->s = grown;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, len);
    t->len += len;
    t->s[t->len] = 0;
    return 0;
}

void chat_text_free(chat_text *t)
{
    free(t->s);
    *t = (chat_text){0};
}

chat_message *chat_append(chat_conversation *c, chat_role role, const char *content,
                          size_t content_len, kimi_err *err)
{
    chat_message *m = append_slot(c, err);
    if (!m)
        return NULL;
    m->role = role;
    if (chat_text_set(&m->content, content, content_len, err)) {
        c->n_messages--;
        return NULL;
    }
    return m;
}

int chat_add_tool_call(chat_message *m, const char *id, const char *name, const char *arguments,
                       size_t arguments_len, kimi_err *err)
{
    if (m->n_tool_calls >= (1 << 20))
        return kimi_fail(err, KIMI_ERR_INPUT, "conversation: too many tool calls in one message");
    chat_tool_call *grown = realloc(m->tool_calls, (size_t)(m->n_tool_calls + 1) * sizeof *grown);
    if (!grown)
        return kimi_fail(err, KIMI_ERR_NOMEM, "conversation: out of memory");
    m->tool_calls = grown;
    chat_tool_call *call = &m->tool_calls[m->n_tool_calls];
    *call = (chat_tool_call){0};
    if (chat_set_text(&call->id, id, err) || chat_set_text(&call->name, name, err) ||
        chat_text_set(&call->arguments, arguments, arguments_len, err)) {
        free(call->id);
        free(call->name);
        return err ? err->code : KIMI_ERR_NOMEM;
    }
    m->n_tool_calls++;
    return 0;
}

int chat_append_copy(chat_conversation *c, const chat_message *src, kimi_err *err)
{
    chat_message *m = chat_append(c, src->role, src->content.s, src->content.len, err);
    if (!m)
        return err ? err->code : KIMI_ERR_NOMEM;
    int rc = chat_set_text(&m->other_role, src->other_role, err) ||
             chat_set_text(&m->name, src->name, err) ||
             chat_text_set(&m->reasoning, src->reasoning.s, src->reasoning.len, err) ||
             chat_set_text(&m->tool_call_id, src->tool_call_id, err);
    for (int i = 0; !rc && i < src->n_tool_calls; i++)
        rc = chat_add_tool_call(m, src->tool_calls[i].id, src->tool_calls[i].name,
                                src->tool_calls[i].arguments.s, src->tool_calls[i].arguments.len, err);
    if (rc) {
        chat_message_free(m);
        c->n_messages--;
        return err ? err->code : KIMI_ERR_NOMEM;
    }
    return 0;
}

const char *chat_role_text(const chat_message *m)
{
    switch (m->role) {
    case CHAT_ROLE_SYSTEM: return "system";
    case CHAT_ROLE_USER: return "user";
    case CHAT_ROLE_ASSISTANT: return "assistant";
    case CHAT_ROLE_TOOL: return "tool";
    case CHAT_ROLE_OTHER: return m->other_role ? m->other_role : "";
    }
    return "";
}

char *chat_tool_name_from_id(const char *id)
{
    if (!id)
        return dup_text("");
    size_t start = 0, end = strlen(id);
    while (start < end && strchr(" \t\r\n", id[start]))
        start++;
    while (end > start && strchr(" \t\r\n", id[end - 1]))
        end--;
    const char *first_colon = memchr(id + start, ':', end - start);
    size_t colon = first_colon ? (size_t)(first_colon - id) : end;
    if (colon == end && strspn(id + start, "0123456789") >= end - start)
        return dup_text("");  /* a bare counter names no function */
    size_t dot = start;
    for (size_t i = colon; i > start; i--)
        if (id[i - 1] == '.') {
            dot = i;
            break;
        }
    char *name = malloc(colon - dot + 1);
    if (name) {
        memcpy(name, id + dot, colon - dot);
        name[colon - dot] = 0;
    }
    return name;
}

/* ---- JSON form ---- */

/* An optional string field: absent or null leaves *out NULL. */
static int json_text_field(const json_t *obj, const char *key, char **out, const char *where,
                           kimi_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s.%s: not a string", where, key);
    return chat_set_text(out, json_string_value(v), err);
}

/* The same for a text that may hold NULs (JSON's \u0000 survives). */
static int json_long_text_field(const json_t *obj, const char *key, chat_text *out,
                                const char *where, kimi_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s.%s: not a string", where, key);
    return chat_text_set(out, json_string_value(v), json_string_length(v), err);
}

/* content: a string, null, or a list of text parts (concatenated, as the template prints them). */
static int json_content(const json_t *obj, chat_text *out, const char *where, kimi_err *err)
{
    const json_t *v = json_object_get(obj, "content");
    if (!json_is_array(v))
        return json_long_text_field(obj, "content", out, where, err);
    strbuf b = {0};
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *part = json_array_get(v, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        const json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !type || (text && !json_is_string(text))) {
            free(b.data);
            return kimi_fail(err, KIMI_ERR_INPUT, "%s.content[%zu]: not a {\"type\", \"text\"} part", where, i);
        }
        if (!strcmp(type, "image") || !strcmp(type, "image_url") || !strcmp(type, "video") ||
            !strcmp(type, "video_url")) {
            free(b.data);
            return kimi_fail(err, KIMI_ERR_INPUT, "%s.content[%zu]: %s parts are not supported (text only)", where, i, type);
        }
        if (text)
            strbuf_add(&b, json_string_value(text), json_string_length(text));
    }
    size_t len = b.len;
    char *joined = strbuf_take(&b);
    if (!joined)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s.content: out of memory", where);
    chat_text_free(out);
    *out = (chat_text){.s = joined, .len = len};
    return 0;
}

static int json_tool_calls(chat_message *m, const json_t *calls, const char *where, kimi_err *err)
{
    if (!calls || json_is_null(calls))
        return 0;
    if (!json_is_array(calls))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s.tool_calls: not a list", where);
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *call = json_array_get(calls, i);
        const json_t *function = json_object_get(call, "function");
        const json_t *id = json_object_get(call, "id"), *name = json_object_get(function, "name");
        const json_t *args = json_object_get(function, "arguments");
        if (!json_is_object(call) || !json_is_object(function))
            return kimi_fail(err, KIMI_ERR_INPUT, "%s.tool_calls[%zu]: not {id, type, function {name, arguments}}", where, i);
        if ((id && !json_is_string(id) && !json_is_null(id)) || (name && !json_is_string(name) && !json_is_null(name)))
            return kimi_fail(err, KIMI_ERR_INPUT, "%s.tool_calls[%zu]: id and function.name must be strings", where, i);
        if (!args)
            return kimi_fail(err, KIMI_ERR_INPUT, "%s.tool_calls[%zu].function.arguments: missing", where, i);
        strbuf b = {0};
        if (json_is_string(args))
            strbuf_add(&b, json_string_value(args), json_string_length(args));
        else
            pyformat_json_dump(&b, args, ", ", ": ", 0);
        size_t len = b.len;
        char *text = strbuf_take(&b);
        if (!text)
            return kimi_fail(err, KIMI_ERR_NOMEM, "%s.tool_calls[%zu]: out of memory", where, i);
        char *derived = json_string_value(name) ? NULL : chat_tool_name_from_id(json_string_value(id));
        int rc = chat_add_tool_call(m, json_string_value(id),
                                    derived ? derived : json_string_value(name), text, len, err);
        free(derived);
        free(text);
        if (rc)
            return rc;
    }
    return 0;
}

static chat_role role_from_text(const char *role)
{
    static const struct { const char *text; chat_role role; } roles[] = {
        {"system", CHAT_ROLE_SYSTEM}, {"user", CHAT_ROLE_USER},
        {"assistant", CHAT_ROLE_ASSISTANT}, {"tool", CHAT_ROLE_TOOL},
    };
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (!strcmp(roles[i].text, role))
            return roles[i].role;
    return CHAT_ROLE_OTHER;
}

int chat_message_from_json(chat_message *m, const json_t *obj, const char *where, kimi_err *err)
{
    *m = (chat_message){0};
    if (!json_is_object(obj))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: not an object", where);
    const char *role = json_string_value(json_object_get(obj, "role"));
    if (!role || !*role)
        return kimi_fail(err, KIMI_ERR_INPUT, "%s.role: missing or not a string", where);
    m->role = role_from_text(role);
    int rc = (m->role == CHAT_ROLE_OTHER && chat_set_text(&m->other_role, role, err)) ||
             json_text_field(obj, "name", &m->name, where, err) ||
             json_content(obj, &m->content, where, err) ||
             json_long_text_field(obj, "reasoning_content", &m->reasoning, where, err) ||
             json_text_field(obj, "tool_call_id", &m->tool_call_id, where, err) ||
             json_tool_calls(m, json_object_get(obj, "tool_calls"), where, err);
    if (rc) {
        chat_message_free(m);
        return err ? err->code : KIMI_ERR_INPUT;
    }
    return 0;
}

int chat_conversation_from_json(chat_conversation *c, const json_t *messages, kimi_err *err)
{
    if (!json_is_array(messages))
        return kimi_fail(err, KIMI_ERR_INPUT, "messages: not a list");
    for (size_t i = 0; i < json_array_size(messages); i++) {
        char where[32];
        snprintf(where, sizeof where, "messages[%zu]", i);
        chat_message *m = append_slot(c, err);
        if (!m)
            return err ? err->code : KIMI_ERR_NOMEM;
        if (chat_message_from_json(m, json_array_get(messages, i), where, err)) {
            c->n_messages--;
            return err ? err->code : KIMI_ERR_INPUT;
        }
    }
    return 0;
}

static int json_flag(const json_t *req, const char *key, int *out, kimi_err *err)
{
    const json_t *v = json_object_get(req, key);
    *out = 1;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: not true or false", key);
    *out = json_is_true(v);
    return 0;
}

int chat_request_from_json(const json_t *req, chat_conversation *c, chat_render_options *opt,
                           kimi_err *err)
{
    *opt = (chat_render_options){0};
    if (!json_is_object(req))
        return kimi_fail(err, KIMI_ERR_INPUT, "request: not a JSON object");
    const json_t *messages = json_object_get(req, "messages"), *tools = json_object_get(req, "tools");
    if (!messages)
        return kimi_fail(err, KIMI_ERR_INPUT, "messages: missing");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return kimi_fail(err, KIMI_ERR_INPUT, "tools: not a list");
    opt->tools = json_is_array(tools) ? tools : NULL;
    if (json_flag(req, "thinking", &opt->thinking, err) ||
        json_flag(req, "add_generation_prompt", &opt->add_generation_prompt, err))
        return err ? err->code : KIMI_ERR_INPUT;
    return chat_conversation_from_json(c, messages, err);
}

/* Set key to a string (or null when text is NULL and keep_null); returns -1 on failure. */
static int set_text(json_t *obj, const char *key, const char *text, int keep_null)
{
    if (!text && !keep_null)
        return 0;
    return json_object_set_new(obj, key, text ? json_string(text) : json_null());
}

static int set_long_text(json_t *obj, const char *key, const chat_text *t, int keep_null)
{
    if (!t->s && !keep_null)
        return 0;
    return json_object_set_new(obj, key, t->s ? json_stringn(t->s, t->len) : json_null());
}

json_t *chat_message_to_json(const chat_message *m)
{
    json_t *obj = json_object();
    if (!obj)
        return NULL;
    int bad = set_text(obj, "role", chat_role_text(m), 0) || set_long_text(obj, "content", &m->content, 1) ||
              set_text(obj, "name", m->name, 0) ||
              set_long_text(obj, "reasoning_content", &m->reasoning, 0) ||
              set_text(obj, "tool_call_id", m->tool_call_id, 0);
    if (!bad && m->n_tool_calls) {
        json_t *calls = json_array();
        bad = !calls || json_object_set_new(obj, "tool_calls", calls);
        for (int i = 0; !bad && i < m->n_tool_calls; i++) {
            const chat_tool_call *tc = &m->tool_calls[i];
            json_t *call = json_object(), *function = json_object();
            bad = !call || !function || set_text(call, "id", tc->id ? tc->id : "", 0) ||
                  set_text(call, "type", "function", 0) ||
                  set_text(function, "name", tc->name ? tc->name : "", 0) ||
                  json_object_set_new(function, "arguments", json_stringn(tc->arguments.s ? tc->arguments.s : "", tc->arguments.len));
            if (bad) {
                json_decref(call);
                json_decref(function);
                break;
            }
            bad = json_object_set_new(call, "function", function) || json_array_append_new(calls, call);
        }
    }
    if (bad) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

json_t *chat_conversation_to_json(const chat_conversation *c)
{
    json_t *list = json_array();
    for (int i = 0; list && i < c->n_messages; i++) {
        json_t *m = chat_message_to_json(&c->messages[i]);
        if (!m || json_array_append_new(list, m)) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

/* ---- rendering ---- */

enum {
    SP_IM_END, SP_IM_USER, SP_IM_ASSISTANT, SP_IM_SYSTEM, SP_IM_MIDDLE, SP_THINK, SP_THINK_END,
    SP_SECTION_BEGIN, SP_SECTION_END, SP_CALL_BEGIN, SP_CALL_ARGUMENT_BEGIN, SP_CALL_END, N_SP
};

static const char *const special_names[N_SP] = {
    "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>", "<think>",
    "</think>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
    "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
};

typedef struct {
    const tokenizer *tok;        /* NULL: text only */
    int32_t special_ids[N_SP];
    strbuf text;                 /* the whole rendering, specials spelled out */
    size_t run_start;            /* offset in text of the plain-text run since the last special */
    int32_t *ids;                /* [n_ids] */
    size_t n_ids, cap_ids;
    kimi_err *err;
    int rc;
} renderer;

static int push_ids(renderer *r, const int32_t *ids, size_t n)
{
    if (n > SIZE_MAX / sizeof *r->ids - r->n_ids)
        return r->rc = kimi_fail(r->err, KIMI_ERR_NOMEM, "render: too many tokens");
    if (array_reserve(&r->ids, &r->cap_ids, r->n_ids + n, sizeof *r->ids))
        return r->rc = kimi_fail(r->err, KIMI_ERR_NOMEM, "render: out of memory");
    memcpy(r->ids + r->n_ids, ids, n * sizeof *ids);
    r->n_ids += n;
    return 0;
}

/* Encode the run of plain text since the last special as one piece, specials not allowed. */
static void flush_run(renderer *r)
{
    size_t len = r->text.len - r->run_start;
    if (r->rc || !r->tok || r->text.failed || !len)
        return;
    int32_t *ids = NULL;
    size_t n = 0;
    r->rc = tokenizer_encode(r->tok, r->text.data + r->run_start, len, 0, &ids, &n, r->err);
    if (!r->rc)
        push_ids(r, ids, n);
    free(ids);
}

static void emit_special(renderer *r, int which)
{
    flush_run(r);
    if (r->rc)
        return;
    strbuf_str(&r->text, special_names[which]);
    r->run_start = r->text.len;
    if (r->tok)
        push_ids(r, &r->special_ids[which], 1);
}

static void emit_text(renderer *r, const char *text)
{
    if (text)
        strbuf_str(&r->text, text);
}

static void emit_long_text(renderer *r, const chat_text *t)
{
    strbuf_add(&r->text, t->s ? t->s : "", t->len);
}

static void render_tool_calls(renderer *r, const chat_message *m)
{
    emit_special(r, SP_SECTION_BEGIN);
    for (int i = 0; i < m->n_tool_calls; i++) {
        emit_special(r, SP_CALL_BEGIN);
        emit_text(r, m->tool_calls[i].id);
        emit_special(r, SP_CALL_ARGUMENT_BEGIN);
        emit_long_text(r, &m->tool_calls[i].arguments);
        emit_special(r, SP_CALL_END);
    }
    emit_special(r, SP_SECTION_END);
}

/* keep_reasoning: the message is after the last assistant answer without tool calls and
 * thinking is on. */
static void render_message(renderer *r, const chat_message *m, int keep_reasoning)
{
    int header = m->role == CHAT_ROLE_USER ? SP_IM_USER
               : m->role == CHAT_ROLE_ASSISTANT ? SP_IM_ASSISTANT : SP_IM_SYSTEM;
    emit_special(r, header);
    emit_text(r, m->name && *m->name ? m->name : chat_role_text(m));
    emit_special(r, SP_IM_MIDDLE);
    if (m->role == CHAT_ROLE_ASSISTANT) {
        emit_special(r, SP_THINK);
        if (keep_reasoning)
            emit_long_text(r, &m->reasoning);
        emit_special(r, SP_THINK_END);
        emit_long_text(r, &m->content);
        if (m->n_tool_calls)
            render_tool_calls(r, m);
    } else if (m->role == CHAT_ROLE_TOOL) {
        emit_text(r, "## Return of ");
        emit_text(r, m->tool_call_id);
        emit_text(r, "\n");
        emit_long_text(r, &m->content);
    } else {
        emit_long_text(r, &m->content);
    }
    emit_special(r, SP_IM_END);
}

int chat_render(const tokenizer *tok, const chat_conversation *c, const chat_render_options *opt,
                chat_rendering *out, kimi_err *err)
{
    *out = (chat_rendering){0};
    renderer r = {.tok = tok, .err = err};
    for (int i = 0; tok && i < N_SP; i++)
        if ((r.special_ids[i] = tokenizer_special_id(tok, special_names[i])) < 0)
            return kimi_fail(err, KIMI_ERR_MODEL, "tokenizer: no special token %s", special_names[i]);
    if (opt->tools && !json_is_array(opt->tools) && !json_is_null(opt->tools))
        return kimi_fail(err, KIMI_ERR_INPUT, "tools: not a list");
    if (json_array_size(opt->tools)) {
        char *declaration;
        if (tool_declaration_render(opt->tools, &declaration, out->tools_note,
                                   sizeof out->tools_note, err))
            return err ? err->code : KIMI_ERR_INPUT;
        emit_special(&r, SP_IM_SYSTEM);
        emit_text(&r, "tool_declare");
        emit_special(&r, SP_IM_MIDDLE);
        emit_text(&r, declaration);
        emit_special(&r, SP_IM_END);
        free(declaration);
    }
    int last_answer = -1;  /* the last assistant message without tool calls */
    for (int i = c->n_messages - 1; i >= 0 && last_answer < 0; i--)
        if (c->messages[i].role == CHAT_ROLE_ASSISTANT && c->messages[i].n_tool_calls == 0)
            last_answer = i;
    for (int i = 0; i < c->n_messages && !r.rc; i++)
        render_message(&r, &c->messages[i], i > last_answer && opt->thinking);
    if (opt->add_generation_prompt) {
        emit_special(&r, SP_IM_ASSISTANT);
        emit_text(&r, "assistant");
        emit_special(&r, SP_IM_MIDDLE);
        emit_special(&r, SP_THINK);
        if (!opt->thinking)
            emit_special(&r, SP_THINK_END);
    }
    flush_run(&r);
    if (!r.rc && r.text.failed)
        r.rc = kimi_fail(err, KIMI_ERR_NOMEM, "render: out of memory");
    if (r.rc) {
        free(r.text.data);
        free(r.ids);
        return r.rc;
    }
    out->text = strbuf_take(&r.text);
    out->text_len = r.text.len;
    out->ids = r.ids;
    out->n_ids = r.n_ids;
    if (!out->text) {
        free(r.ids);
        *out = (chat_rendering){0};
        return kimi_fail(err, KIMI_ERR_NOMEM, "render: out of memory");
    }
    return 0;
}

void chat_rendering_free(chat_rendering *r)
{
    free(r->text);
    free(r->ids);
    *r = (chat_rendering){0};
}
