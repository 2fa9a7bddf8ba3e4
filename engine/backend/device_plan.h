/* device_plan: where one tensor-parallel rank's shard lives in device memory, in plain C so the
 * CPU tests cover it: the packed layout every weight is repacked to at load (dense rows whose
 * pitch is a multiple of 16 bytes, zero padding, so a warp reads a row in aligned 16-byte
 * chunks), the list of a rank's weights in upload order, the activation workspace, the byte
 * plan (weights + cache + workspace), which device each rank runs on (--devices), and the
 * memory plan over those devices that decides the largest context that fits. */
#ifndef KIMI_DEVICE_PLAN_H
#define KIMI_DEVICE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/error.h"
#include "engine/model/weights.h"

enum {
    DEVICE_ALIGN = 256,
    DEVICE_MAX_TOKENS = 64,     /* tokens of a step with logits, and of every step of KIMI_CUDA_PREFILL=steps
                                 * (kernels/cuda/forward.h FORWARD_MAX_TOKENS) */
    DEVICE_PREFILL_TOKENS = 512,    /* tokens of a long prefill step (GEMM path, no logits): each expert read once */
    DEVICE_GEMM_MIN_TOKENS = 16,    /* steps of this many tokens or more run their projections as GEMMs */
    /* an expert with this many of a step's tokens runs them as BF16 GEMMs (about 14 launches
     * and its weights dequantised once); fewer stay on the grouped GEMV, whose cost grows with
     * the tokens: the break-even estimated on an H200, not measured */
    DEVICE_EXPERT_GEMM_MIN_TOKENS = 64,
    DEVICE_EXPERT_GEMM_ROW_STEP = 32,   /* an expert's GEMM rows are padded to a multiple of this */
    DEVICE_ATTENTION_ROWS = 16, /* query rows (token, head) of one prefill attention block (MLA_PREFILL_ROWS) */
    DEVICE_GEMM_TILE_MAX_ELEMS = 8 << 20,   /* BF16 weights dequantised per GEMM, at most (16 MiB) */
    DEVICE_GEMM_TILE_MAX_ROWS = 65535 / 64 * 64,    /* rows of one such tile: bf16_dequantise_cuda's grid (one
                                                     * row per block row, at most 65535), whole 64s */
    DEVICE_GEMM_SCRATCH_BYTES = 16 << 20,   /* the cuBLASLt workspace */
};

/* A view's packed copy: data [rows][data_pitch] then scales [rows][scale_pitch] (NVFP4). */
typedef struct {
    size_t data_pitch, scale_pitch;     /* bytes per row, multiples of 16 */
    size_t data_bytes, scale_bytes;     /* each rounded up to DEVICE_ALIGN */
    size_t bytes;                       /* data_bytes + scale_bytes */
} packed_layout;

void packed_layout_of(const weight_matrix *view, packed_layout *out);

/* Rows [row_begin, row_end) of view, packed, written at row 0 of data_out/scale_out (scale_out
 * is ignored unless NVFP4); padding bytes are zero. */
void packed_rows_write(const weight_matrix *view, const packed_layout *layout, int row_begin, int row_end,
                       uint8_t *data_out, uint8_t *scale_out);

/* The checkpoint bytes rows [row_begin, row_end) of view occupy: data [0], then scales [1]
 * (NVFP4; else an empty span), as [begin, end) addresses, for readahead hints on the mmap. */
typedef struct {
    const uint8_t *begin, *end;
} byte_span;
void packed_rows_source(const weight_matrix *view, int row_begin, int row_end, byte_span spans[2]);

/* The view of a packed copy at data/scale (device or host addresses). */
weight_matrix packed_view(const weight_matrix *view, const packed_layout *layout, const uint8_t *data,
                          const uint8_t *scale);

/* The rank's weight matrices, in the order they are uploaded. */
typedef enum {
    DW_Q_A, DW_KV_A, DW_Q_B, DW_KV_B, DW_O, DW_ROUTER,
    DW_DENSE_GATE, DW_DENSE_UP, DW_DENSE_DOWN,
    DW_SHARED_GATE, DW_SHARED_UP, DW_SHARED_DOWN,
    DW_EXPERT_GATE, DW_EXPERT_UP, DW_EXPERT_DOWN,
    DW_LM_HEAD,
} device_weight_role;

typedef struct {
    device_weight_role role;
    int layer;                  /* -1 for lm_head */
    int expert;                 /* DW_EXPERT_*: the expert; else -1 */
    weight_matrix view;         /* this rank's view of the checkpoint tensor (host, mmap) */
} device_weight;

/* Calls visit for each weight of the shard in upload order; stops at (and returns) the first
 * non-zero return. */
int device_weights_visit(const model_weights *mw, const tp_shard *shard,
                         int (*visit)(void *ctx, const device_weight *w), void *ctx);

/* Float vectors a rank keeps on the device (norm weights, router biases, decoded to float). */
size_t device_vector_floats(const model_config *cfg);

/* The activations of one step of up to DEVICE_PREFILL_TOKENS tokens (logits_part: of up to
 * DEVICE_MAX_TOKENS), in floats (ints take a float's slot); the split-K scratch serves one-token
 * steps. */
typedef struct {
    size_t h, x, q_a, q, kv, q_latent, o_latent, attn, partial;
    size_t router_logits, chosen, route_weights, act, routed_y, shared_act, shared_y, logits_part;
    size_t moe_offsets, moe_order;  /* ints: [experts + 1], [tokens * top_k] (slots grouped by expert) */
    size_t attn_partials, gemv_partials, gemv_counters;
    size_t gemm_x;              /* BF16 [2][tokens][gemm_x_ld]: a GEMM's activations, hi then lo parts */
    size_t gemm_w;              /* BF16 [gemm_w_elems]: a dequantised NVFP4 tile (e2m1 * e4m3) */
    size_t gemm_scratch;        /* DEVICE_GEMM_SCRATCH_BYTES: the cuBLASLt workspace */
    size_t gemm_up;             /* [tokens][wider of dense and shared inter]: a GEMM MLP's up projection */
    size_t expert_x, expert_y;  /* [tokens][hidden]: one GEMM expert's gathered inputs, its down outputs */
    size_t expert_act, expert_up;   /* [tokens][moe inter]: its gate (then silu(gate) * up) and up outputs */
    size_t gemm_x_ld;           /* BF16 elements per token of gemm_x (the widest K, a multiple of 8) */
    size_t gemm_w_elems;
    size_t total;               /* floats; each buffer starts at a multiple of 64 floats */
} device_workspace;

/* The largest `rows` a GEMV of this shard has (its split-K scratch is sized for it). */
int device_max_gemv_rows(const model_config *cfg, const tp_shard *shard);

void device_workspace_plan(const model_config *cfg, const tp_shard *shard, int attn_splits, device_workspace *out);

/* How a step's projection y[t] = W x[t] (t < tokens) runs as BF16 tensor-core GEMMs with fp32
 * accumulation (kernels/cuda/gemm.h: W exact in BF16, x as hi + lo parts, two GEMMs per tile),
 * in cuBLASLt's column-major terms: for each tile of tile_rows rows of W, C[n][t] (ldc = y_token
 * floats) = alpha op_T(A)[n][k] B[k][t], A the BF16 rows of W (lda elements apart: the packed
 * pitch when W is BF16 and read in place, else the dequantised NVFP4 tile's row, alpha =
 * scale_2), B a part of the activations (ldb elements per token). */
typedef struct {
    int m, n, k;                /* tokens, rows of W, cols of W */
    int dequantise;             /* 0: BF16 rows read in place; 1: decoded to BF16 tiles first */
    int tile_rows;              /* rows of W per GEMM (n when read in place) */
    size_t lda, ldb, ldc;       /* elements */
} device_gemm_plan;

/* Plans y[t] = W x[t] for a step of `tokens` tokens (W in the packed layout, y rows y_token
 * floats apart) against a workspace planned by device_workspace_plan; returns 0, or -1 when
 * the step is too short for a GEMM to pay, W is F16/F32 (not exact in BF16), W's rows do not
 * fit the workspace's tile or K is wider than its activations (the GEMV serves those). */
int device_gemm_plan_make(const weight_matrix *w, int tokens, size_t y_token, const device_workspace *ws,
                          device_gemm_plan *out);

/* Parts of the sequence the decode attention splits into for a cache of capacity positions. */
int device_attention_splits(long capacity, int sm_count);
/* Parts per query in a step of `tokens` queries (they fill the GPU together): at least one,
 * and tokens * parts <= max(splits, tokens), which the workspace holds. */
int device_attention_splits_for(int splits, int tokens);
/* Parts of the sequence per block of DEVICE_ATTENTION_ROWS query rows in the prefill attention
 * of `tokens` queries of `heads` heads: at least one; when more than one, tokens * heads * parts
 * <= DEVICE_ATTENTION_ROWS * splits, which the workspace holds (one part needs no partials). */
int device_prefill_attention_parts(int splits, int tokens, int heads);

/* Tokens of the step at tokens[first] of a forward call of n tokens (logit_rows: the indices
 * whose logits are asked). Short steps of up to DEVICE_MAX_TOKENS, or, with long_steps (the GEMM
 * prefill), steps of up to DEVICE_PREFILL_TOKENS that hold no asked row: the logits of a step
 * are gathered for at most DEVICE_MAX_TOKENS rows, so a long step ends where a short step can
 * still reach the next asked row. */
int device_step_tokens(int first, int n, const int *logit_rows, int n_logit_rows, int long_steps);

/* The routed experts of a step grouped by expert (offsets [experts + 1]: expert e's slots are
 * order[offsets[e] .. offsets[e + 1])), split in two: experts with min_tokens slots or more run
 * as GEMMs, one by one; the others run on the grouped GEMV kernels, one launch per run of
 * consecutive such experts (trimmed of experts without slots; runs without slots are left out). */
typedef struct {
    int expert, first, count;   /* expert's slots are order[first .. first + count) */
    int rows;                   /* the GEMMs' rows: count rounded up to DEVICE_EXPERT_GEMM_ROW_STEP (at most
                                 * DEVICE_PREFILL_TOKENS), so their shapes repeat and cuBLASLt plans few */
} device_gemm_expert;
typedef struct {
    int first, count;           /* experts [first, first + count) */
} device_expert_run;
typedef struct {
    int n_gemm, gemm_slots;     /* experts in gemm[], their slots */
    int n_runs, gemv_slots;     /* runs in runs[], their slots */
} device_moe_plan;
/* gemm and runs: [experts] each; tokens: the step's (at most DEVICE_PREFILL_TOKENS, what the
 * workspace's expert buffers hold). Returns 0, or -1 when offsets do not start at 0 and ascend,
 * or an expert has more slots than the step has tokens (routing chose it twice for a token),
 * so no plan ever has more rows than the workspace holds. */
int device_moe_plan_make(const int *offsets, int experts, int tokens, int min_tokens, device_gemm_expert *gemm,
                         device_expert_run *runs, device_moe_plan *out);

typedef struct {
    size_t weight_bytes;        /* packed weights + float vectors */
    size_t packed_bytes;        /* the packed weight matrices alone (what the load stages and counts) */
    size_t workspace_bytes;
    size_t cache_bytes_per_position;
} device_rank_plan;

int device_rank_plan_make(const model_weights *mw, int tp, int rank, int attn_splits, kv_cache_format cache_format,
                          device_rank_plan *out, kimi_err *err);

/* Positions that fit when `ranks` plans share free_bytes less reserve_bytes (0 if none). */
long device_max_context(const device_rank_plan *plans, int ranks, size_t free_bytes, size_t reserve_bytes);

/* ---- devices ---- */

enum { DEVICE_MAX_RANKS = 8, DEVICE_MAX_ORDINAL = 1023 };

/* Bytes the CUDA backend keeps free on each device for the runtime, graphs and the driver. */
#define DEVICE_RESERVE_BYTES ((size_t)512 << 20)

/* "0,1,2" (--devices) into devices [DEVICE_MAX_RANKS]: ordinals as written, duplicates kept
 * (device_assign judges them); anything else is KIMI_ERR_USAGE, the message starting with
 * `what` (the flag and its value as written: "--devices 0,x"). */
int device_list_parse(const char *what, const char *text, int *devices, int *n_devices, kimi_err *err);

typedef enum {
    DEVICE_COMM_LOCAL,          /* every rank on one device, one stream (engine/backend/cuda_comm.h) */
    DEVICE_COMM_NCCL,           /* each rank its own device */
} device_comm;

typedef struct {
    int tp;
    int device[DEVICE_MAX_RANKS];   /* the device (ordinal) of rank r < tp */
    int n_distinct;                 /* devices in use: 1 (all ranks share it) or tp */
    device_comm comm;
} device_assignment;

/* Which device each of tp ranks runs on. devices [n_devices] as asked: tp distinct ordinals
 * (one per rank: NCCL), or one (every rank on it: the local communicator); NULL / 0 = the
 * first tp visible devices. total_bytes [n_visible]: each visible device's memory; the devices
 * used must all have the same. comm_request (KIMI_CUDA_COMM): NULL = as the list says, "local"
 * or "nccl" to insist (NCCL at TP 1, for tests), an error where the devices do not allow it;
 * "peer" is DEVICE_COMM_NCCL too (the backend adds the peer all-reduce, engine/backend/cuda_comm.h,
 * which it tries by default where the ranks have a device each).
 * Errors are KIMI_ERR_USAGE, one line naming --devices, --tp or KIMI_CUDA_COMM. */
int device_assign(int tp, const int *devices, int n_devices, const size_t *total_bytes, int n_visible,
                  const char *comm_request, device_assignment *out, kimi_err *err);

/* The memory plan over an assignment's devices: each device holds its ranks' weights,
 * workspaces and caches beside reserve_bytes for the runtime; the device that fits the fewest
 * positions (the tightest) decides the context. */
typedef struct {
    long max_context;               /* positions that fit on the tightest device (0: none) */
    int tightest;                   /* its ordinal */
    int ranks_on_tightest;
    size_t free_bytes;              /* free on the tightest device */
    size_t fixed_bytes;             /* its ranks' weights and workspaces + the reserve */
    size_t cache_bytes_per_position;    /* its ranks' caches together, per position */
    size_t weight_bytes, workspace_bytes;   /* the largest rank's, anywhere */
    /* For a per-rank plan (engine kv_cache_plan_context): free_bytes / ranks_on_tightest, and
     * the largest weights + workspace of its ranks + ceil(reserve / ranks_on_tightest), so
     * (rank_budget_bytes - rank_fixed_bytes) / per-rank cache never exceeds max_context. */
    size_t rank_budget_bytes, rank_fixed_bytes;
} device_memory_plan;

/* plans [a->tp] (rank r's), free_bytes indexed by device ordinal (entries of devices not in
 * the assignment are not read). */
void device_memory_plan_make(const device_rank_plan *plans, const device_assignment *a, const size_t *free_bytes,
                             size_t reserve_bytes, device_memory_plan *out);

/* ---- decode context parallelism (--dcp, engine/backend/kv_shard.h) ---- */

/* A rank's buffers of the sharded attention, beside device_workspace, for steps of up to
 * DEVICE_PREFILL_TOKENS tokens (T), heads of the rank, P = kv_lora + 2, A = kv_lora + rope: in
 * floats from the start of one allocation, each at a multiple of 64 floats. */
typedef struct {
    size_t q_abs;               /* [T][heads][A] this rank's absorbed queries */
    size_t q_group;             /* [dcp][T][heads][A] the group's, member by member */
    size_t parts_send;          /* [dcp][T][heads][P] partials over this rank's positions, for member j */
    size_t parts_recv;          /* [dcp][T][heads][P] partials of this rank's heads, from member s */
    size_t partials;            /* the split-K partials of the group's queries: max(splits, dcp T) x heads x P */
    size_t foreign;             /* bytes [T][cache row]: rows of positions other members store */
    size_t total;
} device_dcp_workspace;

void device_dcp_workspace_plan(const model_config *cfg, int heads, int dcp, int attn_splits,
                               kv_cache_format cache_format, device_dcp_workspace *out);

/* The plan of a rank whose cache is sharded over dcp ranks: cache bytes per position divided by
 * dcp (rounded up; a rank holds kv_shard_slots(capacity, dcp) rows, so a context rounded up to a
 * multiple of dcp is counted whole), its sharded attention's buffers added to the workspace.
 * dcp 1 leaves the plan as it is. */
int device_rank_plan_shard(device_rank_plan *plan, const model_weights *mw, int tp, int rank, int dcp,
                           int attn_splits, kv_cache_format cache_format, kimi_err *err);

#endif
