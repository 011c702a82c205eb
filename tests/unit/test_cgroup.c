/* test_cgroup.c - the cgroup lookup (cgroup.c) on every form of /proc/self/cgroup and
 * mountinfo, over fake trees in a temporary directory: v1, hybrid, v2, a cgroup
 * namespace, bind mounts of a subtree, paths with spaces and ':', the limit walk
 * (memory.max on the parent only, memory.high below memory.max, "max"
 * everywhere), memory.stat and memory.events. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup.h"
#include "harness.h"

static char tmp[256];

#define CHECK_STREQ(a, b)                                                                          \
    do {                                                                                           \
        const char *s_a_ = (a), *s_b_ = (b);                                                       \
        CHECK_MSG(strcmp(s_a_, s_b_) == 0, "'%s' != '%s' (%s)", s_a_, s_b_, #a);                   \
    } while (0)

/* Write root/rel, making its directories. */
static void put(const char *rel, const char *text)
{
    harness_put(tmp, rel, text);
}

static void fresh(const char *name)
{
    if (tmp[0])
        harness_rmtree(tmp);
    CHECK_EQ_INT(harness_tmpdir(tmp, sizeof(tmp), name), 0);
}

/* dir relative to the fake root ("" when it is outside it). */
static const char *rel(const char *dir)
{
    size_t n = strlen(tmp);
    return strncmp(dir, tmp, n) == 0 ? dir + n : "";
}

static const char *V1_CGROUP =
    "12:pids:/user.slice/user-1000.slice\n"
    "11:memory:/user.slice/app\n"
    "10:cpu,cpuacct:/user.slice\n"
    "1:name=systemd:/user.slice/app\n";
static const char *V1_MOUNTS =
    "25 30 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
    "31 25 0:27 / /sys/fs/cgroup/systemd rw,nosuid shared:10 - cgroup cgroup rw,xattr,name=systemd\n"
    "33 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:13 - cgroup cgroup rw,cpu,cpuacct\n"
    "35 25 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup "
    "rw,memory\n";
#define V1_UNLIMITED "9223372036854771712\n"

/* v1 only: the memory line, its mount, the limit on the own cgroup, memory.stat's split. */
static void test_v1(void)
{
    struct cgroup_info ci;
    struct mt_cheap c;
    char src[1024];
    fresh("cg-v1");
    put("sys/fs/cgroup/memory/user.slice/app/memory.limit_in_bytes", "314572800\n");
    put("sys/fs/cgroup/memory/user.slice/app/memory.usage_in_bytes", "104857600\n");
    put("sys/fs/cgroup/memory/user.slice/app/memory.failcnt", "7\n");
    put("sys/fs/cgroup/memory/user.slice/app/memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
    put("sys/fs/cgroup/memory/user.slice/app/memory.stat",
        "cache 5\nrss 6\nshmem 0\nhierarchical_memory_limit 314572800\ntotal_cache 41943040\n"
        "total_rss 62914560\ntotal_shmem 1048576\n");
    put("sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes", V1_UNLIMITED);
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", V1_UNLIMITED);
    CHECK_EQ_INT(cgroup_lookup(V1_CGROUP, V1_MOUNTS, tmp, &ci), 0);
    CHECK_EQ_INT(ci.version, 1);
    CHECK_EQ_INT(ci.hybrid, 0);
    CHECK_EQ_INT(ci.fallback, 0);
    CHECK_STREQ(rel(ci.dir), "/sys/fs/cgroup/memory/user.slice/app");
    CHECK_STREQ(ci.path, "/user.slice/app");
    CHECK_EQ_INT(ci.levels, 3);
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 314572800);
    CHECK_EQ_INT(c.cgroup_limit_kind, MT_CG_LIMIT_V1);
    CHECK_EQ_INT(c.cgroup_limit_level, 0);
    CHECK_EQ_INT(c.cgroup_usage_bytes, 104857600);
    CHECK_EQ_INT(c.cgroup_anon_bytes, 62914560);
    CHECK_EQ_INT(c.cgroup_file_bytes, 41943040);
    CHECK_EQ_INT(c.cgroup_shmem_bytes, 1048576);
    CHECK_EQ_INT(c.cgroup_high_bytes, -1);
    CHECK_EQ_INT(c.cgroup_events[MT_CG_EV_MAX], 7);
    CHECK_EQ_INT(c.cgroup_events[MT_CG_EV_OOM_KILL], 2);
    CHECK_EQ_INT(c.cgroup_events[MT_CG_EV_HIGH], -1);
    cgroup_limit_source(&ci, &c, src, sizeof(src));
    CHECK_STREQ(rel(src), "/sys/fs/cgroup/memory/user.slice/app/memory.limit_in_bytes");
    cgroup_close(&ci);

    /* The limit on the parent only: its file, its usage. */
    put("sys/fs/cgroup/memory/user.slice/app/memory.limit_in_bytes", V1_UNLIMITED);
    put("sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes", "209715200\n");
    put("sys/fs/cgroup/memory/user.slice/memory.usage_in_bytes", "150000000\n");
    put("sys/fs/cgroup/memory/user.slice/app/memory.stat", "hierarchical_memory_limit 209715200\n");
    CHECK_EQ_INT(cgroup_lookup(V1_CGROUP, V1_MOUNTS, tmp, &ci), 0);
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 209715200);
    CHECK_EQ_INT(c.cgroup_limit_kind, MT_CG_LIMIT_V1);
    CHECK_EQ_INT(c.cgroup_limit_level, 1);
    CHECK_EQ_INT(c.cgroup_usage_bytes, 150000000);
    cgroup_limit_source(&ci, &c, src, sizeof(src));
    CHECK_STREQ(rel(src), "/sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes");
    cgroup_close(&ci);
}

/* v1 in a container that bind-mounted its own cgroup: mountinfo's root is the
 * cgroup, the directory is the mount point, and a limit set above the mount
 * shows only in memory.stat's hierarchical_memory_limit. */
static void test_v1_bind(void)
{
    struct cgroup_info ci;
    struct mt_cheap c;
    char src[1024];
    fresh("cg-v1bind");
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", V1_UNLIMITED);
    put("sys/fs/cgroup/memory/memory.usage_in_bytes", "1000\n");
    put("sys/fs/cgroup/memory/memory.stat", "hierarchical_memory_limit 268435456\nrss 77\ncache 88\n");
    CHECK_EQ_INT(cgroup_lookup("11:memory:/docker/0123abcd\n",
                               "40 35 0:31 /docker/0123abcd /sys/fs/cgroup/memory ro,nosuid "
                               "master:15 - cgroup cgroup rw,memory\n",
                               tmp, &ci),
                 0);
    CHECK_EQ_INT(ci.version, 1);
    CHECK_EQ_INT(ci.fallback, 0);
    CHECK_EQ_INT(ci.read_only, 1);
    CHECK_STREQ(rel(ci.dir), "/sys/fs/cgroup/memory");
    CHECK_EQ_INT(ci.levels, 1);
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 268435456);
    CHECK_EQ_INT(c.cgroup_limit_kind, MT_CG_LIMIT_V1_HIER);
    CHECK_EQ_INT(c.cgroup_anon_bytes, 77); /* no total_ lines: use_hierarchy off */
    CHECK_EQ_INT(c.cgroup_file_bytes, 88);
    cgroup_limit_source(&ci, &c, src, sizeof(src));
    CHECK_STREQ(rel(src), "/sys/fs/cgroup/memory/memory.stat hierarchical_memory_limit");
    cgroup_close(&ci);
}

/* Hybrid: v1 lines plus 0::/path, cgroup2 on /sys/fs/cgroup/unified. The memory
 * controller is v1's; without a v1 memory line it is v2's, under unified. */
static void test_hybrid(void)
{
    struct cgroup_info ci;
    struct mt_cheap c;
    char groups[512], mounts[1024];
    fresh("cg-hybrid");
    snprintf(groups, sizeof(groups), "%s0::/user.slice/app\n", V1_CGROUP);
    snprintf(mounts, sizeof(mounts),
             "%s30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:4 - cgroup2 cgroup2 "
             "rw,nsdelegate\n",
             V1_MOUNTS);
    put("sys/fs/cgroup/memory/user.slice/app/memory.limit_in_bytes", "314572800\n");
    put("sys/fs/cgroup/unified/user.slice/app/memory.max", "111\n");
    CHECK_EQ_INT(cgroup_lookup(groups, mounts, tmp, &ci), 0);
    CHECK_EQ_INT(ci.version, 1);
    CHECK_EQ_INT(ci.hybrid, 1);
    CHECK_STREQ(rel(ci.dir), "/sys/fs/cgroup/memory/user.slice/app");
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 314572800);
    cgroup_close(&ci);
    /* The memory controller on the unified side. */
    CHECK_EQ_INT(cgroup_lookup("10:cpu,cpuacct:/user.slice\n0::/user.slice/app\n", mounts, tmp, &ci),
                 0);
    CHECK_EQ_INT(ci.version, 2);
    CHECK_EQ_INT(ci.hybrid, 0);
    CHECK_STREQ(rel(ci.dir), "/sys/fs/cgroup/unified/user.slice/app");
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 111);
    cgroup_close(&ci);
}

static const char *V2_MOUNTS =
    "22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
    "26 21 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

/* v2 only: 0::/path, and the limit walk up to the mount's root. */
static void test_v2_walk(void)
{
    struct cgroup_info ci;
    struct mt_cheap c;
    char src[1024];
    const char *groups = "0::/system.slice/app.service\n";
    fresh("cg-v2");
    put("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
    put("sys/fs/cgroup/system.slice/memory.max", "max\n");
    put("sys/fs/cgroup/system.slice/memory.high", "max\n");
    put("sys/fs/cgroup/system.slice/memory.current", "400000000\n");
    put("sys/fs/cgroup/system.slice/memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n");
    put("sys/fs/cgroup/system.slice/app.service/memory.max", "314572800\n");
    put("sys/fs/cgroup/system.slice/app.service/memory.high", "max\n");
    put("sys/fs/cgroup/system.slice/app.service/memory.current", "104857600\n");
    put("sys/fs/cgroup/system.slice/app.service/memory.stat",
        "anon 83886080\nfile 20971520\nkernel 1000\nkernel_stack 10\nshmem 4096\n"
        "file_mapped 999\nfile_dirty 5\n");
    put("sys/fs/cgroup/system.slice/app.service/memory.events",
        "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n");
    CHECK_EQ_INT(cgroup_lookup(groups, V2_MOUNTS, tmp, &ci), 0);
    CHECK_EQ_INT(ci.version, 2);
    CHECK_EQ_INT(ci.levels, 3);
    CHECK_STREQ(rel(ci.dir), "/sys/fs/cgroup/system.slice/app.service");
    char lvl[1024];
    CHECK_STREQ(rel(cgroup_level_dir(&ci, 1, lvl, sizeof(lvl))), "/sys/fs/cgroup/system.slice");
    CHECK_STREQ(rel(cgroup_level_dir(&ci, 2, lvl, sizeof(lvl))), "/sys/fs/cgroup");
    CHECK_STREQ(cgroup_level_dir(&ci, 3, lvl, sizeof(lvl)), "");
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_version, 2);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 314572800);
    CHECK_EQ_INT(c.cgroup_limit_kind, MT_CG_LIMIT_MAX);
    CHECK_EQ_INT(c.cgroup_limit_level, 0);
    CHECK_EQ_INT(c.cgroup_usage_bytes, 104857600);
    CHECK_EQ_INT(c.cgroup_anon_bytes, 83886080);
    CHECK_EQ_INT(c.cgroup_file_bytes, 20971520); /* not file_mapped */
    CHECK_EQ_INT(c.cgroup_shmem_bytes, 4096);
    CHECK_EQ_INT(c.cgroup_events[MT_CG_EV_HIGH], 0);
    CHECK_EQ_INT(c.cgroup_events[MT_CG_EV_MAX], 12);
    CHECK_EQ_INT(c.cgroup_events[MT_CG_EV_OOM], 1); /* not oom_kill's, nor oom_group_kill's */
    CHECK_EQ_INT(c.cgroup_events[MT_CG_EV_OOM_KILL], 1);
    CHECK_EQ_INT(c.cgroup_events_level, 0);
    cgroup_limit_source(&ci, &c, src, sizeof(src));
    CHECK_STREQ(rel(src), "/sys/fs/cgroup/system.slice/app.service/memory.max");
    cgroup_close(&ci);

    /* memory.max on the parent only (the leaf says max): the parent's limit, usage, events. */
    put("sys/fs/cgroup/system.slice/app.service/memory.max", "max\n");
    put("sys/fs/cgroup/system.slice/memory.max", "314572800\n");
    CHECK_EQ_INT(cgroup_lookup(groups, V2_MOUNTS, tmp, &ci), 0);
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 314572800);
    CHECK_EQ_INT(c.cgroup_limit_level, 1);
    CHECK_EQ_INT(c.cgroup_usage_bytes, 400000000);
    CHECK_EQ_INT(c.cgroup_events[MT_CG_EV_MAX], 0);
    CHECK_EQ_INT(c.cgroup_events_level, 1);
    cgroup_limit_source(&ci, &c, src, sizeof(src));
    CHECK_STREQ(rel(src), "/sys/fs/cgroup/system.slice/memory.max");
    cgroup_close(&ci);

    /* memory.high below memory.max: the high one is the limit; both are reported;
     * events from the outermost limit's cgroup. */
    put("sys/fs/cgroup/system.slice/memory.max", "max\n");
    put("sys/fs/cgroup/system.slice/app.service/memory.max", "629145600\n");
    put("sys/fs/cgroup/system.slice/memory.high", "314572800\n");
    CHECK_EQ_INT(cgroup_lookup(groups, V2_MOUNTS, tmp, &ci), 0);
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 314572800);
    CHECK_EQ_INT(c.cgroup_limit_kind, MT_CG_LIMIT_HIGH);
    CHECK_EQ_INT(c.cgroup_limit_level, 1);
    CHECK_EQ_INT(c.cgroup_max_bytes, 629145600);
    CHECK_EQ_INT(c.cgroup_max_level, 0);
    CHECK_EQ_INT(c.cgroup_high_bytes, 314572800);
    CHECK_EQ_INT(c.cgroup_events_level, 1);
    cgroup_limit_source(&ci, &c, src, sizeof(src));
    CHECK_STREQ(rel(src), "/sys/fs/cgroup/system.slice/memory.high");
    cgroup_close(&ci);

    /* max everywhere: a memory cgroup without a limit. */
    put("sys/fs/cgroup/system.slice/app.service/memory.max", "max\n");
    put("sys/fs/cgroup/system.slice/memory.high", "max\n");
    CHECK_EQ_INT(cgroup_lookup(groups, V2_MOUNTS, tmp, &ci), 0);
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_version, 2);
    CHECK_EQ_INT(c.cgroup_limit_bytes, -1);
    CHECK_EQ_INT(c.cgroup_limit_kind, MT_CG_LIMIT_NONE);
    CHECK_EQ_INT(c.cgroup_limit_level, -1);
    CHECK_EQ_INT(c.cgroup_usage_bytes, 104857600); /* the own cgroup's */
    cgroup_limit_source(&ci, &c, src, sizeof(src));
    CHECK_STREQ(src, "");
    cgroup_close(&ci);

    /* The process in the real root: no memory files, the controller enabled: v2, no limit. */
    CHECK_EQ_INT(cgroup_lookup("0::/\n", V2_MOUNTS, tmp, &ci), 0);
    CHECK_EQ_INT(ci.version, 2);
    CHECK_EQ_INT(ci.levels, 1);
    cgroup_close(&ci);
}

/* A Docker-like container: its own cgroup namespace (0::/), cgroup2 mounted
 * read-only, the limit on the namespace's root. */
static void test_v2_namespace(void)
{
    struct cgroup_info ci;
    struct mt_cheap c;
    char src[1024];
    fresh("cg-ns");
    put("sys/fs/cgroup/memory.max", "314572800\n");
    put("sys/fs/cgroup/memory.high", "max\n");
    put("sys/fs/cgroup/memory.current", "5000000\n");
    put("sys/fs/cgroup/memory.events", "low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n");
    CHECK_EQ_INT(cgroup_lookup("0::/\n",
                               "700 650 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - "
                               "cgroup2 cgroup rw,nsdelegate,memory_recursiveprot\n",
                               tmp, &ci),
                 0);
    CHECK_EQ_INT(ci.version, 2);
    CHECK_EQ_INT(ci.read_only, 1);
    CHECK_EQ_INT(ci.levels, 1);
    CHECK_STREQ(ci.path, "/");
    CHECK_STREQ(rel(ci.dir), "/sys/fs/cgroup");
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 314572800);
    CHECK_EQ_INT(c.cgroup_events[MT_CG_EV_MAX], 3);
    cgroup_limit_source(&ci, &c, src, sizeof(src));
    CHECK_STREQ(rel(src), "/sys/fs/cgroup/memory.max");
    cgroup_close(&ci);
    /* Without a namespace, the container's own cgroup bind-mounted as the root:
     * mountinfo's root is the path, the directory the mount point. */
    CHECK_EQ_INT(cgroup_lookup("0::/kubepods.slice/pod1/cri-abc.scope\n",
                               "700 650 0:27 /kubepods.slice/pod1/cri-abc.scope /sys/fs/cgroup ro "
                               "- cgroup2 cgroup2 rw\n",
                               tmp, &ci),
                 0);
    CHECK_EQ_INT(ci.fallback, 0);
    CHECK_STREQ(rel(ci.dir), "/sys/fs/cgroup");
    cgroup_close(&ci);
    /* A child of the mount's root. */
    put("sys/fs/cgroup/worker/memory.max", "max\n");
    CHECK_EQ_INT(cgroup_lookup("0::/kubepods.slice/pod1/cri-abc.scope/worker\n",
                               "700 650 0:27 /kubepods.slice/pod1/cri-abc.scope /sys/fs/cgroup ro "
                               "- cgroup2 cgroup2 rw\n",
                               tmp, &ci),
                 0);
    CHECK_STREQ(rel(ci.dir), "/sys/fs/cgroup/worker");
    CHECK_EQ_INT(ci.levels, 2);
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 314572800);
    CHECK_EQ_INT(c.cgroup_limit_level, 1);
    cgroup_close(&ci);
    /* The host's path, a mount that shows none of it: the mount's root stands for it. */
    CHECK_EQ_INT(cgroup_lookup("0::/system.slice/docker-abc.scope\n", V2_MOUNTS, tmp, &ci), 0);
    CHECK_EQ_INT(ci.fallback, 1);
    CHECK_STREQ(rel(ci.dir), "/sys/fs/cgroup");
    cgroup_close(&ci);
    /* Moved out of the namespace's root after it was made: 0::/../other. */
    CHECK_EQ_INT(cgroup_lookup("0::/../other\n", V2_MOUNTS, tmp, &ci), 0);
    CHECK_EQ_INT(ci.fallback, 1);
    cgroup_close(&ci);
}

/* The path is everything after the second ':' (spaces and colons included);
 * mount points with spaces come escaped (\040) in mountinfo. */
static void test_odd_paths(void)
{
    struct cgroup_info ci;
    struct mt_cheap c;
    fresh("cg-odd");
    put("my cgroups/app: one/x y/memory.max", "123456\n");
    CHECK_EQ_INT(cgroup_lookup("0::/app: one/x y\n",
                               "26 21 0:24 / /my\\040cgroups rw shared:4 - cgroup2 cgroup2 rw\n", tmp,
                               &ci),
                 0);
    CHECK_EQ_INT(ci.version, 2);
    CHECK_STREQ(ci.path, "/app: one/x y");
    CHECK_STREQ(rel(ci.dir), "/my cgroups/app: one/x y");
    CHECK_EQ_INT(ci.levels, 3);
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 123456);
    cgroup_close(&ci);
    /* v1 the same way, with the last line not ended by a newline. */
    put("my cgroups/memory/a:b c/memory.limit_in_bytes", "654321\n");
    CHECK_EQ_INT(cgroup_lookup("3:cpu:/\n4:memory:/a:b c",
                               "35 25 0:31 / /my\\040cgroups/memory rw - cgroup cgroup rw,memory", tmp,
                               &ci),
                 0);
    CHECK_EQ_INT(ci.version, 1);
    CHECK_STREQ(ci.path, "/a:b c");
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 654321);
    cgroup_close(&ci);
}

/* Two cgroup2 mounts: the one whose root holds the path, the longest such root. */
static void test_mount_choice(void)
{
    struct cgroup_info ci;
    fresh("cg-mounts");
    put("a/memory.max", "1\n");
    put("b/memory.max", "2\n");
    put("b/x/memory.max", "3\n");
    CHECK_EQ_INT(cgroup_lookup("0::/pod/x\n",
                               "1 0 0:1 /other /a rw - cgroup2 cgroup2 rw\n"
                               "2 0 0:1 /pod /b rw - cgroup2 cgroup2 rw\n"
                               "3 0 0:1 / /a rw - cgroup2 cgroup2 rw\n",
                               tmp, &ci),
                 0);
    CHECK_STREQ(rel(ci.dir), "/b/x");
    cgroup_close(&ci);
    /* /podx is not under /pod. */
    CHECK_EQ_INT(cgroup_lookup("0::/podx\n",
                               "2 0 0:1 /pod /b rw - cgroup2 cgroup2 rw\n"
                               "3 0 0:1 / /a rw - cgroup2 cgroup2 rw\n",
                               tmp, &ci),
                 0);
    CHECK_STREQ(rel(ci.dir), "/a");
    CHECK_EQ_INT(ci.fallback, 1); /* /a/podx does not exist */
    cgroup_close(&ci);
    /* A v1 cgroup mount without the memory controller is not the memory one. */
    CHECK_EQ_INT(cgroup_lookup("4:memory:/\n",
                               "33 25 0:29 / /a rw - cgroup cgroup rw,cpu,cpuacct\n"
                               "34 25 0:30 / /b rw - cgroup cgroup rw,memory_nope\n",
                               tmp, &ci),
                 -ENOENT);
    CHECK_EQ_INT(ci.version, 0);
    cgroup_close(&ci);
}

/* Nothing to be found: no lines, no mount, a mount whose directory is missing. */
static void test_none(void)
{
    struct cgroup_info ci;
    struct mt_cheap c;
    fresh("cg-none");
    CHECK_EQ_INT(cgroup_lookup("", V2_MOUNTS, tmp, &ci), -ENOENT);
    CHECK_EQ_INT(cgroup_lookup("0::/x\n", "", tmp, &ci), -ENOENT);
    CHECK_EQ_INT(cgroup_lookup("0::/x\n", V2_MOUNTS, tmp, &ci), -ENOENT); /* no directory */
    CHECK_EQ_INT(cgroup_lookup("garbage\n::\n:\n", "garbage - -\n", tmp, &ci), -ENOENT);
    CHECK_EQ_INT(cgroup_lookup(NULL, NULL, NULL, &ci), -ENOENT);
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_version, 0);
    CHECK_EQ_INT(c.cgroup_limit_bytes, -1);
    CHECK_EQ_INT(c.cgroup_usage_bytes, -1);
    CHECK_EQ_INT(c.cgroup_anon_bytes, -1);
    CHECK_EQ_INT(c.cgroup_events[MT_CG_EV_MAX], -1);
    cgroup_close(&ci);
}

static void test_parse(void)
{
    int64_t e[MT_CG_EVENTS];
    CHECK_EQ_INT(cgroup_parse_events("low 1\nhigh 2879\nmax 3\noom 4\noom_kill 5\n", e), 0);
    CHECK_EQ_INT(e[MT_CG_EV_HIGH], 2879);
    CHECK_EQ_INT(e[MT_CG_EV_MAX], 3);
    CHECK_EQ_INT(e[MT_CG_EV_OOM], 4);
    CHECK_EQ_INT(e[MT_CG_EV_OOM_KILL], 5);
    CHECK_EQ_INT(cgroup_parse_events("oom_kill 9\noom_group_kill 1\n", e), 0);
    CHECK_EQ_INT(e[MT_CG_EV_OOM], -1);
    CHECK_EQ_INT(e[MT_CG_EV_OOM_KILL], 9);
    CHECK_EQ_INT(cgroup_parse_events("", e), -EINVAL);
    CHECK_EQ_INT(cgroup_parse_events("max x\nhigh -3\n", e), -EINVAL);
    CHECK_EQ_INT(cgroup_key("anon 5\nfile 6\n", "file"), 6);
    CHECK_EQ_INT(cgroup_key("file_mapped 7\n", "file"), -1);
    CHECK_EQ_INT(cgroup_key("anon 99999999999999999999999\n", "anon"), -1);
}

int main(void)
{
    RUN(test_v1);
    RUN(test_v1_bind);
    RUN(test_hybrid);
    RUN(test_v2_walk);
    RUN(test_v2_namespace);
    RUN(test_odd_paths);
    RUN(test_mount_choice);
    RUN(test_none);
    RUN(test_parse);
    if (tmp[0])
        harness_rmtree(tmp);
    return harness_end();
}
