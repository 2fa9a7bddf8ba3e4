/* kimi-probe: command-line access to every layer of the engine (loader, tokenizer, chat
 * format, forward pass, cache, benchmarks) for conformance checks and measurements. */
#include "app/probe/probe.h"

#include <stdio.h>
#include <string.h>

#include "engine/backend/device_plan.h"
#include "engine/base/error.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} probe_command;

static const probe_command commands[] = {
    {"info", probe_info, "architecture and memory plan of a checkpoint"},
    {"plan", probe_plan, "the CUDA memory plan over given devices, without a GPU"},
    {"weights", probe_weights, "dequantized float32 rows of one linear"},
    {"tokenize", probe_tokenize, "stdin JSONL {\"text\"} -> stdout JSONL {\"ids\"}"},
    {"render", probe_render, "stdin JSONL conversations -> stdout JSONL {\"text\",\"ids\"}"},
    {"logits", probe_logits, "logits of a token sequence"},
    {"kv", probe_kv, "the fp16 latent cache after a prefill"},
    {"generate", probe_generate, "greedy generation: ids and text"},
    {"bench", probe_bench, "load, prefill and decode speed as one JSON object"},
    {"load", probe_load, "load time and GB/s next to the storage's own read bandwidth"},
    {"golden", probe_golden, "conformance against reference data"},
    {"verify", probe_verify, "the same tokens through the CPU and a candidate backend, compared"},
};

int probe_report(const kimi_err *err)
{
    int code = err->code ? err->code : 1;
    fprintf(stderr, "kimi-probe: %s\n", err->msg[0] ? err->msg : "unknown error");
    return code;
}

int probe_arg_backend(const probe_args *a, backend_kind *kind, kimi_err *err)
{
    const char *name = probe_arg(a, "backend");
    *kind = BACKEND_CPU;
    if (!name || !strcmp(name, "cpu"))
        return 0;
    if (!strcmp(name, "cuda")) {
        *kind = BACKEND_CUDA;
        return 0;
    }
    return kimi_fail(err, KIMI_ERR_USAGE, "--backend: '%s' is not cpu or cuda", name);
}

int probe_arg_devices(const probe_args *a, int *devices, int *n, kimi_err *err)
{
    const char *v = probe_arg(a, "devices");
    *n = 0;
    if (!v)
        return 0;
    char what[96];
    snprintf(what, sizeof what, "--devices %.80s", v);
    return device_list_parse(what, v, devices, n, err);
}

static void usage(FILE *out)
{
    fprintf(out, "usage: kimi-probe COMMAND [--flag value ...]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return KIMI_ERR_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 2, argv + 2);
    fprintf(stderr, "kimi-probe: unknown command '%s' (try kimi-probe --help)\n", argv[1]);
    return KIMI_ERR_USAGE;
}
