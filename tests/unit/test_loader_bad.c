/* test_loader_bad: copies of tiny-k25 in a temporary directory, each broken one way (truncated
 * shards, bad headers, wrong dtypes or shapes, missing tensors or shards, bad config fields)
 * must give one model-error line naming the file and tensor or field; reshaped copies (one
 * merged file, a plain "model." prefix, tied embeddings, an F32 router bias, a BF16 dense
 * layer) must load with the right numbers. */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/weights.h"
#include "tests/unit/check.h"

#define TINY "tests/golden/fixtures/tiny-k25"
#define SHARD1 "model-00001-of-00003.safetensors"
#define SHARD2 "model-00002-of-00003.safetensors"
#define SHARD3 "model-00003-of-00003.safetensors"
#define INDEX "model.safetensors.index.json"
#define L "language_model.model.layers."

typedef struct {
    uint8_t *bytes;
    size_t size;
} blob;

static char work[64];     /* the current copy */

static blob read_all(const char *path)
{
    blob b = {NULL, 0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return b;
    fseek(f, 0, SEEK_END);
    b.size = (size_t)ftell(f);
    rewind(f);
    b.bytes = malloc(b.size + 1);
    if (fread(b.bytes, 1, b.size, f) != b.size)
        b.size = 0;
    fclose(f);
    return b;
}

static void write_all(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, size, f) == size);
    if (f)
        fclose(f);
}

static const char *in_work(const char *name);

static void write_text(const char *name, const char *text)
{
    write_all(in_work(name), text, strlen(text));
}

static const char *in_work(const char *name)
{
    static char path[4][512];
    static int next;
    next = (next + 1) % 4;
    snprintf(path[next], sizeof path[next], "%s/%s", work, name);
    return path[next];
}

static void fresh_copy(void)
{
    snprintf(work, sizeof work, "/tmp/kimi-loader-XXXXXX");
    CHECK(mkdtemp(work) != NULL);
    DIR *d = opendir(TINY);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char src[512];
        snprintf(src, sizeof src, "%s/%s", TINY, e->d_name);
        blob b = read_all(src);
        write_all(in_work(e->d_name), b.bytes, b.size);
        free(b.bytes);
    }
    if (d)
        closedir(d);
}

static void remove_copy(void)
{
    DIR *d = opendir(work);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.')
            unlink(in_work(e->d_name));
    if (d)
        closedir(d);
    rmdir(work);
}

/* A shard split into its parsed header and its data area. */
typedef struct {
    json_t *header;
    blob file;
    size_t data_offset;     /* 8 + header length */
    size_t data_size;       /* grows as tensors are appended */
} shard;

static shard open_shard(const char *name)
{
    shard s = {0};
    s.file = read_all(in_work(name));
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | s.file.bytes[i];
    s.header = json_loadb((const char *)s.file.bytes + 8, (size_t)n, 0, NULL);
    s.data_offset = 8 + (size_t)n;
    s.data_size = s.file.size - s.data_offset;
    return s;
}

/* Writes the header (space-padded to a multiple of 8 bytes, as the safetensors writer does, so
 * the data stays aligned) and the old data, zero-padded to data_size. */
static void save_shard(shard *s, const char *name)
{
    char *text = json_dumps(s->header, JSON_COMPACT);
    size_t len = strlen(text), h = (len + 7) / 8 * 8, old = s->file.size - s->data_offset;
    size_t size = 8 + h + s->data_size;
    uint8_t *out = calloc(1, size);
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memset(out + 8, ' ', h);
    memcpy(out + 8, text, len);
    memcpy(out + 8 + h, s->file.bytes + s->data_offset, old < s->data_size ? old : s->data_size);
    write_all(in_work(name), out, size);
    free(out);
    free(text);
    json_decref(s->header);
    free(s->file.bytes);
}

/* A new tensor's bytes appended to the shard's data area (zeros). */
static void append_tensor(shard *s, const char *name, const char *dtype, json_t *shape, size_t bytes)
{
    json_object_set_new(s->header, name,
                        json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype, "shape", shape, "data_offsets",
                                  (json_int_t)s->data_size, (json_int_t)(s->data_size + bytes)));
    s->data_size += bytes;
}

static json_t *entry(shard *s, const char *name)
{
    json_t *e = json_object_get(s->header, name);
    CHECK_MSG(e != NULL, "no tensor %s in the shard", name);
    return e;
}

static void set_field(shard *s, const char *name, const char *field, json_t *value)
{
    json_object_set_new(entry(s, name), field, value);
}

static void edit_index(const char *tensor, const char *new_shard)
{
    json_t *index = json_load_file(in_work(INDEX), 0, NULL);
    json_t *map = json_object_get(index, "weight_map");
    if (new_shard)
        json_object_set_new(map, tensor, json_string(new_shard));
    else
        json_object_del(map, tensor);
    json_dump_file(index, in_work(INDEX), JSON_INDENT(1));
    json_decref(index);
}

/* config.json's text_config[key] = value (JSON text), or the key removed when value is NULL. */
static void edit_config(const char *key, const char *value)
{
    json_t *cfg = json_load_file(in_work("config.json"), 0, NULL);
    json_t *text = json_object_get(cfg, "text_config");
    if (value)
        json_object_set_new(text, key, json_loads(value, JSON_DECODE_ANY, NULL));
    else
        json_object_del(text, key);
    json_dump_file(cfg, in_work("config.json"), JSON_INDENT(1));
    json_decref(cfg);
}

static void expect_error(const char *what, int code, const char *needle1, const char *needle2)
{
    model_weights mw;
    kimi_err err = {0};
    int rc = weights_load(&mw, work, &err);
    CHECK_MSG(rc == code, "%s: rc %d, want %d (%s)", what, rc, code, err.msg);
    CHECK_MSG(strstr(err.msg, needle1) != NULL, "%s: message lacks '%s': %s", what, needle1, err.msg);
    CHECK_MSG(!needle2 || strstr(err.msg, needle2) != NULL, "%s: message lacks '%s': %s", what, needle2, err.msg);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "%s: message is not one line", what);
    if (rc == 0)
        weights_free(&mw);
    remove_copy();
}

static void test_broken_files(void)
{
    fresh_copy();
    CHECK(truncate(in_work(SHARD3), 1000000) == 0);
    expect_error("truncated shard", KIMI_ERR_MODEL, SHARD3, "outside the data area");

    fresh_copy();
    CHECK(truncate(in_work(SHARD2), 5) == 0);
    expect_error("shard cut inside the length", KIMI_ERR_MODEL, SHARD2, "truncated");

    fresh_copy();
    blob b = read_all(in_work(SHARD1));
    b.bytes[4] = 0x10;      /* header length ~ 2^36 */
    write_all(in_work(SHARD1), b.bytes, b.size);
    free(b.bytes);
    expect_error("header length past EOF", KIMI_ERR_MODEL, SHARD1, "runs past the end");

    fresh_copy();
    b = read_all(in_work(SHARD2));
    memset(b.bytes + 8, '@', 40);
    write_all(in_work(SHARD2), b.bytes, b.size);
    free(b.bytes);
    expect_error("garbage header JSON", KIMI_ERR_MODEL, SHARD2, "not valid JSON");

    fresh_copy();
    write_text(INDEX, "{\"weight_map\": {");
    expect_error("garbage index", KIMI_ERR_MODEL, INDEX, "not valid JSON");

    fresh_copy();
    write_text("config.json", "{\"text_config\": 5,,}");
    expect_error("garbage config.json", KIMI_ERR_MODEL, "config.json", "not valid JSON");

    fresh_copy();
    unlink(in_work(INDEX));
    expect_error("no index, no single file", KIMI_ERR_MODEL, "model.safetensors", NULL);
}

static void test_bad_headers(void)
{
    fresh_copy();
    shard s = open_shard(SHARD1);
    set_field(&s, L "0.input_layernorm.weight", "data_offsets", json_pack("[i, i]", 0, 512));
    save_shard(&s, SHARD1);
    expect_error("overlapping tensors", KIMI_ERR_MODEL, SHARD1, "overlap");

    fresh_copy();
    s = open_shard(SHARD3);
    set_field(&s, "language_model.lm_head.weight", "data_offsets",
              json_pack("[I, I]", (json_int_t)s.data_size, (json_int_t)s.data_size + 2304 * 256 * 2));
    save_shard(&s, SHARD3);
    expect_error("offsets past the end", KIMI_ERR_MODEL, "language_model.lm_head.weight", "outside the data area");

    fresh_copy();
    s = open_shard(SHARD1);
    set_field(&s, L "0.self_attn.q_a_proj.weight", "dtype", json_string("F32"));
    save_shard(&s, SHARD1);
    expect_error("dtype disagrees with the byte range", KIMI_ERR_MODEL, L "0.self_attn.q_a_proj.weight", "needs");

    fresh_copy();
    s = open_shard(SHARD1);
    set_field(&s, L "0.self_attn.kv_b_proj.weight", "dtype", json_string("F8_E5M2"));
    save_shard(&s, SHARD1);
    expect_error("unknown dtype", KIMI_ERR_MODEL, L "0.self_attn.kv_b_proj.weight", "unknown dtype 'F8_E5M2'");

    fresh_copy();
    s = open_shard(SHARD1);
    set_field(&s, L "0.self_attn.kv_b_proj.weight", "dtype", json_string("I8"));
    set_field(&s, L "0.self_attn.kv_b_proj.weight", "shape", json_pack("[i, i]", 512, 128));
    save_shard(&s, SHARD1);
    expect_error("integer linear", KIMI_ERR_MODEL, L "0.self_attn.kv_b_proj.weight", "dtype I8");

    fresh_copy();
    s = open_shard(SHARD1);
    set_field(&s, L "0.self_attn.q_a_proj.weight", "shape", json_pack("[i, i]", 256, 128));
    save_shard(&s, SHARD1);
    expect_error("transposed shape", KIMI_ERR_MODEL, L "0.self_attn.q_a_proj.weight", "[256, 128], config.json implies [128, 256]");

    fresh_copy();
    s = open_shard(SHARD1);
    set_field(&s, L "0.mlp.gate_proj.weight_scale", "dtype", json_string("U8"));
    save_shard(&s, SHARD1);
    expect_error("block scales not E4M3", KIMI_ERR_MODEL, L "0.mlp.gate_proj.weight_scale", "F8_E4M3");

    fresh_copy();
    s = open_shard(SHARD1);
    set_field(&s, L "0.input_layernorm.weight", "shape", json_pack("[i, i]", 2, 128));
    save_shard(&s, SHARD1);
    expect_error("norm of rank 2", KIMI_ERR_MODEL, L "0.input_layernorm.weight", "[256]");
}

static void test_missing_pieces(void)
{
    fresh_copy();
    shard s = open_shard(SHARD3);
    json_object_del(s.header, L "3.self_attn.o_proj.weight");
    save_shard(&s, SHARD3);
    expect_error("tensor missing from its shard", KIMI_ERR_MODEL, L "3.self_attn.o_proj.weight", "missing from the shard");

    fresh_copy();
    edit_index("language_model.model.norm.weight", "model-00004-of-00003.safetensors");
    expect_error("index names a missing shard", KIMI_ERR_MODEL, "model-00004-of-00003.safetensors", "cannot open");

    fresh_copy();
    edit_index("language_model.model.norm.weight", "../config.json");
    expect_error("index names a path outside the directory", KIMI_ERR_MODEL, INDEX, "language_model.model.norm.weight");

    fresh_copy();
    s = open_shard(SHARD2);
    append_tensor(&s, "language_model.model.embed_tokens.weight", "U8", json_pack("[i]", 0), 0);
    save_shard(&s, SHARD2);
    expect_error("tensor in two shards", KIMI_ERR_MODEL, "language_model.model.embed_tokens.weight", "two shards");

    fresh_copy();
    s = open_shard(SHARD1);
    json_object_del(s.header, L "0.mlp.gate_proj.weight_scale");
    save_shard(&s, SHARD1);
    edit_index(L "0.mlp.gate_proj.weight_scale", NULL);
    expect_error("NVFP4 weight without block scales", KIMI_ERR_MODEL, L "0.mlp.gate_proj.weight", "weight_scale is missing");

    fresh_copy();
    s = open_shard(SHARD2);
    json_object_del(s.header, L "1.mlp.shared_experts.up_proj.weight");
    save_shard(&s, SHARD2);
    edit_index(L "1.mlp.shared_experts.up_proj.weight", NULL);
    expect_error("linear missing everywhere", KIMI_ERR_MODEL, L "1.mlp.shared_experts.up_proj.weight", "missing from the checkpoint");
}

static void test_bad_config(void)
{
    fresh_copy();
    edit_config("hidden_size", NULL);
    expect_error("hidden_size missing", KIMI_ERR_MODEL, "config.json", "text_config.hidden_size is missing");

    fresh_copy();
    edit_config("num_attention_heads", "\"8\"");
    expect_error("heads a string", KIMI_ERR_MODEL, "config.json", "text_config.num_attention_heads must be an integer");

    fresh_copy();
    edit_config("num_attention_heads", "4");
    expect_error("heads disagree with the tensors", KIMI_ERR_MODEL, L "0.self_attn.q_b_proj.weight", "config.json implies [192, 128]");

    fresh_copy();
    edit_config("n_routed_experts", "17");
    expect_error("one expert too many", KIMI_ERR_MODEL, L "1.mlp.gate.weight", "[17, 256]");

    fresh_copy();
    edit_config("rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2}");
    expect_error("unsupported rope scaling", KIMI_ERR_MODEL, "config.json", "rope_scaling.type 'dynamic'");

    fresh_copy();
    write_text("hf_quant_config.json", "{\"quantization\": {\"quant_algo\": \"NVFP4\", \"group_size\": \"16\"}}");
    expect_error("group_size a string", KIMI_ERR_MODEL, "hf_quant_config.json", "quantization.group_size must be an integer");
}

static int load_ok(model_weights *mw, const char *what)
{
    kimi_err err = {0};
    int rc = weights_load(mw, work, &err);
    CHECK_MSG(rc == 0, "%s: %s", what, err.msg);
    if (rc)
        remove_copy();
    return rc == 0;
}

/* The three shards merged into one model.safetensors; rename maps each name (NULL keeps it). */
static void merge_into_single_file(const char *(*rename)(const char *name))
{
    shard out = {0};
    out.header = json_object();
    blob data = {calloc(1, 8 << 20), 0};
    const char *names[] = {SHARD1, SHARD2, SHARD3};
    for (int i = 0; i < 3; i++) {
        shard s = open_shard(names[i]);
        const char *name;
        json_t *e;
        json_object_foreach(s.header, name, e) {
            if (!strcmp(name, "__metadata__"))
                continue;
            json_int_t b = json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 0));
            json_int_t n = json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 1)) - b;
            memcpy(data.bytes + data.size, s.file.bytes + s.data_offset + b, (size_t)n);
            json_t *copy = json_deep_copy(e);
            json_object_set_new(copy, "data_offsets", json_pack("[I, I]", (json_int_t)data.size, (json_int_t)data.size + n));
            json_object_set_new(out.header, rename ? rename(name) : name, copy);
            data.size += (size_t)n;
        }
        json_decref(s.header);
        free(s.file.bytes);
        unlink(in_work(names[i]));
    }
    unlink(in_work(INDEX));
    out.file = data;
    out.data_offset = 0;
    out.data_size = data.size;
    save_shard(&out, "model.safetensors");
}

static const char *plain_name(const char *name)
{
    static char out[256];
    if (!strncmp(name, "language_model.model.", 21))
        snprintf(out, sizeof out, "model.%s", name + 21);
    else if (!strncmp(name, "language_model.", 15))
        snprintf(out, sizeof out, "%s", name + 15);
    else
        snprintf(out, sizeof out, "%s", name);
    return out;
}

static void test_other_layouts(void)
{
    model_weights ref, mw;
    fresh_copy();
    if (!load_ok(&ref, "fixture"))
        return;
    remove_copy();

    fresh_copy();
    merge_into_single_file(NULL);
    if (load_ok(&mw, "single model.safetensors")) {
        CHECK_INT(mw.weight_bytes, ref.weight_bytes);
        CHECK_INT(mw.n_nvfp4_linears, ref.n_nvfp4_linears);
        CHECK_INT(mw.n_dense_linears, ref.n_dense_linears);
        weights_free(&mw);
        remove_copy();
    }

    /* A plain DeepseekV3ForCausalLM checkpoint: "model." tensors, text settings at the top. */
    fresh_copy();
    merge_into_single_file(plain_name);
    json_t *cfg = json_load_file(in_work("config.json"), 0, NULL);
    json_dump_file(json_object_get(cfg, "text_config"), in_work("config.json"), 0);
    json_decref(cfg);
    if (load_ok(&mw, "plain model. checkpoint")) {
        CHECK_STR(mw.prefix, "model.");
        CHECK_STR(mw.lm_head.name, "lm_head");
        CHECK_STR(mw.layers[3].experts[15].down.name, "model.layers.3.mlp.experts.15.down_proj");
        CHECK_INT(mw.weight_bytes, ref.weight_bytes);
        CHECK_INT(mw.n_nvfp4_linears, 156);
        weights_free(&mw);
        remove_copy();
    }

    fresh_copy();
    edit_config("tie_word_embeddings", "true");
    if (load_ok(&mw, "tied embeddings")) {
        CHECK(mw.lm_head.w.data == mw.embed.w.data);
        CHECK_INT(mw.n_dense_linears, ref.n_dense_linears - 1);
        CHECK_INT(mw.weight_bytes, ref.weight_bytes - ref.lm_head.w.rows * (size_t)ref.lm_head.w.cols * 2);
        weights_free(&mw);
        remove_copy();
    }

    /* An F32 router bias (the dtype is read, never assumed). */
    fresh_copy();
    shard s = open_shard(SHARD2);
    append_tensor(&s, L "2.mlp.gate.e_score_correction_bias", "F32", json_pack("[i]", 16), 64);
    save_shard(&s, SHARD2);
    if (load_ok(&mw, "F32 router bias")) {
        CHECK_INT(mw.layers[2].router_bias.type, DTYPE_F32);
        CHECK_INT(mw.layers[2].router_bias.n, 16);
        CHECK_INT(mw.layers[1].router_bias.type, DTYPE_BF16);
        CHECK_INT(mw.weight_bytes, ref.weight_bytes + 16 * 2);
        weights_free(&mw);
        remove_copy();
    }

    /* K2.6's recipe for layer 0: a BF16 dense MLP beside NVFP4 experts (the scales go away). */
    fresh_copy();
    s = open_shard(SHARD1);
    const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
    for (int p = 0; p < 3; p++) {
        char name[160];
        int rows = p < 2 ? 512 : 256, cols = p < 2 ? 256 : 512;
        const char *drop[] = {"weight_scale", "weight_scale_2", "input_scale"};
        for (int d = 0; d < 3; d++) {
            snprintf(name, sizeof name, L "0.mlp.%s.%s", proj[p], drop[d]);
            json_object_del(s.header, name);
            edit_index(name, NULL);
        }
        snprintf(name, sizeof name, L "0.mlp.%s.weight", proj[p]);
        json_object_del(s.header, name);
        append_tensor(&s, name, "BF16", json_pack("[i, i]", rows, cols), (size_t)rows * cols * 2);
    }
    save_shard(&s, SHARD1);
    if (load_ok(&mw, "BF16 dense layer")) {
        CHECK_INT(mw.layers[0].dense.gate.w.format, WEIGHT_BF16);
        CHECK_INT(mw.layers[0].dense.down.w.cols, 512);
        CHECK_INT(mw.layers[1].experts[0].gate.w.format, WEIGHT_NVFP4);
        CHECK_INT(mw.n_nvfp4_linears, ref.n_nvfp4_linears - 3);
        CHECK_INT(mw.n_dense_linears, ref.n_dense_linears + 3);
        weights_free(&mw);
        remove_copy();
    }
    weights_free(&ref);
}

int main(void)
{
    test_broken_files();
    test_bad_headers();
    test_missing_pieces();
    test_bad_config();
    test_other_layouts();
    return check_finish();
}
