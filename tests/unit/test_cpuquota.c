/* test_cpuquota.c - MallocArenaMax "auto": the CPU quota of a fake cgroup tree (v1
 * cpu.cfs_quota_us/cfs_period_us and v2 cpu.max, the lowest up the path, a namespace's
 * "/" path), the affinity mask when it is lower or no quota is set, and the cap from it;
 * then this process's own reading, and the configuration's "auto". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cpuquota.h"
#include "harness.h"

static char tmp[256];

static void fresh(const char *name)
{
    if (tmp[0])
        harness_rmtree(tmp);
    CHECK_EQ_INT(harness_tmpdir(tmp, sizeof(tmp), name), 0);
}

static const char *V1_CGROUP = "11:cpu,cpuacct:/kubepods/pod1/c1\n10:memory:/kubepods/pod1/c1\n"
                               "0::/\n";
static const char *V1_MOUNTS =
    "30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
    "31 25 0:28 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n";
static const char *V2_CGROUP = "0::/system.slice/app.service\n";
static const char *V2_MOUNTS = "25 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";

static void test_v1_lowest_up_the_path(void)
{
    struct cpu_quota q;
    fresh("cpuq-v1");
    const char *c = "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1";
    const char *pod = "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1";
    harness_put(tmp, harness_path(c, "cpu.cfs_quota_us"), "-1\n");
    harness_put(tmp, harness_path(c, "cpu.cfs_period_us"), "100000\n");
    harness_put(tmp, harness_path(pod, "cpu.cfs_quota_us"), "150000\n");
    harness_put(tmp, harness_path(pod, "cpu.cfs_period_us"), "100000\n");
    cpu_quota_read(V1_CGROUP, V1_MOUNTS, tmp, 64, &q);
    CHECK(q.quota > 1.49 && q.quota < 1.51);
    CHECK(q.cpus > 1.49 && q.cpus < 1.51);
    CHECK_EQ_INT(q.affinity, 64);
    CHECK_CONTAINS(q.source, "/kubepods/pod1/cpu.cfs_quota_us: 150000 (cpu.cfs_period_us 100000)");
    CHECK_EQ_INT(cpu_quota_arena_max(&q), 4); /* 2 per CPU, 1.5 rounded up; glibc: 512 */
    /* the container's own limit lower than its pod's: that one */
    harness_put(tmp, harness_path(c, "cpu.cfs_quota_us"), "50000\n");
    cpu_quota_read(V1_CGROUP, V1_MOUNTS, tmp, 64, &q);
    CHECK(q.cpus > 0.49 && q.cpus < 0.51);
    CHECK_CONTAINS(q.source, "/pod1/c1/cpu.cfs_quota_us: 50000");
    CHECK_EQ_INT(cpu_quota_arena_max(&q), 2);
}

static void test_v2_cpu_max_and_the_mask(void)
{
    struct cpu_quota q;
    fresh("cpuq-v2");
    const char *svc = "/sys/fs/cgroup/system.slice/app.service";
    harness_put(tmp, harness_path(svc, "cpu.max"), "max 100000\n");
    harness_put(tmp, "/sys/fs/cgroup/system.slice/cpu.max", "300000 100000\n");
    cpu_quota_read(V2_CGROUP, V2_MOUNTS, tmp, 8, &q);
    CHECK(q.cpus > 2.99 && q.cpus < 3.01);
    CHECK_CONTAINS(q.source, "/sys/fs/cgroup/system.slice/cpu.max: 300000 100000");
    CHECK_EQ_INT(cpu_quota_arena_max(&q), 6);
    /* an affinity mask below the quota wins */
    cpu_quota_read(V2_CGROUP, V2_MOUNTS, tmp, 2, &q);
    CHECK(q.cpus == 2);
    CHECK(q.quota > 2.99);
    CHECK_CONTAINS(q.source, "affinity mask: 2 CPUs");
    CHECK_EQ_INT(cpu_quota_arena_max(&q), 4);
    /* no quota anywhere: the mask */
    harness_put(tmp, "/sys/fs/cgroup/system.slice/cpu.max", "max 100000\n");
    cpu_quota_read(V2_CGROUP, V2_MOUNTS, tmp, 16, &q);
    CHECK(q.quota == 0 && q.cpus == 16);
    CHECK_EQ_INT(cpu_quota_arena_max(&q), 32);
    /* inside a cgroup namespace ("0::/") the mount's root is the container's own cgroup */
    harness_put(tmp, "/sys/fs/cgroup/cpu.max", "100000 100000\n");
    cpu_quota_read("0::/\n", V2_MOUNTS, tmp, 16, &q);
    CHECK(q.cpus == 1);
    CHECK_EQ_INT(cpu_quota_arena_max(&q), 2);
    /* no cgroup at all, and unreadable texts: the mask, never a failure */
    cpu_quota_read("", "", tmp, 3, &q);
    CHECK(q.cpus == 3 && q.quota == 0);
    cpu_quota_read(NULL, NULL, NULL, 0, &q);
    CHECK(q.cpus == 1);
}

/* This process: some figure, at least one CPU, the cap at least 2. */
static void test_here(void)
{
    struct cpu_quota q;
    cpu_quota_here(&q);
    CHECK(q.cpus >= 0.01 && q.affinity >= 1);
    CHECK(q.source[0] != '\0');
    CHECK(cpu_quota_arena_max(&q) >= 2);
}

static void test_config_auto(void)
{
    struct mt_config cfg;
    char *err = NULL;
    CHECK_EQ_INT(config_parse("{\"MallocArenaMax\": \"auto\"}", &cfg, &err), 0);
    CHECK_EQ_INT(cfg.malloc_arena_max, MT_CONFIG_AUTO);
    free(err);
    err = NULL;
    CHECK(config_parse("{\"MallocArenaMax\": \"four\"}", &cfg, &err) != 0);
    CHECK_CONTAINS(err, "MallocArenaMax");
    CHECK_CONTAINS(err, "expected an integer or \"auto\", got \"four\"");
    free(err);
}

int main(void)
{
    RUN(test_v1_lowest_up_the_path);
    RUN(test_v2_cpu_max_and_the_mask);
    RUN(test_here);
    RUN(test_config_auto);
    if (tmp[0])
        harness_rmtree(tmp);
    return harness_end();
}
