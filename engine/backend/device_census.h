/* device_census: what the CUDA devices ran, counted by the CPU emulation of CUDA (tests/emu,
 * the cuemu build) for kimi-probe bench --census: kernel launches, graph nodes, collectives and
 * their bytes, and the bytes each kernel read from device memory. The real CUDA runtime counts
 * none of it: there device_census_begin fails with a line that says so (no figure is made up). */
#ifndef KIMI_DEVICE_CENSUS_H
#define KIMI_DEVICE_CENSUS_H

#include "engine/base/error.h"

enum { DEVICE_CENSUS_KERNELS = 64, DEVICE_CENSUS_NAME = 64 };

typedef struct {
    char name[DEVICE_CENSUS_NAME];
    unsigned long long launches, bytes_read;
} device_census_kernel;

typedef struct {
    unsigned long long launches;        /* kernels run, launched or replayed in a graph */
    unsigned long long graph_launches, graph_nodes;
    unsigned long long collectives, collective_bytes;   /* NCCL calls on the device, their payload */
    unsigned long long copies, copy_bytes;              /* memcpy, memset */
    unsigned long long bytes_read;      /* the kernels' loads from device memory: per launch, the
                                           distinct 4 KiB pages first read (tests/emu/include/cuemu.h) */
    device_census_kernel kernels[DEVICE_CENSUS_KERNELS];   /* by name */
    int n_kernels;
} device_census;

/* Starts counting on every device (resets the counters). KIMI_ERR_USAGE, naming --census, on a
 * build that cannot count (real CUDA, or no CUDA). */
int device_census_begin(kimi_err *err);
/* Stops counting and fills out with device's counts since device_census_begin. */
int device_census_end(int device, device_census *out, kimi_err *err);

#endif
