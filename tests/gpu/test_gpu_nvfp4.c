/* GPU test: the CUDA NVFP4 row dequantizer against the CPU decoder, bit for bit, on random rows
 * (every non-NaN block scale, several global scales, a row range and a K-range view of a wider
 * tensor). Exits 77 (reported by ctest as skipped, never passed) when no CUDA device exists. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/numeric.h"
#include "kernels/cuda/nvfp4.h"
#include "tests/unit/check.h"

enum { SKIPPED = 77 };

static uint32_t lcg_state = 2026;
static uint32_t lcg_next(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return lcg_state >> 8;
}

#define CUDA_OK(call)                                                                      \
    do {                                                                                   \
        cudaError_t cuda_status_ = (call);                                                 \
        CHECK_MSG(cuda_status_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cuda_status_)); \
        if (cuda_status_ != cudaSuccess)                                                   \
            return;                                                                        \
    } while (0)

/* A full tensor W[rows][full_cols] in host and device memory; the test decodes the view of rows
 * [row_begin, row_end) and columns [col_begin, col_begin + cols) on both sides. */
static void compare_view(int rows, int full_cols, int col_begin, int cols, int row_begin, int row_end, float scale_2)
{
    size_t packed_bytes = (size_t)rows * full_cols / 2, scale_bytes = (size_t)rows * full_cols / 16;
    uint8_t *packed = malloc(packed_bytes), *scales = malloc(scale_bytes);
    size_t out_count = (size_t)(row_end - row_begin) * cols;
    float *gpu_rows = malloc(out_count * sizeof(float)), *cpu_row = malloc((size_t)cols * sizeof(float));
    for (size_t i = 0; i < packed_bytes; i++)
        packed[i] = (uint8_t)lcg_next();
    for (size_t i = 0; i < scale_bytes; i++) {
        scales[i] = (uint8_t)lcg_next();
        if ((scales[i] & 0x7F) == 0x7F) /* NaN scales never occur in a checkpoint and never compare equal */
            scales[i] ^= 1;
    }

    uint8_t *device_packed = NULL, *device_scales = NULL;
    float *device_out = NULL;
    CUDA_OK(cudaMalloc((void **)&device_packed, packed_bytes));
    CUDA_OK(cudaMalloc((void **)&device_scales, scale_bytes));
    CUDA_OK(cudaMalloc((void **)&device_out, out_count * sizeof(float)));
    CUDA_OK(cudaMemcpy(device_packed, packed, packed_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(device_scales, scales, scale_bytes, cudaMemcpyHostToDevice));

    weight_matrix host_view = {
        .format = WEIGHT_NVFP4, .rows = rows, .cols = cols,
        .data = packed + col_begin / 2, .data_stride = (size_t)full_cols / 2,
        .scale = scales + col_begin / 16, .scale_stride = (size_t)full_cols / 16, .scale_2 = scale_2,
    };
    weight_matrix device_view = host_view;
    device_view.data = device_packed + col_begin / 2;
    device_view.scale = device_scales + col_begin / 16;
    CHECK_INT(nvfp4_dequantize_rows_cuda(&device_view, row_begin, row_end, device_out, NULL), 0);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(gpu_rows, device_out, out_count * sizeof(float), cudaMemcpyDeviceToHost));

    int mismatched_rows = 0;
    for (int r = row_begin; r < row_end; r++) {
        weight_matrix_decode_row(&host_view, r, cpu_row);
        if (memcmp(cpu_row, gpu_rows + (size_t)(r - row_begin) * cols, (size_t)cols * sizeof(float)) != 0 &&
            mismatched_rows++ < 3)
            fprintf(stderr, "row %d of [%d x %d] view differs\n", r, rows, cols);
    }
    CHECK_MSG(mismatched_rows == 0, "%d rows differ (scale_2 %g)", mismatched_rows, scale_2);

    cudaFree(device_packed);
    cudaFree(device_scales);
    cudaFree(device_out);
    free(packed);
    free(scales);
    free(gpu_rows);
    free(cpu_row);
}

/* Not asserted (speed is measured, never tested): the kernel's bytes moved per second on a
 * [rows][k] expert-sized batch, to compare with the device's memory bandwidth. */
static void report_bandwidth(int rows, int k)
{
    size_t packed_bytes = (size_t)rows * k / 2, scale_bytes = (size_t)rows * k / 16, out_bytes = (size_t)rows * k * 4;
    uint8_t *device_packed = NULL, *device_scales = NULL;
    float *device_out = NULL;
    cudaEvent_t start, stop;
    CUDA_OK(cudaMalloc((void **)&device_packed, packed_bytes));
    CUDA_OK(cudaMalloc((void **)&device_scales, scale_bytes));
    CUDA_OK(cudaMalloc((void **)&device_out, out_bytes));
    CUDA_OK(cudaMemset(device_packed, 0x5A, packed_bytes));
    CUDA_OK(cudaMemset(device_scales, 0x38, scale_bytes));
    CUDA_OK(cudaEventCreate(&start));
    CUDA_OK(cudaEventCreate(&stop));
    weight_matrix w = {.format = WEIGHT_NVFP4, .rows = rows, .cols = k, .data = device_packed,
                       .data_stride = (size_t)k / 2, .scale = device_scales, .scale_stride = (size_t)k / 16,
                       .scale_2 = 1.0f};
    enum { REPEATS = 20 };
    CHECK_INT(nvfp4_dequantize_rows_cuda(&w, 0, rows, device_out, NULL), 0); /* warm-up */
    CUDA_OK(cudaEventRecord(start, NULL));
    for (int i = 0; i < REPEATS; i++)
        nvfp4_dequantize_rows_cuda(&w, 0, rows, device_out, NULL);
    CUDA_OK(cudaEventRecord(stop, NULL));
    CUDA_OK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
    double bytes = (double)(packed_bytes + scale_bytes + out_bytes) * REPEATS;
    printf("nvfp4 dequantize [%d x %d]: %.3f ms per call, %.1f GB/s moved (read %zu + %zu, write %zu bytes)\n", rows, k,
           ms / REPEATS, bytes / (ms * 1e-3) / 1e9, packed_bytes, scale_bytes, out_bytes);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFree(device_packed);
    cudaFree(device_scales);
    cudaFree(device_out);
}

static void test_rejects_bad_requests(void)
{
    weight_matrix bf16 = {.format = WEIGHT_BF16, .rows = 4, .cols = 32, .scale_2 = 1.0f};
    CHECK(nvfp4_dequantize_rows_cuda(&bf16, 0, 4, NULL, NULL) != 0);
    weight_matrix nvfp4 = {.format = WEIGHT_NVFP4, .rows = 4, .cols = 32, .scale_2 = 1.0f};
    CHECK(nvfp4_dequantize_rows_cuda(&nvfp4, 2, 5, NULL, NULL) != 0);
    CHECK(nvfp4_dequantize_rows_cuda(&nvfp4, 3, 2, NULL, NULL) != 0);
    CHECK_INT(nvfp4_dequantize_rows_cuda(&nvfp4, 2, 2, NULL, NULL), 0);
}

int main(void)
{
    int devices = 0;
    cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
        return SKIPPED;
    }
    compare_view(64, 4096, 0, 4096, 0, 64, 0.000372314453125f);
    compare_view(37, 7168, 2048, 1792, 5, 30, 1.0f);        /* a TP shard: K range of a wider tensor */
    compare_view(3, 16, 0, 16, 1, 3, 1.7e-38f);            /* products land in float subnormals */
    compare_view(9000, 4096, 0, 4096, 0, 9000, 3.3333333f); /* more bytes than one grid pass (2^24 threads) */
    test_rejects_bad_requests();
    report_bandwidth(16384, 7168);
    return check_finish();
}
