/* tensor: the views of checkpoint data that kernels compute on, shared by the CPU and CUDA
 * kernels and by the engine that builds them (plain C, no engine types). */
#ifndef KIMI_KERNELS_TENSOR_H
#define KIMI_KERNELS_TENSOR_H

#include <stddef.h>
#include <stdint.h>

/* Element types as stored in safetensors files. */
typedef enum {
    DTYPE_BF16,
    DTYPE_F16,
    DTYPE_F32,
    DTYPE_F8_E4M3,
    DTYPE_U8,       /* NVFP4 packed E2M1 pairs when it is a linear's .weight */
    DTYPE_I8,
    DTYPE_I32,
    DTYPE_I64,
    DTYPE_BOOL,
    DTYPE_F64,
    DTYPE_COUNT
} dtype;

/* How a linear's weight is stored. */
typedef enum {
    WEIGHT_NVFP4,   /* U8 [rows][cols/2] E2M1 nibbles (element 2j low nibble) + E4M3 [rows][cols/16] + F32 scale_2 */
    WEIGHT_BF16,
    WEIGHT_F16,
    WEIGHT_F32,
} weight_format;

/* A matrix W[rows][cols] (y = W x, rows = output features, cols = K) addressed in place inside
 * the mmap'ed checkpoint. A tensor-parallel shard is a view of a row range and/or a K range of
 * the full tensor: data and scale point at the first element of the shard and the strides keep
 * the full tensor's row pitch, so nothing is copied or repacked. */
typedef struct {
    weight_format format;
    int rows;               /* N of this view */
    int cols;               /* K of this view; a multiple of 16 for NVFP4 */
    const uint8_t *data;    /* first byte of row 0 of the view */
    size_t data_stride;     /* bytes from one row to the next (full tensor's row pitch) */
    const uint8_t *scale;   /* NVFP4: E4M3 block scales of row 0; NULL otherwise */
    size_t scale_stride;    /* NVFP4: bytes between rows of scales (= full K / 16) */
    float scale_2;          /* NVFP4 global scale (weight_scale_2); 1 otherwise */
} weight_matrix;

/* A 1-D parameter vector (norm weights, router bias) of n elements in place. */
typedef struct {
    dtype type;             /* DTYPE_BF16, DTYPE_F16 or DTYPE_F32 */
    int n;
    const void *data;
} weight_vector;

#endif
