/* nvfp4 (CUDA): NVFP4 row dequantization on the device; one thread per packed byte (two weights),
 * so consecutive threads read consecutive bytes and write consecutive float pairs. */
#include "kernels/cuda/nvfp4.h"

#include <cuda_runtime.h>

#include "kernels/nvfp4_math.h"

__global__ static void nvfp4_dequantize_rows_kernel(weight_matrix w, int row_begin, size_t total_bytes, float *out)
{
    size_t bytes_per_row = (size_t)w.cols / 2;
    for (size_t index = (size_t)blockIdx.x * blockDim.x + threadIdx.x; index < total_bytes;
         index += (size_t)gridDim.x * blockDim.x) {
        size_t row = index / bytes_per_row, byte = index % bytes_per_row;
        size_t source_row = (size_t)row_begin + row;
        uint8_t packed = w.data[source_row * w.data_stride + byte];
        float block_scale = nvfp4_e4m3_to_float(w.scale[source_row * w.scale_stride + byte / 8]);
        float *pair = out + row * (size_t)w.cols + 2 * byte;
        pair[0] = nvfp4_dequantize(packed & 15, block_scale, w.scale_2);
        pair[1] = nvfp4_dequantize(packed >> 4, block_scale, w.scale_2);
    }
}

extern "C" int nvfp4_dequantize_rows_cuda(const weight_matrix *w, int row_begin, int row_end, float *out, void *stream)
{
    if (w->format != WEIGHT_NVFP4 || w->cols % 16 != 0 || row_begin < 0 || row_end > w->rows || row_begin > row_end)
        return (int)cudaErrorInvalidValue;
    size_t total_bytes = (size_t)(row_end - row_begin) * (size_t)(w->cols / 2);
    if (total_bytes == 0)
        return 0;
    const unsigned threads = 256;
    size_t blocks_needed = (total_bytes + threads - 1) / threads;
    unsigned blocks = blocks_needed < 65536 ? (unsigned)blocks_needed : 65536u;
    nvfp4_dequantize_rows_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(*w, row_begin, total_bytes, out);
    return (int)cudaGetLastError();
}
