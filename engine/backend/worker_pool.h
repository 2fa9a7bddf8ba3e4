/* worker_pool: the fixed team of threads of one tensor-parallel rank that run each parallel
 * task of the forward pass together (the calling rank thread is worker 0). */
#ifndef KIMI_WORKER_POOL_H
#define KIMI_WORKER_POOL_H

#include "engine/base/error.h"

typedef struct worker_pool worker_pool;

/* task(arg, worker, n_workers) runs once on each worker; the workers split the work. */
typedef void (*worker_task)(void *arg, int worker, int n_workers);

/* Starts n_workers - 1 threads. spin: whether waiting workers may spin (a core each). */
int worker_pool_open(worker_pool **out, int n_workers, int spin, kimi_err *err);
void worker_pool_close(worker_pool *p);
int worker_pool_size(const worker_pool *p);

/* Run task on every worker, the caller as worker 0; returns when all have finished. */
void worker_pool_run(worker_pool *p, worker_task task, void *arg);

/* While on (off by default), worker_pool_run times how long the calling thread waits at the end
 * for the other workers to finish their shares; take returns the total since the last take. */
void worker_pool_time_waits(worker_pool *p, int on);
double worker_pool_take_wait_seconds(worker_pool *p);

/* The slice [*begin, *end) of n items that worker gets out of n_workers (contiguous, sizes
 * differing by at most one). */
void worker_share(int n, int worker, int n_workers, int *begin, int *end);

#endif
