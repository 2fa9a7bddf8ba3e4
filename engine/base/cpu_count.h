/* cpu_count: how many CPUs this process can keep busy at once (the affinity mask, lowered to
 * the cgroup CPU quota), and whether threads that wait for each other should spin on them:
 * a spinning waiter only pays when every busy thread has a CPU of its own; on an oversubscribed
 * CPU it takes the time slice of the thread it waits for (decode 3-10x slower, issue 17). */
#ifndef KIMI_CPU_COUNT_H
#define KIMI_CPU_COUNT_H

/* CPUs in the sched_getaffinity mask (else the online count), lowered to the cgroup CPU quota
 * rounded up (cgroup v2 cpu.max of this process's cgroup or the root; v1 cpu.cfs_quota_us /
 * cpu.cfs_period_us); at least 1. */
int cpu_usable_count(void);

/* The cgroup CPU quota under cgroup_root (a cgroup v2 folder holding cpu.max, or a v1 mount
 * holding cpu/cpu.cfs_quota_us and cpu/cpu.cfs_period_us; relative_v2: the process's v2
 * cgroup path from /proc/self/cgroup, NULL = the root's only) in whole CPUs rounded up; 0 when
 * there is no limit or nothing readable. */
int cpu_quota_limit(const char *cgroup_root, const char *relative_v2);

typedef enum { CPU_SPIN_AUTO, CPU_SPIN_ON, CPU_SPIN_OFF } cpu_spin_mode;

/* KIMI_CPU_SPIN: unset or "auto" = CPU_SPIN_AUTO, "1"/"on" = ON, "0"/"off" = OFF; -1 for any
 * other value (the caller names it in its error). */
int cpu_spin_mode_parse(const char *value);

/* Whether the waiters of a barrier spin (briefly, then block): forced by mode, else only when
 * every thread that meets there (meeting_threads: the compute threads, plus the thread that
 * drives them when it waits in the same barrier) has a CPU of its own among usable. */
int cpu_spin_pays(cpu_spin_mode mode, long meeting_threads, int usable);

#endif
