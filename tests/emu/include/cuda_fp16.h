/* Stand-in for <cuda_fp16.h>: __half with the CUDA conversion rules (tests/emu/emu_half.h). */
#ifndef KIMI_EMU_CUDA_FP16_H
#define KIMI_EMU_CUDA_FP16_H
#include "emu_half.h"
#endif
