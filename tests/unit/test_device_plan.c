/* test_device_plan: the CUDA backend's host-side plan, on the CPU: every weight of every rank's
 * shard (tiny-k25: NVFP4 and BF16 linears, TP 1, 2 and 8), repacked into the device layout,
 * decodes to exactly the values of the checkpoint view; pitches and alignments hold; padding is
 * zero; the workspace buffers do not overlap; the byte plan and the largest context add up;
 * every projection a prefill step runs as BF16 GEMMs (experts included) has a plan whose tiles
 * fit the workspace and cover its rows, and the GEMM plan, replayed on the CPU in BF16 (hi + lo
 * activations), gives the fp32 linear's result; the steps a forward call is cut into hold its
 * tokens once each, in order, and never gather logits for more rows than a short step; the
 * routed experts split into GEMM experts and GEMV runs that cover every slot once; the prefill
 * attention's partials fit the workspace; and the workspace at one Kimi-K2.5 rank's shapes.
 * The device side of --devices: lists parse or fail naming the flag, ranks are assigned to
 * devices by the rules of device_assign (one device per rank: NCCL; one device: every rank on
 * it), and the memory plan over synthetic devices picks the tightest one and its context.
 * Also: opening --backend cuda without a usable device (or without CUDA) is a clear error. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/device_plan.h"
#include "engine/model/weights.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/moe_routing.h"
#include "kernels/cpu/numeric.h"
#include "kernels/half_math.h"
#include "kernels/nvfp4_math.h"
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

/* The weights a prefill step runs as GEMMs (engine/backend/backend_cuda.c project(), mlp_gemm(),
 * experts_split_step()). */
static int is_projection(device_weight_role role)
{
    return role == DW_Q_A || role == DW_KV_A || role == DW_Q_B || role == DW_O || role == DW_ROUTER ||
           role == DW_LM_HEAD || (role >= DW_DENSE_GATE && role <= DW_EXPERT_DOWN);
}

typedef struct {
    const device_workspace *ws;
    int planned, faults;
} gemm_check;

/* Every projection plans for every GEMM step length, with tiles that fit the workspace. */
static int check_gemm_plan(void *arg, const device_weight *w)
{
    gemm_check *gc = arg;
    if (!is_projection(w->role))
        return 0;
    packed_layout l;
    packed_layout_of(&w->view, &l);
    weight_matrix p = packed_view(&w->view, &l, (const uint8_t *)0x1000, (const uint8_t *)0x100000);
    gc->planned++;
    for (int tokens = 1; tokens <= DEVICE_PREFILL_TOKENS + 1; tokens++) {
        device_gemm_plan plan;
        int rc = device_gemm_plan_make(&p, tokens, (size_t)p.rows, gc->ws, &plan);
        if (tokens < DEVICE_GEMM_MIN_TOKENS || tokens > DEVICE_PREFILL_TOKENS || p.format == WEIGHT_F16 ||
            p.format == WEIGHT_F32) {
            gc->faults += rc != -1;
            continue;
        }
        if (rc) {
            gc->faults++;
            continue;
        }
        int fits = plan.m == tokens && plan.n == p.rows && plan.k == p.cols && plan.tile_rows >= 1 &&
                   plan.ldb == gc->ws->gemm_x_ld && plan.ldb >= (size_t)plan.k && plan.ldc == (size_t)p.rows;
        if (p.format == WEIGHT_BF16)
            fits &= !plan.dequantise && plan.tile_rows == p.rows && plan.lda * 2 == l.data_pitch;
        else
            fits &= p.format == WEIGHT_NVFP4 && plan.dequantise && plan.lda % 8 == 0 && plan.lda >= (size_t)plan.k &&
                    (size_t)plan.tile_rows * plan.lda <= gc->ws->gemm_w_elems && plan.tile_rows <= 65535;
        gc->faults += !fits;
    }
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
        CHECK_INT(device_rank_plan_make(&mw, tp, rank, 8, KV_CACHE_FP16, &plan, &err), 0);
        CHECK(plan.weight_bytes >= pc.bytes + device_vector_floats(c) * sizeof(float));
        CHECK_INT(plan.cache_bytes_per_position, kv_bytes_per_token(c, KV_CACHE_FP16));

        device_workspace ws;
        device_workspace_plan(c, &shard, 8, &ws);
        size_t *fields[] = {&ws.h, &ws.x, &ws.q_a, &ws.q, &ws.kv, &ws.q_latent, &ws.o_latent, &ws.attn, &ws.partial,
                            &ws.router_logits, &ws.chosen, &ws.route_weights, &ws.act, &ws.routed_y, &ws.shared_act,
                            &ws.shared_y, &ws.logits_part, &ws.moe_offsets, &ws.moe_order,
                            &ws.attn_partials, &ws.gemv_partials, &ws.gemv_counters, &ws.gemm_x, &ws.gemm_w,
                            &ws.gemm_scratch, &ws.gemm_up, &ws.expert_x, &ws.expert_y, &ws.expert_act,
                            &ws.expert_up};
        int ordered = 1;
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
            ordered &= *fields[i] % 64 == 0;
            if (i > 0)
                ordered &= *fields[i] > *fields[i - 1];
        }
        int heads = shard.heads.end - shard.heads.begin;
        size_t T = DEVICE_PREFILL_TOKENS, moe_inter = (size_t)(shard.moe_inter.end - shard.moe_inter.begin);
        size_t latent_part = (size_t)c->kv_lora_rank + 2;
        ordered &= ws.q_latent - ws.kv >= T * (size_t)(c->kv_lora_rank + c->qk_rope_dim);
        ordered &= ws.o_latent - ws.q_latent >= T * (size_t)heads * c->kv_lora_rank &&
                   ws.attn - ws.o_latent >= T * (size_t)heads * c->kv_lora_rank;
        ordered &= ws.shared_act - ws.routed_y >= T * (size_t)c->experts_per_token * c->hidden;
        ordered &= ws.x - ws.h >= T * (size_t)c->hidden && ws.partial - ws.attn >= T * (size_t)heads * c->v_head_dim;
        /* the attention partials of every step shape (8 parts planned): decode kernel on short
         * steps, prefill kernel (partials only with more than one part) on every step */
        for (int tokens = 1; tokens <= DEVICE_MAX_TOKENS; tokens++)
            ordered &= ws.attn_partials + (size_t)tokens * device_attention_splits_for(8, tokens) * heads *
                                              latent_part <= ws.gemv_partials;
        for (int tokens = 2; tokens <= DEVICE_PREFILL_TOKENS; tokens++) {
            size_t parts = (size_t)device_prefill_attention_parts(8, tokens, heads);
            ordered &= parts == 1 || ws.attn_partials + parts * tokens * heads * latent_part <= ws.gemv_partials;
        }
        ordered &= ws.moe_order + T * (size_t)c->experts_per_token <= ws.attn_partials;
        ordered &= ws.moe_offsets + (size_t)c->experts + 1 <= ws.moe_order;
        ordered &= ws.logits_part + DEVICE_MAX_TOKENS * (size_t)(shard.vocab.end - shard.vocab.begin) <= ws.moe_offsets;
        ordered &= ws.gemm_x >= ws.gemv_counters + (size_t)device_max_gemv_rows(c, &shard);
        ordered &= (ws.gemm_w - ws.gemm_x) * 2 >= 2 * T * ws.gemm_x_ld && ws.gemm_x_ld % 8 == 0;
        ordered &= (ws.gemm_scratch - ws.gemm_w) * 2 >= ws.gemm_w_elems;
        ordered &= (ws.gemm_up - ws.gemm_scratch) * sizeof(float) >= DEVICE_GEMM_SCRATCH_BYTES;
        ordered &= ws.expert_x - ws.gemm_up >= T * (size_t)(shard.dense_inter.end - shard.dense_inter.begin) &&
                   ws.expert_x - ws.gemm_up >= T * (size_t)(shard.shared_inter.end - shard.shared_inter.begin);
        ordered &= ws.expert_y - ws.expert_x >= T * (size_t)c->hidden && ws.expert_act - ws.expert_y >= T * (size_t)c->hidden;
        ordered &= ws.expert_up - ws.expert_act >= T * moe_inter && ws.total - ws.expert_up >= T * moe_inter;
        ordered &= ws.gemm_x_ld >= moe_inter && ws.gemm_x_ld >= (size_t)c->hidden;
        CHECK_MSG(ordered, "%s tp %d rank %d: workspace buffers overlap or are misaligned", dir, tp, rank);
        CHECK_INT(plan.workspace_bytes, ws.total * sizeof(float));

        gemm_check gc = {&ws, 0, 0};
        device_weights_visit(&mw, &shard, check_gemm_plan, &gc);
        int mlps = c->layers - moe_layers + (c->shared_experts > 0 ? moe_layers : 0);
        CHECK_MSG(gc.planned == 4 * c->layers + moe_layers + 1 + 3 * mlps + 3 * c->experts * moe_layers && gc.faults == 0,
                  "%s tp %d rank %d: %d GEMM plans, %d faults", dir, tp, rank, gc.planned, gc.faults);

        /* the largest context: exactly the positions that fit */
        device_rank_plan plans[2] = {plan, plan};
        size_t fixed = 2 * (plan.weight_bytes + plan.workspace_bytes) + 1000;
        size_t free_bytes = fixed + 2 * plan.cache_bytes_per_position * 777 + 5;
        CHECK_INT(device_max_context(plans, 2, free_bytes, 1000), 777);
        CHECK_INT(device_max_context(plans, 2, fixed - 1, 1000), 0);
    }
    weights_free(&mw);
}

/* A GEMM plan replayed on the CPU as the device runs it (NVFP4 tiles as e2m1 * e4m3 in BF16,
 * activations split into BF16 hi + lo parts, two sums in float times scale_2, tile by tile into
 * y's rows) matches the fp32 linear y = W x within 2e-6 of sum_k |w_k x_k| (the lo part's
 * rounding, 2^-17, and float sums in another order), and writes exactly the rows [0, n) of every token's y. */
static void check_gemm_plan_replay(void)
{
    enum { ROWS = 37, COLS = 48, PITCH = 32, TOKENS = 17, Y_TOKEN = 40 };
    uint8_t data[ROWS * PITCH], scales[ROWS * 16];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 53 + 7);
    for (size_t i = 0; i < sizeof scales; i++)
        scales[i] = (uint8_t)(0x28 + i % 24);
    weight_matrix w = {.format = WEIGHT_NVFP4, .rows = ROWS, .cols = COLS, .data = data, .data_stride = PITCH,
                       .scale = scales, .scale_stride = 16, .scale_2 = 0.00037f};
    device_workspace ws = {.gemm_x_ld = 64, .gemm_w_elems = 10 * 48 + 5};
    device_gemm_plan plan;
    CHECK_INT(device_gemm_plan_make(&w, TOKENS, Y_TOKEN, &ws, &plan), 0);
    CHECK_INT(plan.tile_rows, 10);
    CHECK_INT(plan.lda, 48);
    CHECK(plan.dequantise);
    static float x[TOKENS][COLS], y[TOKENS][Y_TOKEN], want[TOKENS][ROWS];
    for (int t = 0; t < TOKENS; t++)
        for (int i = 0; i < COLS; i++)
            x[t][i] = (float)((t * 31 + i * 17) % 23) / 7.0f - 1.5f + (float)i * 1e-4f;
    for (int t = 0; t < TOKENS; t++)
        for (int i = 0; i < Y_TOKEN; i++)
            y[t][i] = -999.0f;
    static uint16_t hi[TOKENS][64], lo[TOKENS][64], tile[10 * 48 + 5];
    for (int t = 0; t < TOKENS; t++)
        for (int i = 0; i < plan.k; i++) {
            hi[t][i] = bf16_from_float(x[t][i]);
            lo[t][i] = bf16_from_float(x[t][i] - bf16_bits_to_float(hi[t][i]));
        }
    int inexact = 0;
    for (int first = 0; first < plan.n; first += plan.tile_rows) {
        int rows = plan.n - first < plan.tile_rows ? plan.n - first : plan.tile_rows;
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < plan.k; i++) {
                const uint8_t byte = w.data[(size_t)(first + r) * w.data_stride + i / 2];
                float e = nvfp4_e2m1_to_float((uint8_t)(i & 1 ? byte >> 4 : byte & 15)) *
                          nvfp4_e4m3_to_float(w.scale[(size_t)(first + r) * w.scale_stride + i / 16]);
                tile[(size_t)r * plan.lda + i] = bf16_from_float(e);
                inexact += bf16_bits_to_float(tile[(size_t)r * plan.lda + i]) != e;
            }
        for (int t = 0; t < plan.m; t++)
            for (int r = 0; r < rows; r++) {
                float sums[2] = {0.0f, 0.0f};
                for (int i = 0; i < plan.k; i++) {
                    float a = bf16_bits_to_float(tile[(size_t)r * plan.lda + i]);
                    sums[0] += a * bf16_bits_to_float(hi[t][i]);
                    sums[1] += a * bf16_bits_to_float(lo[t][i]);
                }
                (&y[0][0])[(size_t)t * plan.ldc + (size_t)(first + r)] = w.scale_2 * sums[0] + w.scale_2 * sums[1];
            }
    }
    CHECK_INT(inexact, 0);
    double worst = 0.0;
    int untouched = 1;
    float row[COLS];
    for (int t = 0; t < TOKENS; t++) {
        linear_rows(&w, x[t], COLS, 1, want[t], ROWS, 0, ROWS);
        for (int r = 0; r < ROWS; r++) {
            weight_matrix_decode_row(&w, r, row);
            double mag = 0.0;
            for (int i = 0; i < COLS; i++)
                mag += fabs((double)row[i] * x[t][i]);
            double e = fabs(y[t][r] - want[t][r]) / (mag > 0 ? mag : 1);
            worst = e > worst ? e : worst;
        }
        for (int r = ROWS; r < Y_TOKEN; r++)
            untouched &= y[t][r] == -999.0f;
    }
    CHECK_MSG(worst <= 2e-6, "GEMM replay: max error %.3g of sum |w x|", worst);
    CHECK(untouched);
}

static void check_gemm_plan_limits(void)
{
    uint8_t data[300 * 96] = {0};
    weight_matrix bf16 = {.format = WEIGHT_BF16, .rows = 64, .cols = 40, .data = data, .data_stride = 96,
                          .scale_2 = 1.0f};
    device_workspace ws = {.gemm_x_ld = 48, .gemm_w_elems = 100};
    device_gemm_plan plan;
    CHECK_INT(device_gemm_plan_make(&bf16, DEVICE_GEMM_MIN_TOKENS - 1, 64, &ws, &plan), -1);
    CHECK_INT(device_gemm_plan_make(&bf16, DEVICE_PREFILL_TOKENS + 1, 64, &ws, &plan), -1);
    CHECK_INT(device_gemm_plan_make(&bf16, DEVICE_PREFILL_TOKENS, 64, &ws, &plan), 0);
    CHECK_INT(device_gemm_plan_make(&bf16, DEVICE_GEMM_MIN_TOKENS, 63, &ws, &plan), -1);
    CHECK_INT(device_gemm_plan_make(&bf16, DEVICE_MAX_TOKENS, 64, &ws, &plan), 0);
    CHECK(!plan.dequantise && plan.tile_rows == 64 && plan.lda == 48 && plan.ldb == 48 && plan.ldc == 64);
    bf16.cols = 49;     /* K wider than the activations' rows */
    CHECK_INT(device_gemm_plan_make(&bf16, DEVICE_MAX_TOKENS, 64, &ws, &plan), -1);
    /* F16 and F32 are not exact in BF16: the GEMV serves them */
    weight_matrix f32 = {.format = WEIGHT_F32, .rows = 64, .cols = 20, .data = data, .data_stride = 80,
                         .scale_2 = 1.0f};
    CHECK_INT(device_gemm_plan_make(&f32, DEVICE_MAX_TOKENS, 64, &ws, &plan), -1);
    f32.format = WEIGHT_F16;
    CHECK_INT(device_gemm_plan_make(&f32, DEVICE_MAX_TOKENS, 64, &ws, &plan), -1);
    weight_matrix fp4 = {.format = WEIGHT_NVFP4, .rows = 64, .cols = 20, .data = data, .data_stride = 16,
                         .scale = data, .scale_stride = 16, .scale_2 = 1.0f};
    CHECK_INT(device_gemm_plan_make(&fp4, DEVICE_MAX_TOKENS, 64, &ws, &plan), 0);
    CHECK(plan.dequantise && plan.lda == 24 && plan.tile_rows == 4);
    ws.gemm_w_elems = 24 * 130;     /* 130 rows: whole multiples of 64 rows per tile */
    fp4.rows = 300;
    CHECK_INT(device_gemm_plan_make(&fp4, DEVICE_MAX_TOKENS, 300, &ws, &plan), 0);
    CHECK_INT(plan.tile_rows, 128);
    ws.gemm_w_elems = 23;   /* not one row of the tile */
    CHECK_INT(device_gemm_plan_make(&fp4, DEVICE_MAX_TOKENS, 300, &ws, &plan), -1);
    /* a narrow matrix of many rows (K 32): the tile holds 262144 rows, the dequantise grid takes
     * at most 65535 */
    ws.gemm_w_elems = DEVICE_GEMM_TILE_MAX_ELEMS;
    fp4.rows = 200000;
    fp4.cols = 32;
    CHECK_INT(device_gemm_plan_make(&fp4, DEVICE_MAX_TOKENS, 200000, &ws, &plan), 0);
    CHECK(plan.tile_rows <= 65535 && plan.tile_rows % 64 == 0 && (size_t)plan.tile_rows * plan.lda <= ws.gemm_w_elems);
}

static void check_bf16_rounding(void)
{
    CHECK_INT(bf16_from_float(1.0f), 0x3F80);
    CHECK_INT(bf16_from_float(1.0f + 1.0f / 256), 0x3F80);          /* a tie: to even */
    CHECK_INT(bf16_from_float(1.0f + 3.0f / 256), 0x3F82);          /* a tie: to even, upwards */
    CHECK_INT(bf16_from_float(-1.0f - 1.0f / 512), 0xBF80);
    CHECK_INT(bf16_from_float(3.0e38f * 1.2f), 0x7F80);
    CHECK_INT(bf16_from_float(FLT_MAX), 0x7F80);                    /* rounds past the largest finite */
    CHECK_INT(bf16_from_float(3.389e38f), 0x7F7F);
    CHECK_INT(bf16_from_float(NAN) & 0x7FC0, 0x7FC0);
    CHECK(bf16_bits_to_float(bf16_from_float(0.1f)) == 0.10009765625f);
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

/* The prefill attention's parts: blocks of DEVICE_ATTENTION_ROWS rows times parts fill the
 * planned splits, and a step with partials stays within DEVICE_ATTENTION_ROWS * splits rows. */
static void check_prefill_parts(void)
{
    CHECK_INT(device_prefill_attention_parts(264, 2, 8), 264);      /* one block of 16 rows */
    CHECK_INT(device_prefill_attention_parts(264, 7, 8), 66);       /* 56 rows: 4 blocks */
    CHECK_INT(device_prefill_attention_parts(264, 64, 8), 8);       /* 32 blocks */
    CHECK_INT(device_prefill_attention_parts(264, 512, 8), 1);      /* 256 blocks fill the device */
    CHECK_INT(device_prefill_attention_parts(264, 7, 3), 132);      /* 21 rows: 2 blocks */
    CHECK_INT(device_prefill_attention_parts(1, 64, 8), 1);
    int bad = 0;
    for (int splits = 1; splits <= 300; splits += 7)
        for (int heads = 1; heads <= 16; heads++)
            for (int tokens = 2; tokens <= DEVICE_PREFILL_TOKENS; tokens += 3) {
                long parts = device_prefill_attention_parts(splits, tokens, heads);
                bad += parts < 1 || (parts > 1 && parts * tokens * heads > (long)DEVICE_ATTENTION_ROWS * splits);
            }
    CHECK_INT(bad, 0);
}

/* Cuts a call of n tokens into steps; checks they cover it in order, that a step with an asked
 * row is short, and returns the number of steps (-1 on a fault). */
static int steps_of(int n, const int *rows, int n_rows, int long_steps, int *longest)
{
    int steps = 0;
    *longest = 0;
    for (int first = 0; first < n; steps++) {
        int T = device_step_tokens(first, n, rows, n_rows, long_steps);
        if (T < 1 || T > (long_steps ? DEVICE_PREFILL_TOKENS : DEVICE_MAX_TOKENS) || first + T > n)
            return -1;
        for (int j = 0; j < n_rows; j++)
            if (rows[j] >= first && rows[j] < first + T && T > DEVICE_MAX_TOKENS)
                return -1;
        *longest = T > *longest ? T : *longest;
        first += T;
    }
    return steps;
}

static void check_step_tokens(void)
{
    int longest, last = 999, all[150], some[3] = {700, 5, 1400};
    for (int i = 0; i < 150; i++)
        all[i] = i;
    /* steps of the decode kernels: 64 at a time */
    CHECK_INT(steps_of(1000, &last, 1, 0, &longest), 16);
    CHECK_INT(longest, DEVICE_MAX_TOKENS);
    CHECK_INT(device_step_tokens(0, 1, &last, 0, 1), 1);
    CHECK_INT(device_step_tokens(0, 40, NULL, 0, 1), 40);
    /* the GEMM path: 512 + 424 without logits, then a short step of 64 holding the last row */
    CHECK_INT(device_step_tokens(0, 1000, &last, 1, 1), DEVICE_PREFILL_TOKENS);
    CHECK_INT(device_step_tokens(512, 1000, &last, 1, 1), 1000 - 64 - 512);
    CHECK_INT(device_step_tokens(936, 1000, &last, 1, 1), 64);
    CHECK_INT(steps_of(1000, &last, 1, 1, &longest), 3);
    CHECK_INT(longest, DEVICE_PREFILL_TOKENS);
    /* no logits at all: long steps only */
    CHECK_INT(steps_of(1100, NULL, 0, 1, &longest), 3);
    /* every row asked (golden): short steps only */
    CHECK_INT(steps_of(150, all, 150, 1, &longest), 3);
    CHECK_INT(longest, DEVICE_MAX_TOKENS);
    /* asked rows in any order, one near the start */
    CHECK(steps_of(1500, some, 3, 1, &longest) > 0);
    CHECK_INT(device_step_tokens(0, 1500, some, 3, 1), 64);
    CHECK_INT(device_step_tokens(64, 1500, some, 3, 1), 512);
    CHECK_INT(device_step_tokens(576, 1500, some, 3, 1), 700 + 1 - 64 - 576);
    int bad = 0;
    for (int n = 1; n <= 1300; n += 37)
        for (int a = 0; a < n; a += 53) {
            int rows[2] = {a, n - 1 - a / 3};
            bad += steps_of(n, rows, 2, 1, &longest) < 0 || steps_of(n, rows, 2, 0, &longest) < 0;
        }
    CHECK_INT(bad, 0);
}

/* Splits the experts of offsets; checks that the GEMM experts and the runs cover every slot once
 * and hold what the rule says; returns the plan. */
static device_moe_plan moe_split(const int *offsets, int experts, int min_tokens, device_gemm_expert *gemm,
                                 device_expert_run *runs)
{
    device_moe_plan plan;
    CHECK_INT(device_moe_plan_make(offsets, experts, DEVICE_PREFILL_TOKENS, min_tokens, gemm, runs, &plan), 0);
    int covered[64] = {0}, faults = 0, slots = 0;
    for (int i = 0; i < plan.n_gemm; i++) {
        int e = gemm[i].expert;
        faults += gemm[i].first != offsets[e] || gemm[i].count != offsets[e + 1] - offsets[e] ||
                  gemm[i].count < min_tokens || (i > 0 && e <= gemm[i - 1].expert);
        /* padded rows: a multiple of the step within the workspace, never fewer than the slots */
        faults += gemm[i].rows < gemm[i].count || gemm[i].rows - gemm[i].count >= DEVICE_EXPERT_GEMM_ROW_STEP ||
                  (gemm[i].rows % DEVICE_EXPERT_GEMM_ROW_STEP && gemm[i].rows != DEVICE_PREFILL_TOKENS) ||
                  gemm[i].rows > DEVICE_PREFILL_TOKENS;
        covered[e]++;
        slots += gemm[i].count;
    }
    faults += slots != plan.gemm_slots;
    slots = 0;
    for (int i = 0; i < plan.n_runs; i++) {
        const device_expert_run *r = &runs[i];
        faults += r->count < 1 || offsets[r->first + 1] == offsets[r->first] ||
                  offsets[r->first + r->count] == offsets[r->first + r->count - 1];  /* trimmed */
        for (int e = r->first; e < r->first + r->count; e++) {
            covered[e]++;
            slots += offsets[e + 1] - offsets[e];
            faults += offsets[e + 1] - offsets[e] >= min_tokens;
        }
    }
    faults += slots != plan.gemv_slots;
    for (int e = 0; e < experts; e++)
        faults += offsets[e + 1] > offsets[e] && covered[e] != 1;
    CHECK_MSG(faults == 0, "expert split (%d experts, at least %d slots): %d faults", experts, min_tokens, faults);
    CHECK_INT(plan.gemm_slots + plan.gemv_slots, offsets[experts]);
    return plan;
}

static void check_moe_plan(void)
{
    device_gemm_expert gemm[64];
    device_expert_run runs[64];
    /* counts 0 70 3 0 64 0 5 9 0 80 0 : GEMM experts 1, 4, 9; runs [2, 3) and [6, 8) */
    int counts[11] = {0, 70, 3, 0, 64, 0, 5, 9, 0, 80, 0}, offsets[65] = {0};
    for (int e = 0; e < 11; e++)
        offsets[e + 1] = offsets[e] + counts[e];
    device_moe_plan plan = moe_split(offsets, 11, 64, gemm, runs);
    CHECK_INT(plan.n_gemm, 3);
    CHECK(gemm[0].expert == 1 && gemm[1].expert == 4 && gemm[2].expert == 9);
    CHECK(gemm[0].rows == 96 && gemm[1].rows == 64 && gemm[2].rows == 96);
    CHECK_INT(plan.gemm_slots, 214);
    CHECK_INT(plan.n_runs, 2);
    CHECK(runs[0].first == 2 && runs[0].count == 1 && runs[1].first == 6 && runs[1].count == 2);
    CHECK_INT(plan.gemv_slots, 17);
    /* nobody reaches the threshold: one run from the first to the last expert with slots */
    plan = moe_split(offsets, 11, 100, gemm, runs);
    CHECK(plan.n_gemm == 0 && plan.n_runs == 1 && runs[0].first == 1 && runs[0].count == 9);
    /* everybody does */
    plan = moe_split(offsets, 11, 1, gemm, runs);
    CHECK(plan.n_gemm == 6 && plan.n_runs == 0);
    /* no slots at all */
    int empty[5] = {0, 0, 0, 0, 0};
    plan = moe_split(empty, 4, 64, gemm, runs);
    CHECK(plan.n_gemm == 0 && plan.n_runs == 0);
    /* pseudo-random counts */
    uint32_t seed = 7;
    for (int round = 0; round < 200; round++) {
        int experts = 1 + round % 63;
        for (int e = 0; e < experts; e++) {
            seed = seed * 1103515245u + 12345u;
            int count = (seed >> 16) % 5 == 0 ? 0 : (int)((seed >> 8) % 120);
            offsets[e + 1] = offsets[e] + count;
        }
        moe_split(offsets, experts, 16 + round % 64, gemm, runs);
    }
    int bad_start[3] = {1, 2, 3}, descending[3] = {0, 5, 4};
    CHECK_INT(device_moe_plan_make(bad_start, 2, 512, 64, gemm, runs, &plan), -1);
    CHECK_INT(device_moe_plan_make(descending, 2, 512, 64, gemm, runs, &plan), -1);
    /* an expert with more slots than the step has tokens (chosen twice for a token: 8 x 512
     * slots) or a step longer than the workspace holds is refused, never planned past it */
    int twice[3] = {0, 4096, 4096}, fits[3] = {0, 512, 512};
    CHECK_INT(device_moe_plan_make(twice, 2, 512, 64, gemm, runs, &plan), -1);
    CHECK_INT(device_moe_plan_make(fits, 2, 511, 64, gemm, runs, &plan), -1);
    CHECK_INT(device_moe_plan_make(fits, 2, DEVICE_PREFILL_TOKENS + 1, 64, gemm, runs, &plan), -1);
    CHECK_INT(device_moe_plan_make(fits, 2, 512, 64, gemm, runs, &plan), 0);
    CHECK_INT(gemm[0].rows, 512);
}

/* Routing and the expert plan together, fuzzed: for steps of every length up to the workspace's
 * with router logits that are random, huge, +-inf, NaN or all alike (the non-finite activations
 * of a broken request), moe_route never chooses an expert twice for a token, and the plan of its
 * choices never needs more rows than device_workspace_plan provides (expert_x/_y: [tokens][hidden],
 * expert_act/_up: [tokens][moe inter], moe_order: [tokens * top_k]). */
static void check_route_plan_fuzz(void)
{
    /* Kimi-K2.5's router (384 experts, top 8, one group) and a grouped one (64 in 8 groups, keep 3, top 6) */
    moe_routing_config configs[2] = {{384, 8, 1, 1, 1, 2.827f}, {64, 6, 8, 3, 1, 1.0f}};
    device_gemm_expert gemm[384];
    device_expert_run runs[384];
    int offsets[385], chosen[8];
    float logits[384], bias[384], weights[8], scratch[1024];
    uint32_t seed = 11;
    int twice = 0, over = 0, refused = 0;
    for (int ci = 0; ci < 2; ci++) {
        const moe_routing_config *c = &configs[ci];
        model_config cfg = {.hidden = 64, .layers = 2, .heads = 4, .q_lora_rank = 32, .kv_lora_rank = 32,
                            .qk_nope_dim = 16, .qk_rope_dim = 8, .v_head_dim = 16, .experts = c->experts,
                            .experts_per_token = c->top_k, .shared_experts = 1, .moe_intermediate = 32,
                            .intermediate = 96, .vocab = 256};
        tp_shard shard = {.tp = 1, .heads = {0, 4}, .dense_inter = {0, 96}, .moe_inter = {0, 32},
                          .shared_inter = {0, 32}, .vocab = {0, 256}};
        device_workspace ws;
        device_workspace_plan(&cfg, &shard, 4, &ws);
        CHECK(moe_route_scratch_floats(c) <= sizeof scratch / sizeof *scratch);
        for (int round = 0; round < 24; round++) {
            int tokens = round < 8 ? DEVICE_PREFILL_TOKENS : 1 + (int)(seed % DEVICE_PREFILL_TOKENS);
            int counts[384] = {0};
            for (int t = 0; t < tokens; t++) {
                /* the kind of token: 0 random, 1 all NaN, 2 all +inf, 3 all -inf, 4 all equal,
                 * 5 a mix of NaN, +-inf, huge and random, 6 NaN bias on a random logit row */
                seed = seed * 1103515245u + 12345u;
                int kind = (int)((seed >> 16) % 7);
                for (int e = 0; e < c->experts; e++) {
                    seed = seed * 1103515245u + 12345u;
                    float r = (float)((seed >> 8) % 20001) / 1000.0f - 10.0f;
                    float mix[5] = {NAN, INFINITY, -INFINITY, 3e38f, r};
                    float kinds[7] = {r, NAN, INFINITY, -INFINITY, 1.0f, mix[(seed >> 4) % 5], r};
                    logits[e] = kinds[kind];
                    bias[e] = kind == 6 && (seed >> 3) % 3 == 0 ? NAN : (float)((seed >> 12) % 100) / 1000.0f;
                }
                moe_route(c, logits, bias, scratch, chosen, weights);
                for (int k = 0; k < c->top_k; k++) {
                    over += chosen[k] < 0 || chosen[k] >= c->experts;
                    for (int j = 0; j < k; j++)
                        twice += chosen[j] == chosen[k];
                    if (chosen[k] >= 0 && chosen[k] < c->experts)
                        counts[chosen[k]]++;
                }
            }
            offsets[0] = 0;
            for (int e = 0; e < c->experts; e++)
                offsets[e + 1] = offsets[e] + counts[e];
            device_moe_plan plan;
            if (device_moe_plan_make(offsets, c->experts, tokens, DEVICE_EXPERT_GEMM_MIN_TOKENS, gemm, runs, &plan)) {
                refused++;
                continue;
            }
            over += (size_t)offsets[c->experts] > ws.attn_partials - ws.moe_order;
            for (int i = 0; i < plan.n_gemm; i++) {
                size_t rows = (size_t)gemm[i].rows;
                over += rows * (size_t)cfg.hidden > ws.expert_y - ws.expert_x ||
                        rows * (size_t)cfg.hidden > ws.expert_act - ws.expert_y ||
                        rows * 32 > ws.expert_up - ws.expert_act || rows * 32 > ws.total - ws.expert_up;
            }
        }
    }
    CHECK_INT(twice, 0);
    CHECK_INT(over, 0);
    CHECK_INT(refused, 0);
}

/* The workspace of one Kimi-K2.5 rank at TP 8 (hidden 7168, 8 heads, 384 experts top-8 of width
 * 256, shared 256, dense 2304, vocab 20480 per rank), printed for the record (docs: CUDA.md). */
static void check_rank_workspace(void)
{
    model_config c = {.hidden = 7168, .layers = 61, .heads = 64, .q_lora_rank = 1536, .kv_lora_rank = 512,
                      .qk_nope_dim = 128, .qk_rope_dim = 64, .v_head_dim = 128, .experts = 384,
                      .experts_per_token = 8, .shared_experts = 1, .moe_intermediate = 2048, .intermediate = 18432,
                      .vocab = 163840};
    tp_shard shard = {.tp = 8, .heads = {8, 16}, .dense_inter = {2304, 4608}, .moe_inter = {256, 512},
                      .shared_inter = {256, 512}, .vocab = {20480, 40960}};
    device_workspace ws;
    device_workspace_plan(&c, &shard, 264, &ws);
    size_t bytes = ws.total * sizeof(float);
    size_t routed = (ws.shared_act - ws.routed_y) * sizeof(float);
    printf("workspace of one Kimi-K2.5 rank (TP 8, steps of %d tokens, 264 attention splits): %.1f MiB, of which "
           "routed expert outputs %.1f MiB\n", DEVICE_PREFILL_TOKENS, bytes / 1048576.0, routed / 1048576.0);
    /* per token it holds h, x, the partial, the shared and routed outputs: at least that many floats */
    CHECK(bytes >= (size_t)DEVICE_PREFILL_TOKENS * (4 + 8) * 7168 * sizeof(float));
    CHECK_INT(ws.gemm_x_ld, 7168);
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

static void check_device_lists(void)
{
    int devices[DEVICE_MAX_RANKS], n = -1;
    kimi_err err = {0};
    CHECK_INT(device_list_parse("--devices", "0,1,2,3", devices, &n, &err), 0);
    CHECK_INT(n, 4);
    CHECK_INT(devices[0], 0);
    CHECK_INT(devices[3], 3);
    CHECK_INT(device_list_parse("--devices", "7", devices, &n, &err), 0);
    CHECK(n == 1 && devices[0] == 7);
    /* duplicates parse (device_assign judges them) */
    CHECK_INT(device_list_parse("--devices", "2,2", devices, &n, &err), 0);
    CHECK(n == 2 && devices[1] == 2);
    const char *bad[] = {"", ",", "0,", ",1", "0,,1", "a", "1 ,2", "-1", "0x1", "1024", "99999999999999999999",
                         "0,1,2,3,4,5,6,7,0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (kimi_err){0};
        char what[64];
        snprintf(what, sizeof what, "--devices %s", bad[i]);
        CHECK_MSG(device_list_parse(what, bad[i], devices, &n, &err) == KIMI_ERR_USAGE, "'%s' parsed", bad[i]);
        CHECK_MSG(!strncmp(err.msg, what, strlen(what)) && err.msg[strlen(what)] == ':', "'%s': %s", bad[i], err.msg);
    }
}

/* device_assign on `visible` devices of total[] bytes: 0 or the error, whose message must hold
 * `want` (NULL: success expected). */
static void check_assign(int tp, const int *devices, int n_devices, const size_t *total, int visible,
                         const char *comm, const char *want, device_assignment *a)
{
    kimi_err err = {0};
    int rc = device_assign(tp, devices, n_devices, total, visible, comm, a, &err);
    if (!want) {
        CHECK_MSG(rc == 0, "tp %d, %d devices listed, %d visible: %s", tp, n_devices, visible, err.msg);
        return;
    }
    CHECK_MSG(rc == KIMI_ERR_USAGE && strstr(err.msg, want), "tp %d, %d devices listed, %d visible: rc %d '%s', "
              "want '%s'", tp, n_devices, visible, rc, err.msg, want);
    CHECK_MSG(!strchr(err.msg, '\n'), "one line: %s", err.msg);
}

static void check_device_assign(void)
{
    size_t gib = (size_t)1 << 30;
    size_t total[8] = {96 * gib, 96 * gib, 96 * gib, 96 * gib, 96 * gib, 96 * gib, 96 * gib, 96 * gib};
    device_assignment a;
    /* default: the first tp visible devices, one each (NCCL); TP 1 on device 0 is local */
    check_assign(8, NULL, 0, total, 8, NULL, NULL, &a);
    CHECK(a.comm == DEVICE_COMM_NCCL && a.n_distinct == 8 && a.device[0] == 0 && a.device[7] == 7);
    check_assign(2, NULL, 0, total, 8, NULL, NULL, &a);
    CHECK(a.comm == DEVICE_COMM_NCCL && a.n_distinct == 2 && a.device[1] == 1);
    check_assign(1, NULL, 0, total, 1, NULL, NULL, &a);
    CHECK(a.comm == DEVICE_COMM_LOCAL && a.n_distinct == 1 && a.device[0] == 0);
    /* a list of tp distinct devices, in its order */
    int list[] = {3, 1, 6, 4};
    check_assign(4, list, 4, total, 8, NULL, NULL, &a);
    CHECK(a.comm == DEVICE_COMM_NCCL && a.device[0] == 3 && a.device[1] == 1 && a.device[3] == 4);
    /* a single device: every rank on it, the local communicator */
    int five = 5;
    check_assign(8, &five, 1, total, 8, NULL, NULL, &a);
    CHECK(a.comm == DEVICE_COMM_LOCAL && a.n_distinct == 1 && a.device[0] == 5 && a.device[7] == 5);
    int zero = 0;
    check_assign(8, &zero, 1, total, 1, NULL, NULL, &a);
    CHECK(a.comm == DEVICE_COMM_LOCAL && a.device[7] == 0);
    /* NCCL at TP 1 when asked; the local communicator refuses separate devices */
    check_assign(1, &zero, 1, total, 1, "nccl", NULL, &a);
    CHECK(a.comm == DEVICE_COMM_NCCL);
    check_assign(2, &zero, 1, total, 1, "local", NULL, &a);
    CHECK(a.comm == DEVICE_COMM_LOCAL);

    /* errors, each naming what is at fault */
    check_assign(8, NULL, 0, total, 1, NULL, "--tp 8 needs 8 devices, 1 visible; --devices 0 runs all 8 ranks on "
                 "device 0", &a);
    check_assign(2, NULL, 0, total, 0, NULL, "no CUDA device", &a);
    int dup[] = {0, 1, 1, 2};
    check_assign(4, dup, 4, total, 8, NULL, "--devices 0,1,1,2: device 1 is listed twice", &a);
    int far[] = {0, 9};
    check_assign(2, far, 2, total, 8, NULL, "--devices 0,9: device 9 is not visible (8 visible: 0..7)", &a);
    check_assign(2, &five, 1, total, 2, NULL, "--devices 5: device 5 is not visible", &a);
    int three[] = {0, 1, 2};
    check_assign(8, three, 3, total, 8, NULL, "--devices 0,1,2: 3 devices for --tp 8", &a);
    size_t mixed[2] = {96 * gib, 80 * gib};
    int pair[] = {0, 1};
    check_assign(2, pair, 2, mixed, 2, NULL, "--devices 0,1: device 1 has 80.00 GiB, device 0 96.00 GiB", &a);
    check_assign(2, NULL, 0, mixed, 2, NULL, "device 1 has 80.00 GiB", &a);
    /* one device of the pair is fine whatever the other holds */
    check_assign(2, &zero, 1, mixed, 2, NULL, NULL, &a);
    check_assign(2, &zero, 1, total, 1, "nccl", "KIMI_CUDA_COMM=nccl: NCCL takes one device per rank", &a);
    check_assign(2, pair, 2, total, 2, "local", "KIMI_CUDA_COMM=local", &a);
    check_assign(2, pair, 2, total, 2, "gloo", "KIMI_CUDA_COMM=gloo: must be local, nccl or peer", &a);
    /* the peer all-reduce rides on the NCCL communicator: one device per rank */
    check_assign(2, pair, 2, total, 2, "peer", NULL, &a);
    CHECK(a.comm == DEVICE_COMM_NCCL);
    check_assign(2, &zero, 1, total, 1, "peer", "KIMI_CUDA_COMM=peer: the peer all-reduce takes one device per rank",
                 &a);
    check_assign(9, NULL, 0, total, 8, NULL, "--tp 9", &a);
}

static void check_memory_plan(void)
{
    /* synthetic ranks: rank r holds 10 GB + r MB of weights, 1 GB of workspace, 70,272 B of
     * cache per position (Kimi-K2.5's) */
    size_t mb = (size_t)1 << 20, gib = (size_t)1 << 30, per_position = 70272, reserve = 512 * mb;
    device_rank_plan plans[8];
    for (int r = 0; r < 8; r++)
        plans[r] = (device_rank_plan){.weight_bytes = 10 * gib + (size_t)r * mb, .workspace_bytes = gib,
                                      .cache_bytes_per_position = per_position};
    size_t free_bytes[8];
    for (int d = 0; d < 8; d++)
        free_bytes[d] = 90 * gib;
    free_bytes[5] = 60 * gib;   /* device 5 holds less free memory: the tightest */
    device_assignment a = {.tp = 8, .n_distinct = 8, .comm = DEVICE_COMM_NCCL};
    for (int r = 0; r < 8; r++)
        a.device[r] = r;
    device_memory_plan p;
    device_memory_plan_make(plans, &a, free_bytes, reserve, &p);
    size_t fixed5 = plans[5].weight_bytes + plans[5].workspace_bytes + reserve;
    CHECK_INT(p.tightest, 5);
    CHECK_INT(p.ranks_on_tightest, 1);
    CHECK_INT(p.max_context, (long)((60 * gib - fixed5) / per_position));
    CHECK_INT(p.fixed_bytes, fixed5);
    CHECK_INT(p.cache_bytes_per_position, per_position);
    CHECK_INT(p.weight_bytes, plans[7].weight_bytes);
    CHECK_INT(p.workspace_bytes, gib);
    CHECK_INT(p.rank_budget_bytes, 60 * gib);
    CHECK_INT((p.rank_budget_bytes - p.rank_fixed_bytes) / per_position, p.max_context);

    /* every rank on device 2 (the local communicator): the ranks share its memory */
    device_assignment shared = {.tp = 8, .n_distinct = 1, .comm = DEVICE_COMM_LOCAL};
    for (int r = 0; r < 8; r++)
        shared.device[r] = 2;
    free_bytes[2] = 140 * gib;
    device_memory_plan_make(plans, &shared, free_bytes, reserve, &p);
    size_t fixed = reserve;
    for (int r = 0; r < 8; r++)
        fixed += plans[r].weight_bytes + plans[r].workspace_bytes;
    CHECK_INT(p.tightest, 2);
    CHECK_INT(p.ranks_on_tightest, 8);
    CHECK_INT(p.max_context, (long)((140 * gib - fixed) / (8 * per_position)));
    CHECK_INT(p.cache_bytes_per_position, 8 * per_position);
    /* the per-rank form never promises more than the device holds, and gives up at most what
     * the ranks' unequal weights (7 MB apart) cost */
    long per_rank = (long)((p.rank_budget_bytes - p.rank_fixed_bytes) / per_position);
    long slack = (long)(7 * mb / per_position) + 1;
    CHECK_MSG(per_rank <= p.max_context && per_rank >= p.max_context - slack, "per rank %ld, device %ld", per_rank,
              p.max_context);

    /* weights that do not fit: no context, and the per-rank form says so too */
    free_bytes[2] = 50 * gib;
    device_memory_plan_make(plans, &shared, free_bytes, reserve, &p);
    CHECK_INT(p.max_context, 0);
    CHECK(p.rank_budget_bytes < p.rank_fixed_bytes);
}

static void check_rows_source(void)
{
    static uint8_t data[64 * 40], scale[8 * 40];
    weight_matrix nv = {WEIGHT_NVFP4, 40, 64, data, 64, scale, 8, 1.0f};  /* strided: 32 bytes used of 64 */
    byte_span spans[2];
    packed_rows_source(&nv, 3, 7, spans);
    CHECK(spans[0].begin == data + 3 * 64 && spans[0].end == data + 6 * 64 + 32);
    CHECK(spans[1].begin == scale + 3 * 8 && spans[1].end == scale + 6 * 8 + 4);
    weight_matrix bf = {WEIGHT_BF16, 40, 16, data, 32, NULL, 0, 1.0f};
    packed_rows_source(&bf, 0, 40, spans);
    CHECK(spans[0].begin == data && spans[0].end == data + 39 * 32 + 32);
    CHECK(spans[1].begin == NULL && spans[1].end == NULL);
    packed_rows_source(&bf, 5, 5, spans);
    CHECK(spans[0].begin == spans[0].end);
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
    int device0 = 0;   /* both ranks on device 0: a one-GPU machine runs this too */
    backend_options opt = {.kind = BACKEND_CUDA, .tp = 2, .max_context = 16, .devices = &device0, .n_devices = 1};
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

/* Decode context parallelism (--dcp): a sharded rank's plan counts cache bytes per position / dcp
 * (rounded up) and the sharded attention's buffers, which the workspace layout holds for steps of
 * DEVICE_PREFILL_TOKENS tokens; the same free memory then fits about dcp times the positions. */
static void check_sharded_plan(const char *dir)
{
    model_weights mw;
    kimi_err err = {0};
    if (weights_load(&mw, dir, &err)) {
        CHECK_MSG(0, "%s: %s", dir, err.msg);
        return;
    }
    const model_config *c = &mw.cfg;
    enum { TP = 8, SPLITS = 264 };
    tp_shard shard;
    CHECK_INT(tp_shard_plan(&mw, TP, 0, &shard, &err), 0);
    size_t heads = (size_t)(shard.heads.end - shard.heads.begin), T = DEVICE_PREFILL_TOKENS;
    size_t query = (size_t)(c->kv_lora_rank + c->qk_rope_dim), part = (size_t)c->kv_lora_rank + 2;
    for (int f = 0; f < 2; f++) {
        kv_cache_format format = f ? KV_CACHE_FP8 : KV_CACHE_FP16;
        size_t full = kv_bytes_per_token(c, format), row = kv_row_bytes(format, c->kv_lora_rank, c->qk_rope_dim);
        device_rank_plan replicated;
        CHECK_INT(device_rank_plan_make(&mw, TP, 0, SPLITS, format, &replicated, &err), 0);
        for (int dcp = 1; dcp <= TP; dcp *= 2) {
            device_rank_plan plan = replicated;
            CHECK_INT(device_rank_plan_shard(&plan, &mw, TP, 0, dcp, SPLITS, format, &err), 0);
            CHECK_INT(plan.cache_bytes_per_position, (full + (size_t)dcp - 1) / (size_t)dcp);
            CHECK_INT(plan.weight_bytes, replicated.weight_bytes);
            device_dcp_workspace d;
            device_dcp_workspace_plan(c, (int)heads, dcp, SPLITS, format, &d);
            CHECK_INT(plan.workspace_bytes - replicated.workspace_bytes, dcp > 1 ? d.total * sizeof(float) : 0);
            size_t queries = (size_t)dcp * T, partials = (SPLITS > queries ? SPLITS : queries) * heads * part;
            size_t offsets[] = {d.q_abs, d.q_group, d.parts_send, d.parts_recv, d.partials, d.foreign, d.total};
            size_t sizes[] = {T * heads * query, queries * heads * query, queries * heads * part,
                              queries * heads * part, partials, (T * row + 3) / 4};
            for (size_t i = 0; i + 1 < sizeof offsets / sizeof offsets[0]; i++)
                CHECK_MSG(offsets[i] % 64 == 0 && offsets[i + 1] - offsets[i] >= sizes[i],
                          "dcp %d buffer %zu: at %zu, next at %zu, needs %zu floats", dcp, i, offsets[i],
                          offsets[i + 1], sizes[i]);
            /* room for the fixed bytes and 1000 replicated positions on every one of 8 ranks */
            device_rank_plan plans[TP];
            for (int r = 0; r < TP; r++)
                plans[r] = plan;
            size_t free_bytes = TP * (replicated.weight_bytes + plan.workspace_bytes + 1000 * full);
            long fit = device_max_context(plans, TP, free_bytes, 0);
            CHECK_MSG(fit >= 1000L * dcp - dcp && fit <= 1000L * dcp + dcp, "%s dcp %d: %ld positions fit",
                      f ? "fp8" : "fp16", dcp, fit);
        }
    }
    weights_free(&mw);
}

int main(void)
{
    check_packed_odd_widths();
    check_bf16_rounding();
    check_gemm_plan_limits();
    check_gemm_plan_replay();
    check_splits();
    check_prefill_parts();
    check_step_tokens();
    check_moe_plan();
    check_route_plan_fuzz();
    check_rank_workspace();
    check_device_lists();
    check_device_assign();
    check_memory_plan();
    check_rows_source();
    for (int tp = 1; tp <= 8; tp *= 2)
        if (tp != 4)
            check_model(TINY, tp);
    check_sharded_plan(TINY);
    check_cuda_open_without_device();
    return check_finish();
}
