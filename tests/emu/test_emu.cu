/* test_emu: the semantics of the CPU emulation of CUDA (tests/emu) that the project's GPU tests
 * rely on, checked against what the hardware and the runtime do: shuffles by the PTX rules
 * (width segments, out-of-range lanes keep their value), ballot and barrier counts, half/bf16
 * rounding, the dynamic shared memory limit and its opt-in, stream order, graph capture by
 * value and the errors of illegal calls during a capture. Translated like the kernels of kernels/cuda. */
#include <cuda_fp16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "tests/unit/check.h"
}

__global__ void shuffle_kernel(int *up, int *down, int *xr, int *idx, unsigned *ballot, int *count)
{
    int lane = threadIdx.x % 32, t = threadIdx.x;
    up[t] = __shfl_up_sync(0xFFFFFFFFu, t, 3, 16);
    down[t] = __shfl_down_sync(0xFFFFFFFFu, t, 5, 8);
    xr[t] = __shfl_xor_sync(0xFFFFFFFFu, t, 16, 16);
    idx[t] = __shfl_sync(0xFFFFFFFFu, t, 33, 32);
    ballot[t] = __ballot_sync(0xFFFFFFFFu, lane % 3 == 0);
    count[t] = __syncthreads_count(t % 5 == 0);
}

__global__ void dynamic_kernel(float *out)
{
    extern __shared__ float scratch[];
    if (threadIdx.x == 0)
        out[0] = scratch[0];    /* unwritten: the poison shows */
}

__global__ void add_one(int *x, int by)
{
    x[threadIdx.x] += by;
}

static void check_shuffles(void)
{
    int *buf;
    unsigned *ballot;
    cudaMalloc((void **)&buf, 5 * 64 * sizeof(int));
    cudaMalloc((void **)&ballot, 64 * sizeof(unsigned));
    shuffle_kernel<<<1, 64>>>(buf, buf + 64, buf + 128, buf + 192, ballot, buf + 256);
    CHECK_INT(cudaGetLastError(), cudaSuccess);
    int host[5 * 64];
    unsigned host_ballot[64];
    cudaMemcpy(host, buf, sizeof host, cudaMemcpyDeviceToHost);
    cudaMemcpy(host_ballot, ballot, sizeof host_ballot, cudaMemcpyDeviceToHost);
    for (int t = 0; t < 64; t++) {
        int lane = t % 32, seg16 = lane / 16 * 16, seg8 = lane / 8 * 8, warp = t / 32 * 32;
        CHECK_INT(host[t], lane - 3 < seg16 ? t : t - 3);                   /* up, width 16 */
        CHECK_INT(host[64 + t], lane + 5 >= seg8 + 8 ? t : t + 5);          /* down, width 8 */
        CHECK_INT(host[128 + t], t);                                        /* xor 16 leaves a 16-lane segment */
        CHECK_INT(host[192 + t], warp + 1);                                 /* lane 33 of 32 is lane 1 */
        CHECK_INT(host[256 + t], 13);                                       /* t % 5 == 0 for 13 of 64 */
        CHECK(host_ballot[t] == 0x49249249u);
    }
    cudaFree(buf);
    cudaFree(ballot);
}

static void check_half(void)
{
    CHECK_INT(__half_as_ushort(__float2half(1.0f + 1.0f / 2048.0f)), 0x3C00);   /* a tie: to even */
    CHECK_INT(__half_as_ushort(__float2half(1.0f + 3.0f / 2048.0f)), 0x3C02);   /* a tie: to even, up */
    CHECK_INT(__half_as_ushort(__float2half(65519.0f)), 0x7BFF);
    CHECK_INT(__half_as_ushort(__float2half(65520.0f)), 0x7C00);                /* overflows to inf */
    CHECK_INT(__half_as_ushort(__float2half(ldexpf(1.0f, -24))), 0x0001);       /* the smallest subnormal */
    CHECK_INT(__half_as_ushort(__float2half(ldexpf(1.0f, -25))), 0x0000);       /* half of it: to even, 0 */
    CHECK_INT(__half_as_ushort(__float2half(ldexpf(3.0f, -26))), 0x0001);
    CHECK(__half2float(__ushort_as_half(0x0001)) == ldexpf(1.0f, -24));
    CHECK_INT(__bfloat16_as_ushort(__float2bfloat16(1.0f + 1.0f / 256.0f)), 0x3F80);
    CHECK_INT(__bfloat16_as_ushort(__float2bfloat16(1.0f + 3.0f / 256.0f)), 0x3F82);
}

static void check_shared_limit(void)
{
    float *out, value = 0.0f;
    cudaMalloc((void **)&out, sizeof(float));
    dynamic_kernel<<<1, 32, 64 * 1024>>>(out);
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidValue);       /* over 48 KiB without the opt-in */
    CHECK_INT(cudaFuncSetAttribute(dynamic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024), 0);
    dynamic_kernel<<<1, 32, 64 * 1024>>>(out);
    CHECK_INT(cudaGetLastError(), cudaSuccess);
    cudaMemcpy(&value, out, sizeof value, cudaMemcpyDeviceToHost);
    CHECK(isnan(value));
    int optin = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
    /* the emulated architecture's opt-in limit (KIMI_EMU_ARCH), the real devices' figure: 99 KiB
     * on sm_120 (RTX PRO 6000), 227 KiB on sm_90 and sm_100 */
    const char *arch = getenv("KIMI_EMU_ARCH");
    CHECK_INT(optin, arch && !strcmp(arch, "120") ? 99 * 1024 : 227 * 1024);
    dynamic_kernel<<<1, 32, optin + 1>>>(out);
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidValue);       /* over the limit, without the opt-in */
    CHECK_INT(cudaFuncSetAttribute(dynamic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin + 1),
              cudaErrorInvalidValue);                           /* nor can the opt-in reach it */
    cudaGetLastError();     /* the refused call is the last error, as the runtime keeps it */
    CHECK_INT(cudaFuncSetAttribute(dynamic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin), 0);
    dynamic_kernel<<<1, 32, optin>>>(out);
    CHECK_INT(cudaGetLastError(), cudaSuccess);                 /* exactly the limit, opted in */
    dynamic_kernel<<<1, 32, optin + 1>>>(out);
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidValue);       /* over it, opted in */
    add_one<<<1, 1025>>>(out == NULL ? NULL : (int *)out, 1);
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidConfiguration);
    cudaFree(out);
}

static void check_graphs(void)
{
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    int *x, host[4] = {0};
    cudaMalloc((void **)&x, sizeof host);
    cudaMemsetAsync(x, 0, sizeof host, s);
    int by = 2;
    CHECK_INT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), 0);
    add_one<<<1, 4, 0, s>>>(x, by);
    by = 100;   /* the capture holds the argument's value, 2 */
    add_one<<<1, 4, 0, s>>>(x, 1);
    cudaGraph_t g = NULL;
    CHECK_INT(cudaStreamEndCapture(s, &g), 0);
    cudaGraphExec_t exec = NULL;
    CHECK_INT(cudaGraphInstantiate(&exec, g, 0), 0);
    cudaStreamSynchronize(s);
    cudaMemcpy(host, x, sizeof host, cudaMemcpyDeviceToHost);
    CHECK_INT(host[0], 0);      /* nothing ran at capture */
    for (int i = 0; i < 3; i++)
        CHECK_INT(cudaGraphLaunch(exec, s), 0);
    cudaStreamSynchronize(s);
    cudaMemcpy(host, x, sizeof host, cudaMemcpyDeviceToHost);
    CHECK_INT(host[3], 9);
    /* illegal calls during a capture: the real errors, and the capture is invalidated */
    CHECK_INT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), 0);
    void *p = NULL;
    CHECK_INT(cudaMalloc(&p, 16), cudaErrorStreamCaptureUnsupported);
    CHECK_INT(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    cudaGraph_t bad = NULL;
    CHECK_INT(cudaStreamEndCapture(s, &bad), cudaErrorStreamCaptureInvalidated);
    CHECK(bad == NULL);
    CHECK_INT(cudaStreamBeginCapture(NULL, cudaStreamCaptureModeRelaxed), cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaFree(x);
    cudaStreamDestroy(s);
}

/* An event outlives the stream it was recorded on: queried, waited for and destroyed after it
 * (the emulator once followed the freed stream and hung). */
static void check_event_after_stream(void)
{
    cudaStream_t s;
    cudaEvent_t e;
    CHECK_INT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), 0);
    CHECK_INT(cudaEventCreate(&e), 0);
    int *x;
    cudaMalloc((void **)&x, sizeof *x);
    add_one<<<1, 1, 0, s>>>(x, 1);
    CHECK_INT(cudaEventRecord(e, s), 0);
    CHECK_INT(cudaStreamDestroy(s), 0);
    CHECK_INT(cudaEventQuery(e), cudaSuccess);
    CHECK_INT(cudaEventSynchronize(e), cudaSuccess);
    CHECK_INT(cudaEventDestroy(e), cudaSuccess);
    cudaFree(x);
}

int main(void)
{
    check_shuffles();
    check_half();
    check_shared_limit();
    check_graphs();
    check_event_after_stream();
    return check_finish();
}
