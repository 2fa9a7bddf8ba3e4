/* test_weights: the tiny-k25 checkpoint resolved into views (counts and formats derived from
 * its config and docs/MODEL_FORMAT.md), shard views against full-matrix decodes, the
 * tensor-parallel plan, the memory plan, and the threads that read the weights in. */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/check.h"

#define TINY "tests/golden/fixtures/tiny-k25"

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* K2.5-NVFP4 recipe (MODEL_FORMAT.md): every MLP linear NVFP4; attention, router and lm_head not. */
static void test_counts_and_formats(const model_weights *mw)
{
    const model_config *c = &mw->cfg;
    int dense_layers = 0;
    for (int l = 0; l < c->layers; l++)
        dense_layers += !config_layer_is_moe(c, l);
    int moe_layers = c->layers - dense_layers;
    CHECK_INT(c->layers, 4);
    CHECK_INT(dense_layers, 1);
    CHECK_INT(mw->n_nvfp4_linears, 3 * dense_layers + 3 * moe_layers * (c->experts + (c->shared_experts > 0)));
    CHECK_INT(mw->n_nvfp4_linears, 156);
    CHECK_INT(mw->n_dense_linears, 5 * c->layers + moe_layers + 1);
    CHECK_STR(mw->prefix, "language_model.model.");
    CHECK_STR(mw->lm_head.name, "language_model.lm_head");
    CHECK_INT(mw->lm_head.w.format, WEIGHT_BF16);
    CHECK_INT(mw->embed.w.rows, c->vocab);
    CHECK_INT(mw->embed.w.cols, c->hidden);
    CHECK_INT(mw->final_norm.n, c->hidden);
    for (int l = 0; l < c->layers; l++) {
        const layer_weights *lw = &mw->layers[l];
        CHECK_INT(lw->is_moe, l >= c->first_dense);
        CHECK_INT(lw->q_b.w.rows, c->heads * (c->qk_nope_dim + c->qk_rope_dim));
        CHECK_INT(lw->kv_a.w.rows, c->kv_lora_rank + c->qk_rope_dim);
        CHECK_INT(lw->o.w.cols, c->heads * c->v_head_dim);
        CHECK_INT(lw->q_a.w.format, WEIGHT_BF16);
        CHECK_INT(lw->kv_b.w.format, WEIGHT_BF16);
        const mlp_weights *m = lw->is_moe ? &lw->experts[c->experts - 1] : &lw->dense;
        CHECK_INT(m->gate.w.format, WEIGHT_NVFP4);
        CHECK_INT(m->down.w.format, WEIGHT_NVFP4);
        CHECK_INT(m->down.w.cols, lw->is_moe ? c->moe_intermediate : c->intermediate);
        CHECK_INT(m->down.w.scale_stride, m->down.w.cols / 16);
        CHECK_INT(m->gate.w.data_stride, c->hidden / 2);
        if (lw->is_moe) {
            CHECK_INT(lw->router.w.format, WEIGHT_BF16);
            CHECK_INT(lw->router.w.rows, c->experts);
            CHECK_INT(lw->router_bias.n, c->experts);
            CHECK_INT(lw->router_bias.type, DTYPE_BF16);
            CHECK_INT(lw->shared.inter, c->shared_experts * c->moe_intermediate);
            CHECK_INT(lw->shared.up.w.format, WEIGHT_NVFP4);
        }
    }
}

/* weight_bytes: every language-model tensor except the activation / FP8-cache scales
 * (input_scale, k_scale, v_scale), which the engine does not use. */
static void test_weight_bytes(const model_weights *mw)
{
    size_t expect = 0;
    for (size_t i = 0; i < safetensors_count(mw->files); i++) {
        const st_tensor *t = safetensors_at(mw->files, i);
        if (strncmp(t->name, "language_model.", 15) || ends_with(t->name, "input_scale") ||
            ends_with(t->name, "k_scale") || ends_with(t->name, "v_scale"))
            continue;
        expect += t->bytes;
    }
    CHECK_INT(mw->weight_bytes, expect);
    /* Derived with python3 from the shard headers: 7,174,368 tensor bytes, less 656 of unused
     * scales and 136,064 of vision_tower / mm_projector. */
    CHECK_INT(mw->weight_bytes, 7037648);
}

static void test_find(const model_weights *mw)
{
    const linear *l = weights_find_linear(mw, "language_model.model.layers.3.mlp.experts.15.down_proj");
    CHECK(l == &mw->layers[3].experts[15].down);
    CHECK(weights_find_linear(mw, "language_model.model.layers.1.mlp.gate") == &mw->layers[1].router);
    CHECK(weights_find_linear(mw, "language_model.lm_head") == &mw->lm_head);
    CHECK(weights_find_linear(mw, "language_model.model.layers.2.mlp.shared_experts.gate_proj") == &mw->layers[2].shared.gate);
    CHECK(weights_find_linear(mw, "language_model.model.layers.4.self_attn.o_proj") == NULL);
    CHECK(weights_find_linear(mw, "language_model.model.layers.0.mlp.gate_proj.weight") == NULL);
}

/* A view's rows and K range decode to exactly the full matrix's values there. */
static void check_views(const weight_matrix *full, index_range rows, index_range k)
{
    float *a = malloc((size_t)full->cols * sizeof *a), *b = malloc((size_t)full->cols * sizeof *b);
    weight_matrix by_rows = weight_rows(full, rows);
    weight_matrix both = weight_cols(&by_rows, k);
    CHECK_INT(by_rows.rows, rows.end - rows.begin);
    CHECK_INT(both.cols, k.end - k.begin);
    int same = 1;
    for (int r = rows.begin; r < rows.end; r++) {
        weight_matrix_decode_row(full, r, a);
        weight_matrix_decode_row(&by_rows, r - rows.begin, b);
        same &= !memcmp(a, b, (size_t)full->cols * sizeof *a);
        weight_matrix_decode_row(&both, r - rows.begin, b);
        same &= !memcmp(a + k.begin, b, (size_t)(k.end - k.begin) * sizeof *a);
    }
    CHECK_MSG(same, "view rows [%d,%d) cols [%d,%d) of format %d differ from the full decode", rows.begin, rows.end,
              k.begin, k.end, full->format);
    free(a);
    free(b);
}

static void test_views(const model_weights *mw)
{
    check_views(&mw->layers[0].dense.down.w, (index_range){100, 140}, (index_range){128, 256});
    check_views(&mw->layers[2].experts[7].gate.w, (index_range){64, 128}, (index_range){16, 48});
    check_views(&mw->layers[1].kv_b.w, (index_range){256, 384}, (index_range){8, 40});
    check_views(&mw->lm_head.w, (index_range){1152, 2304}, (index_range){0, 256});
}

static void test_tp_plan(const model_weights *mw)
{
    const model_config *c = &mw->cfg;
    kimi_err err = {0};
    tp_shard one;
    CHECK_INT(tp_shard_plan(mw, 1, 0, &one, &err), 0);
    CHECK_INT(one.weight_bytes, mw->weight_bytes);
    CHECK_INT(one.heads.end, c->heads);

    /* Replicated: embedding, final norm and per layer the norms, q_a, kv_a and router (+bias). */
    size_t replicated = mw->embed.w.rows * (size_t)mw->embed.w.cols * 2 + (size_t)c->hidden * 2;
    int nvfp4_sharded = mw->n_nvfp4_linears;
    for (int l = 0; l < c->layers; l++) {
        const layer_weights *lw = &mw->layers[l];
        replicated += (2 * (size_t)c->hidden + (size_t)c->q_lora_rank + (size_t)c->kv_lora_rank) * 2;   /* BF16 norms */
        replicated += (size_t)lw->q_a.w.rows * lw->q_a.w.cols * 2 + (size_t)lw->kv_a.w.rows * lw->kv_a.w.cols * 2;
        if (lw->is_moe)
            replicated += (size_t)c->experts * c->hidden * 2 + (size_t)c->experts * 2;
    }
    for (int tp = 2; tp <= 8; tp *= 2) {
        size_t sum = 0;
        int heads_next = 0, vocab_next = 0, moe_next = 0;
        for (int r = 0; r < tp; r++) {
            tp_shard s;
            CHECK_MSG(tp_shard_plan(mw, tp, r, &s, &err) == 0, "tp %d rank %d: %s", tp, r, err.msg);
            CHECK_INT(s.heads.begin, heads_next);
            CHECK_INT(s.heads.end - s.heads.begin, c->heads / tp);
            CHECK_INT(s.vocab.begin, vocab_next);
            CHECK(s.vocab.end - s.vocab.begin >= c->vocab / tp && s.vocab.end - s.vocab.begin <= c->vocab / tp + 1);
            CHECK_INT(s.moe_inter.begin, moe_next);
            CHECK_INT(s.moe_inter.end - s.moe_inter.begin, c->moe_intermediate / tp);
            CHECK_INT(s.dense_inter.end - s.dense_inter.begin, c->intermediate / tp);
            CHECK_INT(s.shared_inter.end - s.shared_inter.begin, c->shared_experts * c->moe_intermediate / tp);
            heads_next = s.heads.end;
            vocab_next = s.vocab.end;
            moe_next = s.moe_inter.end;
            sum += s.weight_bytes;
        }
        CHECK_INT(heads_next, c->heads);
        CHECK_INT(vocab_next, c->vocab);
        CHECK_INT(moe_next, c->moe_intermediate);
        /* Every rank reads the replicated tensors and each sharded NVFP4 linear's 4-byte scale_2. */
        CHECK_INT(sum, mw->weight_bytes + (size_t)(tp - 1) * (replicated + (size_t)nvfp4_sharded * 4));
    }
    tp_shard s;
    CHECK_INT(tp_shard_plan(mw, 3, 0, &s, &err), KIMI_ERR_USAGE);
    CHECK(strstr(err.msg, "num_attention_heads") != NULL);
    CHECK_INT(tp_shard_plan(mw, 16, 0, &s, &err), KIMI_ERR_USAGE);
    CHECK_INT(tp_shard_plan(mw, 2, 2, &s, &err), KIMI_ERR_USAGE);
}

static void test_memory_plan(const model_weights *mw)
{
    const model_config *c = &mw->cfg;
    size_t gib = (size_t)1 << 30;
    CHECK_INT(kv_bytes_per_token(c, KV_CACHE_FP16), 640);
    CHECK_INT(max_context_for_budget(c, KV_CACHE_FP16, mw->weight_bytes, gib), (long)((gib - mw->weight_bytes) / 640));
    CHECK_INT(max_context_for_budget(c, KV_CACHE_FP16, 1000, 1000 + 640 * 5 + 639), 5);
    CHECK_INT(max_context_for_budget(c, KV_CACHE_FP16, gib, gib), 0);
    CHECK_INT(max_context_for_budget(c, KV_CACHE_FP16, gib + 1, gib), 0);
}

/* ---- reading the weights in ---- */

typedef struct {
    int calls, stop_at;             /* answer "stop" to report stop_at (1 = the first); 0 = never */
    int in_order;                   /* done never fell, never passed total; total the same */
    size_t done, total;
} page_in_log;

static int log_page_in(void *user, size_t done, size_t total)
{
    page_in_log *l = user;
    l->in_order &= done >= l->done && done <= total && (l->calls == 0 || total == l->total);
    l->done = done;
    l->total = total;
    l->calls++;
    return l->stop_at > 0 && l->calls >= l->stop_at;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* The checkpoint's spans: in address order, disjoint, at least every tensor's bytes (small
 * gaps between them merged in). Read by several threads: progress
 * sums every thread's bytes to the spans' total, once at the end. Then spans over never-touched anonymous memory (read,
 * it is the zero page: a GiB costs no memory), in odd sizes around the 64 MiB step: reports
 * in order, summed to the total; a stop at the first report returns WEIGHTS_STOPPED with no
 * report after it, in a fraction of the whole read's time (only the steps in flight finish). */
static void test_page_in(const model_weights *mw)
{
    kimi_err err = {0};
    page_in_log log = {.in_order = 1};
    size_t total = 0;
    for (size_t i = 0; i < mw->n_spans; i++) {
        total += mw->spans[i].bytes;
        CHECK(i == 0 || mw->spans[i].data > mw->spans[i - 1].data + mw->spans[i - 1].bytes);
    }
    CHECK_MSG(total >= mw->weight_bytes, "spans of %zu bytes for %zu bytes of tensors", total, mw->weight_bytes);
    CHECK_INT(weights_page_in(mw, &(weights_page_in_options){3, 0, 0.1, log_page_in, &log}, NULL, &err), 0);
    CHECK(log.in_order && log.calls >= 1 && log.done == total && log.total == total);
    CHECK_INT(weights_page_in(mw, &(weights_page_in_options){0, 0, 0.1, log_page_in, &log}, NULL, &err), KIMI_ERR_USAGE);
    CHECK_MSG(strstr(err.msg, "0 threads") != NULL, "%s", err.msg);
    CHECK_INT(weights_page_in(mw, &(weights_page_in_options){2, 0, 0.1, NULL, NULL}, NULL, &err), 0);

    const size_t mib = (size_t)1 << 20, sizes[] = {300 * mib + 4097, 1, 64 * mib, 640 * mib - 4097 - 1, 20 * mib};
    const size_t n_spans = sizeof sizes / sizeof *sizes;
    size_t bytes = 0;
    for (size_t i = 0; i < n_spans; i++)
        bytes += sizes[i];
    double seconds[2];
    for (int stop = 0; stop <= 1; stop++) {
        /* fresh memory each time, so that both reads have the same work in front of them */
        uint8_t *image = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (image == MAP_FAILED) {
            CHECK_MSG(0, "mmap of %zu bytes failed", bytes);
            return;
        }
        (void)madvise(image, bytes, MADV_NOHUGEPAGE);   /* one fault per page, as a file's would be */
        weight_span spans[sizeof sizes / sizeof *sizes];
        size_t off = 0;
        for (size_t i = 0; i < n_spans; i++) {
            spans[i] = (weight_span){image + off, sizes[i], 0, 0};
            off += sizes[i];
        }
        model_weights image_weights = {.spans = spans, .n_spans = n_spans};
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        log = (page_in_log){.in_order = 1, .stop_at = stop};
        CHECK_INT(weights_page_in(&image_weights, &(weights_page_in_options){2, 0, 0.002, log_page_in, &log}, NULL, &err), stop ? WEIGHTS_STOPPED : 0);
        seconds[stop] = seconds_since(&t0);
        CHECK(log.in_order && log.total == bytes);
        if (stop)
            CHECK(log.calls == 1 && log.done < bytes);
        else
            CHECK_MSG(log.calls >= 2 && log.done == bytes, "%d reports in %.3f s", log.calls, seconds[0]);
        munmap(image, bytes);
    }
    CHECK_MSG(seconds[1] < seconds[0] * 0.5, "stopped after %.3f s, the whole read took %.3f s", seconds[1],
              seconds[0]);
}

/* The line of /proc/self/maps that holds addr, or "" (line: [size]). */
static void mapping_of(const void *addr, char *line, size_t size)
{
    line[0] = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return;
    char buf[512];
    while (fgets(buf, sizeof buf, f)) {
        unsigned long lo, hi;
        if (sscanf(buf, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
            snprintf(line, size, "%s", buf);
            break;
        }
    }
    fclose(f);
}

/* huge_pages: a span of a file mmap keeps its bytes and addresses, its 2 MiB-aligned inside
 * becomes anonymous read-only memory (the edges stay mapped from the file), and a span that is
 * not movable (a caller's image) or that has no whole 2 MiB inside stays as it was. */
static void test_page_in_huge_pages(void)
{
    enum { MIB = 1 << 20 };
    const size_t file_bytes = 9 * (size_t)MIB;
    char path[] = "/tmp/kimi-test-weights-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    uint8_t *content = malloc(file_bytes);
    for (size_t i = 0; i < file_bytes; i++)
        content[i] = (uint8_t)(i * 2654435761u >> 13);
    CHECK(write(fd, content, file_bytes) == (ssize_t)file_bytes);
    uint8_t *map = mmap(NULL, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED) {
        unlink(path);
        free(content);
        return;
    }
    /* A span from 100 bytes in to 300 bytes before the end (a 2 MiB-aligned inside of at least
     * 4 MiB wherever the map lands), and a second, not movable, tail span of 200 bytes. */
    const uint8_t *first = map + 100;
    size_t first_bytes = file_bytes - 100 - 500;
    weight_span spans[2] = {{first, first_bytes, 0, 1}, {map + file_bytes - 200, 200, 0, 0}};
    model_weights mw = {.spans = spans, .n_spans = 2};
    uintptr_t inside = ((uintptr_t)first + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1);
    uintptr_t inside_end = ((uintptr_t)first + first_bytes) & ~(uintptr_t)(2 * MIB - 1);
    kimi_err err = {0};
    size_t moved = 1;
    CHECK_INT(weights_page_in(&mw, &(weights_page_in_options){3, 1, 0.1, NULL, NULL}, &moved, &err), 0);
    char before[512], at[512], after[512];
    mapping_of(map, before, sizeof before);
    mapping_of((const void *)inside, at, sizeof at);
    mapping_of((const void *)(inside_end - 1), after, sizeof after);
    if (weights_huge_pages_available()) {
        CHECK_MSG(moved == inside_end - inside, "moved %zu bytes, the inside is %zu", moved,
                  (size_t)(inside_end - inside));
        CHECK_MSG(strstr(before, path) != NULL, "the edge before the inside: %s", before);
        CHECK_MSG(strstr(at, path) == NULL && strstr(after, path) == NULL && strstr(at, "r--p"),
                  "the inside, read-only and anonymous: %s / %s", at, after);
        char edge[512];
        mapping_of((const void *)inside_end, edge, sizeof edge);
        CHECK_MSG(strstr(edge, path) != NULL, "the edge after the inside: %s", edge);
    } else {
        CHECK_INT((int)moved, 0);
        printf("transparent huge pages are off here: the weights stayed in the mmap\n");
    }
    CHECK(memcmp(map, content, file_bytes) == 0);
    /* Not movable, and nothing movable asked for: nothing moves. */
    weight_span fixed = {map + 50, file_bytes - 100, 0, 0};
    mw = (model_weights){.spans = &fixed, .n_spans = 1};
    CHECK_INT(weights_page_in(&mw, &(weights_page_in_options){1, 1, 0.1, NULL, NULL}, &moved, &err), 0);
    CHECK_INT((int)moved, 0);
    fixed.movable = 1;
    CHECK_INT(weights_page_in(&mw, &(weights_page_in_options){1, 0, 0.1, NULL, NULL}, &moved, &err), 0);
    CHECK_INT((int)moved, 0);
    CHECK(memcmp(map, content, file_bytes) == 0);
    CHECK_INT(munmap(map, file_bytes), 0); /* one munmap takes the moved pages too (safetensors_close) */
    unlink(path);
    free(content);
}

int main(void)
{
    model_weights mw;
    kimi_err err = {0};
    if (weights_load(&mw, TINY, &err)) {
        fprintf(stderr, "weights_load: %s\n", err.msg);
        CHECK(0);
        return check_finish();
    }
    CHECK(mw.load_seconds >= 0 && mw.load_seconds < 60);
    test_counts_and_formats(&mw);
    test_weight_bytes(&mw);
    test_find(&mw);
    test_views(&mw);
    test_tp_plan(&mw);
    test_memory_plan(&mw);
    test_page_in(&mw);
    test_page_in_huge_pages();
    weights_free(&mw);
    return check_finish();
}
