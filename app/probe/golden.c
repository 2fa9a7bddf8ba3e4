/* golden: the kimi-probe golden command, its section dispatch and its reporting. */
#include "app/probe/golden.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "app/probe/probe.h"
#include "app/probe/probe_args.h"
#include "engine/backend/kv_shard.h"
#include "engine/base/file_io.h"

typedef struct {
    const char *name;
    int (*run)(golden_run *g, kimi_err *err);
} golden_section;

static const golden_section sections[] = {
    {"tokenizer", golden_tokenizer}, {"chat", golden_chat}, {"weights", golden_weights},
    {"kv", golden_kv},               {"model", golden_model},
};
enum { N_SECTIONS = sizeof sections / sizeof sections[0] };

void golden_case(golden_run *g, int ok, const char *name, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("%s %s %s\n", ok ? "PASS" : "FAIL", name, detail);
    fflush(stdout);
    if (ok)
        g->passed++;
    else
        g->failed++;
}

int golden_read_file(const golden_run *g, const char *name, void **data, size_t *bytes, kimi_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g->reference_dir, name);
    char *text;
    if (file_read_all(path, &text, bytes, err))
        return err->code;
    *data = text;
    return 0;
}

static int section_selected(const char *only, const char *name)
{
    if (!only)
        return 1;
    size_t len = strlen(name);
    for (const char *p = only; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == len && !strncmp(p, name, n))
            return 1;
        if (!comma)
            break;
        p = comma + 1;
    }
    return 0;
}

static int check_only(const char *only, kimi_err *err)
{
    for (const char *p = only; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        int known = 0;
        for (int i = 0; i < N_SECTIONS; i++)
            known |= strlen(sections[i].name) == n && !strncmp(p, sections[i].name, n);
        if (!known)
            return kimi_fail(err, KIMI_ERR_USAGE, "--only: unknown section '%.*s' (tokenizer, chat, weights, kv, model)", (int)n, p);
        if (!comma)
            break;
        p = comma + 1;
    }
    return 0;
}

int golden_skip(golden_run *g, const char *name)
{
    if (!name)
        return 0;
    size_t n = strlen(name);
    for (const char *p = g->skip; p && *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, name, n)) {
            printf("SKIP %s (--skip)\n", name);
            g->skipped++;
            return 1;
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

/* The names on the --skip list. */
static int skip_count(const char *skip)
{
    int n = 0;
    for (const char *p = skip; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ','))
        n++;
    return n;
}

int probe_golden(int argc, char **argv)
{
    kimi_err err = {0};
    probe_args a;
    long tp, dcp;
    golden_run g = {0};
    const char *only;
    if (probe_args_parse(&a, argc, argv, "model,reference,only,backend,tp,dcp,devices,skip,kv-cache,cpu-activations",
                         &err) ||
        probe_arg_kv_cache(&a, &g.kv_cache, &err) || probe_arg_cpu_activations(&a, &g.activations, &err) ||
        probe_arg_required(&a, "model", &g.model_dir, &err) ||
        probe_arg_required(&a, "reference", &g.reference_dir, &err) ||
        probe_arg_int(&a, "tp", 1, 8, 1, &tp, &err) || probe_arg_int(&a, "dcp", 1, 8, 1, &dcp, &err) ||
        kv_shard_check((int)tp, (int)dcp, &err) || probe_arg_devices(&a, g.devices, &g.n_devices, &err))
        return probe_report(&err);
    g.tp = (int)tp;
    g.dcp = (int)dcp;
    snprintf(g.ranks, sizeof g.ranks, g.dcp > 1 ? "tp %d, dcp %d" : "tp %d", g.tp, g.dcp);
    g.backend = probe_arg(&a, "backend") ? probe_arg(&a, "backend") : "cpu";
    if (strcmp(g.backend, "cpu") && strcmp(g.backend, "cuda")) {
        kimi_fail(&err, KIMI_ERR_USAGE, "--backend: '%s' is not cpu or cuda", g.backend);
        return probe_report(&err);
    }
    g.skip = probe_arg(&a, "skip");
    only = probe_arg(&a, "only");
    if (only && check_only(only, &err))
        return probe_report(&err);
    for (int i = 0; i < N_SECTIONS; i++) {
        if (!section_selected(only, sections[i].name))
            continue;
        if (sections[i].run(&g, &err)) {
            golden_case(&g, 0, sections[i].name, "could not run: %s", err.msg);
            err = (kimi_err){0};
        }
    }
    if (g.skipped != skip_count(g.skip))    /* a misspelt name would skip nothing and pass */
        golden_case(&g, 0, "--skip", "%d of the %d names given match a case", g.skipped, skip_count(g.skip));
    if (g.skipped)
        printf("%d passed, %d failed, %d skipped (--skip)\n", g.passed, g.failed, g.skipped);
    else
        printf("%d passed, %d failed\n", g.passed, g.failed);
    return g.failed == 0 && g.passed > 0 ? 0 : 1;
}
