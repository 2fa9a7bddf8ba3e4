/* wide_vector_clones: WIDE_VECTOR_CLONES before a function definition makes GCC on x86-64 also
 * build an x86-64-v3 (AVX2, FMA) copy of it, picked at load time when the CPU has it: the same C
 * vectorises twice as wide. In ISO C mode GCC fuses no multiply-adds (-ffp-contract=off), so
 * both copies give the same bits. Not under ThreadSanitizer: the clones' resolver runs at load
 * time, before the TSan runtime is up, and crashes the program. */
#ifndef KIMI_KERNELS_CPU_WIDE_VECTOR_CLONES_H
#define KIMI_KERNELS_CPU_WIDE_VECTOR_CLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    !defined(__SANITIZE_THREAD__)
#define WIDE_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define WIDE_VECTOR_CLONES
#endif

#endif
