/* GPU test: the two CUDA prefill paths on the same inputs (tiny-k25, TP 1 and 2): GEMM steps
 * (KIMI_CUDA_PREFILL=gemm, the default) against the decode-kernel steps (=steps), for a
 * 150-token prefill (steps of 64, 64 and 22 tokens: all GEMM steps) and one decode step after
 * it, which reads the cache the prefill wrote. Both paths compute in fp32 terms (the GEMMs
 * multiply exact BF16 weights by hi + lo BF16 activations), so they must agree about as two fp32
 * implementations do (docs/CONVENTIONS.md): logits max |error| <= 5e-2 (the CUDA golden bound)
 * and mean <= 1e-3 (the CPU one); fp16 cache: per element |error| / rms(its vector) mean <=
 * 1e-4 and max <= 4e-3 (the CPU contract). Exits 77 (skipped) without a device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/weights.h"
#include "kernels/half_math.h"
#include "tests/gpu/gpu_test.h"

#define TINY "tests/golden/fixtures/tiny-k25"

enum { PREFILL = 150, CAPACITY = 256 };

typedef struct {
    float *logits;      /* [PREFILL + 1][vocab]: the prefill's rows, then the decode step's */
    uint16_t *cache;    /* [layers][PREFILL + 1][row] */
} run_result;

static int run_path(const model_weights *mw, int tp, const char *path, run_result *out)
{
    const model_config *c = &mw->cfg;
    size_t vocab = (size_t)c->vocab, row = (size_t)(c->kv_lora_rank + c->qk_rope_dim);
    kimi_err err = {0};
    setenv("KIMI_CUDA_PREFILL", path, 1);
    backend *be = NULL;
    int device0 = 0;    /* every rank on device 0 */
    backend_options opt = {.kind = BACKEND_CUDA, .tp = tp, .max_context = CAPACITY, .devices = &device0, .n_devices = 1};
    int rc = backend_open(&be, mw, &opt, &err);
    unsetenv("KIMI_CUDA_PREFILL");
    CHECK_MSG(rc == 0, "open, KIMI_CUDA_PREFILL=%s tp %d: %s", path, tp, err.msg);
    if (rc)
        return -1;
    int32_t tokens[PREFILL + 1];
    int rows[PREFILL];
    for (int j = 0; j <= PREFILL; j++)
        tokens[j] = (int32_t)((j * 37 + 11) % c->vocab);
    for (int j = 0; j < PREFILL; j++)
        rows[j] = j;
    out->logits = malloc((PREFILL + 1) * vocab * sizeof(float));
    out->cache = malloc((size_t)c->layers * (PREFILL + 1) * row * sizeof(uint16_t));
    int zero = 0;
    rc = backend_forward(be, tokens, PREFILL, 0, rows, PREFILL, out->logits, &err);
    if (!rc)
        rc = backend_forward(be, tokens + PREFILL, 1, PREFILL, &zero, 1, out->logits + PREFILL * vocab, &err);
    if (!rc)
        rc = backend_read_kv(be, PREFILL + 1, out->cache, &err);
    CHECK_MSG(rc == 0, "forward, KIMI_CUDA_PREFILL=%s tp %d: %s", path, tp, err.msg);
    backend_close(be);
    return rc;
}

static void compare(const model_config *c, int tp, const run_result *gemm, const run_result *steps)
{
    size_t vocab = (size_t)c->vocab, row = (size_t)(c->kv_lora_rank + c->qk_rope_dim);
    double worst = 0, total = 0;
    size_t n = (PREFILL + 1) * vocab;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)gemm->logits[i] - steps->logits[i]);
        worst = e > worst || isnan(e) ? e : worst;
        total += e;
    }
    CHECK_MSG(worst <= 5e-2 && total / n <= 1e-3, "tp %d logits, GEMM vs steps: max %.3g mean %.3g", tp, worst,
              total / n);
    double cache_worst = 0, cache_total = 0;
    size_t vectors = (size_t)c->layers * (PREFILL + 1), count = 0;
    for (size_t v = 0; v < vectors; v++) {
        const uint16_t *a = gemm->cache + v * row, *b = steps->cache + v * row;
        double squares = 0;
        for (size_t i = 0; i < row; i++)
            squares += (double)half_to_float(b[i]) * half_to_float(b[i]);
        double rms = sqrt(squares / (double)row);
        for (size_t i = 0; i < row; i++) {
            double e = fabs((double)half_to_float(a[i]) - half_to_float(b[i])) / (rms > 0 ? rms : 1);
            cache_worst = e > cache_worst || isnan(e) ? e : cache_worst;
            cache_total += e;
            count++;
        }
    }
    CHECK_MSG(cache_worst <= 4e-3 && cache_total / count <= 1e-4, "tp %d cache, GEMM vs steps: max %.3g mean %.3g",
              tp, cache_worst, cache_total / count);
    printf("tp %d: logits max %.3g mean %.3g; cache max %.3g mean %.3g (GEMM vs steps)\n", tp, worst, total / n,
           cache_worst, cache_total / count);
}

int main(void)
{
    gpu_test_require_device();
    model_weights mw;
    kimi_err err = {0};
    if (weights_load(&mw, TINY, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return check_finish();
    }
    for (int tp = 1; tp <= 2; tp++) {
        run_result gemm = {0}, steps = {0};
        if (!run_path(&mw, tp, "gemm", &gemm) && !run_path(&mw, tp, "steps", &steps))
            compare(&mw.cfg, tp, &gemm, &steps);
        free(gemm.logits);
        free(gemm.cache);
        free(steps.logits);
        free(steps.cache);
    }
    weights_free(&mw);
    return check_finish();
}
