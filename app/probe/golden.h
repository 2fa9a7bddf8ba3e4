/* golden: kimi-probe golden, conformance of every layer against reference data; each
 * section reports one "PASS|FAIL <case> <detail>" line per case. */
#ifndef KIMI_GOLDEN_H
#define KIMI_GOLDEN_H

#include <stdio.h>

#include "engine/base/error.h"
#include "engine/backend/backend.h"
#include "kernels/kv_format.h"

typedef struct {
    const char *model_dir;
    const char *reference_dir;
    const char *backend;        /* "cpu" or "cuda" */
    int tp;
    kv_cache_format kv_cache;   /* --kv-cache: the cache the model cases run with (fp8: wider tolerances) */
    cpu_activations activations; /* --cpu-activations: the CPU backend's NVFP4 products (int8: wider
                                    tolerances) */
    int dcp;                    /* ranks the latent cache is sharded over (--dcp) */
    char ranks[32];             /* "tp 8" or "tp 8, dcp 4", for the case lines */
    int devices[8], n_devices;  /* --devices (the CUDA backend's; 0: its default) */
    const char *skip;           /* --skip: comma-separated model case names not run, or NULL */
    int passed, failed, skipped;
} golden_run;

/* Record one case: prints "PASS <name> <detail>" or "FAIL <name> <detail>". */
void golden_case(golden_run *g, int ok, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Whether the kv/model case `name` is on the --skip list; if so, prints "SKIP <name> (--skip)"
 * and counts it. */
int golden_skip(golden_run *g, const char *name);

/* Read a whole reference file (reference_dir/name) into memory; *bytes its size. */
int golden_read_file(const golden_run *g, const char *name, void **data, size_t *bytes, kimi_err *err);

/* Sections. Each returns 0 when it could run its cases (pass or fail recorded through
 * golden_case), non-zero with err filled when it could not run at all. */
int golden_weights(golden_run *g, kimi_err *err);    /* app/probe/golden_weights.c */
int golden_tokenizer(golden_run *g, kimi_err *err);  /* app/probe/golden_tokenizer.c */
int golden_chat(golden_run *g, kimi_err *err);       /* app/probe/golden_chat.c */
int golden_kv(golden_run *g, kimi_err *err);         /* app/probe/golden_model.c */
int golden_model(golden_run *g, kimi_err *err);      /* app/probe/golden_model.c */

#endif
