/* fiber: the context switch of the emulator's CUDA threads (x86-64 System V): the callee-saved
 * registers on the fiber's own stack. MXCSR and the x87 control word are not switched: no
 * kernel changes the rounding mode, every fiber runs with its worker thread's, and saving and
 * loading them took four fifths of each switch (fldcw and ldmxcsr serialise the pipeline). */
#ifndef KIMI_EMU_FIBER_H
#define KIMI_EMU_FIBER_H

#include <stddef.h>

#if !defined(__x86_64__)
#error "tests/emu: the fiber switch is written for x86-64"
#endif

extern "C" void emu_fiber_switch(void **save_sp, void *next_sp);

/* A new fiber's saved stack pointer: switching to it enters entry() on the stack [base, base + size). */
void *emu_fiber_prepare(char *base, size_t size, void (*entry)());

#endif
