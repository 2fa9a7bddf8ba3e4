/* generator_remote: the transfer thread (libcurl multi, so a cancel wakes it at once) hands the
 * reply's bytes to the UI thread through a locked buffer and an eventfd; pump frames them
 * (sse), reads the chunks (openai_stream) and turns the transfer's end into the turn's stop. */
#include "app/chat/generator_remote.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "app/chat/openai_stream.h"
#include "app/chat/sse.h"
#include "engine/base/array.h"
#include "engine/base/monotonic.h"
#include "engine/text/utf8.h"

enum {
    ERROR_BODY_MAX = 64 << 10,          /* bytes of an error reply kept for its message */
    MODELS_BODY_MAX = 4 << 20,          /* bytes of /v1/models read */
    MODELS_TIMEOUT_MS = 30000,
    POLL_MS = 50,                       /* the transfer loop's longest sleep */
    WAITING_TICK_MS = 500,              /* WAITING progress while no byte came */
};

/* What the transfer thread shares with the UI thread: everything under mu. */
typedef struct {
    char *bytes;                /* [len] reply bytes not yet pumped */
    size_t len, cap;
    long status;                /* HTTP status once the headers came, else 0 */
    char content_type[128];
    int got_reply;              /* a header or body byte came: no more retries */
    double last_byte_at;        /* when a byte last came (or the try began) */
    int ticks;                  /* connected, then every WAITING_TICK_MS until a byte came */
    double connected_at;
    int finished;               /* the thread is done: code, curl_error, tries are final */
    CURLcode code;
    char curl_error[CURL_ERROR_SIZE];
    int tries;
    int oom;
} transfer;

typedef struct {
    generator base;             /* first: the generator * handed out points here */
    openai_endpoints ep;
    openai_dialect dialect;
    long connect_timeout_ms, idle_timeout_s, retry_delay_ms;
    int retries;
    char *key;                  /* [key_len + 1] the API key or NULL; wiped at close */
    size_t key_len;
    char key_hint[200];         /* where the key comes from, for a 401 */
    int efd;                    /* eventfd: readable while the thread left something */
    CURLM *multi;
    pthread_mutex_t mu;
    pthread_t thread;
    int thread_live;
    CURL *easy;                 /* the transfer thread's current handle (its callbacks only) */
    char *model_name;           /* the whole name sent as "model" */
    atomic_int abort_transfer;
    transfer t;
    /* the thread's request, set before it starts */
    char *body;
    struct curl_slist *headers;
    /* the turn, on the UI thread */
    int running, complete, cancel_requested;
    sse_parser *sse;
    openai_stream *stream;
    long status;
    char content_type[128];
    int is_stream;              /* a 2xx event stream: bytes go to sse, else to err_body */
    char *err_body;             /* [err_len] an error reply's first ERROR_BODY_MAX bytes */
    size_t err_len, err_cap;
    int ticks_seen;
    double t_start, t_first, t_last;
    size_t answer_bytes;        /* text of this answer so far (reasoning, content, calls) */
    int over_cap;               /* answer_bytes passed answer_cap(): the rest is not taken */
    generator_result result;
    generator_event_fn on_event;
    void *user;
} remote_gen;

/* vsnprintf that, when it must cut, cuts at a character boundary (messages stay UTF-8). */
static void vfit(char *out, size_t cap, const char *fmt, va_list ap)
{
    int n = vsnprintf(out, cap, fmt, ap);
    if (n >= 0 && (size_t)n >= cap && cap > 1) {
        size_t len = cap - 1, lead = len - 1;
        while (lead > 0 && ((unsigned char)out[lead] & 0xC0) == 0x80)
            lead--;
        unsigned char b = (unsigned char)out[lead];
        size_t need = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
        if (len - lead < need)
            out[lead] = 0;    /* the last character was cut: drop what is left of it */
    }
}

static void fit(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fit(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfit(out, cap, fmt, ap);
    va_end(ap);
}

static void signal_fd(remote_gen *g)
{
    uint64_t one = 1;
    ssize_t rc = write(g->efd, &one, sizeof one);
    (void)rc;   /* EAGAIN: the counter is already nonzero, which is all a reader needs */
}

static void wipe_free(char *s, size_t len)
{
    if (s) {
        explicit_bzero(s, len);
        free(s);
    }
}

static void free_headers(struct curl_slist *h)
{
    for (struct curl_slist *i = h; i; i = i->next)
        explicit_bzero(i->data, strlen(i->data));
    curl_slist_free_all(h);
}

/* ---- the transfer thread ---- */

static size_t on_header(char *ptr, size_t size, size_t n, void *user)
{
    remote_gen *g = user;
    (void)ptr;
    pthread_mutex_lock(&g->mu);
    g->t.got_reply = 1;
    g->t.last_byte_at = monotonic_seconds();
    pthread_mutex_unlock(&g->mu);
    return size * n;
}

static size_t on_write(char *ptr, size_t size, size_t n, void *user)
{
    remote_gen *g = user;
    size_t len = size * n;
    pthread_mutex_lock(&g->mu);
    if (!g->t.status) {
        char *type = NULL;
        curl_easy_getinfo(g->easy, CURLINFO_RESPONSE_CODE, &g->t.status);
        curl_easy_getinfo(g->easy, CURLINFO_CONTENT_TYPE, &type);
        fit(g->t.content_type, sizeof g->t.content_type, "%s", type ? type : "");
    }
    int ok = !text_append(&g->t.bytes, &g->t.len, &g->t.cap, ptr, len);
    if (!ok)
        g->t.oom = 1;
    g->t.got_reply = 1;
    g->t.last_byte_at = monotonic_seconds();
    pthread_mutex_unlock(&g->mu);
    signal_fd(g);
    return ok ? len : 0;
}

static int on_connected(void *user, char *primary_ip, char *local_ip, int primary_port,
                        int local_port)
{
    remote_gen *g = user;
    (void)primary_ip, (void)local_ip, (void)primary_port, (void)local_port;
    pthread_mutex_lock(&g->mu);
    g->t.connected_at = monotonic_seconds();
    g->t.ticks++;
    pthread_mutex_unlock(&g->mu);
    signal_fd(g);
    return CURL_PREREQFUNC_OK;
}

/* Failures where nothing reached the server's application: worth another try. */
static int retryable(CURLcode code)
{
    switch (code) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
        return 1;
    default:
        return 0;
    }
}

static void setup_common(CURL *easy, const remote_gen *g, char *errbuf)
{
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, g->connect_timeout_ms);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_USERAGENT, "kimi-chat");
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
}

/* Sleep ms unless a cancel comes first; 1 when cancelled. */
static int wait_or_abort(remote_gen *g, long ms)
{
    double end = monotonic_seconds() + ms / 1000.0;
    while (!atomic_load(&g->abort_transfer)) {
        double left = end - monotonic_seconds();
        if (left <= 0)
            return 0;
        curl_multi_poll(g->multi, NULL, 0, (int)(left * 1000) + 1, NULL);
    }
    return 1;
}

static void *transfer_main(void *arg)
{
    remote_gen *g = arg;
    char errbuf[CURL_ERROR_SIZE];
    CURLcode code = CURLE_OK;
    long delay = g->retry_delay_ms;
    int tries = 0;
    for (;;) {
        tries++;
        errbuf[0] = 0;
        CURL *easy = curl_easy_init();
        if (!easy) {
            code = CURLE_OUT_OF_MEMORY;
            break;
        }
        g->easy = easy;
        setup_common(easy, g, errbuf);
        curl_easy_setopt(easy, CURLOPT_URL, g->ep.chat_url);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, g->body);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(g->body));
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, g->headers);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_write);
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, g);
        curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(easy, CURLOPT_HEADERDATA, g);
        curl_easy_setopt(easy, CURLOPT_PREREQFUNCTION, on_connected);
        curl_easy_setopt(easy, CURLOPT_PREREQDATA, g);
        curl_multi_add_handle(g->multi, easy);
        int done = 0, idle = 0;
        double last_tick = monotonic_seconds();
        pthread_mutex_lock(&g->mu);
        g->t.last_byte_at = last_tick;
        pthread_mutex_unlock(&g->mu);
        code = CURLE_OK;
        while (!atomic_load(&g->abort_transfer)) {
            int running = 0;
            CURLMcode mc = curl_multi_perform(g->multi, &running);
            CURLMsg *msg;
            int left;
            while ((msg = curl_multi_info_read(g->multi, &left)))
                if (msg->msg == CURLMSG_DONE) {
                    code = msg->data.result;
                    done = 1;
                }
            if (mc != CURLM_OK && !done) {
                code = CURLE_FAILED_INIT;
                fit(errbuf, CURL_ERROR_SIZE, "%s", curl_multi_strerror(mc));
                done = 1;
            }
            if (done || !running)
                break;
            double now = monotonic_seconds();
            pthread_mutex_lock(&g->mu);
            int tick = g->t.connected_at > 0 && !g->t.got_reply &&
                       now - last_tick >= WAITING_TICK_MS / 1000.0;
            if (tick) {
                g->t.ticks++;
                last_tick = now;
            }
            /* the idle timeout, kept here rather than by curl's low-speed check, which
               averages over several seconds and so fires late */
            idle = g->t.connected_at > 0 && now - g->t.last_byte_at > g->idle_timeout_s;
            pthread_mutex_unlock(&g->mu);
            if (idle) {
                code = CURLE_OPERATION_TIMEDOUT;
                fit(errbuf, CURL_ERROR_SIZE, "no data for %ld s", g->idle_timeout_s);
                done = 1;
                break;
            }
            if (tick)
                signal_fd(g);
            curl_multi_poll(g->multi, NULL, 0, POLL_MS, NULL);
        }
        long status = 0;
        char *type = NULL;
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(easy, CURLINFO_CONTENT_TYPE, &type);
        pthread_mutex_lock(&g->mu);
        if (status && !g->t.status)
            g->t.status = status;
        if (type && !g->t.content_type[0])
            fit(g->t.content_type, sizeof g->t.content_type, "%s", type);
        int got_reply = g->t.got_reply;
        pthread_mutex_unlock(&g->mu);
        curl_multi_remove_handle(g->multi, easy);
        curl_easy_cleanup(easy);
        if (!done) {
            code = CURLE_ABORTED_BY_CALLBACK;   /* cancelled, or the turn already ended */
            break;
        }
        if (!retryable(code) || idle || got_reply || tries > g->retries)
            break;      /* a server that took the request and stayed silent is not retried */
        if (wait_or_abort(g, delay)) {
            code = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        delay *= 2;
    }
    pthread_mutex_lock(&g->mu);
    g->t.finished = 1;
    g->t.code = code;
    g->t.tries = tries;
    fit(g->t.curl_error, sizeof g->t.curl_error, "%s",
        errbuf[0] ? errbuf : curl_easy_strerror(code));
    pthread_mutex_unlock(&g->mu);
    signal_fd(g);
    return NULL;
}

/* Stop and join the transfer thread, if one runs. */
static void stop_transfer(remote_gen *g)
{
    if (!g->thread_live)
        return;
    atomic_store(&g->abort_transfer, 1);
    curl_multi_wakeup(g->multi);
    pthread_join(g->thread, NULL);
    g->thread_live = 0;
    free(g->body);
    g->body = NULL;
    free_headers(g->headers);
    g->headers = NULL;
}

/* ---- messages ---- */

/* Replace every copy of the key in s (NUL-terminated, cap bytes) with "[redacted]". */
static void redact_key(const remote_gen *g, char *s, size_t cap)
{
    if (!g->key || g->key_len < 4)
        return;
    static const char mark[] = "[redacted]";
    char *at;
    while ((at = strstr(s, g->key))) {
        size_t tail = strlen(at + g->key_len);
        size_t room = cap - (size_t)(at - s) - 1;
        size_t mark_len = sizeof mark - 1 < room ? sizeof mark - 1 : room;
        if (tail > room - mark_len)
            tail = room - mark_len;
        memmove(at + mark_len, at + g->key_len, tail);
        memcpy(at, mark, mark_len);
        at[mark_len + tail] = 0;
    }
}

static const char *status_text(long status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "rate limited";
    default: return status >= 500 ? "server error" : "HTTP error";
    }
}

/* The one line for an HTTP error reply: status, the server's message, and a hint. */
static void http_error_line(const remote_gen *g, long status, const char *body, size_t len,
                            const char *endpoint, char *out, size_t cap)
{
    char msg[300], where[300];
    openai_error_message(body ? body : "", len, msg, sizeof msg);
    const char *hint = "";
    if (status == 401 || status == 403) {
        hint = g->key_hint;
    } else if (status == 404 || status == 405) {
        fit(where, sizeof where, "is %s%s an OpenAI-compatible endpoint?", g->ep.base,
            endpoint);
        hint = where;
    }
    fit(out, cap, "%ld %s%s%s%s%s", status, status_text(status), msg[0] ? ": " : "", msg,
        hint[0] ? "; " : "", hint);
}

/* ---- the turn (UI thread) ---- */

/* An answer cannot be longer than the context holds: a server that streams more (a hostile or
 * broken one) would have the app keep it all in memory. ANSWER_BYTES_PER_TOKEN is generous (a
 * token of Kimi's vocabulary is a few bytes; the longest are runs of spaces and symbols); a
 * server that reports no context is taken to have Kimi-K2.5's. */
enum { ANSWER_BYTES_PER_TOKEN = 32, ANSWER_DEFAULT_CONTEXT = 262144 };

static size_t answer_cap(const remote_gen *g)
{
    long ctx = g->base.context_limit > 0 ? g->base.context_limit : ANSWER_DEFAULT_CONTEXT;
    return (size_t)ctx * ANSWER_BYTES_PER_TOKEN;
}

static void on_parse(void *user, const parse_event *ev)
{
    remote_gen *g = user;
    if (g->over_cap)
        return;
    if (ev->kind == PARSE_REASONING_TEXT || ev->kind == PARSE_CONTENT_TEXT ||
        ev->kind == PARSE_TOOL_CALL_ID || ev->kind == PARSE_TOOL_CALL_ARGS) {
        g->answer_bytes += ev->len;
        if (g->answer_bytes > answer_cap(g)) {
            g->over_cap = 1;
            return;
        }
    }
    if (ev->kind == PARSE_REASONING_TEXT || ev->kind == PARSE_CONTENT_TEXT ||
        ev->kind == PARSE_TOOL_CALL_BEGIN || ev->kind == PARSE_TOOL_CALL_ARGS) {
        double now = monotonic_seconds();
        if (!g->t_first)
            g->t_first = now;
        g->t_last = now;
    }
    if (g->on_event) {
        generator_event e = {.kind = GENERATOR_EVENT_PARSE, .parse = *ev};
        g->on_event(g->user, &e);
    }
}

static void fill_stats(remote_gen *g)
{
    const openai_usage *u = openai_stream_usage(g->stream);
    generator_result *r = &g->result;
    r->prompt_tokens = u->prompt_tokens > 0 ? u->prompt_tokens : 0;
    r->reused_tokens = u->cached_tokens > 0 ? u->cached_tokens : 0;
    r->generated_tokens = u->completion_tokens >= 0 ? u->completion_tokens
                                                    : openai_stream_text_chunks(g->stream);
    r->ttft_seconds = g->t_first ? g->t_first - g->t_start : 0;
    r->prefill_tok_s = r->ttft_seconds > 0
                           ? (r->prompt_tokens - r->reused_tokens) / r->ttft_seconds : 0;
    double decode = g->t_last - g->t_first;
    r->decode_tok_s = r->generated_tokens > 1 && decode > 0
                          ? (r->generated_tokens - 1) / decode : 0;
    r->ids = NULL;
    r->n_ids = 0;
}

/* The turn ends: error (printf, may be NULL) makes it an ERROR stop. */
static int end_turn(remote_gen *g, parse_stop_reason reason, kimi_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int end_turn(remote_gen *g, parse_stop_reason reason, kimi_err *err, const char *fmt, ...)
{
    if (fmt) {
        char line[sizeof g->result.error];
        va_list ap;
        va_start(ap, fmt);
        vfit(line, sizeof line, fmt, ap);
        va_end(ap);
        fit(g->result.error, sizeof g->result.error, "server %s: %s", g->ep.origin, line);
        redact_key(g, g->result.error, sizeof g->result.error);
        reason = PARSE_STOP_ERROR;
    }
    g->complete = 1;
    g->running = 0;
    atomic_store(&g->abort_transfer, 1);   /* a server that keeps the line open is let go */
    curl_multi_wakeup(g->multi);
    fill_stats(g);
    return openai_stream_finish(g->stream, reason, err);
}

enum { SSE_STOP = 1, SSE_NOMEM = 2 };

static int on_sse_event(void *user, const char *type, const char *data, size_t len)
{
    remote_gen *g = user;
    kimi_err err;
    (void)type;     /* vLLM, SGLang and Moonshot send only unnamed events */
    if (openai_stream_data(g->stream, data, len, &err))
        return SSE_NOMEM;
    return openai_stream_done(g->stream) || openai_stream_error(g->stream)[0] ? SSE_STOP : 0;
}

/* Bytes of the reply: to the stream, or kept for an error reply's message. 1 when the stream's
 * framing failed (framing_err says why), -1 when out of memory. */
static int take_bytes(remote_gen *g, const char *bytes, size_t len, kimi_err *framing_err)
{
    if (!len)
        return 0;
    if (!g->is_stream) {
        size_t keep = ERROR_BODY_MAX - g->err_len < len ? ERROR_BODY_MAX - g->err_len : len;
        return keep && text_append(&g->err_body, &g->err_len, &g->err_cap, bytes, keep) ? -1 : 0;
    }
    int rc = sse_feed(g->sse, bytes, len, on_sse_event, g, framing_err);
    return rc == SSE_NOMEM || (rc < 0 && framing_err->code == KIMI_ERR_NOMEM) ? -1 : rc < 0 ? 1 : 0;
}

/* After bytes: end the turn when the stream says so. 1 when it ended. */
static int stream_ended(remote_gen *g, kimi_err *err, int *rc)
{
    const char *e = openai_stream_error(g->stream);
    if (e[0]) {
        *rc = end_turn(g, PARSE_STOP_ERROR, err, "the stream ended with an error: %s", e);
        return 1;
    }
    if (openai_stream_done(g->stream)) {
        *rc = end_turn(g, openai_stream_has_finish(g->stream) ? openai_stream_finish_stop(g->stream)
                                                             : PARSE_STOP_END_OF_TURN, err, NULL);
        return 1;
    }
    return 0;
}

static int finish_transfer(remote_gen *g, const transfer *t, kimi_err *err)
{
    int rc = 0;
    if (g->is_stream) {
        kimi_err serr = {0};
        int r = sse_end(g->sse, on_sse_event, g, &serr);
        if (r == SSE_NOMEM)
            return kimi_fail(err, KIMI_ERR_NOMEM, "server reply: out of memory");
        if (stream_ended(g, err, &rc))
            return rc;
    }
    long status = g->status;
    if (status && (status < 200 || status > 299)) {
        char line[400];
        http_error_line(g, status, g->err_body, g->err_len, "/chat/completions", line,
                        sizeof line);
        return end_turn(g, 0, err, "%s", line);
    }
    if (t->code == CURLE_OK || (openai_stream_has_finish(g->stream) && g->is_stream)) {
        if (!status)
            return end_turn(g, 0, err, "no HTTP reply");
        if (!g->is_stream) {
            char msg[300];
            openai_error_message(g->err_body ? g->err_body : "", g->err_len, msg, sizeof msg);
            return end_turn(g, 0, err, "the reply is not an event stream (Content-Type: %s)%s%s",
                            g->content_type[0] ? g->content_type : "none", msg[0] ? ": " : "",
                            msg);
        }
        if (openai_stream_has_finish(g->stream))   /* complete but for [DONE] */
            return end_turn(g, openai_stream_finish_stop(g->stream), err, NULL);
        if (t->code == CURLE_OK)
            return end_turn(g, 0, err, "the server closed the stream early");
    }
    if (t->code == CURLE_OPERATION_TIMEDOUT && t->connected_at > 0)
        return end_turn(g, 0, err, "no data from the server for %ld s", g->idle_timeout_s);
    if (t->code == CURLE_OPERATION_TIMEDOUT)
        return end_turn(g, 0, err, "cannot connect within %ld ms (%d %s)", g->connect_timeout_ms,
                        t->tries, t->tries == 1 ? "try" : "tries");
    if (retryable(t->code) && !t->got_reply)
        return end_turn(g, 0, err, "cannot connect: %s (%d %s)", t->curl_error, t->tries,
                        t->tries == 1 ? "try" : "tries");
    if (g->is_stream)
        return end_turn(g, 0, err, "the server closed the stream early (%s)", t->curl_error);
    return end_turn(g, 0, err, "%s", t->curl_error);
}

static int remote_pump(generator *gen, generator_event_fn on_event, void *user, kimi_err *err)
{
    remote_gen *g = (remote_gen *)gen;
    uint64_t count;
    ssize_t rd = read(g->efd, &count, sizeof count);   /* nonblocking; resets the counter */
    (void)rd;
    if (!g->running) {
        pthread_mutex_lock(&g->mu);
        g->t.len = 0;
        pthread_mutex_unlock(&g->mu);
        return g->complete;
    }
    g->on_event = on_event;
    g->user = user;
    pthread_mutex_lock(&g->mu);
    char *bytes = g->t.bytes;
    size_t len = g->t.len;
    g->t.bytes = NULL;
    g->t.len = g->t.cap = 0;
    transfer t = g->t;
    pthread_mutex_unlock(&g->mu);
    if (t.oom) {
        free(bytes);
        kimi_fail(err, KIMI_ERR_NOMEM, "server reply: out of memory");
        return -1;
    }
    if (!g->status && t.status) {
        g->status = t.status;
        fit(g->content_type, sizeof g->content_type, "%s", t.content_type);
        g->is_stream = t.status >= 200 && t.status <= 299 &&
                       (!t.content_type[0] || strcasestr(t.content_type, "text/event-stream"));
    }
    if (t.ticks != g->ticks_seen && !t.got_reply && on_event) {
        double seconds = monotonic_seconds() - t.connected_at;
        generator_event e = {.kind = GENERATOR_EVENT_PROGRESS,
                             .progress = {.kind = GENERATOR_PROGRESS_WAITING,
                                          .seconds = seconds > 0 ? seconds : 0, .eta_seconds = -1}};
        on_event(user, &e);
    }
    g->ticks_seen = t.ticks;
    kimi_err framing = {0};
    int rc = take_bytes(g, bytes, len, &framing);
    free(bytes);
    if (rc < 0) {
        kimi_fail(err, KIMI_ERR_NOMEM, "server reply: out of memory");
        return -1;
    }
    if (rc > 0)     /* a server that never ends a line or an event */
        return end_turn(g, 0, err, "%s", framing.msg) ? -1 : 1;
    if (g->over_cap)
        return end_turn(g, 0, err, "the answer is over %zu bytes, more than a context of %ld tokens holds: stopped",
                        answer_cap(g), g->base.context_limit > 0 ? g->base.context_limit : (long)ANSWER_DEFAULT_CONTEXT)
                   ? -1 : 1;
    if (stream_ended(g, err, &rc))
        return rc ? -1 : 1;
    if (g->cancel_requested)
        return end_turn(g, PARSE_STOP_CANCELLED, err, NULL) ? -1 : 1;
    if (t.finished)
        return finish_transfer(g, &t, err) ? -1 : 1;
    return 0;
}

static struct curl_slist *request_headers(const remote_gen *g, const char *accept)
{
    struct curl_slist *h = NULL, *next;
    static const char *const fixed[] = {"Content-Type: application/json", "Expect:"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        if (!(next = curl_slist_append(h, fixed[i])))
            goto fail;
        h = next;
    }
    if (!(next = curl_slist_append(h, accept)))
        goto fail;
    h = next;
    if (g->key) {
        static const char prefix[] = "Authorization: Bearer ";
        size_t n = sizeof prefix + g->key_len;
        char *line = malloc(n);
        if (!line)
            goto fail;
        memcpy(line, prefix, sizeof prefix - 1);
        memcpy(line + sizeof prefix - 1, g->key, g->key_len + 1);
        next = curl_slist_append(h, line);
        wipe_free(line, n);
        if (!next)
            goto fail;
        h = next;
    }
    return h;
fail:
    free_headers(h);
    return NULL;
}

static int remote_start(generator *gen, const generator_request *req, kimi_err *err)
{
    remote_gen *g = (remote_gen *)gen;
    if (g->running)
        return kimi_fail(err, KIMI_ERR_STATE, "server: an answer is already running");
    stop_transfer(g);
    char *body = openai_request_body(req, g->model_name, g->dialect, err);
    if (!body)
        return err->code;
    struct curl_slist *headers = request_headers(g, "Accept: text/event-stream");
    sse_free(g->sse);
    g->sse = NULL;
    openai_stream_free(g->stream);
    g->stream = NULL;
    if (!headers || sse_create(&g->sse, 0, err) ||
        openai_stream_create(&g->stream, on_parse, g, err)) {
        free(body);
        free_headers(headers);
        return err->code ? err->code : kimi_fail(err, KIMI_ERR_NOMEM, "server: out of memory");
    }
    free(g->err_body);
    g->err_body = NULL;
    g->err_len = g->err_cap = 0;
    g->status = 0;
    g->content_type[0] = 0;
    g->is_stream = 0;
    g->ticks_seen = 0;
    g->result = (generator_result){0};
    pthread_mutex_lock(&g->mu);
    free(g->t.bytes);
    g->t = (transfer){0};
    pthread_mutex_unlock(&g->mu);
    uint64_t count;
    ssize_t rd = read(g->efd, &count, sizeof count);
    (void)rd;
    atomic_store(&g->abort_transfer, 0);
    g->body = body;
    g->headers = headers;
    g->t_start = monotonic_seconds();
    g->t_first = g->t_last = 0;
    g->answer_bytes = 0;
    g->over_cap = 0;
    int rc = pthread_create(&g->thread, NULL, transfer_main, g);
    if (rc) {
        free(g->body);
        g->body = NULL;
        free_headers(g->headers);
        g->headers = NULL;
        return kimi_fail(err, KIMI_ERR_IO, "server: cannot start the transfer thread: %s",
                         strerror(rc));
    }
    g->thread_live = 1;
    g->running = 1;
    g->complete = 0;
    g->cancel_requested = 0;
    return 0;
}

static int remote_event_fd(const generator *gen)
{
    return ((const remote_gen *)gen)->efd;
}

static void remote_cancel(generator *gen)
{
    remote_gen *g = (remote_gen *)gen;
    if (!g->running || g->cancel_requested)
        return;
    g->cancel_requested = 1;
    atomic_store(&g->abort_transfer, 1);
    curl_multi_wakeup(g->multi);
    signal_fd(g);
}

static const generator_result *remote_result(const generator *gen)
{
    return &((const remote_gen *)gen)->result;
}

static void remote_close(generator *gen)
{
    remote_gen *g = (remote_gen *)gen;
    if (!g)
        return;
    stop_transfer(g);
    sse_free(g->sse);
    openai_stream_free(g->stream);
    free(g->err_body);
    free(g->t.bytes);
    free(g->model_name);
    wipe_free(g->key, g->key_len);
    openai_endpoints_free(&g->ep);
    if (g->multi)
        curl_multi_cleanup(g->multi);
    if (g->efd >= 0)
        close(g->efd);
    pthread_mutex_destroy(&g->mu);
    free(g);
    curl_global_cleanup();
}

static const generator_ops remote_ops = {
    .start = remote_start,
    .event_fd = remote_event_fd,
    .pump = remote_pump,
    .cancel = remote_cancel,
    .result = remote_result,
    .close = remote_close,
};

/* ---- open ---- */

void remote_options_init(remote_options *o)
{
    *o = (remote_options){
        .dialect = OPENAI_DIALECT_AUTO,
        .connect_timeout_ms = 10000,
        .idle_timeout_s = 120,
        .retries = 3,
        .retry_delay_ms = 500,
    };
}

/* The key's first line, trimmed; it must be printable ASCII (it goes into a header). */
static int read_key(remote_gen *g, const remote_options *o, kimi_err *err)
{
    char *text = NULL;
    size_t len = 0;
    const char *env = o->api_key_env && *o->api_key_env ? o->api_key_env : "OPENAI_API_KEY";
    char where[200];
    if (o->api_key_file) {
        fit(where, sizeof where, "the API key file %.150s", o->api_key_file);
        FILE *f = fopen(o->api_key_file, "re");
        if (!f)
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: %s", where, strerror(errno));
        char line[4096];
        if (!fgets(line, sizeof line, f))
            line[0] = 0;
        fclose(f);
        len = strcspn(line, "\r\n");
        text = line;
        while (len && (text[len - 1] == ' ' || text[len - 1] == '\t'))
            len--;
        while (len && (*text == ' ' || *text == '\t'))
            text++, len--;
        if (!len) {
            explicit_bzero(line, sizeof line);
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: the first line is empty", where);
        }
        g->key = malloc(len + 1);
        if (g->key) {
            memcpy(g->key, text, len);
            g->key[len] = 0;
        }
        explicit_bzero(line, sizeof line);
        fit(g->key_hint, sizeof g->key_hint, "check the API key in %s", where);
    } else {
        fit(where, sizeof where, "$%.100s", env);
        const char *value = getenv(env);
        if (!value)
            value = "";
        while (*value && strchr(" \t\r\n", *value))
            value++;
        len = strlen(value);
        while (len && strchr(" \t\r\n", value[len - 1]))
            len--;      /* export KEY="$(cat file)" and friends leave white space */
        if (!len) {
            if (o->api_key_env)
                return kimi_fail(err, KIMI_ERR_USAGE, "the API key variable %s is not set", where);
            fit(g->key_hint, sizeof g->key_hint,
                "no API key was sent: set %s (or name another variable with --api-key-env)", where);
            return 0;
        }
        g->key = strndup(value, len);
        fit(g->key_hint, sizeof g->key_hint, "check the API key in %s (named by --api-key-env)",
            where);
    }
    if (!g->key)
        return kimi_fail(err, KIMI_ERR_NOMEM, "API key: out of memory");
    g->key_len = len;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)g->key[i] <= ' ' || (unsigned char)g->key[i] >= 0x7f)
            return kimi_fail(err, KIMI_ERR_USAGE,
                             "the API key in %s holds a space, a control character or non-ASCII "
                             "text (byte %zu)", where, i);
    return 0;
}

typedef struct {
    char *data;
    size_t len, cap;
    int got_reply;
} models_reply;

static size_t models_write(char *ptr, size_t size, size_t n, void *user)
{
    models_reply *r = user;
    size_t len = size * n;
    r->got_reply = 1;
    if (len > MODELS_BODY_MAX - r->len || text_append(&r->data, &r->len, &r->cap, ptr, len))
        return 0;
    return len;
}

static size_t models_header(char *ptr, size_t size, size_t n, void *user)
{
    (void)ptr;
    ((models_reply *)user)->got_reply = 1;
    return size * n;
}

/* GET /v1/models: the model (the first listed when want is NULL) and its context. */
static int fetch_models(remote_gen *g, const char *want, char *note, size_t note_cap,
                        kimi_err *err)
{
    struct curl_slist *headers = request_headers(g, "Accept: application/json");
    if (!headers)
        return kimi_fail(err, KIMI_ERR_NOMEM, "server: out of memory");
    models_reply r = {0};
    char errbuf[CURL_ERROR_SIZE];
    CURLcode code = CURLE_OK;
    long status = 0, delay = g->retry_delay_ms;
    int tries = 0;
    for (;;) {
        tries++;
        r.len = 0;
        r.got_reply = 0;
        errbuf[0] = 0;
        CURL *easy = curl_easy_init();
        if (!easy) {
            code = CURLE_OUT_OF_MEMORY;
            break;
        }
        setup_common(easy, g, errbuf);
        curl_easy_setopt(easy, CURLOPT_URL, g->ep.models_url);
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, models_write);
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, &r);
        curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, models_header);
        curl_easy_setopt(easy, CURLOPT_HEADERDATA, &r);
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)MODELS_TIMEOUT_MS);
        code = curl_easy_perform(easy);
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(easy);
        if (code == CURLE_OK || !retryable(code) || r.got_reply || tries > g->retries)
            break;
        struct timespec ts = {delay / 1000, (delay % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        delay *= 2;
    }
    free_headers(headers);
    int rc = 0;
    char line[400];
    if (code != CURLE_OK) {
        if (code == CURLE_OPERATION_TIMEDOUT && !r.got_reply)
            fit(line, sizeof line, "cannot connect within %ld ms (%d %s)",
                g->connect_timeout_ms, tries, tries == 1 ? "try" : "tries");
        else if (retryable(code) && !r.got_reply)
            fit(line, sizeof line, "cannot connect: %s (%d %s)", errbuf[0] ? errbuf :
                curl_easy_strerror(code), tries, tries == 1 ? "try" : "tries");
        else
            fit(line, sizeof line, "GET /models: %s",
                errbuf[0] ? errbuf : curl_easy_strerror(code));
        rc = KIMI_ERR_IO;
    } else if (status < 200 || status > 299) {
        char http[400];
        http_error_line(g, status, r.data, r.len, "/models", http, sizeof http);
        if (want && status != 401 && status != 403) {
            fit(note, note_cap, "context unknown: GET /models answered %ld", status);
        } else {
            fit(line, sizeof line, "GET /models: %s", http);
            rc = KIMI_ERR_IO;
        }
    } else {
        json_error_t jerr;
        json_t *j = json_loadb(r.data ? r.data : "", r.len, 0, &jerr);
        json_t *data = json_object_get(j, "data"), *found = NULL, *m;
        size_t i;
        json_array_foreach(data, i, m) {
            const json_t *id = json_object_get(m, "id");
            if (json_is_string(id) && (!want || !strcmp(json_string_value(id), want))) {
                found = m;
                break;
            }
        }
        if (!found && !want) {
            fit(line, sizeof line, "GET /models lists no model%s; name one (--server-model)",
                j ? "" : " (the reply is not JSON)");
            rc = KIMI_ERR_IO;
        } else if (!found) {
            fit(note, note_cap, "not in the server's /models list; context unknown");
        } else {
            if (!want && !(g->model_name = strdup(json_string_value(json_object_get(found, "id"))))) {
                fit(line, sizeof line, "out of memory");
                rc = KIMI_ERR_NOMEM;
            }
            const json_t *ctx = json_object_get(found, "max_model_len");
            if (!json_is_integer(ctx))
                ctx = json_object_get(found, "context_length");
            if (json_is_integer(ctx) && json_integer_value(ctx) > 0)
                g->base.context_limit = (long)json_integer_value(ctx);
            fit(note, note_cap, "%s%s", want ? "" : "the first model the server lists",
                g->base.context_limit ? "" : want ? "context unknown" : "; context unknown");
        }
        json_decref(j);
    }
    free(r.data);
    if (rc) {
        kimi_fail(err, rc, "server %s: %s", g->ep.origin, line);
        redact_key(g, err->msg, sizeof err->msg);
    }
    return rc;
}

int generator_remote_open(generator **out, const remote_options *o, kimi_err *err)
{
    *out = NULL;
    if (o->connect_timeout_ms <= 0 || o->idle_timeout_s < 1 || o->retries < 0 ||
        o->retries > 10 || o->retry_delay_ms < 0)
        return kimi_fail(err, KIMI_ERR_USAGE,
                         "server options: connect timeout > 0 ms, idle timeout >= 1 s, retries "
                         "0..10 and retry delay >= 0 ms");
    if (curl_global_init(CURL_GLOBAL_DEFAULT))
        return kimi_fail(err, KIMI_ERR_IO, "server: libcurl failed to initialise");
    remote_gen *g = calloc(1, sizeof *g);
    if (!g) {
        curl_global_cleanup();
        return kimi_fail(err, KIMI_ERR_NOMEM, "server: out of memory");
    }
    g->efd = -1;
    pthread_mutex_init(&g->mu, NULL);
    g->base.ops = &remote_ops;
    g->connect_timeout_ms = o->connect_timeout_ms;
    g->idle_timeout_s = o->idle_timeout_s;
    g->retries = o->retries;
    g->retry_delay_ms = o->retry_delay_ms;
    int rc = openai_endpoints_parse(&g->ep, o->url, err);
    if (!rc)
        rc = read_key(g, o, err);
    if (!rc) {
        g->dialect = openai_dialect_resolve(o->dialect, g->ep.host);
        g->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        g->multi = curl_multi_init();
        if (g->efd < 0 || !g->multi)
            rc = kimi_fail(err, KIMI_ERR_IO, "server: cannot set up the transfer: %s",
                           g->efd < 0 ? strerror(errno) : "curl_multi_init failed");
    }
    int named = o->model && *o->model;
    if (!rc && named && !(g->model_name = strdup(o->model)))
        rc = kimi_fail(err, KIMI_ERR_NOMEM, "server: out of memory");
    char note[200] = "";
    if (!rc)
        rc = fetch_models(g, named ? o->model : NULL, note, sizeof note, err);
    if (rc) {
        remote_close(&g->base);
        return rc;
    }
    utf8_one_line(g->model_name, strlen(g->model_name), g->base.model, sizeof g->base.model);
    fit(g->base.backend, sizeof g->base.backend, "server %.110s", g->ep.origin);
    char ctx[48] = "";
    if (g->base.context_limit)
        fit(ctx, sizeof ctx, " · context %ld", g->base.context_limit);
    char key[160];
    if (!g->key)
        fit(key, sizeof key, "no API key");
    else if (o->api_key_file)
        fit(key, sizeof key, "API key from the file %.120s", o->api_key_file);
    else
        fit(key, sizeof key, "API key from $%.120s",
                 o->api_key_env && *o->api_key_env ? o->api_key_env : "OPENAI_API_KEY");
    fit(g->base.summary, sizeof g->base.summary,
             "server %.200s · model %.128s%s%s%s%s · %s request fields · %s", g->ep.base,
             g->base.model, note[0] ? " (" : "", note, note[0] ? ")" : "", ctx,
             openai_dialect_name(g->dialect), key);
    *out = &g->base;
    return 0;
}
