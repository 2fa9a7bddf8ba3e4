/* probe_load: `kimi-probe load`: how fast the engine loads a checkpoint next to how fast the
 * storage holding it reads (the goal: a load at 0.8 of the storage's bandwidth or better). */
#include "app/probe/probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/probe/probe_args.h"
#include "app/probe/storage_read.h"
#include "engine/runtime/engine.h"
#include "engine/model/safetensors.h"

/* The checkpoint's shard files (every file a tensor lives in), as paths to free. */
static int shard_paths(const char *model_dir, char ***out, int *n_out, kimi_err *err)
{
    safetensors_set *set;
    if (safetensors_open_dir(&set, model_dir, err))
        return err->code;
    int n = 0;
    for (size_t i = 0; i < safetensors_count(set); i++)
        if (safetensors_at(set, i)->file + 1 > n)
            n = safetensors_at(set, i)->file + 1;
    char **paths = calloc((size_t)n + 1, sizeof *paths);
    int rc = paths ? 0 : kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for %d paths", n);
    for (int f = 0; !rc && f < n; f++)
        if (!(paths[f] = strdup(safetensors_file_path(set, f))))
            rc = kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for %d paths", n);
    safetensors_close(set);
    if (rc) {
        for (int f = 0; paths && f < n; f++)
            free(paths[f]);
        free(paths);
        return rc;
    }
    *out = paths;
    *n_out = n;
    return 0;
}

static const char *read_method(const storage_read_result *r, char *buf, size_t cap)
{
    if (r->dropped_files == 0)
        return "O_DIRECT";
    if (r->direct_files == 0)
        return "buffered after posix_fadvise DONTNEED: the file system refuses O_DIRECT";
    snprintf(buf, cap, "O_DIRECT on %d files, buffered after posix_fadvise DONTNEED on %d", r->direct_files,
             r->dropped_files);
    return buf;
}

int probe_load(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    engine_options opt;
    double sample_gib;
    long request_mib, load_threads;
    if (probe_args_parse(&a, argc, argv, "model,backend,tp,devices,threads,load-threads,ctx,sample-gib,request-mib,warm,kv-cache,cpu-activations,cpu-weights", &err) ||
        probe_engine_options(&a, 4096, &opt, &err) ||
        probe_arg_int(&a, "load-threads", 0, 256, 0, &load_threads, &err) ||
        probe_arg_int(&a, "request-mib", 1, 1024, 16, &request_mib, &err) ||
        probe_arg_double(&a, "sample-gib", 8, &sample_gib, &err))
        return probe_report(&err);
    if (!(sample_gib > 0 && sample_gib <= 1 << 20)) {
        kimi_fail(&err, KIMI_ERR_USAGE, "--sample-gib %g: must be more than 0 (GiB of the checkpoint to read)",
                  sample_gib);
        return probe_report(&err);
    }
    opt.load_threads = (int)load_threads;

    char **paths = NULL;
    int n_paths = 0;
    if (shard_paths(opt.model_dir, &paths, &n_paths, &err))
        return probe_report(&err);
    const char *const *files = (const char *const *)paths;
    storage_read_result sr;
    size_t cached = 0, file_bytes = 0;
    engine *e = NULL;
    /* The storage first, then the load with the checkpoint's pages dropped from the cache, so
     * that both read from the storage (--warm: the load finds what the cache holds, a reload);
     * what the cache held is said, not hidden. */
    int warm = probe_arg(&a, "warm") != NULL;
    int rc = storage_read_sample(files, n_paths, (size_t)(sample_gib * 1073741824.0), (size_t)request_mib << 20, &sr,
                                 &err) ||
             (!warm && storage_drop_cache(files, n_paths, &err)) ||
             storage_cached_bytes(files, n_paths, &cached, &file_bytes, &err) || engine_open(&e, &opt, &err);
    if (!rc) {
        const engine_info *info = engine_get_info(e);
        fprintf(stderr, "kimi-probe: %s\n", info->summary);
        double storage_gb_s = storage_gb_per_s(sr.bytes, sr.seconds);
        double load_gb_s = storage_gb_per_s(info->weight_bytes, info->load_seconds);
        char method[128], threads[48] = "";
        if (info->load_threads > 0)
            snprintf(threads, sizeof threads, ", %d thread%s reading", info->load_threads,
                     info->load_threads == 1 ? "" : "s");
        printf("storage: %zu B in %.4f s = %.2f GB/s (%d of %d files, %s, %ld MiB reads)\n", sr.bytes, sr.seconds,
               storage_gb_s, sr.files, n_paths, read_method(&sr, method, sizeof method), request_mib);
        printf("load: %zu B in %.4f s = %.2f GB/s (%s backend, tp %d%s; %.1f%% of the files in the page cache "
               "before)\n",
               info->weight_bytes, info->load_seconds, load_gb_s, info->backend == BACKEND_CUDA ? "cuda" : "cpu",
               info->tp, threads, file_bytes ? 100.0 * (double)cached / (double)file_bytes : 0.0);
        printf("ratio: %.3f of the storage's read bandwidth (goal: 0.8 or more)\n",
               storage_gb_s > 0 ? load_gb_s / storage_gb_s : 0.0);
    }
    engine_close(e);
    for (int f = 0; f < n_paths; f++)
        free(paths[f]);
    free(paths);
    return rc ? probe_report(&err) : 0;
}
