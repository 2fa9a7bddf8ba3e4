/* device_census: see device_census.h. */
#include "engine/backend/device_census.h"

#include <stdio.h>
#include <string.h>

#ifdef KIMI_CUDA_EMU
#include <cuemu.h>

int device_census_begin(kimi_err *err)
{
    if (cuemu_census_begin())
        return kimi_fail(err, KIMI_ERR_STATE, "--census: a census is already being taken");
    return 0;
}

int device_census_end(int device, device_census *out, kimi_err *err)
{
    cuemu_device_census counts;
    cuemu_kernel_census kernels[DEVICE_CENSUS_KERNELS];
    int n = cuemu_census_read(device, &counts, kernels, DEVICE_CENSUS_KERNELS);
    cuemu_census_end();
    if (n < 0)
        return kimi_fail(err, KIMI_ERR_USAGE, "--census: device %d does not exist", device);
    if (n > DEVICE_CENSUS_KERNELS)
        return kimi_fail(err, KIMI_ERR_STATE, "--census: %d kernels ran, more than the %d the census lists", n,
                         DEVICE_CENSUS_KERNELS);
    memset(out, 0, sizeof *out);
    out->launches = counts.launches;
    out->graph_launches = counts.graph_launches;
    out->graph_nodes = counts.graph_nodes;
    out->collectives = counts.collectives;
    out->collective_bytes = counts.collective_bytes;
    out->copies = counts.copies;
    out->copy_bytes = counts.copy_bytes;
    out->bytes_read = counts.bytes_read;
    out->n_kernels = n;
    for (int i = 0; i < n; i++) {
        _Static_assert(sizeof out->kernels[i].name == sizeof kernels[i].name, "the same name length");
        memcpy(out->kernels[i].name, kernels[i].name, sizeof kernels[i].name);
        out->kernels[i].launches = kernels[i].launches;
        out->kernels[i].bytes_read = kernels[i].bytes_read;
    }
    return 0;
}

#else

int device_census_begin(kimi_err *err)
{
    return kimi_fail(err, KIMI_ERR_USAGE,
                     "--census: this build runs the real CUDA runtime (or none), which counts no launches or bytes "
                     "read per kernel; build the CPU emulation of CUDA (cmake --preset cuemu) for the census");
}

int device_census_end(int device, device_census *out, kimi_err *err)
{
    (void)device;
    memset(out, 0, sizeof *out);
    return device_census_begin(err);
}

#endif
