/* self_check: kimi-chat --verify (app/chat/self_check.h). */
#include "app/chat/self_check.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/backend/device_plan.h"
#include "engine/text/tokenizer.h"
#include "engine/runtime/verify.h"

static void print_phase(void *user, const char *line)
{
    (void)user;
    fprintf(stderr, "kimi-chat: verify: %s\n", line);
}

int self_check_run(const app_options *o, const char *model_dir, int *passed, char *verdict, size_t verdict_cap,
                   kimi_err *err)
{
    model_weights mw = {0};
    tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int n_ids = 0;
    *passed = 0;
    if (verdict_cap)
        verdict[0] = 0;
    int devices[DEVICE_MAX_RANKS], n_devices = 0;
    int rc = o->devices ? device_list_parse("--devices", o->devices, devices, &n_devices, err) : 0;
    if (!rc)
        rc = weights_load(&mw, model_dir, err);
    if (!rc)
        rc = tokenizer_load(&tok, model_dir, &mw.cfg, err);
    if (!rc)
        rc = verify_render_prompt(tok, VERIFY_DEFAULT_PROMPT, &ids, &n_ids, err);
    verify_report report;
    verify_options vo = {
        .tokens = ids, .n_tokens = n_ids, .n_decode = VERIFY_DEFAULT_DECODE,
        .reference = {.kind = BACKEND_CPU, .tp = 1, .threads_per_rank = o->threads},
        .candidate = {.kind = (backend_kind)o->backend, .tp = o->tp, .dcp = o->dcp, .threads_per_rank = o->threads,
                      .devices = n_devices ? devices : NULL, .n_devices = n_devices},
        .on_phase = print_phase,
    };
    const char *backend_name = o->backend == BACKEND_CUDA ? "cuda" : "cpu";
    if (!rc) {
        if (o->backend == BACKEND_CUDA)
            fprintf(stderr, "kimi-chat: verify: the CUDA backend at TP %d against the CPU at TP 1, on a fixed prompt "
                            "of %d tokens and %d decode steps\n", o->tp, n_ids, vo.n_decode);
        else
            fprintf(stderr, "kimi-chat: verify: --backend cpu: the CPU at TP %d against the CPU at TP 1, on a fixed "
                            "prompt of %d tokens and %d decode steps (the check is meant for --backend cuda)\n",
                    o->tp, n_ids, vo.n_decode);
        rc = verify_run(&mw, &vo, &report, err);
    }
    if (!rc) {
        int n_passed = 0;
        for (int m = 0; m < VERIFY_N_METRICS; m++) {
            char line[768];
            verify_metric_line(&report, (verify_metric)m, line, sizeof line);
            fprintf(stderr, "kimi-chat: verify: %s\n", line);
            n_passed += verify_metric_passed(&report, (verify_metric)m);
        }
        *passed = n_passed == VERIFY_N_METRICS;
        if (*passed)
            snprintf(verdict, verdict_cap, "verify: PASS: %s tp %d agrees with the CPU reference on this checkpoint "
                     "(max |Δ logit| %.3g, KL max %.3g nats)", backend_name, o->tp, report.logit_max_abs,
                     report.kl_max);
        else
            snprintf(verdict, verdict_cap, "verify: FAIL: %d of %d metrics outside tolerance: %s tp %d disagrees "
                     "with the CPU reference on the same checkpoint, so the code or its cache is at fault, not the "
                     "model", VERIFY_N_METRICS - n_passed, VERIFY_N_METRICS, backend_name, o->tp);
        fprintf(stderr, "kimi-chat: %s\n", verdict);
    }
    free(ids);
    tokenizer_free(tok);
    if (mw.layers)
        weights_free(&mw);
    return rc;
}
