/*
 * alloc_jemalloc.c - jemalloc 5 through mallctl, found with dlsym (no link
 * against libjemalloc). Stats: an "epoch" write refreshes jemalloc's stats
 * (it walks every arena, under the probe budget like mallinfo2), then
 * stats.allocated/active/resident/mapped/retained/metadata and the merged
 * arenas' dirty and muzzy pages. Release: "arena.<MALLCTL_ARENAS_ALL>.purge"
 * returns every arena's dirty and muzzy pages to the kernel. Called from the
 * housekeeper, the pressure thread and HTTP workers as snapshot.c and trim.c
 * allow. No state but the resolved pointer (alloc.h), set at start, and memtrim's
 * own arena (below), made once under pthread_once; no locks of its own (jemalloc
 * takes its own).
 *
 * memtrim's own threads allocate from an arena of their own ("arenas.create", once,
 * on the first of them; "thread.arena" on each as it starts: je_thread_enter). jemalloc
 * gives a new thread the automatic arena with the fewest threads (4 per CPU): memtrim's
 * six to ten threads, counted there, made the host's workers share arenas they would
 * have had alone, and a host with memtrim kept less than the same host without it
 * before any trim (a thread pool of 8 on 2 CPUs: 974 against 1090 MB, docs/policy.md).
 * Both calls run once, at start: "arenas.create" takes jemalloc's ctl lock, "thread.arena"
 * only the thread's own tcache and two counters.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "alloc.h"

#define JE_ARENAS_ALL 4096 /* MALLCTL_ARENAS_ALL in jemalloc 5 */
#define JE_STR_(x) #x
#define JE_STR(x) JE_STR_(x)

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
static mallctl_fn je_mallctl;

static pthread_once_t je_arena_once = PTHREAD_ONCE_INIT;
static unsigned je_arena;   /* memtrim's own arena, once je_arena_made */
static atomic_int je_arena_made; /* set under je_arena_once, after je_arena */

static int je_resolve(void)
{
    je_mallctl = (mallctl_fn)alloc_sym("mallctl");
    return je_mallctl ? 0 : -ENOENT;
}

static void *je_anchor(void)
{
    return (void *)je_mallctl;
}

static void je_version(char *buf, size_t size)
{
    const char *v = NULL;
    size_t len = sizeof(v);
    if (je_mallctl && je_mallctl("version", &v, &len, NULL, 0) == 0 && v)
        snprintf(buf, size, "%s", v);
}

/* A size_t statistic; 0 and -1 when jemalloc has no such statistic (built without stats). */
static int je_size(const char *name, uint64_t *out)
{
    size_t v = 0, len = sizeof(v);
    if (je_mallctl(name, &v, &len, NULL, 0) != 0)
        return -1;
    *out = v;
    return 0;
}

static void je_make_arena(void)
{
    unsigned idx = 0;
    size_t len = sizeof(idx);
    if (je_mallctl && je_mallctl("arenas.create", &idx, &len, NULL, 0) == 0) {
        je_arena = idx;
        atomic_store(&je_arena_made, 1);
    }
}

static void je_thread_enter(void)
{
    pthread_once(&je_arena_once, je_make_arena);
    if (atomic_load(&je_arena_made))
        je_mallctl("thread.arena", NULL, NULL, &je_arena, sizeof(je_arena));
}

/* jemalloc's own decay (the defaults for its arenas, read without a lock): with background
 * threads it purges a dirty page within dirty_decay_ms, and the muzzy one (MADV_FREE, still
 * resident) within muzzy_decay_ms more, idle host or not: saved.c takes that off what
 * memtrim saved. Without them, decay runs only as an arena's threads allocate. */
static void je_decay(struct mt_heap *out, bool bg)
{
    ssize_t dirty = -1, muzzy = -1;
    size_t len = sizeof(dirty);
    if (je_mallctl("arenas.dirty_decay_ms", &dirty, &len, NULL, 0) != 0)
        return;
    len = sizeof(muzzy);
    if (je_mallctl("arenas.muzzy_decay_ms", &muzzy, &len, NULL, 0) != 0)
        return;
    if (dirty >= 0) /* -1: never */
        alloc_figure(out, "dirty_decay_ms", (uint64_t)dirty);
    if (muzzy >= 0)
        alloc_figure(out, "muzzy_decay_ms", (uint64_t)muzzy);
    if (bg && dirty >= 0 && muzzy >= 0) {
        out->decay_ms = (uint64_t)dirty + (uint64_t)muzzy;
        out->known |= MT_HEAP_HAS_DECAY;
    }
}

static void je_stats(struct mt_heap *out)
{
    uint64_t epoch = 1, allocated = 0, active = 0, resident = 0, mapped = 0, retained = 0;
    uint64_t metadata = 0, page = 4096;
    uint64_t pdirty = 0, pmuzzy = 0;
    size_t len = sizeof(epoch);
    unsigned narenas = 0;
    bool bg = false;

    if (!je_mallctl)
        return;
    je_mallctl("epoch", &epoch, &len, &epoch, sizeof(epoch));
    if (je_size("stats.allocated", &allocated) || je_size("stats.active", &active) ||
        je_size("stats.resident", &resident) || je_size("stats.mapped", &mapped))
        return; /* a jemalloc built without --enable-stats: nothing to report */
    out->heap_in_use_bytes = allocated;
    out->heap_mapped_bytes = mapped;
    out->heap_resident_bytes = resident;
    out->known = MT_HEAP_HAS_IN_USE | MT_HEAP_HAS_MAPPED | MT_HEAP_HAS_RESIDENT;
    je_size("arenas.page", &page);
    if (je_size("stats.arenas." JE_STR(JE_ARENAS_ALL) ".pdirty", &pdirty) == 0 &&
        je_size("stats.arenas." JE_STR(JE_ARENAS_ALL) ".pmuzzy", &pmuzzy) == 0) {
        /* Free pages held: dirty and muzzy, what the purge returns (free space
         * inside active pages is not: it is in active - allocated). */
        out->heap_free_bytes = (pdirty + pmuzzy) * page;
        out->known |= MT_HEAP_HAS_FREE;
    }
    if (je_size("stats.retained", &retained) == 0) {
        out->heap_retained_bytes = retained;
        out->known |= MT_HEAP_HAS_RETAINED;
    }
    alloc_figure(out, "allocated", allocated);
    alloc_figure(out, "active", active);
    alloc_figure(out, "resident", resident);
    alloc_figure(out, "mapped", mapped);
    if (out->known & MT_HEAP_HAS_RETAINED)
        alloc_figure(out, "retained", retained);
    if (je_size("stats.metadata", &metadata) == 0)
        alloc_figure(out, "metadata", metadata);
    if (out->known & MT_HEAP_HAS_FREE) {
        alloc_figure(out, "dirty_bytes", pdirty * page);
        alloc_figure(out, "muzzy_bytes", pmuzzy * page);
    }
    len = sizeof(narenas);
    if (je_mallctl("arenas.narenas", &narenas, &len, NULL, 0) == 0)
        alloc_figure(out, "narenas", narenas);
    len = sizeof(bg);
    if (je_mallctl("background_thread", &bg, &len, NULL, 0) == 0)
        alloc_figure(out, "background_thread", bg ? 1 : 0);
    je_decay(out, bg);
    if (atomic_load(&je_arena_made))
        alloc_figure(out, "memtrim_arena", je_arena);
}

static int je_release(uint64_t pad)
{
    (void)pad; /* jemalloc keeps no pad: it purges every unused page */
    if (!je_mallctl)
        return 0;
    /* "arena.4096.purge": the table's call, the one the command makes from outside */
    return je_mallctl(mt_alloc_table[MT_ALLOC_jemalloc].release_str, NULL, NULL, NULL, 0) == 0;
}

static int je_arena_count(void)
{
    unsigned n = 0;
    size_t len = sizeof(n);
    if (!je_mallctl || je_mallctl("arenas.narenas", &n, &len, NULL, 0) != 0)
        return -1;
    return (int)n;
}

const struct alloc_ops alloc_jemalloc = {
    .id = MT_ALLOC_jemalloc,
    .resolve = je_resolve,
    .anchor = je_anchor,
    .version = je_version,
    .stats = je_stats,
    .release = je_release,
    .arena_count = je_arena_count,
    .thread_enter = je_thread_enter,
};
