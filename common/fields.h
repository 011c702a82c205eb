/*
 * fields.h - the one list of a reading's numeric fields (struct mt_snapshot):
 * their /memory/stats names and order, when each is null, which the store
 * keeps (a samples column and a /memory/series metric of that name), and which
 * /metrics shows. db/ builds its columns, the migration that adds a column and
 * the INSERT from it, api/stats.c the JSON, api/metrics.c the gauges. In
 * common/ so that db/ and api/ read the same list without depending on the
 * engine. Constant tables: any thread, no locks.
 *
 * A new field is one line below (after the member in types.h that the probe
 * fills, and its entry in openapi.yaml): a stored one becomes a column of every
 * store at its next opening (ALTER TABLE ADD COLUMN, NULL in older rows).
 */
#ifndef MEMTRIM_FIELDS_H
#define MEMTRIM_FIELDS_H

#include <stddef.h>
#include <stdint.h>
#include "types.h"

/* How a field is held in struct mt_snapshot, and shown. */
enum mt_field_type {
    MT_FIELD_U64, /* uint64_t: a JSON integer, an INTEGER column */
    MT_FIELD_I64, /* int64_t: likewise */
    MT_FIELD_INT, /* int: likewise */
    MT_FIELD_MS,  /* int64_t milliseconds: a JSON integer; its metric in seconds */
    MT_FIELD_NS,  /* int64_t nanoseconds shown as seconds: a JSON number, a REAL column */
    MT_FIELD_F64, /* double: a JSON number, a REAL column */
};

/* When a field is known; else it is null in /memory/stats and the store, and /metrics leaves
 * it out. The flags combine. */
#define MT_KNOWN_ALWAYS 0
#define MT_KNOWN_NONNEG 0x1u   /* the value is >= 0 (-1: unknown or none) */
#define MT_KNOWN_POSITIVE 0x2u /* the value is > 0 */
#define MT_KNOWN_HEAP 0x4u     /* a heap reading exists (heap.timestamp_ms != 0) */
/* ...and the allocator reports it (heap.known has the MT_HEAP_HAS_* bit) */
#define MT_KNOWN_HEAP_HAS(bit) (MT_KNOWN_HEAP | ((unsigned)(bit) << 8))

/* What /metrics makes of a field. */
enum mt_metric_kind { MT_METRIC_NONE = 0, MT_METRIC_GAUGE, MT_METRIC_COUNTER };

/*
 * X(name, type, member, known, column, metric, sample, help), one entry a field, in
 * /memory/stats order:
 *   name    the JSON field; when stored, also the samples column and /memory/series metric
 *   type    enum mt_field_type; member: where it is in struct mt_snapshot
 *   known   MT_KNOWN_* (combined with |): when it is not null
 *   column  0: not stored; else its place among the samples columns, 1, 2, ..., as the
 *           store's file has them (the series list's order; a new stored field takes the
 *           next number, and two fields with one number do not compile)
 *   metric  enum mt_metric_kind; sample: the Prometheus sample, labels included; help:
 *           the family's HELP (lines of one family with other labels follow each other;
 *           only the first has a help)
 */
#define MT_SNAPSHOT_FIELDS(X)                                                                      \
    X(timestamp_ms, MT_FIELD_I64, cheap.timestamp_ms, MT_KNOWN_ALWAYS, 0, MT_METRIC_NONE, "", "")  \
    X(cheap_age_ms, MT_FIELD_I64, cheap_age_ms, MT_KNOWN_ALWAYS, 0, MT_METRIC_NONE, "", "")        \
    X(rss_age_ms, MT_FIELD_I64, rss_age_ms, MT_KNOWN_ALWAYS, 0, MT_METRIC_NONE, "", "")            \
    X(rss_bytes, MT_FIELD_U64, cheap.rss_bytes, MT_KNOWN_ALWAYS, 1, MT_METRIC_GAUGE,               \
      "memtrim_rss_bytes", "Resident set size.")                                                   \
    X(rss_anon_bytes, MT_FIELD_U64, cheap.rss_anon_bytes, MT_KNOWN_ALWAYS, 2, MT_METRIC_GAUGE,     \
      "memtrim_rss_anon_bytes", "Anonymous resident memory.")                                      \
    X(rss_file_bytes, MT_FIELD_U64, cheap.rss_file_bytes, MT_KNOWN_ALWAYS, 3, MT_METRIC_GAUGE,     \
      "memtrim_rss_file_bytes", "File-backed resident memory.")                                    \
    X(rss_shmem_bytes, MT_FIELD_U64, cheap.rss_shmem_bytes, MT_KNOWN_ALWAYS, 0, MT_METRIC_GAUGE,   \
      "memtrim_rss_shmem_bytes", "Shared resident memory.")                                        \
    X(swap_bytes, MT_FIELD_U64, cheap.swap_bytes, MT_KNOWN_ALWAYS, 4, MT_METRIC_GAUGE,             \
      "memtrim_swap_bytes", "Swapped-out memory.")                                                 \
    X(vm_size_bytes, MT_FIELD_U64, cheap.vm_size_bytes, MT_KNOWN_ALWAYS, 0, MT_METRIC_GAUGE,       \
      "memtrim_vm_size_bytes", "Virtual memory size.")                                             \
    X(minor_faults, MT_FIELD_U64, cheap.minor_faults, MT_KNOWN_ALWAYS, 0, MT_METRIC_COUNTER,       \
      "memtrim_page_faults_total{type=\"minor\"}", "Page faults of the process, by type.")         \
    X(major_faults, MT_FIELD_U64, cheap.major_faults, MT_KNOWN_ALWAYS, 0, MT_METRIC_COUNTER,       \
      "memtrim_page_faults_total{type=\"major\"}", "")                                             \
    X(cgroup_version, MT_FIELD_INT, cheap.cgroup_version, MT_KNOWN_ALWAYS, 0, MT_METRIC_NONE, "",  \
      "")                                                                                          \
    X(cgroup_usage_bytes, MT_FIELD_I64, cheap.cgroup_usage_bytes, MT_KNOWN_NONNEG, 12,             \
      MT_METRIC_GAUGE, "memtrim_cgroup_usage_bytes", "Memory usage of the cgroup.")                \
    X(cgroup_limit_bytes, MT_FIELD_I64, cheap.cgroup_limit_bytes, MT_KNOWN_NONNEG, 0,              \
      MT_METRIC_NONE, "", "")                                                                      \
    X(memory_limit_bytes, MT_FIELD_I64, memory_limit_bytes, MT_KNOWN_NONNEG, 13, MT_METRIC_GAUGE,  \
      "memtrim_memory_limit_bytes", "Effective memory limit (MemoryLimitBytes or the cgroup's).")  \
    X(cgroup_max_bytes, MT_FIELD_I64, cheap.cgroup_max_bytes, MT_KNOWN_NONNEG, 0, MT_METRIC_GAUGE, \
      "memtrim_cgroup_max_bytes",                                                                  \
      "The lowest memory.max on the cgroup's path (v1 memory.limit_in_bytes).")                    \
    X(cgroup_high_bytes, MT_FIELD_I64, cheap.cgroup_high_bytes, MT_KNOWN_NONNEG, 0,                \
      MT_METRIC_GAUGE, "memtrim_cgroup_high_bytes",                                                \
      "The lowest memory.high on the cgroup's path (the kernel throttles above it).")              \
    X(cgroup_anon_bytes, MT_FIELD_I64, cheap.cgroup_anon_bytes, MT_KNOWN_NONNEG, 15,               \
      MT_METRIC_GAUGE, "memtrim_cgroup_anon_bytes",                                                \
      "Anonymous memory the cgroup is charged (memory.stat anon; v1 total_rss).")                  \
    X(cgroup_file_bytes, MT_FIELD_I64, cheap.cgroup_file_bytes, MT_KNOWN_NONNEG, 16,               \
      MT_METRIC_GAUGE, "memtrim_cgroup_file_bytes",                                                \
      "Page cache the cgroup is charged, shmem included (memory.stat file; v1 total_cache).")      \
    X(cgroup_shmem_bytes, MT_FIELD_I64, cheap.cgroup_shmem_bytes, MT_KNOWN_NONNEG, 0,              \
      MT_METRIC_GAUGE, "memtrim_cgroup_shmem_bytes", "Of that, shmem and tmpfs.")                  \
    X(cgroup_events_high, MT_FIELD_I64, cheap.cgroup_events[MT_CG_EV_HIGH], MT_KNOWN_NONNEG, 17,   \
      MT_METRIC_COUNTER, "memtrim_cgroup_events_total{event=\"high\"}",                            \
      "The cgroup's memory.events: high (throttled above memory.high), max (reclaim at "           \
      "memory.max; v1 memory.failcnt), oom, oom_kill.")                                            \
    X(cgroup_events_max, MT_FIELD_I64, cheap.cgroup_events[MT_CG_EV_MAX], MT_KNOWN_NONNEG, 18,     \
      MT_METRIC_COUNTER, "memtrim_cgroup_events_total{event=\"max\"}", "")                         \
    X(cgroup_events_oom, MT_FIELD_I64, cheap.cgroup_events[MT_CG_EV_OOM], MT_KNOWN_NONNEG, 19,     \
      MT_METRIC_COUNTER, "memtrim_cgroup_events_total{event=\"oom\"}", "")                         \
    X(cgroup_events_oom_kill, MT_FIELD_I64, cheap.cgroup_events[MT_CG_EV_OOM_KILL],                \
      MT_KNOWN_NONNEG, 20, MT_METRIC_COUNTER, "memtrim_cgroup_events_total{event=\"oom_kill\"}",   \
      "")                                                                                          \
    X(rss_without_memtrim_bytes, MT_FIELD_U64, saved.rss_without_memtrim_bytes, MT_KNOWN_ALWAYS,  \
      21, MT_METRIC_GAUGE, "memtrim_rss_without_memtrim_bytes",                                    \
      "The RSS the host would have without memtrim (estimate: RSS + saved).")                      \
    X(saved_bytes, MT_FIELD_U64, saved.saved_bytes, MT_KNOWN_ALWAYS, 22, MT_METRIC_GAUGE,          \
      "memtrim_saved_bytes", "Memory memtrim's trims released that has not come back.")            \
    X(rss_peak_bytes, MT_FIELD_U64, saved.rss_peak_bytes, MT_KNOWN_ALWAYS, 0, MT_METRIC_GAUGE,     \
      "memtrim_rss_peak_bytes", "The highest RSS (VmHWM).")                                        \
    X(rss_without_memtrim_peak_bytes, MT_FIELD_U64, saved.rss_without_memtrim_peak_bytes,          \
      MT_KNOWN_ALWAYS, 0, MT_METRIC_GAUGE, "memtrim_rss_without_memtrim_peak_bytes",               \
      "The highest RSS the host would have reached without memtrim (estimate).")                   \
    X(saved_byte_seconds_total, MT_FIELD_F64, saved.saved_byte_seconds_total, MT_KNOWN_ALWAYS, 0,  \
      MT_METRIC_COUNTER, "memtrim_saved_byte_seconds_total",                                       \
      "saved_bytes integrated over time (byte-seconds; / 3.6e12 for GB-hours).")                   \
    X(cheap_probe_duration_seconds, MT_FIELD_NS, cheap.duration_ns, MT_KNOWN_ALWAYS, 0,            \
      MT_METRIC_NONE, "", "")                                                                      \
    /* from here on the heap reading's (api/stats.c writes probe_error before them) */             \
    X(heap_timestamp_ms, MT_FIELD_I64, heap.timestamp_ms, MT_KNOWN_HEAP, 0, MT_METRIC_NONE, "",    \
      "")                                                                                          \
    X(heap_age_ms, MT_FIELD_MS, heap_age_ms, MT_KNOWN_HEAP, 0, MT_METRIC_GAUGE,                    \
      "memtrim_heap_stats_age_seconds", "Age of the heap statistics when this page was made.")     \
    X(heap_in_use_bytes, MT_FIELD_U64, heap.heap_in_use_bytes,                                     \
      MT_KNOWN_HEAP_HAS(MT_HEAP_HAS_IN_USE), 5, MT_METRIC_GAUGE, "memtrim_heap_in_use_bytes",      \
      "Heap allocated to the program (glibc uordblks + hblkhd, jemalloc stats.allocated, ...).")   \
    X(heap_free_bytes, MT_FIELD_U64, heap.heap_free_bytes, MT_KNOWN_HEAP_HAS(MT_HEAP_HAS_FREE),    \
      6, MT_METRIC_GAUGE, "memtrim_heap_free_bytes",                                               \
      "Free heap held by the allocator (glibc fordblks, ...).")                                    \
    X(heap_mapped_bytes, MT_FIELD_U64, heap.heap_mapped_bytes,                                     \
      MT_KNOWN_HEAP_HAS(MT_HEAP_HAS_MAPPED), 0, MT_METRIC_GAUGE, "memtrim_heap_mapped_bytes",      \
      "Memory the allocator holds from the system.")                                               \
    X(heap_resident_bytes, MT_FIELD_U64, heap.heap_resident_bytes,                                 \
      MT_KNOWN_HEAP_HAS(MT_HEAP_HAS_RESIDENT), 0, MT_METRIC_GAUGE, "memtrim_heap_resident_bytes",  \
      "Of the allocator's memory, what is resident.")                                              \
    X(heap_retained_bytes, MT_FIELD_U64, heap.heap_retained_bytes,                                 \
      MT_KNOWN_HEAP_HAS(MT_HEAP_HAS_RETAINED), 0, MT_METRIC_GAUGE, "memtrim_heap_retained_bytes",  \
      "Address space the allocator keeps but gave back to the kernel.")                            \
    X(heap_mmapped_bytes, MT_FIELD_U64, heap.heap_mmapped_bytes,                                   \
      MT_KNOWN_HEAP_HAS(MT_HEAP_HAS_MALLINFO), 7, MT_METRIC_GAUGE, "memtrim_heap_mmapped_bytes",   \
      "Heap in mmapped regions (hblkhd).")                                                         \
    X(arena_bytes, MT_FIELD_U64, heap.arena_bytes, MT_KNOWN_HEAP_HAS(MT_HEAP_HAS_MALLINFO), 8,     \
      MT_METRIC_GAUGE, "memtrim_heap_arena_bytes", "Non-mmapped heap (mallinfo2 arena).")          \
    X(heap_free_chunks, MT_FIELD_U64, heap.ordblks, MT_KNOWN_HEAP_HAS(MT_HEAP_HAS_MALLINFO), 0,    \
      MT_METRIC_GAUGE, "memtrim_heap_free_chunks", "Free heap chunks (mallinfo2 ordblks).")        \
    X(arena_count, MT_FIELD_INT, heap.arena_count, MT_KNOWN_HEAP | MT_KNOWN_NONNEG, 9,             \
      MT_METRIC_GAUGE, "memtrim_heap_arenas", "malloc arenas.")                                    \
    X(arena_count_age_ms, MT_FIELD_I64, arena_count_age_ms, MT_KNOWN_HEAP | MT_KNOWN_NONNEG, 0,    \
      MT_METRIC_NONE, "", "")                                                                      \
    X(releasable_estimate_bytes, MT_FIELD_U64, releasable_estimate_bytes, MT_KNOWN_HEAP, 11,       \
      MT_METRIC_GAUGE, "memtrim_releasable_estimate_bytes",                                        \
      "Free heap that a trim could give back (estimate).")                                         \
    X(fragmentation_ratio, MT_FIELD_F64, fragmentation_ratio,                                      \
      MT_KNOWN_HEAP | MT_KNOWN_POSITIVE, 10, MT_METRIC_GAUGE, "memtrim_fragmentation_ratio",       \
      "RSS divided by heap in use.")                                                               \
    X(heap_probe_duration_seconds, MT_FIELD_NS, heap.duration_ns, MT_KNOWN_HEAP, 14,               \
      MT_METRIC_NONE, "", "")

struct mt_field {
    const char *name;   /* the /memory/stats field (and samples column, series metric) */
    int type;           /* enum mt_field_type */
    size_t offset;      /* in struct mt_snapshot */
    unsigned known;     /* MT_KNOWN_* */
    int column;         /* its place among the samples columns, 1, 2, ...; 0 = not stored */
    int metric;         /* enum mt_metric_kind */
    const char *sample; /* the Prometheus sample name, labels included ("" without a metric) */
    const char *help;   /* its family's HELP ("" on the family's later lines) */
};

/* MT_FIELD_<name>: a field's index in mt_fields; MT_FIELD_COUNT of them, MT_FIELD_COLUMNS
 * stored. */
#define MT_FIELD_ID(name, type, member, known, column, metric, sample, help) MT_FIELD_##name,
#define MT_FIELD_STORED(name, type, member, known, column, metric, sample, help) +((column) != 0)
enum mt_field_id { MT_SNAPSHOT_FIELDS(MT_FIELD_ID) MT_FIELD_COUNT };
enum { MT_FIELD_COLUMNS = 0 MT_SNAPSHOT_FIELDS(MT_FIELD_STORED) };
#undef MT_FIELD_STORED
#undef MT_FIELD_ID

extern const struct mt_field mt_fields[MT_FIELD_COUNT];

/* A field's value in one snapshot. */
struct mt_field_value {
    int real;  /* 1: d holds it (NS in seconds, F64); 0: i does */
    int64_t i; /* the integer types (a U64 cast to int64_t, as the JSON and SQLite take it) */
    double d;
};

/* 1 with *v set when the field is known in s, 0 when it is null (*v zeroed). */
int mt_field_get(const struct mt_field *f, const struct mt_snapshot *s, struct mt_field_value *v);

/* The field of that name, or NULL. */
const struct mt_field *mt_field_find(const char *name);

#endif /* MEMTRIM_FIELDS_H */
