/* test_cpu_count: the cgroup CPU quota read from fake cgroup v1 and v2 trees (quotas rounded up,
 * "max" and -1 meaning none, the process's own v2 cgroup and the root both counting, the
 * lower winning), the spin rule (the driving thread counts: the 2-core default of tp 1 x 2
 * threads, which spun before, no longer does; KIMI_CPU_SPIN forces it), and the usable count
 * against the affinity mask. `test_cpu_count N` also checks that exactly N CPUs are usable
 * (ctest runs it under `taskset -c 0` with N = 1). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/cpu_count.h"
#include "tests/unit/check.h"

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void check_quota(void)
{
    char root[] = "/tmp/kimi-cgroup-XXXXXX", path[512];
    CHECK(mkdtemp(root) != NULL);
    CHECK_INT(cpu_quota_limit(root, NULL), 0);          /* nothing there: no limit */
    write_file(root, "cpu.max", "max 100000\n");
    CHECK_INT(cpu_quota_limit(root, NULL), 0);
    write_file(root, "cpu.max", "150000 100000\n");     /* 1.5 CPUs: 2 threads can run */
    CHECK_INT(cpu_quota_limit(root, NULL), 2);
    snprintf(path, sizeof path, "%s/job", root);
    CHECK(mkdir(path, 0700) == 0);
    write_file(path, "cpu.max", "50000 100000\n");      /* the process's own cgroup is tighter */
    CHECK_INT(cpu_quota_limit(root, "/job"), 1);
    write_file(path, "cpu.max", "max 100000\n");
    CHECK_INT(cpu_quota_limit(root, "/job"), 2);
    write_file(root, "cpu.max", "max 100000\n");
    snprintf(path, sizeof path, "%s/cpu", root);        /* v1 */
    CHECK(mkdir(path, 0700) == 0);
    write_file(path, "cpu.cfs_quota_us", "-1\n");
    write_file(path, "cpu.cfs_period_us", "100000\n");
    CHECK_INT(cpu_quota_limit(root, NULL), 0);
    write_file(path, "cpu.cfs_quota_us", "300000\n");
    CHECK_INT(cpu_quota_limit(root, NULL), 3);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

static void check_spin_rule(void)
{
    CHECK_INT(cpu_spin_pays(CPU_SPIN_AUTO, 3, 2), 0);   /* tp 1 x 2 threads + the scheduler on 2 CPUs */
    CHECK_INT(cpu_spin_pays(CPU_SPIN_AUTO, 2, 2), 1);   /* ... the 2 threads alone (within a step) */
    CHECK_INT(cpu_spin_pays(CPU_SPIN_AUTO, 2, 1), 0);   /* tp 2 under taskset -c 0 */
    CHECK_INT(cpu_spin_pays(CPU_SPIN_AUTO, 9, 16), 1);
    CHECK_INT(cpu_spin_pays(CPU_SPIN_ON, 8, 1), 1);
    CHECK_INT(cpu_spin_pays(CPU_SPIN_OFF, 1, 64), 0);
    CHECK_INT(cpu_spin_mode_parse(NULL), CPU_SPIN_AUTO);
    CHECK_INT(cpu_spin_mode_parse("auto"), CPU_SPIN_AUTO);
    CHECK_INT(cpu_spin_mode_parse("on"), CPU_SPIN_ON);
    CHECK_INT(cpu_spin_mode_parse("1"), CPU_SPIN_ON);
    CHECK_INT(cpu_spin_mode_parse("off"), CPU_SPIN_OFF);
    CHECK_INT(cpu_spin_mode_parse("0"), CPU_SPIN_OFF);
    CHECK_INT(cpu_spin_mode_parse("yes"), -1);
}

int main(int argc, char **argv)
{
    check_quota();
    check_spin_rule();
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    int usable = cpu_usable_count();
    CHECK_MSG(usable >= 1 && usable <= CPU_COUNT(&set), "usable %d, affinity mask %d", usable, CPU_COUNT(&set));
    if (argc > 1)
        CHECK_INT(usable, atoi(argv[1]));
    return check_finish();
}
