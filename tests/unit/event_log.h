/* event_log: parse events written down one a line ("C|text", "I|0|id|name", "S|end_of_turn"),
 * so a test compares a whole turn with one expected string; each event's well-formedness
 * (NUL-terminated text of len bytes, whole UTF-8, one line for notes) is checked on the way. */
#ifndef KIMI_TEST_EVENT_LOG_H
#define KIMI_TEST_EVENT_LOG_H

#include <stdio.h>
#include <string.h>

#include "engine/base/array.h"
#include "engine/text/parse.h"
#include "engine/text/utf8.h"

typedef struct {
    strbuf text;
    int bad;            /* events that broke the rules */
    int stops;
} event_log;

static const char *event_log_stop_name(parse_stop_reason r)
{
    static const char *const names[] = {"end_of_turn", "eos", "max_tokens",
                                        "max_tokens_while_thinking", "cancelled",
                                        "context_full", "error"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

static void event_log_add(event_log *l, const parse_event *ev)
{
    char head[64];
    if (!ev->text || ev->text[ev->len] != 0 || !utf8_is_valid((const uint8_t *)ev->text, ev->len) ||
        !ev->name || l->stops)
        l->bad++;
    switch (ev->kind) {
    case PARSE_REASONING_TEXT: strbuf_str(&l->text, "R|"); break;
    case PARSE_CONTENT_TEXT: strbuf_str(&l->text, "C|"); break;
    case PARSE_TOOL_CALL_BEGIN:
        snprintf(head, sizeof head, "B|%d", ev->call);
        strbuf_str(&l->text, head);
        break;
    case PARSE_TOOL_CALL_ID:
        snprintf(head, sizeof head, "I|%d|", ev->call);
        strbuf_str(&l->text, head);
        break;
    case PARSE_TOOL_CALL_ARGS:
        snprintf(head, sizeof head, "A|%d|", ev->call);
        strbuf_str(&l->text, head);
        break;
    case PARSE_TOOL_CALL_END:
        snprintf(head, sizeof head, "E|%d|%s", ev->call, ev->valid ? "valid" : "invalid|");
        strbuf_str(&l->text, head);
        if (ev->valid != (ev->len == 0))
            l->bad++;
        break;
    case PARSE_NOTE:
        strbuf_str(&l->text, "N|");
        if (!ev->len || memchr(ev->text, '\n', ev->len))
            l->bad++;
        break;
    case PARSE_STOP:
        strbuf_str(&l->text, "S|");
        strbuf_str(&l->text, event_log_stop_name(ev->stop));
        l->stops++;
        break;
    }
    if (ev->kind != PARSE_TOOL_CALL_BEGIN && ev->kind != PARSE_STOP)
        strbuf_add(&l->text, ev->text ? ev->text : "", ev->text ? ev->len : 0);
    if (ev->kind == PARSE_TOOL_CALL_ID) {
        strbuf_str(&l->text, "|");
        strbuf_str(&l->text, ev->name ? ev->name : "");
    }
    strbuf_str(&l->text, "\n");
}

static const char *event_log_text(const event_log *l)
{
    return l->text.data ? l->text.data : "";
}

static void event_log_reset(event_log *l)
{
    free(l->text.data);
    *l = (event_log){0};
}

#endif
