/* engine: the scheduler thread (requests, prefix reuse, prefill, decode, sampling,
 * cancellation) over a backend, and the bounded event queue the app polls. */
#include "engine/runtime/engine.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "engine/backend/kv_shard.h"
#include "engine/base/cpu_count.h"
#include "engine/base/monotonic.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/speculate.h"

/* Prompt tokens per forward call during prefill: a prefill stopped by a cancel (seen between
 * layers, backend_options.on_layer) keeps the chunks it finished in the cache for reuse. */
#define PREFILL_CHUNK 256
#define MAX_PENDING 64
#define DEFAULT_EVENT_CAPACITY 4096
#define CPU_BUDGET_FRACTION 0.75
/* Seconds between progress reports (loading, prefill): at most ~10 a second. */
#define PROGRESS_INTERVAL 0.1
/* Event slots past event_capacity that only a shutdown uses, so that it never waits for a
 * reader who may be the very thread waiting in engine_shutdown: once shutting down, the
 * running request emits at most 3 more events (one already on its way to the queue, then at
 * most an ERROR or a TOKEN, then its DONE) and each pending one only its DONE. */
#define SHUTDOWN_RESERVE (MAX_PENDING + 3)

typedef struct request {
    uint64_t id;
    int32_t *tokens;                /* [n_tokens] */
    int n_tokens;
    sampler_params sampling;
    int max_new_tokens;             /* 0 = until the context is full */
    int32_t *stop_ids;              /* [n_stop_ids] */
    int n_stop_ids;
    float *first_logits;            /* caller's [vocab] or NULL */
    atomic_int cancelled;
    struct request *next;
} request;

struct engine {
    model_weights weights;
    int weights_loaded;
    backend *be;
    engine_info info;
    kv_cache cache;                 /* scheduler thread only */
    float *logits;                  /* [vocab], scheduler thread only */
    float *draft_logits;            /* [SPECULATE_MAX_DRAFT + 1][vocab] when speculating */
    /* The prefill in progress (scheduler thread only; on_layer reads it). */
    struct {
        request *r;
        int done, total;            /* tokens before the current forward call; to prefill */
        double reached;             /* tokens through every layer, fractional (on_layer's count) */
        double start, last_report;  /* monotonic_seconds() */
    } prefill;

    pthread_t scheduler;
    int scheduler_running;
    pthread_mutex_t lock;           /* everything below */
    pthread_cond_t work;            /* a request was queued, or shutdown */
    pthread_cond_t space;           /* an event was taken, or shutdown */
    pthread_cond_t arrived;         /* an event was queued */
    request *pending_head, *pending_tail;
    int n_pending;
    request *running;
    uint64_t next_id;               /* ids 1 .. next_id - 1 were issued */
    int shutting_down;
    int scheduler_exited;           /* no event can come any more */

    engine_event *events;           /* ring [event_capacity + SHUTDOWN_RESERVE] */
    int event_capacity, event_head, n_events;
    int event_fd;                   /* eventfd: non-zero count while events wait */
};

const char *engine_stop_reason_name(engine_stop_reason reason)
{
    switch (reason) {
    case ENGINE_STOP_TOKEN: return "stop_token";
    case ENGINE_STOP_MAX_TOKENS: return "max_tokens";
    case ENGINE_STOP_CANCELLED: return "cancelled";
    case ENGINE_STOP_CONTEXT_FULL: return "context_full";
    case ENGINE_STOP_ERROR: return "error";
    }
    return "unknown";
}

static void request_free(request *r)
{
    if (!r)
        return;
    free(r->tokens);
    free(r->stop_ids);
    free(r);
}

/* ---- event queue ---- */

/* The eventfd mirrors "the queue is not empty" (raised on the first event, cleared when the
 * last is taken). A write fails only when the count would overflow and a read only when it is
 * already zero, neither of which can happen here, so their results carry nothing to handle. */
static void event_fd_raise(int fd)
{
    uint64_t one = 1;
    ssize_t rc = write(fd, &one, sizeof one);
    (void)rc;
}

static void event_fd_clear(int fd)
{
    uint64_t count;
    ssize_t rc = read(fd, &count, sizeof count);
    (void)rc;
}

/* Queue ev, waiting while the queue is full; during a shutdown the reserve slots hold what
 * the reader has not made room for (see SHUTDOWN_RESERVE), so nothing is dropped. */
static void push_event(engine *e, const engine_event *ev)
{
    int slots = e->event_capacity + SHUTDOWN_RESERVE;
    pthread_mutex_lock(&e->lock);
    while (e->n_events >= (e->shutting_down ? slots : e->event_capacity))
        pthread_cond_wait(&e->space, &e->lock);
    e->events[(e->event_head + e->n_events) % slots] = *ev;
    if (e->n_events++ == 0)
        event_fd_raise(e->event_fd);
    pthread_cond_broadcast(&e->arrived);
    pthread_mutex_unlock(&e->lock);
}

int engine_event_fd(const engine *e)
{
    return e->event_fd;
}

int engine_next_event(engine *e, engine_event *ev, int timeout_ms)
{
    struct timespec deadline;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&e->lock);
    while (e->n_events == 0 && timeout_ms != 0 && !e->scheduler_exited) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&e->arrived, &e->lock);
        } else if (pthread_cond_timedwait(&e->arrived, &e->lock, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    int got = e->n_events > 0;
    if (got) {
        *ev = e->events[e->event_head];
        e->event_head = (e->event_head + 1) % (e->event_capacity + SHUTDOWN_RESERVE);
        if (--e->n_events == 0)
            event_fd_clear(e->event_fd);
        pthread_cond_signal(&e->space);
    }
    pthread_mutex_unlock(&e->lock);
    return got;
}

/* ---- the scheduler ---- */

static void emit_token(engine *e, const request *r, int32_t token, int index)
{
    engine_event ev = {.kind = ENGINE_EVENT_TOKEN, .request = r->id, .token = token, .index = index};
    push_event(e, &ev);
}

static void emit_error(engine *e, const request *r, const char *message)
{
    engine_event ev = {.kind = ENGINE_EVENT_ERROR, .request = r->id};
    snprintf(ev.message, sizeof ev.message, "%s", message);
    push_event(e, &ev);
}

static void emit_done(engine *e, const request *r, engine_stats *st)
{
    st->decode_tok_s = st->decode_seconds > 0 ? st->decoded_tokens / st->decode_seconds : 0;
    engine_event ev = {.kind = ENGINE_EVENT_DONE, .request = r->id, .stats = *st};
    push_event(e, &ev);
}

static int is_stop_id(const request *r, int32_t id)
{
    for (int i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == id)
            return 1;
    return 0;
}

static engine_progress progress_at(engine_progress_kind kind, double done, double total, double seconds)
{
    double rate = seconds > 0 ? done / seconds : 0;
    return (engine_progress){kind, done, total, seconds, rate, rate > 0 ? (total - done) / rate : -1};
}

static void emit_prefill_progress(engine *e, double done)
{
    double now = monotonic_seconds(), seconds = now - e->prefill.start;
    engine_event ev = {.kind = ENGINE_EVENT_PROGRESS, .request = e->prefill.r->id,
                       .progress = progress_at(ENGINE_PROGRESS_PREFILL, done, e->prefill.total, seconds)};
    e->prefill.last_report = now;
    push_event(e, &ev);
}

/* backend_options.on_layer: stop a cancelled prefill within a layer, report progress at most
 * every PROGRESS_INTERVAL (the final report, done == total, comes from run_request). */
static int on_layer(void *user, double tokens_done)
{
    engine *e = user;
    if (!e->prefill.r)
        return 0;
    if (atomic_load(&e->prefill.r->cancelled))
        return 1;
    double done = e->prefill.done + tokens_done;
    e->prefill.reached = done;
    if (done < e->prefill.total && monotonic_seconds() - e->prefill.last_report >= PROGRESS_INTERVAL)
        emit_prefill_progress(e, done);
    return 0;
}

/* Run tokens [n] at the end of the cache; logits of the last one into e->logits when asked. On
 * failure, or BACKEND_STOPPED (a cancel), the cache keeps only what came before this call. */
static int forward_append(engine *e, const int32_t *tokens, int n, int want_logits, kimi_err *err)
{
    long start = e->cache.n;
    int last_row = n - 1;
    int rc = backend_forward(e->be, tokens, n, start, &last_row, want_logits ? 1 : 0, e->logits, err);
    if (rc)
        return rc;
    return kv_cache_append(&e->cache, tokens, n, err);
}

/* Send one generated id; 1 when the request ends with it (a stop id, max_new_tokens, a
 * cancel, or no cache position left for the next step), st->stop_reason saying why. */
static int emit_generated(engine *e, const request *r, int32_t token, engine_stats *st)
{
    emit_token(e, r, token, st->generated_tokens++);
    if (is_stop_id(r, token)) {
        st->stop_reason = ENGINE_STOP_TOKEN;
        st->stop_id = token;
        return 1;
    }
    if (r->max_new_tokens > 0 && st->generated_tokens >= r->max_new_tokens) {
        st->stop_reason = ENGINE_STOP_MAX_TOKENS;
        return 1;
    }
    if (atomic_load(&r->cancelled)) {
        st->stop_reason = ENGINE_STOP_CANCELLED;
        return 1;
    }
    if (e->cache.n >= e->cache.capacity) {
        st->stop_reason = ENGINE_STOP_CONTEXT_FULL;
        return 1;
    }
    return 0;
}

/* The draft to verify after token (generated, not yet in the cache): up to what the policy
 * wants, shortened so the verify step fits the cache and max_new_tokens (the step yields up to
 * k + 1 tokens). */
static int draft_length(engine *e, const request *r, speculate_policy *policy, int32_t token,
                        const engine_stats *st, int32_t *draft)
{
    if (policy->setting == SPECULATE_OFF)
        return 0;
    long room = e->cache.capacity - e->cache.n - 1;
    if (r->max_new_tokens > 0 && r->max_new_tokens - st->generated_tokens - 1 < room)
        room = r->max_new_tokens - st->generated_tokens - 1;
    int want = room < SPECULATE_MAX_DRAFT ? (int)room : SPECULATE_MAX_DRAFT;
    if (want <= 0)
        return 0;
    /* The history is the cache's ids and the pending token, written just past them (the slot
     * is free: emit_generated checked that a position is left). */
    e->cache.tokens[e->cache.n] = token;
    int available = speculate_lookup(e->cache.tokens, e->cache.n + 1, want, draft);
    return speculate_policy_length(policy, available);
}

/* One speculative step: token and draft[k] through the backend at once, then each drafted id
 * tested against the logits before it (sampler_sample_draft); the accepted ones are sent as
 * generated, and *next is the id the step produced after them. The cache keeps token and the
 * accepted drafts but the one a request ended on, nothing after them. *stopped: the request
 * ended on an accepted draft. */
static int verify_draft(engine *e, const request *r, sampler *smp, int32_t token, const int32_t *draft, int k,
                        engine_stats *st, int32_t *next, int *accepted, int *stopped, kimi_err *err)
{
    int32_t tokens[SPECULATE_MAX_DRAFT + 1];
    tokens[0] = token;
    memcpy(tokens + 1, draft, (size_t)k * sizeof *draft);
    long start = e->cache.n;
    int rc = backend_decode_tokens(e->be, tokens, k + 1, start, e->draft_logits, err);
    if (rc)
        return rc;
    /* The cache records token now and each accepted draft after it is sent, so that the checks
     * of emit_generated see the positions a one-token step would have. */
    if ((rc = kv_cache_append(&e->cache, tokens, 1, err)))
        return rc;
    st->drafted_tokens += k;
    size_t vocab = (size_t)e->info.vocab;
    int i = 0, taken;
    for (; i < k; i++) {
        *next = sampler_sample_draft(smp, e->draft_logits + (size_t)i * vocab, draft[i], &taken);
        if (!taken)
            break;
        ++*accepted;
        st->accepted_tokens++;
        st->decoded_tokens++;
        if (emit_generated(e, r, draft[i], st)) {
            *stopped = 1;
            break;
        }
        /* Kept only once it is not the last token sent, as a one-token step would have run
         * it: the cache then holds exactly what it holds without speculation. */
        if ((rc = kv_cache_append(&e->cache, &draft[i], 1, err)))
            return rc;
    }
    if (i == k && !*stopped)
        *next = sampler_sample(smp, e->draft_logits + (size_t)k * vocab);
    return 0;
}

/* The prefill's time and rate, whether it completed or stopped part-way (prefill.reached). */
static void prefill_end(engine *e, engine_stats *st, double t0)
{
    st->prefill_seconds = monotonic_seconds() - t0;
    st->prefill_tok_s = st->prefill_seconds > 0 ? e->prefill.reached / st->prefill_seconds : 0;
    e->prefill.r = NULL;
}

static void run_request(engine *e, request *r)
{
    engine_stats st = {.prompt_tokens = r->n_tokens, .stop_id = -1, .stop_reason = ENGINE_STOP_CANCELLED};
    kimi_err err = {0};
    sampler smp;
    if (sampler_init(&smp, e->info.vocab, &r->sampling, &err)) {
        emit_error(e, r, err.msg);
        st.stop_reason = ENGINE_STOP_ERROR;
        emit_done(e, r, &st);
        return;
    }

    long reused = kv_cache_reusable(&e->cache, r->tokens, r->n_tokens);
    kv_cache_truncate(&e->cache, reused);
    st.reused_tokens = (int)reused;

    /* Until the prefill completes, prefilled_tokens counts the chunks kept in the cache and
     * prefill.reached the work done (a chunk stopped part-way in proportion), so a prefill
     * cancelled or failing part-way reports what it did, not the whole prompt. */
    double t0 = monotonic_seconds();
    e->prefill.r = r;
    e->prefill.total = r->n_tokens - (int)reused;
    e->prefill.reached = 0;
    e->prefill.start = e->prefill.last_report = t0;
    for (int done = (int)reused; done < r->n_tokens;) {
        if (atomic_load(&r->cancelled))
            goto stopped;
        int n = r->n_tokens - done < PREFILL_CHUNK ? r->n_tokens - done : PREFILL_CHUNK;
        e->prefill.done = done - (int)reused;
        int rc = forward_append(e, r->tokens + done, n, done + n == r->n_tokens, &err);
        if (rc == BACKEND_STOPPED)
            goto stopped;
        if (rc)
            goto failed;
        done += n;
        st.prefilled_tokens = done - (int)reused;
        e->prefill.reached = st.prefilled_tokens;
    }
    emit_prefill_progress(e, st.prefilled_tokens);
    e->prefill.r = NULL;
    if (r->first_logits)
        memcpy(r->first_logits, e->logits, (size_t)e->info.vocab * sizeof *e->logits);
    int32_t token = sampler_sample(&smp, e->logits);
    prefill_end(e, &st, t0);

    speculate_policy policy;
    speculate_policy_init(&policy, e->info.speculate);
    int32_t draft[SPECULATE_MAX_DRAFT];
    for (;;) {
        if (token < 0) {
            kimi_fail(&err, KIMI_ERR_MODEL, "the forward pass produced no finite logit at position %ld: the "
                      "activations were finite through the last layer, so the final norm or lm_head made them NaN "
                      "or inf", e->cache.n - 1);
            goto failed;
        }
        if (emit_generated(e, r, token, &st))
            break;
        double t = monotonic_seconds();
        int k = draft_length(e, r, &policy, token, &st, draft);
        if (k == 0) {
            if (forward_append(e, &token, 1, 1, &err))
                goto failed;
            token = sampler_sample(&smp, e->logits);
            speculate_policy_plain_step(&policy, monotonic_seconds() - t);
        } else {
            int accepted = 0, stopped = 0;
            if (verify_draft(e, r, &smp, token, draft, k, &st, &token, &accepted, &stopped, &err))
                goto failed;
            speculate_policy_verify_step(&policy, k, accepted, monotonic_seconds() - t);
            if (stopped) {
                st.decode_seconds += monotonic_seconds() - t;
                st.decode_steps++;
                break;
            }
        }
        st.decode_seconds += monotonic_seconds() - t;
        st.decode_steps++;
        st.decoded_tokens++;
    }
    goto finish;

stopped:
    prefill_end(e, &st, t0);
    goto finish;
failed:
    if (e->prefill.r)
        prefill_end(e, &st, t0);
    emit_error(e, r, err.msg);
    st.stop_reason = ENGINE_STOP_ERROR;
finish:
    e->prefill.r = NULL;
    st.cache_clamps = backend_take_cache_clamps(e->be);
    sampler_free(&smp);
    emit_done(e, r, &st);
}

static void *scheduler_main(void *arg)
{
    engine *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!e->pending_head && !e->shutting_down)
            pthread_cond_wait(&e->work, &e->lock);
        request *r = e->pending_head;
        if (!r)
            break;
        e->pending_head = r->next;
        if (!e->pending_head)
            e->pending_tail = NULL;
        e->n_pending--;
        e->running = r;
        pthread_mutex_unlock(&e->lock);

        if (atomic_load(&r->cancelled)) {
            engine_stats st = {.prompt_tokens = r->n_tokens, .stop_id = -1, .stop_reason = ENGINE_STOP_CANCELLED};
            emit_done(e, r, &st);
        } else {
            run_request(e, r);
        }

        pthread_mutex_lock(&e->lock);
        e->running = NULL;
        request_free(r);
    }
    e->scheduler_exited = 1;
    pthread_cond_broadcast(&e->arrived);
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- requests ---- */

long engine_positions_needed(int n_tokens, int max_new_tokens)
{
    return (long)n_tokens + (max_new_tokens > 0 ? max_new_tokens : 1) - 1;
}

int engine_submit(engine *e, const engine_request *req, uint64_t *id, kimi_err *err)
{
    if (req->n_tokens < 1 || !req->tokens)
        return kimi_fail(err, KIMI_ERR_INPUT, "request: the prompt is empty (at least one token id is needed)");
    for (int i = 0; i < req->n_tokens; i++)
        if (req->tokens[i] < 0 || req->tokens[i] >= e->info.vocab)
            return kimi_fail(err, KIMI_ERR_INPUT, "request: token %d is id %" PRId32 ", outside the vocabulary [0, %d)",
                             i, req->tokens[i], e->info.vocab);
    if (req->n_stop_ids < 0 || (req->n_stop_ids > 0 && !req->stop_ids))
        return kimi_fail(err, KIMI_ERR_INPUT, "request: bad stop id list");
    if (req->max_new_tokens < 0)
        return kimi_fail(err, KIMI_ERR_INPUT, "request: max_new_tokens %d must be 0 (until the context is full) or positive",
                         req->max_new_tokens);
    int rc = sampler_params_check(&req->sampling, err);
    if (rc)
        return kimi_err_prefix(err, rc, "request");
    long need = engine_positions_needed(req->n_tokens, req->max_new_tokens);
    if (need > e->info.max_context) {
        char hint[128] = "";
        if (e->info.max_fit > e->info.max_context)
            snprintf(hint, sizeof hint, "; up to %ld fit in the memory budget: reopen with a larger max context",
                     e->info.max_fit);
        else if (e->info.max_fit == e->info.max_context)
            snprintf(hint, sizeof hint, ", the largest context that fits in the memory budget");
        if (req->max_new_tokens > 0)
            return kimi_fail(err, KIMI_ERR_STATE,
                             "context full: prompt %d + max_new_tokens %d - 1 (the last new token takes no position) "
                             "= %ld positions > %ld in the KV cache%s",
                             req->n_tokens, req->max_new_tokens, need, e->info.max_context, hint);
        return kimi_fail(err, KIMI_ERR_STATE, "context full: the prompt's %d positions > %ld in the KV cache%s",
                         req->n_tokens, e->info.max_context, hint);
    }

    request *r = calloc(1, sizeof *r);
    if (r) {
        r->tokens = malloc((size_t)req->n_tokens * sizeof *r->tokens);
        r->stop_ids = malloc(((size_t)req->n_stop_ids + 1) * sizeof *r->stop_ids);
    }
    if (!r || !r->tokens || !r->stop_ids) {
        request_free(r);
        return kimi_fail(err, KIMI_ERR_NOMEM, "request: out of memory for %d token ids", req->n_tokens);
    }
    memcpy(r->tokens, req->tokens, (size_t)req->n_tokens * sizeof *r->tokens);
    if (req->n_stop_ids > 0)
        memcpy(r->stop_ids, req->stop_ids, (size_t)req->n_stop_ids * sizeof *r->stop_ids);
    r->n_tokens = req->n_tokens;
    r->n_stop_ids = req->n_stop_ids;
    r->sampling = req->sampling;
    r->max_new_tokens = req->max_new_tokens;
    r->first_logits = req->first_logits;
    atomic_init(&r->cancelled, 0);

    pthread_mutex_lock(&e->lock);
    if (e->shutting_down)
        rc = kimi_fail(err, KIMI_ERR_STATE, "the engine is shut down: no new requests");
    else if (e->n_pending >= MAX_PENDING)
        rc = kimi_fail(err, KIMI_ERR_STATE, "%d requests are already waiting: wait for one to finish", MAX_PENDING);
    if (rc) {
        pthread_mutex_unlock(&e->lock);
        request_free(r);
        return rc;
    }
    r->id = e->next_id++;
    if (e->pending_tail)
        e->pending_tail->next = r;
    else
        e->pending_head = r;
    e->pending_tail = r;
    e->n_pending++;
    *id = r->id;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->lock);
    return 0;
}

int engine_cancel(engine *e, uint64_t id, kimi_err *err)
{
    pthread_mutex_lock(&e->lock);
    if (id == 0 || id >= e->next_id) {
        pthread_mutex_unlock(&e->lock);
        return kimi_fail(err, KIMI_ERR_STATE, "cancel: unknown request id %" PRIu64, id);
    }
    if (e->running && e->running->id == id)
        atomic_store(&e->running->cancelled, 1);
    for (request *r = e->pending_head; r; r = r->next)
        if (r->id == id)
            atomic_store(&r->cancelled, 1);
    pthread_mutex_unlock(&e->lock);
    return 0;
}

/* ---- open / close ---- */

/* MemAvailable from /proc/meminfo in bytes; 0 when unreadable. */
static size_t memory_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    fclose(f);
    return (size_t)kib * 1024;
}

static const char *backend_name(backend_kind kind)
{
    return kind == BACKEND_CUDA ? "cuda" : "cpu";
}

/* The load's progress, from weights_page_in (CPU) or backend_options.on_load (CUDA), both
 * about ten times a second, passed on to engine_options.on_load_progress; its answer (stop or
 * go on) is passed back. done/total are kept for the message of a cancelled load. */
typedef struct {
    const engine_options *opt;
    double start;
    size_t done, total;
} load_report;

static int report_load(void *user, size_t done, size_t total)
{
    load_report *lr = user;
    lr->done = done;
    lr->total = total;
    if (!lr->opt->on_load_progress)
        return 0;
    engine_progress p = progress_at(ENGINE_PROGRESS_LOAD, (double)done, (double)total, monotonic_seconds() - lr->start);
    return lr->opt->on_load_progress(lr->opt->progress_user, &p);
}

static int load_cancelled(const load_report *lr, kimi_err *err)
{
    return kimi_fail(err, KIMI_ERR_CANCELLED, "loading cancelled after %.1f of %.1f GB", (double)lr->done / 1e9,
                     (double)lr->total / 1e9);
}

/* The one line engine_info.summary says: what was chosen for the user, and why. */
static void write_summary(engine_info *info, const char *threads_note, const char *weights_note,
                          const kv_cache_plan *plan)
{
    if (info->backend == BACKEND_CPU)
        snprintf(info->summary, sizeof info->summary,
                 "%s backend, tp %d, %d threads per rank%s, weights read in by %d thread%s%s%s; %s",
                 backend_name(info->backend), info->tp, info->threads_per_rank, threads_note, info->load_threads,
                 info->load_threads == 1 ? "" : "s",
                 weights_note,
                 info->activations == CPU_ACTIVATIONS_INT8 ? ", NVFP4 products with int8 activations (not the fp32 "
                                                             "reference)" : "",
                 plan->summary);
    else
        snprintf(info->summary, sizeof info->summary, "%s backend, tp %d; %s", backend_name(info->backend), info->tp,
                 plan->summary);
}

/* CUDA: what the open measured (backend_runtime_overhead), added to the summary: the device
 * memory the runtime took beyond the plan and, when the cache was lowered for it, from what. */
static void append_measured_overhead(engine_info *info, long planned_context)
{
    if (info->backend != BACKEND_CUDA)
        return;
    size_t used = strlen(info->summary);
    char lowered[96] = "";
    if (info->max_context < planned_context)
        snprintf(lowered, sizeof lowered, ": max context lowered from %ld to %ld", planned_context, info->max_context);
    snprintf(info->summary + used, sizeof info->summary - used, "; measured at open: %.1f MiB of device %d taken beyond "
             "the plan (NCCL, cuBLASLt, the runtime), the cache sized after it%s",
             (double)info->runtime_overhead_bytes / 1048576.0, info->overhead_device, lowered);
}

/* CUDA: which communicator runs the all-reduces (the peer all-reduce, or NCCL and why not the
 * peer one), added to the summary. */
static void append_communicator(engine_info *info, const char *description)
{
    if (!description)
        return;
    size_t used = strlen(info->summary);
    snprintf(info->summary + used, sizeof info->summary - used, "; all-reduces: %s", description);
}

/* The checkpoint's KV-cache request (hf_quant_config.json) when it differs from the format in
 * use: the engine follows what it was opened with (engine_options.kv_cache), so the user learns
 * that the other format exists and what it would hold. */
static void write_kv_cache_note(engine_info *info, const model_config *cfg)
{
    const char *algo = cfg->kv_cache_quant_algo;
    info->kv_cache_note[0] = 0;
    if (!algo[0] || !strcasecmp(algo, kv_cache_format_name(info->kv_cache)))
        return;
    int n = snprintf(info->kv_cache_note, sizeof info->kv_cache_note,
                     "the checkpoint asks for an %s KV cache (kv_cache_quant_algo %s); kimi-chat keeps the MLA latent "
                     "cache in %s", algo, algo, kv_cache_format_name(info->kv_cache));
    if (!strcasecmp(algo, "fp8") && info->max_fit_fp8 > 0 && n > 0 && (size_t)n < sizeof info->kv_cache_note)
        snprintf(info->kv_cache_note + n, sizeof info->kv_cache_note - (size_t)n,
                 " (--kv-cache fp8 would hold %ld positions)", info->max_fit_fp8);
}

/* Threads that read the weights in when the caller leaves it to the engine: reads wait on the
 * disk more than they compute, so two per core, at least 4 (a queue deep enough for an NVMe
 * drive) and at most 16. */
static int default_load_threads(long cores)
{
    long n = 2 * cores;
    return n < 4 ? 4 : n > 16 ? 16 : (int)n;
}

static int engine_start(engine *e, const engine_options *opt, kimi_err *err)
{
    double t0 = monotonic_seconds();
    int rc;
    if (opt->tp < 1 || opt->tp > 8)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d: must be between 1 and 8", opt->tp);
    int dcp = opt->dcp ? opt->dcp : 1;
    if ((rc = kv_shard_check(opt->tp, dcp, err)))
        return rc;
    if (opt->threads_per_rank < 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "--threads %d: must be 0 (automatic) or positive", opt->threads_per_rank);
    if (opt->max_context < 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "max context %ld: must be 0 (from the memory budget) or positive",
                         opt->max_context);
    if (opt->load_threads < 0 || opt->load_threads > 256)
        return kimi_fail(err, KIMI_ERR_USAGE, "load threads %d: must be 0 (automatic) or in [1, 256]",
                         opt->load_threads);
    if (opt->speculate < SPECULATE_AUTO || opt->speculate > SPECULATE_MAX_DRAFT)
        return kimi_fail(err, KIMI_ERR_USAGE, "--speculate %d: must be off, auto or a draft length 1..%d",
                         opt->speculate, SPECULATE_MAX_DRAFT);
    if (opt->event_capacity < 0 || opt->event_capacity > INT_MAX - SHUTDOWN_RESERVE)
        return kimi_fail(err, KIMI_ERR_USAGE, "event queue capacity %d: must be 0 (default) or in [1, %d]",
                         opt->event_capacity, INT_MAX - SHUTDOWN_RESERVE);
    if (!opt->model_dir || !*opt->model_dir)
        return kimi_fail(err, KIMI_ERR_USAGE, "no model directory given (--model DIR)");
    if (opt->kv_cache != KV_CACHE_FP16 && opt->kv_cache != KV_CACHE_FP8)
        return kimi_fail(err, KIMI_ERR_USAGE, "--kv-cache %d: must be fp16 or fp8", (int)opt->kv_cache);
    if (opt->activations != CPU_ACTIVATIONS_FP32 && opt->activations != CPU_ACTIVATIONS_INT8)
        return kimi_fail(err, KIMI_ERR_USAGE, "--cpu-activations %d: must be fp32 or int8", (int)opt->activations);
    if (opt->weights != CPU_WEIGHTS_HUGE_PAGES && opt->weights != CPU_WEIGHTS_MMAP)
        return kimi_fail(err, KIMI_ERR_USAGE, "--cpu-weights %d: must be huge-pages or mmap", (int)opt->weights);

    if ((rc = weights_load(&e->weights, opt->model_dir, err)))
        return rc;
    e->weights_loaded = 1;
    const model_config *cfg = &e->weights.cfg;
    if ((rc = config_check_tp(cfg, opt->tp, err)))
        return rc;
    /* said before the weights are read in: the fp8 row's fp16 k_pe needs an even latent width
     * (kernels/kv_format.h), which both backends check again when they open */
    if (opt->kv_cache == KV_CACHE_FP8 && cfg->kv_lora_rank % 2)
        return kimi_fail(err, KIMI_ERR_USAGE, "--kv-cache fp8: kv_lora_rank %d of config.json is odd (it must be even)",
                         cfg->kv_lora_rank);

    engine_info *info = &e->info;
    info->backend = opt->backend;
    info->activations = opt->backend == BACKEND_CPU ? opt->activations : CPU_ACTIVATIONS_FP32;
    info->tp = opt->tp;
    info->vocab = cfg->vocab;
    info->weight_bytes = e->weights.weight_bytes;
    char threads_note[96] = "", weights_note[64] = "";
    info->threads_per_rank = opt->threads_per_rank;
    if (opt->backend == BACKEND_CPU) {
        /* the CPUs this process may use (affinity, cgroup quota), as backend_cpu counts them */
        long cores = cpu_usable_count();
        if (info->threads_per_rank == 0) {
            info->threads_per_rank = cores > opt->tp ? (int)(cores / opt->tp) : 1;
            snprintf(threads_note, sizeof threads_note, " (%ld usable CPUs / tp %d)", cores, opt->tp);
        }
        info->load_threads = opt->load_threads > 0 ? opt->load_threads : default_load_threads(cores);
        int offered = weights_huge_pages_available();
        info->huge_pages = opt->weights == CPU_WEIGHTS_HUGE_PAGES && offered;
        snprintf(weights_note, sizeof weights_note, "%s",
                 info->huge_pages ? " into 2 MiB pages"
                 : opt->weights == CPU_WEIGHTS_MMAP ? " (the mmap's 4 KiB pages: --cpu-weights mmap)"
                                                    : " (4 KiB pages: transparent huge pages are off)");
    }

    /* CPU ranks share one memory and one mmap of the weights; a GPU rank has its own device,
     * which the budget then describes, holding its shard. */
    size_t budget = opt->memory_budget_bytes, rank_budget, rank_weights;
    const char *budget_source = "the memory budget";
    if (opt->backend == BACKEND_CPU) {
        if (budget == 0) {
            budget = (size_t)(memory_available() * CPU_BUDGET_FRACTION);
            budget_source = "75% of available memory";
        }
        rank_budget = budget / (size_t)opt->tp;
        rank_weights = info->weight_bytes / (size_t)opt->tp;
    } else {
        /* The device says what it holds: its free memory, and each rank's packed weights and
         * workspace (backend_memory), so the plan is the largest context that fits. */
        backend_options probe = {.kind = opt->backend, .tp = opt->tp, .devices = opt->devices,
                                 .n_devices = opt->n_devices};
        size_t device_budget;
        if ((rc = backend_memory(&e->weights, &probe, &device_budget, &rank_weights, err)))
            return rc;
        rank_budget = budget ? budget : device_budget;
        if (!budget)
            budget_source = "free device memory";
    }
    kv_cache_plan plan;
    if ((rc = kv_cache_plan_context(cfg, opt->kv_cache, rank_weights, rank_budget, opt->tp, dcp, opt->max_context,
                                    budget_source, &plan, err)))
        return rc;
    info->kv_cache = plan.format;
    info->max_fit_fp16 = plan.max_fit_fp16;
    info->max_fit_fp8 = plan.max_fit_fp8;
    info->max_context = plan.max_context;
    info->max_fit = plan.max_fit;
    info->rank_budget_bytes = plan.rank_budget_bytes;
    info->kv_bytes_per_token = plan.kv_bytes_per_token;
    info->dcp = dcp;
    write_summary(info, threads_note, weights_note, &plan);
    write_kv_cache_note(info, cfg);
    /* Said before the wait: on a large checkpoint the user learns what context fits before
     * the weights are read. */
    if (opt->on_plan)
        opt->on_plan(opt->progress_user, info);

    /* Only once the plan says the weights fit: the CPU backend computes from the mmap. */
    load_report lr = {opt, monotonic_seconds(), 0, info->weight_bytes};
    if (opt->backend == BACKEND_CPU) {
        weights_page_in_options page_in = {.threads = info->load_threads, .huge_pages = info->huge_pages,
                                           .report_seconds = PROGRESS_INTERVAL, .progress = report_load, .user = &lr};
        rc = weights_page_in(&e->weights, &page_in, &info->huge_page_bytes, err);
        if (rc == WEIGHTS_STOPPED)
            return load_cancelled(&lr, err);
        if (rc)
            return rc;
    }

    backend_options bo = {.kind = opt->backend, .tp = opt->tp, .threads_per_rank = info->threads_per_rank,
                          .max_context = plan.max_context, .fit_context = opt->max_context == 0,
                          .kv_cache = opt->kv_cache, .activations = info->activations, .dcp = dcp,
                          .on_layer = on_layer, .on_layer_user = e,
                          .devices = opt->devices, .n_devices = opt->n_devices, .on_load = report_load,
                          .on_load_user = &lr};
    rc = backend_open(&e->be, &e->weights, &bo, err);
    if (rc == BACKEND_STOPPED)
        return load_cancelled(&lr, err);
    if (rc)
        return rc;
    info->max_context = backend_capacity(e->be);
    info->runtime_overhead_bytes = backend_runtime_overhead(e->be, &info->overhead_device);
    append_measured_overhead(info, plan.max_context);
    append_communicator(info, backend_comm_description(e->be));
    info->cache_bytes_per_rank = backend_cache_bytes_per_rank(e->be);
    if ((rc = kv_cache_init(&e->cache, info->max_context, err)))
        return rc;
    e->logits = malloc((size_t)cfg->vocab * sizeof *e->logits);
    info->speculate = opt->speculate;
    if (info->speculate != SPECULATE_OFF &&
        !(e->draft_logits = malloc((size_t)(SPECULATE_MAX_DRAFT + 1) * (size_t)cfg->vocab * sizeof *e->draft_logits)))
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the speculative decoding logits");
    e->event_capacity = opt->event_capacity > 0 ? opt->event_capacity : DEFAULT_EVENT_CAPACITY;
    e->events = calloc((size_t)e->event_capacity + SHUTDOWN_RESERVE, sizeof *e->events);
    if (!e->logits || !e->events)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the engine's buffers");
    e->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (e->event_fd < 0)
        return kimi_fail(err, KIMI_ERR_IO, "eventfd: %s", strerror(errno));

    info->load_seconds = monotonic_seconds() - t0;

    rc = pthread_create(&e->scheduler, NULL, scheduler_main, e);
    if (rc)
        return kimi_fail(err, KIMI_ERR_NOMEM, "cannot start the scheduler thread: %s", strerror(rc));
    e->scheduler_running = 1;
    return 0;
}

int engine_open(engine **out, const engine_options *opt, kimi_err *err)
{
    *out = NULL;
    engine *e = calloc(1, sizeof *e);
    if (!e)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the engine");
    e->event_fd = -1;
    e->next_id = 1;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->space, NULL);
    pthread_cond_init(&e->arrived, NULL);
    int rc = engine_start(e, opt, err);
    if (rc) {
        engine_close(e);
        return rc;
    }
    *out = e;
    return 0;
}

const engine_info *engine_get_info(const engine *e)
{
    return &e->info;
}

const model_config *engine_model_config(const engine *e)
{
    return &e->weights.cfg;
}

const model_weights *engine_weights(const engine *e)
{
    return &e->weights;
}

void engine_shutdown(engine *e)
{
    pthread_mutex_lock(&e->lock);
    e->shutting_down = 1;
    if (e->running)
        atomic_store(&e->running->cancelled, 1);
    for (request *r = e->pending_head; r; r = r->next)
        atomic_store(&r->cancelled, 1);
    pthread_cond_broadcast(&e->work);
    pthread_cond_broadcast(&e->space);
    pthread_mutex_unlock(&e->lock);
    if (e->scheduler_running) {
        pthread_join(e->scheduler, NULL);
        e->scheduler_running = 0;
    }
}

void engine_close(engine *e)
{
    if (!e)
        return;
    engine_shutdown(e);
    while (e->pending_head) {
        request *r = e->pending_head;
        e->pending_head = r->next;
        request_free(r);
    }
    if (e->be)
        backend_close(e->be);
    if (e->weights_loaded)
        weights_free(&e->weights);
    kv_cache_free(&e->cache);
    free(e->logits);
    free(e->draft_logits);
    free(e->events);
    if (e->event_fd >= 0)
        close(e->event_fd);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->space);
    pthread_cond_destroy(&e->arrived);
    pthread_mutex_destroy(&e->lock);
    free(e);
}
