/* test_probe.c - the probe's readings, the cgroup files, and the shared snapshot's single flight. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "core.h"
#include "harness.h"
#include "probe.h"
#include "snapshot.h"

static void test_cheap(void)
{
    struct probe_cgroup cg;
    struct mt_cheap c;
    probe_cgroup_init(&cg);
    CHECK_EQ_INT(probe_cheap(&cg, &c), 0);
    CHECK(c.rss_bytes > 0);
    CHECK(c.rss_anon_bytes > 0);
    CHECK(c.rss_anon_bytes + c.rss_file_bytes + c.rss_shmem_bytes <= c.rss_bytes + (1 << 20));
    CHECK(c.vm_size_bytes >= c.rss_bytes);
    CHECK(c.minor_faults > 0);
    CHECK(c.duration_ns > 0);
    CHECK(c.timestamp_ms > 1700000000000LL);
    CHECK(probe_rss() > 0);
    CHECK(probe_process_cpu_ns() >= 0);
    probe_cgroup_close(&cg);
}

/* /proc/self/stat read with sscanf, as the probe read it before its own parser. */
static void stat_by_sscanf(unsigned long *mi, unsigned long *ticks, long *rss)
{
    char buf[1024] = "";
    FILE *f = fopen("/proc/self/stat", "re");
    CHECK(f != NULL);
    if (!f)
        return;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    CHECK(p != NULL);
    if (p)
        CHECK_EQ_INT(sscanf(p + 2,
                            "%*c %*d %*d %*d %*d %*d %*u %lu %*u %*u %*u %lu %lu %*d %*d %*d %*d "
                            "%*d %*d %*u %*u %ld",
                            mi, &ut, &st, rss),
                     4);
    *ticks = ut + st;
}

/* The hand parser of /proc/self/stat reads what sscanf read, between two sscanf readings. */
static void test_stat_fields(void)
{
    unsigned long mi0 = 0, mi1 = 0, t0 = 0, t1 = 0;
    long rss0 = 0, rss1 = 0;
    struct probe_stat ps;
    long hz = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < 3; i++) {
        stat_by_sscanf(&mi0, &t0, &rss0);
        CHECK_EQ_INT(probe_stat(&ps), 0);
        int64_t cpu = probe_process_cpu_ns();
        stat_by_sscanf(&mi1, &t1, &rss1);
        CHECK_MSG(ps.minflt >= mi0 && ps.minflt <= mi1, "minflt %llu not in [%lu, %lu]",
                  (unsigned long long)ps.minflt, mi0, mi1);
        CHECK(ps.cpu_ns >= (int64_t)t0 * (1000000000 / hz) && ps.cpu_ns <= (int64_t)t1 * (1000000000 / hz));
        CHECK(cpu >= ps.cpu_ns && cpu <= (int64_t)t1 * (1000000000 / hz));
        long lo = rss0 < rss1 ? rss0 : rss1, hi = rss0 < rss1 ? rss1 : rss0;
        CHECK_MSG(ps.rss_bytes >= (uint64_t)lo * (uint64_t)page - (1 << 20) &&
                      ps.rss_bytes <= (uint64_t)hi * (uint64_t)page + (1 << 20),
                  "rss %llu, sscanf %ld-%ld pages", (unsigned long long)ps.rss_bytes, lo, hi);
        CHECK(ps.minflt > 0 && ps.rss_bytes > 0);
    }
}

static void test_heap_follows_allocation(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    struct mt_heap h0, h1, h2;
    enum { N = 64 * 1024 };
    static char *blocks[N];

    probe_heap(NULL, &h0, 1);
    CHECK(h0.duration_ns > 0);
    CHECK(h0.arena_count >= 1);
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(1024);
        memset(blocks[i], 1, 1024);
    }
    probe_heap(NULL, &h1, 0);
    CHECK_MSG(h1.heap_in_use_bytes >= h0.heap_in_use_bytes + (60u << 20), "in use %llu -> %llu",
              (unsigned long long)h0.heap_in_use_bytes, (unsigned long long)h1.heap_in_use_bytes);
    CHECK_EQ_INT(h1.arena_count, -1);
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    probe_heap(NULL, &h2, 0);
    CHECK_MSG(h2.heap_in_use_bytes + (60u << 20) <= h1.heap_in_use_bytes, "in use %llu -> %llu",
              (unsigned long long)h1.heap_in_use_bytes, (unsigned long long)h2.heap_in_use_bytes);
    CHECK(h2.heap_in_use_bytes == h2.uordblks + h2.hblkhd);
    CHECK(h2.heap_free_bytes == h2.fordblks);
    /* a single large block is mmapped and counted as mmapped heap */
    char *big = malloc(64u << 20);
    memset(big, 1, 64u << 20);
    probe_heap(NULL, &h1, 0);
    CHECK(h1.heap_mmapped_bytes >= (64u << 20));
    free(big);
}

/* In a child moved into a fresh v1 memory cgroup with a 1 GiB limit, the probe reads that limit. */
static void test_cgroup_limit(void)
{
    char dir[256], path[300];
    if (geteuid() != 0)
        SKIP("not root: cannot create a memory cgroup");
    if (access("/sys/fs/cgroup/memory/memory.limit_in_bytes", F_OK) != 0)
        SKIP("no cgroup v1 memory controller on this machine");
    snprintf(dir, sizeof(dir), "/sys/fs/cgroup/memory/memtrim-test-%d", (int)getpid());
    CHECK_EQ_INT(mkdir(dir, 0755), 0);
    snprintf(path, sizeof(path), "%s/memory.limit_in_bytes", dir);
    FILE *f = fopen(path, "w");
    CHECK(f && fprintf(f, "%d\n", 1 << 30) > 0 && fclose(f) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        FILE *p = fopen(path, "w");
        if (!p || fprintf(p, "%d\n", (int)getpid()) < 0 || fclose(p))
            _exit(10);
        struct probe_cgroup cg;
        struct mt_cheap c;
        if (probe_cgroup_init(&cg) || cg.version != 1)
            _exit(11);
        probe_cheap(&cg, &c);
        if (c.cgroup_limit_bytes != (1 << 30))
            _exit(12);
        if (c.cgroup_usage_bytes <= 0)
            _exit(13);
        probe_cgroup_close(&cg);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    rmdir(dir);
    /* Unlimited reads as -1 (the root group has no limit). */
    struct probe_cgroup cg;
    struct mt_cheap c;
    if (probe_cgroup_init(&cg) == 0) {
        probe_cheap(&cg, &c);
        CHECK(c.cgroup_version == 1 || c.cgroup_version == 2);
        CHECK(c.cgroup_limit_bytes == -1 || c.cgroup_limit_bytes > 0);
        probe_cgroup_close(&cg);
    }
}

/* A pure cgroup v2 host: /proc/self/cgroup is the single line 0::/path (it
 * read as no cgroup at all: cgroup_version 0 on every v2 host). */
static void test_cgroup_v2_only(void)
{
    char root[256];
    struct probe_cgroup cg;
    struct mt_cheap c;
    if (harness_tmpdir(root, sizeof(root), "probe-v2"))
        return;
    harness_put(root, "system.slice/app.service/memory.max", "314572800\n");
    harness_put(root, "system.slice/app.service/memory.current", "1234567\n");
    CHECK_EQ_INT(probe_cgroup_find(&cg, "0::/system.slice/app.service\n", root), 0);
    CHECK_EQ_INT(cg.version, 2);
    probe_cheap(&cg, &c);
    CHECK_EQ_INT(c.cgroup_version, 2);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 314572800);
    CHECK_EQ_INT(c.cgroup_usage_bytes, 1234567);
    probe_cgroup_close(&cg);
    /* Inside a cgroup namespace: 0::/ and the limit on the namespace's root. */
    harness_put(root, "memory.max", "209715200\n");
    harness_put(root, "memory.current", "7654321\n");
    CHECK_EQ_INT(probe_cgroup_find(&cg, "0::/\n", root), 0);
    CHECK_EQ_INT(cg.version, 2);
    probe_cheap(&cg, &c);
    CHECK_EQ_INT(c.cgroup_limit_bytes, 209715200);
    probe_cgroup_close(&cg);
    harness_rmtree(root);
}

static struct snapshot_cache cache;
static struct snapshot_want want = {.cheap_max_age_ns = 10000000000LL,
                                    .heap_max_age_ns = 10000000000LL,
                                    .budget_percent = 0.1};

static void *reader(void *arg)
{
    struct mt_snapshot s;
    for (int i = 0; i < 50; i++)
        snapshot_get(&cache, &want, &s);
    *(int *)arg = s.cheap.rss_bytes > 0 && s.heap.timestamp_ms > 0;
    return NULL;
}

static void test_single_flight(void)
{
    pthread_t t[16];
    int ok[16];
    struct mt_counters c;
    CHECK_EQ_INT(snapshot_init(&cache), 0);
    for (int i = 0; i < 16; i++)
        pthread_create(&t[i], NULL, reader, &ok[i]);
    for (int i = 0; i < 16; i++) {
        pthread_join(t[i], NULL);
        CHECK(ok[i]);
    }
    memset(&c, 0, sizeof(c));
    snapshot_counters(&cache, &c);
    CHECK_EQ_INT(c.heap_probes, 1); /* 800 reads within the max age: one mallinfo2 */
    CHECK_EQ_INT(c.cheap_probes, 1);
    /* The budget: with a tiny budget a second probe is refused even when stale. */
    struct snapshot_want stale = {.cheap_max_age_ns = 0, .heap_max_age_ns = 0,
                                  .budget_percent = 0.001};
    struct mt_snapshot s;
    snapshot_get(&cache, &stale, &s); /* refused or allowed depending on the first call's end */
    snapshot_get(&cache, &stale, &s);
    snapshot_get(&cache, &stale, &s);
    snapshot_counters(&cache, &c);
    CHECK_MSG(c.heap_probes <= 2, "heap probes %llu", (unsigned long long)c.heap_probes);
    CHECK(c.cheap_probes >= 4);
    CHECK(s.heap_age_ms >= 0);
    /* A reader that takes stale data while someone else refreshes does not wait. */
    pthread_mutex_lock(&cache.lock);
    cache.refreshing = 1; /* as if another thread were probing */
    pthread_mutex_unlock(&cache.lock);
    struct snapshot_want stale_ok = {.cheap_max_age_ns = 0, .heap_max_age_ns = 0,
                                     .budget_percent = 0.1, .stale_ok = 1};
    snapshot_get(&cache, &stale_ok, &s); /* returns at once with the cached snapshot */
    CHECK(s.cheap.rss_bytes > 0);
    CHECK(s.cheap_age_ms >= 0);
    pthread_mutex_lock(&cache.lock);
    cache.refreshing = 0;
    pthread_mutex_unlock(&cache.lock);
    snapshot_destroy(&cache);
}

/* The heap probes the cache has made so far. */
static uint64_t heap_probes(void)
{
    struct mt_counters c;
    memset(&c, 0, sizeof(c));
    snapshot_counters(&cache, &c);
    return c.heap_probes;
}

/* A reader that wants fresh readings, allowed `budget` percent. */
static struct snapshot_want fresh_at(double budget)
{
    struct snapshot_want w = {.cheap_max_age_ns = 0, .heap_max_age_ns = 0,
                              .budget_percent = budget, .stale_ok = 1};
    return w;
}

/*
 * The budget gate as each reader sees it: a probe charged at ProbeBudgetPercent
 * (its spacing a second long here) holds back a reader at that budget, but one
 * allowed a hundred times more (a worker group's watch inside its zone) sees the
 * spacing shortened by the ratio; and its own probe's spacing then runs from now,
 * not from the end of the lower rate's second.
 */
static void test_budget_gate_per_reader(void)
{
    struct mt_snapshot s;
    CHECK_EQ_INT(snapshot_init(&cache), 0);
    struct snapshot_want low = fresh_at(0.1), watch = fresh_at(10);
    snapshot_get(&cache, &low, &s); /* the first reading */
    pthread_mutex_lock(&cache.lock);
    int64_t now = mt_mono_ns();
    cache.heap_gate_from_ns = now - 10 * 1000000LL; /* 1 ms of cost at 0.1 %: 1 s */
    cache.heap_next_allowed_ns = cache.heap_gate_from_ns + 1000 * 1000000LL;
    cache.heap_gate_budget = 0.1;
    int64_t old_next = cache.heap_next_allowed_ns;
    pthread_mutex_unlock(&cache.lock);
    uint64_t probes = heap_probes();
    snapshot_get(&cache, &low, &s); /* its own rate: refused for the second */
    CHECK_EQ_INT(heap_probes(), probes);
    snapshot_get(&cache, &watch, &s); /* 100 x: the spacing is 10 ms, over already */
    CHECK_EQ_INT(heap_probes(), probes + 1);
    CHECK_EQ_INT(s.heap_age_ms, 0);
    pthread_mutex_lock(&cache.lock);
    int64_t next = cache.heap_next_allowed_ns;
    pthread_mutex_unlock(&cache.lock);
    CHECK_MSG(next < old_next, "the watch's spacing ran from the old gate: %lld ms later",
              (long long)((next - old_next) / 1000000));
    snapshot_destroy(&cache);
}

/*
 * A trim's two heap readings (before and after it), charged back to back at
 * ProbeBudgetPercent, make one debt: a reader allowed a hundred times more sees
 * all of it shortened by the ratio (2 x 10 ms at 10 %: 200 ms), not the first
 * reading's spacing in full (10 s) and only the second one's shortened.
 */
static void test_budget_gate_chained(void)
{
    struct mt_snapshot s;
    CHECK_EQ_INT(snapshot_init(&cache), 0);
    struct snapshot_want low = fresh_at(0.1), watch = fresh_at(10);
    snapshot_get(&cache, &low, &s); /* the first reading; the budget last asked for: 0.1 % */
    pthread_mutex_lock(&cache.lock);
    cache.heap_next_allowed_ns = cache.heap_gate_from_ns = 0; /* its own charge: spent */
    cache.heap_gate_budget = 0;
    pthread_mutex_unlock(&cache.lock);
    struct mt_heap h;
    memset(&h, 0, sizeof(h));
    h.cpu_ns = 10 * 1000000LL; /* 10 ms each: 10 s at 0.1 % */
    snapshot_count_heap(&cache, &h); /* the reading before the trim */
    snapshot_count_heap(&cache, &h); /* and the one after it, while the first's gate runs */
    /* 500 ms later (moved back rather than waited for): the watch's 200 ms are over,
     * a reader at 0.1 % still waits for its 20 s */
    pthread_mutex_lock(&cache.lock);
    int64_t span = cache.heap_next_allowed_ns - cache.heap_gate_from_ns;
    cache.heap_gate_from_ns -= 500 * 1000000LL;
    cache.heap_next_allowed_ns -= 500 * 1000000LL;
    pthread_mutex_unlock(&cache.lock);
    CHECK_MSG(span >= 19000 * 1000000LL, "the two charges span %lld ms, not 20 s",
              (long long)(span / 1000000));
    uint64_t probes = heap_probes();
    snapshot_get(&cache, &low, &s);
    CHECK_EQ_INT(heap_probes(), probes); /* its own rate: refused */
    snapshot_get(&cache, &watch, &s);
    CHECK_MSG(heap_probes() == probes + 1,
              "the watch was held back by the first reading's full 10 s");
    snapshot_destroy(&cache);
}

int main(void)
{
    RUN(test_cheap);
    RUN(test_stat_fields);
    RUN(test_heap_follows_allocation);
    RUN(test_cgroup_limit);
    RUN(test_cgroup_v2_only);
    RUN(test_single_flight);
    RUN(test_budget_gate_per_reader);
    RUN(test_budget_gate_chained);
    return harness_end();
}
