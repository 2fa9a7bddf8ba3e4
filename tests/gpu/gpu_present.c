/* gpu_present: exit 0 when a CUDA device exists, else 77 (ctest's "Skipped"), for the GPU test
 * scripts to call first. */
#include <cuda_runtime_api.h>
#include <stdio.h>

int main(void)
{
    int devices = 0;
    cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
        printf("SKIPPED: no CUDA device (%s)\n", status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
        return 77;
    }
    return 0;
}
