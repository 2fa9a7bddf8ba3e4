/* probe_bench: `kimi-probe generate` (greedy ids and text through the engine) and
 * `kimi-probe bench` (load, prefill and decode speed, weight bytes per token against this
 * machine's measured streaming-read bandwidth, as one JSON object); `kimi-probe bench --census`
 * (the device work of one CUDA decode step, counted by the CPU emulation of CUDA). */
#include "app/probe/probe.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "app/probe/probe_args.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu_profile.h"
#include "engine/backend/device_census.h"
#include "engine/backend/device_plan.h"
#include "engine/backend/kv_shard.h"
#include "engine/base/monotonic.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/speculate.h"
#include "engine/text/tokenizer.h"

int probe_engine_options(const probe_args *a, long default_ctx, engine_options *opt, kimi_err *err)
{
    static int devices[8];      /* opt->devices points here (one engine per kimi-probe run) */
    long tp, dcp, threads, ctx;
    memset(opt, 0, sizeof *opt);
    if (probe_arg_required(a, "model", &opt->model_dir, err) || probe_arg_backend(a, &opt->backend, err) ||
        probe_arg_int(a, "tp", 1, 8, 1, &tp, err) || probe_arg_int(a, "dcp", 1, 8, 1, &dcp, err) ||
        kv_shard_check((int)tp, (int)dcp, err) || probe_arg_int(a, "threads", 0, 4096, 0, &threads, err) ||
        probe_arg_int(a, "ctx", 0, 1L << 30, default_ctx, &ctx, err) ||
        probe_arg_devices(a, devices, &opt->n_devices, err) || probe_arg_kv_cache(a, &opt->kv_cache, err) ||
        probe_arg_cpu_activations(a, &opt->activations, err) || probe_arg_cpu_weights(a, &opt->weights, err))
        return err->code;
    const char *speculate = probe_arg(a, "speculate");
    char what[64];
    snprintf(what, sizeof what, "--speculate %.40s", speculate ? speculate : "");
    if (speculate && speculate_parse(speculate, &opt->speculate, what, err))
        return err->code;
    opt->devices = opt->n_devices ? devices : NULL;
    opt->tp = (int)tp;
    opt->dcp = (int)dcp;
    opt->threads_per_rank = (int)threads;
    opt->max_context = ctx;
    return 0;
}

/* Run one request to its end; ids [cap] receive the generated ids. */
static int run_to_done(engine *e, const engine_request *req, int32_t *ids, int cap, int *n_ids,
                       engine_stats *stats, kimi_err *err)
{
    uint64_t id;
    if (engine_submit(e, req, &id, err))
        return err->code;
    *n_ids = 0;
    engine_event ev;
    int failed = 0;
    for (;;) {
        engine_next_event(e, &ev, -1);
        if (ev.kind == ENGINE_EVENT_TOKEN && *n_ids < cap)
            ids[(*n_ids)++] = ev.token;
        else if (ev.kind == ENGINE_EVENT_ERROR)
            failed = kimi_fail(err, KIMI_ERR_STATE, "%s", ev.message);
        else if (ev.kind == ENGINE_EVENT_DONE)
            break;
    }
    *stats = ev.stats;
    return failed;
}

/* The text of ids [n] as the app would show it: through the streaming decoder, so bytes that
 * never form a character become U+FFFD and the result is valid UTF-8 (JSON needs that). */
static int decode_valid_utf8(const tokenizer *tok, const int32_t *ids, int n, char **text, size_t *len,
                             kimi_err *err)
{
    size_t piece = token_stream_min_cap(tok), cap = piece * ((size_t)n + 1) + 1;
    char *buf = malloc(cap);
    if (!buf)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the decoded text");
    token_stream ts;
    token_stream_init(&ts, tok);
    size_t used = 0;
    for (int i = 0; i < n; i++)
        used += token_stream_push(&ts, ids[i], buf + used, cap - used);
    used += token_stream_flush(&ts, buf + used, cap - used);
    buf[used] = 0;
    *text = buf;
    *len = used;
    return 0;
}

int probe_generate(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    engine_options opt;
    long n_new;
    int *stop = NULL, n_stop = 0;
    if (probe_args_parse(&a, argc, argv, "model,tokens,prompt,n,stop,backend,tp,dcp,devices,threads,ctx,speculate,kv-cache,cpu-activations,cpu-weights", &err) ||
        probe_engine_options(&a, 0, &opt, &err) || probe_arg_int(&a, "n", 1, 1 << 20, 32, &n_new, &err))
        return probe_report(&err);
    const char *tokens_text = probe_arg(&a, "tokens"), *prompt_text = probe_arg(&a, "prompt");
    const char *stop_text = probe_arg(&a, "stop");
    if (!tokens_text == !prompt_text) {
        kimi_fail(&err, KIMI_ERR_USAGE, "give exactly one of --tokens 1,2,3 and --prompt TEXT");
        return probe_report(&err);
    }
    if (stop_text && probe_parse_int_list("stop", stop_text, &stop, &n_stop, &err))
        return probe_report(&err);
    if (opt.max_context == 0)
        opt.max_context = 4096;

    engine *e = NULL;
    tokenizer *tok = NULL;
    int32_t *prompt = NULL, *out = NULL;
    size_t n_prompt = 0;
    char *text = NULL;
    size_t text_len = 0;
    int rc = engine_open(&e, &opt, &err);
    if (!rc) {
        fprintf(stderr, "kimi-probe: %s\n", engine_get_info(e)->summary);
        rc = tokenizer_load(&tok, opt.model_dir, engine_model_config(e), &err);
    }
    if (!rc && prompt_text) {
        /* A probe: special-token text in the prompt becomes the special ids, so a rendered
         * conversation can be pasted as it is. */
        rc = tokenizer_encode(tok, prompt_text, strlen(prompt_text), 1, &prompt, &n_prompt, &err);
    } else if (!rc) {
        int *list = NULL, n = 0;
        rc = probe_parse_int_list("tokens", tokens_text, &list, &n, &err);
        if (!rc && !(prompt = malloc((size_t)n * sizeof *prompt)))
            rc = kimi_fail(&err, KIMI_ERR_NOMEM, "out of memory");
        for (int i = 0; !rc && i < n; i++)
            prompt[i] = list[i];
        n_prompt = (size_t)n;
        free(list);
    }
    int32_t *stop_ids = NULL;
    if (!rc && n_stop > 0) {
        if (!(stop_ids = malloc((size_t)n_stop * sizeof *stop_ids)))
            rc = kimi_fail(&err, KIMI_ERR_NOMEM, "out of memory");
        for (int i = 0; !rc && i < n_stop; i++)
            stop_ids[i] = stop[i];
    }
    engine_stats st = {0};
    int n_out = 0;
    if (!rc && !(out = malloc((size_t)n_new * sizeof *out)))
        rc = kimi_fail(&err, KIMI_ERR_NOMEM, "out of memory");
    if (!rc) {
        engine_request req = {.tokens = prompt, .n_tokens = (int)n_prompt, .sampling = {0, 0, 1, 0},
                              .max_new_tokens = (int)n_new, .stop_ids = stop_ids, .n_stop_ids = n_stop};
        rc = run_to_done(e, &req, out, (int)n_new, &n_out, &st, &err);
    }
    if (!rc)
        rc = decode_valid_utf8(tok, out, n_out, &text, &text_len, &err);
    if (!rc) {
        json_t *ids = json_array();
        for (int i = 0; i < n_out; i++)
            json_array_append_new(ids, json_integer(out[i]));
        json_t *o = json_pack("{s:i, s:o, s:s%, s:s, s:i, s:f, s:f, s:i, s:i, s:i, s:I}", "prompt_tokens",
                              (int)n_prompt, "ids", ids, "text", text, text_len, "stop_reason",
                              engine_stop_reason_name(st.stop_reason), "generated_tokens", st.generated_tokens,
                              "prefill_tok_s", st.prefill_tok_s, "decode_tok_s", st.decode_tok_s, "decode_steps",
                              st.decode_steps, "drafted_tokens", st.drafted_tokens, "accepted_tokens",
                              st.accepted_tokens, "cache_clamps", (json_int_t)st.cache_clamps);
        char *line = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (line)
            printf("%s\n", line);
        else
            rc = kimi_fail(&err, KIMI_ERR_NOMEM, "out of memory for the output");
        free(line);
        json_decref(o);
    }
    free(text);
    free(out);
    free(stop_ids);
    free(stop);
    free(prompt);
    tokenizer_free(tok);
    engine_close(e);
    return rc ? probe_report(&err) : 0;
}

/* ---- bench ---- */

static size_t matrix_bytes(const weight_matrix *w)
{
    size_t rows = (size_t)w->rows, cols = (size_t)w->cols;
    switch (w->format) {
    case WEIGHT_NVFP4: return rows * (cols / 2) + rows * (cols / 16) + sizeof(float);
    case WEIGHT_BF16:
    case WEIGHT_F16: return rows * cols * 2;
    case WEIGHT_F32: return rows * cols * 4;
    }
    return 0;
}

/* Weight bytes one decode step reads, from the architecture: every rank's shard (its
 * replicated tensors included, so they count tp times), less the embedding table of which a
 * step reads one row per rank, less the routed experts the router did not pick (it picks
 * experts_per_token of them in every MoE layer). */
static int decode_bytes_per_token(const model_weights *mw, int tp, double *bytes, kimi_err *err)
{
    const model_config *c = &mw->cfg;
    double total = 0;
    for (int r = 0; r < tp; r++) {
        tp_shard shard;
        if (tp_shard_plan(mw, tp, r, &shard, err))
            return err->code;
        total += (double)shard.weight_bytes;
    }
    size_t embed = matrix_bytes(&mw->embed.w);
    total -= (double)tp * (double)(embed - embed / (size_t)mw->embed.w.rows);
    for (int i = 0; i < c->layers; i++) {
        const layer_weights *lw = &mw->layers[i];
        if (!lw->is_moe)
            continue;
        const mlp_weights *x = &lw->experts[0];
        double expert = (double)(matrix_bytes(&x->gate.w) + matrix_bytes(&x->up.w) + matrix_bytes(&x->down.w));
        total -= (double)(c->experts - c->experts_per_token) * expert;
    }
    *bytes = total;
    return 0;
}

typedef struct {
    const uint64_t *words;      /* [n] this thread's slice */
    size_t n;
    uint64_t sum;
    double cpu_seconds;         /* the thread's CPU time for the slice */
} read_slice;

static void *read_slice_main(void *arg)
{
    read_slice *s = arg;
    double cpu0 = cpu_profile_thread_seconds();
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 4 <= s->n; i += 4) {
        a += s->words[i];
        b += s->words[i + 1];
        c += s->words[i + 2];
        d += s->words[i + 3];
    }
    for (; i < s->n; i++)
        a += s->words[i];
    s->sum = a + b + c + d;
    s->cpu_seconds = cpu_profile_thread_seconds() - cpu0;
    return NULL;
}

/* Streaming-read bandwidth: threads sum disjoint slices of a buffer far larger than the last
 * level cache; the best of a few passes, in GB/s (1e9 B); cpu_gb_s: the same by the slowest
 * thread's CPU time (what a busy machine would show quiet). */
static int stream_read_gb_s(size_t bytes, int threads, double *gb_s, double *cpu_gb_s, kimi_err *err)
{
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *buf = malloc(n * sizeof *buf);
    read_slice *slices = calloc((size_t)threads, sizeof *slices);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    if (!buf || !slices || !ids) {
        free(buf);
        free(slices);
        free(ids);
        return kimi_fail(err, KIMI_ERR_NOMEM, "bench: out of memory for a %zu-byte read buffer", bytes);
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    double best = 0, best_cpu = 0;
    uint64_t check = 0;
    for (int pass = 0; pass < 4; pass++) {
        double t0 = monotonic_seconds();
        for (int t = 0; t < threads; t++) {
            size_t begin = n * (size_t)t / (size_t)threads, end = n * (size_t)(t + 1) / (size_t)threads;
            slices[t] = (read_slice){buf + begin, end - begin, 0, 0};
            pthread_create(&ids[t], NULL, read_slice_main, &slices[t]);
        }
        double slowest = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(ids[t], NULL);
            check += slices[t].sum;
            slowest = slices[t].cpu_seconds > slowest ? slices[t].cpu_seconds : slowest;
        }
        double rate = (double)(n * sizeof *buf) / (monotonic_seconds() - t0) / 1e9;
        best = rate > best ? rate : best;
        double cpu_rate = slowest > 0 ? (double)(n * sizeof *buf) / slowest / 1e9 : 0;
        best_cpu = cpu_rate > best_cpu ? cpu_rate : best_cpu;
    }
    /* The sum of 0..n-1, four times: a wrong value would mean the reads were skipped. */
    int ok = check == (uint64_t)4 * ((uint64_t)n * (n - 1) / 2);
    free(buf);
    free(slices);
    free(ids);
    if (!ok)
        return kimi_fail(err, KIMI_ERR_STATE, "bench: the streaming-read check sum is wrong");
    *gb_s = best;
    *cpu_gb_s = best_cpu;
    return 0;
}

/* Where rank 0's decode steps spent their time (engine/backend/cpu_profile.h): per step, each
 * phase's milliseconds, share of the step and the GB/s its weight reads ran at; the step's time
 * outside the forward pass (the step barriers, sampling, the engine) is the measured time per
 * token less the forward. */
static json_t *decode_profile_json(const cpu_profile *p, double decode_tok_s, double bytes_per_token,
                                   double read_cpu_gb_s)
{
    json_t *o = json_object(), *phases = json_object();
    double steps = (double)p->steps, forward_ms = 1e3 * p->step_seconds / steps;
    double cpu_ms = 1e3 * p->step_cpu_seconds / steps;
    json_object_set_new(o, "steps", json_integer(p->steps));
    json_object_set_new(o, "forward_ms", json_real(forward_ms));
    json_object_set_new(o, "forward_cpu_ms", json_real(cpu_ms));
    /* On a busy machine: weight bytes per rank 0's CPU time of a forward, against the read's GB/s
     * by CPU time (1 thread per rank and tp 1: what a quiet machine would show, less the steps'
     * time outside the forward). */
    double cpu_gb_s = cpu_ms > 0 ? bytes_per_token / (cpu_ms / 1e3) / 1e9 : 0;
    json_object_set_new(o, "effective_cpu_gb_s", json_real(cpu_gb_s));
    json_object_set_new(o, "bandwidth_ratio_cpu", read_cpu_gb_s > 0 ? json_real(cpu_gb_s / read_cpu_gb_s) : json_null());
    json_object_set_new(o, "outside_forward_ms",
                        decode_tok_s > 0 ? json_real(1e3 / decode_tok_s - forward_ms) : json_null());
    json_object_set_new(o, "worker_wait_ms", json_real(1e3 * p->worker_wait_seconds / steps));
    for (int i = 0; i < CPU_PHASE_COUNT; i++) {
        json_t *ph = json_object();
        json_object_set_new(ph, "ms", json_real(1e3 * p->seconds[i] / steps));
        json_object_set_new(ph, "cpu_ms", json_real(1e3 * p->cpu_seconds[i] / steps));
        json_object_set_new(ph, "share", json_real(p->step_seconds > 0 ? p->seconds[i] / p->step_seconds : 0));
        json_object_set_new(ph, "weight_mb", json_real(p->weight_bytes[i] / steps / 1e6));
        json_object_set_new(ph, "gb_s", p->weight_bytes[i] > 0 && p->seconds[i] > 0
                                            ? json_real(p->weight_bytes[i] / p->seconds[i] / 1e9)
                                            : json_null());
        json_object_set_new(ph, "cpu_gb_s", p->weight_bytes[i] > 0 && p->cpu_seconds[i] > 0
                                                ? json_real(p->weight_bytes[i] / p->cpu_seconds[i] / 1e9)
                                                : json_null());
        json_object_set_new(phases, cpu_phase_name((cpu_phase)i), ph);
    }
    json_object_set_new(o, "phases", phases);
    json_object_set_new(o, "method", json_string("rank 0's thread, wall and CPU time of each phase of every "
                                                 "one-token decode step; gb_s, cpu_gb_s: the phase's weight bytes over "
                                                 "them"));
    return o;
}

/* ---- bench --census ---- */

/* Bytes rank `rank` of tp must read from device memory for one decode step at context length
 * ctx (positions 0..ctx-1 in the cache, the new one included), from the model's shapes: its
 * shard (replicated tensors whole) less the embedding table (looked up on the host) and the
 * routed experts the router did not pick (experts - experts_per_token of them in every MoE
 * layer), plus every layer's latent cache rows in the cache's format: of all ctx positions
 * when the cache is replicated, of those the rank stores when it is sharded over dcp ranks
 * (engine/backend/kv_shard.h). */
static int census_required_bytes(const model_weights *mw, int tp, int dcp, int rank, long ctx,
                                 kv_cache_format format, double *weights, double *cache, kimi_err *err)
{
    const model_config *c = &mw->cfg;
    tp_shard shard;
    if (tp_shard_plan(mw, tp, rank, &shard, err))
        return err->code;
    double total = (double)shard.weight_bytes - (double)matrix_bytes(&mw->embed.w);
    for (int i = 0; i < c->layers; i++) {
        const layer_weights *lw = &mw->layers[i];
        if (!lw->is_moe)
            continue;
        const mlp_weights *x = &lw->experts[0];
        weight_matrix gate = weight_rows(&x->gate.w, shard.moe_inter), up = weight_rows(&x->up.w, shard.moe_inter);
        weight_matrix down = weight_cols(&x->down.w, shard.moe_inter);
        double expert = (double)(matrix_bytes(&gate) + matrix_bytes(&up) + matrix_bytes(&down));
        total -= (double)(c->experts - c->experts_per_token) * expert;
    }
    *weights = total;
    *cache = (double)kv_shard_local_count(ctx, dcp, rank % dcp) * (double)kv_bytes_per_token(c, format);
    return 0;
}

static json_t *census_json(const device_census *dc, const model_config *c, int tp, long ctx, double weights,
                           double cache)
{
    json_t *o = json_object(), *kernels = json_array();
    json_object_set_new(o, "layers", json_integer(c->layers));
    json_object_set_new(o, "tp", json_integer(tp));
    json_object_set_new(o, "rank", json_integer(0));
    json_object_set_new(o, "hidden", json_integer(c->hidden));
    json_object_set_new(o, "context", json_integer(ctx));
    json_object_set_new(o, "launches_per_token", json_integer((json_int_t)dc->launches));
    json_object_set_new(o, "graph_launches_per_token", json_integer((json_int_t)dc->graph_launches));
    json_object_set_new(o, "graph_nodes_per_token", json_integer((json_int_t)dc->graph_nodes));
    json_object_set_new(o, "collectives_per_token", json_integer((json_int_t)dc->collectives));
    json_object_set_new(o, "collective_bytes_per_token", json_integer((json_int_t)dc->collective_bytes));
    json_object_set_new(o, "copies_per_token", json_integer((json_int_t)dc->copies));
    json_object_set_new(o, "copy_bytes_per_token", json_integer((json_int_t)dc->copy_bytes));
    json_object_set_new(o, "global_bytes_read_per_token", json_integer((json_int_t)dc->bytes_read));
    json_object_set_new(o, "required_bytes_per_token", json_integer((json_int_t)(weights + cache)));
    json_object_set_new(o, "required_weight_bytes", json_integer((json_int_t)weights));
    json_object_set_new(o, "required_cache_bytes", json_integer((json_int_t)cache));
    json_object_set_new(o, "launch_budget", json_integer(10 * c->layers + 16));
    json_object_set_new(o, "bytes_read_method",
                        json_string("CPU emulation of CUDA: per launch, the distinct 4 KiB pages of device memory "
                                    "whose first access was a load, times 4096"));
    for (int i = 0; i < dc->n_kernels; i++) {
        json_t *k = json_object();
        json_object_set_new(k, "name", json_string(dc->kernels[i].name));
        json_object_set_new(k, "launches", json_integer((json_int_t)dc->kernels[i].launches));
        json_object_set_new(k, "bytes_read", json_integer((json_int_t)dc->kernels[i].bytes_read));
        json_array_append_new(kernels, k);
    }
    json_object_set_new(o, "kernels", kernels);
    return o;
}

static void census_print(const device_census *dc, const model_config *c, int tp, long ctx, double weights,
                         double cache)
{
    printf("decode-step census: rank 0 of tp %d, %d layers, hidden %d, context %ld positions\n", tp, c->layers,
           c->hidden, ctx);
    printf("  launches      %llu (budget 10 x layers + 16 = %d)\n", dc->launches, 10 * c->layers + 16);
    printf("  graph         %llu launches, %llu nodes\n", dc->graph_launches, dc->graph_nodes);
    printf("  collectives   %llu, %llu bytes\n", dc->collectives, dc->collective_bytes);
    printf("  copies        %llu, %llu bytes\n", dc->copies, dc->copy_bytes);
    printf("  bytes read    %llu (required %.0f: weights %.0f + cache %.0f; ratio %.3f)\n", dc->bytes_read,
           weights + cache, weights, cache, weights + cache > 0 ? (double)dc->bytes_read / (weights + cache) : 0.0);
    printf("  %-40s %9s %14s\n", "kernel", "launches", "bytes read");
    for (int i = 0; i < dc->n_kernels; i++)
        printf("  %-40s %9llu %14llu\n", dc->kernels[i].name, dc->kernels[i].launches, dc->kernels[i].bytes_read);
}

/* kimi-probe bench --census: a prompt of --prompt tokens, one decode step (which captures the
 * step's graph), then the census of the next decode step on rank 0's device. Every rank has a
 * device of its own, as on the GPU box (NCCL between them). */
static int bench_census(const probe_args *a, kimi_err *err)
{
    long tp, dcp, n_prompt;
    int devices[8], n_devices = 0;
    backend_kind kind;
    kv_cache_format format;
    const char *dir;
    if (probe_arg_required(a, "model", &dir, err) || probe_arg_backend(a, &kind, err) ||
        probe_arg_kv_cache(a, &format, err) ||
        probe_arg_int(a, "tp", 1, 8, 8, &tp, err) || probe_arg_int(a, "dcp", 1, 8, 1, &dcp, err) ||
        kv_shard_check((int)tp, (int)dcp, err) ||
        probe_arg_int(a, "prompt", 1, DEVICE_MAX_TOKENS, 4, &n_prompt, err) ||
        probe_arg_devices(a, devices, &n_devices, err))
        return err->code;
    if (kind != BACKEND_CUDA)
        return kimi_fail(err, KIMI_ERR_USAGE, "--census: counts the CUDA backend's device work; add --backend cuda");
    if (n_devices == 0)
        for (int r = 0; r < tp; r++)
            devices[n_devices++] = r;
    if (n_devices != tp)
        return kimi_fail(err, KIMI_ERR_USAGE, "--census: one device per rank (--devices with %ld of them)", tp);
    if (device_census_begin(err) || device_census_end(devices[0], &(device_census){0}, err))
        return err->code;   /* a build that cannot count says so before the model loads */
    model_weights mw;
    if (weights_load(&mw, dir, err))
        return err->code;
    const model_config *c = &mw.cfg;
    long ctx = n_prompt + 2;
    backend_options bo = {.kind = BACKEND_CUDA, .tp = (int)tp, .dcp = (int)dcp, .max_context = ctx,
                          .devices = devices, .n_devices = n_devices, .kv_cache = format};
    backend *be = NULL;
    int32_t tokens[DEVICE_MAX_TOKENS + 2];
    float *logits = malloc((size_t)c->vocab * sizeof *logits);
    device_census *dc = calloc(1, sizeof *dc);
    int rc = logits && dc ? 0 : kimi_fail(err, KIMI_ERR_NOMEM, "out of memory");
    for (long i = 0; i < ctx; i++)
        tokens[i] = (int32_t)((i * 7919 + 17) % c->vocab);
    int last = (int)n_prompt - 1, zero = 0;
    if (!rc)
        rc = backend_open(&be, &mw, &bo, err);
    if (!rc)
        rc = backend_forward(be, tokens, (int)n_prompt, 0, &last, 1, logits, err);
    if (!rc)    /* the first decode step captures its graph: the census counts a replay */
        rc = backend_forward(be, tokens + n_prompt, 1, n_prompt, &zero, 1, logits, err);
    if (!rc && !(rc = device_census_begin(err))) {
        rc = backend_forward(be, tokens + n_prompt + 1, 1, n_prompt + 1, &zero, 1, logits, err);
        int ended = device_census_end(devices[0], dc, err);
        rc = rc ? rc : ended;
    }
    double weights = 0, cache = 0;
    if (!rc)
        rc = census_required_bytes(&mw, (int)tp, (int)dcp, 0, ctx, format, &weights, &cache, err);
    if (!rc && probe_arg(a, "json")) {
        json_t *o = census_json(dc, c, (int)tp, ctx, weights, cache);
        json_object_set_new(o, "dcp", json_integer(dcp));
        char *line = json_dumps(o, JSON_COMPACT);
        printf("%s\n", line);
        free(line);
        json_decref(o);
    } else if (!rc) {
        census_print(dc, c, (int)tp, ctx, weights, cache);
    }
    backend_close(be);
    weights_free(&mw);
    free(logits);
    free(dc);
    return rc;
}

int probe_bench(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    engine_options opt;
    long n_prompt, n_gen, read_mib;
    if (probe_args_parse(&a, argc, argv,
                         "model,backend,tp,dcp,devices,threads,prompt,gen,ctx,read-mib,speculate,kv-cache,cpu-activations,cpu-weights,census,json", &err))
        return probe_report(&err);
    if (probe_arg(&a, "census"))
        return bench_census(&a, &err) ? probe_report(&err) : 0;
    if (probe_arg(&a, "json")) {
        kimi_fail(&err, KIMI_ERR_USAGE, "--json: only with --census (bench always prints JSON)");
        return probe_report(&err);
    }
    if (probe_arg_int(&a, "prompt", 1, 1 << 20, 128, &n_prompt, &err) ||
        probe_arg_int(&a, "gen", 2, 1 << 20, 32, &n_gen, &err) ||
        probe_arg_int(&a, "read-mib", 64, 1 << 20, 1024, &read_mib, &err) ||
        probe_engine_options(&a, n_prompt + n_gen < 16 ? 16 : n_prompt + n_gen, &opt, &err))
        return probe_report(&err);

    double t0 = monotonic_seconds();
    engine *e = NULL;
    if (engine_open(&e, &opt, &err))
        return probe_report(&err);
    double load_s = monotonic_seconds() - t0;
    const engine_info *info = engine_get_info(e);
    fprintf(stderr, "kimi-probe: %s\n", info->summary);

    int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt), *out = malloc((size_t)n_gen * sizeof *out);
    int rc = prompt && out ? 0 : kimi_fail(&err, KIMI_ERR_NOMEM, "out of memory");
    /* Deterministic ids spread over the vocabulary; the warm-up's first id differs so the
     * measured request reuses nothing from the cache. */
    uint64_t x = 88172645463325252ull;
    for (long i = 0; !rc && i < n_prompt; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        prompt[i] = (int32_t)(x % (uint64_t)info->vocab);
    }
    engine_stats warm = {0}, st = {0};
    int n_out = 0;
    if (!rc) {
        /* Warm-up: page the shared weights in and let the backend set up, off the clock. */
        int32_t warm_prompt[8];
        for (int i = 0; i < 8; i++)
            warm_prompt[i] = (prompt[i % n_prompt] + 1 + i) % info->vocab;
        warm_prompt[0] = (prompt[0] + 1) % info->vocab;
        engine_request req = {.tokens = warm_prompt, .n_tokens = 8, .sampling = {0, 0, 1, 0}, .max_new_tokens = 4};
        rc = run_to_done(e, &req, out, (int)n_gen, &n_out, &warm, &err);
    }
    cpu_profile profile = {0};
    if (!rc) {
        engine_request req = {.tokens = prompt, .n_tokens = (int)n_prompt, .sampling = {0, 0, 1, 0},
                              .max_new_tokens = (int)n_gen};
        cpu_profile_enable(opt.backend == BACKEND_CPU);
        rc = run_to_done(e, &req, out, (int)n_gen, &n_out, &st, &err);
        cpu_profile_take(&profile);
        cpu_profile_enable(0);
    }
    double bytes_per_token = 0, read_gb_s = 0, read_cpu_gb_s = 0;
    int threads = info->tp * (info->threads_per_rank > 0 ? info->threads_per_rank : 1);
    /* Peak memory of the model's run, before the bandwidth test's buffer adds to it. */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (!rc)
        rc = decode_bytes_per_token(engine_weights(e), info->tp, &bytes_per_token, &err);
    if (!rc)
        rc = stream_read_gb_s((size_t)read_mib << 20, threads, &read_gb_s, &read_cpu_gb_s, &err);
    if (!rc) {
        double effective = bytes_per_token * st.decode_tok_s / 1e9;
        json_t *o = json_object();
        json_object_set_new(o, "model", json_string(opt.model_dir));
        json_object_set_new(o, "backend", json_string(opt.backend == BACKEND_CUDA ? "cuda" : "cpu"));
        json_object_set_new(o, "tp", json_integer(info->tp));
        json_object_set_new(o, "dcp", json_integer(info->dcp));
        json_object_set_new(o, "cache_bytes_per_rank", json_integer((json_int_t)info->cache_bytes_per_rank));
        /* CUDA: device memory the open took beyond the plan (NCCL, cuBLASLt), measured; the cache
         * was sized after it (null on the CPU) */
        json_object_set_new(o, "runtime_overhead_bytes", opt.backend == BACKEND_CUDA
                                                             ? json_integer((json_int_t)info->runtime_overhead_bytes)
                                                             : json_null());
        json_object_set_new(o, "threads_per_rank", json_integer(info->threads_per_rank));
        json_object_set_new(o, "threads", json_integer(threads));
        json_object_set_new(o, "ctx", json_integer(info->max_context));
        json_object_set_new(o, "prompt_tokens", json_integer(st.prompt_tokens));
        json_object_set_new(o, "reused_tokens", json_integer(st.reused_tokens));
        json_object_set_new(o, "generated_tokens", json_integer(st.generated_tokens));
        json_object_set_new(o, "stop_reason", json_string(engine_stop_reason_name(st.stop_reason)));
        json_object_set_new(o, "load_s", json_real(load_s));
        json_object_set_new(o, "prefill_s", json_real(st.prefill_seconds));
        json_object_set_new(o, "prefill_tok_s", json_real(st.prefill_tok_s));
        json_object_set_new(o, "decode_steps", json_integer(st.decode_steps));
        json_object_set_new(o, "decode_tok_s", json_real(st.decode_tok_s));
        json_object_set_new(o, "speculate", json_integer(info->speculate));
        json_object_set_new(o, "drafted_tokens", json_integer(st.drafted_tokens));
        json_object_set_new(o, "accepted_tokens", json_integer(st.accepted_tokens));
        json_object_set_new(o, "cache_clamps", json_integer((json_int_t)st.cache_clamps));
        json_object_set_new(o, "weight_bytes", json_integer((json_int_t)info->weight_bytes));
        json_object_set_new(o, "huge_page_bytes", json_integer((json_int_t)info->huge_page_bytes));
        json_object_set_new(o, "bytes_per_token", json_real(bytes_per_token));
        json_object_set_new(o, "bytes_per_token_method",
                            json_string("architecture: every rank's shard (replicated tensors once per rank), "
                                        "one embedding row per rank, experts_per_token routed experts per MoE layer"));
        json_object_set_new(o, "effective_gb_s", json_real(effective));
        json_object_set_new(o, "stream_read_gb_s", json_real(read_gb_s));
        json_object_set_new(o, "stream_read_mib", json_integer(read_mib));
        json_object_set_new(o, "stream_read_cpu_gb_s", json_real(read_cpu_gb_s));
        /* The read is measured on the host: a ratio only means something for the CPU backend. */
        json_object_set_new(o, "bandwidth_ratio",
                            opt.backend == BACKEND_CPU && read_gb_s > 0 ? json_real(effective / read_gb_s) : json_null());
        json_object_set_new(o, "peak_rss_mb", json_real((double)ru.ru_maxrss / 1024.0));
        if (profile.steps > 0)
            json_object_set_new(o, "decode_profile",
                                decode_profile_json(&profile, st.decode_tok_s, bytes_per_token, read_cpu_gb_s));
        char *line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        printf("%s\n", line);
        free(line);
        json_decref(o);
    }
    free(prompt);
    free(out);
    engine_close(e);
    return rc ? probe_report(&err) : 0;
}
