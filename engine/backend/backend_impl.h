/* backend_impl: the two implementations engine/backend/backend.c dispatches to, the CPU reference
 * (backend_cpu.c) and the CUDA backend (backend_cuda.c, built only with CUDA). Arguments are
 * as in engine/backend/backend.h; backend.c checks every forward request (sizes, positions, token
 * ids, logit rows) before it dispatches, so neither implementation repeats those checks. */
#ifndef KIMI_BACKEND_IMPL_H
#define KIMI_BACKEND_IMPL_H

#include "engine/backend/backend.h"

typedef struct cpu_backend cpu_backend;
int cpu_backend_open(cpu_backend **out, const model_weights *mw, const backend_options *opt, kimi_err *err);
void cpu_backend_close(cpu_backend *be);
long cpu_backend_capacity(const cpu_backend *be);
int cpu_backend_forward(cpu_backend *be, const int32_t *tokens, int n, long start_pos, const int *logit_rows,
                        int n_logit_rows, float *logits, int per_token_decode, kimi_err *err);
int cpu_backend_read_kv(cpu_backend *be, long n_pos, uint16_t *out, kimi_err *err);
long cpu_backend_take_clamps(cpu_backend *be);
size_t cpu_backend_cache_bytes_per_rank(const cpu_backend *be);
int cpu_backend_take_comm_census(cpu_backend *be, int rank, tp_comm_census *out, kimi_err *err);

/* The error of a forward call whose activations became NaN or infinite: layer (-1: the token
 * embeddings) is the first whose output held one, positions [pos, pos + n) the step's. */
int backend_nonfinite_fail(kimi_err *err, int layer, long pos, int n);

typedef struct cuda_backend cuda_backend;
int cuda_backend_memory(const model_weights *mw, const backend_options *opt, size_t *rank_budget_bytes,
                        size_t *rank_fixed_bytes, kimi_err *err);
int cuda_backend_open(cuda_backend **out, const model_weights *mw, const backend_options *opt, kimi_err *err);
void cuda_backend_close(cuda_backend *be);
long cuda_backend_capacity(const cuda_backend *be);
int cuda_backend_forward(cuda_backend *be, const int32_t *tokens, int n, long start_pos, const int *logit_rows,
                         int n_logit_rows, float *logits, kimi_err *err);
int cuda_backend_read_kv(cuda_backend *be, long n_pos, uint16_t *out, kimi_err *err);
int cuda_backend_decode_tokens(cuda_backend *be, const int32_t *tokens, int n, long start_pos, float *logits,
                               kimi_err *err);
long cuda_backend_take_clamps(cuda_backend *be);
long long cuda_backend_runtime_overhead(const cuda_backend *be, int *device);
const char *cuda_backend_comm_description(const cuda_backend *be);

#endif
