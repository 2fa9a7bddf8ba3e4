/* fiber: see fiber.h. */
#include "fiber.h"

#include <stdint.h>
#include <string.h>

asm(R"(
    .text
    .globl emu_fiber_switch
    .type emu_fiber_switch, @function
emu_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_fiber_switch, .-emu_fiber_switch
    .section .note.GNU-stack,"",@progbits
    .text
)");

void *emu_fiber_prepare(char *base, size_t size, void (*entry)())
{
    uintptr_t top = ((uintptr_t)base + size) & ~(uintptr_t)15;
    uint64_t *ret = (uint64_t *)(top - 16);     /* entry starts with rsp = top - 8, as after a call */
    ret[0] = (uint64_t)(uintptr_t)entry;
    ret[1] = 0;
    uint64_t *frame = ret - 6;                  /* r15, r14, r13, r12, rbx, rbp */
    memset(frame, 0, 6 * sizeof *frame);
    return frame;
}
