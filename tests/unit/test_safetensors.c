/* test_safetensors: header parsing and validation on hand-built file images, and the shard set
 * of the vendored tiny-k25 checkpoint checked against its index. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/safetensors.h"
#include "tests/unit/check.h"

#define TINY "tests/golden/fixtures/tiny-k25"

/* A file image: 8-byte little-endian header length, the header, then data_bytes of data
 * (byte i = i & 0xff). */
static uint8_t *make_image(const char *header, size_t data_bytes, size_t *size)
{
    size_t h = strlen(header);
    *size = 8 + h + data_bytes;
    uint8_t *img = malloc(*size);
    for (int i = 0; i < 8; i++)
        img[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(img + 8, header, h);
    for (size_t i = 0; i < data_bytes; i++)
        img[8 + h + i] = (uint8_t)i;
    return img;
}

/* Parse an image that must be rejected as a model error whose message contains `needle`. */
static void expect_reject(const char *what, const uint8_t *img, size_t size, const char *needle)
{
    safetensors_set *set = (safetensors_set *)1;
    kimi_err err = {0};
    int rc = safetensors_open_memory(&set, img, size, "img.safetensors", &err);
    CHECK_MSG(rc == KIMI_ERR_MODEL, "%s: rc %d (%s)", what, rc, err.msg);
    CHECK_MSG(set == NULL, "%s: set not cleared", what);
    CHECK_MSG(strstr(err.msg, "img.safetensors") != NULL, "%s: message lacks the file: %s", what, err.msg);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", what, needle, err.msg);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "%s: message is not one line", what);
}

static void expect_header_reject(const char *what, const char *header, size_t data_bytes, const char *needle)
{
    size_t size;
    uint8_t *img = make_image(header, data_bytes, &size);
    expect_reject(what, img, size, needle);
    free(img);
}

static void test_valid_image(void)
{
    const char *header =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
        "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[12,16]},"
        "\"e\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[16,16]},"
        "\"q\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[16,20]}}";
    size_t size;
    uint8_t *img = make_image(header, 20, &size);
    safetensors_set *set = NULL;
    kimi_err err = {0};
    CHECK_INT(safetensors_open_memory(&set, img, size, "ok.safetensors", &err), 0);
    if (!set) {
        free(img);
        return;
    }
    CHECK_INT(safetensors_count(set), 4);
    const st_tensor *a = safetensors_find(set, "a"), *s = safetensors_find(set, "s");
    const st_tensor *e = safetensors_find(set, "e"), *q = safetensors_find(set, "q");
    CHECK(a && s && e && q);
    CHECK(safetensors_find(set, "__metadata__") == NULL);
    CHECK(safetensors_find(set, "b") == NULL);
    const uint8_t *data = img + 8 + strlen(header);
    if (a && s && e && q) {
        CHECK_INT(a->type, DTYPE_BF16);
        CHECK_INT(a->ndim, 2);
        CHECK_INT(a->shape[0], 2);
        CHECK_INT(a->shape[1], 3);
        CHECK_INT(a->bytes, 12);
        CHECK(a->data == data);
        CHECK_INT(st_tensor_elements(a), 6);
        CHECK_INT(s->ndim, 0);
        CHECK_INT(st_tensor_elements(s), 1);
        CHECK(s->data == data + 12);
        CHECK_INT(e->bytes, 0);
        CHECK_INT(q->type, DTYPE_F8_E4M3);
        CHECK(q->data == data + 16);
        CHECK_STR(safetensors_file_path(set, a->file), "ok.safetensors");
    }
    safetensors_close(set);
    free(img);
}

static void test_rejected_images(void)
{
    uint8_t tiny[5] = {1, 2, 3, 4, 5};
    expect_reject("shorter than 8 bytes", tiny, sizeof tiny, "truncated");
    size_t size;
    uint8_t *img = make_image("{}", 0, &size);
    img[0] = 0xff;
    img[1] = 0xff;
    expect_reject("header length past EOF", img, size, "runs past the end");
    free(img);
    img = make_image("{}", 0, &size);
    memset(img, 0xff, 8);
    expect_reject("header length 2^64-1", img, size, "runs past the end");
    free(img);

    expect_header_reject("garbage JSON", "{\"a\":{\"dtype\":\"BF16\",, ]]", 0, "not valid JSON");
    expect_header_reject("binary garbage", "\x01\x02\x03\xfe\xff", 0, "not valid JSON");
    expect_header_reject("header not an object", "[1,2,3]", 0, "not a JSON object");
    expect_header_reject("entry not an object", "{\"a\":5}", 0, "tensor a");
    expect_header_reject("unknown dtype", "{\"w\":{\"dtype\":\"Q4_K\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
                         "unknown dtype 'Q4_K'");
    expect_header_reject("dtype not a string", "{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
                         "tensor w");
    expect_header_reject("shape bytes disagree with offsets",
                         "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,8]}}", 16, "needs 16 bytes");
    expect_header_reject("offsets past the data",
                         "{\"w\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[8,24]}}", 16, "outside the data area");
    expect_header_reject("begin after end", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", 16,
                         "outside the data area");
    expect_header_reject("negative offset", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 16,
                         "data_offsets");
    expect_header_reject("three offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 16,
                         "data_offsets");
    expect_header_reject("overlapping tensors",
                         "{\"x\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                         "\"y\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
                         16, "overlap");
    expect_header_reject("same range twice",
                         "{\"x\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                         "\"y\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                         16, "overlap");
    expect_header_reject("element count overflows 64 bits",
                         "{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}}", 0,
                         "overflows");
    expect_header_reject("byte size overflows 64 bits",
                         "{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0,
                         "overflows");
    expect_header_reject("negative dimension", "{\"w\":{\"dtype\":\"U8\",\"shape\":[-2],\"data_offsets\":[0,0]}}", 0,
                         "shape[0]");
    expect_header_reject("too many dimensions",
                         "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
                         "dimensions");
    expect_header_reject("duplicate tensor name",
                         "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                         "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                         2, "not valid JSON");
    expect_header_reject("metadata not an object", "{\"__metadata__\":[1]}", 0, "__metadata__");
}

/* The set opened from the index holds exactly the tensors the index lists, each in its shard. */
static void test_tiny_checkpoint(void)
{
    safetensors_set *set = NULL;
    kimi_err err = {0};
    CHECK_MSG(safetensors_open_dir(&set, TINY, &err) == 0, "%s", err.msg);
    if (!set)
        return;
    json_t *index = json_load_file(TINY "/model.safetensors.index.json", 0, NULL);
    json_t *map = json_object_get(index, "weight_map");
    CHECK(json_object_size(map) > 0);
    CHECK_INT(safetensors_count(set), json_object_size(map));
    const char *name;
    json_t *shard;
    size_t in_place = 0, total_bytes = 0;
    json_object_foreach(map, name, shard) {
        const st_tensor *t = safetensors_find(set, name);
        const char *path = t ? safetensors_file_path(set, t->file) : "";
        size_t plen = strlen(path), slen = strlen(json_string_value(shard));
        in_place += t && plen >= slen && !strcmp(path + plen - slen, json_string_value(shard));
        total_bytes += t ? t->bytes : 0;
    }
    CHECK_INT(in_place, json_object_size(map));
    /* The index's metadata.total_size is the writer's own sum of the tensor bytes. */
    CHECK_INT(total_bytes, json_integer_value(json_object_get(json_object_get(index, "metadata"), "total_size")));
    const st_tensor *embed = safetensors_find(set, "language_model.model.embed_tokens.weight");
    CHECK(embed && embed->type == DTYPE_BF16 && embed->ndim == 2 && embed->shape[0] == 2304 && embed->shape[1] == 256);
    json_decref(index);
    safetensors_close(set);

    CHECK_INT(safetensors_open_dir(&set, "tests/golden/reference/tiny-k25", &err), KIMI_ERR_MODEL);
    CHECK(strstr(err.msg, "model.safetensors") != NULL);
}

int main(void)
{
    test_valid_image();
    test_rejected_images();
    test_tiny_checkpoint();
    return check_finish();
}
