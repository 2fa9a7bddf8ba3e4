/* test_loader_variants: checkpoints the loader has never seen, written by kimi-mkmodel (its own
 * safetensors writer) with other widths, groups, vocabularies, the K2.6 recipe (BF16 dense
 * layers and shared experts) and an F32 router bias; every number the loader reports is
 * compared with one computed here from the variant's settings. Usage: test_loader_variants MKMODEL */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/weights.h"
#include "tests/unit/check.h"

typedef struct {
    const char *flags;          /* kimi-mkmodel flags besides --out */
    int hidden, layers, dense_layers, heads, q_lora, kv_lora, nope, rope, v_head;
    int experts, moe_inter, inter, shared;
    int k26;                    /* BF16 dense MLPs and shared experts */
    int bias_f32;
    int tp_ok, tp_bad;          /* a degree that must plan, one that must be refused (0: none) */
    const char *tp_bad_field;
} variant;

static size_t nvfp4_bytes(size_t n, size_t k)
{
    return n * k / 2 + n * k / 16 + 4;  /* packed nibbles, E4M3 block scales, F32 scale_2 */
}

static size_t mlp_bytes(size_t hidden, size_t inter, int nvfp4)
{
    return nvfp4 ? 2 * nvfp4_bytes(inter, hidden) + nvfp4_bytes(hidden, inter) : 3 * inter * hidden * 2;
}

/* Bytes of every tensor the engine uses, from the architecture alone (BF16 unless NVFP4). */
static size_t expected_bytes(const variant *v, size_t vocab)
{
    size_t h = (size_t)v->hidden, bytes = 2 * vocab * h * 2 + h * 2;
    for (int l = 0; l < v->layers; l++) {
        bytes += (2 * h + (size_t)v->q_lora + (size_t)v->kv_lora) * 2;
        bytes += (size_t)v->q_lora * h * 2 + (size_t)v->heads * (v->nope + v->rope) * v->q_lora * 2;
        bytes += (size_t)(v->kv_lora + v->rope) * h * 2 + (size_t)v->heads * (v->nope + v->v_head) * v->kv_lora * 2;
        bytes += h * (size_t)v->heads * v->v_head * 2;
        if (l < v->dense_layers) {
            bytes += mlp_bytes(h, (size_t)v->inter, !v->k26);
            continue;
        }
        bytes += (size_t)v->experts * h * 2 + (size_t)v->experts * (v->bias_f32 ? 4 : 2);
        bytes += (size_t)v->experts * mlp_bytes(h, (size_t)v->moe_inter, 1);
        if (v->shared)
            bytes += mlp_bytes(h, (size_t)v->shared * v->moe_inter, !v->k26);
    }
    return bytes;
}

/* vocab_size as kimi-mkmodel wrote it (base vocabulary plus its special tokens). */
static int file_vocab(const char *dir)
{
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    json_t *text = json_object_get(cfg, "text_config");
    int vocab = (int)json_integer_value(json_object_get(text ? text : cfg, "vocab_size"));
    json_decref(cfg);
    return vocab;
}

static void check_variant(const char *mkmodel, const variant *v)
{
    char dir[] = "/tmp/kimi-variant-XXXXXX", cmd[2048], out[64];
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    snprintf(out, sizeof out, "%s/m", dir);
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' %s >/dev/null", mkmodel, out, v->flags);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
    model_weights mw;
    kimi_err err = {0};
    int rc = weights_load(&mw, out, &err);
    CHECK_MSG(rc == 0, "%s: %s", v->flags, err.msg);
    if (rc == 0) {
        int moe_layers = v->layers - v->dense_layers, vocab = file_vocab(out);
        int mlps_nvfp4 = v->k26 ? 0 : v->dense_layers + moe_layers * (v->shared > 0);
        int mlps_bf16 = v->k26 ? v->dense_layers + moe_layers * (v->shared > 0) : 0;
        CHECK_INT(mw.cfg.layers, v->layers);
        CHECK_INT(mw.cfg.vocab, vocab);
        CHECK_INT(mw.embed.w.rows, vocab);
        CHECK_INT(mw.n_nvfp4_linears, 3 * (moe_layers * v->experts + mlps_nvfp4));
        /* attention 5 per layer, one router per MoE layer, lm_head, and BF16 MLPs */
        CHECK_INT(mw.n_dense_linears, 5 * v->layers + moe_layers + 1 + 3 * mlps_bf16);
        CHECK_INT(mw.weight_bytes, expected_bytes(v, (size_t)vocab));
        CHECK_INT(kv_bytes_per_token(&mw.cfg, KV_CACHE_FP16), (size_t)(v->kv_lora + v->rope) * 2 * v->layers);
        for (int l = 0; l < v->layers; l++) {
            const layer_weights *lw = &mw.layers[l];
            CHECK_INT(lw->is_moe, l >= v->dense_layers);
            if (!lw->is_moe) {
                CHECK_INT(lw->dense.down.w.format, v->k26 ? WEIGHT_BF16 : WEIGHT_NVFP4);
                CHECK_INT(lw->dense.down.w.cols, v->inter);
                continue;
            }
            CHECK_INT(lw->experts[v->experts - 1].up.w.format, WEIGHT_NVFP4);
            CHECK_INT(lw->experts[0].down.w.cols, v->moe_inter);
            CHECK_INT(lw->router_bias.type, v->bias_f32 ? DTYPE_F32 : DTYPE_BF16);
            if (v->shared) {
                CHECK_INT(lw->shared.gate.w.format, v->k26 ? WEIGHT_BF16 : WEIGHT_NVFP4);
                CHECK_INT(lw->shared.gate.w.rows, v->shared * v->moe_inter);
            }
        }
        tp_shard s;
        for (int r = 0; r < v->tp_ok; r++)
            CHECK_MSG(tp_shard_plan(&mw, v->tp_ok, r, &s, &err) == 0, "%s tp %d: %s", v->flags, v->tp_ok, err.msg);
        if (v->tp_bad) {
            CHECK_INT(tp_shard_plan(&mw, v->tp_bad, 0, &s, &err), KIMI_ERR_USAGE);
            CHECK_MSG(strstr(err.msg, v->tp_bad_field) != NULL, "%s: '%s' not in: %s", v->flags, v->tp_bad_field, err.msg);
        }
        weights_free(&mw);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_loader_variants PATH-TO-kimi-mkmodel\n");
        return 2;
    }
    static const variant variants[] = {
        {"--preset tiny", 256, 4, 1, 8, 128, 64, 32, 16, 32, 16, 128, 512, 1, 0, 0, 8, 3, "num_attention_heads"},
        {"--preset tiny --recipe k26 --router-bias-dtype f32 --n-group 4 --topk-group 2 --vocab 1000 --hidden 192 "
         "--single-file",
         192, 4, 1, 8, 128, 64, 32, 16, 32, 16, 128, 512, 1, 1, 1, 8, 0, NULL},
        /* other widths; at TP 8 an expert's 64-wide intermediate gives each rank 8 NVFP4 columns */
        {"--preset tiny --hidden 320 --layers 3 --dense-layers 2 --heads 8 --q-lora 96 --kv-lora 32 --nope 16 "
         "--rope 8 --v-head 24 --experts 8 --top-k 2 --moe-inter 64 --inter 256 --shared 2 --shards 2",
         320, 3, 2, 8, 96, 32, 16, 8, 24, 8, 64, 256, 2, 0, 0, 4, 8, "moe_intermediate_size"},
        {"--preset tiny --recipe k26 --layers 2 --dense-layers 0 --shared 0 --experts 32 --n-group 8 --topk-group 3 "
         "--top-k 6 --shards 5",
         256, 2, 0, 8, 128, 64, 32, 16, 32, 32, 128, 512, 0, 1, 0, 8, 0, NULL},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        check_variant(argv[1], &variants[i]);
    return check_finish();
}
