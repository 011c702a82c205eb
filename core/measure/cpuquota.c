/*
 * cpuquota.c - the CPU quota of this process's cgroup and its affinity mask (cpuquota.h).
 * The cgroup's directory comes from cgroup_controller_dir (the "cpu" controller's v1
 * hierarchy, else v2); each level from it up to the mount is read, and the lowest quota
 * wins (a parent's limit holds its children). Runs on the starting thread, before the
 * host's threads exist under LD_PRELOAD; no locks, no state.
 */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cgroup.h"
#include "common.h"
#include "cpuquota.h"
#include "mt_alloc.h"
#include "probe.h"

/* One level's quota in CPUs (0 none), and the file's text for the source. */
static double level_quota(int version, const char *dir, char *what, size_t size)
{
    char path[PATH_MAX + 32], buf[128];
    long long quota = 0, period = 0;
    if (version == 2) {
        snprintf(path, sizeof(path), "%.4000s/cpu.max", dir);
        if (mt_read_small(path, buf, sizeof(buf)) <= 0 || strncmp(buf, "max", 3) == 0 ||
            sscanf(buf, "%lld %lld", &quota, &period) != 2)
            return 0;
        snprintf(what, size, "%s: %lld %lld", path, quota, period);
    } else {
        snprintf(path, sizeof(path), "%.4000s/cpu.cfs_period_us", dir);
        if (mt_read_small(path, buf, sizeof(buf)) <= 0 || sscanf(buf, "%lld", &period) != 1)
            return 0;
        snprintf(path, sizeof(path), "%.4000s/cpu.cfs_quota_us", dir);
        if (mt_read_small(path, buf, sizeof(buf)) <= 0 || sscanf(buf, "%lld", &quota) != 1)
            return 0; /* -1: no quota */
        snprintf(what, size, "%s: %lld (cpu.cfs_period_us %lld)", path, quota, period);
    }
    return quota > 0 && period > 0 ? (double)quota / (double)period : 0;
}

void cpu_quota_read(const char *proc_cgroup, const char *mountinfo, const char *fsroot,
                    int affinity, struct cpu_quota *out)
{
    struct cgroup_place *pl = mt_malloc(sizeof(*pl)); /* two paths: not on a host's stack */
    memset(out, 0, sizeof(*out));
    out->affinity = affinity > 0 ? affinity : 1;
    out->cpus = out->affinity;
    snprintf(out->source, sizeof(out->source), "affinity mask: %d CPUs", out->affinity);
    if (!pl || cgroup_controller_dir(proc_cgroup, mountinfo, fsroot, "cpu", pl) != 0) {
        free(pl);
        return;
    }
    size_t ml = strlen(pl->mount), len = strlen(pl->dir);
    char what[PATH_MAX + 64];
    for (int level = 0; level < CGROUP_LEVELS; level++) {
        pl->dir[len] = '\0';
        double q = level_quota(pl->version, pl->dir, what, sizeof(what));
        if (q > 0 && (out->quota == 0 || q < out->quota)) {
            out->quota = q;
            if (q < out->cpus) {
                out->cpus = q;
                snprintf(out->source, sizeof(out->source), "%s", what);
            }
        }
        if (len <= ml)
            break;
        while (len > ml && pl->dir[len - 1] != '/')
            len--;
        if (len > ml)
            len--; /* the slash */
    }
    free(pl);
}

void cpu_quota_here(struct cpu_quota *out)
{
    cpu_set_t set;
    int affinity = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        affinity = CPU_COUNT(&set);
    if (affinity < 1) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        affinity = n > 0 ? (int)n : 1;
    }
    char *groups = probe_read_file("/proc/self/cgroup");
    char *mounts = probe_read_file("/proc/self/mountinfo");
    const char *root = getenv("MEMTRIM_CGROUP_ROOT");
    char table[4200];
    if (root && root[0] && mounts) { /* the filesystem root's cgroup mounts, as probe.c finds them */
        snprintf(table, sizeof(table),
                 "1 0 0:1 / %.2000s/cpu rw - cgroup cgroup rw,cpu\n"
                 "2 0 0:2 / %.2000s rw - cgroup2 cgroup2 rw\n", root, root);
        free(mounts);
        mounts = mt_strdup(table);
    }
    cpu_quota_read(groups ? groups : "", mounts ? mounts : "", "", affinity, out);
    free(groups);
    free(mounts);
}

double cpu_quota_cpus(void)
{
    struct cpu_quota *q = mt_malloc(sizeof(*q));
    double cpus = 1;
    if (q) {
        cpu_quota_here(q);
        cpus = q->cpus;
        free(q);
    }
    return cpus;
}

int64_t cpu_quota_arena_max(const struct cpu_quota *q)
{
    double cpus = q->cpus > 0 ? q->cpus : 1;
    double cap = 2 * ceil(cpus - 1e-9);
    return cap < 2 ? 2 : cap > 1024 ? 1024 : (int64_t)cap;
}
