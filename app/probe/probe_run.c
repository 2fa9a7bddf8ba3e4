/* probe_run: kimi-probe logits and kv: run a token sequence through a backend and write the
 * logits of chosen positions (float32) or the fp16 latent cache, as raw little-endian files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/probe/probe.h"
#include "app/probe/probe_args.h"
#include "engine/backend/backend.h"
#include "engine/backend/device_plan.h"
#include "engine/backend/kv_shard.h"
#include "engine/model/weights.h"

typedef struct {
    model_weights mw;
    backend *be;
    int *tokens;                /* [n_tokens] */
    int n_tokens;
    const char *out_path;
} probe_run;

static void probe_run_free(probe_run *p)
{
    backend_close(p->be);
    if (p->mw.layers)
        weights_free(&p->mw);
    free(p->tokens);
}

/* Parse the shared flags, load the model and open the backend with room for the tokens. */
static int probe_run_open(probe_run *p, const probe_args *a, kimi_err *err)
{
    const char *model_dir, *tokens_text;
    long tp, dcp, threads, max_context;
    int devices[DEVICE_MAX_RANKS], n_devices;
    memset(p, 0, sizeof *p);
    if (probe_arg_required(a, "model", &model_dir, err) || probe_arg_required(a, "tokens", &tokens_text, err) ||
        probe_arg_required(a, "out", &p->out_path, err) || probe_arg_int(a, "tp", 1, 8, 1, &tp, err) ||
        probe_arg_int(a, "dcp", 1, 8, 1, &dcp, err) || kv_shard_check((int)tp, (int)dcp, err) ||
        probe_arg_int(a, "threads", 0, 4096, 0, &threads, err) || probe_arg_devices(a, devices, &n_devices, err) ||
        probe_parse_int_list("tokens", tokens_text, &p->tokens, &p->n_tokens, err))
        return err->code;
    if (p->n_tokens < 1)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tokens: give at least one token id");
    if (probe_arg_int(a, "max-context", 1, 1L << 30, p->n_tokens, &max_context, err))
        return err->code;
    backend_kind kind;
    kv_cache_format kv_cache;
    if (probe_arg_backend(a, &kind, err) || probe_arg_kv_cache(a, &kv_cache, err))
        return err->code;
    if (weights_load(&p->mw, model_dir, err))
        return err->code;
    backend_options opt = {.kind = kind, .tp = (int)tp, .dcp = (int)dcp, .threads_per_rank = (int)threads,
                           .max_context = max_context, .kv_cache = kv_cache, .devices = devices, .n_devices = n_devices};
    return backend_open(&p->be, &p->mw, &opt, err);
}

static int write_file(const char *path, const void *data, size_t bytes, kimi_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return kimi_fail(err, KIMI_ERR_IO, "%s: cannot create", path);
    size_t written = fwrite(data, 1, bytes, f);
    if (fclose(f) != 0 || written != bytes)
        return kimi_fail(err, KIMI_ERR_IO, "%s: write failed", path);
    return 0;
}

int probe_logits(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    probe_run p = {0};
    int *rows = NULL, n_rows = 0, status = 0;
    float *logits = NULL;
    if (probe_args_parse(&a, argc, argv, "model,tokens,positions,backend,tp,dcp,devices,threads,max-context,out,kv-cache", &err) ||
        probe_run_open(&p, &a, &err))
        goto done;
    if (probe_arg(&a, "positions")) {
        if (probe_parse_int_list("positions", probe_arg(&a, "positions"), &rows, &n_rows, &err))
            goto done;
    } else {
        n_rows = p.n_tokens;
        rows = malloc((size_t)n_rows * sizeof *rows);
        for (int i = 0; rows && i < n_rows; i++)
            rows[i] = i;
    }
    size_t vocab = (size_t)p.mw.cfg.vocab;
    logits = malloc((n_rows ? (size_t)n_rows : 1) * vocab * sizeof *logits);
    if (!rows || !logits) {
        kimi_fail(&err, KIMI_ERR_NOMEM, "out of memory for %d rows of logits", n_rows);
        goto done;
    }
    for (int j = 0; j < n_rows; j++)
        if (rows[j] < 0 || rows[j] >= p.n_tokens) {
            kimi_fail(&err, KIMI_ERR_USAGE, "--positions: %d is outside the %d tokens", rows[j], p.n_tokens);
            goto done;
        }
    if (backend_forward(p.be, p.tokens, p.n_tokens, 0, rows, n_rows, logits, &err) ||
        write_file(p.out_path, logits, (size_t)n_rows * vocab * sizeof *logits, &err))
        goto done;
done:
    if (err.code)
        status = probe_report(&err);
    free(rows);
    free(logits);
    probe_run_free(&p);
    return status;
}

int probe_kv(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    probe_run p = {0};
    uint16_t *cache = NULL;
    int status = 0;
    if (probe_args_parse(&a, argc, argv, "model,tokens,backend,tp,dcp,devices,threads,max-context,out,kv-cache", &err) ||
        probe_run_open(&p, &a, &err))
        goto done;
    size_t halves = (size_t)p.mw.cfg.layers * (size_t)p.n_tokens *
                    ((size_t)p.mw.cfg.kv_lora_rank + (size_t)p.mw.cfg.qk_rope_dim);
    cache = malloc(halves * sizeof *cache);
    if (!cache) {
        kimi_fail(&err, KIMI_ERR_NOMEM, "out of memory for the cache of %d positions", p.n_tokens);
        goto done;
    }
    if (backend_forward(p.be, p.tokens, p.n_tokens, 0, NULL, 0, NULL, &err) ||
        backend_read_kv(p.be, p.n_tokens, cache, &err) || write_file(p.out_path, cache, halves * sizeof *cache, &err))
        goto done;
done:
    if (err.code)
        status = probe_report(&err);
    free(cache);
    probe_run_free(&p);
    return status;
}
