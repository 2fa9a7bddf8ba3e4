/* spin_barrier: a reusable barrier for a fixed group of threads (a rank's workers, the ranks of
 * a tensor-parallel step) that spins briefly before sleeping, so that the thousands of meetings
 * per token cost microseconds when every thread has a core, and nothing when they share. */
#ifndef KIMI_SPIN_BARRIER_H
#define KIMI_SPIN_BARRIER_H

#include <pthread.h>
#include <stdatomic.h>

typedef struct {
    atomic_int count;           /* threads that meet here */
    int spin;                   /* 0: sleep at once (more threads than cores) */
    atomic_int arrived;         /* threads waiting in the current round */
    atomic_uint round;          /* bumped by the last arrival of each round */
    pthread_mutex_t lock;
    pthread_cond_t wake;
} spin_barrier;

void spin_barrier_init(spin_barrier *b, int count, int spin);
/* Change the group size while no round is complete (a pool that could not start all threads). */
void spin_barrier_resize(spin_barrier *b, int count);
void spin_barrier_destroy(spin_barrier *b);
/* Returns once all count threads have called it for this round. */
void spin_barrier_wait(spin_barrier *b);

#endif
