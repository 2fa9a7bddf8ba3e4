/* session: one conversation with what kimi-chat knows of each message, its JSON file (pretty,
 * written atomically, loaded back with errors that name the file and the JSON path), the
 * Markdown export and the sessions folder. */
#include "app/chat/session.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/array.h"
#include "engine/base/file_io.h"
#include "engine/text/utf8.h"

static char *dup_str(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---- the session in memory ---- */

void session_init(session *s)
{
    *s = (session){0};
    chat_conversation_init(&s->conv);
    s->settings = (session_settings){.temperature = 1.0f, .top_p = 0.95f, .thinking = 1};
}

void session_meta_free(session_message_meta *m)
{
    free(m->stop_reason);
    free(m->ids);
    free(m->tool_state);
    *m = (session_message_meta){0};
}

void session_truncate(session *s, int n)
{
    if (n < 0)
        n = 0;
    for (int i = n; i < s->conv.n_messages && i < s->cap_meta; i++)
        session_meta_free(&s->meta[i]);
    chat_conversation_truncate(&s->conv, n);
}

void session_free(session *s)
{
    session_truncate(s, 0);
    chat_conversation_free(&s->conv);
    free(s->meta);
    free(s->model);
    free(s->backend);
    free(s->path);
    session_init(s);
}

/* Room for n meta entries; entries past the messages are kept zeroed. */
static int reserve_meta(session *s, int n, kimi_err *err)
{
    if (n <= s->cap_meta)
        return 0;
    if (n > (1 << 24))
        return kimi_fail(err, KIMI_ERR_NOMEM, "session: too many messages");
    int cap = s->cap_meta ? s->cap_meta : 16;
    while (cap < n)
        cap *= 2;
    session_message_meta *grown = realloc(s->meta, (size_t)cap * sizeof *grown);
    if (!grown)
        return kimi_fail(err, KIMI_ERR_NOMEM, "session: out of memory");
    memset(grown + s->cap_meta, 0, (size_t)(cap - s->cap_meta) * sizeof *grown);
    s->meta = grown;
    s->cap_meta = cap;
    return 0;
}

static int meta_copy(session_message_meta *dst, const session_message_meta *src, kimi_err *err)
{
    *dst = *src;
    dst->stop_reason = dst->tool_state = NULL;
    dst->ids = NULL;
    dst->n_ids = 0;
    int bad = (src->stop_reason && !(dst->stop_reason = dup_str(src->stop_reason))) ||
              (src->tool_state && !(dst->tool_state = dup_str(src->tool_state)));
    if (!bad && src->ids && src->n_ids) {
        if (src->n_ids > SIZE_MAX / sizeof *src->ids || !(dst->ids = malloc(src->n_ids * sizeof *src->ids)))
            bad = 1;
        else {
            memcpy(dst->ids, src->ids, src->n_ids * sizeof *src->ids);
            dst->n_ids = src->n_ids;
        }
    }
    if (bad) {
        session_meta_free(dst);
        return kimi_fail(err, KIMI_ERR_NOMEM, "session: out of memory");
    }
    return 0;
}

int session_append(session *s, const chat_message *m, const session_message_meta *meta,
                   kimi_err *err)
{
    int n = s->conv.n_messages;
    session_message_meta copy = {0};
    if (reserve_meta(s, n + 1, err) || (meta && meta_copy(&copy, meta, err)))
        return err ? err->code : KIMI_ERR_NOMEM;
    if (chat_append_copy(&s->conv, m, err)) {
        session_meta_free(&copy);
        return err ? err->code : KIMI_ERR_NOMEM;
    }
    s->meta[n] = copy;
    return 0;
}

/* The meta of message i, or NULL when the caller grew conv without session_append. */
static const session_message_meta *meta_at(const session *s, int i)
{
    return s->meta && i < s->cap_meta ? &s->meta[i] : NULL;
}

/* ---- numbers and text as the files write them ---- */

/* printf of a number with '.' as the decimal point whatever LC_NUMERIC says (a curses program
 * sets the locale from the environment, and "0,6" is not JSON). */
static void format_number(char *buf, size_t size, const char *fmt, int precision, double v)
{
    snprintf(buf, size, fmt, precision, v);
    const char *point = localeconv()->decimal_point;
    if (point && point[0] && strcmp(point, ".")) {
        char *at = strstr(buf, point);
        if (at) {
            size_t plen = strlen(point);
            *at = '.';
            memmove(at + 1, at + plen, strlen(at + plen) + 1);
        }
    }
}

/* The shortest %g text that reads back as exactly v (as a double, or as a float when
 * as_float): 0.6f is written 0.6, not 0.60000002384185791. */
static int shortest_precision(double v, int as_float)
{
    int max = as_float ? 9 : 17, p = 1;
    for (; p < max; p++) {
        char local[512];  /* %g and %f of any double fit */
        snprintf(local, sizeof local, "%.*g", p, v);
        if (as_float ? strtof(local, NULL) == (float)v : strtod(local, NULL) == v)
            break;
    }
    return p;
}

static void shortest_number(char *buf, size_t size, double v, int as_float)
{
    format_number(buf, size, "%.*g", shortest_precision(v, as_float), v);
}

/* A float setting as the double its shortest decimal names, so that the JSON shows 0.6. */
static double float_as_decimal(float f)
{
    char local[512];  /* %g and %f of any double fit */
    snprintf(local, sizeof local, "%.*g", shortest_precision(f, 1), (double)f);
    return strtod(local, NULL);
}

/* A JSON string of s[0..len); ill-formed UTF-8 becomes U+FFFD, as the tokenizer reads it. */
static json_t *json_text(const char *s, size_t len)
{
    if (!s)
        return json_null();
    if (utf8_is_valid((const uint8_t *)s, len))
        return json_stringn(s, len);
    if (len > (SIZE_MAX - 1) / 3)
        return NULL;
    char *clean = malloc(3 * len + 1);
    if (!clean)
        return NULL;
    size_t n = utf8_replace_ill_formed((const uint8_t *)s, len, (uint8_t *)clean);
    json_t *v = json_stringn(clean, n);
    free(clean);
    return v;
}

static int format_utc(time_t t, const char *fmt, char *buf, size_t size)
{
    struct tm tm;
    if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 < 1 || tm.tm_year + 1900 > 9999)
        return -1;
    return strftime(buf, size, fmt, &tm) ? 0 : -1;
}

/* ---- JSON form: writing ---- */

static void put(json_t *obj, const char *key, json_t *v, int *bad)
{
    if (json_object_set_new(obj, key, v))  /* a NULL v fails too; a failed set frees v */
        *bad = 1;
}

static json_t *json_finite(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* Stats are counts and durations: what the reader takes back is >= 0 and finite, and any other
 * (a server that reports none, a clock that stepped, a rate over no time) is written as
 * unknown, 0, so that every file written loads back as it was written. */
static json_t *json_count(int v)
{
    return json_integer(v > 0 ? v : 0);
}

static json_t *json_duration(double v)
{
    return json_real(isfinite(v) && v > 0 ? v : 0);
}

static json_t *meta_to_json(const session_message_meta *m)
{
    if (!m || (!m->has_stats && !m->n_ids && !m->tool_state && !m->summary))
        return json_null();
    json_t *obj = json_object();
    if (!obj)
        return NULL;
    int bad = 0;
    if (m->has_stats) {
        json_t *st = json_object();
        if (st) {
            put(st, "prompt_tokens", json_count(m->prompt_tokens), &bad);
            put(st, "reused_tokens", json_count(m->reused_tokens), &bad);
            put(st, "generated_tokens", json_count(m->generated_tokens), &bad);
            put(st, "ttft_s", json_duration(m->ttft_seconds), &bad);
            put(st, "prefill_tok_s", json_duration(m->prefill_tok_s), &bad);
            put(st, "decode_tok_s", json_duration(m->decode_tok_s), &bad);
            put(st, "reasoning_s", json_duration(m->reasoning_seconds), &bad);
            put(st, "reasoning_tokens", json_count(m->reasoning_tokens), &bad);
            put(st, "stop_reason", json_text(m->stop_reason, m->stop_reason ? strlen(m->stop_reason) : 0), &bad);
        }
        put(obj, "stats", st, &bad);
    }
    if (m->n_ids && m->ids) {
        json_t *ids = json_array();
        for (size_t i = 0; ids && i < m->n_ids && !bad; i++)
            if (json_array_append_new(ids, json_integer(m->ids[i])))
                bad = 1;
        put(obj, "ids", ids, &bad);
    }
    if (m->tool_state) {
        json_t *tool = json_object();
        if (tool) {
            put(tool, "state", json_text(m->tool_state, strlen(m->tool_state)), &bad);
            put(tool, "exit_status", json_integer(m->exit_status), &bad);
            put(tool, "seconds", json_duration(m->tool_seconds), &bad);
        }
        put(obj, "tool", tool, &bad);
    }
    if (m->summary)
        put(obj, "summary", json_true(), &bad);
    if (bad) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

static void sanitize_text(chat_text *t, int *bad)
{
    if (!t->s || utf8_is_valid((const uint8_t *)t->s, t->len))
        return;
    char *clean = t->len <= (SIZE_MAX - 1) / 3 ? malloc(3 * t->len + 1) : NULL;
    if (!clean) {
        *bad = 1;
        return;
    }
    size_t n = utf8_replace_ill_formed((const uint8_t *)t->s, t->len, (uint8_t *)clean);
    clean[n] = 0;
    free(t->s);
    *t = (chat_text){.s = clean, .len = n};
}

static void sanitize_string(char **s, int *bad)
{
    if (!*s)
        return;
    chat_text t = {.s = *s, .len = strlen(*s)};
    sanitize_text(&t, bad);
    *s = t.s;
}

/* chat_message_to_json, with ill-formed UTF-8 (which JSON cannot hold) replaced in a copy. */
static json_t *message_to_json(const chat_message *m)
{
    json_t *obj = chat_message_to_json(m);
    if (obj)
        return obj;
    chat_conversation tmp;
    chat_conversation_init(&tmp);
    if (chat_append_copy(&tmp, m, NULL))
        return NULL;
    chat_message *c = &tmp.messages[0];
    int bad = 0;
    sanitize_string(&c->other_role, &bad);
    sanitize_string(&c->name, &bad);
    sanitize_text(&c->content, &bad);
    sanitize_text(&c->reasoning, &bad);
    sanitize_string(&c->tool_call_id, &bad);
    for (int i = 0; i < c->n_tool_calls; i++) {
        sanitize_string(&c->tool_calls[i].id, &bad);
        sanitize_string(&c->tool_calls[i].name, &bad);
        sanitize_text(&c->tool_calls[i].arguments, &bad);
    }
    obj = bad ? NULL : chat_message_to_json(c);
    chat_conversation_free(&tmp);
    return obj;
}

json_t *session_to_json(const session *s)
{
    json_t *root = json_object(), *meta = json_object(), *settings = json_object();
    json_t *metas = json_array(), *messages = json_array();
    if (!root || !meta || !settings || !metas || !messages) {
        json_decref(root);
        json_decref(meta);
        json_decref(settings);
        json_decref(metas);
        json_decref(messages);
        return NULL;
    }
    int bad = 0;
    char seed[24], created[32];
    snprintf(seed, sizeof seed, "%" PRIu64, s->settings.seed);
    put(settings, "temperature", json_finite(float_as_decimal(s->settings.temperature)), &bad);
    put(settings, "top_p", json_finite(float_as_decimal(s->settings.top_p)), &bad);
    put(settings, "top_k", json_integer(s->settings.top_k), &bad);
    put(settings, "max_tokens", json_integer(s->settings.max_tokens), &bad);
    put(settings, "seed", json_string(seed), &bad);
    put(settings, "thinking", json_boolean(s->settings.thinking), &bad);

    for (int i = 0; i < s->conv.n_messages && !bad; i++) {
        if (json_array_append_new(metas, meta_to_json(meta_at(s, i))) ||
            json_array_append_new(messages, message_to_json(&s->conv.messages[i])))
            bad = 1;
    }

    put(meta, "format", json_string("kimi-chat-session"), &bad);
    put(meta, "version", json_integer(SESSION_FORMAT_VERSION), &bad);
    put(meta, "model", json_text(s->model, s->model ? strlen(s->model) : 0), &bad);
    put(meta, "backend", json_text(s->backend, s->backend ? strlen(s->backend) : 0), &bad);
    put(meta, "created", format_utc(s->created ? s->created : time(NULL), "%Y-%m-%dT%H:%M:%SZ", created, sizeof created)
                             ? json_null() : json_string(created), &bad);
    put(meta, "settings", settings, &bad);
    put(meta, "messages", metas, &bad);
    put(root, "meta", meta, &bad);
    put(root, "messages", messages, &bad);
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* ---- JSON text: a pretty printer that keeps id lists compact ---- */

static void dump_newline(strbuf *b, int indent)
{
    strbuf_add(b, "\n", 1);
    for (int i = 0; i < indent; i++)
        strbuf_add(b, "  ", 2);
}

static void dump_string(strbuf *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    strbuf_add(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        strbuf_add(b, s + run, i - run);
        run = i + 1;
        char esc[7] = {'\\', 0};
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
        }
        strbuf_add(b, esc, strlen(esc + 1) + 1);
    }
    strbuf_add(b, s + run, len - run);
    strbuf_add(b, "\"", 1);
}

static int is_integer_list(const json_t *v)
{
    if (!json_is_array(v) || !json_array_size(v))
        return 0;
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!json_is_integer(json_array_get(v, i)))
            return 0;
    return 1;
}

static void dump_value(strbuf *b, const json_t *v, int indent)
{
    char num[512];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (!json_object_size(v)) {
            strbuf_str(b, "{}");
            break;
        }
        strbuf_str(b, "{");
        const char *key;
        const json_t *item;
        size_t n = 0;
        json_object_foreach((json_t *)v, key, item) {
            if (n++)
                strbuf_str(b, ",");
            dump_newline(b, indent + 1);
            dump_string(b, key, strlen(key));
            strbuf_str(b, ": ");
            dump_value(b, item, indent + 1);
        }
        dump_newline(b, indent);
        strbuf_str(b, "}");
        break;
    }
    case JSON_ARRAY:
        if (!json_array_size(v)) {
            strbuf_str(b, "[]");
        } else if (is_integer_list(v)) {
            /* token ids: ~16 to a line rather than one per line */
            strbuf_str(b, "[");
            size_t column = 100;
            for (size_t i = 0; i < json_array_size(v); i++) {
                int n = snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(json_array_get(v, i)));
                if (i)
                    strbuf_str(b, ",");
                if (column + (size_t)n > 96) {
                    dump_newline(b, indent + 1);
                    column = (size_t)(indent + 1) * 2;
                } else {
                    strbuf_str(b, " ");
                    column++;
                }
                strbuf_add(b, num, (size_t)n);
                column += (size_t)n + 1;
            }
            dump_newline(b, indent);
            strbuf_str(b, "]");
        } else {
            strbuf_str(b, "[");
            for (size_t i = 0; i < json_array_size(v); i++) {
                if (i)
                    strbuf_str(b, ",");
                dump_newline(b, indent + 1);
                dump_value(b, json_array_get(v, i), indent + 1);
            }
            dump_newline(b, indent);
            strbuf_str(b, "]");
        }
        break;
    case JSON_STRING:
        dump_string(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        strbuf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        shortest_number(num, sizeof num, json_real_value(v), 0);
        strbuf_str(b, num);
        if (!strpbrk(num, ".e"))
            strbuf_str(b, ".0");
        break;
    case JSON_TRUE: strbuf_str(b, "true"); break;
    case JSON_FALSE: strbuf_str(b, "false"); break;
    case JSON_NULL: strbuf_str(b, "null"); break;
    }
}

int session_to_text(const session *s, char **text, size_t *len, kimi_err *err)
{
    *text = NULL;
    *len = 0;
    json_t *root = session_to_json(s);
    if (!root)
        return kimi_fail(err, KIMI_ERR_NOMEM, "session: out of memory");
    strbuf b = {0};
    dump_value(&b, root, 0);
    strbuf_add(&b, "\n", 1);
    json_decref(root);
    size_t n = b.len;
    if (!(*text = strbuf_take(&b)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "session: out of memory");
    *len = n;
    return 0;
}

/* ---- JSON form: reading ---- */

/* Errors while reading name the source and the JSON path: "chat.json: meta.version: ...". */
typedef struct {
    const char *where;
    kimi_err *err;
} reader;

static int bad_field(const reader *r, const char *path, const char *key, const char *problem)
{
    return kimi_fail(r->err, KIMI_ERR_INPUT, "%s: %s%s%s: %s", r->where, path, *path && *key ? "." : "", key,
                     problem);
}

/* An optional integer in [lo, hi]; absent or null leaves *out. */
static int read_int(const reader *r, const json_t *obj, const char *path, const char *key, int *out,
                    json_int_t lo, json_int_t hi)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return bad_field(r, path, key, "not an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        char problem[96];
        snprintf(problem, sizeof problem, "%" JSON_INTEGER_FORMAT " is out of range", x);
        return bad_field(r, path, key, problem);
    }
    *out = (int)x;
    return 0;
}

/* An optional count of the stats: an integer up to INT_MAX; a negative one (earlier
 * kimi-chat wrote -1 for the reasoning tokens a server does not report) reads as unknown, 0:
 * stats only describe an answer, and never make its conversation unreadable. */
static int read_count(const reader *r, const json_t *obj, const char *path, const char *key, int *out)
{
    const json_t *v = json_object_get(obj, key);
    if (v && json_is_integer(v) && json_integer_value(v) < 0) {
        *out = 0;
        return 0;
    }
    return read_int(r, obj, path, key, out, 0, INT_MAX);
}

/* An optional number in [lo, hi]; absent or null leaves *out. */
static int read_number(const reader *r, const json_t *obj, const char *path, const char *key, double *out,
                       double lo, double hi)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return bad_field(r, path, key, "not a number");
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return bad_field(r, path, key, "out of range");
    *out = x;
    return 0;
}

/* An optional duration or rate of the stats: as read_count, a negative one reads as 0. */
static int read_duration(const reader *r, const json_t *obj, const char *path, const char *key, double *out)
{
    const json_t *v = json_object_get(obj, key);
    if (v && json_is_number(v) && json_number_value(v) < 0) {
        *out = 0;
        return 0;
    }
    return read_number(r, obj, path, key, out, 0, DBL_MAX);
}

static int read_float(const reader *r, const json_t *obj, const char *path, const char *key, float *out,
                      double lo, double hi)
{
    double x = *out;
    if (read_number(r, obj, path, key, &x, lo, hi))
        return r->err ? r->err->code : KIMI_ERR_INPUT;
    *out = (float)x;
    return 0;
}

/* An optional string (text up to a NUL); absent or null leaves *out NULL. */
static int read_string(const reader *r, const json_t *obj, const char *path, const char *key, char **out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return bad_field(r, path, key, "not a string");
    free(*out);
    if (!(*out = dup_str(json_string_value(v))))
        return kimi_fail(r->err, KIMI_ERR_NOMEM, "%s: out of memory", r->where);
    return 0;
}

static int read_bool(const reader *r, const json_t *obj, const char *path, const char *key, int *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bad_field(r, path, key, "not true or false");
    *out = json_is_true(v);
    return 0;
}

/* The seed: a decimal string (what session_to_json writes) or a non-negative integer. */
static int read_seed(const reader *r, const json_t *obj, const char *path, uint64_t *out)
{
    const json_t *v = json_object_get(obj, "seed");
    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return 0;
    }
    const char *text = json_string_value(v);
    size_t len = json_is_string(v) ? json_string_length(v) : 0;
    if (!len || len > 20 || strspn(text, "0123456789") != len)
        return bad_field(r, path, "seed", "not a decimal number from 0 to 18446744073709551615");
    errno = 0;
    unsigned long long x = strtoull(text, NULL, 10);
    if (errno == ERANGE || x > UINT64_MAX)
        return bad_field(r, path, "seed", "not a decimal number from 0 to 18446744073709551615");
    *out = (uint64_t)x;
    return 0;
}

static int digits(const char *s, int n, int *out)
{
    *out = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        *out = *out * 10 + (s[i] - '0');
    }
    return 0;
}

/* "2026-12-01T11:40:03Z" (fractional seconds and a +00:00 offset accepted) as a time_t. */
static int parse_utc(const char *s, time_t *out)
{
    int year, month, day, hour, minute, second;
    if (strlen(s) < 20 || digits(s, 4, &year) || s[4] != '-' || digits(s + 5, 2, &month) || s[7] != '-' ||
        digits(s + 8, 2, &day) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
        digits(s + 11, 2, &hour) || s[13] != ':' || digits(s + 14, 2, &minute) || s[16] != ':' ||
        digits(s + 17, 2, &second))
        return -1;
    const char *rest = s + 19;
    if (*rest == '.') {
        rest++;
        size_t n = strspn(rest, "0123456789");
        if (!n)
            return -1;
        rest += n;
    }
    if (strcmp(rest, "Z") && strcmp(rest, "z") && strcmp(rest, "+00:00"))
        return -1;
    if (year < 1970 || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 ||
        second > 60)
        return -1;
    struct tm tm = {.tm_year = year - 1900, .tm_mon = month - 1, .tm_mday = day, .tm_hour = hour,
                    .tm_min = minute, .tm_sec = second};
    time_t t = timegm(&tm);
    struct tm back;
    if (t == (time_t)-1 || !gmtime_r(&t, &back) || back.tm_mday != day)  /* "02-30" rolls over */
        return -1;
    *out = t;
    return 0;
}

static int meta_from_json(const reader *r, const json_t *v, const char *path, session_message_meta *m)
{
    *m = (session_message_meta){0};
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return bad_field(r, path, "", "not an object or null");
    char sub[96];
    const json_t *stats = json_object_get(v, "stats"), *ids = json_object_get(v, "ids");
    const json_t *tool = json_object_get(v, "tool"), *summary = json_object_get(v, "summary");
    int rc = 0;
    if (summary && !json_is_boolean(summary))
        return bad_field(r, path, "summary", "not true or false");
    m->summary = json_is_true(summary);
    if (stats && !json_is_null(stats)) {
        snprintf(sub, sizeof sub, "%s.stats", path);
        if (!json_is_object(stats))
            return bad_field(r, sub, "", "not an object");
        m->has_stats = 1;
        rc = read_count(r, stats, sub, "prompt_tokens", &m->prompt_tokens) ||
             read_count(r, stats, sub, "reused_tokens", &m->reused_tokens) ||
             read_count(r, stats, sub, "generated_tokens", &m->generated_tokens) ||
             read_duration(r, stats, sub, "ttft_s", &m->ttft_seconds) ||
             read_duration(r, stats, sub, "prefill_tok_s", &m->prefill_tok_s) ||
             read_duration(r, stats, sub, "decode_tok_s", &m->decode_tok_s) ||
             read_duration(r, stats, sub, "reasoning_s", &m->reasoning_seconds) ||
             read_count(r, stats, sub, "reasoning_tokens", &m->reasoning_tokens) ||
             read_string(r, stats, sub, "stop_reason", &m->stop_reason);
    }
    if (!rc && ids && !json_is_null(ids)) {
        if (!json_is_array(ids))
            rc = bad_field(r, path, "ids", "not a list");
        size_t n = json_array_size(ids);
        if (!rc && n && !(m->ids = malloc(n * sizeof *m->ids)))
            rc = kimi_fail(r->err, KIMI_ERR_NOMEM, "%s: out of memory", r->where);
        for (size_t i = 0; !rc && i < n; i++) {
            const json_t *id = json_array_get(ids, i);
            if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX) {
                snprintf(sub, sizeof sub, "ids[%zu]", i);
                rc = bad_field(r, path, sub, "not a token id");
            } else {
                m->ids[m->n_ids++] = (int32_t)json_integer_value(id);
            }
        }
    }
    if (!rc && tool && !json_is_null(tool)) {
        snprintf(sub, sizeof sub, "%s.tool", path);
        if (!json_is_object(tool))
            rc = bad_field(r, sub, "", "not an object");
        else if (!json_is_string(json_object_get(tool, "state")))
            rc = bad_field(r, sub, "state", "missing or not a string");
        else
            rc = read_string(r, tool, sub, "state", &m->tool_state) ||
                 read_int(r, tool, sub, "exit_status", &m->exit_status, INT_MIN, INT_MAX) ||
                 read_number(r, tool, sub, "seconds", &m->tool_seconds, 0, DBL_MAX);
    }
    if (rc) {
        session_meta_free(m);
        return r->err ? r->err->code : KIMI_ERR_INPUT;
    }
    return 0;
}

int session_context_start(const session *s)
{
    /* only a user message is a summary (/compact writes one): a mark elsewhere, from a file
       written by another program, would start the view at an answer or a tool result */
    for (int i = s->conv.n_messages - 1; i > 0; i--)
        if (meta_at(s, i) && meta_at(s, i)->summary && s->conv.messages[i].role == CHAT_ROLE_USER)
            return i;
    return 0;
}

static int settings_from_json(const reader *r, const json_t *v, session *t)
{
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return bad_field(r, "meta.settings", "", "not an object");
    t->has_settings = 1;
    const char *p = "meta.settings";
    session_settings *st = &t->settings;
    return read_float(r, v, p, "temperature", &st->temperature, 0, FLT_MAX) ||
           read_float(r, v, p, "top_p", &st->top_p, 0, 1) ||
           read_int(r, v, p, "top_k", &st->top_k, 0, INT_MAX) ||
           read_int(r, v, p, "max_tokens", &st->max_tokens, 0, INT_MAX) ||
           read_seed(r, v, p, &st->seed) || read_bool(r, v, p, "thinking", &st->thinking)
               ? (r->err ? r->err->code : KIMI_ERR_INPUT)
               : 0;
}

/* meta, once the messages are in: format, version, model, backend, created, settings, and the
 * per-message entries (as many as there are messages). */
static int meta_fields_from_json(const reader *r, const json_t *meta, session *t)
{
    if (read_string(r, meta, "meta", "model", &t->model) || read_string(r, meta, "meta", "backend", &t->backend))
        return r->err ? r->err->code : KIMI_ERR_INPUT;
    const json_t *created = json_object_get(meta, "created");
    if (created && !json_is_null(created) &&
        (!json_is_string(created) || parse_utc(json_string_value(created), &t->created)))
        return bad_field(r, "meta", "created", "not a UTC time like 2026-12-01T11:40:03Z");
    if (settings_from_json(r, json_object_get(meta, "settings"), t))
        return r->err ? r->err->code : KIMI_ERR_INPUT;
    const json_t *metas = json_object_get(meta, "messages");
    if (!metas || json_is_null(metas))
        return 0;
    if (!json_is_array(metas))
        return bad_field(r, "meta", "messages", "not a list");
    if (json_array_size(metas) != (size_t)t->conv.n_messages)
        return kimi_fail(r->err, KIMI_ERR_INPUT, "%s: meta.messages: %zu entries for %d messages", r->where,
                         json_array_size(metas), t->conv.n_messages);
    for (int i = 0; i < t->conv.n_messages; i++) {
        char path[48];
        snprintf(path, sizeof path, "meta.messages[%d]", i);
        if (meta_from_json(r, json_array_get(metas, (size_t)i), path, &t->meta[i]))
            return r->err ? r->err->code : KIMI_ERR_INPUT;
    }
    return 0;
}

/* The format and version come first: a newer file is refused for its version, not for some
 * field whose meaning changed. */
static int check_format(const reader *r, const json_t *meta)
{
    const json_t *format = json_object_get(meta, "format"), *version = json_object_get(meta, "version");
    if (format && !json_is_null(format) &&
        (!json_is_string(format) || strcmp(json_string_value(format), "kimi-chat-session")))
        return bad_field(r, "meta", "format", "not \"kimi-chat-session\"");
    if (!version || json_is_null(version))
        return 0;
    if (!json_is_integer(version) || json_integer_value(version) < 1)
        return bad_field(r, "meta", "version", "not a positive integer");
    if (json_integer_value(version) > SESSION_FORMAT_VERSION)
        return kimi_fail(r->err, KIMI_ERR_INPUT,
                         "%s: session format version %" JSON_INTEGER_FORMAT " is newer than this kimi-chat reads (%d)",
                         r->where, json_integer_value(version), SESSION_FORMAT_VERSION);
    return 0;
}

static int from_json(session *t, const json_t *root, const reader *r)
{
    const json_t *messages = root, *meta = NULL;
    const char *list_path = "";
    if (json_is_object(root)) {
        meta = json_object_get(root, "meta");
        messages = json_object_get(root, "messages");
        list_path = "messages";
        if (meta && json_is_null(meta))
            meta = NULL;
        if (meta && !json_is_object(meta))
            return bad_field(r, "meta", "", "not an object");
        if (meta && check_format(r, meta))
            return r->err ? r->err->code : KIMI_ERR_INPUT;
        if (!messages)
            return bad_field(r, "messages", "", "missing");
        if (!json_is_array(messages))
            return bad_field(r, "messages", "", "not a list");
    } else if (!json_is_array(root)) {
        return kimi_fail(r->err, KIMI_ERR_INPUT, "%s: not a session (a JSON object or a list of messages)",
                         r->where);
    }
    size_t n = json_array_size(messages);
    if (n > (1 << 24))
        return kimi_fail(r->err, KIMI_ERR_INPUT, "%s: %s: too many messages", r->where, *list_path ? list_path : "list");
    if (reserve_meta(t, (int)n, r->err))
        return r->err ? r->err->code : KIMI_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        char where[48];
        snprintf(where, sizeof where, "%s[%zu]", list_path, i);
        chat_message m;
        int bad = chat_message_from_json(&m, json_array_get(messages, i), where, r->err);
        if (bad)
            return kimi_err_prefix(r->err, bad, "%s", r->where);
        int rc = chat_append_copy(&t->conv, &m, r->err);
        chat_message_free(&m);
        if (rc)
            return rc;
    }
    return meta ? meta_fields_from_json(r, meta, t) : 0;
}

int session_from_json(session *s, const json_t *root, const char *where, kimi_err *err)
{
    reader r = {where ? where : "session", err};
    session t;
    session_init(&t);
    int rc = from_json(&t, root, &r);
    if (rc) {
        session_free(&t);
        session_init(s);
        return rc;
    }
    *s = t;
    return 0;
}

int session_parse(session *s, const char *data, size_t size, const char *where, kimi_err *err)
{
    if (!where)
        where = "session";
    size_t blank = 0;
    while (blank < size && strchr(" \t\r\n", data[blank]) && data[blank])
        blank++;
    if (blank == size) {
        session_init(s);
        return kimi_fail(err, KIMI_ERR_INPUT, "%s: empty file", where);
    }
    json_error_t je;
    json_t *root = json_loadb(data, size, JSON_ALLOW_NUL, &je);
    if (!root) {
        session_init(s);
        return kimi_fail(err, KIMI_ERR_INPUT, "%s:%d:%d: invalid JSON: %s", where, je.line, je.column, je.text);
    }
    int rc = session_from_json(s, root, where, err);
    json_decref(root);
    return rc;
}

int session_load(session *s, const char *path, kimi_err *err)
{
    char *data;
    size_t size;
    session_init(s);
    if (file_read_all(path, &data, &size, err)) {
        if (err && err->code == KIMI_ERR_MODEL)  /* a missing file: the system's refusal */
            err->code = KIMI_ERR_IO;
        return err ? err->code : KIMI_ERR_IO;
    }
    int rc = session_parse(s, data, size, path, err);
    free(data);
    if (rc)
        return rc;
    if (!(s->path = dup_str(path))) {
        session_free(s);
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", path);
    }
    return 0;
}

int session_load_conversation(session *s, const char *path, kimi_err *err)
{
    int rc = session_load(s, path, err);
    if (rc || s->conv.n_messages)
        return rc;
    session_free(s);
    return kimi_fail(err, KIMI_ERR_INPUT, "%s: no messages to load (an empty conversation)", path);
}

/* ---- atomic files ---- */

/* Temp files are ".NAME.PID-N.tmp" beside the target: hidden (session_list skips them), named
 * by the writer's pid so that two writers never pick one name. */
static int is_temp_name(const char *entry, const char *base)
{
    size_t blen = strlen(base);
    if (entry[0] != '.' || strncmp(entry + 1, base, blen) || entry[1 + blen] != '.')
        return 0;
    const char *p = entry + blen + 2;
    size_t n = strspn(p, "0123456789");
    if (!n || p[n] != '-')
        return 0;
    p += n + 1;
    n = strspn(p, "0123456789");
    return n && !strcmp(p + n, ".tmp");
}

/* Remove temp files for base that no writer holds (killed mid-save). A writer holds a flock on
 * its temp file from creation to rename, so a lock taken here means the writer is gone; a pid
 * test (kill(pid, 0)) would not do: a writer in another PID namespace (a container sharing the
 * folder) has a pid that means nothing here. The file is removed while the lock is held, and a
 * writer that got its file back unlinked sees so (atomic_write) and starts again. */
static void remove_dead_temps(const char *dir, const char *base)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_temp_name(e->d_name, base))
            continue;
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            unlinkat(dirfd(d), e->d_name, 0);
        close(fd);
    }
    closedir(d);
}

/* ---- session locks ---- */

int session_lock_take(session_lock *l, const char *path, long *holder, kimi_err *err)
{
    *l = SESSION_LOCK_NONE;
    *holder = 0;
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    size_t size = strlen(path) + 8;
    char *lock_path = malloc(size);
    if (!lock_path)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", path);
    snprintf(lock_path, size, "%.*s.%s.lock", (int)dlen, path, path + dlen);
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            int e = errno;
            free(lock_path);
            return kimi_fail(err, KIMI_ERR_IO, "%s: cannot lock the session: %s", path, strerror(e));
        }
        if (flock(fd, LOCK_EX | LOCK_NB)) {
            char text[32] = "";
            ssize_t n = pread(fd, text, sizeof text - 1, 0);
            *holder = n > 0 ? strtol(text, NULL, 10) : 0;
            close(fd);
            free(lock_path);
            return kimi_fail(err, KIMI_ERR_STATE, "%s: open in another kimi-chat", path);
        }
        /* a holder that let go removed the file it had locked: lock the one at the name now */
        struct stat held, named;
        if (fstat(fd, &held) || stat(lock_path, &named) || held.st_ino != named.st_ino ||
            held.st_dev != named.st_dev) {
            close(fd);
            continue;
        }
        char text[32];
        int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
        /* the pid is for the message only: the lock is what counts, so a failed write is none */
        int written = ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)n, 0) == n;
        (void)written;
        *l = (session_lock){.fd = fd, .lock_path = lock_path};
        return 0;
    }
    free(lock_path);
    return kimi_fail(err, KIMI_ERR_IO, "%s: cannot lock the session: its lock file keeps changing", path);
}

void session_lock_release(session_lock *l)
{
    if (l->fd >= 0) {
        unlink(l->lock_path);   /* while still held: a waiting taker sees the name change */
        close(l->fd);
    }
    free(l->lock_path);
    *l = SESSION_LOCK_NONE;
}

int session_delete(const char *path, kimi_err *err)
{
    session_lock lock = SESSION_LOCK_NONE;
    long holder;
    int rc = session_lock_take(&lock, path, &holder, err);
    if (rc == KIMI_ERR_STATE) {
        char pid[32] = "";
        if (holder > 0)
            snprintf(pid, sizeof pid, " (pid %ld)", holder);
        return kimi_fail(err, KIMI_ERR_STATE, "%s: open in another kimi-chat%s; not deleted", path, pid);
    }
    if (rc)
        return rc;
    if (unlink(path))
        rc = kimi_fail(err, errno == ENOENT ? KIMI_ERR_INPUT : KIMI_ERR_IO, "%s: cannot delete: %s", path,
                       strerror(errno));
    session_lock_release(&lock);
    return rc;
}

static int write_all(int fd, const char *data, size_t len)
{
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            return -1;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Write data to path so that a crash at any moment leaves the old file or the new one: a temp
 * file beside it, written, fsync'ed, renamed over path, then the folder fsync'ed so the rename
 * itself survives a power cut. On failure the temp file is removed and path is untouched. */
static int atomic_write(const char *path, const char *data, size_t len, kimi_err *err)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
        return kimi_fail(err, KIMI_ERR_USAGE, "%s: cannot save: not a file name", path);
    size_t dlen = slash ? (size_t)(slash - path) : 1;
    char *dir = malloc(dlen + 1);
    static unsigned counter;
    unsigned n = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
    size_t tlen = dlen + strlen(base) + 48;
    char *tmp = malloc(tlen);
    if (!dir || !tmp) {
        free(dir);
        free(tmp);
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", path);
    }
    if (slash)
        memcpy(dir, path, dlen);
    else
        dir[0] = '.';
    dir[dlen] = 0;
    if (slash && dlen == 0)
        strcpy(dir, "/");
    remove_dead_temps(dir, base);

    int rc = 0, fd = -1;
    for (int attempt = 0; fd < 0 && attempt < 100; attempt++) {
        snprintf(tmp, tlen, "%s/.%s.%ld-%u.tmp", dir, base, (long)getpid(), n);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
            break;
        /* held until the rename; another save that took the lock first removed the file
           (remove_dead_temps): start again under a new name */
        struct stat st;
        if (flock(fd, LOCK_EX) || fstat(fd, &st) || st.st_nlink == 0) {
            close(fd);
            fd = -1;
            n = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        }
    }
    if (fd < 0) {
        /* ENOENT from a folder that exists (/proc refuses new files so) is not a missing folder */
        int e = errno;
        struct stat st;
        if ((e == ENOENT || e == ENOTDIR) && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
            rc = kimi_fail(err, KIMI_ERR_IO, "%s: cannot save: the folder %s does not exist", path, dir);
        else
            rc = kimi_fail(err, KIMI_ERR_IO, "%s: cannot save: cannot create %s: %s", path, tmp, strerror(e));
        goto done;
    }
    if (write_all(fd, data, len) || fsync(fd)) {
        rc = kimi_fail(err, KIMI_ERR_IO, "%s: cannot save: writing %s: %s", path, tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        goto done;
    }
    if (close(fd)) {
        rc = kimi_fail(err, KIMI_ERR_IO, "%s: cannot save: writing %s: %s", path, tmp, strerror(errno));
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path)) {
        rc = kimi_fail(err, KIMI_ERR_IO, "%s: cannot save: %s", path, strerror(errno));
        unlink(tmp);
        goto done;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || (fsync(dfd) && errno != EINVAL))  /* EINVAL: a filesystem without folder sync */
        rc = kimi_fail(err, KIMI_ERR_IO, "%s: saved, but syncing the folder %s failed: %s", path, dir,
                       strerror(errno));
    if (dfd >= 0)
        close(dfd);
done:
    free(dir);
    free(tmp);
    return rc;
}

int session_save(const session *s, const char *path, kimi_err *err)
{
    char *text;
    size_t len;
    int failed = session_to_text(s, &text, &len, err);
    if (failed)
        return kimi_err_prefix(err, failed, "%s", path);
    int rc = atomic_write(path, text, len, err);
    free(text);
    return rc;
}

/* ---- Markdown ---- */

#define MD_NUL "\xE2\x90\x80"  /* U+2400 SYMBOL FOR NULL: a NUL byte, shown */

/* Text for people: NUL bytes shown as U+2400, ill-formed UTF-8 as U+FFFD, nothing dropped. */
static void md_text(strbuf *b, const char *s, size_t len)
{
    size_t run = 0;
    for (size_t i = 0; i < len;) {
        size_t n;
        int kind = s[i] ? utf8_sequence((const uint8_t *)s + i, len - i, &n) : UTF8_OK;
        if (s[i] && kind == UTF8_OK) {
            i += n;
            continue;
        }
        strbuf_add(b, s + run, i - run);
        if (!s[i]) {
            strbuf_str(b, MD_NUL);
            i++;
        } else {
            strbuf_str(b, UTF8_REPLACEMENT);
            i += n;
        }
        run = i;
    }
    strbuf_add(b, s + run, len - run);
}

/* One line inside HTML or a list item: line breaks become spaces, <, > and & are escaped. */
static void md_inline(strbuf *b, const char *s)
{
    strbuf t = {0};
    md_text(&t, s ? s : "", s ? strlen(s) : 0);
    for (size_t i = 0; i < t.len; i++) {
        char c = t.data[i];
        if (c == '<')
            strbuf_str(b, "&lt;");
        else if (c == '>')
            strbuf_str(b, "&gt;");
        else if (c == '&')
            strbuf_str(b, "&amp;");
        else if ((unsigned char)c < 0x20)
            strbuf_str(b, " ");
        else
            strbuf_add(b, &c, 1);
    }
    if (t.failed)
        b->failed = 1;
    free(t.data);
}

static size_t longest_backtick_run(const char *s, size_t len)
{
    size_t best = 0, run = 0;
    for (size_t i = 0; i < len; i++) {
        run = s[i] == '`' ? run + 1 : 0;
        if (run > best)
            best = run;
    }
    return best;
}

/* A fenced block that the text cannot close: the fence is longer than any run of backticks
 * in it (CommonMark closes a fence only with one at least as long). */
static void md_fence(strbuf *b, const char *s, size_t len, const char *info)
{
    size_t fence = longest_backtick_run(s, len) + 1;
    if (fence < 3)
        fence = 3;
    for (size_t i = 0; i < fence; i++)
        strbuf_add(b, "`", 1);
    strbuf_str(b, info);
    strbuf_str(b, "\n");
    md_text(b, s, len);
    if (len && s[len - 1] != '\n')
        strbuf_str(b, "\n");
    for (size_t i = 0; i < fence; i++)
        strbuf_add(b, "`", 1);
    strbuf_str(b, "\n\n");
}

/* An inline code span of one line, with a delimiter longer than any backtick run inside. */
static void md_code_span(strbuf *b, const char *s)
{
    strbuf t = {0};
    md_inline(&t, s ? s : "");
    const char *text = t.data ? t.data : "";
    size_t n = longest_backtick_run(text, t.len) + 1;
    int pad = t.len && (text[0] == '`' || text[t.len - 1] == '`');
    for (size_t i = 0; i < n; i++)
        strbuf_add(b, "`", 1);
    if (pad)
        strbuf_str(b, " ");
    strbuf_add(b, text, t.len);
    if (pad)
        strbuf_str(b, " ");
    for (size_t i = 0; i < n; i++)
        strbuf_add(b, "`", 1);
    if (t.failed)
        b->failed = 1;
    free(t.data);
}

/* A paragraph of message text (Markdown as the model or the user wrote it). */
static void md_paragraph(strbuf *b, const chat_text *t)
{
    size_t len = t->len;
    while (len && (t->s[len - 1] == '\n' || t->s[len - 1] == ' '))
        len--;
    if (!t->s || !len)
        return;
    md_text(b, t->s, len);
    strbuf_str(b, "\n\n");
}

static void md_number(strbuf *b, const char *fmt, double v)
{
    char num[512];
    format_number(num, sizeof num, fmt, 1, v);
    strbuf_str(b, num);
}

static void md_settings(strbuf *b, const session_settings *st)
{
    char num[512];
    strbuf_str(b, "- Settings: temperature ");
    shortest_number(num, sizeof num, st->temperature, 1);
    strbuf_str(b, num);
    strbuf_str(b, " · top_p ");
    shortest_number(num, sizeof num, st->top_p, 1);
    strbuf_str(b, num);
    if (st->top_k)
        strbuf_printf(b, " · top_k %d", st->top_k);
    if (st->max_tokens)
        strbuf_printf(b, " · max tokens %d", st->max_tokens);
    strbuf_printf(b, " · seed %" PRIu64 " · thinking %s\n", st->seed, st->thinking ? "on" : "off");
}

static void md_header(strbuf *b, const session *s)
{
    char date[48];
    strbuf_str(b, "# kimi-chat session\n\n- Model: ");
    md_inline(b, s->model ? s->model : "unknown");
    strbuf_str(b, "\n- Backend: ");
    md_inline(b, s->backend ? s->backend : "unknown");
    strbuf_str(b, "\n"); /* the backend says its TP ("cuda TP=8"): no line of its own */
    if (!format_utc(s->created ? s->created : time(NULL), "%Y-%m-%d %H:%M:%S UTC", date, sizeof date))
        strbuf_printf(b, "- Date: %s\n", date);
    md_settings(b, &s->settings);
    strbuf_str(b, "\n");
}

static void md_reasoning(strbuf *b, const chat_message *m, const session_message_meta *meta)
{
    if (!m->reasoning.s || !m->reasoning.len)
        return;
    strbuf_str(b, "<details><summary>Thinking");
    if (meta && meta->has_stats && meta->reasoning_tokens > 0)
        strbuf_printf(b, " · %d tokens", meta->reasoning_tokens);
    if (meta && meta->has_stats && meta->reasoning_seconds > 0) {
        strbuf_str(b, " · ");
        md_number(b, "%.*f", meta->reasoning_seconds);
        strbuf_str(b, " s");
    }
    strbuf_str(b, "</summary>\n\n");
    md_text(b, m->reasoning.s, m->reasoning.len);
    strbuf_str(b, "\n\n</details>\n\n");
}

static void md_stats(strbuf *b, const session_message_meta *meta)
{
    if (!meta || !meta->has_stats)
        return;
    strbuf_printf(b, "*%d tokens", meta->generated_tokens);
    if (meta->decode_tok_s > 0 && isfinite(meta->decode_tok_s)) {
        strbuf_str(b, " · ");
        md_number(b, "%.*f", meta->decode_tok_s);
        strbuf_str(b, " tok/s");
    }
    if (meta->stop_reason && *meta->stop_reason) {
        strbuf_str(b, " · ");
        strbuf t = {0};
        md_inline(&t, meta->stop_reason);
        for (size_t i = 0; i < t.len; i++) {
            if (strchr("*_`\\", t.data[i]))
                strbuf_str(b, "\\");
            strbuf_add(b, &t.data[i], 1);
        }
        free(t.data);
    }
    strbuf_str(b, "*\n\n");
}

static void md_tool_result(strbuf *b, const chat_message *m, const session_message_meta *meta)
{
    strbuf_str(b, "<details><summary>Result of ");
    md_inline(b, m->tool_call_id ? m->tool_call_id : "a tool call");
    if (meta && meta->tool_state) {
        strbuf_str(b, " · ");
        md_inline(b, meta->tool_state);
        if (!strcmp(meta->tool_state, "done") && meta->exit_status)
            strbuf_printf(b, " · exit status %d", meta->exit_status);
        strbuf_str(b, " · ");
        md_number(b, "%.*f", meta->tool_seconds);
        strbuf_str(b, " s");
    }
    strbuf_str(b, "</summary>\n\n");
    md_fence(b, m->content.s ? m->content.s : "", m->content.s ? m->content.len : 0, "");
    strbuf_str(b, "</details>\n\n");
}

int session_to_markdown(const session *s, char **text, size_t *len, kimi_err *err)
{
    strbuf b = {0};
    md_header(&b, s);
    const char *last = NULL;
    for (int i = 0; i < s->conv.n_messages; i++) {
        const chat_message *m = &s->conv.messages[i];
        const session_message_meta *meta = meta_at(s, i);
        const char *heading = meta && meta->summary ? "Summary (/compact)"
                            : m->role == CHAT_ROLE_USER ? "You" : m->role == CHAT_ROLE_SYSTEM ? "System"
                            : m->role == CHAT_ROLE_ASSISTANT || m->role == CHAT_ROLE_TOOL ? "Kimi"
                            : chat_role_text(m);
        /* An answer's tool results and the answer that follows them are one turn. */
        if (!last || strcmp(last, heading) || m->role == CHAT_ROLE_USER || m->role == CHAT_ROLE_SYSTEM) {
            strbuf_str(&b, "### ");
            md_inline(&b, heading);
            strbuf_str(&b, "\n\n");
        }
        last = heading;
        if (m->role == CHAT_ROLE_TOOL) {
            md_tool_result(&b, m, meta);
            continue;
        }
        if (m->role == CHAT_ROLE_ASSISTANT)
            md_reasoning(&b, m, meta);
        md_paragraph(&b, &m->content);
        for (int k = 0; k < m->n_tool_calls; k++) {
            const chat_tool_call *tc = &m->tool_calls[k];
            strbuf_str(&b, "Tool call ");
            md_code_span(&b, tc->id ? tc->id : "");
            strbuf_str(&b, ":\n\n");
            md_fence(&b, tc->arguments.s ? tc->arguments.s : "", tc->arguments.s ? tc->arguments.len : 0, "json");
        }
        if (m->role == CHAT_ROLE_ASSISTANT)
            md_stats(&b, meta);
    }
    size_t n = b.len;
    while (n && b.data && b.data[n - 1] == '\n' && n >= 2 && b.data[n - 2] == '\n')
        n--;  /* one newline at the end */
    b.len = b.failed ? b.len : n;
    if (b.data && !b.failed)
        b.data[n] = 0;
    if (!(*text = strbuf_take(&b)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "markdown: out of memory");
    *len = n;
    return 0;
}

int session_export_markdown(const session *s, const char *path, kimi_err *err)
{
    char *text;
    size_t len;
    int failed = session_to_markdown(s, &text, &len, err);
    if (failed)
        return kimi_err_prefix(err, failed, "%s", path);
    int rc = atomic_write(path, text, len, err);
    free(text);
    return rc;
}

/* ---- the sessions folder ---- */

/* The first user message's first non-blank line, at most 60 bytes, cut at a character. */
static char *session_title(const session *s)
{
    for (int i = 0; i < s->conv.n_messages; i++) {
        const chat_message *m = &s->conv.messages[i];
        if (m->role != CHAT_ROLE_USER)
            continue;
        const char *t = m->content.s ? m->content.s : "";
        t += strspn(t, " \t\r\n");
        size_t n = strcspn(t, "\r\n");
        if (n > 60) {
            n = 60;
            while (n && ((unsigned char)t[n] & 0xC0) == 0x80)
                n--;
        }
        char *title = malloc(n + 1);
        if (title) {
            memcpy(title, t, n);
            title[n] = 0;
        }
        return title;
    }
    return dup_str("");
}

typedef struct {
    session_entry entry;
    struct timespec mtime;
} listed;

static int newest_first(const void *a, const void *b)
{
    const listed *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : -1;
    return -strcmp(x->entry.path, y->entry.path);
}

void session_list_free(session_entry *entries, int n)
{
    for (int i = 0; entries && i < n; i++) {
        free(entries[i].path);
        free(entries[i].title);
    }
    free(entries);
}

/* One file of the folder as a list entry; *skip when it is not a session file at all. */
/* Whether a folder entry's name is a session file's: *.json, hidden ones excepted. */
static int session_file_name(const char *name)
{
    size_t len = strlen(name);
    return name[0] != '.' && len > 5 && !strcmp(name + len - 5, ".json");
}

static int list_one(const char *dir, const char *name, listed *out, int *skip, kimi_err *err)
{
    size_t len = strlen(name);
    *skip = 1;
    if (!session_file_name(name))
        return 0;
    *out = (listed){0};
    size_t plen = strlen(dir) + len + 2;
    if (!(out->entry.path = malloc(plen)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", dir);
    snprintf(out->entry.path, plen, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    struct stat st;
    if (stat(out->entry.path, &st) || !S_ISREG(st.st_mode)) {
        free(out->entry.path);
        return 0;
    }
    *skip = 0;
    out->mtime = st.st_mtim;
    out->entry.modified = st.st_mtime;
    session s;
    kimi_err why = {0};
    if (session_load(&s, out->entry.path, &why)) {
        const char *reason = why.msg;
        size_t pfx = strlen(out->entry.path);
        if (!strncmp(reason, out->entry.path, pfx) && (reason[pfx] == ':' ))
            reason += pfx + 1 + (reason[pfx + 1] == ' ');
        size_t tlen = strlen(reason) + 16;
        if ((out->entry.title = malloc(tlen)))
            snprintf(out->entry.title, tlen, "(unreadable: %s)", reason);
        out->entry.unreadable = 1;
    } else {
        out->entry.n_messages = s.conv.n_messages;
        out->entry.title = session_title(&s);
        session_free(&s);
    }
    if (!out->entry.title) {
        free(out->entry.path);
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", dir);
    }
    return 0;
}

int session_list(const char *dir, session_entry **out, int *n_out, kimi_err *err)
{
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return kimi_fail(err, KIMI_ERR_IO, "%s: cannot list the sessions: %s", dir, strerror(errno));
    }
    listed *items = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (n >= INT_MAX - 1 || array_reserve(&items, &cap, n + 1, sizeof *items)) {
            rc = kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", dir);
            break;
        }
        int skip;
        rc = list_one(dir, e->d_name, &items[n], &skip, err);
        if (!rc && !skip)
            n++;
    }
    closedir(d);
    if (!rc && n)
        qsort(items, n, sizeof *items, newest_first);
    session_entry *entries = NULL;
    if (!rc && n && !(entries = malloc(n * sizeof *entries)))
        rc = kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", dir);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            entries[i] = items[i].entry;
        else {
            free(items[i].entry.path);
            free(items[i].entry.title);
        }
    }
    free(items);
    if (rc)
        return rc;
    *out = entries;
    *n_out = (int)n;
    return 0;
}

/* As session_list's stat: links to files count, folders and links to them do not. */
static int regular_file_entry(const char *dir, const struct dirent *e)
{
    if (e->d_type == DT_REG)
        return 1;
    if (e->d_type != DT_UNKNOWN && e->d_type != DT_LNK)
        return 0;
    char *path = NULL;
    struct stat st;
    int regular = asprintf(&path, "%s/%s", dir, e->d_name) >= 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode);
    free(path);
    return regular;
}

static int name_order(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int session_list_names(const char *dir, char ***out, int *n_out, kimi_err *err)
{
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return kimi_fail(err, KIMI_ERR_IO, "%s: cannot list the sessions: %s", dir, strerror(errno));
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (!session_file_name(e->d_name) || !regular_file_entry(dir, e))
            continue;
        if (n >= INT_MAX - 1 || array_reserve(&names, &cap, n + 1, sizeof *names) ||
            !(names[n] = strndup(e->d_name, strlen(e->d_name) - 5)))
            rc = kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", dir);
        else
            n++;
    }
    closedir(d);
    if (rc) {
        session_names_free(names, (int)n);
        return rc;
    }
    if (n)
        qsort(names, n, sizeof *names, name_order);
    *out = names;
    *n_out = (int)n;
    return 0;
}

void session_names_free(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

char *session_new_path(const char *dir, const char *kind, time_t t)
{
    char stamp[32];
    if (format_utc(t, "%Y-%m-%dT%H-%M-%S", stamp, sizeof stamp))
        return NULL;
    const char *sep = dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/";
    size_t size = strlen(dir) + strlen(kind) + strlen(stamp) + 32;
    char *path = malloc(size);
    if (!path)
        return NULL;
    for (int k = 1; k < 100000; k++) {
        if (k == 1)
            snprintf(path, size, "%s%s%s%s.json", dir, sep, kind, stamp);
        else
            snprintf(path, size, "%s%s%s%s-%d.json", dir, sep, kind, stamp, k);
        /* Created here (empty), not only looked up: two kimi-chat processes saving a new
           session in the same second otherwise both see the name free and the second's
           saves replace the first's conversation. */
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            close(fd);
            return path;
        }
        if (errno != EEXIST)
            return path;    /* the save that follows says why the folder cannot be written */
    }
    free(path);
    return NULL;
}
