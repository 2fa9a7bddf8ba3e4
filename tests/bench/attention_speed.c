/* kimi-attention-bench: the CPU decode attention (kernels/cpu/mla_attention.h, mla_decode) of one
 * token on the bench model's shape (tests/bench/mkmodel.c, preset bench: 16 heads, kv_lora 512,
 * rope 64, nope 128, v 128, BF16 kv_b, 12 layers, fp16 cache), in milliseconds of this thread's
 * CPU time per token (the least of several rounds), so other processes on a shared machine
 * distort it less. Each layer has its own kv_b (4 MiB) and cache, flushed from the caches before
 * every token as a decode step's other weights would; "workers 2" runs the heads in two calls of
 * eight, the work of each of two threads. The pieces are timed alone too: the absorption
 * (W_UK^T q_nope, linear_transposed_accumulate), the partial attention over the cache
 * (mla_decode_partial) and W_UV.
 *
 * usage: kimi-attention-bench [--simd LEVEL] [--ctx N] [--rounds N] [--only PIECE]
 *   --simd LEVEL  kernels/cpu/linear.h: 0 the portable loops, 1 AVX-512F/BW, 2 AVX-512 VBMI;
 *                 default: the best
 *   --ctx N       cached positions (default 256)
 *   --rounds N    rounds of 0.1 s per figure (default 10)
 *   --only PIECE  decode, absorb, partial or apply_uv alone */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/attention_merge_math.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/xorshift.h"

enum { LAYERS = 12, HEADS = 16, KV_LORA = 512, ROPE = 64, NOPE = 128, V = 128 };
enum { KV_B_ROWS = HEADS * (NOPE + V), Q_WIDTH = NOPE + ROPE, ROW = KV_LORA + ROPE };

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static float uniform(void)
{
    return (float)((xorshift64(&rng_state) >> 11) % 2000001) / 1000000.0f - 1.0f;
}

typedef struct {
    const mla_shape *s;
    weight_matrix kv_b[LAYERS];
    const uint16_t *cache[LAYERS];  /* [ctx][ROW] each */
    long ctx;
    const float *q;                 /* [HEADS][Q_WIDTH] */
    float *scratch;                 /* [mla_decode_scratch_floats(s, HEADS)] */
    float *q_abs;                   /* [HEADS][KV_LORA + ROPE] */
    float *parts;                   /* [HEADS][ATTENTION_PART_FLOATS(KV_LORA)] */
    float *out;                     /* [HEADS][V] */
    const float *evict;             /* [evict_floats], zeros */
    size_t evict_floats;
    float flushed;                  /* what flush_caches read, so that the reads stay */
} bench;

enum { WHOLE, ABSORB, PARTIAL, APPLY_UV, PIECES };
static const char *const piece_names[PIECES] = {"decode", "absorb", "partial", "apply_uv"};

/* One token's `what` over every layer, the heads in `workers` calls. */
static void token(const bench *b, int what, int workers)
{
    size_t part_floats = ATTENTION_PART_FLOATS(KV_LORA);
    for (int layer = 0; layer < LAYERS; layer++)
        for (int w = 0; w < workers; w++) {
            int h0 = HEADS * w / workers, h1 = HEADS * (w + 1) / workers;
            switch (what) {
            case WHOLE:
                mla_decode(b->s, &b->kv_b[layer], h0, h1, b->q, b->cache[layer], b->ctx, b->scratch, b->out);
                break;
            case ABSORB:
                mla_absorb_query(b->s, &b->kv_b[layer], h0, h1, b->q, b->q_abs);
                break;
            case PARTIAL:
                mla_decode_partial(b->s, b->q_abs, h1 - h0, b->cache[layer], b->ctx, b->scratch, b->parts);
                break;
            case APPLY_UV:
                for (int h = h0; h < h1; h++)
                    mla_apply_uv(b->s, &b->kv_b[layer], h, b->parts + (size_t)h * part_floats + 2, b->out + h * V);
                break;
            }
        }
}

/* Reads `bytes` of `evict` (far more than the last-level cache), as a decode step's other weights
 * would between one token's attention of a layer and the next one's: kv_b and the cache then come
 * from memory. */
static float flush_caches(const float *evict, size_t floats)
{
    float sum = 0.0f;
    for (size_t i = 0; i < floats; i += 16)
        sum += evict[i];
    return sum;
}

/* Milliseconds of CPU time per token: the least of `rounds` rounds of at least 0.1 s each (the
 * machine's other load only ever adds time); the caches are flushed before every token, untimed. */
static double measure(bench *b, int what, int workers, int rounds)
{
    double best = 0;
    for (int round = 0; round < rounds; round++) {
        long tokens = 0;
        double elapsed = 0;
        while (elapsed < 0.1) {
            b->flushed += flush_caches(b->evict, b->evict_floats);
            double t0 = cpu_seconds();
            token(b, what, workers);
            elapsed += cpu_seconds() - t0;
            tokens++;
        }
        double ms = 1e3 * elapsed / (double)tokens;
        best = round == 0 || ms < best ? ms : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int level = LINEAR_SIMD_BEST;
    long ctx = 256;
    int rounds = 10, only = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--simd") == 0 && i + 1 < argc && argv[i + 1][0] >= '0' &&
            argv[i + 1][0] <= '0' + LINEAR_SIMD_BEST && !argv[i + 1][1]) {
            level = argv[++i][0] - '0';
        } else if (strcmp(argv[i], "--ctx") == 0 && i + 1 < argc && atol(argv[i + 1]) > 0) {
            ctx = atol(argv[++i]);
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            rounds = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            i++;
            for (int p = 0; p < PIECES; p++)
                only = strcmp(argv[i], piece_names[p]) == 0 ? p : only;
            if (only < 0) {
                fprintf(stderr, "kimi-attention-bench: --only '%s': not decode, absorb, partial or apply_uv\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "kimi-attention-bench: unknown argument '%s'; usage: kimi-attention-bench [--simd 0-%d] "
                    "[--ctx N] [--rounds N] [--only PIECE]\n", argv[i], LINEAR_SIMD_BEST);
            return 2;
        }
    }
    level = linear_use_simd(level);
    mla_shape s = {KV_LORA, ROPE, NOPE, V, 0.0721f, KV_CACHE_FP16};
    bench b = {.s = &s, .ctx = ctx};
    uint16_t *kv_b = malloc((size_t)LAYERS * KV_B_ROWS * KV_LORA * sizeof *kv_b);
    uint16_t *cache = malloc((size_t)LAYERS * ctx * ROW * sizeof *cache);
    float *q = malloc(HEADS * Q_WIDTH * sizeof *q);
    b.scratch = malloc(mla_decode_scratch_floats(&s, HEADS) * sizeof(float));
    b.q_abs = malloc((size_t)HEADS * (KV_LORA + ROPE) * sizeof(float));
    b.parts = malloc((size_t)HEADS * ATTENTION_PART_FLOATS(KV_LORA) * sizeof(float));
    b.out = malloc(HEADS * V * sizeof(float));
    b.evict_floats = (size_t)96 << 20 >> 2;
    b.evict = calloc(b.evict_floats, sizeof(float));
    if (!b.evict || !kv_b || !cache || !q || !b.scratch || !b.q_abs || !b.parts || !b.out) {
        fprintf(stderr, "kimi-attention-bench: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < (size_t)LAYERS * KV_B_ROWS * KV_LORA; i++) {
        float value = uniform() * 0.05f;
        uint32_t bits;
        memcpy(&bits, &value, sizeof bits);
        kv_b[i] = (uint16_t)(bits >> 16);
    }
    for (size_t i = 0; i < (size_t)LAYERS * ctx * ROW; i++)
        cache[i] = float_to_f16(uniform() * 2.0f);
    for (int i = 0; i < HEADS * Q_WIDTH; i++)
        q[i] = uniform();
    b.q = q;
    for (int layer = 0; layer < LAYERS; layer++) {
        b.kv_b[layer] = (weight_matrix){WEIGHT_BF16, KV_B_ROWS, KV_LORA,
                                        (const uint8_t *)(kv_b + (size_t)layer * KV_B_ROWS * KV_LORA), KV_LORA * 2,
                                        NULL, 0, 1.0f};
        b.cache[layer] = cache + (size_t)layer * ctx * ROW;
    }
    mla_absorb_query(&s, &b.kv_b[0], 0, HEADS, q, b.q_abs);
    printf("SIMD level %d, ctx %ld, %d layers: ms of thread CPU time per token\n", level, ctx, LAYERS);
    for (int p = 0; p < PIECES; p++)
        if (only < 0 || only == p) {
            double one = measure(&b, p, 1, rounds), two = measure(&b, p, 2, rounds);
            printf("%-9s workers 1 %6.3f  workers 2 %6.3f\n", piece_names[p], one, two);
        }
    printf("check %g %g\n", (double)b.out[HEADS * V / 2], (double)b.flushed);
    free(kv_b), free(cache), free(q), free(b.scratch), free(b.q_abs), free(b.parts), free(b.out), free((float *)b.evict);
    return 0;
}
