/* cpu_profile: the totals are written by rank 0's thread during steps and read by the thread that
 * drives the engine between requests; the step barriers order the two. */
#include "engine/backend/cpu_profile.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

static atomic_int enabled;
static cpu_profile totals;

void cpu_profile_enable(int on)
{
    memset(&totals, 0, sizeof totals);
    atomic_store(&enabled, on);
}

int cpu_profile_enabled(void)
{
    return atomic_load_explicit(&enabled, memory_order_relaxed);
}

void cpu_profile_add_phase(cpu_phase phase, double seconds, double cpu_seconds, double weight_bytes)
{
    totals.seconds[phase] += seconds;
    totals.cpu_seconds[phase] += cpu_seconds;
    totals.weight_bytes[phase] += weight_bytes;
}

void cpu_profile_add_worker_wait(double seconds)
{
    totals.worker_wait_seconds += seconds;
}

void cpu_profile_add_step(double seconds, double cpu_seconds)
{
    totals.steps++;
    totals.step_seconds += seconds;
    totals.step_cpu_seconds += cpu_seconds;
}

void cpu_profile_take(cpu_profile *out)
{
    *out = totals;
    memset(&totals, 0, sizeof totals);
}

double cpu_profile_thread_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *cpu_phase_name(cpu_phase phase)
{
    static const char *const names[CPU_PHASE_COUNT] = {"attention_gemv", "attention", "norms",  "routing",
                                                       "mlp_gemv",       "allreduce", "lm_head"};
    return phase >= 0 && phase < CPU_PHASE_COUNT ? names[phase] : "?";
}
