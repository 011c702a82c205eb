/*
 * test_pressure.c - the pressure path: its decision (a pure function) step by
 * step; on a running instance, the poll fallback when no cgroup files are
 * readable or they are not a cgroup filesystem, the fast path that engages
 * inside the zone and stops outside it, a real trim of freed memory as RSS
 * climbs, and the reaction time recorded with the trim (counters and store).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "churn.h"
#include "api.h"
#include "core.h"
#include "db.h"
#include "harness.h"
#include "pressure.h"
#include "probe.h"
#include "start.h"

#define MB (1024ULL * 1024ULL)
#define MSN (1000000LL)

static struct pressure_input input(int64_t now_ms, uint64_t rss_mb, int64_t limit_mb)
{
    struct pressure_input in = {.now_ns = now_ms * MSN,
                                .rss = rss_mb * MB,
                                .limit = limit_mb * (int64_t)MB,
                                .ratio = 0.9,
                                .min_releasable = 8 * MB,
                                .cg_current = -1}; /* no cgroup reading: RSS is the charge */
    return in;
}

static void test_decide(void)
{
    struct pressure_state st = {.last_trim_ns = -3600000 * MSN};
    struct pressure_input in;

    /* No limit: nothing to watch. */
    in = input(0, 100, 0);
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_OUTSIDE);
    /* 100 MB of 400: outside the zone (floor 200 MB). */
    in = input(10, 100, 400);
    CHECK_EQ_INT(pressure_zone_floor(in.limit, in.ratio), 200 * MB);
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_OUTSIDE);
    CHECK_EQ_INT(st.zone, 0);
    /* A study's worth of growth: at the zone's floor the growth (100 MB) is past a step: trim. */
    in = input(20, 200, 400);
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_TRIM);
    CHECK_EQ_INT(st.zone, 1);
    CHECK_EQ_INT(st.due_ns, 0); /* growth: the crossing is the reading's */
    /* It found nothing (live memory): the base moves up to RSS after the trim. */
    pressure_after_trim(&st, 20 * MSN, 200 * MB, 0, 8 * MB);
    CHECK_EQ_INT(st.futile, 1);
    in = input(21, 210, 400); /* 10 MB more: under a step (20 MB = 5 % of 400) */
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_WATCH);
    in = input(22, 220, 400); /* a step: trim again at once, whatever the time */
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_TRIM);
    pressure_after_trim(&st, 22 * MSN, 220 * MB, 0, 8 * MB);
    CHECK_EQ_INT(st.futile, 2);
    /* Two futile growth trims in a row: the next waits 2 ms after the last (1 ms, 2 ms, 4 ms...). */
    in = input(23, 250, 400);
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_WATCH);
    CHECK_EQ_INT(pressure_next_due(&in, &st), 24 * MSN);
    in = input(24, 260, 400);
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_TRIM);
    CHECK_EQ_INT(st.rule, PRESSURE_RULE_GROWTH);
    CHECK_EQ_INT(st.due_ns, 24 * MSN); /* it held from the end of the gap */
    pressure_after_trim(&st, 24 * MSN, 260 * MB, 0, 8 * MB);
    CHECK_EQ_INT(st.futile, 3);
    CHECK_EQ_INT(st.futile_timed, 0);
    /* The climb's futile trims do not hold off the heap estimate's: it says memory is free. */
    in = input(25, 262, 400);
    in.estimate = 110 * MB;
    in.estimate_known = 1;
    in.estimate_ns = 25 * MSN;
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_WATCH); /* 500 ms since the last trim */
    in.now_ns = 524 * MSN;
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_TRIM);
    CHECK_EQ_INT(st.rule, PRESSURE_RULE_ESTIMATE);
    CHECK_EQ_INT(st.due_ns, 524 * MSN);
    /* A trim that released memory resets the back-off; the base is its RSS after. */
    pressure_after_trim(&st, 524 * MSN, 120 * MB, 140 * (int64_t)MB, 8 * MB);
    CHECK_EQ_INT(st.futile, 0);
    CHECK_EQ_INT(st.base_rss, 120 * MB);
    in = input(525, 190, 400); /* below the floor again */
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_OUTSIDE);
    /* The low-water mark: RSS fell, growth counts from there. */
    in = input(526, 100, 400);
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_OUTSIDE);
    CHECK_EQ_INT(st.base_rss, 100 * MB);

    /* RSS up and down by a step (big blocks, live): each futile growth trim doubles the gap. */
    struct pressure_state loop = {.last_trim_ns = -3600000 * MSN};
    int64_t t = 0;
    int trims = 0;
    for (int i = 0; i < 1000; i++, t += 1) { /* a cycle per ms for a second */
        in = input(t, (i & 1) ? 250 : 220, 400);
        if (pressure_decide(&in, &loop) == PRESSURE_TRIM) {
            trims++;
            pressure_after_trim(&loop, in.now_ns, in.rss, 0, 8 * MB);
            loop.base_rss = 220 * MB; /* the block is freed again: RSS falls back */
        }
    }
    CHECK_MSG(trims >= 5 && trims <= 12, "growth trims in 1000 cycles: %d", trims);

    /* Above the line (360 MB) without growth: trim, then back off 1 s, 2 s, ... */
    struct pressure_state hard = {.last_trim_ns = -3600000 * MSN};
    in = input(0, 370, 400);
    CHECK_EQ_INT(pressure_decide(&in, &hard), PRESSURE_TRIM);
    pressure_after_trim(&hard, 0, 370 * MB, 0, 8 * MB);
    in = input(1500, 370, 400); /* 1.5 s: within 1 s << 1 */
    CHECK_EQ_INT(pressure_decide(&in, &hard), PRESSURE_WATCH);
    in = input(2100, 370, 400);
    CHECK_EQ_INT(pressure_decide(&in, &hard), PRESSURE_TRIM);
    CHECK_EQ_INT(hard.due_ns, 2000 * MSN); /* the back-off ended at 2 s: it crossed then */
    pressure_after_trim(&hard, 2000 * MSN, 370 * MB, 0, 8 * MB);
    in = input(5000, 370, 400); /* 3 s of 4 */
    CHECK_EQ_INT(pressure_decide(&in, &hard), PRESSURE_WATCH);

    /* The heap estimate: free-but-resident memory that would cross the line if reused. */
    struct pressure_state est = {.last_trim_ns = -3600000 * MSN};
    in = input(0, 250, 400);
    CHECK_EQ_INT(pressure_decide(&in, &est), PRESSURE_WATCH); /* base is 250 MB: no growth */
    in.estimate = 120 * MB;
    in.estimate_known = 1;
    in.estimate_ns = -5 * MSN;
    CHECK_EQ_INT(pressure_decide(&in, &est), PRESSURE_TRIM);
    CHECK_EQ_INT(est.due_ns, -5 * MSN); /* from the heap reading that showed it */
    in.estimate = 100 * MB;             /* 350 MB: short of the line */
    CHECK_EQ_INT(pressure_decide(&in, &est), PRESSURE_WATCH);
}

/*
 * What the kernel charges the cgroup. Full of page cache (Orthanc writing the
 * files it stores): the kernel reclaims that itself, no trim. Full of anon
 * (the heap; here other processes' too): the line holds and the trim runs,
 * although this process's RSS alone is far below the zone.
 */
static void test_charge(void)
{
    struct pressure_state st = {.last_trim_ns = -3600000 * MSN};
    struct pressure_input in = input(0, 100, 300);
    in.cg_current = 295 * (int64_t)MB; /* 95 MB of heap, 190 MB of cache, 10 MB kernel */
    in.cg_file = 190 * (int64_t)MB;
    in.cg_shmem = 0;
    CHECK_EQ_INT(pressure_charge(&in), 105 * MB);
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_OUTSIDE); /* memory.current alone: a trim */
    /* tmpfs/shmem is charged as file but the kernel cannot drop it: it counts. */
    in.cg_shmem = 100 * (int64_t)MB;
    CHECK_EQ_INT(pressure_charge(&in), 205 * MB);
    /* Full of heap: 285 MB charged, 5 MB of cache: past the line (270 MB), trim now. */
    in = input(10, 100, 300);
    in.cg_current = 285 * (int64_t)MB;
    in.cg_file = 5 * (int64_t)MB;
    in.cg_shmem = 0;
    in.estimate = 60 * MB;
    in.estimate_known = 1;
    in.estimate_ns = 5 * MSN;
    CHECK_EQ_INT(pressure_charge(&in), 280 * MB);
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_TRIM);
    CHECK_EQ_INT(st.zone, 1);
    CHECK_EQ_INT(st.rule, PRESSURE_RULE_LINE);
    /* Under the line, the free heap would take the charge over it: the estimate's trim. */
    struct pressure_state st2 = {.last_trim_ns = -3600000 * MSN};
    in.cg_current = 230 * (int64_t)MB;
    CHECK_EQ_INT(pressure_decide(&in, &st2), PRESSURE_TRIM);
    CHECK_EQ_INT(st2.rule, PRESSURE_RULE_ESTIMATE);
    /* Unknown (-1) or a stale file figure above the charge: RSS still counts. */
    in = input(20, 280, 300);
    in.cg_current = -1;
    CHECK_EQ_INT(pressure_charge(&in), 280 * MB);
    in.cg_current = 100 * (int64_t)MB;
    in.cg_file = 200 * (int64_t)MB;
    CHECK_EQ_INT(pressure_charge(&in), 280 * MB);
}

/* A new memory.events max/oom: trim at once, whatever the back-off, the zone
 * and the growth gap; not again while the last trim took what there was. */
static void test_last_chance(void)
{
    struct pressure_state st = {.last_trim_ns = -3600000 * MSN};
    struct pressure_input in = input(0, 280, 300);
    /* Futile line trims have backed the line off to 64 s. */
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_TRIM);
    for (int i = 0; i < 6; i++)
        pressure_after_trim(&st, 0, 280 * MB, 0, 8 * MB);
    CHECK_EQ_INT(st.futile_timed, 6);
    in = input(100, 280, 300);
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_WATCH);
    /* The heap read since that trim holds 50 MB free: the kernel hits max: trim now. */
    in.estimate = 50 * MB;
    in.estimate_known = 1;
    in.estimate_ns = 50 * MSN;
    in.estimate = 50 * MB;
    in.last_chance = 1;
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_TRIM);
    CHECK_EQ_INT(st.rule, PRESSURE_RULE_LAST_CHANCE);
    pressure_after_trim(&st, 100 * MSN, 230 * MB, 50 * (int64_t)MB, 8 * MB);
    /* Max again 1 ms later, nothing read since the trim, no growth: nothing to take. */
    in = input(101, 231, 300);
    in.estimate = 50 * MB; /* the old reading, from before the trim */
    in.estimate_known = 1;
    in.estimate_ns = 50 * MSN;
    in.last_chance = 1;
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_WATCH);
    /* Grown by TrimMinReleasableBytes since: trim again. */
    in = input(102, 240, 300);
    in.last_chance = 1;
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_TRIM);
    CHECK_EQ_INT(st.rule, PRESSURE_RULE_LAST_CHANCE);
    /* A cgroup full of page cache hits max all the time, the heap holds little: no trims. */
    struct pressure_state pc = {.last_trim_ns = -3600000 * MSN};
    in = input(0, 60, 300);
    in.cg_current = 299 * (int64_t)MB;
    in.cg_file = 230 * (int64_t)MB;
    in.last_chance = 1; /* never trimmed: the first one runs */
    CHECK_EQ_INT(pressure_decide(&in, &pc), PRESSURE_TRIM);
    pressure_after_trim(&pc, 0, 60 * MB, 1 * (int64_t)MB, 8 * MB);
    int trims = 0;
    for (int i = 1; i <= 1000; i++) {
        in = input(i, 60, 300);
        in.cg_current = 299 * (int64_t)MB;
        in.cg_file = 230 * (int64_t)MB;
        in.estimate = 2 * MB;
        in.estimate_known = 1;
        in.estimate_ns = (i - 1) * MSN;
        in.last_chance = 1;
        trims += pressure_decide(&in, &pc) == PRESSURE_TRIM;
    }
    CHECK_EQ_INT(trims, 0);
}

static struct mt_counters counters(struct memtrim *mt)
{
    struct mt_counters c;
    mt_counters_get(mt, &c);
    return c;
}

/* Whether every pressure trim the trim service counted has its reaction recorded: the
 * pressure thread records it after the trim returns, so the two counts differ a moment. */
static int reactions_caught_up(struct memtrim *mt)
{
    struct mt_counters c = counters(mt);
    uint64_t n = 0;
    for (int i = 0; i <= MT_REACTION_BUCKETS; i++)
        n += c.pressure_reaction_hist[i];
    return n == c.trims[MT_TRIGGER_PRESSURE];
}

static int source_is(struct memtrim *mt, const char *want)
{
    struct mt_counters c = counters(mt);
    return c.pressure_source && strcmp(c.pressure_source, want) == 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* No cgroup files at all (a container without /sys/fs/cgroup): the statm poll.
 * Inside the zone it reads RSS there; moved outside, it stops reading inside. */
static void test_poll_fallback_and_zone(void)
{
    char dir[256], json[256];
    if (harness_tmpdir(dir, sizeof(dir), "pressure-nocg"))
        return;
    setenv("MEMTRIM_CGROUP_ROOT", dir, 1);
    uint64_t rss = probe_rss();
    /* RSS at two thirds of the limit: inside the zone, under the line. */
    snprintf(json, sizeof(json),
             "{\"HttpPort\": 0, \"Database\": \"\", \"TrimIntervalSeconds\": 0,"
             " \"MemoryLimitBytes\": %llu}",
             (unsigned long long)(rss + rss / 2));
    struct memtrim *mt = start(json);
    unsetenv("MEMTRIM_CGROUP_ROOT");
    if (!mt)
        goto out;
    WAIT_FOR(source_is(mt, "poll") && counters(mt).pressure_checks[1] >= 3, 10);
    struct mt_counters c = counters(mt);
    CHECK_MSG(source_is(mt, "poll"), "pressure source %s", c.pressure_source);
    CHECK_MSG(c.pressure_checks[1] >= 3 && c.pressure_zone == 1, "inside-zone checks %llu, zone %d",
              (unsigned long long)c.pressure_checks[1], c.pressure_zone);
    int zone = 0;
    CHECK_CONTAINS(mt_pressure_source(mt, &zone), "poll");
    CHECK_EQ_INT(zone, 1);

    /* The limit far above RSS: outside the zone; inside checks stop while outside ones go on. */
    char patch[128], *err = NULL;
    snprintf(patch, sizeof(patch), "{\"MemoryLimitBytes\": %llu}", (unsigned long long)(rss * 8));
    CHECK_EQ_INT(mt_config_patch(mt, patch, &err), 0);
    free(err);
    WAIT_FOR(counters(mt).pressure_zone == 0, 10);
    c = counters(mt);
    CHECK_EQ_INT(c.pressure_zone, 0);
    uint64_t inside = c.pressure_checks[1], outside = c.pressure_checks[0];
    WAIT_FOR(counters(mt).pressure_checks[0] >= outside + 3, 10);
    c = counters(mt);
    CHECK_MSG(c.pressure_checks[0] >= outside + 3, "outside checks %llu -> %llu",
              (unsigned long long)outside, (unsigned long long)c.pressure_checks[0]);
    CHECK_EQ_INT(c.pressure_checks[1], inside);

    /* No limit at all: nothing to watch. */
    CHECK_EQ_INT(mt_config_patch(mt, "{\"MemoryLimitBytes\": null}", &err), 0);
    free(err);
    WAIT_FOR(source_is(mt, "none"), 10);
    CHECK_MSG(source_is(mt, "none"), "source %s", counters(mt).pressure_source);
    mt_destroy(mt);
out:
    harness_rmtree(dir);
}

/* Cgroup files that are readable but not a cgroup filesystem (a copy, a bind of
 * something else): their limit is used, thresholds are not trusted: poll. */
static void test_not_cgroupfs(void)
{
    char dir[256], path[512], cg[4096] = "", rel[1024] = "";
    if (harness_tmpdir(dir, sizeof(dir), "pressure-fakecg"))
        return;
    /* This process's v1 memory cgroup path, made under the fake root (or its root). */
    FILE *f = fopen("/proc/self/cgroup", "r");
    int v1 = 0;
    while (f && fgets(cg, sizeof(cg), f)) {
        char *c1 = strchr(cg, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 && strncmp(c1 + 1, "memory:", 7) == 0) {
            snprintf(rel, sizeof(rel), "%s", c2 + 1);
            rel[strcspn(rel, "\n")] = '\0';
            v1 = 1;
        }
    }
    if (f)
        fclose(f);
    uint64_t rss = probe_rss();
    char limit[32];
    snprintf(limit, sizeof(limit), "%llu\n", (unsigned long long)(rss + rss / 2));
    if (v1) {
        snprintf(path, sizeof(path), "%s/memory", dir);
        mkdir(path, 0755);
    }
    const char *files[] = {v1 ? "memory/memory.limit_in_bytes" : "memory.max",
                           v1 ? "memory/memory.usage_in_bytes" : "memory.current",
                           v1 ? "memory/cgroup.event_control" : "memory.pressure",
                           v1 ? "memory/memory.max_usage_in_bytes" : "memory.events"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        write_file(path, i == 0 ? limit : "0\n");
    }
    (void)rel; /* the probe falls back to the root of the mount: our files */
    setenv("MEMTRIM_CGROUP_ROOT", dir, 1);
    struct memtrim *mt = start("{\"HttpPort\": 0, \"Database\": \"\", \"TrimIntervalSeconds\": 0}");
    unsetenv("MEMTRIM_CGROUP_ROOT");
    if (mt) {
        WAIT_FOR(source_is(mt, "poll"), 10);
        struct mt_snapshot s;
        mt_snapshot_get(mt, &s);
        CHECK_MSG(source_is(mt, "poll"), "source %s", counters(mt).pressure_source);
        CHECK_EQ_INT(s.memory_limit_bytes, rss + rss / 2); /* the fake cgroup's limit */
        mt_destroy(mt);
    }
    harness_rmtree(dir);
}

/* The demo's pattern: a worker fills its arena and frees 98 % of it (resident,
 * below the zone), then another arena grows live memory into the zone: a
 * pressure trim gives the first one back while the second climbs, without a
 * periodic or burst trim, and records its reaction time (counters, store). */
static void test_climb_is_trimmed(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    char dir[256], json[512];
    struct churn c[1];
    struct mt_trim_result manual;
    void *live[4096];
    size_t nlive = 0, total = 0;
    unsigned seed = 7;
    int64_t retry;

    if (harness_tmpdir(dir, sizeof(dir), "pressure-climb"))
        return;
    uint64_t rss0 = probe_rss();
    uint64_t limit = rss0 + 160 * MB; /* floor ~ rss0/2 + 80 MB, line ~ rss0 + 144 MB */
    snprintf(json, sizeof(json),
             "{\"HttpPort\": 0, \"Database\": \"%s/m.sqlite\", \"TrimIntervalSeconds\": 0,"
             " \"TrimReleasableTriggerBytes\": 0, \"ManualTrimMinIntervalMs\": 0,"
             " \"MemoryLimitBytes\": %llu}",
             dir, (unsigned long long)limit);
    struct memtrim *mt = start(json);
    if (!mt)
        goto out;
    CHECK_EQ_INT(mt_trim_manual(mt, -1, &manual, &retry), 0);
    CHECK_EQ_INT(manual.reaction_ns, -1); /* not a pressure trim */
    rss0 = probe_rss();
    churn_run(c, 1, 60, 20); /* another arena: ~60 MB taken, ~59 MB freed and resident */
    while (total < 60 * MB && nlive < 4096) { /* this thread's arena: 60 MB live */
        size_t size = 1024 + (size_t)(rand_r(&seed) % (63 * 1024));
        char *p = malloc(size);
        if (!p)
            break;
        memset(p, 1, size);
        live[nlive++] = p;
        total += size;
    }
    /* Without the pressure trim: ~rss0 + 120 MB; with it: ~rss0 + 61 MB. */
    /* RSS falls while malloc_trim runs, the counters after it (and its cgroup reading). */
    WAIT_FOR(probe_rss() < rss0 + 90 * MB && counters(mt).trims[MT_TRIGGER_PRESSURE] >= 1, 10);
    CHECK_MSG(probe_rss() < rss0 + 90 * MB, "RSS %llu MB, started at %llu MB",
              (unsigned long long)(probe_rss() / MB), (unsigned long long)(rss0 / MB));
    WAIT_FOR(reactions_caught_up(mt), 10);
    struct mt_counters k = counters(mt);
    CHECK(k.trims[MT_TRIGGER_PRESSURE] >= 1);
    /* Net of what this thread allocated while the trim ran: ~59 MB freed, less the overlap. */
    CHECK_MSG(k.released_bytes[MT_TRIGGER_PRESSURE] > 16 * MB, "released %llu MB",
              (unsigned long long)(k.released_bytes[MT_TRIGGER_PRESSURE] / MB));
    uint64_t reactions = 0;
    for (int i = 0; i <= MT_REACTION_BUCKETS; i++)
        reactions += k.pressure_reaction_hist[i];
    CHECK_EQ_INT(reactions, k.trims[MT_TRIGGER_PRESSURE]);
    CHECK(k.pressure_reaction_last_seconds >= 0);

    /* The store has each pressure trim with its reaction, the manual one without. */
    mt_destroy(mt);
    mt = NULL;
    struct db_reader *r = NULL;
    struct db_trim_row *rows = NULL;
    struct db_trim_summary sum;
    struct db_trim_query q = {INT64_MIN, INT64_MAX, -1, 1000, 0, 0};
    size_t n = 0, pressure = 0;
    char *err = NULL;
    char path[300];
    snprintf(path, sizeof(path), "%s/m.sqlite", dir);
    CHECK_EQ_INT(db_reader_open(path, &r, &err), 0);
    if (r && db_query_trims(r, &q, &rows, &n, &sum, &err) == 0) {
        for (size_t i = 0; i < n; i++) {
            if (rows[i].t.trigger == MT_TRIGGER_PRESSURE) {
                pressure++;
                CHECK_MSG(rows[i].t.reaction_ns >= 0, "trim %lld without a reaction",
                          (long long)rows[i].t.id);
            } else {
                CHECK_EQ_INT(rows[i].t.reaction_ns, -1);
            }
        }
    }
    CHECK_MSG(pressure >= 1 && pressure == k.trims[MT_TRIGGER_PRESSURE],
              "stored pressure trims %zu, counted %llu", pressure,
              (unsigned long long)k.trims[MT_TRIGGER_PRESSURE]);
    free(rows);
    free(err);
    db_reader_close(r);
    churn_release(c, 1);
    for (size_t i = 0; i < nlive; i++)
        free(live[i]);
out:
    mt_destroy(mt);
    harness_rmtree(dir);
}

/*
 * A limit far below the host's working set (issue 24: MemoryLimitBytes 1 gave 2,400-2,700
 * pressure trims in 20 s, each releasing what the demo's last study freed). Every reading
 * is past the line and every study a step of growth; each trim releases 64 MB and leaves
 * RSS far above the line: they back off as if they had found nothing.
 */
static void test_storm_below_working_set(void)
{
    struct pressure_state st = {.last_trim_ns = -3600000 * MSN};
    int trims = 0;
    for (int64_t t = 0; t < 20000; t++) { /* 20 s, a reading per ms */
        /* the demo: 100 MB live, a 64 MB study every 7 ms, freed at its end */
        uint64_t rss_mb = 100 + (uint64_t)(t % 7) * 10;
        struct pressure_input in = input(t, rss_mb, 0);
        in.limit = 1; /* bytes */
        if (pressure_decide(&in, &st) == PRESSURE_TRIM) {
            trims++;
            pressure_after_trim(&st, in.now_ns, 100 * MB, 64 * (int64_t)MB, 8 * MB);
        }
    }
    printf("storm: %d pressure trims in 20 s below the working set\n", trims);
    CHECK_MSG(trims <= 40, "%d pressure trims in 20 s with a 1-byte limit", trims);
    CHECK_MSG(trims >= 5, "%d: the path still trims now and then", trims);
    /* Under the line again: a useful trim resets the back-off at once. */
    struct pressure_input in = input(30000, 380, 400);
    CHECK_EQ_INT(pressure_decide(&in, &st), PRESSURE_TRIM);
    pressure_after_trim(&st, in.now_ns, 200 * MB, 180 * (int64_t)MB, 8 * MB);
    CHECK_EQ_INT(st.futile, 0);
    CHECK_EQ_INT(st.futile_timed, 0);
}

/*
 * Trims that buy no headroom back off (issue 41): a host under 560 MB that re-uses what a
 * trim released (node's worker_threads) climbs back 0.3 MB a ms from 420 MB, and each trim
 * finds everything above 420 MB free. Below the line the growth rule fired every ~93 ms (a
 * step of 28 MB): 53 trims in 5 s, each one's release back before the next. Now each such
 * trim doubles the wait (50 ms up to 6.4 s). The control rt-no-backoff (the old rule) fails
 * the bound.
 */
/* The host of one run: from floor_mb, RSS climbs to peak_mb, each pressure trim takes it back
 * to floor_mb (everything above it free); the cgroup, when file_mb >= 0, charges RSS less
 * file_mb (file pages it maps that are charged elsewhere), and page cache fills it up to
 * cache_mb when that is more (file I/O holding it at its limit). *highest: the highest
 * charge a reading saw, page cache left out. */
struct host {
    int64_t ms, limit_mb, file_mb, cache_mb;
    uint64_t floor_mb;
    double climb_mb_per_ms, peak_mb;
};

static int returning_host(const struct host *h, int *returned, uint64_t *highest)
{
    struct pressure_state st = {.last_trim_ns = -3600000 * MSN};
    double rss = (double)h->floor_mb;
    int trims = 0;
    *returned = 0;
    *highest = 0;
    for (int64_t t = 0; t < h->ms; t++) {
        rss += h->climb_mb_per_ms;
        if (rss > h->peak_mb)
            rss = h->peak_mb;
        struct pressure_input in = input(t, (uint64_t)rss, h->limit_mb);
        if (h->file_mb >= 0) {
            int64_t hard = (int64_t)in.rss - h->file_mb * (int64_t)MB;
            int64_t cache = h->cache_mb * (int64_t)MB - hard;
            in.cg_file = cache > 0 ? cache : 0;
            in.cg_current = hard + in.cg_file, in.cg_shmem = 0;
        }
        uint64_t charged = h->file_mb < 0 ? in.rss : (uint64_t)(in.cg_current - in.cg_file);
        if (charged > *highest)
            *highest = charged;
        if (pressure_decide(&in, &st) != PRESSURE_TRIM)
            continue;
        trims++;
        int64_t back = pressure_judge_last(&st, in.rss);
        *returned += back >= 0 && st.returned > 0;
        int64_t released = (int64_t)(in.rss - h->floor_mb * MB);
        pressure_after_trim(&st, in.now_ns, h->floor_mb * MB, released, 8 * MB);
        rss = (double)h->floor_mb;
    }
    return trims;
}

static void test_returned_release_backs_off(void)
{
    int returned;
    uint64_t highest;
    struct host node = {.ms = 5000, .limit_mb = 560, .file_mb = -1, .floor_mb = 420,
                        .climb_mb_per_ms = 0.3, .peak_mb = 470};
    int trims = returning_host(&node, &returned, &highest);
    printf("a host that re-uses each release: %d pressure trims in 5 s (%d judged returned)\n",
           trims, returned);
    CHECK_MSG(trims <= 12, "%d pressure trims in 5 s whose releases all came back", trims);
    CHECK_MSG(trims >= 5, "%d: the path still trims now and then", trims);
    CHECK_MSG(returned >= trims - 2, "%d of %d judged returned", returned, trims);

    /* Judging: more than half back counts, less resets; a small release is not judged. */
    struct pressure_state st = {.last_trim_ns = 0};
    pressure_after_trim(&st, 0, 200 * MB, 40 * (int64_t)MB, 8 * MB);
    CHECK_EQ_INT((int)(pressure_judge_last(&st, 230 * MB) / (int64_t)MB), 30);
    CHECK_EQ_INT(st.returned, 1);
    CHECK_EQ_INT((int)pressure_judge_last(&st, 300 * MB), -1); /* judged once */
    pressure_after_trim(&st, 0, 100 * MB, 147 * (int64_t)MB, 8 * MB); /* the demo's study */
    CHECK_EQ_INT((int)(pressure_judge_last(&st, 128 * MB) / (int64_t)MB), 28);
    CHECK_EQ_INT(st.returned, 0); /* 28 of 147 MB back: headroom kept */
    pressure_after_trim(&st, 0, 100 * MB, 4 * (int64_t)MB, 8 * MB);
    CHECK_EQ_INT((int)pressure_judge_last(&st, 200 * MB), -1); /* futile: its own back-off */
    /* Back from the lowest reading since (another trim lowered RSS further). */
    pressure_after_trim(&st, 0, 300 * MB, 40 * (int64_t)MB, 8 * MB);
    struct pressure_input in = input(1, 250, 560);
    pressure_decide(&in, &st);
    CHECK_EQ_INT((int)(pressure_judge_last(&st, 290 * MB) / (int64_t)MB), 40);

    /* At the line by what the limit counts survival comes first: the returned wait does
     * not hold (no cgroup reading: RSS is what MemoryLimitBytes counts). */
    struct pressure_state line = {.last_trim_ns = 0, .returned = 8, .base_rss = 470 * MB,
                                  .trimmed = 1};
    in = input(10, 510, 560); /* line 504 MB, 40 MB grown: a step */
    CHECK_EQ_INT(pressure_decide(&in, &line), PRESSURE_TRIM);
    CHECK_EQ_INT(line.rule, PRESSURE_RULE_GROWTH);
    /* RSS at the line, its cgroup's charge 40 MB under it (file pages charged elsewhere):
     * the returned wait holds, and the line rule trims once a second. */
    in.cg_current = 470 * (int64_t)MB, in.cg_file = 0, in.cg_shmem = 0;
    CHECK_EQ_INT(pressure_decide(&in, &line), PRESSURE_WATCH);
    CHECK_MSG(pressure_next_due(&in, &line) == 1000 * MSN, "due %lld ns",
              (long long)pressure_next_due(&in, &line));
    in.now_ns = 1000 * MSN;
    CHECK_EQ_INT(pressure_decide(&in, &line), PRESSURE_TRIM);
    CHECK_EQ_INT(line.rule, PRESSURE_RULE_LINE);
    line.base_rss = 400 * MB;
    in = input(10, 450, 560); /* below it: 10 ms after the trim, it waits */
    CHECK_EQ_INT(pressure_decide(&in, &line), PRESSURE_WATCH);
    CHECK_MSG(pressure_next_due(&in, &line) == 6400 * MSN, "due %lld ns",
              (long long)pressure_next_due(&in, &line));
    /* A member of a group: the cgroup's charge is mostly the others'; what it releases
     * serves them until it re-uses it, so no returned wait (the futile ones hold). */
    in = input(10, 150, 560);
    in.cg_current = 460 * (int64_t)MB, in.cg_file = 0, in.cg_shmem = 0;
    line.base_rss = 100 * MB;
    CHECK_EQ_INT(pressure_decide(&in, &line), PRESSURE_TRIM);
}

/*
 * A host that re-uses each release whose RSS peaks above the line (node under 560 MiB: 504
 * MiB line, RSS peaks at 530-535 MB, its cgroup's charge 40 MB less: file pages it maps are
 * charged elsewhere; each trim back to ~420 MB, regrown in ~400 ms): at the line by RSS the
 * growth rule fired as soon as a step had come back, whatever the returned count: 22-31
 * pressure trims in 3-7.5 s of node's burst. Now the returned wait holds until what the
 * limit counts reaches the line, and the line rule trims once a second: at most 8 (the
 * doubling returned wait) and one a second. The control eng-line-growth (the exception
 * judged on RSS) fails the bound. And one whose charge does reach the line (ruby/puma in
 * 300 MiB, climbing 1 MB a ms from 150 MB and further than the limit untrimmed) is trimmed
 * there at once, each time: its charge never reaches the limit.
 */
static void test_returned_release_at_the_line(void)
{
    int returned;
    uint64_t highest;
    struct host node = {.ms = 10000, .limit_mb = 560, .file_mb = 40, .floor_mb = 420,
                        .climb_mb_per_ms = 0.3, .peak_mb = 535};
    int trims = returning_host(&node, &returned, &highest);
    printf("a host that re-uses each release, its RSS above the line: %d pressure trims in "
           "10 s (%d judged returned)\n", trims, returned);
    CHECK_MSG(trims <= 8 + 10, "%d pressure trims in 10 s whose releases all came back", trims);
    CHECK_MSG(trims >= 10, "%d: at the line it still trims once a second", trims);
    CHECK_MSG(returned >= trims - 2, "%d of %d judged returned", returned, trims);

    struct host ruby = {.ms = 10000, .limit_mb = 300, .file_mb = 10, .floor_mb = 150,
                        .climb_mb_per_ms = 1, .peak_mb = 400};
    trims = returning_host(&ruby, &returned, &highest);
    printf("one whose charge climbs past the line: %d pressure trims in 10 s (%d judged "
           "returned), its charge at most %llu MB of 300\n", trims, returned,
           (unsigned long long)(highest / MB));
    CHECK_MSG(highest <= 270 * MB, "its charge reached %llu MB (line 270 MB)",
              (unsigned long long)(highest / MB));
    CHECK_MSG(returned >= trims - 2, "%d of %d judged returned", returned, trims);
}

/*
 * A cgroup that file I/O holds at its limit with page cache (Orthanc's storage under 340 MiB;
 * the kernel reclaims that cache as the host grows), its host far under the line by what
 * the kernel cannot take back, re-using each release (1 MB a ms back from 150 MB): the limit
 * is full to the line by its own count, so before no returned wait held and the growth rule
 * trimmed at each step, every 17-18 ms (the control eng-cache-line-nowait). Now the wait
 * stays at its 50 ms base there: at most one trim each 50 ms, and it never doubles away
 * from a cgroup that is one step from its limit. And one whose own charge climbs to the
 * line under the same cache (from 280 MB) is trimmed there at once, each time.
 */
static void test_returned_release_held_by_page_cache(void)
{
    int returned;
    uint64_t highest;
    struct host h = {.ms = 10000, .limit_mb = 340, .file_mb = 0, .cache_mb = 336,
                     .floor_mb = 150, .climb_mb_per_ms = 1, .peak_mb = 220};
    int trims = returning_host(&h, &returned, &highest);
    printf("a cgroup held at its limit by page cache, its host re-using each release: %d "
           "pressure trims in 10 s (%d judged returned), its charge less the cache at most "
           "%llu MB\n", trims, returned, (unsigned long long)(highest / MB));
    CHECK_MSG(trims <= 10000 / 50 + 2, "%d pressure trims in 10 s: more than one each 50 ms",
              trims);
    CHECK_MSG(trims >= 150, "%d pressure trims in 10 s: the wait grew past its 50 ms base",
              trims);
    CHECK_MSG(returned >= trims - 2, "%d of %d judged returned", returned, trims);

    struct host up = {.ms = 10000, .limit_mb = 340, .file_mb = 0, .cache_mb = 336,
                      .floor_mb = 280, .climb_mb_per_ms = 1, .peak_mb = 400};
    trims = returning_host(&up, &returned, &highest);
    printf("its charge less the cache climbing to the line: %d pressure trims in 10 s, that "
           "charge at most %llu MB (line 306 MB)\n", trims, (unsigned long long)(highest / MB));
    CHECK_MSG(highest <= 306 * MB, "its charge less the cache reached %llu MB (line 306 MB)",
              (unsigned long long)(highest / MB));
}

/*
 * A release that came back is judged so even when a trim of another trigger took it again
 * before the next pressure trim (node: the housekeeper's burst trim, 133-163 MB, between
 * two pressure trims; judged from the low it left, the release "stayed out", the returned
 * count went back to 0, and the waits started again at 50 ms: 5 more trims in 0.4 s). The
 * control eng-returned-reset (judged at the next trim's start alone) resets it.
 */
static void test_returned_release_taken_again(void)
{
    struct pressure_state st = {.last_trim_ns = 0, .returned = 5, .trimmed = 1,
                                .line = 504 * MB};
    pressure_after_trim(&st, 0, 430 * MB, 70 * (int64_t)MB, 8 * MB);
    uint64_t seen[] = {450, 500, 550, 410, 420}; /* back, then a burst trim's 140 MB */
    for (int i = 0; i < 5; i++) {
        struct pressure_input in = input(100 + 100 * i, seen[i], 560);
        pressure_decide(&in, &st);
    }
    int64_t back = pressure_judge_last(&st, 425 * MB);
    CHECK_MSG(back == 70 * (int64_t)MB, "judged %lld MB back of 70", (long long)(back / (int64_t)MB));
    CHECK_EQ_INT(st.returned, 6);
    /* What a reading saw is the last trim's alone: judged once, forgotten at the next. */
    pressure_after_trim(&st, 600 * MSN, 400 * MB, 20 * (int64_t)MB, 8 * MB);
    struct pressure_input in = input(700, 405, 560);
    pressure_decide(&in, &st);
    CHECK_EQ_INT((int)(pressure_judge_last(&st, 405 * MB) / (int64_t)MB), 5);
    CHECK_EQ_INT(st.returned, 0);
}

/*
 * The decision on a recorded trace (tests/unit/pressure_trace.txt): a simulated host of four
 * kinds (alone under MemoryLimitBytes; in a cgroup whose page cache fills the rest and whose
 * kernel reports the limit reached; one that re-uses each release; a low ratio with small
 * studies), 4,000 readings each, 1-3 ms apart, its heap read every 50-150 ms, each trim given
 * what the heap holds free. Every reading's verdict, rule, due time, zone, next due time and
 * growth gap, and each trim's judgement, went into one line; the file holds the lines of the
 * trims, and each kind's count of readings by verdict and rule with a hash of all its lines,
 * as the decision of a process alone (pressure_decide before issue 38 made it the decision
 * over a set of one member) gave them. MEMTRIM_RECORD_TRACE=FILE writes the file instead.
 */
struct sim {
    uint64_t lcg;
    int64_t now;
    double live, freeres, base, cache; /* MB */
    int climbing;
    double target, step_mb;
    int64_t next_read, est_ns;
    uint64_t est;
    int est_known;
};

static unsigned sim_rand(struct sim *s, unsigned n)
{
    s->lcg = s->lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)((s->lcg >> 33) % n);
}

static uint64_t fnv(uint64_t h, const char *line)
{
    for (const char *c = line; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    return h;
}

struct trace_kind {
    const char *name;
    int64_t limit_mb;
    double ratio;
    uint64_t min_mb;
    int cgroup;      /* a cgroup in force: its charge, page cache, memory.events */
    double study_mb; /* each climb's size */
    int reuse;       /* the next climb re-uses the free memory first (rss does not grow) */
    double cache_cap; /* the page cache grows to this share of the limit */
    unsigned keep;   /* 1 in keep climbs keep their study live (0 none) until the next */
    unsigned pause;  /* a climb starts at 1 reading in pause (0: 20) */
};

static void trace_run(const struct trace_kind *k, FILE *rec, char *sum, size_t sumlen,
                      FILE *want_trims, int *mismatch)
{
    struct sim s = {.lcg = 42 + (uint64_t)k->limit_mb, .base = 20, .climbing = 1};
    struct pressure_state st = {.last_trim_ns = -3600000 * MSN};
    long counts[3] = {0, 0, 0}, rules[4] = {0, 0, 0, 0};
    uint64_t h = 1469598103934665603ULL;
    s.target = k->study_mb;
    s.step_mb = 1 + sim_rand(&s, 3);
    for (int i = 0; i < 6000; i++) {
        s.now += (1 + sim_rand(&s, 3)) * MSN;
        /* the host: climb a study (re-using free memory first), free it, pause */
        if (s.climbing) {
            double take = s.step_mb;
            if (k->reuse && s.freeres > 0) {
                double r = s.freeres < take ? s.freeres : take;
                s.freeres -= r;
            }
            s.live += take;
            if (s.live >= s.target) {
                s.climbing = 0;
                if (!k->keep || sim_rand(&s, k->keep)) {
                    s.freeres += s.live * 0.98;
                    s.live *= 0.02;
                }
            }
        } else if (sim_rand(&s, k->pause ? k->pause : 20) == 0) {
            s.climbing = 1;
            s.target = s.live + k->study_mb * (0.5 + sim_rand(&s, 100) / 100.0);
            s.step_mb = 1 + sim_rand(&s, 3);
        }
        if (k->cgroup && s.cache < k->cache_cap * (double)k->limit_mb)
            s.cache += sim_rand(&s, 3);
        double rss = s.base + s.live + s.freeres;
        int last_chance = 0;
        if (k->cgroup && rss + s.cache > (double)k->limit_mb) {
            last_chance = 1; /* the kernel reclaims the cache first */
            s.cache = (double)k->limit_mb - rss > 0 ? (double)k->limit_mb - rss : 0;
        }
        if (rss > (double)k->limit_mb) { /* killed: the host starts again */
            s.live = s.freeres = 0;
            s.climbing = 1;
            s.target = k->study_mb;
            rss = s.base;
        }
        if (s.now >= s.next_read) {
            s.est = (uint64_t)(s.freeres * MB);
            s.est_known = 1;
            s.est_ns = s.now;
            s.next_read = s.now + (50 + sim_rand(&s, 100)) * MSN;
        }
        struct pressure_input in = {.now_ns = s.now, .rss = (uint64_t)(rss * MB),
                                    .limit = k->limit_mb * (int64_t)MB, .ratio = k->ratio,
                                    .min_releasable = k->min_mb * MB, .estimate = s.est,
                                    .estimate_known = s.est_known, .estimate_ns = s.est_ns,
                                    .cg_current = k->cgroup ? (int64_t)((rss + s.cache) * MB) : -1,
                                    .cg_file = k->cgroup ? (int64_t)(s.cache * MB) : -1,
                                    .cg_shmem = k->cgroup ? (int64_t)(s.cache * MB) / 8 : -1,
                                    .last_chance = last_chance};
        int v = pressure_decide(&in, &st);
        int64_t next = pressure_next_due(&in, &st);
        char line[200];
        int len = snprintf(line, sizeof(line), "%s %d %d %d %lld %d %lld %lld", k->name, i, v,
                           v == PRESSURE_TRIM ? st.rule : -1,
                           v == PRESSURE_TRIM && st.due_ns ? (long long)(s.now - st.due_ns) : -1LL,
                           st.zone, next == INT64_MAX ? -1LL : (long long)(next - s.now),
                           (long long)pressure_growth_gap(&in, &st));
        counts[v]++;
        if (v == PRESSURE_TRIM) {
            rules[st.rule]++;
            int64_t back = pressure_judge_last(&st, in.rss);
            uint64_t released = (uint64_t)(s.freeres * MB);
            rss -= s.freeres;
            s.freeres = 0;
            s.est = 0;
            pressure_after_trim(&st, s.now, (uint64_t)(rss * MB), (int64_t)released,
                                in.min_releasable);
            snprintf(line + len, sizeof(line) - (size_t)len, " back %lld returned %d futile %d/%d",
                     (long long)back, st.returned, st.futile, st.futile_timed);
            if (rec)
                fprintf(rec, "%s\n", line);
            if (want_trims) {
                char want[200];
                if (!fgets(want, sizeof(want), want_trims) || strncmp(want, line, strlen(line)) ||
                    want[strlen(line)] != '\n') {
                    if ((*mismatch)++ < 5)
                        fprintf(stderr, "trace: got  %s\n       want %s", line, want);
                }
            }
        }
        h = fnv(h, line);
    }
    snprintf(sum, sumlen, "sum %s outside %ld watch %ld trim %ld growth %ld line %ld estimate %ld "
             "last-chance %ld hash %016llx", k->name, counts[0], counts[1], counts[2], rules[0],
             rules[1], rules[2], rules[3], (unsigned long long)h);
}

static void test_decision_trace(void)
{
    static const struct trace_kind kinds[] = {
        {"alone", 300, 0.9, 8, 0, 150, 0, 0, 3, 0},
        {"cgroup", 340, 0.9, 8, 1, 60, 0, 0.3, 4, 0},
        {"reuse", 560, 0.9, 8, 0, 200, 1, 0, 2, 0},
        {"low", 250, 0.6, 1, 1, 30, 1, 0.2, 3, 0},
        {"big-min", 400, 0.8, 64, 0, 90, 0, 0, 2, 0},
        {"live", 300, 0.5, 8, 0, 12, 0, 0, 1, 300},
        {"live-cgroup", 300, 0.5, 8, 1, 12, 0, 0.1, 1, 300},
    };
    const char *record = getenv("MEMTRIM_RECORD_TRACE");
    FILE *rec = record ? fopen(record, "we") : NULL;
    FILE *want = NULL;
    if (!rec) {
        want = fopen(MEMTRIM_SOURCE_DIR "/tests/unit/pressure_trace.txt", "re");
        CHECK_MSG(want != NULL, "%s", "no tests/unit/pressure_trace.txt");
        if (!want)
            return;
    }
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        char sum[300], line[300];
        int mismatch = 0;
        trace_run(&kinds[k], rec, sum, sizeof(sum), want, &mismatch);
        if (rec) {
            fprintf(rec, "%s\n", sum);
            continue;
        }
        CHECK_MSG(mismatch == 0, "%s: %d trims differ from the recorded trace", kinds[k].name,
                  mismatch);
        CHECK_MSG(fgets(line, sizeof(line), want) && !strncmp(line, sum, strlen(sum)),
                  "%s: the readings differ: got %s, want %s", kinds[k].name, sum, line);
        printf("%s\n", sum);
    }
    if (rec)
        fclose(rec);
    if (want)
        fclose(want);
}

int main(void)
{
    RUN(test_decide);
    RUN(test_decision_trace);
    RUN(test_charge);
    RUN(test_last_chance);
    RUN(test_storm_below_working_set);
    RUN(test_returned_release_backs_off);
    RUN(test_returned_release_at_the_line);
    RUN(test_returned_release_taken_again);
    RUN(test_returned_release_held_by_page_cache);
    RUN(test_poll_fallback_and_zone);
    RUN(test_not_cgroupfs);
    RUN(test_climb_is_trimmed);
    return harness_end();
}
