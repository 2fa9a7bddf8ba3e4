/* gpu_test: helpers the GPU tests share: the skip rule (exit 77, which ctest reports as
 * "Skipped", never "Passed", when no CUDA device exists), CUDA error checks, deterministic
 * random data and device copies. */
#ifndef KIMI_TESTS_GPU_TEST_H
#define KIMI_TESTS_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/unit/check.h"

enum { GPU_TEST_SKIPPED = 77 };

/* Returns only when a device exists. */
static inline void gpu_test_require_device(void)
{
    int devices = 0;
    cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
        exit(GPU_TEST_SKIPPED);
    }
}

#define CUDA_CHECK(call)                                                                                    \
    do {                                                                                                    \
        cudaError_t cuda_status_ = (cudaError_t)(call);                                                     \
        CHECK_MSG(cuda_status_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cuda_status_));          \
        if (cuda_status_ != cudaSuccess) {                                                                  \
            check_finish();                                                                                 \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

static uint32_t gpu_test_lcg = 2026;
static inline uint32_t gpu_test_next(void)
{
    gpu_test_lcg = gpu_test_lcg * 1664525u + 1013904223u;
    return gpu_test_lcg >> 8;
}

/* Uniform in [-1, 1). */
static inline float gpu_test_uniform(void)
{
    return (float)(gpu_test_next() & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static inline void *gpu_test_upload(const void *host, size_t bytes)
{
    void *device = NULL;
    CUDA_CHECK(cudaMalloc(&device, bytes ? bytes : 1));
    if (bytes)
        CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    return device;
}

static inline void gpu_test_download(void *host, const void *device, size_t bytes)
{
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}

#endif
