/* decode_table: bench_gpu's account of one decoded token on one tensor-parallel rank, item by
 * item of issue 20's table (MLA split merge, decode attention, absorb_q, NVFP4 GEMV, launches,
 * norms, all-reduces, uneven waves, and the BF16 projections, router, dense MLP and lm_head that
 * complete the step). Each kernel item is timed through the public launchers of
 * kernels/cuda/forward.h at the rank's shapes (the model config split over tp ranks), several
 * instances captured back to back in one graph on weight copies that together exceed the L2
 * cache; its count per token comes from the config (layers, dense and MoE layers). Printed per
 * item and per context (0 / 32k / 128k positions): the measured us per token, the floor (the
 * bytes it must move / the measured copy bandwidth), their ratio, and the projection for 8x RTX
 * PRO 6000 Blackwell; then the totals (ms/token, tok/s) next to the goals and the seeds'
 * deployment. Speed is printed, never asserted; on the CPU emulation of CUDA the times are the
 * emulator's and say so. */
#ifndef KIMI_TESTS_GPU_DECODE_TABLE_H
#define KIMI_TESTS_GPU_DECODE_TABLE_H

#include "engine/model/config.h"

enum { DECODE_TABLE_CONTEXTS = 3 };

/* The kernel items (what one instance runs; its count per token: decode_table_count). */
typedef enum {
    ITEM_MERGE,         /* mla_decode_cuda over one key: the split merge's fixed cost */
    ITEM_ATTENTION,     /* mla_decode_cuda at the context, less ITEM_MERGE: the cache read */
    ITEM_ABSORB,        /* mla_absorb_q_rope_cuda */
    ITEM_PROJECTIONS,   /* mla_qkv_a_cuda (q_a + kv_a, norms, rope, cache row), q_b, W_UV, o_proj */
    ITEM_ROUTER,        /* moe_router_route_cuda (router GEMV + routing) */
    ITEM_EXPERTS,       /* mlp_gate_up_cuda + mlp_down_combine_cuda: top_k routed + shared expert, NVFP4 */
    ITEM_DENSE,         /* mlp_gate_up_cuda + mlp_down_cuda of a dense layer, NVFP4 */
    ITEM_NORMS,         /* residual_rmsnorm_cuda */
    ITEM_LM_HEAD,       /* the lm_head rows' GEMV */
    DECODE_TABLE_ITEMS
} decode_table_item;

typedef struct {
    const char *source;         /* what the config came from, for the header */
    int tp;                     /* ranks the config is split over (the table is rank 0's) */
    double copy_bandwidth;      /* bytes per second, read + write (bench_gpu's cudaMemcpy) */
    double allreduce_s;         /* one all-reduce of `hidden` floats over allreduce_ranks devices; <= 0: none */
    int allreduce_ranks;
    int quick;                  /* fewer instances and replays (the emulated test) */
} decode_table_options;

typedef struct {
    long contexts[DECODE_TABLE_CONTEXTS];
    double seconds[DECODE_TABLE_ITEMS][DECODE_TABLE_CONTEXTS];  /* one instance */
    double launches[DECODE_TABLE_ITEMS];                         /* kernels of one instance */
    double bytes[DECODE_TABLE_ITEMS][DECODE_TABLE_CONTEXTS];     /* one instance's floor bytes */
    double empty_s;             /* one empty kernel inside a graph */
    int hidden, q_lora, kv_lora, experts;   /* the shapes of rank 0 (a model compared must have them) */
    int heads, moe_inter, dense_inter, vocab_rows, splits, sm_count;
    int emulated;
} decode_table;

/* Instances of item per token of a model with config cfg (the lm_head: with_logits). */
int decode_table_count(const model_config *cfg, decode_table_item item, int with_logits);

/* Measures every item at cfg's shapes split over opt->tp ranks on device 0 and prints the table.
 * Returns 0, or 1 with a line on stdout naming what failed. */
int decode_table_run(const model_config *cfg, const decode_table_options *opt, decode_table *out);

/* The decode step of a checkpoint whose per-rank shapes are the table's (model: its config, TP 1)
 * against the items at its counts: step_s[i] seconds per step without logits at context i;
 * prints the unexplained remainder per context. */
void decode_table_compare(const decode_table *t, const model_config *model, const double step_s[DECODE_TABLE_CONTEXTS]);

#endif
