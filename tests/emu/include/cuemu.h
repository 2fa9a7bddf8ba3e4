/* cuemu: the census of the CPU emulation of CUDA (tests/emu/runtime.cpp), which kimi-probe bench
 * --census reads: what each emulated device ran between cuemu_census_begin and
 * cuemu_census_end. Exists only in the cuemu build (KIMI_CUDA_EMU); the real runtime has no
 * such counters. */
#ifndef KIMI_EMU_CUEMU_H
#define KIMI_EMU_CUEMU_H

#ifdef __cplusplus
extern "C" {
#endif

enum { CUEMU_KERNEL_NAME = 64 };

typedef struct {
    unsigned long long launches;        /* kernels run, launched directly or as graph nodes */
    unsigned long long graph_launches;  /* cudaGraphLaunch replays */
    unsigned long long graph_nodes;     /* nodes those replays ran (kernels, copies, collectives) */
    unsigned long long collectives;     /* NCCL collectives and sends/receives */
    unsigned long long collective_bytes; /* their payload: an all-reduce's buffer, a send's bytes */
    unsigned long long copies, copy_bytes; /* memcpy and memset */
    unsigned long long bytes_read;      /* global memory kernels read: see cuemu_kernel_census */
} cuemu_device_census;

/* One kernel (by name) on one device. bytes_read: the distinct 4 KiB pages of device memory whose
 * first access in a launch was a load, times 4096, summed over its launches: while the census
 * is on, each launch starts with its device's memory protected and the fault of each page's
 * first access is counted (a page first written is not; a page read twice within one launch
 * counts once, as a perfect cache would serve the second read; copies and collectives are not
 * kernels and count nothing here). */
typedef struct {
    char name[CUEMU_KERNEL_NAME];
    unsigned long long launches, bytes_read;
} cuemu_kernel_census;

/* Resets every counter and starts counting (device memory allocated before this call is the
 * memory whose reads are counted). Returns 0, or -1 when the census is already on. */
int cuemu_census_begin(void);
/* Device's counters since cuemu_census_begin; up to max_kernels kernel rows into kernels (by
 * name), their count returned (all of them, which may exceed max_kernels); -1 for a device that
 * does not exist. */
int cuemu_census_read(int device, cuemu_device_census *out, cuemu_kernel_census *kernels, int max_kernels);
/* Stops counting and gives device memory its access back. */
void cuemu_census_end(void);

#ifdef __cplusplus
}
#endif

#endif
