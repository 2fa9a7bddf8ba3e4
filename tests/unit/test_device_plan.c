/* test_device_plan: the CUDA backend's host-side plan, on the CPU: every weight of every rank's
 * shard (tiny-k25: NVFP4 and BF16 linears, TP 1, 2 and 8), repacked into the device layout,
 * decodes to exactly the values of the checkpoint view; pitches and alignments hold; padding is
 * zero; the workspace buffers do not overlap; the byte plan and the largest context add up.
 * Also: opening --backend cuda without a usable device (or without CUDA) is a clear error. */
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/device_plan.h"
#include "engine/weights.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/check.h"

#define TINY "tests/golden/fixtures/tiny-k25"

typedef struct {
    size_t bytes;
    int weights, rows_checked, mismatched, bad_layout;
    int roles[DW_LM_HEAD + 1];
} pack_check;

static int check_one(void *arg, const device_weight *w)
{
    pack_check *pc = arg;
    const weight_matrix *v = &w->view;
    packed_layout l;
    packed_layout_of(v, &l);
    pc->weights++;
    pc->roles[w->role]++;
    pc->bytes += l.bytes;
    if (l.data_pitch % 16 || l.scale_pitch % 16 || l.data_bytes % DEVICE_ALIGN || l.scale_bytes % DEVICE_ALIGN ||
        (v->format == WEIGHT_NVFP4) != (l.scale_bytes > 0) ||
        (v->format == WEIGHT_NVFP4 && l.scale_pitch * 8 < l.data_pitch))
        pc->bad_layout++;
    uint8_t *data = malloc(l.data_bytes), *scale = l.scale_bytes ? malloc(l.scale_bytes) : NULL;
    memset(data, 0xAB, l.data_bytes);
    if (scale)
        memset(scale, 0xCD, l.scale_bytes);
    packed_rows_write(v, &l, 0, v->rows, data, scale);
    weight_matrix packed = packed_view(v, &l, data, scale);
    float *want = malloc((size_t)v->cols * sizeof(float)), *got = malloc((size_t)v->cols * sizeof(float));
    size_t row_bytes = v->format == WEIGHT_NVFP4 ? (size_t)v->cols / 2 : (size_t)v->cols * (v->format == WEIGHT_F32 ? 4 : 2);
    /* every row of small views, a spread of rows of large ones */
    int step = v->rows > 64 ? v->rows / 37 : 1;
    for (int r = 0; r < v->rows; r += step) {
        weight_matrix_decode_row(v, r, want);
        weight_matrix_decode_row(&packed, r, got);
        if (memcmp(want, got, (size_t)v->cols * sizeof(float)))
            pc->mismatched++;
        for (size_t b = row_bytes; b < l.data_pitch; b++)
            if (data[(size_t)r * l.data_pitch + b])
                pc->bad_layout++;
        pc->rows_checked++;
    }
    free(want);
    free(got);
    free(data);
    free(scale);
    return 0;
}

static void check_model(const char *dir, int tp)
{
    model_weights mw;
    kimi_err err = {0};
    if (weights_load(&mw, dir, &err)) {
        CHECK_MSG(0, "%s: %s", dir, err.msg);
        return;
    }
    const model_config *c = &mw.cfg;
    for (int rank = 0; rank < tp; rank++) {
        tp_shard shard;
        CHECK_INT(tp_shard_plan(&mw, tp, rank, &shard, &err), 0);
        pack_check pc = {0};
        CHECK_INT(device_weights_visit(&mw, &shard, check_one, &pc), 0);
        int moe_layers = 0;
        for (int i = 0; i < c->layers; i++)
            moe_layers += mw.layers[i].is_moe;
        CHECK_INT(pc.roles[DW_Q_A], c->layers);
        CHECK_INT(pc.roles[DW_EXPERT_DOWN], moe_layers * c->experts);
        CHECK_INT(pc.roles[DW_DENSE_UP], c->layers - moe_layers);
        CHECK_INT(pc.roles[DW_SHARED_GATE], c->shared_experts > 0 ? moe_layers : 0);
        CHECK_INT(pc.roles[DW_LM_HEAD], 1);
        CHECK_MSG(pc.mismatched == 0, "%s tp %d rank %d: %d of %d packed rows decode differently", dir, tp, rank,
                  pc.mismatched, pc.rows_checked);
        CHECK_MSG(pc.bad_layout == 0, "%s tp %d rank %d: %d layout faults", dir, tp, rank, pc.bad_layout);

        device_rank_plan plan;
        CHECK_INT(device_rank_plan_make(&mw, tp, rank, 8, &plan, &err), 0);
        CHECK(plan.weight_bytes >= pc.bytes + device_vector_floats(c) * sizeof(float));
        CHECK_INT(plan.cache_bytes_per_position, kv_bytes_per_token(c));

        device_workspace ws;
        device_workspace_plan(c, &shard, 8, &ws);
        size_t *fields[] = {&ws.h, &ws.x, &ws.q_a, &ws.q, &ws.kv, &ws.q_latent, &ws.o_latent, &ws.attn, &ws.partial,
                            &ws.router_logits, &ws.chosen, &ws.route_weights, &ws.act, &ws.routed_y, &ws.shared_act,
                            &ws.shared_y, &ws.logits_part, &ws.moe_offsets, &ws.moe_order,
                            &ws.attn_partials, &ws.gemv_partials, &ws.gemv_counters};
        int ordered = 1;
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
            ordered &= *fields[i] % 64 == 0;
            if (i > 0)
                ordered &= *fields[i] > *fields[i - 1];
        }
        int heads = shard.heads.end - shard.heads.begin;
        size_t T = DEVICE_MAX_TOKENS;
        ordered &= ws.q_latent - ws.kv >= T * (size_t)(c->kv_lora_rank + c->qk_rope_dim);
        ordered &= ws.x - ws.h >= T * (size_t)c->hidden && ws.partial - ws.attn >= T * (size_t)heads * c->v_head_dim;
        /* the attention partials of every step shape (8 parts planned) */
        for (int tokens = 1; tokens <= DEVICE_MAX_TOKENS; tokens++)
            ordered &= ws.attn_partials + (size_t)tokens * device_attention_splits_for(8, tokens) * heads *
                                              (size_t)(c->kv_lora_rank + 2) <= ws.gemv_partials;
        ordered &= ws.moe_order + T * (size_t)c->experts_per_token <= ws.attn_partials;
        ordered &= ws.moe_offsets + (size_t)c->experts + 1 <= ws.moe_order;
        ordered &= ws.logits_part + T * (size_t)(shard.vocab.end - shard.vocab.begin) <= ws.moe_offsets;
        ordered &= ws.total >= ws.gemv_counters + (size_t)device_max_gemv_rows(c, &shard);
        CHECK_MSG(ordered, "%s tp %d rank %d: workspace buffers overlap or are misaligned", dir, tp, rank);
        CHECK_INT(plan.workspace_bytes, ws.total * sizeof(float));

        /* the largest context: exactly the positions that fit */
        device_rank_plan plans[2] = {plan, plan};
        size_t fixed = 2 * (plan.weight_bytes + plan.workspace_bytes) + 1000;
        size_t free_bytes = fixed + 2 * plan.cache_bytes_per_position * 777 + 5;
        CHECK_INT(device_max_context(plans, 2, free_bytes, 1000), 777);
        CHECK_INT(device_max_context(plans, 2, fixed - 1, 1000), 0);
    }
    weights_free(&mw);
}

static void check_splits(void)
{
    CHECK_INT(device_attention_splits_for(264, 1), 264);
    CHECK_INT(device_attention_splits_for(264, 64), 4);
    CHECK_INT(device_attention_splits_for(3, 8), 1);
    CHECK_INT(device_attention_splits(1, 132), 1);
    CHECK_INT(device_attention_splits(64, 132), 1);
    CHECK_INT(device_attention_splits(65, 132), 2);
    CHECK_INT(device_attention_splits(131072, 132), 264);
    CHECK_INT(device_attention_splits(0x7FFFFFFFL, 0), 2);
}

static void check_packed_odd_widths(void)
{
    /* an NVFP4 row of 48 weights (24 bytes: the pitch pads to 32, the second chunk half-valid) */
    uint8_t data[3 * 40], scales[3 * 5];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 37 + 11);
    for (size_t i = 0; i < sizeof scales; i++)
        scales[i] = (uint8_t)(0x30 + i);
    weight_matrix v = {.format = WEIGHT_NVFP4, .rows = 3, .cols = 48, .data = data + 4, .data_stride = 40,
                       .scale = scales + 1, .scale_stride = 5, .scale_2 = 0.75f};
    packed_layout l;
    packed_layout_of(&v, &l);
    CHECK_INT(l.data_pitch, 32);
    CHECK_INT(l.scale_pitch, 16);
    uint8_t out_data[256 * 2], out_scale[256 * 2];
    packed_rows_write(&v, &l, 1, 3, out_data, out_scale);
    weight_matrix p = packed_view(&v, &l, out_data, out_scale);
    float want[48], got[48];
    for (int r = 1; r < 3; r++) {
        weight_matrix_decode_row(&v, r, want);
        weight_matrix_decode_row(&p, r - 1, got);
        CHECK(!memcmp(want, got, sizeof want));
    }
    CHECK_INT(out_data[24], 0);
    CHECK_INT(out_scale[3], 0);
}

static void check_cuda_open_without_device(void)
{
    model_weights mw;
    kimi_err err = {0};
    if (weights_load(&mw, TINY, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    backend *be = NULL;
    backend_options opt = {.kind = BACKEND_CUDA, .tp = 2, .max_context = 16};
    int rc = backend_open(&be, &mw, &opt, &err);
    if (rc == 0) {
        /* a device is present (GPU machine): the open must have worked as it did */
        CHECK(backend_capacity(be) == 16);
        backend_close(be);
    } else {
        CHECK_INT(rc, KIMI_ERR_USAGE);
        CHECK_MSG(strstr(err.msg, "no CUDA device") || strstr(err.msg, "no CUDA backend"), "message: %s", err.msg);
        size_t budget, fixed;
        CHECK(backend_memory(&mw, &opt, &budget, &fixed, &err) != 0);
    }
    weights_free(&mw);
}

int main(void)
{
    check_packed_odd_widths();
    check_splits();
    for (int tp = 1; tp <= 8; tp *= 2)
        if (tp != 4)
            check_model(TINY, tp);
    check_cuda_open_without_device();
    return check_finish();
}
