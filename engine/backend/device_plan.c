/* device_plan: packed layouts, the upload order of a shard, the workspace and the byte plan of
 * the CUDA backend. The views visited are the same ones the CPU backend's forward.c computes on
 * (weight_rows / weight_cols of the tp_shard ranges). */
#include "engine/backend/device_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t round_up(size_t value, size_t to)
{
    return (value + to - 1) / to * to;
}

static size_t row_bytes(const weight_matrix *w)
{
    switch (w->format) {
    case WEIGHT_NVFP4:
        return (size_t)w->cols / 2;
    case WEIGHT_BF16:
    case WEIGHT_F16:
        return (size_t)w->cols * 2;
    case WEIGHT_F32:
        break;
    }
    return (size_t)w->cols * 4;
}

void packed_layout_of(const weight_matrix *view, packed_layout *out)
{
    memset(out, 0, sizeof *out);
    out->data_pitch = round_up(row_bytes(view), 16);
    out->data_bytes = round_up((size_t)view->rows * out->data_pitch, DEVICE_ALIGN);
    if (view->format == WEIGHT_NVFP4) {
        /* a 16-byte data chunk (32 weights) takes two scales: pad scales to the chunk count */
        out->scale_pitch = round_up(out->data_pitch / 16 * 2, 16);
        out->scale_bytes = round_up((size_t)view->rows * out->scale_pitch, DEVICE_ALIGN);
    }
    out->bytes = out->data_bytes + out->scale_bytes;
}

void packed_rows_write(const weight_matrix *view, const packed_layout *layout, int row_begin, int row_end,
                       uint8_t *data_out, uint8_t *scale_out)
{
    size_t bytes = row_bytes(view), scales = (size_t)view->cols / 16;
    for (int r = row_begin; r < row_end; r++) {
        uint8_t *dst = data_out + (size_t)(r - row_begin) * layout->data_pitch;
        memcpy(dst, view->data + (size_t)r * view->data_stride, bytes);
        memset(dst + bytes, 0, layout->data_pitch - bytes);
        if (view->format == WEIGHT_NVFP4) {
            uint8_t *sdst = scale_out + (size_t)(r - row_begin) * layout->scale_pitch;
            memcpy(sdst, view->scale + (size_t)r * view->scale_stride, scales);
            memset(sdst + scales, 0, layout->scale_pitch - scales);
        }
    }
}

void packed_rows_source(const weight_matrix *view, int row_begin, int row_end, byte_span spans[2])
{
    memset(spans, 0, 2 * sizeof *spans);
    if (row_end <= row_begin)
        return;
    size_t last = (size_t)(row_end - 1);
    spans[0].begin = view->data + (size_t)row_begin * view->data_stride;
    spans[0].end = view->data + last * view->data_stride + row_bytes(view);
    if (view->format == WEIGHT_NVFP4) {
        spans[1].begin = view->scale + (size_t)row_begin * view->scale_stride;
        spans[1].end = view->scale + last * view->scale_stride + (size_t)view->cols / 16;
    }
}

weight_matrix packed_view(const weight_matrix *view, const packed_layout *layout, const uint8_t *data,
                          const uint8_t *scale)
{
    weight_matrix w = *view;
    w.data = data;
    w.data_stride = layout->data_pitch;
    w.scale = view->format == WEIGHT_NVFP4 ? scale : NULL;
    w.scale_stride = view->format == WEIGHT_NVFP4 ? layout->scale_pitch : 0;
    return w;
}

static index_range times(index_range r, int width)
{
    return (index_range){r.begin * width, r.end * width};
}

#define VISIT(role_, layer_, expert_, view_)                                                       \
    do {                                                                                           \
        device_weight dw_ = {(role_), (layer_), (expert_), (view_)};                               \
        int rc_ = visit(ctx, &dw_);                                                                \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

static int visit_mlp(const mlp_weights *m, index_range inter, device_weight_role first, int layer, int expert,
                     int (*visit)(void *ctx, const device_weight *w), void *ctx)
{
    VISIT(first, layer, expert, weight_rows(&m->gate.w, inter));
    VISIT((device_weight_role)(first + 1), layer, expert, weight_rows(&m->up.w, inter));
    VISIT((device_weight_role)(first + 2), layer, expert, weight_cols(&m->down.w, inter));
    return 0;
}

int device_weights_visit(const model_weights *mw, const tp_shard *shard,
                         int (*visit)(void *ctx, const device_weight *w), void *ctx)
{
    const model_config *c = &mw->cfg;
    int rc;
    for (int i = 0; i < c->layers; i++) {
        const layer_weights *lw = &mw->layers[i];
        VISIT(DW_Q_A, i, -1, lw->q_a.w);
        VISIT(DW_KV_A, i, -1, lw->kv_a.w);
        VISIT(DW_Q_B, i, -1, weight_rows(&lw->q_b.w, times(shard->heads, c->qk_nope_dim + c->qk_rope_dim)));
        VISIT(DW_KV_B, i, -1, weight_rows(&lw->kv_b.w, times(shard->heads, c->qk_nope_dim + c->v_head_dim)));
        VISIT(DW_O, i, -1, weight_cols(&lw->o.w, times(shard->heads, c->v_head_dim)));
        if (!lw->is_moe) {
            if ((rc = visit_mlp(&lw->dense, shard->dense_inter, DW_DENSE_GATE, i, -1, visit, ctx)))
                return rc;
            continue;
        }
        VISIT(DW_ROUTER, i, -1, lw->router.w);
        if (c->shared_experts > 0 &&
            (rc = visit_mlp(&lw->shared, shard->shared_inter, DW_SHARED_GATE, i, -1, visit, ctx)))
            return rc;
        for (int e = 0; e < c->experts; e++)
            if ((rc = visit_mlp(&lw->experts[e], shard->moe_inter, DW_EXPERT_GATE, i, e, visit, ctx)))
                return rc;
    }
    VISIT(DW_LM_HEAD, -1, -1, weight_rows(&mw->lm_head.w, shard->vocab));
    return 0;
}

size_t device_vector_floats(const model_config *cfg)
{
    size_t per_layer = 2 * (size_t)cfg->hidden + (size_t)cfg->q_lora_rank + (size_t)cfg->kv_lora_rank;
    return (size_t)cfg->layers * (per_layer + (size_t)cfg->experts) + (size_t)cfg->hidden;
}

static int range_width(index_range r)
{
    return r.end - r.begin;
}

int device_max_gemv_rows(const model_config *cfg, const tp_shard *shard)
{
    int heads = range_width(shard->heads);
    int candidates[] = {cfg->q_lora_rank, cfg->kv_lora_rank + cfg->qk_rope_dim,
                        heads * (cfg->qk_nope_dim + cfg->qk_rope_dim), cfg->hidden, cfg->experts,
                        range_width(shard->vocab), cfg->qk_nope_dim + cfg->v_head_dim};
    int most = 1;
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++)
        most = candidates[i] > most ? candidates[i] : most;
    return most;
}

int device_attention_splits(long capacity, int sm_count)
{
    /* parts of at least 64 positions (the prefill's; the decode kernel fills as many parts of at least
     * 128 as the length needs, up to this count: kernels/cuda/mla.cu); two blocks per multiprocessor */
    long chunks = (capacity + 15) / 16;
    long splits = (chunks + 3) / 4;
    long most = 2L * (sm_count > 0 ? sm_count : 1);
    splits = splits > most ? most : splits;
    return splits < 1 ? 1 : (int)splits;
}

int device_attention_splits_for(int splits, int tokens)
{
    int parts = tokens > 0 ? splits / tokens : splits;
    return parts < 1 ? 1 : parts;
}

int device_prefill_attention_parts(int splits, int tokens, int heads)
{
    long rows = (long)(tokens > 0 ? tokens : 1) * (heads > 0 ? heads : 1);
    long blocks = (rows + DEVICE_ATTENTION_ROWS - 1) / DEVICE_ATTENTION_ROWS;
    long parts = splits / blocks;
    return parts < 1 ? 1 : (int)parts;
}

int device_step_tokens(int first, int n, const int *logit_rows, int n_logit_rows, int long_steps)
{
    int left = n - first, short_step = left < DEVICE_MAX_TOKENS ? left : DEVICE_MAX_TOKENS;
    if (!long_steps || left <= DEVICE_MAX_TOKENS)
        return short_step;
    int limit = left < DEVICE_PREFILL_TOKENS ? left : DEVICE_PREFILL_TOKENS, next_asked = first + limit;
    for (int j = 0; j < n_logit_rows; j++)
        if (logit_rows[j] >= first && logit_rows[j] < next_asked)
            next_asked = logit_rows[j];
    if (next_asked == first + limit)
        return limit;
    /* a long step up to where a short step of DEVICE_MAX_TOKENS ends with the asked row */
    int before = next_asked + 1 - DEVICE_MAX_TOKENS - first;
    return before > 0 ? before : short_step;
}

int device_moe_plan_make(const int *offsets, int experts, int tokens, int min_tokens, device_gemm_expert *gemm,
                         device_expert_run *runs, device_moe_plan *out)
{
    memset(out, 0, sizeof *out);
    if (experts < 0 || (experts > 0 && offsets[0] != 0) || tokens < 0 || tokens > DEVICE_PREFILL_TOKENS)
        return -1;
    int run_first = -1, run_last = -1;  /* the open run's first and last experts with slots */
    for (int e = 0; e <= experts; e++) {
        int count = e < experts ? offsets[e + 1] - offsets[e] : 0;
        if (count < 0 || count > tokens)
            return -1;
        int as_gemm = e < experts && count >= min_tokens && count > 0;
        if ((as_gemm || e == experts) && run_first >= 0) {
            runs[out->n_runs++] = (device_expert_run){run_first, run_last + 1 - run_first};
            run_first = -1;
        }
        if (e == experts)
            break;
        if (as_gemm) {
            int rows = (int)round_up((size_t)count, DEVICE_EXPERT_GEMM_ROW_STEP);
            rows = rows <= DEVICE_PREFILL_TOKENS ? rows : DEVICE_PREFILL_TOKENS;   /* count <= tokens fits */
            gemm[out->n_gemm++] = (device_gemm_expert){e, offsets[e], count, rows};
            out->gemm_slots += count;
        } else if (count > 0) {
            run_first = run_first < 0 ? e : run_first;
            run_last = e;
            out->gemv_slots += count;
        }
    }
    return 0;
}

/* The widest K of a projection a step runs as a GEMM, and the most elements of one such weight. */
static void gemm_extent(const model_config *cfg, const tp_shard *shard, size_t *widest_k, size_t *most_elems)
{
    size_t heads = (size_t)range_width(shard->heads), hidden = (size_t)cfg->hidden;
    size_t q_lora = (size_t)cfg->q_lora_rank, o_k = heads * (size_t)cfg->v_head_dim;
    size_t dense = (size_t)range_width(shard->dense_inter), shared = (size_t)range_width(shard->shared_inter);
    size_t expert = (size_t)range_width(shard->moe_inter);
    /* q_a, kv_a, router, lm_head, q_b, o_proj; the dense, shared and expert MLPs' gate/up and down */
    size_t rows[] = {q_lora, (size_t)(cfg->kv_lora_rank + cfg->qk_rope_dim), (size_t)cfg->experts,
                     (size_t)range_width(shard->vocab), heads * (size_t)(cfg->qk_nope_dim + cfg->qk_rope_dim), hidden,
                     dense, hidden, shared, hidden, expert, hidden};
    size_t ks[] = {hidden, hidden, hidden, hidden, q_lora, o_k, hidden, dense, hidden, shared, hidden, expert};
    *widest_k = 8;
    *most_elems = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t k = round_up(ks[i], 8);
        *widest_k = k > *widest_k ? k : *widest_k;
        *most_elems = rows[i] * k > *most_elems ? rows[i] * k : *most_elems;
    }
}

void device_workspace_plan(const model_config *cfg, const tp_shard *shard, int attn_splits, device_workspace *out)
{
    memset(out, 0, sizeof *out);
    size_t heads = (size_t)range_width(shard->heads), hidden = (size_t)cfg->hidden;
    size_t k = (size_t)(cfg->experts_per_token > 0 ? cfg->experts_per_token : 0);
    size_t moe_inter = (size_t)range_width(shard->moe_inter), shared_inter = (size_t)range_width(shard->shared_inter);
    size_t dense_inter = (size_t)range_width(shard->dense_inter), latent_part = (size_t)cfg->kv_lora_rank + 2;
    size_t act = k * moe_inter > dense_inter ? k * moe_inter : dense_inter, T = DEVICE_PREFILL_TOKENS;
    size_t splits = attn_splits > 0 ? (size_t)attn_splits : 1;
    /* decode partials: max(splits, tokens) queries of a short step; prefill: DEVICE_ATTENTION_ROWS * splits rows */
    size_t decode_partials = (splits > DEVICE_MAX_TOKENS ? splits : DEVICE_MAX_TOKENS) * heads * latent_part;
    size_t prefill_partials = (size_t)DEVICE_ATTENTION_ROWS * splits * latent_part;
    size_t sizes[] = {
        T * hidden, T * hidden, T * (size_t)cfg->q_lora_rank, T * heads * (size_t)(cfg->qk_nope_dim + cfg->qk_rope_dim),
        T * (size_t)(cfg->kv_lora_rank + cfg->qk_rope_dim), T * heads * (size_t)cfg->kv_lora_rank,
        T * heads * (size_t)cfg->kv_lora_rank, T * heads * (size_t)cfg->v_head_dim, T * hidden,
        T * (size_t)cfg->experts, T * k, T * k, T * act, T * k * hidden, T * shared_inter, T * hidden,
        (size_t)DEVICE_MAX_TOKENS * (size_t)range_width(shard->vocab), (size_t)cfg->experts + 1, T * k,
        decode_partials > prefill_partials ? decode_partials : prefill_partials,
        (size_t)device_max_gemv_rows(cfg, shard) * 16, (size_t)device_max_gemv_rows(cfg, shard),
        0, 0, DEVICE_GEMM_SCRATCH_BYTES / sizeof(float), T * (dense_inter > shared_inter ? dense_inter : shared_inter),
        T * hidden, T * hidden, T * moe_inter, T * moe_inter,
    };
    size_t widest_k, most_elems;
    gemm_extent(cfg, shard, &widest_k, &most_elems);
    out->gemm_x_ld = widest_k;
    out->gemm_w_elems = most_elems < DEVICE_GEMM_TILE_MAX_ELEMS ? most_elems : DEVICE_GEMM_TILE_MAX_ELEMS;
    sizes[22] = T * widest_k;                   /* BF16 hi and lo: two per float each */
    sizes[23] = (out->gemm_w_elems + 1) / 2;
    size_t *fields[] = {&out->h, &out->x, &out->q_a, &out->q, &out->kv, &out->q_latent, &out->o_latent, &out->attn,
                        &out->partial, &out->router_logits, &out->chosen, &out->route_weights, &out->act,
                        &out->routed_y, &out->shared_act, &out->shared_y, &out->logits_part,
                        &out->moe_offsets, &out->moe_order, &out->attn_partials, &out->gemv_partials,
                        &out->gemv_counters, &out->gemm_x, &out->gemm_w, &out->gemm_scratch,
                        &out->gemm_up, &out->expert_x, &out->expert_y, &out->expert_act, &out->expert_up};
    _Static_assert(sizeof sizes / sizeof sizes[0] == sizeof fields / sizeof fields[0], "a size per buffer");
    size_t offset = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *fields[i] = offset;
        offset += round_up(sizes[i] ? sizes[i] : 1, 64);
    }
    out->total = offset;
}

int device_gemm_plan_make(const weight_matrix *w, int tokens, size_t y_token, const device_workspace *ws,
                          device_gemm_plan *out)
{
    memset(out, 0, sizeof *out);
    if (tokens < DEVICE_GEMM_MIN_TOKENS || tokens > DEVICE_PREFILL_TOKENS || w->rows < 1 || w->cols < 1 ||
        w->format == WEIGHT_F16 || w->format == WEIGHT_F32)
        return -1;
    size_t k8 = round_up((size_t)w->cols, 8);
    if (k8 > ws->gemm_x_ld || y_token < (size_t)w->rows)
        return -1;
    out->m = tokens;
    out->n = w->rows;
    out->k = w->cols;
    out->ldb = ws->gemm_x_ld;
    out->ldc = y_token;
    /* BF16 rows are read where they are: the packed pitch (a multiple of 16 bytes) is the lda */
    if (w->format == WEIGHT_BF16) {
        out->tile_rows = w->rows;
        out->lda = w->data_stride / 2;
        return 0;
    }
    size_t rows = ws->gemm_w_elems / k8;
    if (rows < 1)
        return -1;
    /* whole multiples of 64 rows keep every tile's y (and its dequantised rows) 256-byte aligned */
    if (rows > 64)
        rows = rows / 64 * 64;
    rows = rows < DEVICE_GEMM_TILE_MAX_ROWS ? rows : DEVICE_GEMM_TILE_MAX_ROWS;
    out->dequantise = 1;
    out->tile_rows = rows < (size_t)w->rows ? (int)rows : w->rows;
    out->lda = k8;
    return 0;
}

typedef struct {
    size_t bytes;
} sum_ctx;

static int add_packed(void *ctx, const device_weight *w)
{
    packed_layout layout;
    packed_layout_of(&w->view, &layout);
    ((sum_ctx *)ctx)->bytes += layout.bytes;
    return 0;
}

int device_rank_plan_make(const model_weights *mw, int tp, int rank, int attn_splits, kv_cache_format cache_format,
                          device_rank_plan *out, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    memset(out, 0, sizeof *out);
    tp_shard shard;
    if (tp_shard_plan(mw, tp, rank, &shard, err))
        return err->code;
    sum_ctx sum = {0};
    device_weights_visit(mw, &shard, add_packed, &sum);
    const model_config *c = &mw->cfg;
    /* expert tables: three weight_matrix per expert and layer, plus the dense/shared entry */
    size_t tables = (size_t)c->layers * ((size_t)c->experts + 1) * 3 * sizeof(weight_matrix);
    /* each vector and table starts aligned: one DEVICE_ALIGN of slack apiece (5 vectors and a
     * table per layer, the final norm) */
    size_t slack = ((size_t)c->layers * 6 + 1) * DEVICE_ALIGN;
    out->packed_bytes = sum.bytes;
    out->weight_bytes = sum.bytes + round_up(device_vector_floats(c) * sizeof(float), DEVICE_ALIGN) +
                        round_up(tables, DEVICE_ALIGN) + slack;
    device_workspace ws;
    device_workspace_plan(c, &shard, attn_splits, &ws);
    out->workspace_bytes = ws.total * sizeof(float);
    out->cache_bytes_per_position = kv_bytes_per_token(c, cache_format);
    return 0;
}

long device_max_context(const device_rank_plan *plans, int ranks, size_t free_bytes, size_t reserve_bytes)
{
    size_t fixed = reserve_bytes, per_position = 0;
    for (int r = 0; r < ranks; r++) {
        fixed += plans[r].weight_bytes + plans[r].workspace_bytes;
        per_position += plans[r].cache_bytes_per_position;
    }
    if (free_bytes <= fixed || per_position == 0)
        return 0;
    size_t fit = (free_bytes - fixed) / per_position;
    return fit > (size_t)0x7FFFFFFF ? 0x7FFFFFFFL : (long)fit;
}

/* ---- devices ---- */

int device_list_parse(const char *what, const char *text, int *devices, int *n_devices, kimi_err *err)
{
    *n_devices = 0;
    const char *p = text;
    for (;;) {
        if (*n_devices == DEVICE_MAX_RANKS)
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: at most %d devices (one per rank)", what, DEVICE_MAX_RANKS);
        long value = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && value <= DEVICE_MAX_ORDINAL) {
            value = value * 10 + (*p++ - '0');
            digits++;
        }
        if (!digits || value > DEVICE_MAX_ORDINAL || (*p && *p != ','))
            return kimi_fail(err, KIMI_ERR_USAGE, "%s: not a list of device ordinals 0..%d like 0,1,2,3", what,
                             DEVICE_MAX_ORDINAL);
        devices[(*n_devices)++] = (int)value;
        if (!*p)
            return 0;
        p++;
    }
}

/* "0,1,2" of devices [n] into text [cap]. */
static const char *list_text(const int *devices, int n, char *text, size_t cap)
{
    size_t used = 0;
    text[0] = 0;
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(text + used, cap - used, i ? ",%d" : "%d", devices[i]);
    return text;
}

#define GIB_OF(bytes) ((double)(bytes) / (1024.0 * 1024.0 * 1024.0))

int device_assign(int tp, const int *devices, int n_devices, const size_t *total_bytes, int n_visible,
                  const char *comm_request, device_assignment *out, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    memset(out, 0, sizeof *out);
    char list[DEVICE_MAX_RANKS * 6];
    if (tp < 1 || tp > DEVICE_MAX_RANKS)
        return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d: must be between 1 and %d", tp, DEVICE_MAX_RANKS);
    if (n_visible < 1)
        return kimi_fail(err, KIMI_ERR_USAGE, "--backend cuda: no CUDA device is visible");
    out->tp = tp;
    if (!devices || n_devices == 0) {
        if (n_visible < tp)
            return kimi_fail(err, KIMI_ERR_USAGE, "--tp %d needs %d devices, %d visible; --devices 0 runs all %d ranks "
                             "on device 0", tp, tp, n_visible, tp);
        for (int r = 0; r < tp; r++)
            out->device[r] = r;
        n_devices = tp;
    } else if (n_devices == 1 || n_devices == tp) {
        list_text(devices, n_devices, list, sizeof list);
        for (int i = 0; i < n_devices; i++) {
            if (devices[i] < 0 || devices[i] >= n_visible)
                return kimi_fail(err, KIMI_ERR_USAGE, "--devices %s: device %d is not visible (%d visible: 0..%d)", list,
                                 devices[i], n_visible, n_visible - 1);
            for (int j = 0; j < i; j++)
                if (devices[j] == devices[i])
                    return kimi_fail(err, KIMI_ERR_USAGE, "--devices %s: device %d is listed twice (give one device "
                                     "per rank, or a single device for all %d ranks)", list, devices[i], tp);
        }
        for (int r = 0; r < tp; r++)
            out->device[r] = devices[n_devices == 1 ? 0 : r];
    } else {
        return kimi_fail(err, KIMI_ERR_USAGE, "--devices %s: %d devices for --tp %d; give %d (one per rank) or one "
                         "(every rank on it)", list_text(devices, n_devices, list, sizeof list), n_devices, tp, tp);
    }
    out->n_distinct = n_devices;
    list_text(out->device, out->n_distinct, list, sizeof list);
    for (int i = 1; i < out->n_distinct; i++)
        if (total_bytes[out->device[i]] != total_bytes[out->device[0]])
            return kimi_fail(err, KIMI_ERR_USAGE, "--devices %s: device %d has %.2f GiB, device %d %.2f GiB; the ranks "
                             "need devices of one size", list, out->device[i], GIB_OF(total_bytes[out->device[i]]),
                             out->device[0], GIB_OF(total_bytes[out->device[0]]));
    out->comm = out->n_distinct > 1 ? DEVICE_COMM_NCCL : DEVICE_COMM_LOCAL;
    if (!comm_request || !*comm_request)
        return 0;
    if (!strcmp(comm_request, "nccl") || !strcmp(comm_request, "peer")) {
        if (out->n_distinct < tp)
            return kimi_fail(err, KIMI_ERR_USAGE, "KIMI_CUDA_COMM=%s: %s takes one device per rank, and --devices %s "
                             "puts all %d ranks on device %d", comm_request, !strcmp(comm_request, "nccl") ? "NCCL"
                             : "the peer all-reduce", list, tp, out->device[0]);
        out->comm = DEVICE_COMM_NCCL;
        return 0;
    }
    if (!strcmp(comm_request, "local")) {
        if (out->n_distinct > 1)
            return kimi_fail(err, KIMI_ERR_USAGE, "KIMI_CUDA_COMM=local: the local communicator runs every rank on one "
                             "device, and the ranks are on devices %s", list);
        return 0;
    }
    return kimi_fail(err, KIMI_ERR_USAGE, "KIMI_CUDA_COMM=%s: must be local, nccl or peer", comm_request);
}

void device_memory_plan_make(const device_rank_plan *plans, const device_assignment *a, const size_t *free_bytes,
                             size_t reserve_bytes, device_memory_plan *out)
{
    memset(out, 0, sizeof *out);
    out->max_context = -1;
    for (int r = 0; r < a->tp; r++) {
        out->weight_bytes = plans[r].weight_bytes > out->weight_bytes ? plans[r].weight_bytes : out->weight_bytes;
        out->workspace_bytes =
            plans[r].workspace_bytes > out->workspace_bytes ? plans[r].workspace_bytes : out->workspace_bytes;
    }
    for (int r = 0; r < a->tp; r++) {
        int device = a->device[r], first = 1;
        for (int q = 0; q < r; q++)
            first &= a->device[q] != device;
        if (!first)
            continue;
        device_rank_plan on_device[DEVICE_MAX_RANKS];
        int ranks = 0;
        size_t fixed = reserve_bytes, per_position = 0, rank_fixed = 0;
        for (int q = r; q < a->tp; q++) {
            if (a->device[q] != device)
                continue;
            on_device[ranks++] = plans[q];
            fixed += plans[q].weight_bytes + plans[q].workspace_bytes;
            per_position += plans[q].cache_bytes_per_position;
            size_t own = plans[q].weight_bytes + plans[q].workspace_bytes;
            rank_fixed = own > rank_fixed ? own : rank_fixed;
        }
        long fit = device_max_context(on_device, ranks, free_bytes[device], reserve_bytes);
        if (out->max_context >= 0 && fit >= out->max_context)
            continue;
        out->max_context = fit;
        out->tightest = device;
        out->ranks_on_tightest = ranks;
        out->free_bytes = free_bytes[device];
        out->fixed_bytes = fixed;
        out->cache_bytes_per_position = per_position;
        out->rank_budget_bytes = free_bytes[device] / (size_t)ranks;
        out->rank_fixed_bytes = rank_fixed + (reserve_bytes + (size_t)ranks - 1) / (size_t)ranks;
    }
    if (out->max_context < 0)
        out->max_context = 0;
}

void device_dcp_workspace_plan(const model_config *cfg, int heads, int dcp, int attn_splits,
                               kv_cache_format cache_format, device_dcp_workspace *out)
{
    memset(out, 0, sizeof *out);
    size_t T = DEVICE_PREFILL_TOKENS, h = (size_t)(heads > 0 ? heads : 1), group = (size_t)(dcp > 0 ? dcp : 1);
    size_t query = (size_t)cfg->kv_lora_rank + (size_t)cfg->qk_rope_dim, part = (size_t)cfg->kv_lora_rank + 2;
    size_t splits = attn_splits > 0 ? (size_t)attn_splits : 1, queries = group * T;
    size_t row_bytes = kv_row_bytes(cache_format, cfg->kv_lora_rank, cfg->qk_rope_dim);
    size_t sizes[] = {T * h * query, queries * h * query, queries * h * part, queries * h * part,
                      (splits > queries ? splits : queries) * h * part, (T * row_bytes + sizeof(float) - 1) / sizeof(float)};
    size_t *fields[] = {&out->q_abs, &out->q_group, &out->parts_send, &out->parts_recv, &out->partials, &out->foreign};
    _Static_assert(sizeof sizes / sizeof sizes[0] == sizeof fields / sizeof fields[0], "a size per buffer");
    size_t offset = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *fields[i] = offset;
        offset += round_up(sizes[i], 64);
    }
    out->total = offset;
}

int device_rank_plan_shard(device_rank_plan *plan, const model_weights *mw, int tp, int rank, int dcp,
                           int attn_splits, kv_cache_format cache_format, kimi_err *err)
{
    kimi_err local_err = {0};   /* err may be NULL: the status must not depend on it */
    if (!err)
        err = &local_err;
    if (dcp <= 1)
        return 0;
    tp_shard shard;
    if (tp_shard_plan(mw, tp, rank, &shard, err))
        return err->code;
    device_dcp_workspace ws;
    device_dcp_workspace_plan(&mw->cfg, range_width(shard.heads), dcp, attn_splits, cache_format, &ws);
    plan->workspace_bytes += ws.total * sizeof(float);
    plan->cache_bytes_per_position = (plan->cache_bytes_per_position + (size_t)dcp - 1) / (size_t)dcp;
    return 0;
}
