/*
 * snapshot.c - the cached view of the process's memory that every reader
 * shares, and the duty-cycle budget of mallinfo2 (ProbeBudgetPercent): after
 * a call that cost d (its CPU time), the next may start d * 100 / budget
 * later, so a 0.5 ms call runs at most every 0.5 s at 0.1 %. Locking: cache->lock guards all
 * fields; a refresher marks `refreshing`, probes unlocked, then publishes and
 * broadcasts, so a hundred pollers cost the host what one does. Any thread
 * reads it (the housekeeper, the pressure and group threads, HTTP workers);
 * whichever finds it stale refreshes it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "control.h"
#include "snapshot.h"

#define ARENA_COUNT_EVERY 10 /* malloc_info (arena count) on every 10th heap probe */

int snapshot_init(struct snapshot_cache *c)
{
    memset(c, 0, sizeof(*c));
    c->arena_count = -1;
    if (pthread_mutex_init(&c->lock, NULL))
        return -ENOMEM;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&c->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (rc) {
        pthread_mutex_destroy(&c->lock);
        return -ENOMEM;
    }
    saved_init(&c->saved);
    probe_cgroup_init(&c->cg); /* no cgroup is not an error */
    snapshot_set_alloc(c, &alloc_glibc);
    probe_proc_open();
    return 0;
}

const char *snapshot_alloc_name(const struct snapshot_cache *c)
{
    return c->alloc ? alloc_name(c->alloc) : "glibc";
}

void snapshot_set_alloc(struct snapshot_cache *c, const struct alloc_ops *a)
{
    c->alloc = a;
    c->alloc_version[0] = '\0';
    a->version(c->alloc_version, sizeof(c->alloc_version));
}

void snapshot_destroy(struct snapshot_cache *c)
{
    probe_cgroup_close(&c->cg);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
}

/* The releasable estimate of the heap reading held; called with the lock held. */
static uint64_t releasable_locked(const struct snapshot_cache *c)
{
    /* RSS as read with the heap (just before it), not newer: memory allocated
     * since the heap reading is in use, and must not count as free. */
    uint64_t used = c->heap.heap_in_use_bytes + c->nonheap_baseline;
    uint64_t resident_free = c->heap_rss_anon > used ? c->heap_rss_anon - used : 0;
    /* An allocator that does not say what is free (mimalloc): the growth
     * since the last release, unbounded. */
    uint64_t bound = (c->heap.known & MT_HEAP_HAS_FREE) ? c->heap.heap_free_bytes : resident_free;
    return resident_free < bound ? resident_free : bound;
}

/* The statm reading a reader took at its request (rss_now), over the cached one when newer:
 * RSS, its anonymous part and the virtual size; the shared rest split as the cached reading
 * split it between shmem and file. */
static void fresh_rss(struct mt_cheap *out, const struct probe_statm *m)
{
    uint64_t shared = m->rss_bytes - m->rss_anon_bytes;
    out->rss_bytes = m->rss_bytes;
    out->rss_anon_bytes = m->rss_anon_bytes;
    out->rss_shmem_bytes = out->rss_shmem_bytes < shared ? out->rss_shmem_bytes : shared;
    out->rss_file_bytes = shared - out->rss_shmem_bytes;
    out->vm_size_bytes = m->vm_size_bytes;
}

/* Derived values; called with the lock held. m: a statm reading taken at rss_ns, or NULL. */
static void derive(const struct snapshot_cache *c, int64_t limit_cfg, int64_t now,
                   const struct probe_statm *m, int64_t rss_ns, struct mt_snapshot *out)
{
    memset(out, 0, sizeof(*out));
    out->cheap = c->cheap;
    out->heap = c->heap;
    if (out->heap.arena_count < 0)
        out->heap.arena_count = c->arena_count;
    out->cheap_age_ms = c->cheap_mono_ns ? (now - c->cheap_mono_ns) / 1000000 : -1;
    out->rss_age_ms = out->cheap_age_ms;
    if (m && rss_ns > c->cheap_mono_ns) {
        fresh_rss(&out->cheap, m);
        out->rss_age_ms = (now - rss_ns) / 1000000;
    }
    out->arena_count_age_ms = c->arena_mono_ns ? (now - c->arena_mono_ns) / 1000000 : -1;
    saved_view(&c->saved, out->cheap.rss_bytes, &out->saved);
    out->heap_age_ms = c->heap_mono_ns ? (now - c->heap_mono_ns) / 1000000 : -1;
    out->memory_limit_bytes = limit_cfg > 0 ? limit_cfg : c->cheap.cgroup_limit_bytes;
    out->allocator = alloc_name(c->alloc);
    out->allocator_release = alloc_release_call(c->alloc);
    snprintf(out->allocator_version, sizeof(out->allocator_version), "%s", c->alloc_version);
    if (c->heap_mono_ns && c->heap.heap_in_use_bytes)
        out->fragmentation_ratio = (double)out->cheap.rss_bytes / (double)c->heap.heap_in_use_bytes;
    /*
     * What a trim could give back: free heap that is still resident. mallinfo2
     * counts free chunks whether or not their pages are resident (after a trim
     * they are not), so bound it by the resident anonymous memory that is not
     * live heap, less what was not heap right after the last trim (stacks,
     * other mappings).
     */
    if (c->heap_mono_ns)
        out->releasable_estimate_bytes = releasable_locked(c);
}

/*
 * When a reader allowed `budget` percent may probe again. The spacing of the
 * last charge, d * 100 / charged budget, is shortened for a reader allowed
 * more (d * 100 / its budget): a probe charged at ProbeBudgetPercent (the
 * housekeeper's, 0.5 ms -> 500 ms at 0.1 %) must not hold back a reader on
 * a hundred times that (a worker group's watch inside its zone, which may
 * probe again after 5 ms) for the whole 500 ms. Locked.
 */
static int64_t heap_allowed_at(const struct snapshot_cache *c, double budget)
{
    if (budget <= c->heap_gate_budget || c->heap_gate_budget <= 0 ||
        c->heap_next_allowed_ns <= c->heap_gate_from_ns)
        return c->heap_next_allowed_ns;
    double spacing = (double)(c->heap_next_allowed_ns - c->heap_gate_from_ns);
    return c->heap_gate_from_ns + (int64_t)(spacing * c->heap_gate_budget / budget);
}

/* The budget gate after a call that cost what h says (its CPU, else its time), at the
 * budget last asked for: the spacing runs from the gate as that budget sees it (a debt
 * charged at a lower rate is shortened by the ratio, heap_allowed_at), or from now.
 * A charge while that gate is still ahead (a trim's reading after the one before it)
 * adds to the debt from the same start, so that a reader allowed more sees the whole
 * debt shortened, not the first charge's spacing in full and only the last one's
 * shortened; not when charged at less than the debt's budget (then its gate, as that
 * budget sees it, is the debt's end, unshortened: it starts anew from there). Locked. */
static void charge_heap_locked(struct snapshot_cache *c, const struct mt_heap *h, int64_t now)
{
    double budget = c->budget_percent > 0 ? c->budget_percent : 0.1;
    int64_t cost = h->cpu_ns > 0 ? h->cpu_ns : h->duration_ns;
    int64_t spacing = (int64_t)((double)cost * 100.0 / budget);
    int64_t gate = heap_allowed_at(c, budget);
    if (gate > now && c->heap_gate_budget > 0 && budget >= c->heap_gate_budget &&
        c->heap_next_allowed_ns > c->heap_gate_from_ns) {
        c->heap_next_allowed_ns = gate + spacing; /* heap_gate_from_ns kept */
    } else {
        int64_t from = gate > now ? gate : now;
        c->heap_next_allowed_ns = from + spacing;
        c->heap_gate_from_ns = from;
    }
    c->heap_gate_budget = budget;
}

static void count_heap_locked(struct snapshot_cache *c, const struct mt_heap *h, int64_t now)
{
    double s = (double)h->duration_ns / 1e9;
    c->heap_probes++;
    c->heap_seconds += s;
    c->heap_last_seconds = s;
    if (h->arena_count >= 0) {
        c->arena_count = h->arena_count;
        c->arena_mono_ns = now;
    }
}

void snapshot_get(struct snapshot_cache *c, const struct snapshot_want *want,
                  struct mt_snapshot *out)
{
    struct mt_cheap cheap;
    struct mt_heap heap;
    struct probe_statm statm;
    int64_t now, rss_ns = 0;
    int do_cheap, do_heap, arenas;

    /* RSS at the request, whatever the cache holds (statm: microseconds, no lock): a cached
     * reading is up to a second old, older while a heap probe waits on the host's arenas,
     * and a burst moves RSS by hundreds of MB in that time. */
    if (want->rss_now && !mt_control("rt-stats-cached-rss") && probe_statm(&statm) == 0)
        rss_ns = mt_mono_ns();
    pthread_mutex_lock(&c->lock);
    double budget = want->budget_percent > 0 ? want->budget_percent : c->budget_percent;
    if (want->stale_ok && want->heap_max_age_ns != INT64_MAX) {
        now = mt_mono_ns();
        if (!c->heap_mono_ns || now - c->heap_mono_ns > want->heap_max_age_ns) {
            c->reader_heap_wanted++;
            c->reader_heap_refused += now < heap_allowed_at(c, budget);
        }
    }
    if (want->budget_percent > 0)
        c->budget_percent = want->budget_percent; /* trims charge their readings at this rate */
    for (;;) {
        now = mt_mono_ns();
        do_cheap = !c->cheap_mono_ns || now - c->cheap_mono_ns > want->cheap_max_age_ns;
        do_heap = want->heap_max_age_ns != INT64_MAX &&
                  (!c->heap_mono_ns || now - c->heap_mono_ns > want->heap_max_age_ns) &&
                  now >= heap_allowed_at(c, budget);
        if (!do_cheap && !do_heap)
            break;
        if (c->refreshing) {
            if (want->stale_ok && c->cheap_mono_ns)
                break; /* the last snapshot, its age says how old */
            pthread_cond_wait(&c->cond, &c->lock);
            continue;
        }
        c->refreshing = 1;
        arenas = do_heap && (c->arena_count < 0 || c->heap_count_since_arenas >= ARENA_COUNT_EVERY);
        uint64_t generation = c->trim_generation;
        do_cheap = do_cheap || do_heap; /* the heap part is read with the RSS of its moment */
        pthread_mutex_unlock(&c->lock);

        /* RSS first: what is allocated between the two readings then counts as
         * in use, never as free (the estimate errs low, not high). */
        if (do_cheap)
            probe_cheap(&c->cg, &cheap); /* cg is written only at init */
        if (do_heap)
            probe_heap(c->alloc, &heap, arenas);

        pthread_mutex_lock(&c->lock);
        now = mt_mono_ns();
        if (do_heap) {
            /* The budget counts what the call cost (CPU inside it), not time spent
             * waiting for arena locks: that wait grows exactly when the host is busy
             * freeing, and would starve the probe when it matters most. */
            charge_heap_locked(c, &heap, now);
            c->heap_count_since_arenas = arenas ? 0 : c->heap_count_since_arenas + 1;
            count_heap_locked(c, &heap, now);
        }
        if (generation != c->trim_generation)
            do_cheap = do_heap = 0; /* a trim published newer readings meanwhile: keep those */
        if (do_cheap) {
            c->cheap = cheap;
            c->cheap_mono_ns = now;
            c->cheap_probes++;
            c->cheap_seconds += (double)cheap.duration_ns / 1e9;
            saved_on_rss(&c->saved, cheap.rss_bytes, cheap.rss_peak_bytes, now);
        }
        if (do_heap) {
            c->heap = heap;
            c->heap_mono_ns = now;
            c->heap_rss_anon = cheap.rss_anon_bytes;
            saved_on_heap(&c->saved, &heap, releasable_locked(c), cheap.rss_bytes);
        }
        c->refreshing = 0;
        pthread_cond_broadcast(&c->cond);
        break;
    }
    derive(c, want->memory_limit_cfg, mt_mono_ns(), rss_ns ? &statm : NULL, rss_ns, out);
    pthread_mutex_unlock(&c->lock);
}

void snapshot_after_trim(struct snapshot_cache *c, uint64_t rss_before,
                         const struct mt_cheap *cheap, const struct mt_heap *heap)
{
    pthread_mutex_lock(&c->lock);
    int64_t now = mt_mono_ns();
    saved_on_trim(&c->saved, rss_before, cheap->rss_bytes, heap != NULL, now);
    saved_on_rss(&c->saved, cheap->rss_bytes, cheap->rss_peak_bytes, now);
    int64_t limit = c->cheap.cgroup_limit_bytes;
    c->cheap = *cheap;
    if (cheap->cgroup_limit_bytes < 0)
        c->cheap.cgroup_limit_bytes = limit;
    c->cheap_mono_ns = now;
    c->trim_generation++;
    if (heap != NULL) {
        c->heap = *heap;
        c->heap_mono_ns = now;
        c->heap_rss_anon = cheap->rss_anon_bytes;
        c->nonheap_baseline = cheap->rss_anon_bytes > heap->heap_in_use_bytes
                                  ? cheap->rss_anon_bytes - heap->heap_in_use_bytes
                                  : 0;
        count_heap_locked(c, heap, now);
        charge_heap_locked(c, heap, now);
        saved_on_heap(&c->saved, heap, releasable_locked(c), cheap->rss_bytes);
    }
    pthread_mutex_unlock(&c->lock);
}

void snapshot_count_heap(struct snapshot_cache *c, const struct mt_heap *heap)
{
    pthread_mutex_lock(&c->lock);
    int64_t now = mt_mono_ns();
    count_heap_locked(c, heap, now);
    charge_heap_locked(c, heap, now);
    pthread_mutex_unlock(&c->lock);
}

void snapshot_counters(struct snapshot_cache *c, struct mt_counters *out)
{
    pthread_mutex_lock(&c->lock);
    out->heap_probes = c->heap_probes;
    out->heap_probe_seconds = c->heap_seconds;
    out->heap_probe_last_seconds = c->heap_last_seconds;
    out->cheap_probes = c->cheap_probes;
    out->cheap_probe_seconds = c->cheap_seconds;
    pthread_mutex_unlock(&c->lock);
}

int snapshot_arena_count(struct snapshot_cache *c)
{
    pthread_mutex_lock(&c->lock);
    int n = c->arena_count;
    pthread_mutex_unlock(&c->lock);
    return n;
}

int snapshot_budget_check(struct snapshot_cache *c, int64_t *wait_ns)
{
    pthread_mutex_lock(&c->lock);
    int64_t wait = c->heap_next_allowed_ns - mt_mono_ns();
    pthread_mutex_unlock(&c->lock);
    *wait_ns = wait > 0 ? wait : 0;
    return wait > 0 ? -EAGAIN : 0;
}

void snapshot_budget_charge(struct snapshot_cache *c, int64_t cost_ns, double budget_percent)
{
    double budget = budget_percent > 0 ? budget_percent : 0.1;
    pthread_mutex_lock(&c->lock);
    int64_t now = mt_mono_ns(), next = now + (int64_t)((double)cost_ns * 100.0 / budget);
    if (next > c->heap_next_allowed_ns) {
        c->heap_next_allowed_ns = next;
        c->heap_gate_from_ns = now;
        c->heap_gate_budget = budget;
    }
    pthread_mutex_unlock(&c->lock);
}

void snapshot_reader_counts(struct snapshot_cache *c, uint64_t *wanted, uint64_t *refused)
{
    pthread_mutex_lock(&c->lock);
    *wanted = c->reader_heap_wanted;
    *refused = c->reader_heap_refused;
    pthread_mutex_unlock(&c->lock);
}

void snapshot_count_refused(struct snapshot_cache *c)
{
    pthread_mutex_lock(&c->lock);
    c->reader_heap_wanted++;
    c->reader_heap_refused++;
    pthread_mutex_unlock(&c->lock);
}
