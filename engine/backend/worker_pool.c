/* worker_pool: threads parked on a start barrier; worker_pool_run publishes the task, meets
 * them there, runs its own share and meets them again at the end barrier. */
#include "engine/backend/worker_pool.h"

#include <stdlib.h>

#include "engine/backend/spin_barrier.h"
#include "engine/base/monotonic.h"

struct worker_pool {
    int n_workers;
    pthread_t *threads;         /* [n_workers - 1] */
    spin_barrier start, done;
    worker_task task;           /* NULL: quit */
    void *arg;
    int time_waits;             /* worker_pool_time_waits */
    double waited;              /* seconds the caller waited at `done` while timing */
};

typedef struct {
    worker_pool *pool;
    int worker;
} worker_seat;

static void *worker_main(void *p)
{
    worker_seat seat = *(worker_seat *)p;
    free(p);
    worker_pool *pool = seat.pool;
    for (;;) {
        spin_barrier_wait(&pool->start);
        if (!pool->task)
            return NULL;
        pool->task(pool->arg, seat.worker, pool->n_workers);
        spin_barrier_wait(&pool->done);
    }
}

int worker_pool_open(worker_pool **out, int n_workers, int spin, kimi_err *err)
{
    *out = NULL;
    if (n_workers < 1)
        return kimi_fail(err, KIMI_ERR_USAGE, "threads per rank %d: must be at least 1", n_workers);
    worker_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->threads = calloc((size_t)n_workers, sizeof *p->threads))) {
        free(p);
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for a pool of %d workers", n_workers);
    }
    p->n_workers = n_workers;
    spin_barrier_init(&p->start, n_workers, spin);
    spin_barrier_init(&p->done, n_workers, spin);
    for (int i = 1; i < n_workers; i++) {
        worker_seat *seat = malloc(sizeof *seat);
        if (seat)
            *seat = (worker_seat){p, i};
        if (!seat || pthread_create(&p->threads[i - 1], NULL, worker_main, seat)) {
            free(seat);
            p->n_workers = i; /* close() stops the i - 1 started so far */
            spin_barrier_resize(&p->start, i);
            worker_pool_close(p);
            return kimi_fail(err, KIMI_ERR_NOMEM, "cannot start worker thread %d of %d", i, n_workers);
        }
    }
    *out = p;
    return 0;
}

void worker_pool_close(worker_pool *p)
{
    if (!p)
        return;
    p->task = NULL;
    spin_barrier_wait(&p->start);
    for (int i = 1; i < p->n_workers; i++)
        pthread_join(p->threads[i - 1], NULL);
    spin_barrier_destroy(&p->start);
    spin_barrier_destroy(&p->done);
    free(p->threads);
    free(p);
}

int worker_pool_size(const worker_pool *p)
{
    return p->n_workers;
}

void worker_pool_run(worker_pool *p, worker_task task, void *arg)
{
    if (p->n_workers == 1) {
        task(arg, 0, 1);
        return;
    }
    p->task = task;
    p->arg = arg;
    spin_barrier_wait(&p->start);
    task(arg, 0, p->n_workers);
    double t0 = p->time_waits ? monotonic_seconds() : 0;
    spin_barrier_wait(&p->done);
    if (p->time_waits)
        p->waited += monotonic_seconds() - t0;
}

void worker_pool_time_waits(worker_pool *p, int on)
{
    p->time_waits = on;
}

double worker_pool_take_wait_seconds(worker_pool *p)
{
    double waited = p->waited;
    p->waited = 0;
    return waited;
}

void worker_share(int n, int worker, int n_workers, int *begin, int *end)
{
    *begin = (int)((long)n * worker / n_workers);
    *end = (int)((long)n * (worker + 1) / n_workers);
}
