/* safetensors: a checkpoint's tensors, every shard mmap'ed and its header checked (dtypes,
 * shapes against byte ranges, ranges inside the file and disjoint), found by name. */
#ifndef KIMI_SAFETENSORS_H
#define KIMI_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/error.h"
#include "kernels/tensor.h"

#define SAFETENSORS_MAX_DIMS 8

typedef struct {
    const char *name;               /* full checkpoint name, e.g. "language_model.lm_head.weight" */
    dtype type;
    int ndim;                       /* 0 for a scalar */
    int64_t shape[SAFETENSORS_MAX_DIMS];
    const uint8_t *data;            /* inside the shard's mmap */
    size_t bytes;                   /* = product(shape) * dtype_size(type) */
    int file;                       /* index of the shard it lives in */
} st_tensor;

typedef struct safetensors_set safetensors_set;

/* Open a checkpoint directory: model.safetensors.index.json and every shard it names (each
 * listed tensor must be in its shard, no tensor in two shards), or a single model.safetensors. */
int safetensors_open_dir(safetensors_set **out, const char *model_dir, kimi_err *err);

/* Parse one safetensors file image held by the caller (it must outlive the set); label names
 * it in messages. For tests and fuzzing: the same checks as a shard on disk. */
int safetensors_open_memory(safetensors_set **out, const uint8_t *image, size_t size,
                            const char *label, kimi_err *err);

void safetensors_close(safetensors_set *set);

/* A tensor by full name, or NULL. */
const st_tensor *safetensors_find(const safetensors_set *set, const char *name);

/* All tensors, in no particular order: i in [0, safetensors_count). */
size_t safetensors_count(const safetensors_set *set);
const st_tensor *safetensors_at(const safetensors_set *set, size_t i);

/* 1 when shard `file` is this set's own mmap of the file (its pages may be remapped, as
 * weights_page_in does); 0 for a caller's memory image. */
int safetensors_file_mapped(const safetensors_set *set, int file);

/* Path of shard `file` as opened (for messages). */
const char *safetensors_file_path(const safetensors_set *set, int file);

/* Number of elements of a tensor (product of its shape; 1 for a scalar). */
int64_t st_tensor_elements(const st_tensor *t);

#endif
