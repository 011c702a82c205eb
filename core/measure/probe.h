/*
 * probe.h - raw readings of the process's memory. The cheap part reads
 * /proc/self and the cgroup files (microseconds, no allocator locks); the
 * costly part calls the allocator's stats (glibc: mallinfo2(), and when asked
 * malloc_info() for the arena count), which locks every arena of the host. Callers decide when the
 * costly part may run (snapshot.c keeps the budget). Stateless except for
 * the cgroup paths, which belong to the caller.
 */
#ifndef MEMTRIM_PROBE_H
#define MEMTRIM_PROBE_H

#include <limits.h>
#include <stdint.h>
#include "alloc.h"
#include "cgroup.h"
#include "types.h"

struct probe_cgroup {
    int version;             /* 0 none, 1, 2 (info.version) */
    struct cgroup_info info; /* where it is, its kept descriptors (cgroup.h) */
};

/* Find this process's memory cgroup (v1, v2 or hybrid) from /proc/self/cgroup
 * and /proc/self/mountinfo (MEMTRIM_CGROUP_ROOT, when set, names the mount
 * point instead: v1's memory controller under it, v2 at it). Returns 0 or -ENOENT. */
int probe_cgroup_init(struct probe_cgroup *cg);
/* The same from a /proc/self/cgroup text and a mount point as MEMTRIM_CGROUP_ROOT names it. */
int probe_cgroup_find(struct probe_cgroup *cg, const char *proc_cgroup, const char *root);
/* Close what probe_cgroup_init opened (harmless on a zeroed or closed one). */
void probe_cgroup_close(struct probe_cgroup *cg);

/* The memory usage alone of the cgroup at level (0 the own, the limit's: cgroup_limit_level),
 * one read of a kept descriptor (microseconds; any thread); -1 unknown. */
int64_t probe_cgroup_usage(struct probe_cgroup *cg, int level);

/* RSS in bytes from /proc/self/statm alone (the pressure check); 0 on failure. */
uint64_t probe_rss(void);

/* One read of /proc/self/statm (microseconds): virtual size, resident, and of that the
 * anonymous part (resident less shared: the kernel's file and shmem pages), in bytes. */
struct probe_statm {
    uint64_t vm_size_bytes, rss_bytes, rss_anon_bytes;
};
int probe_statm(struct probe_statm *out); /* 0, or a negative errno */

/* Peak RSS (VmHWM) from /proc/self/status; 0 unknown. */
uint64_t probe_peak_rss(void);

/* Open the /proc files every probe reads, once, while descriptors are to be had (at start). */
void probe_proc_open(void);

/* Process CPU time (user + system, all threads) in ns, from /proc/self/stat; -1 on failure. */
int64_t probe_process_cpu_ns(void);

/* One read of /proc/self/stat: minor faults, CPU time (ns, all threads) and RSS (bytes). */
struct probe_stat {
    uint64_t minflt;
    int64_t cpu_ns;
    uint64_t rss_bytes;
};
int probe_stat(struct probe_stat *out); /* 0 or -EIO */

/* A whole /proc file, NUL-terminated, malloc'd (the caller frees it); NULL when unreadable. */
char *probe_read_file(const char *path);


/* The cheap part. Returns 0 or a negative errno (out is still filled where possible). */
int probe_cheap(struct probe_cgroup *cg, struct mt_cheap *out);

/* The costly part: the allocator's stats call (a: its back end; NULL = glibc),
 * timed; the arena count only when want_arenas and the back end can count them. */
void probe_heap(const struct alloc_ops *a, struct mt_heap *out, int want_arenas);

#endif /* MEMTRIM_PROBE_H */
