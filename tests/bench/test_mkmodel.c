/* Tests of kimi-mkmodel (argv[1]) writing into a scratch directory (argv[2]): with its defaults
 * it reproduces the tiny-k25 fixture's layout exactly (config files byte for byte; the same
 * tensors, dtypes, shapes and order), weights are deterministic, independent of sharding and
 * scaled like an initialised network, and other vocabulary sizes give a consistent tokenizer. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/numeric.h"
#include "tests/unit/check.h"

static const char fixture[] = "tests/golden/fixtures/tiny-k25";
static const char *generator, *scratch;

static char *read_all(const char *dir, const char *file, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)size + 1);
    if (data && fread(data, 1, (size_t)size, f) != (size_t)size) {
        free(data);
        data = NULL;
    }
    fclose(f);
    if (data) {
        data[size] = 0;
        if (len)
            *len = (size_t)size;
    }
    return data;
}

static int same_file(const char *dir_a, const char *dir_b, const char *file)
{
    size_t len_a = 0, len_b = 0;
    char *a = read_all(dir_a, file, &len_a), *b = read_all(dir_b, file, &len_b);
    int same = a && b && len_a == len_b && !memcmp(a, b, len_a);
    free(a);
    free(b);
    return same;
}

static int run_generator(const char *out, const char *flags)
{
    char command[8192];
    snprintf(command, sizeof command, "rm -rf '%s' && '%s' --out '%s' %s >/dev/null", out, generator, out, flags);
    return system(command);
}

/* Every tensor of a checkpoint directory: name, dtype, shape and data, in file order. */
typedef struct {
    char name[256];
    char dtype[16];
    char shape[64];
    const uint8_t *data;
    size_t bytes;
} tensor;

typedef struct {
    tensor *tensors;
    int count;
    char *files[64];
    int n_files;
} checkpoint;

static int load_shard(checkpoint *c, const char *dir, const char *file)
{
    size_t len;
    char *data = read_all(dir, file, &len);
    if (!data || len < 8 || c->n_files == 64)
        return -1;
    c->files[c->n_files++] = data;
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = header_len << 8 | (uint8_t)data[i];
    if (header_len > len - 8 || (8 + header_len) % 8)
        return -1;
    json_t *header = json_loadb(data + 8, header_len, JSON_PRESERVE_ORDER, NULL);
    if (!header)
        return -1;
    const char *key;
    json_t *value;
    size_t expected_offset = 0;
    json_object_foreach(header, key, value) {
        if (!strcmp(key, "__metadata__"))
            continue;
        c->tensors = realloc(c->tensors, (size_t)(c->count + 1) * sizeof *c->tensors);
        tensor *t = &c->tensors[c->count++];
        snprintf(t->name, sizeof t->name, "%s", key);
        snprintf(t->dtype, sizeof t->dtype, "%s", json_string_value(json_object_get(value, "dtype")));
        char *shape = json_dumps(json_object_get(value, "shape"), JSON_COMPACT);
        snprintf(t->shape, sizeof t->shape, "%s", shape);
        free(shape);
        json_t *offsets = json_object_get(value, "data_offsets");
        size_t begin = (size_t)json_integer_value(json_array_get(offsets, 0));
        size_t end = (size_t)json_integer_value(json_array_get(offsets, 1));
        if (begin != expected_offset || end < begin || end > len - 8 - header_len) {
            json_decref(header);
            return -1;
        }
        expected_offset = end;
        t->data = (const uint8_t *)data + 8 + header_len + begin;
        t->bytes = end - begin;
    }
    json_decref(header);
    return expected_offset == len - 8 - header_len ? 0 : -1;
}

/* Shards named by the index (in the order they are numbered), or model.safetensors. */
static int load_checkpoint(checkpoint *c, const char *dir)
{
    memset(c, 0, sizeof *c);
    char *index_text = read_all(dir, "model.safetensors.index.json", NULL);
    if (!index_text)
        return load_shard(c, dir, "model.safetensors");
    json_t *index = json_loads(index_text, 0, NULL);
    free(index_text);
    json_t *map = json_object_get(index, "weight_map");
    const char *files[64];
    int n = 0;
    const char *key;
    json_t *value;
    json_object_foreach(map, key, value) {
        const char *file = json_string_value(value);
        int known = 0;
        for (int i = 0; i < n; i++)
            known |= !strcmp(files[i], file);
        if (!known && n < 64)
            files[n++] = file;
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(files[j], files[i]) < 0) {
                const char *swap = files[i];
                files[i] = files[j];
                files[j] = swap;
            }
    int status = 0;
    for (int i = 0; i < n && !status; i++)
        status = load_shard(c, dir, files[i]);
    /* Every tensor in the index is where the index says, and the total size is right. */
    size_t total = 0;
    for (int i = 0; i < c->count; i++)
        total += c->tensors[i].bytes;
    if (!status && (size_t)json_object_size(map) != (size_t)c->count)
        status = -1;
    if (!status && (size_t)json_integer_value(json_object_get(json_object_get(index, "metadata"), "total_size")) != total)
        status = -1;
    json_decref(index);
    return status;
}

static void free_checkpoint(checkpoint *c)
{
    free(c->tensors);
    for (int i = 0; i < c->n_files; i++)
        free(c->files[i]);
}

static const tensor *find_tensor(const checkpoint *c, const char *name)
{
    for (int i = 0; i < c->count; i++)
        if (!strcmp(c->tensors[i].name, name))
            return &c->tensors[i];
    return NULL;
}

static void test_fixture_layout(const checkpoint *generated, const char *dir)
{
    static const char *const same_files[] = {"config.json", "hf_quant_config.json", "generation_config.json",
                                             "tokenizer_config.json", "tiktoken.model", "chat_template.jinja"};
    for (size_t i = 0; i < sizeof same_files / sizeof same_files[0]; i++)
        CHECK_MSG(same_file(dir, fixture, same_files[i]), "%s differs from the fixture's", same_files[i]);
    checkpoint reference;
    CHECK(load_checkpoint(&reference, fixture) == 0);
    CHECK_INT(generated->count, reference.count);
    int differences = 0;
    for (int i = 0; i < generated->count && i < reference.count; i++) {
        const tensor *a = &generated->tensors[i], *b = &reference.tensors[i];
        if ((strcmp(a->name, b->name) || strcmp(a->dtype, b->dtype) || strcmp(a->shape, b->shape) || a->bytes != b->bytes) &&
            differences++ < 5)
            fprintf(stderr, "tensor %d: %s %s %s, fixture %s %s %s\n", i, a->name, a->dtype, a->shape, b->name, b->dtype,
                    b->shape);
    }
    CHECK_INT(differences, 0);
    free_checkpoint(&reference);
}

static double rms_of_linear(const checkpoint *c, const char *prefix, int *cols_out)
{
    char name[256];
    snprintf(name, sizeof name, "%s.weight", prefix);
    const tensor *weight = find_tensor(c, name);
    snprintf(name, sizeof name, "%s.weight_scale", prefix);
    const tensor *scale = find_tensor(c, name);
    snprintf(name, sizeof name, "%s.weight_scale_2", prefix);
    const tensor *scale_2 = find_tensor(c, name);
    if (!weight || !scale || !scale_2 || strcmp(weight->dtype, "U8"))
        return -1;
    int rows, half_cols;
    if (sscanf(weight->shape, "[%d,%d]", &rows, &half_cols) != 2)
        return -1;
    weight_matrix w = {.format = WEIGHT_NVFP4, .rows = rows, .cols = 2 * half_cols, .data = weight->data,
                       .data_stride = (size_t)half_cols, .scale = scale->data, .scale_stride = (size_t)half_cols / 8};
    memcpy(&w.scale_2, scale_2->data, 4);
    float *row = malloc(sizeof(float) * (size_t)w.cols);
    double sum = 0;
    for (int r = 0; r < rows; r++) {
        weight_matrix_decode_row(&w, r, row);
        for (int k = 0; k < w.cols; k++)
            sum += (double)row[k] * row[k];
    }
    free(row);
    *cols_out = w.cols;
    return sqrt(sum / ((double)rows * w.cols));
}

static double rms_of_bf16(const checkpoint *c, const char *name, double offset)
{
    const tensor *t = find_tensor(c, name);
    if (!t || strcmp(t->dtype, "BF16"))
        return -1;
    weight_vector v = {.type = DTYPE_BF16, .n = (int)(t->bytes / 2), .data = t->data};
    float *values = malloc(sizeof(float) * (size_t)v.n);
    weight_vector_decode(&v, values);
    double sum = 0;
    for (int i = 0; i < v.n; i++)
        sum += (values[i] - offset) * (values[i] - offset);
    free(values);
    return sqrt(sum / v.n);
}

/* Scaled like an initialised network: linears std 1/sqrt(K) (within the NVFP4 error and the
 * sampling error), embeddings std 1, norm weights 1 +- 0.1, router bias small. */
static void test_scales(const checkpoint *c)
{
    static const char *const linears[] = {"language_model.model.layers.0.mlp.gate_proj",
                                          "language_model.model.layers.0.mlp.down_proj",
                                          "language_model.model.layers.2.mlp.experts.7.up_proj",
                                          "language_model.model.layers.3.mlp.shared_experts.down_proj"};
    for (size_t i = 0; i < sizeof linears / sizeof linears[0]; i++) {
        int cols = 0;
        double rms = rms_of_linear(c, linears[i], &cols);
        CHECK_MSG(rms > 0 && fabs(rms * sqrt(cols) - 1) < 0.1, "%s: rms %g, K %d", linears[i], rms, cols);
    }
    double embed = rms_of_bf16(c, "language_model.model.embed_tokens.weight", 0);
    CHECK_MSG(fabs(embed - 1) < 0.05, "embed rms %g", embed);
    double q_b = rms_of_bf16(c, "language_model.model.layers.1.self_attn.q_b_proj.weight", 0);
    CHECK_MSG(fabs(q_b * sqrt(128) - 1) < 0.05, "q_b_proj rms %g", q_b);
    double norm = rms_of_bf16(c, "language_model.model.layers.2.input_layernorm.weight", 1);
    CHECK_MSG(norm > 0.05 && norm < 0.15, "input_layernorm spread %g", norm);
    double bias = rms_of_bf16(c, "language_model.model.layers.1.mlp.gate.e_score_correction_bias", 0);
    CHECK_MSG(bias > 0.01 && bias < 0.3, "router bias rms %g", bias);
    const tensor *k_scale = find_tensor(c, "language_model.model.layers.1.self_attn.k_proj.k_scale");
    float value = 0;
    if (k_scale)
        memcpy(&value, k_scale->data, 4);
    CHECK_MSG(k_scale && !strcmp(k_scale->dtype, "F32") && value > 0 && value < 1, "k_scale %g", value);
}

/* The same seed gives the same tensors whatever the sharding; another seed other weights. */
static void test_determinism(const checkpoint *sharded)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/single", scratch);
    CHECK(run_generator(dir, "--single-file") == 0);
    checkpoint single;
    CHECK(load_checkpoint(&single, dir) == 0);
    CHECK_INT(single.n_files, 1);
    CHECK_INT(single.count, sharded->count);
    int differing = 0;
    for (int i = 0; i < single.count && i < sharded->count; i++)
        differing += single.tensors[i].bytes != sharded->tensors[i].bytes ||
                     memcmp(single.tensors[i].data, sharded->tensors[i].data, single.tensors[i].bytes);
    CHECK_INT(differing, 0);
    free_checkpoint(&single);

    snprintf(dir, sizeof dir, "%s/seed", scratch);
    CHECK(run_generator(dir, "--seed 99 --shards 5") == 0);
    checkpoint seeded;
    CHECK(load_checkpoint(&seeded, dir) == 0);
    CHECK_INT(seeded.n_files, 5);
    const char *name = "language_model.model.layers.1.mlp.experts.3.gate_proj.weight";
    const tensor *a = find_tensor(&seeded, name), *b = find_tensor(sharded, name);
    CHECK(a && b && a->bytes == b->bytes && memcmp(a->data, b->data, a->bytes) != 0);
    free_checkpoint(&seeded);
}

/* --vocab V: V ranks (a prefix of the fixture's, or extended with unique merges), the 256
 * specials renumbered from V, and the config's special ids and vocab_size following them. */
static void test_vocabulary(int vocab)
{
    char dir[4096], flags[64];
    snprintf(dir, sizeof dir, "%s/vocab%d", scratch, vocab);
    snprintf(flags, sizeof flags, "--vocab %d", vocab);
    CHECK(run_generator(dir, flags) == 0);
    size_t len;
    char *tiktoken = read_all(dir, "tiktoken.model", &len);
    char *base = read_all(fixture, "tiktoken.model", NULL);
    int lines = 0, ranks_ok = 1, duplicates = 0;
    char **tokens = calloc((size_t)vocab + 1, sizeof *tokens);
    for (char *line = tiktoken; line && *line && lines <= vocab; lines++) {
        char *newline = strchr(line, '\n'), *space = strchr(line, ' ');
        if (!newline || !space || space > newline || atoi(space + 1) != lines)
            ranks_ok = 0;
        if (!newline || !space)
            break;
        tokens[lines] = strndup(line, (size_t)(space - line));
        line = newline + 1;
    }
    CHECK_INT(lines, vocab);
    CHECK(ranks_ok);
    for (int i = 0; i < lines; i++)
        for (int j = i + 1; j < lines; j++)
            duplicates += !strcmp(tokens[i], tokens[j]);
    CHECK_INT(duplicates, 0);
    size_t shared = vocab < 2048 ? len : strlen(base);
    CHECK(tiktoken && base && !strncmp(tiktoken, base, shared));
    for (int i = 0; i < lines; i++)
        free(tokens[i]);
    free(tokens);
    free(tiktoken);
    free(base);

    char *config_text = read_all(dir, "tokenizer_config.json", NULL);
    json_t *config = json_loads(config_text, JSON_DECODE_INT_AS_REAL, NULL);
    json_t *added = json_object_get(config, "added_tokens_decoder");
    char key[32];
    snprintf(key, sizeof key, "%d", vocab);
    CHECK_STR(json_string_value(json_object_get(json_object_get(added, key), "content")), "[BOS]");
    snprintf(key, sizeof key, "%d", vocab + 255);
    CHECK_STR(json_string_value(json_object_get(json_object_get(added, key), "content")), "[PAD]");
    snprintf(key, sizeof key, "%d", vocab + 5);
    char reserved[64];
    snprintf(reserved, sizeof reserved, "<|reserved_token_%d|>", vocab + 5);
    CHECK_STR(json_string_value(json_object_get(json_object_get(added, key), "content")), reserved);
    CHECK_INT(json_object_size(added), 256);
    json_decref(config);
    free(config_text);

    char *model_config = read_all(dir, "config.json", NULL);
    json_t *model = json_loads(model_config, 0, NULL);
    json_t *text = json_object_get(model, "text_config");
    CHECK_INT(json_integer_value(json_object_get(text, "vocab_size")), vocab + 256);
    CHECK_INT(json_integer_value(json_object_get(model, "bos_token_id")), vocab);
    CHECK_INT(json_integer_value(json_object_get(model, "eos_token_id")), vocab + 1);
    CHECK_INT(json_integer_value(json_object_get(model, "media_placeholder_token_id")), vocab + 21);
    json_decref(model);
    free(model_config);

    checkpoint c;
    CHECK(load_checkpoint(&c, dir) == 0);
    const tensor *embed = find_tensor(&c, "language_model.model.embed_tokens.weight");
    char shape[64];
    snprintf(shape, sizeof shape, "[%d,256]", vocab + 256);
    CHECK(embed && !strcmp(embed->shape, shape));
    free_checkpoint(&c);
}

static void test_recipe_k26(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/k26", scratch);
    CHECK(run_generator(dir, "--recipe k26 --router-bias-dtype f32 --mscale 1.25 --mscale-all-dim 0.5") == 0);
    checkpoint c;
    CHECK(load_checkpoint(&c, dir) == 0);
    const tensor *dense = find_tensor(&c, "language_model.model.layers.0.mlp.up_proj.weight");
    const tensor *shared = find_tensor(&c, "language_model.model.layers.2.mlp.shared_experts.down_proj.weight");
    const tensor *expert = find_tensor(&c, "language_model.model.layers.2.mlp.experts.0.down_proj.weight");
    const tensor *bias = find_tensor(&c, "language_model.model.layers.3.mlp.gate.e_score_correction_bias");
    CHECK(dense && !strcmp(dense->dtype, "BF16") && !strcmp(dense->shape, "[512,256]"));
    CHECK(shared && !strcmp(shared->dtype, "BF16") && !strcmp(shared->shape, "[256,128]"));
    CHECK(!find_tensor(&c, "language_model.model.layers.0.mlp.up_proj.weight_scale"));
    CHECK(expert && !strcmp(expert->dtype, "U8"));
    CHECK(bias && !strcmp(bias->dtype, "F32") && bias->bytes == 64);
    free_checkpoint(&c);
    char *config_text = read_all(dir, "config.json", NULL);
    json_t *config = json_loads(config_text, 0, NULL);
    json_t *rope = json_object_get(json_object_get(config, "text_config"), "rope_scaling");
    CHECK(json_real_value(json_object_get(rope, "mscale")) == 1.25);
    CHECK(json_real_value(json_object_get(rope, "mscale_all_dim")) == 0.5);
    json_t *ignore = json_object_get(json_object_get(config, "quantization_config"), "ignore");
    int found = 0;
    for (size_t i = 0; i < json_array_size(ignore); i++)
        found += !strcmp(json_string_value(json_array_get(ignore, i)), "language_model.model.layers.0.mlp*");
    CHECK_INT(found, 1);
    json_decref(config);
    free(config_text);
}

static void test_bad_flags(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/bad", scratch);
    CHECK(run_generator(dir, "--hidden 100 2>/dev/null") != 0);
    CHECK(run_generator(dir, "--top-k 40 2>/dev/null") != 0);
    CHECK(run_generator(dir, "--recipe k27 2>/dev/null") != 0);
    CHECK(run_generator(dir, "--layers 2 --dense-layers 3 2>/dev/null") != 0);
    CHECK(run_generator(dir, "--frobnicate 2>/dev/null") != 0);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_mkmodel KIMI_MKMODEL SCRATCH_DIR\n");
        return 2;
    }
    generator = argv[1];
    scratch = argv[2];
    char command[4096], dir[4096];
    snprintf(command, sizeof command, "mkdir -p '%s'", scratch);
    CHECK(system(command) == 0);
    snprintf(dir, sizeof dir, "%s/default", scratch);
    CHECK(run_generator(dir, "") == 0);
    checkpoint generated;
    CHECK(load_checkpoint(&generated, dir) == 0);
    CHECK_INT(generated.n_files, 3);
    test_fixture_layout(&generated, dir);
    test_scales(&generated);
    test_determinism(&generated);
    free_checkpoint(&generated);
    test_vocabulary(1000);
    test_vocabulary(3000);
    test_recipe_k26();
    test_bad_flags();
    return check_finish();
}
