/* test_weights: the tiny-k25 checkpoint resolved into views (counts and formats derived from
 * its config and docs/MODEL_FORMAT.md), shard views against full-matrix decodes, the
 * tensor-parallel plan and the memory plan. */
#include <stdlib.h>
#include <string.h>

#include "engine/safetensors.h"
#include "engine/weights.h"
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
    CHECK_INT(kv_bytes_per_token(c), 640);
    CHECK_INT(max_context_for_budget(c, mw->weight_bytes, gib), (long)((gib - mw->weight_bytes) / 640));
    CHECK_INT(max_context_for_budget(c, 1000, 1000 + 640 * 5 + 639), 5);
    CHECK_INT(max_context_for_budget(c, gib, gib), 0);
    CHECK_INT(max_context_for_budget(c, gib + 1, gib), 0);
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
    weights_free(&mw);
    return check_finish();
}
