/* probe_args: "--name value" / "--flag" command-line parsing shared by kimi-probe's commands,
 * with unknown flags rejected by name. */
#ifndef KIMI_PROBE_ARGS_H
#define KIMI_PROBE_ARGS_H

#include "engine/base/error.h"
#include "engine/backend/backend.h"
#include "kernels/kv_format.h"

#define PROBE_MAX_ARGS 32

typedef struct {
    const char *name[PROBE_MAX_ARGS];   /* without the leading "--" */
    const char *value[PROBE_MAX_ARGS];  /* NULL for a bare flag */
    int n;
} probe_args;

/* Parse argv[0..argc) (after the command word). allowed: comma-separated flag names. */
int probe_args_parse(probe_args *a, int argc, char **argv, const char *allowed, kimi_err *err);
/* Value of --name, or NULL when absent. A bare flag gives "". */
const char *probe_arg(const probe_args *a, const char *name);
/* --name as an int in [lo, hi], or def when absent. */
int probe_arg_int(const probe_args *a, const char *name, long lo, long hi, long def, long *out,
                  kimi_err *err);
/* --name as a double, or def when absent. */
int probe_arg_double(const probe_args *a, const char *name, double def, double *out, kimi_err *err);
/* --kv-cache fp16|fp8, fp16 when absent. */
int probe_arg_kv_cache(const probe_args *a, kv_cache_format *out, kimi_err *err);
/* --cpu-activations fp32|int8 (engine/backend/backend.h), fp32 when absent. */
int probe_arg_cpu_activations(const probe_args *a, cpu_activations *out, kimi_err *err);
/* --cpu-weights huge-pages|mmap (engine/backend/backend.h), huge-pages when absent. */
int probe_arg_cpu_weights(const probe_args *a, cpu_weights *out, kimi_err *err);
/* A required --name; fills err (usage) when missing. */
int probe_arg_required(const probe_args *a, const char *name, const char **out, kimi_err *err);
/* Comma-separated integers ("1,2,3") into a malloc'ed array. */
int probe_parse_int_list(const char *flag, const char *text, int **out, int *n, kimi_err *err);

#endif
