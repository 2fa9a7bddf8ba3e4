/* Stand-in for <cuda_bf16.h>: __nv_bfloat16 with the CUDA conversion rules (tests/emu/emu_half.h). */
#ifndef KIMI_EMU_CUDA_BF16_H
#define KIMI_EMU_CUDA_BF16_H
#include "emu_half.h"
#endif
