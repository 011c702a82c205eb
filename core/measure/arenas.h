/*
 * arenas.h - the per-arena view of glibc's heap: malloc_info(3)'s XML parsed
 * into plain numbers (a pure parser any thread may call), and the instance's
 * cached reading of it (arenas_cache_get_locked, refreshed by the housekeeper with arenas_cache_tick), rationed by the same budget as
 * mallinfo2 because malloc_info locks every arena too. The cache's mutex
 * (cache->lock) is held across the one malloc_info call that refreshes it,
 * so concurrent readers share that call; it is taken before the snapshot
 * cache's lock, never after.
 */
#ifndef MEMTRIM_ARENAS_H
#define MEMTRIM_ARENAS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "types.h" /* struct mt_arenas, the reading */

#define ARENAS_MAX 4096 /* more <heap> elements than this is refused as malformed */

/*
 * Parse malloc_info's XML (len bytes, need not be NUL-terminated). Returns 0
 * with *out filled (caller calls arenas_free), or -EINVAL with *err (caller
 * frees) saying what was wrong and where, or -ENOMEM.
 */
int arenas_parse(const char *xml, size_t len, struct mt_arenas *out, char **err);
void arenas_free(struct mt_arenas *a);
/* A deep copy (0 or -ENOMEM). */
int arenas_copy(struct mt_arenas *dst, const struct mt_arenas *src);

/* glibc only: call malloc_info, time it, parse. 0, or a negative errno with *err. */
int arenas_read(struct mt_arenas *out, char **err);

/* The instance's cached reading (lives in struct memtrim). */
struct arenas_cache {
    pthread_mutex_t lock;
    struct mt_arenas last;   /* count 0 and timestamp 0 until the first reading */
    int64_t mono_ns;         /* when taken; 0 = never */
    uint64_t reads, refused; /* malloc_info calls, and requests the budget refused */
    double seconds;          /* their total duration */
};

int arenas_cache_init(struct arenas_cache *c);
void arenas_cache_destroy(struct arenas_cache *c);

struct snapshot_cache;

/* The cached reading if younger than max_age_ms, else a fresh malloc_info on the
 * probe budget shared with the snapshot cache (-EAGAIN and *retry_after_ms when
 * it says no; -ENOTSUP under another allocator). Called with c->lock held. */
int arenas_cache_get_locked(struct arenas_cache *c, struct snapshot_cache *sc,
                            double budget_percent, int64_t max_age_ms, struct mt_arenas *out,
                            int64_t *retry_after_ms, char **err);

/* The housekeeper's refresh, at most every 30 s and only after a newer heap reading
 * (heap_timestamp_ms), so the doctor always has a view; skipped while a reader holds it. */
void arenas_cache_tick(struct arenas_cache *c, struct snapshot_cache *sc, double budget_percent,
                       int64_t heap_timestamp_ms);

#endif /* MEMTRIM_ARENAS_H */
