/* session_samples: the conversations the session tests build (test_session, the jinja2 check's
 * dump): everything a transcript can hold, and the shapes the template's history rule tells
 * apart. */
#ifndef KIMI_SESSION_SAMPLES_H
#define KIMI_SESSION_SAMPLES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/chat/session.h"

static inline chat_message *add(session *s, chat_role role, const char *content, size_t len)
{
    chat_message m = {.role = role};
    kimi_err err = {0};
    if (content)
        chat_text_set(&m.content, content, len, &err);
    if (session_append(s, &m, NULL, &err)) {
        fprintf(stderr, "session sample: %s\n", err.msg);
        abort();
    }
    chat_message_free(&m);
    return &s->conv.messages[s->conv.n_messages - 1];
}

#define ADD(s, role, lit) add(s, role, lit, sizeof lit - 1)

static inline session_message_meta *meta_of(session *s) { return &s->meta[s->conv.n_messages - 1]; }

static inline void set_stats(session_message_meta *m, int generated, double tok_s, const char *stop)
{
    m->has_stats = 1;
    m->prompt_tokens = 120;
    m->reused_tokens = 100;
    m->generated_tokens = generated;
    m->ttft_seconds = 0.123456789012345;
    m->prefill_tok_s = 1234.5;
    m->decode_tok_s = tok_s;
    m->reasoning_seconds = 6.1;
    m->reasoning_tokens = 412;
    m->stop_reason = strdup(stop);
    m->n_ids = 5;
    m->ids = malloc(5 * sizeof *m->ids);
    int32_t ids[5] = {0, 7, 163586, 2147483647, 42};
    memcpy(m->ids, ids, sizeof ids);
}

static inline void set_tool(session_message_meta *m, const char *state, int exit_status, double seconds)
{
    m->tool_state = strdup(state);
    m->exit_status = exit_status;
    m->tool_seconds = seconds;
}

/* A conversation with everything: system prompt, unicode, NUL bytes, special-token text, reasoning,
 * two tool calls, their results, and a final answer. */
static inline void rich_session(session *s)
{
    kimi_err err = {0};
    session_init(s);
    s->model = strdup("Kimi-K2.5-NVFP4");
    s->backend = strdup("cuda TP=8");
    s->created = 1796125203;  /* 2026-12-01T11:40:03Z */
    s->settings = (session_settings){.temperature = 0.6f, .top_p = 0.95f, .top_k = 40, .max_tokens = 4096,
                                     .seed = UINT64_MAX, .thinking = 1};
    ADD(s, CHAT_ROLE_SYSTEM, "You are Kimi. Answer in <|im_end|> plain text.");
    ADD(s, CHAT_ROLE_USER, "Héllo 世界 😀, what time is it?\nSecond line with a NUL: [\0] and `code`.");
    chat_message *a = ADD(s, CHAT_ROLE_ASSISTANT, "");
    chat_text_set(&a->reasoning, "The user wants the time.\0 I will call now.", 42, &err);
    chat_add_tool_call(a, "functions.now:0", "now", "{\"tz\": \"UTC\"}", strlen("{\"tz\": \"UTC\"}"), &err);
    chat_add_tool_call(a, "functions.word_count:1", "word_count", "{\"text\": \"a ``` b\\u0000\"}",
                       strlen("{\"text\": \"a ``` b\\u0000\"}"), &err);
    set_stats(meta_of(s), 38, 52.1234, "tool calls");
    chat_message *t = ADD(s, CHAT_ROLE_TOOL, "Tue Dec  1 11:40:03 UTC 2026\n");
    chat_set_text(&t->tool_call_id, "functions.now:0", &err);
    set_tool(meta_of(s), "done", 0, 0.3);
    t = ADD(s, CHAT_ROLE_TOOL, "```\nfenced <|im_end|> output\n````\n\0tail");
    chat_set_text(&t->tool_call_id, "functions.word_count:1", &err);
    set_tool(meta_of(s), "done", 1, 0.25);
    a = ADD(s, CHAT_ROLE_ASSISTANT, "It is 11:40 UTC. <|im_end|><|im_user|> not special.");
    chat_text_set(&a->reasoning, "Now answer: 中文 reasoning.", strlen("Now answer: 中文 reasoning."), &err);
    set_stats(meta_of(s), 38, 52.1, "end of turn");
    ADD(s, CHAT_ROLE_USER, "Thanks \0!");
    if (err.code) {
        fprintf(stderr, "session sample: %s\n", err.msg);
        abort();
    }
}

enum { SAMPLE_SHAPES = 5 };

/* Shape 0: one plain answer; 1: then a tool call; 2: its result; 3: a final answer after it;
 * 4: then a message of another role with a name. Reasoning on every answer, so the history
 * rule (reasoning dropped up to the last answer without tool calls) shows in each. */
static inline void sample_shape(session *s, int shape)
{
    kimi_err err = {0};
    session_init(s);
    s->settings.thinking = shape % 2 == 0;
    ADD(s, CHAT_ROLE_USER, "q1");
    chat_message *a = ADD(s, CHAT_ROLE_ASSISTANT, "a1");
    chat_text_set(&a->reasoning, "r1", 2, &err);
    if (shape >= 1) {
        ADD(s, CHAT_ROLE_USER, "q2 \xF0\x9F\x98\x80");
        a = add(s, CHAT_ROLE_ASSISTANT, NULL, 0);
        chat_text_set(&a->reasoning, "r2", 2, &err);
        chat_add_tool_call(a, "functions.f:0", "f", "{}", 2, &err);
    }
    if (shape >= 2) {
        chat_message *t = ADD(s, CHAT_ROLE_TOOL, "ok");
        chat_set_text(&t->tool_call_id, "functions.f:0", &err);
    }
    if (shape >= 3) {
        a = ADD(s, CHAT_ROLE_ASSISTANT, "final");
        chat_text_set(&a->reasoning, "r3", 2, &err);
    }
    if (shape >= 4) {
        chat_message *o = ADD(s, CHAT_ROLE_OTHER, "dev note");
        chat_set_text(&o->other_role, "developer", &err);
        chat_set_text(&o->name, "ops", &err);
    }
    if (err.code) {
        fprintf(stderr, "session sample: %s\n", err.msg);
        abort();
    }
}

#endif
