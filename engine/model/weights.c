/* weights: resolve the language model's tensors in the mmap'ed checkpoint into typed views,
 * checking every dtype and shape against the config, and plan tensor-parallel shards. */
#include "engine/model/weights.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/array.h"
#include "engine/base/monotonic.h"
#include "engine/model/safetensors.h"
#include "kernels/cpu/numeric.h"

typedef struct {
    const safetensors_set *files;
    const model_config *cfg;
    const char *model_dir;
    kimi_err *err;
    size_t bytes;               /* every tensor resolved so far */
    weight_span *spans;         /* [n_spans] of those tensors, capacity span_cap */
    size_t n_spans, span_cap;
} loader;

/* Count a tensor the model uses: its bytes, and its span for weights_page_in. */
static int use_tensor(loader *L, const st_tensor *t)
{
    if (array_reserve(&L->spans, &L->span_cap, L->n_spans + 1, sizeof *L->spans))
        return kimi_fail(L->err, KIMI_ERR_NOMEM, "out of memory for the list of %zu tensors", L->n_spans + 1);
    L->spans[L->n_spans++] = (weight_span){t->data, t->bytes, t->file, safetensors_file_mapped(L->files, t->file)};
    L->bytes += t->bytes;
    return 0;
}

static int missing(const loader *L, const char *name)
{
    return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor %s is missing from the checkpoint", L->model_dir, name);
}

static const char *shard_of(const loader *L, const st_tensor *t)
{
    return safetensors_file_path(L->files, t->file);
}

static int shape_is(const st_tensor *t, int ndim, int64_t d0, int64_t d1)
{
    return t->ndim == ndim && (ndim < 1 || t->shape[0] == d0) && (ndim < 2 || t->shape[1] == d1);
}

static void shape_text(const st_tensor *t, char *out, size_t size)
{
    size_t used = (size_t)snprintf(out, size, "[");
    for (int d = 0; d < t->ndim && used < size; d++)
        used += (size_t)snprintf(out + used, size - used, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (used < size)
        snprintf(out + used, size - used, "]");
}

static int wrong_shape(const loader *L, const st_tensor *t, int64_t d0, int64_t d1, int ndim)
{
    char got[160];
    shape_text(t, got, sizeof got);
    if (ndim == 1)
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor %s has shape %s, config.json implies [%lld]", shard_of(L, t),
                         t->name, got, (long long)d0);
    return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor %s has shape %s, config.json implies [%lld, %lld]",
                     shard_of(L, t), t->name, got, (long long)d0, (long long)d1);
}

/* Kernels read elements through typed pointers, so each must sit at its natural alignment. */
static int check_aligned(const loader *L, const st_tensor *t)
{
    size_t size = dtype_size(t->type);
    if ((uintptr_t)t->data % size)
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor %s data is not aligned to its %zu-byte elements",
                         shard_of(L, t), t->name, size);
    return 0;
}

static int is_float_type(dtype type)
{
    return type == DTYPE_BF16 || type == DTYPE_F16 || type == DTYPE_F32;
}

static weight_format float_format(dtype type)
{
    return type == DTYPE_BF16 ? WEIGHT_BF16 : type == DTYPE_F16 ? WEIGHT_F16 : WEIGHT_F32;
}

/* NVFP4 iff .weight is U8 with an F8_E4M3 .weight_scale and an F32 .weight_scale_2 beside it. */
static int load_nvfp4(loader *L, const st_tensor *w, const char *name, int rows, int cols, linear *out)
{
    char scale_name[200], scale2_name[200];
    snprintf(scale_name, sizeof scale_name, "%s.weight_scale", name);
    snprintf(scale2_name, sizeof scale2_name, "%s.weight_scale_2", name);
    const st_tensor *scale = safetensors_find(L->files, scale_name);
    const st_tensor *scale2 = safetensors_find(L->files, scale2_name);
    if (!scale || !scale2)
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor %s is U8 but %s is missing (NVFP4 needs both scales)",
                         shard_of(L, w), w->name, !scale ? scale_name : scale2_name);
    if (scale->type != DTYPE_F8_E4M3)
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor %s is %s, NVFP4 block scales are F8_E4M3", shard_of(L, scale),
                         scale->name, dtype_name(scale->type));
    if (scale2->type != DTYPE_F32 || st_tensor_elements(scale2) != 1)
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor %s must be one F32 value", shard_of(L, scale2), scale2->name);
    if (cols % 16)
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor %s is NVFP4 but its K = %d is not a multiple of 16",
                         shard_of(L, w), w->name, cols);
    if (!shape_is(w, 2, rows, cols / 2))
        return wrong_shape(L, w, rows, cols / 2, 2);
    if (!shape_is(scale, 2, rows, cols / 16))
        return wrong_shape(L, scale, rows, cols / 16, 2);
    float scale_2;
    memcpy(&scale_2, scale2->data, sizeof scale_2);
    if (!isfinite(scale_2))
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor %s is not a finite number", shard_of(L, scale2), scale2->name);
    out->w = (weight_matrix){
        .format = WEIGHT_NVFP4, .rows = rows, .cols = cols, .data = w->data, .data_stride = (size_t)cols / 2,
        .scale = scale->data, .scale_stride = (size_t)cols / 16, .scale_2 = scale_2,
    };
    int rc;
    if ((rc = use_tensor(L, w)) || (rc = use_tensor(L, scale)) || (rc = use_tensor(L, scale2)))
        return rc;
    return 0;
}

/* A linear W[rows][cols]; its storage format comes from the dtypes found, never from the name. */
static int load_linear(loader *L, const char *name, int rows, int cols, linear *out)
{
    if ((size_t)snprintf(out->name, sizeof out->name, "%s", name) >= sizeof out->name)
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor name %s is too long", L->model_dir, name);
    char weight_name[200];
    snprintf(weight_name, sizeof weight_name, "%s.weight", name);
    const st_tensor *w = safetensors_find(L->files, weight_name);
    if (!w)
        return missing(L, weight_name);
    if (w->type == DTYPE_U8)
        return load_nvfp4(L, w, name, rows, cols, out);
    if (!is_float_type(w->type))
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor %s has dtype %s (expected BF16, F16, F32 or NVFP4 U8)",
                         shard_of(L, w), w->name, dtype_name(w->type));
    if (!shape_is(w, 2, rows, cols))
        return wrong_shape(L, w, rows, cols, 2);
    int rc = check_aligned(L, w);
    if (rc)
        return rc;
    out->w = (weight_matrix){
        .format = float_format(w->type), .rows = rows, .cols = cols, .data = w->data,
        .data_stride = (size_t)cols * dtype_size(w->type), .scale = NULL, .scale_stride = 0, .scale_2 = 1.0f,
    };
    return use_tensor(L, w);
}

static int load_vector(loader *L, const char *name, int n, int optional, weight_vector *out)
{
    const st_tensor *t = safetensors_find(L->files, name);
    memset(out, 0, sizeof *out);
    if (!t)
        return optional ? 0 : missing(L, name);
    if (!is_float_type(t->type))
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: tensor %s has dtype %s (expected BF16, F16 or F32)",
                         shard_of(L, t), t->name, dtype_name(t->type));
    if (!shape_is(t, 1, n, 0))
        return wrong_shape(L, t, n, 0, 1);
    int rc = check_aligned(L, t);
    if (rc)
        return rc;
    *out = (weight_vector){.type = t->type, .n = n, .data = t->data};
    return use_tensor(L, t);
}

static int load_mlp(loader *L, const char *base, int hidden, int inter, mlp_weights *m)
{
    char name[200];
    int rc;
    m->inter = inter;
    snprintf(name, sizeof name, "%sgate_proj", base);
    if ((rc = load_linear(L, name, inter, hidden, &m->gate)))
        return rc;
    snprintf(name, sizeof name, "%sup_proj", base);
    if ((rc = load_linear(L, name, inter, hidden, &m->up)))
        return rc;
    snprintf(name, sizeof name, "%sdown_proj", base);
    return load_linear(L, name, hidden, inter, &m->down);
}

/* name = layer_prefix + suffix, into a buffer of 200 bytes. */
static const char *in_layer(char *name, const char *layer_prefix, const char *suffix)
{
    snprintf(name, 200, "%s%s", layer_prefix, suffix);
    return name;
}

static int load_layer(loader *L, const char *prefix, int i, layer_weights *lw)
{
    const model_config *c = L->cfg;
    char p[128], name[200];
    int rc;
    snprintf(p, sizeof p, "%slayers.%d.", prefix, i);
#define NAME(suffix) in_layer(name, p, suffix)
    if ((rc = load_vector(L, NAME("input_layernorm.weight"), c->hidden, 0, &lw->input_norm)) ||
        (rc = load_vector(L, NAME("post_attention_layernorm.weight"), c->hidden, 0, &lw->post_attn_norm)) ||
        (rc = load_linear(L, NAME("self_attn.q_a_proj"), c->q_lora_rank, c->hidden, &lw->q_a)) ||
        (rc = load_vector(L, NAME("self_attn.q_a_layernorm.weight"), c->q_lora_rank, 0, &lw->q_a_norm)) ||
        (rc = load_linear(L, NAME("self_attn.q_b_proj"), c->heads * (c->qk_nope_dim + c->qk_rope_dim), c->q_lora_rank,
                          &lw->q_b)) ||
        (rc = load_linear(L, NAME("self_attn.kv_a_proj_with_mqa"), c->kv_lora_rank + c->qk_rope_dim, c->hidden,
                          &lw->kv_a)) ||
        (rc = load_vector(L, NAME("self_attn.kv_a_layernorm.weight"), c->kv_lora_rank, 0, &lw->kv_a_norm)) ||
        (rc = load_linear(L, NAME("self_attn.kv_b_proj"), c->heads * (c->qk_nope_dim + c->v_head_dim), c->kv_lora_rank,
                          &lw->kv_b)) ||
        (rc = load_linear(L, NAME("self_attn.o_proj"), c->hidden, c->heads * c->v_head_dim, &lw->o)))
        return rc;
    lw->is_moe = config_layer_is_moe(c, i);
    if (!lw->is_moe)
        return load_mlp(L, NAME("mlp."), c->hidden, c->intermediate, &lw->dense);
    if ((rc = load_linear(L, NAME("mlp.gate"), c->experts, c->hidden, &lw->router)) ||
        (rc = load_vector(L, NAME("mlp.gate.e_score_correction_bias"), c->experts, 1, &lw->router_bias)))
        return rc;
#undef NAME
    lw->experts = calloc((size_t)c->experts, sizeof *lw->experts);
    if (!lw->experts)
        return kimi_fail(L->err, KIMI_ERR_NOMEM, "layer %d: out of memory for %d experts", i, c->experts);
    for (int e = 0; e < c->experts; e++) {
        snprintf(name, sizeof name, "%smlp.experts.%d.", p, e);
        if ((rc = load_mlp(L, name, c->hidden, c->moe_intermediate, &lw->experts[e])))
            return rc;
    }
    if (c->shared_experts > 0) {
        snprintf(name, sizeof name, "%smlp.shared_experts.", p);
        return load_mlp(L, name, c->hidden, c->shared_experts * c->moe_intermediate, &lw->shared);
    }
    return 0;
}

static int starts_with(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

/* The language model's prefix is whatever precedes its one "...embed_tokens.weight". */
static int detect_prefix(loader *L, char *prefix, size_t size)
{
    static const char suffix[] = "embed_tokens.weight";
    const char *found = NULL;
    for (size_t i = 0; i < safetensors_count(L->files); i++) {
        const char *name = safetensors_at(L->files, i)->name;
        size_t len = strlen(name);
        if (len < sizeof suffix - 1 || strcmp(name + len - (sizeof suffix - 1), suffix))
            continue;
        if (starts_with(name, "vision_tower.") || starts_with(name, "mm_projector."))
            continue;
        if (len != sizeof suffix - 1 && name[len - sizeof suffix] != '.')
            continue;
        if (found)
            return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: two embedding tables, %s and %s: cannot tell the language model's prefix",
                             L->model_dir, found, name);
        found = name;
    }
    if (!found)
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: no ...embed_tokens.weight tensor in the checkpoint", L->model_dir);
    size_t n = strlen(found) - (sizeof suffix - 1);
    if (n >= size)
        return kimi_fail(L->err, KIMI_ERR_MODEL, "%s: prefix of %s is too long", L->model_dir, found);
    memcpy(prefix, found, n);
    prefix[n] = 0;
    return 0;
}

/* lm_head sits beside the "model." part: "language_model.model." -> "language_model.lm_head". */
static void lm_head_name(const char *prefix, char *out, size_t size)
{
    size_t n = strlen(prefix);
    if (n >= 6 && !strcmp(prefix + n - 6, "model.") && (n == 6 || prefix[n - 7] == '.'))
        n -= 6;
    snprintf(out, size, "%.*slm_head", (int)n, prefix);
}

typedef int (*linear_visit)(const linear *l, int is_embedding, void *ctx);

/* Every linear of the language model once (lm_head skipped when it is the tied embedding). */
static int visit_linears(const model_weights *mw, linear_visit fn, void *ctx)
{
    int r;
    if ((r = fn(&mw->embed, 1, ctx)))
        return r;
    for (int i = 0; i < mw->cfg.layers; i++) {
        const layer_weights *lw = &mw->layers[i];
        const linear *attn[] = {&lw->q_a, &lw->q_b, &lw->kv_a, &lw->kv_b, &lw->o};
        for (size_t a = 0; a < 5; a++)
            if ((r = fn(attn[a], 0, ctx)))
                return r;
        const mlp_weights *mlps = lw->is_moe ? lw->experts : &lw->dense;
        int n_mlps = lw->is_moe ? mw->cfg.experts : 1;
        if (lw->is_moe && (r = fn(&lw->router, 0, ctx)))
            return r;
        for (int m = 0; m <= n_mlps; m++) {
            const mlp_weights *mlp = m < n_mlps ? &mlps[m] : lw->is_moe && mw->cfg.shared_experts > 0 ? &lw->shared : NULL;
            if (mlp && ((r = fn(&mlp->gate, 0, ctx)) || (r = fn(&mlp->up, 0, ctx)) || (r = fn(&mlp->down, 0, ctx))))
                return r;
        }
    }
    return mw->cfg.tie_word_embeddings ? 0 : fn(&mw->lm_head, 0, ctx);
}

static int count_linear(const linear *l, int is_embedding, void *ctx)
{
    model_weights *mw = ctx;
    if (!is_embedding) {
        if (l->w.format == WEIGHT_NVFP4)
            mw->n_nvfp4_linears++;
        else
            mw->n_dense_linears++;
    }
    return 0;
}

static int compare_span(const void *pa, const void *pb)
{
    const weight_span *a = pa, *b = pb;
    return a->data < b->data ? -1 : a->data > b->data;
}

/* Spans of one shard this close are one: a checkpoint interleaves the tensors the model uses
 * with small ones it does not (input_scale: 4 bytes beside every NVFP4 linear), and the whole
 * of a stretch can then move to 2 MiB pages (weights_page_in). */
#define SPAN_GAP_MERGE ((size_t)64 << 10)

/* Sort spans [n] by address and merge those of a shard that overlap or lie within
 * SPAN_GAP_MERGE of each other; returns how many remain. */
static size_t merge_spans(weight_span *spans, size_t n)
{
    if (n == 0)
        return 0;
    qsort(spans, n, sizeof *spans, compare_span);
    size_t kept = 0;
    for (size_t i = 1; i < n; i++) {
        weight_span *last = &spans[kept];
        if (spans[i].file == last->file && (size_t)(spans[i].data - last->data) <= last->bytes + SPAN_GAP_MERGE) {
            const uint8_t *end = spans[i].data + spans[i].bytes;
            if (end > last->data + last->bytes)
                last->bytes = (size_t)(end - last->data);
            last->movable &= spans[i].movable;
        } else {
            spans[++kept] = spans[i];
        }
    }
    return kept + 1;
}

int weights_load(model_weights *mw, const char *model_dir, kimi_err *err)
{
    double t0 = monotonic_seconds();
    memset(mw, 0, sizeof *mw);
    int rc = config_load(&mw->cfg, model_dir, err);
    if (rc)
        return rc;
    if ((rc = safetensors_open_dir(&mw->files, model_dir, err))) {
        config_free(&mw->cfg);
        return rc;
    }
    loader L = {.files = mw->files, .cfg = &mw->cfg, .model_dir = model_dir, .err = err};
    const model_config *c = &mw->cfg;
    char name[200];
    rc = detect_prefix(&L, mw->prefix, sizeof mw->prefix);
    if (!rc) {
        snprintf(name, sizeof name, "%sembed_tokens", mw->prefix);
        rc = load_linear(&L, name, c->vocab, c->hidden, &mw->embed);
    }
    if (!rc) {
        snprintf(name, sizeof name, "%snorm.weight", mw->prefix);
        rc = load_vector(&L, name, c->hidden, 0, &mw->final_norm);
    }
    if (!rc) {
        lm_head_name(mw->prefix, name, sizeof name);
        if (c->tie_word_embeddings)
            mw->lm_head = mw->embed;
        else
            rc = load_linear(&L, name, c->vocab, c->hidden, &mw->lm_head);
    }
    if (!rc && !(mw->layers = calloc((size_t)c->layers, sizeof *mw->layers)))
        rc = kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for %d layers", c->layers);
    for (int i = 0; !rc && i < c->layers; i++)
        rc = load_layer(&L, mw->prefix, i, &mw->layers[i]);
    if (rc) {
        free(L.spans);
        weights_free(mw);
        return rc;
    }
    mw->weight_bytes = L.bytes;
    mw->spans = L.spans;
    mw->n_spans = merge_spans(L.spans, L.n_spans);
    visit_linears(mw, count_linear, mw);
    mw->load_seconds = monotonic_seconds() - t0;
    return 0;
}

void weights_free(model_weights *mw)
{
    if (mw->layers)
        for (int i = 0; i < mw->cfg.layers; i++)
            free(mw->layers[i].experts);
    free(mw->layers);
    free(mw->spans);
    safetensors_close(mw->files);
    config_free(&mw->cfg);
    memset(mw, 0, sizeof *mw);
}

/* Large enough that madvise reads ahead in big requests, small enough that the threads share
 * the work evenly and a stop takes effect within one step. Steps end on multiples of their size
 * in the address space (so on 2 MiB boundaries: a span's inside moves to huge pages whole). A
 * step that moves to huge pages is smaller: where the host hands a virtual machine its memory
 * as it is first touched, fresh pages fill at 0.1-0.8 GB/s (the development box), and a stop
 * waits for the steps in flight. */
#define PAGE_IN_STEP ((size_t)64 << 20)
#define HUGE_PAGE_STEP ((size_t)16 << 20)
#define HUGE_PAGE ((uintptr_t)2 << 20)

/* The reading shared by the threads of weights_page_in: steps handed out in address order, so
 * that the requests in flight are neighbours on the disk. */
typedef struct {
    const model_weights *mw;
    size_t page;                /* bytes per memory page */
    int huge_pages;             /* weights_page_in_options.huge_pages */
    pthread_mutex_t lock;       /* everything below */
    pthread_cond_t changed;     /* a step was read, or a thread ended */
    size_t next_span, next_off; /* the next step: spans[next_span], from next_off */
    size_t done;                /* bytes of the steps read */
    size_t moved;               /* of those, bytes moved into 2 MiB pages */
    int running;                /* threads not yet ended */
    int stop;                   /* the caller's progress said stop: hand out no more steps */
} page_in_work;

/* Take the next step: its span, start and length (up to the next multiple of the step size
 * in the address space), 0 when none is left (or stop was said). */
static size_t take_step(page_in_work *w, const weight_span **span, const uint8_t **start)
{
    const model_weights *mw = w->mw;
    while (w->next_span < mw->n_spans && w->next_off >= mw->spans[w->next_span].bytes) {
        w->next_span++;
        w->next_off = 0;
    }
    if (w->stop || w->next_span >= mw->n_spans)
        return 0;
    const weight_span *s = &mw->spans[w->next_span];
    *span = s;
    *start = s->data + w->next_off;
    size_t step = w->huge_pages && s->movable ? HUGE_PAGE_STEP : PAGE_IN_STEP;
    size_t to_boundary = step - (size_t)((uintptr_t)*start % step);
    size_t len = s->bytes - w->next_off < to_boundary ? s->bytes - w->next_off : to_boundary;
    w->next_off += len;
    return len;
}

/* Fault [start, start + len) in from the file. */
static void touch_pages(const uint8_t *start, size_t len, size_t page)
{
    if (len == 0)
        return;
    uintptr_t first_page = (uintptr_t)start & ~(uintptr_t)(page - 1);
    /* Only advice: memory that is not a file mapping (a test's image) just says no. */
    (void)madvise((void *)first_page, (uintptr_t)start + len - first_page, MADV_WILLNEED);
    /* Volatile, so the reads that fault each page in happen. */
    const volatile uint8_t *bytes = start;
    for (size_t k = 0; k < len; k += page)
        (void)bytes[k];
    (void)bytes[len - 1];
}

/* Replace the mapping at [at, at + len) (2 MiB-aligned) by an anonymous copy of it advised for
 * huge pages, read-only as the mmap was. 0 when moved; -1 when it stays as it was. */
static int move_to_huge_pages(uint8_t *at, size_t len)
{
    uint8_t *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return -1;
    uint8_t *copy = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
    if (copy > raw)
        munmap(raw, (size_t)(copy - raw));
    if (raw + len + HUGE_PAGE > copy + len)
        munmap(copy + len, (size_t)(raw + len + HUGE_PAGE - (copy + len)));
    if (madvise(copy, len, MADV_HUGEPAGE) != 0) {
        munmap(copy, len);
        return -1;
    }
    (void)madvise(at, len, MADV_WILLNEED); /* the file's pages: read ahead of the copy */
    memcpy(copy, at, len);
    if (mprotect(copy, len, PROT_READ) != 0 ||
        mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
        munmap(copy, len);
        return -1;
    }
    return 0;
}

/* Read one step in; returns the bytes of it moved into huge pages. */
static size_t read_step(const page_in_work *w, const weight_span *span, const uint8_t *start, size_t len)
{
    uintptr_t inside = ((uintptr_t)start + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t inside_end = ((uintptr_t)start + len) & ~(HUGE_PAGE - 1);
    if (!w->huge_pages || !span->movable || inside_end <= inside ||
        move_to_huge_pages((uint8_t *)inside, (size_t)(inside_end - inside)) != 0) {
        touch_pages(start, len, w->page);
        return 0;
    }
    touch_pages(start, (size_t)(inside - (uintptr_t)start), w->page);
    touch_pages((const uint8_t *)inside_end, (size_t)((uintptr_t)start + len - inside_end), w->page);
    return (size_t)(inside_end - inside);
}

static void *page_in_thread(void *arg)
{
    page_in_work *w = arg;
    const weight_span *span;
    const uint8_t *start;
    pthread_mutex_lock(&w->lock);
    for (size_t len; (len = take_step(w, &span, &start)) > 0;) {
        pthread_mutex_unlock(&w->lock);
        size_t moved = read_step(w, span, start, len);
        pthread_mutex_lock(&w->lock);
        w->done += len;
        w->moved += moved;
        pthread_cond_signal(&w->changed);
    }
    w->running--;
    pthread_cond_signal(&w->changed);
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static struct timespec deadline_after(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = ts.tv_nsec + (long long)(seconds * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

static int passed(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline->tv_sec || (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

int weights_page_in(const model_weights *mw, const weights_page_in_options *o, size_t *huge_bytes, kimi_err *err)
{
    int threads = o->threads;
    double report_seconds = o->report_seconds;
    weights_page_in_progress progress = o->progress;
    void *user = o->user;
    if (huge_bytes)
        *huge_bytes = 0;
    if (threads < 1)
        return kimi_fail(err, KIMI_ERR_USAGE, "reading the weights in: %d threads (at least 1)", threads);
    size_t total = 0;
    for (size_t i = 0; i < mw->n_spans; i++)
        total += mw->spans[i].bytes;
    page_in_work w = {.mw = mw, .page = (size_t)sysconf(_SC_PAGESIZE), .huge_pages = o->huge_pages};
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    if (!ids)
        return kimi_fail(err, KIMI_ERR_NOMEM, "reading the weights in: out of memory for %d threads", threads);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.changed, &attr);
    pthread_condattr_destroy(&attr);

    int started = 0, rc = 0;
    pthread_mutex_lock(&w.lock);
    for (; started < threads; started++) {
        int failed = pthread_create(&ids[started], NULL, page_in_thread, &w);
        if (failed) {
            rc = kimi_fail(err, KIMI_ERR_NOMEM, "reading the weights in: cannot start thread %d of %d: %s",
                           started + 1, threads, strerror(failed));
            w.stop = 1;
            break;
        }
        w.running++;
    }
    /* This thread only waits and reports, so a report is never late behind a slow step. */
    struct timespec next_report = deadline_after(report_seconds);
    while (w.running > 0) {
        pthread_cond_timedwait(&w.changed, &w.lock, &next_report);
        if (!passed(&next_report))
            continue;
        next_report = deadline_after(report_seconds);
        if (!progress || w.stop)
            continue;
        size_t done = w.done;
        pthread_mutex_unlock(&w.lock);
        int stop = done < total && progress(user, done, total);
        pthread_mutex_lock(&w.lock);
        w.stop |= stop;
    }
    int stopped = w.stop;
    if (huge_bytes)
        *huge_bytes = w.moved;
    pthread_mutex_unlock(&w.lock);
    for (int t = 0; t < started; t++)
        pthread_join(ids[t], NULL);
    free(ids);
    pthread_cond_destroy(&w.changed);
    pthread_mutex_destroy(&w.lock);
    if (rc)
        return rc;
    if (stopped)
        return WEIGHTS_STOPPED;
    /* The last report says done == total, and its answer counts too: a stop that comes with
     * it still stops whatever would follow the reading. */
    if (progress && progress(user, total, total))
        return WEIGHTS_STOPPED;
    return 0;
}

int weights_huge_pages_available(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f)
        return 0;
    char line[128] = "";
    int offered = fgets(line, sizeof line, f) && (strstr(line, "[always]") || strstr(line, "[madvise]"));
    fclose(f);
    return offered;
}

typedef struct {
    const char *name;
    const linear *found;
} find_ctx;

static int match_linear(const linear *l, int is_embedding, void *ctx)
{
    find_ctx *f = ctx;
    (void)is_embedding;
    if (strcmp(l->name, f->name))
        return 0;
    f->found = l;
    return 1;
}

const linear *weights_find_linear(const model_weights *mw, const char *name)
{
    find_ctx f = {name, NULL};
    if (!mw->layers)
        return NULL;
    visit_linears(mw, match_linear, &f);
    return f.found;
}

static size_t element_bytes(weight_format format)
{
    return format == WEIGHT_F32 ? 4 : 2;
}

weight_matrix weight_rows(const weight_matrix *w, index_range r)
{
    weight_matrix v = *w;
    v.rows = r.end - r.begin;
    v.data = w->data + (size_t)r.begin * w->data_stride;
    if (w->format == WEIGHT_NVFP4)
        v.scale = w->scale + (size_t)r.begin * w->scale_stride;
    return v;
}

weight_matrix weight_cols(const weight_matrix *w, index_range k)
{
    weight_matrix v = *w;
    v.cols = k.end - k.begin;
    if (w->format == WEIGHT_NVFP4) {
        v.data = w->data + (size_t)k.begin / 2;
        v.scale = w->scale + (size_t)k.begin / 16;
    } else {
        v.data = w->data + (size_t)k.begin * element_bytes(w->format);
    }
    return v;
}

/* Bytes a view reads: packed values and block scales, plus the global scale. */
static size_t view_bytes(const weight_matrix *v)
{
    size_t rows = (size_t)v->rows, cols = (size_t)v->cols;
    if (v->format == WEIGHT_NVFP4)
        return rows * (cols / 2) + rows * (cols / 16) + sizeof(float);
    return rows * cols * element_bytes(v->format);
}

static size_t vector_bytes(const weight_vector *v)
{
    return (size_t)v->n * dtype_size(v->type);
}

static index_range even_split(int total, int tp, int rank)
{
    return (index_range){(int)((long long)total * rank / tp), (int)((long long)total * (rank + 1) / tp)};
}

static index_range scaled(index_range r, int per)
{
    return (index_range){r.begin * per, r.end * per};
}

/* An NVFP4 K range must cover whole 16-element scale blocks. */
static int check_k_split(const linear *l, int k_per_rank, int tp, const char *field, int field_value, kimi_err *err)
{
    if (l->w.format != WEIGHT_NVFP4 || k_per_rank % 16 == 0)
        return 0;
    return kimi_fail(err, KIMI_ERR_USAGE,
                     "--tp %d gives each rank %d input columns of NVFP4 %s, not a multiple of 16 (%s = %d)", tp,
                     k_per_rank, l->name, field, field_value);
}

static size_t mlp_shard_bytes(const mlp_weights *m, index_range inter)
{
    weight_matrix gate = weight_rows(&m->gate.w, inter), up = weight_rows(&m->up.w, inter);
    weight_matrix down = weight_cols(&m->down.w, inter);
    return view_bytes(&gate) + view_bytes(&up) + view_bytes(&down);
}

static int check_mlp_split(const mlp_weights *m, int tp, const char *field, int value, kimi_err *err)
{
    return check_k_split(&m->down, m->inter / tp, tp, field, value, err);
}

int tp_shard_plan(const model_weights *mw, int tp, int rank, tp_shard *out, kimi_err *err)
{
    const model_config *c = &mw->cfg;
    int rc = config_check_tp(c, tp, err);
    if (rc)
        return rc;
    if (rank < 0 || rank >= tp)
        return kimi_fail(err, KIMI_ERR_USAGE, "rank %d is outside [0, %d)", rank, tp);
    memset(out, 0, sizeof *out);
    out->tp = tp;
    out->rank = rank;
    out->heads = even_split(c->heads, tp, rank);
    out->dense_inter = even_split(c->intermediate, tp, rank);
    out->moe_inter = even_split(c->moe_intermediate, tp, rank);
    out->shared_inter = even_split(c->shared_experts * c->moe_intermediate, tp, rank);
    out->vocab = even_split(c->vocab, tp, rank);

    size_t bytes = view_bytes(&mw->embed.w) + vector_bytes(&mw->final_norm);
    if (!c->tie_word_embeddings) {
        weight_matrix head = weight_rows(&mw->lm_head.w, out->vocab);
        bytes += view_bytes(&head);
    }
    int heads_per_rank = c->heads / tp;
    for (int i = 0; i < c->layers; i++) {
        const layer_weights *lw = &mw->layers[i];
        if ((rc = check_k_split(&lw->o, heads_per_rank * c->v_head_dim, tp, "num_attention_heads", c->heads, err)))
            return rc;
        weight_matrix q_b = weight_rows(&lw->q_b.w, scaled(out->heads, c->qk_nope_dim + c->qk_rope_dim));
        weight_matrix kv_b = weight_rows(&lw->kv_b.w, scaled(out->heads, c->qk_nope_dim + c->v_head_dim));
        weight_matrix o = weight_cols(&lw->o.w, scaled(out->heads, c->v_head_dim));
        bytes += vector_bytes(&lw->input_norm) + vector_bytes(&lw->post_attn_norm) + vector_bytes(&lw->q_a_norm) +
                 vector_bytes(&lw->kv_a_norm) + view_bytes(&lw->q_a.w) + view_bytes(&lw->kv_a.w) + view_bytes(&q_b) +
                 view_bytes(&kv_b) + view_bytes(&o);
        if (!lw->is_moe) {
            if ((rc = check_mlp_split(&lw->dense, tp, "intermediate_size", c->intermediate, err)))
                return rc;
            bytes += mlp_shard_bytes(&lw->dense, out->dense_inter);
            continue;
        }
        bytes += view_bytes(&lw->router.w) + vector_bytes(&lw->router_bias);
        for (int e = 0; e < c->experts; e++) {
            if ((rc = check_mlp_split(&lw->experts[e], tp, "moe_intermediate_size", c->moe_intermediate, err)))
                return rc;
            bytes += mlp_shard_bytes(&lw->experts[e], out->moe_inter);
        }
        if (c->shared_experts > 0) {
            if ((rc = check_mlp_split(&lw->shared, tp, "n_shared_experts x moe_intermediate_size",
                                      c->shared_experts * c->moe_intermediate, err)))
                return rc;
            bytes += mlp_shard_bytes(&lw->shared, out->shared_inter);
        }
    }
    out->weight_bytes = bytes;
    return 0;
}

size_t kv_bytes_per_token(const model_config *cfg, kv_cache_format format)
{
    return kv_row_bytes(format, cfg->kv_lora_rank, cfg->qk_rope_dim) * (size_t)cfg->layers;
}

long max_context_for_budget(const model_config *cfg, kv_cache_format format, size_t rank_weight_bytes,
                            size_t budget_bytes)
{
    size_t per_token = kv_bytes_per_token(cfg, format);
    if (budget_bytes <= rank_weight_bytes || per_token == 0)
        return 0;
    size_t positions = (budget_bytes - rank_weight_bytes) / per_token;
    return positions > (size_t)LONG_MAX ? LONG_MAX : (long)positions;
}
