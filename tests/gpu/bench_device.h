/* bench_device: device buffers the GPU benchmarks (bench_gpu.c, decode_table.c) build their
 * kernels' inputs from: weight matrices in the packed layout at a given shape, and float
 * vectors. Their values are irrelevant to speed; they are finite. */
#ifndef KIMI_TESTS_GPU_BENCH_DEVICE_H
#define KIMI_TESTS_GPU_BENCH_DEVICE_H

#include <stdlib.h>

#include "engine/backend/device_plan.h"
#include "tests/gpu/gpu_test.h"

/* A device matrix of constant bytes in the packed layout (E4M3 scales are 1.0 so no NaN slows
 * anything); *bytes: the bytes a kernel reads for it (NVFP4: data and scales). */
static inline weight_matrix bench_device_matrix(weight_format format, int rows, int cols, size_t *bytes)
{
    weight_matrix v = {format, rows, cols, NULL, format == WEIGHT_NVFP4 ? (size_t)cols / 2 : (size_t)cols * 2,
                       NULL, (size_t)cols / 16, 1.0f};
    packed_layout l;
    packed_layout_of(&v, &l);
    uint8_t *d = NULL;
    CUDA_CHECK(cudaMalloc((void **)&d, l.bytes));
    CUDA_CHECK(cudaMemset(d, 0x35, l.data_bytes));
    if (l.scale_bytes)
        CUDA_CHECK(cudaMemset(d + l.data_bytes, 0x38, l.scale_bytes));
    *bytes = (size_t)rows * (v.data_stride + (format == WEIGHT_NVFP4 ? (size_t)cols / 16 : 0));
    return packed_view(&v, &l, d, d + l.data_bytes);
}

/* n floats on the device: value * (i % 7 + 1) / 10. */
static inline float *bench_device_floats(size_t n, float value)
{
    float *host = malloc(n * sizeof *host), *d;
    for (size_t i = 0; i < n; i++)
        host[i] = value * (float)((i % 7) + 1) * 0.1f;
    d = gpu_test_upload(host, n * sizeof *host);
    free(host);
    return d;
}

#endif
