/* cpu_profile: where the CPU backend's decode steps spend their time, phase by phase, for
 * kimi-probe bench. Off until cpu_profile_enable(1); then rank 0's thread adds the wall time of
 * each phase of every one-token forward step, its CPU time and the weight bytes its matrix
 * products read, which costs two clock reads per phase (~1 us); off, a phase costs one branch. Process-wide, like the
 * device census: one profiled engine at a time. */
#ifndef KIMI_CPU_PROFILE_H
#define KIMI_CPU_PROFILE_H

typedef enum {
    CPU_PHASE_ATTENTION_GEMV,   /* q_a, kv_a, q_b, o projections */
    CPU_PHASE_ATTENTION,        /* absorbed attention over the cache (reads kv_b) */
    CPU_PHASE_NORMS,            /* rmsnorms, rope, cache writes, residual adds, the embedding row */
    CPU_PHASE_ROUTING,          /* router product, top-k, gathering each expert's tokens */
    CPU_PHASE_MLP_GEMV,         /* dense / shared / routed expert gate, up and down */
    CPU_PHASE_ALLREDUCE,        /* sums between tensor-parallel ranks */
    CPU_PHASE_LM_HEAD,          /* final norm, vocabulary product, gather */
    CPU_PHASE_COUNT
} cpu_phase;

typedef struct {
    long steps;                             /* one-token forward steps profiled */
    double step_seconds;                    /* rank 0's whole forward, summed over the steps */
    double step_cpu_seconds;                /* the CPU time of rank 0's thread in them: on a busy
                                             * machine, about what the steps would take on a quiet one */
    double seconds[CPU_PHASE_COUNT];        /* rank 0's thread per phase, summed */
    double cpu_seconds[CPU_PHASE_COUNT];    /* its CPU time per phase */
    double weight_bytes[CPU_PHASE_COUNT];   /* weight bytes rank 0's products of the phase read */
    double worker_wait_seconds;             /* of those, rank 0's thread waiting for its workers to
                                             * finish their shares (load imbalance, wake-ups) */
} cpu_profile;

void cpu_profile_enable(int on);
int cpu_profile_enabled(void);

/* Rank 0's step: the seconds of one phase, bytes read in it, a wait for workers, a whole step. */
void cpu_profile_add_phase(cpu_phase phase, double seconds, double cpu_seconds, double weight_bytes);
void cpu_profile_add_worker_wait(double seconds);
void cpu_profile_add_step(double seconds, double cpu_seconds);

/* The calling thread's CPU time in seconds. */
double cpu_profile_thread_seconds(void);

/* The totals since the last take (or the enable), then reset. */
void cpu_profile_take(cpu_profile *out);

/* The phase's name in the bench JSON ("attention_gemv", ...). */
const char *cpu_phase_name(cpu_phase phase);

#endif
