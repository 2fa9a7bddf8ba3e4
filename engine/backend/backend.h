/* backend: the one interface the engine drives a model through (CPU reference or CUDA):
 * N tensor-parallel ranks that each hold a shard, run forward steps over a token range
 * writing the latent KV cache (fp16 or fp8), and return logits. */
#ifndef KIMI_BACKEND_H
#define KIMI_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/backend/tp_comm.h"
#include "engine/base/error.h"
#include "engine/model/weights.h"
#include "kernels/kv_format.h"

typedef enum { BACKEND_CPU, BACKEND_CUDA } backend_kind;

/* The CPU backend's NVFP4 products: fp32 activations, the numeric reference (the default), or
 * activations rounded to int8 per 16-column block (kernels/cpu/linear_int8.h), faster on CPUs with
 * AVX-512 VNNI and a numeric contract of its own. The CUDA backend ignores it. */
typedef enum { CPU_ACTIVATIONS_FP32, CPU_ACTIVATIONS_INT8 } cpu_activations;

static inline const char *cpu_activations_name(cpu_activations a)
{
    return a == CPU_ACTIVATIONS_INT8 ? "int8" : "fp32";
}

/* "fp32" or "int8" -> *out and 0; anything else: -1, *out untouched. */
static inline int cpu_activations_parse(const char *text, cpu_activations *out)
{
    if (!strcmp(text, "fp32"))
        *out = CPU_ACTIVATIONS_FP32;
    else if (!strcmp(text, "int8"))
        *out = CPU_ACTIVATIONS_INT8;
    else
        return -1;
    return 0;
}

/* Where the CPU backend's weights live once read in: moved into anonymous memory in 2 MiB pages
 * (the default: decode ~1.3x faster, weights_page_in_options.huge_pages, where the kernel offers
 * transparent huge pages), or left in the shard files' mmap in 4 KiB pages, which processes on
 * one model share and which the kernel can drop and read again under memory pressure. The CUDA
 * backend ignores it. */
typedef enum { CPU_WEIGHTS_HUGE_PAGES, CPU_WEIGHTS_MMAP } cpu_weights;

/* "huge-pages" or "mmap" -> *out and 0; anything else: -1, *out untouched. */
static inline int cpu_weights_parse(const char *text, cpu_weights *out)
{
    if (!strcmp(text, "huge-pages"))
        *out = CPU_WEIGHTS_HUGE_PAGES;
    else if (!strcmp(text, "mmap"))
        *out = CPU_WEIGHTS_MMAP;
    else
        return -1;
    return 0;
}

typedef struct {
    backend_kind kind;
    int tp;                     /* ranks, 1..8, divides the head count */
    int threads_per_rank;       /* CPU workers per rank; 0 = usable CPUs / tp (engine/base/cpu_count.h).
                                 * Waits spin briefly only when tp * threads + 1 (the calling thread)
                                 * fit in the usable CPUs; KIMI_CPU_SPIN=auto|on|off overrides it */
    long max_context;           /* KV cache positions to reserve */
    int fit_context;            /* CUDA: 1 when max_context is the most a plan made before open fits (no
                                 * context was asked): the backend lowers it to what the device memory
                                 * it measures at open holds; 0: max_context was asked, and a device
                                 * that cannot hold it after that measurement fails the open */
    kv_cache_format kv_cache;   /* the latent cache's element format (kernels/kv_format.h); 0: fp16 */
    cpu_activations activations; /* CPU: the NVFP4 products' activations; 0: fp32 */
    int dcp;                    /* decode context parallelism: the latent cache is sharded by position over
                                 * groups of dcp ranks (engine/backend/kv_shard.h), each rank storing 1/dcp
                                 * of the positions; divides tp; 0 or 1 = replicated on every rank. CPU
                                 * backend only: the CUDA backend refuses dcp > 1 */
    /* Optional (NULL = none): called during a prefill (a backend_forward of n > 1 tokens) on
     * the thread that called backend_forward, after every layer, with how many of the call's
     * tokens are done (fractional: a chunk part-way through its layers counts in proportion;
     * n after the last layer). A non-zero return stops the call there: backend_forward then
     * returns BACKEND_STOPPED, and the cache entries of the call's positions are undefined.
     * This is how a cancel takes effect within one layer instead of a whole chunk. The CUDA
     * backend, whose device runs a step's layers on its own, calls it after every step instead
     * (up to DEVICE_PREFILL_TOKENS tokens, engine/backend/device_plan.h). */
    int (*on_layer)(void *user, double tokens_done);
    void *on_layer_user;
    /* CUDA: the device of each rank, devices[r] for r < tp (n_devices == tp, each rank its own
     * device: NCCL), or one device that every rank shares (n_devices == 1: the local
     * communicator); NULL / 0 = the first tp visible devices. Ignored by the CPU backend. */
    const int *devices;
    int n_devices;
    /* Optional (NULL = none): a device backend's load progress, bytes of the packed shards
     * uploaded so far of bytes_total (every rank together), called on the thread that called
     * backend_open about ten times a second and once at the end. A non-zero return stops the
     * load: backend_open then returns BACKEND_STOPPED and leaves nothing allocated. */
    int (*on_load)(void *user, size_t bytes_done, size_t bytes_total);
    void *on_load_user;
} backend_options;

/* backend_forward's result when on_layer stopped it, backend_open's when on_load did (not an
 * error: err is left alone). */
#define BACKEND_STOPPED (-1)

typedef struct backend backend;

/* A device backend (CUDA) places each rank on device memory: rank_budget_bytes is its share of
 * what the device has free now (the local communicator puts every rank on one device), and
 * rank_fixed_bytes what a rank needs besides its cache (packed weights, workspace, a reserve
 * for the runtime). The engine's memory plan turns them into the largest context that fits.
 * KIMI_ERR_USAGE for the CPU backend, or when CUDA is not built or no device exists. */
int backend_memory(const model_weights *mw, const backend_options *opt, size_t *rank_budget_bytes,
                   size_t *rank_fixed_bytes, kimi_err *err);

/* Opening BACKEND_CUDA fails with a message naming the cause when this build has no CUDA
 * backend or no device is present. Environment: KIMI_CUDA_GRAPHS=0 runs each decode step as
 * plain launches instead of one captured CUDA graph (debugging; results are bit-identical);
 * KIMI_CUDA_PREFILL=steps runs prefill steps on the decode kernels instead of the BF16 GEMMs
 * (=gemm, the default; any other value is an error); KIMI_CUDA_PREFILL_TRACE=1 prints a line per
 * prefill step on stderr (its tokens, the experts it ran as GEMMs); KIMI_CUDA_COMM=nccl|local
 * insists on a communicator (NCCL with one rank per device, e.g. TP 1 for tests; local when all
 * ranks share a device), an error where the devices do not allow it. */
int backend_open(backend **out, const model_weights *mw, const backend_options *opt, kimi_err *err);
void backend_close(backend *be);

/* Positions the cache holds. */
long backend_capacity(const backend *be);

/* Run tokens[0..n) at positions start_pos..start_pos+n-1, writing their cache entries
 * (entries at >= start_pos are overwritten; earlier ones are reused as they are). logits is
 * [n_logit_rows][vocab]: row j receives the logits of token logit_rows[j] (an index into
 * tokens; each index at most once). n == 1 is a decode step (absorbed attention), n > 1 a
 * prefill; start_pos + n must not exceed backend_capacity (else KIMI_ERR_STATE). Returns 0,
 * an error code, or BACKEND_STOPPED (see backend_options.on_layer). */
int backend_forward(backend *be, const int32_t *tokens, int n, long start_pos,
                    const int *logit_rows, int n_logit_rows, float *logits, kimi_err *err);

/* backend_forward fails with KIMI_ERR_MODEL when an activation becomes NaN or infinite (a
 * poisoned weight, an overflow), naming the first layer whose output held one ("the token
 * embeddings" before layer 0); the cache entries of that call are then undefined. The fp16
 * cache saturates finite values beyond +-65504 instead (both backends alike): */

/* Cache values saturated to +-65504 since the last call (or the open), then reset to 0. */
long backend_take_cache_clamps(backend *be);

/* Run tokens[0..n) at positions start_pos.. as n one-token decode steps would, in one pass
 * (speculative decoding verifies a draft this way): logits is [n][vocab], row j the logits
 * after token j, equal bit for bit to those of backend_forward on token j alone at
 * start_pos + j; the weights are read once for all n tokens (CUDA: once per 8 tokens, in one
 * device step, a captured graph per n). 1 <= n <= BACKEND_DECODE_TOKENS_MAX. */
enum { BACKEND_DECODE_TOKENS_MAX = 17 };
int backend_decode_tokens(backend *be, const int32_t *tokens, int n, long start_pos, float *logits, kimi_err *err);

/* The CPU backend's collectives on rank `rank` since the last take (engine/backend/tp_comm.h),
 * then reset: a census of what a step exchanges. KIMI_ERR_USAGE on the CUDA backend or a rank
 * out of range. */
int backend_take_comm_census(backend *be, int rank, tp_comm_census *out, kimi_err *err);

/* Bytes of latent cache one rank holds (the largest share; all layers; in the cache's format). */
size_t backend_cache_bytes_per_rank(const backend *be);

/* CUDA: the device memory the open took beyond its plan's weights and workspaces before the
 * cache (NCCL's buffers, cuBLASLt, the runtime's own), measured with cudaMemGetInfo on each
 * device; the largest, with its device in *device. The cache was sized after it. 0 on the CPU
 * (*device -1). Negative when the plan counted more than was taken. */
long long backend_runtime_overhead(const backend *be, int *device);

/* CUDA: which communicator runs the all-reduces, in a few words (engine/backend/cuda_comm.h
 * cuda_comm_describe: "local", "NCCL", "peer all-reduce (NCCL for the rest)", or NCCL with why
 * the peer all-reduce is off); NULL on the CPU. */
const char *backend_comm_description(const backend *be);

/* Copy the cache of positions [0, n_pos) as fp16 [layer][position][kv_lora | rope] (rank 0, with
 * the positions of its DCP group's other members put back in place); an fp8 cache decodes to
 * fp16 exactly (kernels/kv_format.h). */
int backend_read_kv(backend *be, long n_pos, uint16_t *out, kimi_err *err);

#endif
