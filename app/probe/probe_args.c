/* probe_args: kimi-probe's flag parsing. */
#include "app/probe/probe_args.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static int name_allowed(const char *allowed, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = allowed; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == len && strncmp(p, name, n) == 0)
            return 1;
        if (!comma)
            break;
        p = comma + 1;
    }
    return 0;
}

int probe_args_parse(probe_args *a, int argc, char **argv, const char *allowed, kimi_err *err)
{
    a->n = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || !arg[2])
            return kimi_fail(err, KIMI_ERR_USAGE, "unexpected argument '%s'", arg);
        const char *name = arg + 2;
        if (!name_allowed(allowed, name))
            return kimi_fail(err, KIMI_ERR_USAGE, "unknown flag '--%s'", name);
        if (probe_arg(a, name))
            return kimi_fail(err, KIMI_ERR_USAGE, "flag '--%s' given twice", name);
        if (a->n == PROBE_MAX_ARGS)
            return kimi_fail(err, KIMI_ERR_USAGE, "too many flags");
        a->name[a->n] = name;
        a->value[a->n] = NULL;
        if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
            a->value[a->n] = argv[++i];
        a->n++;
    }
    return 0;
}

const char *probe_arg(const probe_args *a, const char *name)
{
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->name[i], name) == 0)
            return a->value[i] ? a->value[i] : "";
    return NULL;
}

int probe_arg_required(const probe_args *a, const char *name, const char **out, kimi_err *err)
{
    const char *v = probe_arg(a, name);
    if (!v || !*v)
        return kimi_fail(err, KIMI_ERR_USAGE, "missing required flag '--%s VALUE'", name);
    *out = v;
    return 0;
}

int probe_arg_int(const probe_args *a, const char *name, long lo, long hi, long def, long *out,
                  kimi_err *err)
{
    const char *v = probe_arg(a, name);
    if (!v) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno)
        return kimi_fail(err, KIMI_ERR_USAGE, "--%s: '%s' is not an integer", name, v);
    if (x < lo || x > hi)
        return kimi_fail(err, KIMI_ERR_USAGE, "--%s: %ld is outside [%ld, %ld]", name, x, lo, hi);
    *out = x;
    return 0;
}

int probe_arg_kv_cache(const probe_args *a, kv_cache_format *out, kimi_err *err)
{
    const char *v = probe_arg(a, "kv-cache");
    *out = KV_CACHE_FP16;
    if (v && kv_cache_format_parse(v, out))
        return kimi_fail(err, KIMI_ERR_USAGE, "--kv-cache: '%s' is not fp16 or fp8", v);
    return 0;
}

int probe_arg_cpu_activations(const probe_args *a, cpu_activations *out, kimi_err *err)
{
    const char *v = probe_arg(a, "cpu-activations");
    *out = CPU_ACTIVATIONS_FP32;
    if (v && cpu_activations_parse(v, out))
        return kimi_fail(err, KIMI_ERR_USAGE, "--cpu-activations: '%s' is not fp32 or int8", v);
    return 0;
}

int probe_arg_cpu_weights(const probe_args *a, cpu_weights *out, kimi_err *err)
{
    const char *v = probe_arg(a, "cpu-weights");
    *out = CPU_WEIGHTS_HUGE_PAGES;
    if (v && cpu_weights_parse(v, out))
        return kimi_fail(err, KIMI_ERR_USAGE, "--cpu-weights: '%s' is not huge-pages or mmap", v);
    return 0;
}

int probe_arg_double(const probe_args *a, const char *name, double def, double *out, kimi_err *err)
{
    const char *v = probe_arg(a, name);
    if (!v) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno)
        return kimi_fail(err, KIMI_ERR_USAGE, "--%s: '%s' is not a number", name, v);
    *out = x;
    return 0;
}

int probe_parse_int_list(const char *flag, const char *text, int **out, int *n, kimi_err *err)
{
    size_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    int *v = malloc(cap * sizeof *v);
    if (!v)
        return kimi_fail(err, KIMI_ERR_NOMEM, "--%s: out of memory", flag);
    int count = 0;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < INT_MIN || x > INT_MAX || (*end && *end != ',')) {
            free(v);
            return kimi_fail(err, KIMI_ERR_USAGE, "--%s: '%s' is not a comma-separated list of integers", flag, text);
        }
        v[count++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (count == 0) {
        free(v);
        return kimi_fail(err, KIMI_ERR_USAGE, "--%s: empty list", flag);
    }
    *out = v;
    *n = count;
    return 0;
}
