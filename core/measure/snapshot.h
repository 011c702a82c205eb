/*
 * snapshot.h - the shared, cached view of the process's memory and the
 * budget that rations the allocator's stats call (mallinfo2, jemalloc's epoch...). Any thread may call these; one mutex
 * (cache->lock) guards everything here and is never held across a probe:
 * one caller refreshes while the others wait on cache->cond (single flight).
 */
#ifndef MEMTRIM_SNAPSHOT_H
#define MEMTRIM_SNAPSHOT_H

#include <pthread.h>
#include <stdint.h>
#include "probe.h"
#include "saved.h"
#include "types.h"

struct snapshot_cache {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refreshing;
    struct probe_cgroup cg;
    const struct alloc_ops *alloc; /* the allocator back end: set at start, then read-only */
    char alloc_version[48];
    struct mt_cheap cheap;
    struct mt_heap heap;
    int64_t cheap_mono_ns; /* when taken; 0 = never */
    int64_t heap_mono_ns;
    int64_t heap_next_allowed_ns; /* the budget gate, at the rate it was charged at */
    int64_t heap_gate_from_ns;    /* ...the spacing runs from then */
    double heap_gate_budget;      /* ...charged at this budget (a reader allowed more
                                   * sees the spacing shortened by the ratio) */
    double budget_percent;        /* the last ProbeBudgetPercent asked for (0 = default) */
    unsigned heap_count_since_arenas;
    int arena_count;             /* last known, -1 unknown */
    int64_t arena_mono_ns;       /* when it was counted; 0 = never */
    uint64_t nonheap_baseline;   /* rss_anon - heap in use right after the last trim */
    uint64_t heap_rss_anon;      /* rss_anon read together with the heap part */
    uint64_t trim_generation;    /* bumped by snapshot_after_trim */
    struct saved_ledger saved;   /* what memtrim saved, fed by every reading here */
    /* counters */
    uint64_t heap_probes, cheap_probes;
    double heap_seconds, cheap_seconds, heap_last_seconds;
    /* readers (stale_ok) that wanted a fresher heap reading, and those the budget refused */
    uint64_t reader_heap_wanted, reader_heap_refused;
};

struct snapshot_want {
    int64_t cheap_max_age_ns;  /* refresh the cheap part when older */
    int64_t heap_max_age_ns;   /* refresh the heap part when older (INT64_MAX = never) */
    double budget_percent;     /* share of wall time mallinfo2 may take */
    int64_t memory_limit_cfg;  /* MemoryLimitBytes (0 = use the cgroup's) */
    int stale_ok;              /* while another caller refreshes, take what is cached
                                * (with its age) rather than wait: HTTP readers */
    int rss_now;               /* read RSS (statm) at the call, whatever the cache holds:
                                * what a user is shown (rss_age_ms says its age) */
};

int snapshot_init(struct snapshot_cache *c);
void snapshot_destroy(struct snapshot_cache *c);

/* Use back end a (before any thread reads the cache: at start). */
void snapshot_set_alloc(struct snapshot_cache *c, const struct alloc_ops *a);

/* The allocator back end's name ("glibc" until one is set): set at start, then fixed. */
const char *snapshot_alloc_name(const struct snapshot_cache *c);

/* Refresh what is older than asked (the heap part only as the budget allows) and copy out. */
void snapshot_get(struct snapshot_cache *c, const struct snapshot_want *want,
                  struct mt_snapshot *out);

/* Record readings taken around a trim (they are fresh: readers get them for free);
 * heap NULL when the trim skipped its heap readings. The heap reading is charged to the budget.
 * rss_before: RSS right before the release (what memtrim saved counts the difference). */
void snapshot_after_trim(struct snapshot_cache *c, uint64_t rss_before,
                         const struct mt_cheap *cheap, const struct mt_heap *heap);

/* Count a heap probe taken outside the cache (the one before a trim) and charge it to the
 * budget. */
void snapshot_count_heap(struct snapshot_cache *c, const struct mt_heap *heap);

/* The last known arena count (-1 unknown). */
int snapshot_arena_count(struct snapshot_cache *c);


/* Fill the probe counters of *out. */
void snapshot_counters(struct snapshot_cache *c, struct mt_counters *out);

/*
 * The heap-probe budget for a costly call made outside the cache
 * (malloc_info for /memory/arenas): 0 when it may run now, else -EAGAIN with
 * *wait_ns until it may; then charge what it cost (its CPU time) so that
 * mallinfo2 and malloc_info share one duty cycle.
 */
/* Readers' heap requests and budget refusals (for the doctor). */
void snapshot_reader_counts(struct snapshot_cache *c, uint64_t *wanted, uint64_t *refused);
/* A refusal outside snapshot_get (/memory/arenas) counts too. */
void snapshot_count_refused(struct snapshot_cache *c);
int snapshot_budget_check(struct snapshot_cache *c, int64_t *wait_ns);
void snapshot_budget_charge(struct snapshot_cache *c, int64_t cost_ns, double budget_percent);

#endif /* MEMTRIM_SNAPSHOT_H */
