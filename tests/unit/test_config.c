/* test_config: config.json (wrapped kimi_k25 and plain deepseek_v3 / kimi_k2), the other JSON
 * files of a model directory, and every validation naming its field. Expected values come from
 * the fixture's files and from docs/MODEL_FORMAT.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "tests/unit/check.h"

#define TINY "tests/golden/fixtures/tiny-k25"

/* Kimi-K2.5's text_config as listed in docs/MODEL_FORMAT.md. */
#define K25_TEXT_CONFIG                                                                                  \
    "\"model_type\":\"kimi_k2\",\"hidden_size\":7168,\"num_hidden_layers\":61,\"num_attention_heads\":64," \
    "\"q_lora_rank\":1536,\"kv_lora_rank\":512,\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,"          \
    "\"v_head_dim\":128,\"n_routed_experts\":384,\"num_experts_per_tok\":8,\"n_shared_experts\":1,"        \
    "\"moe_intermediate_size\":2048,\"intermediate_size\":18432,\"first_k_dense_replace\":1,"             \
    "\"n_group\":1,\"topk_group\":1,\"topk_method\":\"noaux_tc\",\"scoring_func\":\"sigmoid\","          \
    "\"norm_topk_prob\":true,\"routed_scaling_factor\":2.827,\"rms_norm_eps\":1e-5,\"rope_theta\":50000," \
    "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":64,\"original_max_position_embeddings\":4096,"         \
    "\"beta_fast\":32,\"beta_slow\":1,\"mscale\":1,\"mscale_all_dim\":1},"                                \
    "\"max_position_embeddings\":262144,\"vocab_size\":163840,\"tie_word_embeddings\":false"

static int parse(model_config *cfg, const char *file, const char *text, kimi_err *err)
{
    config_init(cfg);
    memset(err, 0, sizeof *err);
    return config_parse_text(cfg, file, text, strlen(text), err);
}

static void test_tiny_directory(void)
{
    model_config cfg;
    kimi_err err = {0};
    CHECK_MSG(config_load(&cfg, TINY, &err) == 0, "%s", err.msg);
    /* Values as written in the fixture's config.json (text_config) and companions. */
    CHECK_STR(cfg.model_type, "deepseek_v3");
    CHECK_INT(cfg.hidden, 256);
    CHECK_INT(cfg.layers, 4);
    CHECK_INT(cfg.heads, 8);
    CHECK_INT(cfg.q_lora_rank, 128);
    CHECK_INT(cfg.kv_lora_rank, 64);
    CHECK_INT(cfg.qk_nope_dim, 32);
    CHECK_INT(cfg.qk_rope_dim, 16);
    CHECK_INT(cfg.v_head_dim, 32);
    CHECK_INT(cfg.experts, 16);
    CHECK_INT(cfg.experts_per_token, 4);
    CHECK_INT(cfg.shared_experts, 1);
    CHECK_INT(cfg.moe_intermediate, 128);
    CHECK_INT(cfg.intermediate, 512);
    CHECK_INT(cfg.first_dense, 1);
    CHECK_INT(cfg.moe_layer_freq, 1);
    CHECK_INT(cfg.n_group, 1);
    CHECK_INT(cfg.topk_group, 1);
    CHECK_INT(cfg.norm_topk_prob, 1);
    CHECK_NEAR(cfg.routed_scaling_factor, 2.827, 1e-6);
    CHECK_NEAR(cfg.rms_norm_eps, 1e-5, 1e-12);
    CHECK_NEAR(cfg.rope_theta, 50000, 0);
    CHECK_INT(cfg.rope_yarn, 1);
    CHECK_NEAR(cfg.rope_factor, 64, 0);
    CHECK_INT(cfg.rope_original_max, 4096);
    CHECK_NEAR(cfg.rope_beta_fast, 32, 0);
    CHECK_NEAR(cfg.rope_beta_slow, 1, 0);
    CHECK_NEAR(cfg.rope_mscale, 1, 0);
    CHECK_NEAR(cfg.rope_mscale_all_dim, 1, 0);
    CHECK_INT(cfg.max_position, 262144);
    CHECK_INT(cfg.vocab, 2304);
    CHECK_INT(cfg.tie_word_embeddings, 0);
    CHECK_INT(cfg.bos_id, 2048);
    CHECK_INT(cfg.eos_id, 2049);
    CHECK_STR(cfg.quant_algo, "NVFP4");
    CHECK_STR(cfg.kv_cache_quant_algo, "FP8");
    CHECK_INT(cfg.quant_group_size, 16);
    CHECK_INT(cfg.max_length, 262144);
    CHECK_INT(cfg.n_gen_eos_ids, 1);
    CHECK_INT(cfg.gen_eos_ids[0], 2049);
    /* tokenizer_config.json's added_tokens_decoder: 256 entries, ids 2048..2303 */
    CHECK_INT(cfg.n_specials, 256);
    CHECK_INT(cfg.specials[0].id, 2048);
    CHECK_STR(cfg.specials[0].content, "[BOS]");
    CHECK_INT(cfg.specials[255].id, 2303);
    CHECK_INT(config_special_id(&cfg, "<|im_end|>"), 2050);
    CHECK_INT(config_special_id(&cfg, "<|im_assistant|>"), 2052);
    CHECK_INT(config_special_id(&cfg, "<|not a token|>"), -1);
    CHECK(!config_layer_is_moe(&cfg, 0));
    CHECK(config_layer_is_moe(&cfg, 1) && config_layer_is_moe(&cfg, 3));
    CHECK_INT(kv_bytes_per_token(&cfg, KV_CACHE_FP16), (64 + 16) * 2 * 4);
    for (int tp = 1; tp <= 8; tp *= 2)
        CHECK_MSG(config_check_tp(&cfg, tp, &err) == 0, "tp %d: %s", tp, err.msg);
    CHECK_INT(config_check_tp(&cfg, 3, &err), KIMI_ERR_USAGE);
    CHECK(strstr(err.msg, "num_attention_heads") != NULL);
    CHECK_INT(config_check_tp(&cfg, 16, &err), KIMI_ERR_USAGE);
    CHECK_INT(config_check_tp(&cfg, 0, &err), KIMI_ERR_USAGE);
    config_free(&cfg);

    CHECK_INT(config_load(&cfg, "tests/golden/reference/tiny-k25", &err), KIMI_ERR_MODEL);
    CHECK(strstr(err.msg, "config.json") != NULL);
}

static void test_real_kimi_k25(void)
{
    model_config cfg;
    kimi_err err;
    const char *wrapped = "{\"model_type\":\"kimi_k25\",\"text_config\":{" K25_TEXT_CONFIG "}}";
    CHECK_MSG(parse(&cfg, "config.json", wrapped, &err) == 0, "%s", err.msg);
    CHECK_MSG(config_validate(&cfg, &err) == 0, "%s", err.msg);
    /* docs/ARCHITECTURE.md: 576 x 2 B x 61 layers = 70,272 B per token */
    CHECK_INT(kv_bytes_per_token(&cfg, KV_CACHE_FP16), 70272);
    CHECK_INT(cfg.layers, 61);
    CHECK_INT(cfg.experts, 384);
    CHECK_STR(cfg.model_type, "kimi_k2");
    CHECK(config_check_tp(&cfg, 8, &err) == 0);
    CHECK_INT(config_check_tp(&cfg, 3, &err), KIMI_ERR_USAGE);
    CHECK(!config_layer_is_moe(&cfg, 0) && config_layer_is_moe(&cfg, 60));
    config_free(&cfg);

    /* The same settings as a plain (unwrapped) deepseek_v3 config. */
    static const char k25[] = K25_TEXT_CONFIG, type_kimi[] = "\"model_type\":\"kimi_k2\",";
    char plain[4096];
    snprintf(plain, sizeof plain, "{\"model_type\":\"deepseek_v3\",%s,\"bos_token_id\":1}", k25 + strlen(type_kimi));
    CHECK_MSG(parse(&cfg, "config.json", plain, &err) == 0, "%s", err.msg);
    CHECK_INT(kv_bytes_per_token(&cfg, KV_CACHE_FP16), 70272);
    CHECK_INT(cfg.bos_id, 1);
    CHECK_STR(cfg.model_type, "deepseek_v3");
    config_free(&cfg);
}

/* A config.json that must be rejected with a message naming `field`. */
static void expect_config_error(const char *what, const char *text, const char *field)
{
    model_config cfg;
    kimi_err err;
    int rc = parse(&cfg, "config.json", text, &err);
    if (rc == 0)
        rc = config_validate(&cfg, &err);
    CHECK_MSG(rc == KIMI_ERR_MODEL, "%s: rc %d (%s)", what, rc, err.msg);
    CHECK_MSG(strstr(err.msg, field) != NULL, "%s: message lacks '%s': %s", what, field, err.msg);
    CHECK_MSG(strstr(err.msg, "config.json") != NULL, "%s: message lacks the file: %s", what, err.msg);
    config_free(&cfg);
}

/* K2.5's text_config with one of its keys' value replaced (or the key removed when value is NULL). */
static char *edited(const char *key, const char *value)
{
    static char out[4096];
    const char *base = "{\"model_type\":\"kimi_k25\",\"text_config\":{" K25_TEXT_CONFIG "}}";
    char pattern[128];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *at = strstr(strstr(base, "text_config"), pattern);
    if (!at) {
        snprintf(out, sizeof out, "%s", base);
        return out;
    }
    const char *end = at + strlen(pattern);
    int depth = 0;
    for (; *end && !(depth == 0 && (*end == ',' || *end == '}')); end++)
        depth += (*end == '{') - (*end == '}');
    if (value)
        snprintf(out, sizeof out, "%.*s%s%s%s", (int)(at - base), base, pattern, value, end);
    else
        snprintf(out, sizeof out, "%.*s%s", (int)(at - base - 1), base, end);  /* drop the comma before */
    return out;
}

static void test_config_errors(void)
{
    expect_config_error("missing hidden_size", edited("hidden_size", NULL), "text_config.hidden_size is missing");
    expect_config_error("string hidden_size", edited("hidden_size", "\"7168\""), "text_config.hidden_size must be an integer");
    expect_config_error("float layers", edited("num_hidden_layers", "61.5"), "num_hidden_layers");
    expect_config_error("zero heads", edited("num_attention_heads", "0"), "num_attention_heads");
    expect_config_error("negative vocab", edited("vocab_size", "-5"), "vocab_size");
    expect_config_error("rms_norm_eps string", edited("rms_norm_eps", "\"1e-5\""), "rms_norm_eps must be a number");
    expect_config_error("missing rope_theta", edited("rope_theta", NULL), "rope_theta");
    expect_config_error("rms_norm_eps past float", edited("rms_norm_eps", "1e300"),
                        "text_config.rms_norm_eps = 1e+300 is outside the range of a float");
    expect_config_error("routed_scaling_factor under float", edited("routed_scaling_factor", "1e-300"),
                        "text_config.routed_scaling_factor = 1e-300 is outside the range of a float");
    expect_config_error("norm_topk_prob not bool", edited("norm_topk_prob", "1"), "norm_topk_prob");
    expect_config_error("experts not divisible by n_group", edited("n_group", "5"), "n_group");
    expect_config_error("topk_group > n_group", edited("topk_group", "2"), "topk_group");
    expect_config_error("experts_per_token > experts", edited("num_experts_per_tok", "400"), "num_experts_per_tok");
    expect_config_error("odd rope dim", edited("qk_rope_head_dim", "63"), "qk_rope_head_dim");
    expect_config_error("unknown model_type", edited("model_type", "\"llama\""), "model_type");
    expect_config_error("softmax scoring", edited("scoring_func", "\"softmax\""), "scoring_func");
    expect_config_error("rope_scaling linear", edited("rope_scaling", "{\"type\":\"linear\",\"factor\":2}"),
                        "rope_scaling.type");
    expect_config_error("yarn without original length", edited("rope_scaling", "{\"type\":\"yarn\",\"factor\":4}"),
                        "rope_scaling.original_max_position_embeddings");
    expect_config_error("first_k_dense_replace past layers", edited("first_k_dense_replace", "62"), "first_k_dense_replace");
    expect_config_error("text_config not an object", "{\"model_type\":\"kimi_k25\",\"text_config\":[]}", "text_config");
    expect_config_error("kimi_k25 without text_config", "{\"model_type\":\"kimi_k25\"}", "text_config");
    expect_config_error("not JSON", "{\"model_type\": kimi", "not valid JSON");
    expect_config_error("JSON array", "[]", "not a JSON object");

    /* n_group > 1 routing: 384 experts in 8 groups keeping 4 works; keeping 1 group of 48 can
     * still serve 8 experts per token, but 16 groups of 24 keeping 0 cannot exist. */
    model_config cfg;
    kimi_err err;
    char text[4096];
    snprintf(text, sizeof text, "%s", edited("n_group", "8"));
    char *tg = strstr(text, "\"topk_group\":1");
    memcpy(tg, "\"topk_group\":4", 14);
    CHECK_MSG(parse(&cfg, "config.json", text, &err) == 0, "%s", err.msg);
    CHECK_INT(cfg.n_group, 8);
    CHECK_INT(cfg.topk_group, 4);
    config_free(&cfg);

    /* NVFP4 needs every MLP K a multiple of 16. */
    CHECK_INT(parse(&cfg, "config.json", edited("moe_intermediate_size", "2040"), &err), 0);
    snprintf(cfg.quant_algo, sizeof cfg.quant_algo, "NVFP4");
    CHECK_INT(config_validate(&cfg, &err), KIMI_ERR_MODEL);
    CHECK(strstr(err.msg, "moe_intermediate_size") != NULL);
    config_free(&cfg);
}

static void expect_file_error(const char *file, const char *text, const char *needle)
{
    model_config cfg;
    kimi_err err;
    int rc = parse(&cfg, file, text, &err);
    CHECK_MSG(rc == KIMI_ERR_MODEL, "%s %s: rc %d (%s)", file, text, rc, err.msg);
    CHECK_MSG(strstr(err.msg, file) && strstr(err.msg, needle), "%s: message lacks '%s': %s", file, needle, err.msg);
    config_free(&cfg);
}

static void test_other_files(void)
{
    model_config cfg;
    kimi_err err;
    CHECK_INT(parse(&cfg, "generation_config.json", "{\"eos_token_id\":[7,9],\"max_length\":100}", &err), 0);
    CHECK_INT(cfg.n_gen_eos_ids, 2);
    CHECK_INT(cfg.gen_eos_ids[1], 9);
    CHECK_INT(cfg.max_length, 100);
    config_free(&cfg);
    CHECK_INT(parse(&cfg, "tokenizer_config.json",
                    "{\"added_tokens_decoder\":{\"9\":{\"content\":\"<b>\"},\"3\":{\"content\":\"<a>\"}},"
                    "\"eos_token\":{\"content\":\"<b>\"},\"model_max_length\":1000000000000000019884624838656}",
                    &err),
              0);
    CHECK_INT(cfg.n_specials, 2);
    CHECK_INT(cfg.specials[0].id, 3);
    CHECK_INT(cfg.eos_id, 9);
    CHECK_INT(cfg.bos_id, -1);
    config_free(&cfg);

    expect_file_error("generation_config.json", "{\"eos_token_id\":\"x\"}", "eos_token_id");
    expect_file_error("generation_config.json", "{\"max_length\":-1}", "max_length");
    expect_file_error("tokenizer_config.json", "{\"added_tokens_decoder\":{\"x1\":{\"content\":\"a\"}}}", "'x1'");
    expect_file_error("tokenizer_config.json", "{\"added_tokens_decoder\":{\"-1\":{\"content\":\"a\"}}}", "'-1'");
    expect_file_error("tokenizer_config.json", "{\"added_tokens_decoder\":{\"5\":{\"content\":3}}}", "content");
    expect_file_error("tokenizer_config.json", "{\"added_tokens_decoder\":{\"5\":{}, \"05\":{}}}", "content");
    expect_file_error("tokenizer_config.json",
                      "{\"added_tokens_decoder\":{\"5\":{\"content\":\"a\"},\"05\":{\"content\":\"b\"}}}", "twice");
    expect_file_error("hf_quant_config.json", "{\"quantization\":{\"quant_algo\":\"NVFP4\",\"group_size\":32}}",
                      "group_size");
    expect_file_error("hf_quant_config.json", "{\"quantization\":{\"quant_algo\":5}}", "quant_algo");
    expect_file_error("hf_quant_config.json", "{}", "quantization");

    /* A special token id past the vocabulary cannot be embedded. */
    CHECK_INT(parse(&cfg, "config.json", "{\"model_type\":\"kimi_k25\",\"text_config\":{" K25_TEXT_CONFIG "}}", &err), 0);
    const char *tok = "{\"added_tokens_decoder\":{\"163840\":{\"content\":\"<x>\"}}}";
    CHECK_INT(config_parse_text(&cfg, "tokenizer_config.json", tok, strlen(tok), &err), 0);
    CHECK_INT(config_validate(&cfg, &err), KIMI_ERR_MODEL);
    CHECK(strstr(err.msg, "163840") != NULL);
    config_free(&cfg);
}

int main(void)
{
    test_tiny_directory();
    test_real_kimi_k25();
    test_config_errors();
    test_other_files();
    return check_finish();
}
