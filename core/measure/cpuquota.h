/*
 * cpuquota.h - the CPUs this process may use as its container says: the lowest CPU quota
 * on its cgroup's path (v2 cpu.max up the tree, v1 cpu.cfs_quota_us / cpu.cfs_period_us
 * up the tree) and its affinity mask, and the malloc arena cap that follows from them
 * (MallocArenaMax "auto"). Read at start, on the starting thread; no locks, no state.
 */
#ifndef MEMTRIM_CPUQUOTA_H
#define MEMTRIM_CPUQUOTA_H

#include <limits.h>
#include <stdint.h>

struct cpu_quota {
    double cpus;                /* what the process may use: the lower of the two below */
    int affinity;               /* CPUs in its affinity mask */
    double quota;               /* the lowest quota on the path, in CPUs; 0 = none */
    char source[PATH_MAX + 64]; /* the file that set the quota, with its text; or the mask */
};

/* From the texts of /proc/self/cgroup and /proc/self/mountinfo, a filesystem root ("" on
 * a real host; a test's tree) and the affinity mask's CPU count. Always fills *out. */
void cpu_quota_read(const char *proc_cgroup, const char *mountinfo, const char *fsroot,
                    int affinity, struct cpu_quota *out);

/* This process's (MEMTRIM_CGROUP_ROOT, when set, is the cgroup filesystem's root). */
void cpu_quota_here(struct cpu_quota *out);

/* The CPUs this process may use now (cpu_quota_here's cpus): the host's CPU share is of
 * these (cost_hk.c). */
double cpu_quota_cpus(void);

/* The arena cap for that many CPUs: two per CPU, the quota rounded up (glibc's own cap is
 * eight per core of the host, whatever the container allows). */
int64_t cpu_quota_arena_max(const struct cpu_quota *q);

#endif /* MEMTRIM_CPUQUOTA_H */
