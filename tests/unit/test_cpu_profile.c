/* test_cpu_profile: the CPU backend's decode-step profile (engine/backend/cpu_profile.h) on the
 * tiny checkpoint: off, nothing is recorded; on, one-token steps are counted and prefills are
 * not, the phases add up to no more than the step, and each phase's weight bytes are exactly
 * those of the matrices the model's structure says it reads (tp 1: the whole model). */
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/cpu_profile.h"
#include "engine/model/weights.h"
#include "tests/unit/check.h"

#define TINY "tests/golden/fixtures/tiny-k25"
enum { PROMPT = 6, DECODES = 3 };

static double bytes_of(const weight_matrix *w)
{
    double rows = w->rows, cols = w->cols;
    return w->format == WEIGHT_NVFP4 ? rows * (cols / 2 + cols / 16)
                                     : rows * cols * (w->format == WEIGHT_F32 ? 4 : 2);
}

static double mlp_bytes(const mlp_weights *m)
{
    return bytes_of(&m->gate.w) + bytes_of(&m->up.w) + bytes_of(&m->down.w);
}

/* Prefill PROMPT tokens, then `decodes` one-token steps, on a fresh backend. */
static void run(const model_weights *mw, int threads, int decodes)
{
    kimi_err err = {0};
    backend *be = NULL;
    backend_options opt = {.kind = BACKEND_CPU, .tp = 1, .threads_per_rank = threads, .max_context = 32};
    if (backend_open(&be, mw, &opt, &err)) {
        CHECK_MSG(0, "backend_open: %s", err.msg);
        return;
    }
    static float logits[1 << 16];
    CHECK((size_t)mw->cfg.vocab <= sizeof logits / sizeof *logits);
    int32_t tokens[PROMPT + DECODES];
    for (int t = 0; t < PROMPT + DECODES; t++)
        tokens[t] = (t * 331 + 7) % mw->cfg.vocab;
    int last = PROMPT - 1, zero = 0;
    CHECK_INT(backend_forward(be, tokens, PROMPT, 0, &last, 1, logits, &err), 0);
    for (int i = 0; i < decodes; i++)
        CHECK_INT(backend_forward(be, tokens + PROMPT + i, 1, PROMPT + i, &zero, 1, logits, &err), 0);
    backend_close(be);
}

static void check_profile(const model_weights *mw, int threads)
{
    const model_config *c = &mw->cfg;
    double want[CPU_PHASE_COUNT] = {0};
    for (int i = 0; i < c->layers; i++) {
        const layer_weights *lw = &mw->layers[i];
        want[CPU_PHASE_ATTENTION_GEMV] += bytes_of(&lw->q_a.w) + bytes_of(&lw->kv_a.w) + bytes_of(&lw->q_b.w) +
                                          bytes_of(&lw->o.w);
        want[CPU_PHASE_ATTENTION] += bytes_of(&lw->kv_b.w);
        if (!lw->is_moe) {
            want[CPU_PHASE_MLP_GEMV] += mlp_bytes(&lw->dense);
            continue;
        }
        want[CPU_PHASE_ROUTING] += bytes_of(&lw->router.w);
        /* one token picks experts_per_token distinct experts, all of one size */
        want[CPU_PHASE_MLP_GEMV] += (c->shared_experts > 0 ? mlp_bytes(&lw->shared) : 0) +
                                    c->experts_per_token * mlp_bytes(&lw->experts[0]);
    }
    want[CPU_PHASE_LM_HEAD] = bytes_of(&mw->lm_head.w);

    cpu_profile p;
    cpu_profile_enable(0);
    run(mw, threads, 1);
    cpu_profile_take(&p);
    CHECK_MSG(p.steps == 0 && p.step_seconds == 0, "off: %ld steps recorded", p.steps);

    cpu_profile_enable(1);
    run(mw, threads, DECODES);
    cpu_profile_take(&p);
    cpu_profile_enable(0);
    CHECK_MSG(p.steps == DECODES, "%d threads: %ld steps profiled, want %d (prefills are not)", threads, p.steps,
              DECODES);
    double phases = 0, phases_cpu = 0;
    for (int i = 0; i < CPU_PHASE_COUNT; i++) {
        CHECK_MSG(p.seconds[i] >= 0 && p.cpu_seconds[i] >= 0, "phase %s: negative time", cpu_phase_name(i));
        phases += p.seconds[i];
        phases_cpu += p.cpu_seconds[i];
        CHECK_MSG(p.weight_bytes[i] == DECODES * want[i], "%d threads, phase %s: %.0f weight bytes in %d steps, want %.0f",
                  threads, cpu_phase_name(i), p.weight_bytes[i], DECODES, DECODES * want[i]);
    }
    CHECK_MSG(phases > 0 && phases <= p.step_seconds, "phases %.9f s, steps %.9f s", phases, p.step_seconds);
    CHECK_MSG(phases_cpu <= p.step_cpu_seconds + 1e-9, "phases %.9f CPU s, steps %.9f", phases_cpu, p.step_cpu_seconds);
    CHECK(p.worker_wait_seconds >= 0 && p.worker_wait_seconds <= p.step_seconds);
    CHECK(threads > 1 || p.worker_wait_seconds == 0);

    cpu_profile_take(&p);
    CHECK_MSG(p.steps == 0 && p.weight_bytes[CPU_PHASE_MLP_GEMV] == 0, "a take did not reset the totals");
    CHECK(strcmp(cpu_phase_name(CPU_PHASE_MLP_GEMV), "mlp_gemv") == 0);
}

int main(void)
{
    kimi_err err = {0};
    model_weights mw;
    if (weights_load(&mw, TINY, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return check_finish();
    }
    check_profile(&mw, 1);
    check_profile(&mw, 2);
    weights_free(&mw);
    return check_finish();
}
