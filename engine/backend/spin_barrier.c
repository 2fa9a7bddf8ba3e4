/* spin_barrier: a round counter. The last thread to arrive resets the arrival count and bumps
 * the round under the lock (so a sleeper cannot miss it); the others spin on the round for a
 * while, then sleep on the condition variable. */
#include "engine/backend/spin_barrier.h"

/* About 40 us of pause instructions (38 us measured on the 2-core EPYC development box): long
 * enough for the short waits between a step's layers, short enough that a spinner on a CPU
 * shared with other processes gives its time slice back soon (20000, ~0.4 ms, made 1-thread
 * decode of the demo model ~2x slower than blocking on that busy box; 2000 about equal). */
enum { SPIN_ROUNDS = 2000 };

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

void spin_barrier_init(spin_barrier *b, int count, int spin)
{
    atomic_init(&b->count, count);
    b->spin = spin;
    atomic_init(&b->arrived, 0);
    atomic_init(&b->round, 0);
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->wake, NULL);
}

void spin_barrier_resize(spin_barrier *b, int count)
{
    atomic_store(&b->count, count);
}

void spin_barrier_destroy(spin_barrier *b)
{
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->wake);
}

void spin_barrier_wait(spin_barrier *b)
{
    int count = atomic_load(&b->count);
    if (count <= 1)
        return;
    unsigned round = atomic_load_explicit(&b->round, memory_order_acquire);
    if (atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel) + 1 == atomic_load(&b->count)) {
        atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
        pthread_mutex_lock(&b->lock);
        atomic_fetch_add_explicit(&b->round, 1, memory_order_release);
        pthread_cond_broadcast(&b->wake);
        pthread_mutex_unlock(&b->lock);
        return;
    }
    if (b->spin)
        for (int i = 0; i < SPIN_ROUNDS; i++) {
            if (atomic_load_explicit(&b->round, memory_order_acquire) != round)
                return;
            cpu_relax();
        }
    pthread_mutex_lock(&b->lock);
    while (atomic_load_explicit(&b->round, memory_order_acquire) == round)
        pthread_cond_wait(&b->wake, &b->lock);
    pthread_mutex_unlock(&b->lock);
}
