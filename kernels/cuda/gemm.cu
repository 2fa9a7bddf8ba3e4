/* gemm (CUDA): BF16 tensor-core GEMMs through cuBLASLt for the projections of a prefill step,
 * with the element-wise conversions (activations split hi + lo, NVFP4 tiles) they read and the
 * row gathers and scatters of an expert's tokens. Row-major
 * weight rows W[n][k] are cuBLASLt's column-major k x n matrix, so C (column-major n x m, one
 * token per column) = op_T(A) B: the "TN" shape tensor cores serve best. */
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <new>

#include "kernels/cuda/gemm.h"
#include "kernels/forward_math.h"
#include "kernels/half_math.h"
#include "kernels/nvfp4_math.h"

namespace {

constexpr int kThreads = 256;

__global__ void bf16_split_kernel(const float *x, int cols, size_t x_ld, uint16_t *hi, uint16_t *lo, size_t out_ld)
{
    int row = blockIdx.y;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
        float value = x[(size_t)row * x_ld + c];
        uint16_t high = bf16_from_float(value);
        hi[(size_t)row * out_ld + c] = high;
        lo[(size_t)row * out_ld + c] = bf16_from_float(value - bf16_bits_to_float(high));
    }
}

__global__ void bf16_dequantise_kernel(weight_matrix w, int row_begin, uint16_t *out, size_t out_ld)
{
    int r = blockIdx.y, row = row_begin + r;
    const uint8_t *data = w.data + (size_t)row * w.data_stride;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < w.cols; c += gridDim.x * blockDim.x) {
        uint8_t byte = data[c / 2];
        float block_scale = nvfp4_e4m3_to_float(w.scale[(size_t)row * w.scale_stride + c / 16]);
        /* at most 2 x 4 significant bits: exact in BF16 */
        out[(size_t)r * out_ld + c] =
            bf16_from_float(nvfp4_e2m1_to_float((uint8_t)(c & 1 ? byte >> 4 : byte & 15)) * block_scale);
    }
}

__global__ void silu_gate_kernel(const float *gate, const float *up, float *act, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        act[i] = silu_gate_element(gate[i], up[i]);
}

__global__ void rows_gather_kernel(const float *x, size_t x_ld, const int *index, int indices, int per_input, int cols,
                                   float *out)
{
    int row = blockIdx.y;
    const float *from = x + (size_t)(index[row < indices ? row : indices - 1] / per_input) * x_ld;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
        out[(size_t)row * cols + c] = from[c];
}

__global__ void rows_scatter_kernel(const float *rows_in, int cols, const int *index, float *y, size_t y_ld)
{
    int row = blockIdx.y;
    float *to = y + (size_t)index[row] * y_ld;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
        to[c] = rows_in[(size_t)row * cols + c];
}

unsigned column_blocks(int cols)
{
    int blocks = (cols + kThreads - 1) / kThreads;
    return (unsigned)(blocks > 64 ? 64 : blocks < 1 ? 1 : blocks);
}

int from_cublas(cublasStatus_t status)
{
    if (status == CUBLAS_STATUS_SUCCESS)
        return 0;
    return (int)(status == CUBLAS_STATUS_ALLOC_FAILED ? cudaErrorMemoryAllocation : cudaErrorNotSupported);
}

/* The alignment cuBLASLt may assume of a buffer: the largest power of two dividing its address,
 * at most 256 (its default assumption, which a tile starting mid-matrix may not meet). */
uint32_t alignment_of(const void *p)
{
    uintptr_t address = (uintptr_t)p;
    uint32_t align = 256;
    while (align > 1 && address % align)
        align /= 2;
    return align;
}

/* The descriptors and the algorithm of one GEMM shape (sizes, leading dimensions, buffer
 * alignments, workspace): cuBLASLt's heuristic query costs far more host time than a launch, so
 * each shape asks once per context. */
struct gemm_key {
    int m, n, k;
    size_t lda, ldb, ldc, scratch_bytes;
    uint32_t align[3];
    bool operator==(const gemm_key &o) const
    {
        return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc &&
               scratch_bytes == o.scratch_bytes && align[0] == o.align[0] && align[1] == o.align[1] &&
               align[2] == o.align[2];
    }
};

struct gemm_shape {
    gemm_key key;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
    void release()
    {
        if (c)
            cublasLtMatrixLayoutDestroy(c);
        if (b)
            cublasLtMatrixLayoutDestroy(b);
        if (a)
            cublasLtMatrixLayoutDestroy(a);
        if (op)
            cublasLtMatmulDescDestroy(op);
        op = nullptr;
        a = b = c = nullptr;
    }
};

constexpr int kCachedShapes = 256;

struct gemm_cache {
    gemm_shape shapes[kCachedShapes];
    int count = 0;
    int next_evicted = 0;   /* when full, entries are replaced in turn */
};

struct preference_guard {
    cublasLtMatmulPreference_t preference = nullptr;
    ~preference_guard()
    {
        if (preference)
            cublasLtMatmulPreferenceDestroy(preference);
    }
};

} // namespace

extern "C" int bf16_split_cuda(const float *x, int rows, int cols, size_t x_ld, uint16_t *hi, uint16_t *lo,
                               size_t out_ld, void *stream)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    if (rows > 65535)
        return (int)cudaErrorInvalidValue;
    dim3 grid(column_blocks(cols), (unsigned)rows);
    bf16_split_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>(x, cols, x_ld, hi, lo, out_ld);
    return (int)cudaGetLastError();
}

extern "C" int bf16_dequantise_cuda(const weight_matrix *w, int row_begin, int rows, uint16_t *out, size_t out_ld,
                                    void *stream)
{
    if (rows <= 0 || w->cols <= 0)
        return 0;
    if (rows > 65535 || w->format != WEIGHT_NVFP4 || !w->scale)
        return (int)cudaErrorInvalidValue;
    dim3 grid(column_blocks(w->cols), (unsigned)rows);
    bf16_dequantise_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>(*w, row_begin, out, out_ld);
    return (int)cudaGetLastError();
}

extern "C" int rows_gather_cuda(const float *x, size_t x_ld, const int *index, int indices, int per_input, int rows,
                                int cols, float *out, void *stream)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    if (rows > 65535 || per_input < 1 || indices < 1)
        return (int)cudaErrorInvalidValue;
    dim3 grid(column_blocks(cols), (unsigned)rows);
    rows_gather_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>(x, x_ld, index, indices, per_input, cols, out);
    return (int)cudaGetLastError();
}

extern "C" int rows_scatter_cuda(const float *rows_in, int rows, int cols, const int *index, float *y, size_t y_ld,
                                 void *stream)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    if (rows > 65535)
        return (int)cudaErrorInvalidValue;
    dim3 grid(column_blocks(cols), (unsigned)rows);
    rows_scatter_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>(rows_in, cols, index, y, y_ld);
    return (int)cudaGetLastError();
}

extern "C" int silu_gate_cuda(const float *gate, const float *up, float *act, size_t n, void *stream)
{
    if (n == 0)
        return 0;
    size_t blocks = (n + kThreads - 1) / kThreads;
    silu_gate_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), kThreads, 0, (cudaStream_t)stream>>>(gate, up, act,
                                                                                                       n);
    return (int)cudaGetLastError();
}

extern "C" int gemm_context_create(gemm_context *ctx)
{
    ctx->handle = nullptr;
    ctx->shapes = new (std::nothrow) gemm_cache;
    if (!ctx->shapes)
        return (int)cudaErrorMemoryAllocation;
    cublasLtHandle_t handle = nullptr;
    int status = from_cublas(cublasLtCreate(&handle));
    if (status) {
        delete static_cast<gemm_cache *>(ctx->shapes);
        ctx->shapes = nullptr;
        return status;
    }
    ctx->handle = handle;
    return 0;
}

extern "C" void gemm_context_destroy(gemm_context *ctx)
{
    gemm_cache *cache = static_cast<gemm_cache *>(ctx->shapes);
    if (cache) {
        for (int i = 0; i < cache->count; i++)
            cache->shapes[i].release();
        delete cache;
    }
    if (ctx->handle)
        cublasLtDestroy((cublasLtHandle_t)ctx->handle);
    ctx->handle = nullptr;
    ctx->shapes = nullptr;
}

#define GEMM_TRY(call)                                                                                      \
    do {                                                                                                    \
        int status_ = from_cublas(call);                                                                    \
        if (status_)                                                                                        \
            return status_;                                                                                 \
    } while (0)

/* The descriptors and the heuristic's first algorithm for key, into d (released by the caller on
 * failure). */
static int gemm_shape_make(cublasLtHandle_t handle, const gemm_key &key, gemm_shape *d)
{
    d->key = key;
    cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    GEMM_TRY(cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    GEMM_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose));
    GEMM_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep));
    GEMM_TRY(cublasLtMatrixLayoutCreate(&d->a, CUDA_R_16BF, (uint64_t)key.k, (uint64_t)key.n, (int64_t)key.lda));
    GEMM_TRY(cublasLtMatrixLayoutCreate(&d->b, CUDA_R_16BF, (uint64_t)key.k, (uint64_t)key.m, (int64_t)key.ldb));
    GEMM_TRY(cublasLtMatrixLayoutCreate(&d->c, CUDA_R_32F, (uint64_t)key.n, (uint64_t)key.m, (int64_t)key.ldc));
    preference_guard p;
    size_t scratch_bytes = key.scratch_bytes;
    GEMM_TRY(cublasLtMatmulPreferenceCreate(&p.preference));
    GEMM_TRY(cublasLtMatmulPreferenceSetAttribute(p.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &scratch_bytes, sizeof scratch_bytes));
    const cublasLtMatmulPreferenceAttributes_t aligned[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        uint32_t align = key.align[i < 3 ? i : 2];
        GEMM_TRY(cublasLtMatmulPreferenceSetAttribute(p.preference, aligned[i], &align, sizeof align));
    }
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    GEMM_TRY(cublasLtMatmulAlgoGetHeuristic(handle, d->op, d->a, d->b, d->c, d->c, p.preference, 1, &result, &found));
    if (found < 1)
        return (int)cudaErrorNotSupported;
    d->algo = result.algo;
    return 0;
}

extern "C" int gemm_bf16_cuda(const gemm_context *ctx, int m, int n, int k, float alpha, const uint16_t *a,
                              size_t lda, const uint16_t *b, size_t ldb, float beta, float *c, size_t ldc,
                              void *scratch, size_t scratch_bytes, void *stream)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return 0;
    if (!ctx->handle || lda < (size_t)k || ldb < (size_t)k || ldc < (size_t)n)
        return (int)cudaErrorInvalidValue;
    cublasLtHandle_t handle = (cublasLtHandle_t)ctx->handle;
    gemm_cache *cache = static_cast<gemm_cache *>(ctx->shapes);
    gemm_key key = {m, n, k, lda, ldb, ldc, scratch_bytes, {alignment_of(a), alignment_of(b), alignment_of(c)}};
    gemm_shape *d = nullptr;
    for (int i = 0; i < cache->count && !d; i++)
        if (cache->shapes[i].key == key)
            d = &cache->shapes[i];
    if (!d) {
        if (cache->count < kCachedShapes) {
            d = &cache->shapes[cache->count++];
        } else {
            d = &cache->shapes[cache->next_evicted];
            cache->next_evicted = (cache->next_evicted + 1) % kCachedShapes;
            d->release();
        }
        int status = gemm_shape_make(handle, key, d);
        if (status) {
            d->release();
            d->key.m = -1;  /* matches no call */
            return status;
        }
    }
    GEMM_TRY(cublasLtMatmul(handle, d->op, &alpha, a, d->a, b, d->b, &beta, c, d->c, c, d->c, &d->algo, scratch,
                            scratch_bytes, (cudaStream_t)stream));
    return 0;
}
