/* kimi-linear-bench: the speed of the CPU GEMV (linear_rows, one token) in CPU cycles per
 * 16-weight block, measured in this thread's CPU time so other processes on a shared machine do
 * not distort it. "cache": a matrix that fits in L2, so the number is the kernel's compute cost;
 * "memory": one far larger than the last-level cache, read once per pass, so it shows whether
 * the kernel keeps up with DRAM (GB/s by CPU time and by wall time). The clock is measured with
 * a chain of dependent integer additions (one per cycle on any out-of-order x86 core). "moe": the
 * bench model's MoE step (tests/bench/mkmodel.c, preset bench): nine experts' gate and up
 * (512 x 2048) and down (2048 x 512) NVFP4 products a pass, the experts taken in turn from 64
 * (113 MiB), so their weights come from memory as in a decode step.
 *
 * usage: kimi-linear-bench [--simd LEVEL] [--int8]
 *   --simd LEVEL  kernels/cpu/linear.h: 0 the portable loops, 1 AVX-512F/BW (NVFP4 only), 2 AVX-512
 *                 VBMI; default: the best
 *   --int8        NVFP4 with int8 activations (kernels/cpu/linear_int8.h, --cpu-activations int8) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_int8.h"
#include "tests/unit/xorshift.h"

/* linear_rows, or linear_rows_int8 with --int8. */
static void (*product)(const weight_matrix *, const float *, size_t, int, float *, size_t, int, int) = linear_rows;

static double seconds(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Cycles per second of this thread: 8 dependent additions per iteration. */
static double clock_hz(void)
{
    const long iterations = 50000000;
    uint64_t value = 0;
    double t0 = seconds(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < iterations; i++) {
#if defined(__x86_64__) && defined(__GNUC__)
        __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                         "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                         : "+r"(value));
#else
        value += 8;
#endif
    }
    double elapsed = seconds(CLOCK_THREAD_CPUTIME_ID) - t0;
    return value == (uint64_t)iterations * 8 ? 8.0 * (double)iterations / elapsed : 0.0;
}

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint8_t random_byte(void)
{
    return (uint8_t)(xorshift64(&rng_state) >> 32);
}

/* A random matrix [rows][cols] of the format; bf16 values and e4m3 scales of sane size. */
static weight_matrix make_matrix(weight_format format, int rows, int cols, uint8_t **data, uint8_t **scale)
{
    size_t row_bytes = format == WEIGHT_NVFP4 ? (size_t)cols / 2 : (size_t)cols * 2;
    *data = malloc((size_t)rows * row_bytes);
    *scale = format == WEIGHT_NVFP4 ? malloc((size_t)rows * (size_t)cols / 16) : NULL;
    if (!*data || (format == WEIGHT_NVFP4 && !*scale))
        return (weight_matrix){0};
    for (size_t i = 0; i < (size_t)rows * row_bytes; i++)
        (*data)[i] = format == WEIGHT_BF16 && i % 2 ? (uint8_t)(0x3C + random_byte() % 8) : random_byte();
    for (size_t i = 0; format == WEIGHT_NVFP4 && i < (size_t)rows * (size_t)cols / 16; i++)
        (*scale)[i] = (uint8_t)(0x20 + random_byte() % 0x30);
    return (weight_matrix){format, rows, cols, *data, row_bytes, *scale, (size_t)cols / 16,
                           format == WEIGHT_NVFP4 ? 0.01f : 1.0f};
}

static size_t matrix_bytes(const weight_matrix *w)
{
    return (size_t)w->rows * (w->data_stride + (w->scale ? w->scale_stride : 0));
}

/* Passes over w for at least min_seconds of thread CPU time; cycles per block and GB/s. */
static int measure(const char *name, weight_format format, int rows, int cols, double min_seconds, double hz)
{
    uint8_t *data, *scale;
    weight_matrix w = make_matrix(format, rows, cols, &data, &scale);
    float *x = malloc((size_t)cols * sizeof *x), *y = malloc((size_t)rows * sizeof *y);
    if (!w.data || !x || !y) {
        fprintf(stderr, "kimi-linear-bench: out of memory for %s\n", name);
        return 1;
    }
    for (int k = 0; k < cols; k++)
        x[k] = (float)(random_byte() % 200) / 100.0f - 1.0f;
    product(&w, x, (size_t)cols, 1, y, (size_t)rows, 0, rows); /* warm: caches, tables */
    long passes = 0;
    double cpu0 = seconds(CLOCK_THREAD_CPUTIME_ID), wall0 = seconds(CLOCK_MONOTONIC), cpu = 0;
    while (cpu < min_seconds) {
        product(&w, x, (size_t)cols, 1, y, (size_t)rows, 0, rows);
        passes++;
        cpu = seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    }
    double wall = seconds(CLOCK_MONOTONIC) - wall0;
    double blocks = (double)passes * rows * (cols / 16), bytes = (double)passes * (double)matrix_bytes(&w);
    printf("%-7s %-6s %5d x %-5d %8.1f KiB  %6.2f cycles/block  %6.2f GB/s (cpu time)  %6.2f GB/s (wall)  check %g\n",
           name, format == WEIGHT_NVFP4 ? "nvfp4" : "bf16", rows, cols, (double)matrix_bytes(&w) / 1024.0,
           cpu * hz / blocks, bytes / cpu / 1e9, bytes / wall / 1e9, (double)y[rows / 2]);
    free(data);
    free(scale);
    free(x);
    free(y);
    return 0;
}

/* The "moe" case above, for at least min_seconds of thread CPU time. */
static int measure_moe(double min_seconds, double hz)
{
    enum { EXPERTS = 64, ACTIVE = 9, HIDDEN = 2048, INTER = 512 };
    weight_matrix w[EXPERTS][3];
    uint8_t *data[EXPERTS][3], *scale[EXPERTS][3];
    int failed = 0;
    for (int e = 0; e < EXPERTS; e++)
        for (int m = 0; m < 3; m++) {
            w[e][m] = make_matrix(WEIGHT_NVFP4, m < 2 ? INTER : HIDDEN, m < 2 ? HIDDEN : INTER, &data[e][m],
                                  &scale[e][m]);
            failed |= !w[e][m].data;
        }
    float *x = malloc(HIDDEN * sizeof *x), *act = malloc(2 * INTER * sizeof *act), *y = malloc(HIDDEN * sizeof *y);
    if (failed || !x || !act || !y) {
        fprintf(stderr, "kimi-linear-bench: out of memory for moe\n");
        return 1;
    }
    for (int k = 0; k < HIDDEN; k++)
        x[k] = (float)(random_byte() % 200) / 100.0f - 1.0f;
    long passes = 0, next = 0;
    double cpu0 = seconds(CLOCK_THREAD_CPUTIME_ID), wall0 = seconds(CLOCK_MONOTONIC), cpu = 0;
    while (cpu < min_seconds) {
        for (int i = 0; i < ACTIVE; i++, next = (next + 1) % EXPERTS) {
            product(&w[next][0], x, HIDDEN, 1, act, INTER, 0, INTER);
            product(&w[next][1], x, HIDDEN, 1, act + INTER, INTER, 0, INTER);
            product(&w[next][2], act, INTER, 1, y, HIDDEN, 0, HIDDEN);
        }
        passes++;
        cpu = seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    }
    double wall = seconds(CLOCK_MONOTONIC) - wall0;
    double blocks = (double)passes * ACTIVE * 3 * INTER * (HIDDEN / 16);
    double bytes = (double)passes * ACTIVE * 3 * (double)matrix_bytes(&w[0][0]);
    printf("moe     nvfp4  %d x (%dx%d, %dx%d, %dx%d)  %6.2f cycles/block  %6.2f GB/s (cpu time)  %6.2f GB/s (wall)  "
           "check %g\n", ACTIVE, INTER, HIDDEN, INTER, HIDDEN, HIDDEN, INTER, cpu * hz / blocks, bytes / cpu / 1e9,
           bytes / wall / 1e9, (double)y[HIDDEN / 2]);
    for (int e = 0; e < EXPERTS; e++)
        for (int m = 0; m < 3; m++) {
            free(data[e][m]);
            free(scale[e][m]);
        }
    free(x);
    free(act);
    free(y);
    return 0;
}

int main(int argc, char **argv)
{
    int level = LINEAR_SIMD_BEST;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--simd") == 0 && i + 1 < argc && argv[i + 1][0] >= '0' &&
            argv[i + 1][0] <= '0' + LINEAR_SIMD_BEST && !argv[i + 1][1]) {
            level = argv[++i][0] - '0';
        } else if (strcmp(argv[i], "--int8") == 0) {
            product = linear_rows_int8;
        } else {
            fprintf(stderr, "kimi-linear-bench: unknown argument '%s'; usage: kimi-linear-bench [--simd 0-%d] [--int8]\n",
                    argv[i], LINEAR_SIMD_BEST);
            return 2;
        }
    }
    level = linear_use_simd(level);
    double hz = clock_hz();
    printf("clock %.2f GHz (thread CPU time), SIMD level %d, %s activations\n", hz / 1e9, level,
           product == linear_rows ? "fp32" : linear_int8_simd() ? "int8 (AVX-512 VNNI)" : "int8 (portable)");
    int rc = 0;
    rc |= measure("cache", WEIGHT_NVFP4, 256, 2048, 1.0, hz);     /* 288 KiB */
    rc |= measure("cache", WEIGHT_NVFP4, 1024, 512, 1.0, hz);     /* 288 KiB: short rows (MoE down) */
    rc |= measure("cache", WEIGHT_BF16, 96, 2048, 1.0, hz);       /* 384 KiB */
    rc |= measure("memory", WEIGHT_NVFP4, 65536, 4096, 2.0, hz);  /* 144 MiB */
    rc |= measure("memory", WEIGHT_BF16, 16384, 4096, 2.0, hz);   /* 128 MiB */
    rc |= measure_moe(2.0, hz);
    return rc;
}
