/* engine: the public API the app drives a model through: open a checkpoint on a backend,
 * submit generation requests as token ids, and read typed events (prefill progress, tokens,
 * done with stats, errors) from a queue whose file descriptor wakes a poll() loop.
 *
 * Threads: engine_open starts one scheduler thread that owns the requests, the KV cache
 * bookkeeping and sampling; it drives the backend, whose rank workers run their shards in
 * step with it. Requests run one at a time in submission order. For each request the
 * scheduler reuses the longest common prefix between its tokens and the tokens already in the
 * cache, prefills only the rest, then decodes one token per step.
 *
 * Events of one request, in this order:
 *   1. ENGINE_EVENT_PROGRESS (kind ENGINE_PROGRESS_PREFILL) while its prompt is prefilled: at
 *      most ~10 a second, done rising, and, once the prefill is complete, exactly one with
 *      done == total (total = stats.prefilled_tokens, always >= 1). A request cancelled (or
 *      failing) during its prefill has no done == total report; one cancelled before it
 *      started has none at all.
 *   2. zero or more ENGINE_EVENT_TOKEN, one per generated id (the stop id included);
 *   3. only when something failed, one ENGINE_EVENT_ERROR;
 *   4. exactly one ENGINE_EVENT_DONE carrying the stats, always, shutdown included.
 * Nothing is dropped: when the queue is full the scheduler waits for the reader (during a
 * shutdown a reserve past the capacity holds the last events, so a reader that comes only
 * after engine_shutdown still finds every request's DONE). The engine knows nothing of the
 * chat format; turning ids into text and reasoning/content/tool calls is the app's
 * (tokenizer stream + stream parser).
 *
 * All functions are called from one app thread (the UI thread); none blocks on the scheduler
 * except engine_next_event (when asked to wait) and engine_shutdown / engine_close (one step
 * of decode, or one layer of a prefill). A NULL kimi_err is allowed everywhere: the status
 * returned is the same, only the message is lost. */
#ifndef KIMI_ENGINE_H
#define KIMI_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/model/config.h"
#include "engine/base/error.h"
#include "engine/runtime/sampler.h"
#include "engine/model/weights.h"

/* Progress of long work. LOAD: done/total in bytes of weights read into memory (CPU) or
 * uploaded to the devices (CUDA); PREFILL: done/total in prompt tokens of one request's
 * prefill (fractional while a chunk of tokens is part-way through the layers). seconds since
 * that work began, rate = done / seconds, eta_seconds = (total - done) / rate (-1 while the
 * rate is still 0: unknown). */
typedef enum { ENGINE_PROGRESS_LOAD, ENGINE_PROGRESS_PREFILL } engine_progress_kind;

typedef struct {
    engine_progress_kind kind;
    double done, total;
    double seconds;
    double rate;                    /* per second: bytes/s for LOAD, tokens/s for PREFILL */
    double eta_seconds;             /* seconds left at that rate; -1 = unknown */
} engine_progress;

typedef struct engine_info engine_info;

typedef struct {
    const char *model_dir;
    backend_kind backend;           /* BACKEND_CPU or BACKEND_CUDA */
    int tp;                         /* tensor-parallel ranks, 1..8, dividing the head count */
    int dcp;                        /* decode context parallelism: the latent cache is sharded by
                                       position over groups of dcp ranks (backend_options.dcp);
                                       divides tp; 0 or 1 = replicated. CPU backend only */
    int threads_per_rank;           /* CPU workers per rank; 0 = usable CPUs (engine/base/cpu_count.h)
                                       / tp (at least 1) */
    int load_threads;               /* CPU: threads reading the weights in; 0 = 2 per online
                                       core, 4 to 16 (disk reads wait more than they compute) */
    long max_context;               /* KV cache positions; 0 = as many as the memory budget holds */
    kv_cache_format kv_cache;       /* the latent cache's element format (kernels/kv_format.h):
                                       KV_CACHE_FP16 (0) or KV_CACHE_FP8; the app chooses (its
                                       default is fp16 whatever the checkpoint asks for) */
    cpu_activations activations;    /* CPU backend: CPU_ACTIVATIONS_FP32 (0, the reference) or
                                       CPU_ACTIVATIONS_INT8 (backend_options.activations); the CUDA
                                       backend ignores it */
    cpu_weights weights;            /* CPU backend: CPU_WEIGHTS_HUGE_PAGES (0: moved into 2 MiB pages
                                       when the kernel offers them, weights_page_in) or
                                       CPU_WEIGHTS_MMAP (left in the shared, droppable mmap); the
                                       CUDA backend ignores it */
    size_t memory_budget_bytes;     /* CPU: the machine's memory for the weights and every
                                       rank's cache replica (0 = 75% of what is available at
                                       open); CUDA: one rank's device memory for its shard and
                                       cache (0 = the device's free memory / tp) */
    const int *devices;             /* CUDA: the device of each rank (n_devices == tp) or one device
                                       every rank shares (n_devices == 1); NULL / 0 = the first tp
                                       visible devices (backend_options); read during engine_open */
    int n_devices;
    int event_capacity;             /* events the queue holds; 0 = 4096 */
    /* Speculative decoding by prompt lookup (engine/runtime/speculate.h): SPECULATE_OFF (0),
     * SPECULATE_AUTO (drafts when they are expected to pay) or a fixed draft length 1..16.
     * Greedy output is identical with it on or off; sampled output has the same distribution.
     * Both backends verify a draft in one multi-token step (backend_decode_tokens). */
    int speculate;
    /* Optional: the plan, said before the long wait: called once on the thread running
     * engine_open when the checkpoint is opened and the memory plan made, before the weights
     * are read in (CPU) or uploaded (CUDA). info is what engine_get_info will say, except
     * load_seconds (0 here); valid during the call. */
    void (*on_plan)(void *user, const engine_info *info);
    /* Optional: loading progress, called on the thread running engine_open about 10 times a
     * second and once at the end (done == total). On the CPU backend engine_open reads the
     * model's weights through the mmap into memory (weights_page_in, load_threads threads),
     * once the memory plan says they fit: "done" counts the bytes read so far, total is every
     * byte of the weights' spans (model_weights.spans: engine_info.weight_bytes and the few
     * unused bytes between tensors read with them). On the CUDA backend it
     * counts the bytes of the packed shards uploaded to the devices (backend_options.on_load).
     * A non-zero return stops the load within one step: engine_open then frees everything and
     * fails with KIMI_ERR_CANCELLED ("loading cancelled ..."). */
    int (*on_load_progress)(void *user, const engine_progress *p);
    void *progress_user;            /* the user argument of on_plan and on_load_progress */
} engine_options;

/* What engine_open chose; summary says it in one line, for the app to print once. */
struct engine_info {
    backend_kind backend;
    int tp;
    int threads_per_rank;
    int load_threads;               /* CPU: threads that read the weights in; 0 on CUDA */
    long max_context;               /* positions in the KV cache */
    long max_fit;                   /* most positions the memory budget holds; -1 = unknown */
    size_t rank_budget_bytes;       /* a rank's share of the memory budget; 0 = none known */
    size_t weight_bytes;            /* language-model weights */
    size_t kv_bytes_per_token;      /* per position a rank stores, in the cache's format */
    kv_cache_format kv_cache;       /* the cache's format */
    cpu_activations activations;    /* CPU: what the NVFP4 products run with (fp32 on CUDA) */
    int huge_pages;                 /* CPU: the weights move into 2 MiB pages as they are read in
                                       (weights_page_in_options.huge_pages) */
    size_t huge_page_bytes;         /* of them, the bytes that did (span edges and small models stay
                                       in the mmap's 4 KiB pages) */
    long max_fit_fp16, max_fit_fp8; /* max_fit with each cache format (at this dcp); -1 = unknown */
    int dcp;                        /* ranks the cache is sharded over (1: replicated) */
    size_t cache_bytes_per_rank;    /* the latent cache one rank holds (backend_cache_bytes_per_rank) */
    long long runtime_overhead_bytes;   /* CUDA: device memory the open took beyond the plan, measured
                                           (backend_runtime_overhead); 0 on the CPU */
    int overhead_device;            /* its device; -1 on the CPU */
    int vocab;                      /* logits per row */
    double load_seconds;            /* weights (opened and read into memory) + backend, wall clock */
    int speculate;                  /* what requests run with (SPECULATE_OFF when unavailable) */
    char summary[1024];
    /* "" or one line for the app to print once: the checkpoint asks for a KV cache format
       (hf_quant_config.json kv_cache_quant_algo, e.g. FP8) other than the one in use */
    char kv_cache_note[256];
};

typedef struct {
    const int32_t *tokens;          /* [n_tokens] the whole rendered conversation; copied */
    int n_tokens;                   /* >= 1 */
    sampler_params sampling;
    int max_new_tokens;             /* >= 1; 0 = until the context is full */
    const int32_t *stop_ids;        /* [n_stop_ids] generation stops after emitting one; copied */
    int n_stop_ids;
    float *first_logits;            /* optional [vocab]: receives the logits the first new
                                       token is sampled from (tests, probes); the caller keeps
                                       it valid until the request's DONE event */
} engine_request;

typedef enum {
    ENGINE_STOP_TOKEN,              /* "stop_token": a stop id came (stats.stop_id) */
    ENGINE_STOP_MAX_TOKENS,         /* "max_tokens": max_new_tokens generated */
    ENGINE_STOP_CANCELLED,          /* "cancelled": engine_cancel, or engine shutdown */
    ENGINE_STOP_CONTEXT_FULL,       /* "context_full": no cache position left for the next step */
    ENGINE_STOP_ERROR,              /* "error": an ENGINE_EVENT_ERROR said why */
} engine_stop_reason;

const char *engine_stop_reason_name(engine_stop_reason reason);

typedef struct {
    int prompt_tokens;              /* n_tokens of the request */
    int reused_tokens;              /* prompt tokens whose cache entries were reused */
    int prefilled_tokens;           /* prompt tokens the prefill ran into the cache: prompt_tokens -
                                       reused_tokens, or, when it was cancelled or failed part-way,
                                       its finished chunks (0 for a request cancelled while queued) */
    int generated_tokens;           /* TOKEN events sent (the stop id included) */
    double prefill_seconds;         /* the prefill forward passes and the first sample */
    double prefill_tok_s;           /* tokens through every layer / prefill_seconds: prefilled_tokens,
                                       plus a chunk stopped part-way in proportion */
    int decode_steps;               /* forward passes after the first token: one-token steps and
                                       speculative verify steps (generated_tokens - 1 at most) */
    int decoded_tokens;             /* tokens those passes produced (generated_tokens - 1 at most) */
    double decode_seconds;          /* those steps and their sampling (queue waits excluded) */
    double decode_tok_s;            /* decoded_tokens / decode_seconds */
    int drafted_tokens;             /* speculation: tokens proposed by prompt lookup and verified */
    int accepted_tokens;            /* of those, taken (each saved one decode step) */
    engine_stop_reason stop_reason;
    int32_t stop_id;                /* the stop id when stop_reason is ENGINE_STOP_TOKEN, else -1 */
    long cache_clamps;              /* fp16 cache values saturated to +-65504 (backend_take_cache_clamps):
                                       activations past the fp16 range, kept finite */
} engine_stats;

typedef enum {
    ENGINE_EVENT_TOKEN,
    ENGINE_EVENT_ERROR,
    ENGINE_EVENT_DONE,
    ENGINE_EVENT_PROGRESS,
} engine_event_kind;

typedef struct {
    engine_event_kind kind;
    uint64_t request;               /* the id engine_submit returned */
    int32_t token;                  /* TOKEN: the generated id */
    int index;                      /* TOKEN: 0 for the first generated id of the request */
    engine_stats stats;             /* DONE */
    engine_progress progress;       /* PROGRESS: kind ENGINE_PROGRESS_PREFILL */
    char message[512];              /* ERROR: one line */
} engine_event;

typedef struct engine engine;

/* Load the checkpoint, plan the context, open the backend, start the scheduler. */
int engine_open(engine **out, const engine_options *opt, kimi_err *err);
const engine_info *engine_get_info(const engine *e);
const model_config *engine_model_config(const engine *e);
const model_weights *engine_weights(const engine *e);

/* Cache positions a request needs: its prompt and every new token but the last, which is
 * sampled and sent without a forward pass (max_new_tokens 0 counts as one new token). */
long engine_positions_needed(int n_tokens, int max_new_tokens);

/* Queue a request; *id identifies its events. Checked here, so a bad request never runs:
 * empty prompt, ids outside the vocabulary, bad sampling values, and a request that does not
 * fit (engine_positions_needed > max_context; the message names the largest context the
 * memory budget holds) are KIMI_ERR_INPUT / KIMI_ERR_STATE errors. */
int engine_submit(engine *e, const engine_request *req, uint64_t *id, kimi_err *err);

/* Stop a pending or running request within one decode step or one layer of its prefill (the
 * prefill's finished chunks of 256 tokens stay in the cache); the tokens generated so far stay
 * (events and cache) and its DONE says "cancelled". A request that already finished is left
 * as it is (0: the race with its DONE is harmless); an id never issued is KIMI_ERR_STATE. */
int engine_cancel(engine *e, uint64_t id, kimi_err *err);

/* Readable (poll POLLIN) exactly while events are waiting. */
int engine_event_fd(const engine *e);
/* Take the next event: 1 when one was taken, 0 when none came. timeout_ms: 0 = don't wait,
 * -1 = wait until one comes or none can come any more (after engine_shutdown, once the queue
 * is empty: it then returns 0 at once). */
int engine_next_event(engine *e, engine_event *ev, int timeout_ms);

/* Cancel every request, stop the scheduler (within one step or layer) and refuse new
 * requests; every request's remaining events, its DONE included, stay queued to be read. */
void engine_shutdown(engine *e);
/* engine_shutdown, then free everything. */
void engine_close(engine *e);

#endif
