/* probe: kimi-probe's commands, the stable command-line contract that conformance checks,
 * benchmarks and GPU runs build on (docs/CONVENTIONS.md). Each returns a process exit code
 * and has printed its own error line when that is non-zero. */
#ifndef KIMI_PROBE_H
#define KIMI_PROBE_H

#include "app/probe/probe_args.h"
#include "engine/runtime/engine.h"

int probe_info(int argc, char **argv);      /* app/probe/probe_model.c */
int probe_plan(int argc, char **argv);      /* app/probe/probe_model.c */
int probe_weights(int argc, char **argv);   /* app/probe/probe_model.c */
int probe_tokenize(int argc, char **argv);  /* app/probe/probe_tokenize.c */
int probe_render(int argc, char **argv);    /* app/probe/probe_render.c */
int probe_logits(int argc, char **argv);    /* app/probe/probe_run.c */
int probe_kv(int argc, char **argv);        /* app/probe/probe_run.c */
int probe_generate(int argc, char **argv);  /* app/probe/probe_bench.c */
int probe_bench(int argc, char **argv);     /* app/probe/probe_bench.c */
int probe_golden(int argc, char **argv);    /* app/probe/golden.c */
int probe_verify(int argc, char **argv);    /* app/probe/probe_verify.c */
int probe_load(int argc, char **argv);      /* app/probe/probe_load.c */

/* The engine options the commands that run the model share: --model, --backend cpu|cuda, --tp,
 * --devices, --threads, --ctx (default_ctx when absent), --kv-cache, --cpu-activations,
 * --cpu-weights. app/probe/probe_bench.c */
int probe_engine_options(const probe_args *a, long default_ctx, engine_options *opt, kimi_err *err);

/* Print "kimi-probe: <msg>" to stderr and return the exit code for err. */
int probe_report(const kimi_err *err);

/* --backend cpu|cuda into *kind (BACKEND_CPU when absent). */
int probe_arg_backend(const probe_args *a, backend_kind *kind, kimi_err *err);

/* --devices LIST (engine/backend/device_plan.h device_list_parse) into devices [8]; *n = 0 when absent. */
int probe_arg_devices(const probe_args *a, int *devices, int *n, kimi_err *err);

#endif
