/* Stand-in for <cuda_runtime.h>: the runtime API plus, in C++, the device side of the CPU
 * emulation (tests/emu/emu_device.h). */
#ifndef KIMI_EMU_CUDA_RUNTIME_H
#define KIMI_EMU_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
#include "emu_device.h"
#endif

#endif
