/* cublaslt: cuBLASLt of the CPU emulation, a reference GEMM for the descriptors gemm.cu makes:
 * column-major layouts (rows, cols, ld), op(A) and op(B) by TRANSA/TRANSB, BF16/F16/F32
 * inputs, F32 output, D = alpha * op(A) op(B) + beta * C with each dot product summed in
 * double and rounded once (the device's fp32 tensor-core accumulation differs from it by
 * rounding only). The heuristic finds no algorithm when a pointer alignment preference is not
 * a multiple of the element size or the workspace preference is negative, as cuBLASLt. */
#include "emu.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <new>
#include <vector>

struct cublasLtContext {
    int device;
};
struct cublasLtMatmulDescOpaque {
    cublasComputeType_t compute;
    cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};
struct cublasLtMatrixLayoutOpaque {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque {
    size_t workspace = 0;
    uint32_t align[4] = {256, 256, 256, 256};
};

static float element(const void *base, cudaDataType_t type, size_t index)
{
    switch (type) {
    case CUDA_R_16BF: return emu::bf16_bits_to_float(((const uint16_t *)base)[index]);
    case CUDA_R_16F: return emu::half_bits_to_float(((const uint16_t *)base)[index]);
    default: return ((const float *)base)[index];
    }
}

/* The dot products of x[0..k) with Columns contiguous vectors of k (y, y + k, ...), each summed
 * in double in order: the same sums as one at a time, but Columns independent additions a step
 * where one would wait for the last (a fifth of an emulated prefill's CPU time went here). */
constexpr uint64_t kColumns = 4;
template <int Columns> static void dot_columns(const float *x, const float *y, uint64_t k, double *sums)
{
    double s[Columns] = {};
    for (uint64_t p = 0; p < k; p++) {
        double xp = x[p];
        for (int q = 0; q < Columns; q++)
            s[q] += xp * (double)y[q * k + p];
    }
    for (int q = 0; q < Columns; q++)
        sums[q] = s[q];
}

static size_t type_bytes(cudaDataType_t type)
{
    return type == CUDA_R_32F ? 4 : 2;
}

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle)
{
    *handle = new (std::nothrow) cublasLtContext{0};
    return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle)
{
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute, cudaDataType_t scale)
{
    if (scale != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    *desc = new cublasLtMatmulDescOpaque;
    (*desc)->compute = compute;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size)
{
    if (size != sizeof(cublasOperation_t))
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasOperation_t op = *(const cublasOperation_t *)buf;
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (attr == CUBLASLT_MATMUL_DESC_TRANSA)
        desc->trans_a = op;
    else if (attr == CUBLASLT_MATMUL_DESC_TRANSB)
        desc->trans_b = op;
    else
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld)
{
    if (ld < (int64_t)rows)
        return CUBLAS_STATUS_INVALID_VALUE;
    *layout = new cublasLtMatrixLayoutOpaque{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    *pref = new cublasLtMatmulPreferenceOpaque;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size)
{
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (size != sizeof(size_t))
            return CUBLAS_STATUS_INVALID_VALUE;
        pref->workspace = *(const size_t *)buf;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr < CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES || attr > CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
        || size != sizeof(uint32_t))
        return CUBLAS_STATUS_INVALID_VALUE;
    pref->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = *(const uint32_t *)buf;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned)
{
    if (!handle || !op || !a || !b || !c || !d || !pref || requested < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    uint64_t m = op->trans_a == CUBLAS_OP_N ? a->rows : a->cols, ka = op->trans_a == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t kb = op->trans_b == CUBLAS_OP_N ? b->rows : b->cols, n = op->trans_b == CUBLAS_OP_N ? b->cols : b->rows;
    if (ka != kb || c->rows != m || c->cols != n || d->rows != m || d->cols != n)
        return CUBLAS_STATUS_INVALID_VALUE;
    cudaDataType_t types[4] = {a->type, b->type, c->type, d->type};
    for (int i = 0; i < 4; i++)
        if (pref->align[i] % type_bytes(types[i]))
            return CUBLAS_STATUS_NOT_SUPPORTED;     /* no kernel reads misaligned elements */
    results[0] = cublasLtMatmulHeuristicResult_t{};
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void *alpha, const void *a,
                              cublasLtMatrixLayout_t a_layout, const void *b, cublasLtMatrixLayout_t b_layout,
                              const void *beta, const void *c, cublasLtMatrixLayout_t c_layout, void *d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream)
{
    (void)workspace, (void)workspace_bytes;
    if (!handle || !op || !alpha || !beta || !a || !b || !d || !algo)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasOperation_t ta = op->trans_a, tb = op->trans_b;
    cublasLtMatrixLayoutOpaque A = *a_layout, B = *b_layout, C = *c_layout, D = *d_layout;
    uint64_t m = ta == CUBLAS_OP_N ? A.rows : A.cols, k = ta == CUBLAS_OP_N ? A.cols : A.rows;
    uint64_t n = tb == CUBLAS_OP_N ? B.cols : B.rows;
    if ((tb == CUBLAS_OP_N ? B.rows : B.cols) != k || C.rows != m || C.cols != n || D.rows != m || D.cols != n
        || D.type != CUDA_R_32F)
        return CUBLAS_STATUS_INVALID_VALUE;
    float al = *(const float *)alpha, be = *(const float *)beta;    /* host pointer mode: read at the call */
    emu::work w;
    w.kind = emu::WORK_KERNEL;
    w.what = "cublasLtMatmul";
    w.bytes = 0;
    w.run = [=] {
        /* op(A) by rows and op(B) by columns, converted once, so each dot product reads two
         * contiguous vectors */
        std::vector<float> rows(m * k), cols(n * k);
        for (uint64_t i = 0; i < m; i++)
            for (uint64_t p = 0; p < k; p++)
                rows[i * k + p] = element(a, A.type, ta == CUBLAS_OP_N ? i + p * A.ld : p + i * A.ld);
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t p = 0; p < k; p++)
                cols[j * k + p] = element(b, B.type, tb == CUBLAS_OP_N ? p + j * B.ld : j + p * B.ld);
        for (uint64_t j = 0; j < n; j += kColumns) {
            uint64_t width = std::min<uint64_t>(kColumns, n - j);
            for (uint64_t i = 0; i < m; i++) {
                double sums[kColumns];
                if (width == kColumns)
                    dot_columns<kColumns>(&rows[i * k], &cols[j * k], k, sums);
                else
                    for (uint64_t q = 0; q < width; q++)
                        dot_columns<1>(&rows[i * k], &cols[(j + q) * k], k, sums + q);
                for (uint64_t q = 0; q < width; q++) {
                    float prior = be != 0.0f ? element(c, C.type, i + (j + q) * C.ld) : 0.0f;
                    ((float *)d)[i + (j + q) * D.ld] = (float)((double)al * sums[q] + (double)be * prior);
                }
            }
        }
    };
    return emu::enqueue(stream, std::move(w)) ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
