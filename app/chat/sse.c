/* sse: server-sent events framing, one byte at a time in effect, whatever the chunking. */
#include "app/chat/sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/array.h"

enum { SSE_DEFAULT_MAX = 16 << 20, SSE_TYPE_MAX = 64 };

static const char bom[] = "\xEF\xBB\xBF";

struct sse_parser {
    size_t max_bytes;
    char *line;                 /* [line_len + 1], the line read so far */
    size_t line_len, line_cap;
    char *data;                 /* [data_len + 1], the event's data lines, each followed by \n */
    size_t data_len, data_cap;
    int has_data;               /* a data field came (possibly empty) */
    char type[SSE_TYPE_MAX];    /* the last event field, cut to fit */
    int cr_pending;             /* the last byte was a CR: an LF next belongs to it */
    int bom_matched;            /* bytes of the byte-order mark matched at the start so far */
    int bom_done;
    int failed;
};

int sse_create(sse_parser **out, size_t max_event_bytes, kimi_err *err)
{
    sse_parser *p = calloc(1, sizeof *p);
    if (!p)
        return kimi_fail(err, KIMI_ERR_NOMEM, "event stream: out of memory");
    p->max_bytes = max_event_bytes ? max_event_bytes : SSE_DEFAULT_MAX;
    *out = p;
    return 0;
}

void sse_free(sse_parser *p)
{
    if (!p)
        return;
    free(p->line);
    free(p->data);
    free(p);
}

static int fail(sse_parser *p, kimi_err *err, int code, const char *what)
{
    p->failed = 1;
    return kimi_fail(err, code, "event stream: %s", what), -1;
}

static int append(sse_parser *p, char **buf, size_t *len, size_t *cap, const char *s, size_t n,
                  kimi_err *err)
{
    if (n > p->max_bytes - *len)
        return fail(p, err, KIMI_ERR_INPUT, "a line or event longer than the limit");
    if (text_append(buf, len, cap, s, n))
        return fail(p, err, KIMI_ERR_NOMEM, "out of memory");
    return 0;
}

static int dispatch(sse_parser *p, sse_event_fn on_event, void *user)
{
    int has_data = p->has_data;
    p->has_data = 0;
    if (!has_data) {
        p->type[0] = 0;
        p->data_len = 0;
        return 0;
    }
    size_t len = p->data_len ? p->data_len - 1 : 0;   /* the last line's \n goes */
    p->data_len = 0;
    p->data[len] = 0;   /* has_data: at least the \n was stored */
    char type[SSE_TYPE_MAX];
    snprintf(type, sizeof type, "%s", p->type[0] ? p->type : "message");
    p->type[0] = 0;
    return on_event(user, type, p->data, len);
}

static int process_line(sse_parser *p, sse_event_fn on_event, void *user, kimi_err *err)
{
    const char *line = p->line ? p->line : "";
    size_t len = p->line_len;
    p->line_len = 0;
    if (len == 0)
        return dispatch(p, on_event, user);
    if (line[0] == ':')
        return 0;
    const char *colon = memchr(line, ':', len);
    size_t name_len = colon ? (size_t)(colon - line) : len;
    const char *value = colon ? colon + 1 : line + len;
    size_t value_len = (size_t)(line + len - value);
    if (value_len && value[0] == ' ') {
        value++;
        value_len--;
    }
    if (name_len == 4 && !memcmp(line, "data", 4)) {
        p->has_data = 1;
        if (append(p, &p->data, &p->data_len, &p->data_cap, value, value_len, err) ||
            append(p, &p->data, &p->data_len, &p->data_cap, "\n", 1, err))
            return -1;
    } else if (name_len == 5 && !memcmp(line, "event", 5)) {
        size_t n = value_len < SSE_TYPE_MAX - 1 ? value_len : SSE_TYPE_MAX - 1;
        memcpy(p->type, value, n);
        p->type[n] = 0;
    }
    return 0;
}

/* Bytes after the byte-order mark check: split into lines. */
static int feed_lines(sse_parser *p, const char *s, size_t n, sse_event_fn on_event, void *user,
                      kimi_err *err)
{
    size_t i = 0;
    if (p->cr_pending && n) {
        p->cr_pending = 0;
        if (s[0] == '\n')
            i = 1;
    }
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != '\n' && s[j] != '\r')
            j++;
        if (j > i && append(p, &p->line, &p->line_len, &p->line_cap, s + i, j - i, err))
            return -1;
        if (j == n)
            break;
        if (s[j] == '\r') {
            if (j + 1 < n) {
                if (s[j + 1] == '\n')
                    j++;
            } else {
                p->cr_pending = 1;
            }
        }
        i = j + 1;
        int rc = process_line(p, on_event, user, err);
        if (rc)
            return rc;
    }
    return 0;
}

int sse_feed(sse_parser *p, const char *bytes, size_t n, sse_event_fn on_event, void *user,
             kimi_err *err)
{
    if (p->failed)
        return kimi_fail(err, KIMI_ERR_STATE, "event stream: fed after a failure"), -1;
    size_t i = 0;
    while (!p->bom_done && i < n) {
        if (bytes[i] == bom[p->bom_matched]) {
            i++;
            if (++p->bom_matched == 3)
                p->bom_done = 1;
            continue;
        }
        p->bom_done = 1;   /* not a mark: the part that matched was text */
        int rc = feed_lines(p, bom, (size_t)p->bom_matched, on_event, user, err);
        if (rc)
            return rc;
    }
    return feed_lines(p, bytes + i, n - i, on_event, user, err);
}

int sse_end(sse_parser *p, sse_event_fn on_event, void *user, kimi_err *err)
{
    if (p->failed)
        return kimi_fail(err, KIMI_ERR_STATE, "event stream: ended after a failure"), -1;
    if (!p->bom_done && p->bom_matched) {
        p->bom_done = 1;
        int rc = feed_lines(p, bom, (size_t)p->bom_matched, on_event, user, err);
        if (rc)
            return rc;
    }
    p->line_len = 0;
    p->cr_pending = 0;
    return dispatch(p, on_event, user);
}
