/* session_durability: the sessions the durability test's writer saves, one per generation g,
 * and the check that a file holds exactly one of them whole. Generation g has g % 48 + 1
 * messages whose text and ids are functions of (g, i), so a torn or mixed file cannot pass. */
#ifndef KIMI_SESSION_DURABILITY_H
#define KIMI_SESSION_DURABILITY_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/chat/session.h"

enum { DURABILITY_CYCLE = 48 };

static inline size_t durability_text(uint64_t g, int i, char *buf, size_t size)
{
    size_t len = 200 + (size_t)((g * 7 + (uint64_t)i * 13) % 1800);
    if (len >= size)
        len = size - 1;
    int head = snprintf(buf, size, "generation %llu message %d:", (unsigned long long)g, i);
    for (size_t k = (size_t)head; k < len; k++)
        buf[k] = (char)('a' + (g + (uint64_t)i + k) % 26);
    buf[len] = 0;
    return len;
}

static inline size_t durability_n_ids(uint64_t g, int i) { return (size_t)((g + (uint64_t)i) % 64); }

static inline int32_t durability_id(uint64_t g, int i, size_t k)
{
    return (int32_t)((g * 1000 + (uint64_t)i * 64 + k) % 163840);
}

/* The session of generation g, built fresh. 0, or -1 with err set. */
static inline int durability_session(session *s, uint64_t g, kimi_err *err)
{
    char text[2048];
    int32_t ids[64];
    session_init(s);
    s->settings.seed = g;
    s->model = strdup("durability");
    for (int i = 0; i < (int)(g % DURABILITY_CYCLE) + 1; i++) {
        chat_message m = {.role = i % 2 ? CHAT_ROLE_ASSISTANT : CHAT_ROLE_USER};
        session_message_meta meta = {0};
        size_t len = durability_text(g, i, text, sizeof text);
        m.content = (chat_text){.s = text, .len = len};
        meta.n_ids = m.role == CHAT_ROLE_ASSISTANT ? durability_n_ids(g, i) : 0;
        for (size_t k = 0; k < meta.n_ids; k++)
            ids[k] = durability_id(g, i, k);
        meta.ids = meta.n_ids ? ids : NULL;
        if (session_append(s, &m, &meta, err))
            return -1;
    }
    return 0;
}

/* Whether s is generation s->settings.seed whole; why says what differs when it is not. */
static inline int durability_check(const session *s, char *why, size_t size)
{
    char text[2048];
    uint64_t g = s->settings.seed;
    int n = (int)(g % DURABILITY_CYCLE) + 1;
    if (s->conv.n_messages != n) {
        snprintf(why, size, "generation %llu has %d messages, not %d", (unsigned long long)g, s->conv.n_messages, n);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const chat_message *m = &s->conv.messages[i];
        const session_message_meta *meta = &s->meta[i];
        size_t len = durability_text(g, i, text, sizeof text);
        size_t n_ids = i % 2 ? durability_n_ids(g, i) : 0;
        int ok = m->content.len == len && !memcmp(m->content.s, text, len) && meta->n_ids == n_ids;
        for (size_t k = 0; ok && k < n_ids; k++)
            ok = meta->ids[k] == durability_id(g, i, k);
        if (!ok) {
            snprintf(why, size, "generation %llu: message %d differs", (unsigned long long)g, i);
            return 0;
        }
    }
    return 1;
}

#endif
