/*
 * test_doctor.c - each of the doctor's rules fires on a synthetic history
 * that should trigger it, with its evidence and recommendation, and stays
 * silent on histories that should not; a healthy history has no findings.
 */
#include <stdlib.h>

#include "config.h"
#include "doctor.h"
#include "harness.h"

#define MIB (1024LL * 1024)
#define NOW 1700000000000LL

static struct doctor_trim trims[64];
static struct mt_arena arena_buf[16];
static struct mt_arenas arenas;

/* A healthy host: a limit, a heap with some free memory, nothing else going on. */
static void healthy(struct doctor_input *in)
{
    memset(in, 0, sizeof(*in));
    config_defaults(&in->cfg);
    in->now_ms = NOW;
    in->uptime_ms = 3600 * 1000;
    in->ncpu = 2;
    in->glibc = 1;
    in->snap.cheap.timestamp_ms = NOW;
    in->snap.cheap.rss_bytes = 200 * MIB;
    in->snap.cheap.cgroup_version = 2;
    in->snap.memory_limit_bytes = 1024 * MIB;
    in->snap.heap.timestamp_ms = NOW;
    in->snap.heap.heap_in_use_bytes = 150 * MIB;
    in->snap.heap.heap_free_bytes = 40 * MIB;
    in->peak_rss_bytes = 300 * MIB;
    in->trims = trims;
    in->ntrims = 0;
}

static int run(const struct doctor_input *in, struct doctor_finding *f)
{
    return doctor_run(in, f, DOCTOR_MAX_FINDINGS);
}

static const struct doctor_finding *find(const struct doctor_finding *f, int n, const char *id)
{
    for (int i = 0; i < n; i++)
        if (strcmp(f[i].id, id) == 0)
            return &f[i];
    return NULL;
}

static double evidence(const struct doctor_finding *f, const char *name)
{
    for (int i = 0; f && i < f->nevidence; i++)
        if (strcmp(f->evidence[i].name, name) == 0)
            return f->evidence[i].value;
    return -1;
}

static void add_trim(struct doctor_input *in, int trigger, int64_t ago_ms, int64_t released,
                     uint64_t rss_before)
{
    struct doctor_trim *t = &trims[in->ntrims++];
    t->trigger = trigger;
    t->start_ms = NOW - ago_ms;
    t->duration_ns = 5000000;
    t->released_bytes = released;
    t->rss_before_bytes = rss_before;
    t->rss_after_bytes = rss_before - (uint64_t)(released > 0 ? released : 0);
}

static void test_healthy_is_quiet(void)
{
    struct doctor_input in;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    healthy(&in);
    CHECK_EQ_INT(run(&in, f), 0);
    char *text = doctor_text(f, 0);
    CHECK_CONTAINS(text, "no findings");
    free(text);
}

/* Five arenas: the main one nearly empty, four thread arenas holding free memory. */
static void set_arenas(struct doctor_input *in, int n, uint64_t main_free, uint64_t other_free)
{
    memset(arena_buf, 0, sizeof(arena_buf));
    for (int i = 0; i < n; i++) {
        arena_buf[i].nr = i;
        arena_buf[i].free_bytes = i == 0 ? main_free : other_free;
        arena_buf[i].system_bytes = arena_buf[i].free_bytes + 10 * MIB;
    }
    arenas.count = n;
    arenas.arena = arena_buf;
    in->arenas = &arenas;
}

/* A 2-CPU container on a 64-core host: glibc's cap is 512, "auto" would set 4. */
static void test_arena_auto(void)
{
    struct doctor_input in;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    healthy(&in);
    in.host_cores = 64;
    in.quota_cpus = 2;
    in.auto_arena_max = 4;
    snprintf(in.quota_source, sizeof(in.quota_source), "/sys/fs/cgroup/app/cpu.max: 200000 100000");
    set_arenas(&in, 9, 1 * MIB, 2 * MIB);
    const struct doctor_finding *a = find(f, run(&in, f), "arena_max_auto");
    CHECK(a != NULL);
    if (a) {
        CHECK_EQ_INT(a->severity, DOCTOR_WARNING); /* 9 arenas > 4 */
        CHECK(strcmp(a->key, "MallocArenaMax") == 0 && !a->has_value);
        CHECK_CONTAINS(a->action, "\"MallocArenaMax\": \"auto\" (4 arenas");
        CHECK_CONTAINS(a->detail, "/sys/fs/cgroup/app/cpu.max: 200000 100000");
        CHECK(evidence(a, "glibc_arena_cap") == 512);
    }
    set_arenas(&in, 3, 1 * MIB, 2 * MIB); /* fewer arenas now: still worth saying, as info */
    a = find(f, run(&in, f), "arena_max_auto");
    CHECK(a && a->severity == DOCTOR_INFO);
    /* Silent: set already (a number or "auto"), not glibc, or auto would not change the cap */
    in.cfg.malloc_arena_max = MT_CONFIG_AUTO;
    CHECK(find(f, run(&in, f), "arena_max_auto") == NULL);
    in.cfg.malloc_arena_max = 8;
    CHECK(find(f, run(&in, f), "arena_max_auto") == NULL);
    in.cfg.malloc_arena_max = -1;
    in.glibc = 0;
    CHECK(find(f, run(&in, f), "arena_max_auto") == NULL);
    in.glibc = 1;
    in.host_cores = 2; /* a host without a quota, all its cores allowed: glibc's rule stands */
    CHECK(find(f, run(&in, f), "arena_max_auto") == NULL);
    in.host_cores = 1; /* glibc's cap 8 > 4, but the process may use all it has */
    in.quota_cpus = 1;
    in.auto_arena_max = 8;
    CHECK(find(f, run(&in, f), "arena_max_auto") == NULL);
}

static void test_many_arenas(void)
{
    struct doctor_input in;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    healthy(&in);
    set_arenas(&in, 5, 1 * MIB, 20 * MIB);
    add_trim(&in, MT_TRIGGER_BURST, 60000, 70 * MIB, 270 * MIB);
    int n = run(&in, f);
    const struct doctor_finding *a = find(f, n, "many_arenas");
    CHECK(a != NULL);
    if (a) {
        CHECK_EQ_INT(a->severity, DOCTOR_WARNING); /* 80 MiB free elsewhere >= 25 % of RSS */
        CHECK(strcmp(a->kind, "config") == 0);
        CHECK(strcmp(a->key, "MallocArenaMax") == 0);
        CHECK(a->has_value && a->value == 2);
        CHECK(evidence(a, "arena_count") == 5);
        CHECK(evidence(a, "free_other_arenas_bytes") == 80 * MIB);
        /* Two arenas: what all but the two largest hold (20 + 20 + 1 MiB). */
        CHECK(evidence(a, "free_beyond_recommended_bytes") == 41 * MIB);
        CHECK(evidence(a, "mean_released_bytes") == 70 * MIB);
        CHECK_CONTAINS(a->action, "MALLOC_ARENA_MAX=2");
    }
    /* Four cores: four arenas recommended, so four is not many... */
    in.ncpu = 4;
    set_arenas(&in, 4, 1 * MIB, 20 * MIB);
    CHECK(find(f, run(&in, f), "many_arenas") == NULL);
    /* ...but nine is. */
    set_arenas(&in, 9, 1 * MIB, 20 * MIB);
    a = find(f, run(&in, f), "many_arenas");
    CHECK(a && a->value == 4);
    in.ncpu = 2;
    /* Silent: the main arena holds most of the free memory. */
    set_arenas(&in, 5, 200 * MIB, 20 * MIB);
    CHECK(find(f, run(&in, f), "many_arenas") == NULL);
    /* Silent: little free memory at all. */
    set_arenas(&in, 5, 0, 1 * MIB);
    CHECK(find(f, run(&in, f), "many_arenas") == NULL);
    /* Silent: already limited, or no view, or not glibc, or few arenas. */
    set_arenas(&in, 5, 1 * MIB, 20 * MIB);
    in.cfg.malloc_arena_max = 2;
    CHECK(find(f, run(&in, f), "many_arenas") == NULL);
    in.cfg.malloc_arena_max = -1;
    in.glibc = 0;
    CHECK(find(f, run(&in, f), "many_arenas") == NULL);
    in.glibc = 1;
    in.arenas = NULL;
    CHECK(find(f, run(&in, f), "many_arenas") == NULL);
    set_arenas(&in, 2, 1 * MIB, 20 * MIB);
    CHECK(find(f, run(&in, f), "many_arenas") == NULL);
}

/* pinned_arena: the arena whose free memory no trim can give back, with the change. */
static void test_pinned_arena(void)
{
    struct doctor_input in;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    healthy(&in);
    set_arenas(&in, 3, 2 * MIB, 45 * MIB);
    arena_buf[2].pinned_top_bytes = 40 * MIB; /* a thread arena's top */
    arena_buf[2].pinned_small_bytes = 2 * MIB;
    arena_buf[2].releasable_bytes = 3 * MIB;
    const struct doctor_finding *a = find(f, run(&in, f), "pinned_arena");
    CHECK(a != NULL);
    if (a) {
        CHECK_EQ_INT(a->severity, DOCTOR_INFO); /* 42 MiB < 25 % of 200 MiB RSS */
        CHECK(strcmp(a->kind, "config") == 0);
        CHECK(strcmp(a->key, "MallocTrimThresholdBytes") == 0);
        CHECK(a->has_value && a->value == 131072);
        CHECK(evidence(a, "arena") == 2);
        CHECK(evidence(a, "pinned_bytes") == 42 * MIB);
        CHECK(evidence(a, "pinned_top_bytes") == 40 * MIB);
        CHECK(evidence(a, "free_bytes") == 45 * MIB);
        CHECK_CONTAINS(a->title, "Arena 2 holds 42.0 MiB");
        CHECK_CONTAINS(a->title, "its top chunk");
    }
    in.snap.cheap.rss_bytes = 100 * MIB; /* now 42 % of RSS */
    a = find(f, run(&in, f), "pinned_arena");
    CHECK(a && a->severity == DOCTOR_WARNING);
    /* The threshold already low: nothing in memtrim's configuration frees it. */
    in.cfg.malloc_trim_threshold_bytes = 65536;
    a = find(f, run(&in, f), "pinned_arena");
    CHECK(a && strcmp(a->kind, "none") == 0 && a->key[0] == 0);
    in.cfg.malloc_trim_threshold_bytes = -1;
    /* Chunks under a page in 5 arenas on 2 CPUs: fewer arenas (4). */
    set_arenas(&in, 5, 2 * MIB, 30 * MIB);
    arena_buf[3].pinned_small_bytes = 20 * MIB;
    a = find(f, run(&in, f), "pinned_arena");
    CHECK(a && strcmp(a->key, "MallocArenaMax") == 0 && a->value == 4);
    CHECK(a && evidence(a, "arena") == 3);
    CHECK(a && strstr(a->title, "chunks under a page") != NULL);
    /* ...the cap the quota's "auto" would set, where known. */
    in.auto_arena_max = 2;
    a = find(f, run(&in, f), "pinned_arena");
    CHECK(a && a->value == 2);
    in.auto_arena_max = 0;
    /* Chunk edges: inherent, no change to make. */
    arena_buf[3].pinned_small_bytes = 0;
    arena_buf[3].pinned_edge_bytes = 20 * MIB;
    a = find(f, run(&in, f), "pinned_arena");
    CHECK(a && strcmp(a->kind, "none") == 0 && strstr(a->title, "chunk edges") != NULL);
    /* Silent: under 16 MiB pinned; under half the arena's free memory; no view; not glibc. */
    arena_buf[3].pinned_edge_bytes = 15 * MIB;
    CHECK(find(f, run(&in, f), "pinned_arena") == NULL);
    arena_buf[3].pinned_edge_bytes = 20 * MIB;
    arena_buf[3].free_bytes = 41 * MIB;
    CHECK(find(f, run(&in, f), "pinned_arena") == NULL);
    arena_buf[3].free_bytes = 30 * MIB;
    CHECK(find(f, run(&in, f), "pinned_arena") != NULL); /* the control of the three below */
    in.glibc = 0;
    CHECK(find(f, run(&in, f), "pinned_arena") == NULL);
    in.glibc = 1;
    in.arenas = NULL;
    CHECK(find(f, run(&in, f), "pinned_arena") == NULL);
}

static void test_pressure_repeats(void)
{
    struct doctor_input in;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    healthy(&in);
    for (int i = 0; i < 4; i++)
        add_trim(&in, MT_TRIGGER_PRESSURE, 240000 - i * 60000, 20 * MIB, 950 * MIB);
    in.counters.trims[MT_TRIGGER_PRESSURE] = 4;
    in.peak_rss_bytes = 990 * MIB;
    int n = run(&in, f);
    const struct doctor_finding *p = find(f, n, "pressure_repeats");
    CHECK(p != NULL);
    if (p) {
        CHECK_EQ_INT(p->severity, DOCTOR_WARNING);
        CHECK(evidence(p, "pressure_trims_recent") == 4);
        CHECK(strcmp(p->kind, "host") == 0); /* the limit is the cgroup's */
        CHECK(strcmp(p->key, "memory.max") == 0);
        CHECK(p->value >= 1.25 * 990 * MIB && p->value < 1.25 * 990 * MIB + 64 * MIB);
    }
    /* With MemoryLimitBytes configured, the recommendation is that key. */
    in.cfg.memory_limit_bytes = 1024 * MIB;
    p = find(f, run(&in, f), "pressure_repeats");
    CHECK(p && strcmp(p->kind, "config") == 0 && strcmp(p->key, "MemoryLimitBytes") == 0);
    /* Silent: two pressure trims, or four long ago. */
    healthy(&in);
    add_trim(&in, MT_TRIGGER_PRESSURE, 60000, 20 * MIB, 950 * MIB);
    add_trim(&in, MT_TRIGGER_PRESSURE, 30000, 20 * MIB, 950 * MIB);
    CHECK(find(f, run(&in, f), "pressure_repeats") == NULL);
    healthy(&in);
    for (int i = 0; i < 4; i++)
        add_trim(&in, MT_TRIGGER_PRESSURE, 3600000 - i * 1000, 20 * MIB, 950 * MIB);
    CHECK(find(f, run(&in, f), "pressure_repeats") == NULL);
}

static void test_release_little(void)
{
    struct doctor_input in;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    healthy(&in);
    for (int i = 0; i < 6; i++) /* 30 s apart, RSS flat: they find ~100 KiB each */
        add_trim(&in, MT_TRIGGER_PERIODIC, 180000 - i * 30000, 100 * 1024, 200 * MIB);
    int n = run(&in, f);
    const struct doctor_finding *l = find(f, n, "trims_release_little");
    CHECK(l != NULL);
    if (l) {
        CHECK(strcmp(l->key, "TrimIntervalSeconds") == 0);
        CHECK(l->value == 120); /* 4 x 30 s */
        CHECK(evidence(l, "median_released_bytes") == 100 * 1024);
        CHECK(evidence(l, "trims") == 6);
    }
    CHECK(find(f, n, "released_memory_returns") == NULL); /* nothing released to come back */
    /* Silent: trims that release a lot; or too few trims; or manual trims only. */
    healthy(&in);
    for (int i = 0; i < 6; i++)
        add_trim(&in, MT_TRIGGER_PERIODIC, 180000 - i * 30000, 30 * MIB, 200 * MIB);
    CHECK(find(f, run(&in, f), "trims_release_little") == NULL);
    healthy(&in);
    for (int i = 0; i < 3; i++)
        add_trim(&in, MT_TRIGGER_PERIODIC, 180000 - i * 30000, 0, 200 * MIB);
    CHECK(find(f, run(&in, f), "trims_release_little") == NULL);
    healthy(&in);
    for (int i = 0; i < 8; i++)
        add_trim(&in, MT_TRIGGER_MANUAL, 180000 - i * 10000, 0, 200 * MIB);
    CHECK(find(f, run(&in, f), "trims_release_little") == NULL);
}

static void test_memory_returns(void)
{
    struct doctor_input in;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    /* Burst trims 10 s apart: each releases 100 MiB, RSS is back up 10 s later. */
    healthy(&in);
    for (int i = 0; i < 5; i++)
        add_trim(&in, MT_TRIGGER_BURST, 60000 - i * 10000, 100 * MIB, 300 * MIB);
    int n = run(&in, f);
    const struct doctor_finding *r = find(f, n, "released_memory_returns");
    CHECK(r != NULL);
    if (r) {
        CHECK(strcmp(r->key, "TrimMinGapSeconds") == 0);
        CHECK(r->value == 40); /* 4 x the 10 s median */
        CHECK(evidence(r, "trims_followed_by_regrowth") == 4);
        CHECK(evidence(r, "median_gap_seconds") == 10);
    }
    /* Periodic trims: the interval is the key. */
    healthy(&in);
    for (int i = 0; i < 5; i++)
        add_trim(&in, MT_TRIGGER_PERIODIC, 60000 - i * 5000, 100 * MIB, 300 * MIB);
    r = find(f, run(&in, f), "released_memory_returns");
    CHECK(r && strcmp(r->key, "TrimIntervalSeconds") == 0 && r->value == 30);
    /* Silent: RSS stays down after each trim. */
    healthy(&in);
    for (int i = 0; i < 5; i++)
        add_trim(&in, MT_TRIGGER_BURST, 60000 - i * 10000, 100 * MIB,
                 300 * MIB - (uint64_t)i * 100 * MIB / 4);
    for (int i = 0; i + 1 < in.ntrims; i++)
        trims[i + 1].rss_before_bytes = trims[i].rss_after_bytes + 1 * MIB;
    CHECK(find(f, run(&in, f), "released_memory_returns") == NULL);
    /* Silent: regrowth, but trims an hour apart (the host's working set moved on). */
    healthy(&in);
    for (int i = 0; i < 5; i++)
        add_trim(&in, MT_TRIGGER_PERIODIC, 5 * 3600000 - i * 3600000, 100 * MIB, 300 * MIB);
    CHECK(find(f, run(&in, f), "released_memory_returns") == NULL);
}

static void test_never_frees(void)
{
    struct doctor_input in;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    healthy(&in);
    in.snap.heap.heap_in_use_bytes = 500 * MIB;
    in.snap.heap.heap_free_bytes = 2 * MIB;
    in.counters.skips[MT_SKIP_BELOW_MIN_RELEASABLE] = 120;
    int n = run(&in, f);
    const struct doctor_finding *h = find(f, n, "heap_never_frees");
    CHECK(h != NULL);
    if (h) {
        CHECK_EQ_INT(h->severity, DOCTOR_INFO);
        CHECK(strcmp(h->kind, "none") == 0);
        CHECK(!h->has_value && h->key[0] == '\0');
        CHECK_CONTAINS(h->action, "Nothing to do");
        CHECK(evidence(h, "heap_free_bytes") == 2 * MIB);
    }
    /* Silent: too early to say; trims did release memory; plenty free. */
    in.uptime_ms = 5000;
    CHECK(find(f, run(&in, f), "heap_never_frees") == NULL);
    in.uptime_ms = 3600 * 1000;
    in.counters.released_bytes[MT_TRIGGER_BURST] = 300 * MIB;
    CHECK(find(f, run(&in, f), "heap_never_frees") == NULL);
    in.counters.released_bytes[MT_TRIGGER_BURST] = 0;
    in.snap.heap.heap_free_bytes = 100 * MIB;
    CHECK(find(f, run(&in, f), "heap_never_frees") == NULL);
    in.snap.heap.timestamp_ms = 0; /* no heap reading yet */
    in.snap.heap.heap_free_bytes = 2 * MIB;
    CHECK(find(f, run(&in, f), "heap_never_frees") == NULL);
}

static void test_probe_budget(void)
{
    struct doctor_input in;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    healthy(&in);
    in.cfg.stats_max_age_ms = 100;
    in.reader_heap_wanted = 200;
    in.reader_heap_refused = 180;
    in.counters.heap_probe_last_seconds = 0.005; /* 5 ms: every 5 s at 0.1 % */
    int n = run(&in, f);
    const struct doctor_finding *b = find(f, n, "probe_budget_limited");
    CHECK(b != NULL);
    if (b) {
        CHECK(strcmp(b->key, "StatsMaxAgeMs") == 0);
        CHECK(b->value == 5000);
        CHECK(evidence(b, "refused") == 180);
    }
    /* No cache and a cheap probe: still at least a second. */
    in.cfg.stats_max_age_ms = 0;
    in.counters.heap_probe_last_seconds = 0.00001;
    b = find(f, run(&in, f), "probe_budget_limited");
    CHECK(b && b->value == 1000);
    in.reader_heap_refused = 5;
    CHECK(find(f, run(&in, f), "probe_budget_limited") == NULL);
    in.reader_heap_refused = 50; /* a quarter of the time: the budget mostly keeps up */
    CHECK(find(f, run(&in, f), "probe_budget_limited") == NULL);
}

static void test_no_limit(void)
{
    struct doctor_input in;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    healthy(&in);
    in.snap.memory_limit_bytes = -1;
    int n = run(&in, f);
    const struct doctor_finding *l = find(f, n, "no_memory_limit");
    CHECK(l != NULL);
    if (l) {
        CHECK(strcmp(l->key, "MemoryLimitBytes") == 0);
        CHECK(l->value == 512 * MIB); /* 1.5 x 300 MiB peak, rounded up to 64 MiB */
    }
    in.cfg.pressure_ratio = 0; /* pressure trims disabled on purpose */
    CHECK(find(f, run(&in, f), "no_memory_limit") == NULL);
}

static void test_order_and_text(void)
{
    struct doctor_input in;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    healthy(&in);
    in.snap.memory_limit_bytes = -1;       /* info */
    set_arenas(&in, 5, 1 * MIB, 20 * MIB); /* warning */
    int n = run(&in, f);
    CHECK_EQ_INT(n, 2);
    CHECK(strcmp(f[0].id, "many_arenas") == 0);
    CHECK(strcmp(f[1].id, "no_memory_limit") == 0);
    char *text = doctor_text(f, n);
    CHECK_CONTAINS(text, "2 findings");
    CHECK_CONTAINS(text, "[warning]");
    CHECK_CONTAINS(text, "recommendation: Set \"MallocArenaMax\": 2");
    CHECK_CONTAINS(text, "evidence: arena_count=5");
    free(text);
    CHECK_EQ_INT(doctor_run(&in, f, 1), 1); /* max is honoured */
}

int main(void)
{
    RUN(test_healthy_is_quiet);
    RUN(test_many_arenas);
    RUN(test_arena_auto);
    RUN(test_pinned_arena);
    RUN(test_pressure_repeats);
    RUN(test_release_little);
    RUN(test_memory_returns);
    RUN(test_never_frees);
    RUN(test_probe_budget);
    RUN(test_no_limit);
    RUN(test_order_and_text);
    return harness_end();
}
