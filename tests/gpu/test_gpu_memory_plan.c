/* GPU test on the CPU emulation of CUDA (tests/emu), two devices of KIMI_EMU_MEMORY_MIB each
 * (set by ctest so that the cache, not the weights, decides the context), NCCL at TP 2:
 *   - the memory the open takes beyond the plan (the emulator's NCCL buffers, counted in
 *     cudaMemGetInfo as a device's are) is measured before the cache is made, and a context
 *     that was the plan's fit (backend_options.fit_context) is lowered by that overhead: the
 *     capacity is the plan's less overhead / bytes per position (rounded either way), and the
 *     shrunk cache holds a step's rows where its layout says;
 *   - the same context asked for (fit_context 0) fails with one line naming the context, the
 *     device, the overhead and the largest that fits.
 * Exits 77 (skipped) without a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/model/weights.h"
#include "tests/gpu/gpu_test.h"

#define TINY "tests/golden/fixtures/tiny-k25"

static const int devices[2] = {0, 1};

/* The context the engine's plan gives before open (engine.c: (budget - fixed) / bytes per
 * position), from what backend_memory says of the devices. */
static long planned_context(const model_weights *mw, size_t position_bytes)
{
    backend_options probe = {.kind = BACKEND_CUDA, .tp = 2, .devices = devices, .n_devices = 2};
    size_t budget = 0, fixed = 0;
    kimi_err err = {0};
    CHECK_MSG(backend_memory(mw, &probe, &budget, &fixed, &err) == 0, "backend_memory: %s", err.msg);
    CHECK_MSG(budget > fixed, "the device budget %zu B does not exceed the fixed %zu B", budget, fixed);
    return budget > fixed ? (long)((budget - fixed) / position_bytes) : 0;
}

static void check_fit_lowered(const model_weights *mw, long planned, size_t position_bytes)
{
    const model_config *c = &mw->cfg;
    backend *be = NULL;
    kimi_err err = {0};
    backend_options opt = {.kind = BACKEND_CUDA, .tp = 2, .max_context = planned, .fit_context = 1,
                           .devices = devices, .n_devices = 2};
    if (backend_open(&be, mw, &opt, &err)) {
        CHECK_MSG(0, "open with the plan's %ld positions: %s", planned, err.msg);
        return;
    }
    int device = -1;
    long long overhead = backend_runtime_overhead(be, &device);
    long capacity = backend_capacity(be), shrink = (long)(overhead / (long long)position_bytes);
    printf("plan %ld positions, measured overhead %lld B on device %d, capacity %ld\n", planned, overhead, device,
           capacity);
    CHECK_MSG(overhead > 0 && (device == 0 || device == 1), "overhead %lld B on device %d", overhead, device);
    CHECK_MSG(capacity == planned - shrink || capacity == planned - shrink - 1,
              "capacity %ld: the plan's %ld less %lld B / %zu B per position is %ld (or one less)", capacity, planned,
              overhead, position_bytes, planned - shrink);
    /* the shrunk cache's layers are laid out at its capacity: a step at position 0 writes row 0
     * of each layer, and the cache read back over every position finds those rows and nothing
     * else (the rest was cleared) */
    int32_t token = 7;
    int row = 0;
    size_t width = (size_t)(c->kv_lora_rank + c->qk_rope_dim);
    float *logits = malloc((size_t)c->vocab * sizeof(float));
    uint16_t *cache = malloc((size_t)c->layers * (size_t)capacity * width * sizeof(uint16_t));
    CHECK_MSG(backend_forward(be, &token, 1, 0, &row, 1, logits, &err) == 0 &&
              backend_read_kv(be, capacity, cache, &err) == 0, "a step and the cache read: %s", err.msg);
    int misplaced = 0;
    for (int layer = 0; layer < c->layers && !err.msg[0]; layer++) {
        const uint16_t *first = cache + (size_t)layer * (size_t)capacity * width;
        const uint16_t *last = first + (size_t)(capacity - 1) * width;
        int written = 0, stray = 0;
        for (size_t i = 0; i < width; i++)
            written |= first[i] != 0, stray |= last[i] != 0;
        misplaced += !written || stray;
    }
    CHECK_MSG(misplaced == 0, "%d layers' cache rows are not where a cache of %ld positions keeps them", misplaced,
              capacity);
    free(logits);
    free(cache);
    backend_close(be);
}

static void check_asked_fails(const model_weights *mw, long planned)
{
    backend *be = NULL;
    kimi_err err = {0};
    backend_options opt = {.kind = BACKEND_CUDA, .tp = 2, .max_context = planned, .devices = devices, .n_devices = 2};
    int rc = backend_open(&be, mw, &opt, &err);
    char want[64];
    snprintf(want, sizeof want, "max context %ld does not fit on CUDA device", planned);
    printf("asked %ld: %s\n", planned, err.msg);
    CHECK_MSG(rc == KIMI_ERR_NOMEM && strstr(err.msg, want) && strstr(err.msg, "MiB taken beyond the plan") &&
              strstr(err.msg, "at most") && !strchr(err.msg, '\n'),
              "asked %ld positions: rc %d '%s'", planned, rc, err.msg);
    if (!rc)
        backend_close(be);
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
    const model_config *c = &mw.cfg;
    size_t position_bytes = (size_t)c->layers * (size_t)(c->kv_lora_rank + c->qk_rope_dim) * sizeof(uint16_t);
    long planned = planned_context(&mw, position_bytes);
    check_fit_lowered(&mw, planned, position_bytes);
    check_asked_fails(&mw, planned);
    weights_free(&mw);
    return check_finish();
}
