/* safetensors: mmap and validate checkpoint shards; every size is overflow-checked and every
 * offset bounds-checked before a view into the mapping is handed out. */
#include "engine/model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/cpu/numeric.h"

/* The safetensors format caps the JSON header at 100 MB; the real 119-shard checkpoint's
 * largest header is far below that. */
#define HEADER_MAX_BYTES (100u * 1000u * 1000u)

typedef struct {
    char *path;                 /* as opened, for messages */
    const uint8_t *image;       /* the whole file */
    size_t size;                /* bytes */
    int owns_mapping;           /* munmap on close (0 for a caller's memory image) */
} st_file;

struct safetensors_set {
    st_file *files;             /* [n_files] */
    int n_files;
    st_tensor *tensors;         /* [n_tensors]; names owned */
    size_t n_tensors, cap_tensors;
    size_t *slots;              /* [n_slots] open-addressing table of tensor index + 1 (0 empty) */
    size_t n_slots;             /* power of two */
};

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int add_file(safetensors_set *set, const char *path, const uint8_t *image, size_t size,
                    int owns_mapping, kimi_err *err)
{
    st_file *files = realloc(set->files, (size_t)(set->n_files + 1) * sizeof *files);
    if (!files)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", path);
    set->files = files;
    char *copy = strdup(path);
    if (!copy)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", path);
    files[set->n_files++] = (st_file){copy, image, size, owns_mapping};
    return 0;
}

static int add_tensor(safetensors_set *set, const st_tensor *t, const char *path, kimi_err *err)
{
    if (set->n_tensors == set->cap_tensors) {
        size_t cap = set->cap_tensors ? set->cap_tensors * 2 : 256;
        st_tensor *grown = cap > SIZE_MAX / sizeof *grown ? NULL : realloc(set->tensors, cap * sizeof *grown);
        if (!grown)
            return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory for the tensor table", path);
        set->tensors = grown;
        set->cap_tensors = cap;
    }
    set->tensors[set->n_tensors] = *t;
    set->tensors[set->n_tensors].name = strdup(t->name);
    if (!set->tensors[set->n_tensors].name)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", path);
    set->n_tensors++;
    return 0;
}

static int parse_shape(json_t *shape, st_tensor *t, const char *path, kimi_err *err)
{
    if (!json_is_array(shape))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: tensor %s: \"shape\" is not an array", path, t->name);
    size_t ndim = json_array_size(shape);
    if (ndim > SAFETENSORS_MAX_DIMS)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: tensor %s: %zu dimensions (at most %d supported)",
                         path, t->name, ndim, SAFETENSORS_MAX_DIMS);
    uint64_t elements = 1;
    for (size_t d = 0; d < ndim; d++) {
        json_t *dim = json_array_get(shape, d);
        if (!json_is_integer(dim) || json_integer_value(dim) < 0)
            return kimi_fail(err, KIMI_ERR_MODEL, "%s: tensor %s: shape[%zu] is not a non-negative integer",
                             path, t->name, d);
        t->shape[d] = json_integer_value(dim);
        if (__builtin_mul_overflow(elements, (uint64_t)t->shape[d], &elements))
            return kimi_fail(err, KIMI_ERR_MODEL, "%s: tensor %s: element count overflows", path, t->name);
    }
    t->ndim = (int)ndim;
    uint64_t bytes;
    if (__builtin_mul_overflow(elements, (uint64_t)dtype_size(t->type), &bytes) || bytes > SIZE_MAX)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: tensor %s: byte size overflows", path, t->name);
    t->bytes = (size_t)bytes;
    return 0;
}

/* One header entry: dtype, shape and data_offsets checked against the data area. */
static int parse_entry(const char *name, json_t *entry, const uint8_t *data, size_t data_size,
                       int file, const char *path, st_tensor *t, uint64_t *begin, kimi_err *err)
{
    memset(t, 0, sizeof *t);
    t->name = name;
    t->file = file;
    if (!json_is_object(entry))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: tensor %s: header entry is not an object", path, name);
    json_t *type = json_object_get(entry, "dtype");
    if (!json_is_string(type))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: tensor %s: \"dtype\" missing or not a string", path, name);
    if (dtype_from_name(json_string_value(type), &t->type))
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: tensor %s: unknown dtype '%s'", path, name,
                         json_string_value(type));
    int rc = parse_shape(json_object_get(entry, "shape"), t, path, err);
    if (rc)
        return rc;
    json_t *offsets = json_object_get(entry, "data_offsets");
    json_t *b = json_array_get(offsets, 0), *e = json_array_get(offsets, 1);
    if (!json_is_array(offsets) || json_array_size(offsets) != 2 || !json_is_integer(b) ||
        !json_is_integer(e) || json_integer_value(b) < 0 || json_integer_value(e) < 0)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: tensor %s: \"data_offsets\" is not two non-negative integers",
                         path, name);
    uint64_t first = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
    if (first > end || end > data_size)
        return kimi_fail(err, KIMI_ERR_MODEL,
                         "%s: tensor %s: data_offsets [%llu, %llu] outside the data area (%zu bytes)",
                         path, name, (unsigned long long)first, (unsigned long long)end, data_size);
    if (end - first != t->bytes)
        return kimi_fail(err, KIMI_ERR_MODEL,
                         "%s: tensor %s: %s shape needs %zu bytes but data_offsets span %llu",
                         path, name, dtype_name(t->type), t->bytes, (unsigned long long)(end - first));
    t->data = data + first;
    *begin = first;
    return 0;
}

typedef struct {
    uint64_t begin, end;
    size_t tensor;          /* index into the set */
} byte_range;

static int compare_ranges(const void *a, const void *b)
{
    const byte_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* Tensors of one file must not share bytes (zero-size tensors share nothing). */
static int check_overlaps(const safetensors_set *set, size_t first, byte_range *ranges, size_t n,
                          const char *path, kimi_err *err)
{
    qsort(ranges, n, sizeof *ranges, compare_ranges);
    const byte_range *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        if (ranges[i].begin == ranges[i].end)
            continue;
        if (prev && ranges[i].begin < prev->end)
            return kimi_fail(err, KIMI_ERR_MODEL, "%s: tensors %s and %s overlap (bytes %llu..%llu and %llu..%llu)",
                             path, set->tensors[first + prev->tensor].name,
                             set->tensors[first + ranges[i].tensor].name,
                             (unsigned long long)prev->begin, (unsigned long long)prev->end,
                             (unsigned long long)ranges[i].begin, (unsigned long long)ranges[i].end);
        prev = &ranges[i];
    }
    return 0;
}

static int parse_file(safetensors_set *set, int file, kimi_err *err)
{
    const st_file *f = &set->files[file];
    if (f->size < 8)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: truncated: %zu bytes, shorter than the 8-byte header length",
                         f->path, f->size);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = header_len << 8 | f->image[i];
    if (header_len > f->size - 8)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: header length %llu runs past the end of the file (%zu bytes)",
                         f->path, (unsigned long long)header_len, f->size);
    if (header_len > HEADER_MAX_BYTES)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: header length %llu exceeds the format's limit of %u bytes",
                         f->path, (unsigned long long)header_len, HEADER_MAX_BYTES);
    json_error_t jerr;
    json_t *header = json_loadb((const char *)f->image + 8, (size_t)header_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!header)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: header is not valid JSON: %s (header byte %d)", f->path,
                         jerr.text, jerr.position);
    if (!json_is_object(header)) {
        json_decref(header);
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: header is not a JSON object", f->path);
    }
    const uint8_t *data = f->image + 8 + header_len;
    size_t data_size = f->size - 8 - (size_t)header_len;
    size_t first = set->n_tensors;
    byte_range *ranges = calloc(json_object_size(header) + 1, sizeof *ranges);
    int rc = ranges ? 0 : kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", f->path);
    size_t n = 0;
    const char *name;
    json_t *entry;
    json_object_foreach(header, name, entry) {
        if (rc)
            break;
        if (!strcmp(name, "__metadata__")) {
            if (!json_is_object(entry))
                rc = kimi_fail(err, KIMI_ERR_MODEL, "%s: __metadata__ is not an object", f->path);
            continue;
        }
        st_tensor t;
        uint64_t begin = 0;
        rc = parse_entry(name, entry, data, data_size, file, f->path, &t, &begin, err);
        if (!rc)
            rc = add_tensor(set, &t, f->path, err);
        if (!rc) {
            ranges[n] = (byte_range){begin, begin + t.bytes, n};
            n++;
        }
    }
    if (!rc)
        rc = check_overlaps(set, first, ranges, n, f->path, err);
    free(ranges);
    json_decref(header);
    return rc;
}

static int build_index(safetensors_set *set, kimi_err *err)
{
    size_t slots = 16;
    while (slots < set->n_tensors * 2)
        slots *= 2;
    free(set->slots);
    set->slots = calloc(slots, sizeof *set->slots);
    if (!set->slots)
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the tensor index (%zu tensors)", set->n_tensors);
    set->n_slots = slots;
    for (size_t i = 0; i < set->n_tensors; i++) {
        const st_tensor *t = &set->tensors[i];
        size_t s = (size_t)name_hash(t->name) & (slots - 1);
        for (; set->slots[s]; s = (s + 1) & (slots - 1)) {
            const st_tensor *other = &set->tensors[set->slots[s] - 1];
            if (!strcmp(other->name, t->name))
                return kimi_fail(err, KIMI_ERR_MODEL, "tensor %s is in two shards: %s and %s", t->name,
                                 set->files[other->file].path, set->files[t->file].path);
        }
        set->slots[s] = i + 1;
    }
    return 0;
}

const st_tensor *safetensors_find(const safetensors_set *set, const char *name)
{
    if (!set->n_slots)
        return NULL;
    for (size_t s = (size_t)name_hash(name) & (set->n_slots - 1); set->slots[s]; s = (s + 1) & (set->n_slots - 1))
        if (!strcmp(set->tensors[set->slots[s] - 1].name, name))
            return &set->tensors[set->slots[s] - 1];
    return NULL;
}

static int map_file(safetensors_set *set, const char *path, kimi_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kimi_fail(err, errno == ENOENT ? KIMI_ERR_MODEL : KIMI_ERR_IO, "%s: cannot open: %s", path,
                         strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kimi_fail(err, KIMI_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    const uint8_t *image = NULL;
    if (size > 0) {
        void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return kimi_fail(err, KIMI_ERR_IO, "%s: cannot mmap: %s", path, strerror(e));
        }
        image = m;
    }
    close(fd);
    int rc = add_file(set, path, image, size, size > 0, err);
    if (rc) {
        if (image)
            munmap((void *)image, size);
        return rc;
    }
    return 0;
}

static int open_shard(safetensors_set *set, const char *path, kimi_err *err)
{
    int rc = map_file(set, path, err);
    if (rc)
        return rc;
    return parse_file(set, set->n_files - 1, err);
}

static int file_index(const safetensors_set *set, const char *path)
{
    for (int i = 0; i < set->n_files; i++)
        if (!strcmp(set->files[i].path, path))
            return i;
    return -1;
}

/* A shard name from the index must stay inside the model directory. */
static int shard_name_ok(const char *shard)
{
    return *shard && !strchr(shard, '/') && strcmp(shard, ".") && strcmp(shard, "..");
}

static int open_from_index(safetensors_set *set, const char *model_dir, const char *index_path, kimi_err *err)
{
    json_error_t jerr;
    json_t *index = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!index)
        return kimi_fail(err, KIMI_ERR_MODEL, "%s: not valid JSON: %s (line %d)", index_path, jerr.text, jerr.line);
    json_t *map = json_object_get(index, "weight_map");
    int rc = json_is_object(map) ? 0 : kimi_fail(err, KIMI_ERR_MODEL, "%s: \"weight_map\" missing or not an object", index_path);
    const char *name;
    json_t *shard;
    char path[4096];
    json_object_foreach(map, name, shard) {
        if (rc)
            break;
        if (!json_is_string(shard) || !shard_name_ok(json_string_value(shard))) {
            rc = kimi_fail(err, KIMI_ERR_MODEL, "%s: weight_map[\"%s\"] is not a shard file name", index_path, name);
            break;
        }
        if ((size_t)snprintf(path, sizeof path, "%s/%s", model_dir, json_string_value(shard)) >= sizeof path) {
            rc = kimi_fail(err, KIMI_ERR_MODEL, "%s: shard path too long", index_path);
            break;
        }
        if (file_index(set, path) < 0)
            rc = open_shard(set, path, err);
    }
    if (!rc && set->n_files == 0)
        rc = kimi_fail(err, KIMI_ERR_MODEL, "%s: weight_map names no tensors", index_path);
    if (!rc)
        rc = build_index(set, err);
    json_object_foreach(map, name, shard) {
        if (rc)
            break;
        snprintf(path, sizeof path, "%s/%s", model_dir, json_string_value(shard));
        const st_tensor *t = safetensors_find(set, name);
        if (!t)
            rc = kimi_fail(err, KIMI_ERR_MODEL, "%s: tensor %s is listed in the index but missing from the shard", path, name);
        else if (strcmp(set->files[t->file].path, path))
            rc = kimi_fail(err, KIMI_ERR_MODEL, "%s: tensor %s is listed for this shard but lives in %s", path, name,
                           set->files[t->file].path);
    }
    json_decref(index);
    return rc;
}

int safetensors_open_dir(safetensors_set **out, const char *model_dir, kimi_err *err)
{
    *out = NULL;
    safetensors_set *set = calloc(1, sizeof *set);
    if (!set)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", model_dir);
    char path[4096];
    int rc;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", model_dir);
    if (access(path, F_OK) == 0) {
        rc = open_from_index(set, model_dir, path, err);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", model_dir);
        if (access(path, F_OK) != 0)
            rc = kimi_fail(err, KIMI_ERR_MODEL, "%s: neither model.safetensors.index.json nor model.safetensors found",
                           model_dir);
        else if (!(rc = open_shard(set, path, err)))
            rc = build_index(set, err);
    }
    if (rc) {
        safetensors_close(set);
        return rc;
    }
    *out = set;
    return 0;
}

int safetensors_open_memory(safetensors_set **out, const uint8_t *image, size_t size, const char *label,
                            kimi_err *err)
{
    *out = NULL;
    safetensors_set *set = calloc(1, sizeof *set);
    if (!set)
        return kimi_fail(err, KIMI_ERR_NOMEM, "%s: out of memory", label);
    int rc = add_file(set, label, image, size, 0, err);
    if (!rc)
        rc = parse_file(set, 0, err);
    if (!rc)
        rc = build_index(set, err);
    if (rc) {
        safetensors_close(set);
        return rc;
    }
    *out = set;
    return 0;
}

void safetensors_close(safetensors_set *set)
{
    if (!set)
        return;
    for (size_t i = 0; i < set->n_tensors; i++)
        free((char *)set->tensors[i].name);
    for (int i = 0; i < set->n_files; i++) {
        if (set->files[i].owns_mapping)
            munmap((void *)set->files[i].image, set->files[i].size);
        free(set->files[i].path);
    }
    free(set->tensors);
    free(set->files);
    free(set->slots);
    free(set);
}

size_t safetensors_count(const safetensors_set *set)
{
    return set->n_tensors;
}

const st_tensor *safetensors_at(const safetensors_set *set, size_t i)
{
    return i < set->n_tensors ? &set->tensors[i] : NULL;
}

int safetensors_file_mapped(const safetensors_set *set, int file)
{
    return set->files[file].owns_mapping;
}

const char *safetensors_file_path(const safetensors_set *set, int file)
{
    return file >= 0 && file < set->n_files ? set->files[file].path : "?";
}

int64_t st_tensor_elements(const st_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}
