/* cpu_count: the affinity mask and the cgroup CPU quota. */
#include "engine/base/cpu_count.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The first line of path into buf; 0 when it cannot be read. */
static int read_line(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    return ok;
}

static int cpus_of_quota(long long quota, long long period)
{
    if (quota <= 0 || period <= 0)
        return 0;
    long long cpus = (quota + period - 1) / period;
    return cpus > 1 << 20 ? 1 << 20 : (int)cpus;
}

/* cgroup v2 cpu.max: "max PERIOD" (no limit) or "QUOTA PERIOD". */
static int v2_limit(const char *folder)
{
    char path[4096], line[128], quota[64];
    long long period = 0;
    snprintf(path, sizeof path, "%s/cpu.max", folder);
    if (!read_line(path, line, sizeof line) || sscanf(line, "%63s %lld", quota, &period) != 2 ||
        !strcmp(quota, "max"))
        return 0;
    long long q = 0;
    return sscanf(quota, "%lld", &q) == 1 ? cpus_of_quota(q, period) : 0;
}

int cpu_quota_limit(const char *cgroup_root, const char *relative_v2)
{
    int limit = 0;
    char path[4096], line[128];
    if (relative_v2 && strcmp(relative_v2, "/")) {
        snprintf(path, sizeof path, "%s%s", cgroup_root, relative_v2);
        limit = v2_limit(path);
    }
    int root = v2_limit(cgroup_root);
    if (root && (!limit || root < limit))
        limit = root;
    /* v1: -1 is no limit */
    static const char *const v1_dirs[] = {"cpu", "cpu,cpuacct"};
    for (size_t i = 0; i < sizeof v1_dirs / sizeof v1_dirs[0]; i++) {
        long long quota = 0, period = 0;
        snprintf(path, sizeof path, "%s/%s/cpu.cfs_quota_us", cgroup_root, v1_dirs[i]);
        if (!read_line(path, line, sizeof line) || sscanf(line, "%lld", &quota) != 1)
            continue;
        snprintf(path, sizeof path, "%s/%s/cpu.cfs_period_us", cgroup_root, v1_dirs[i]);
        if (!read_line(path, line, sizeof line) || sscanf(line, "%lld", &period) != 1)
            continue;
        int v1 = cpus_of_quota(quota, period);
        if (v1 && (!limit || v1 < limit))
            limit = v1;
        break;
    }
    return limit;
}

/* This process's cgroup v2 path ("0::/path" in /proc/self/cgroup) into out; 0 when none. */
static int own_v2_cgroup(char *out, size_t size)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        if (!strncmp(line, "0::", 3)) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(out, size, "%s", line + 3);
            found = 1;
        }
    fclose(f);
    return found;
}

int cpu_usable_count(void)
{
    long cpus = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cpus = CPU_COUNT(&set);
    if (cpus < 1)
        cpus = sysconf(_SC_NPROCESSORS_ONLN);
    char own[4096];
    int quota = cpu_quota_limit("/sys/fs/cgroup", own_v2_cgroup(own, sizeof own) ? own : NULL);
    if (quota > 0 && quota < cpus)
        cpus = quota;
    return cpus > 0 ? (int)cpus : 1;
}

int cpu_spin_mode_parse(const char *value)
{
    if (!value || !*value || !strcmp(value, "auto"))
        return CPU_SPIN_AUTO;
    if (!strcmp(value, "1") || !strcmp(value, "on"))
        return CPU_SPIN_ON;
    if (!strcmp(value, "0") || !strcmp(value, "off"))
        return CPU_SPIN_OFF;
    return -1;
}

int cpu_spin_pays(cpu_spin_mode mode, long meeting_threads, int usable)
{
    if (mode != CPU_SPIN_AUTO)
        return mode == CPU_SPIN_ON;
    return meeting_threads <= usable;
}
