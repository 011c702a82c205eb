/*
 * alloc.h - the allocator back ends: one small table of operations per
 * allocator (glibc, jemalloc, gperftools tcmalloc, mimalloc), one file each,
 * chosen at start by which one serves `malloc` in this process. Adding an
 * allocator is one new alloc_<id>.c and one row of the allocator table
 * (common/alloc_table/alloc_table.h), which the memtrim command reads too.
 *
 * Every entry point of a back end is found with dlsym(RTLD_DEFAULT, ...):
 * memtrim has no link-time dependency on any allocator. A back end resolves
 * its symbols once (alloc_select, at start, before memtrim's threads run) and
 * keeps them in file-static pointers: the allocator is process-wide, and the
 * pointers never change afterwards. stats() and release() are called from the
 * housekeeper or an HTTP worker, one at a time for release (trim.c), under the
 * probe budget for stats (snapshot.c); they take only the allocator's own locks.
 */
#ifndef MEMTRIM_ALLOC_H
#define MEMTRIM_ALLOC_H

#include <stddef.h>
#include <stdint.h>
#include "alloc_table.h"
#include "types.h"

struct alloc_ops {
    enum mt_alloc_id id; /* its row of the allocator table: its name, its release call */
    /* Resolve the entry points. Returns 0 when present, or -ENOENT. Idempotent. */
    int (*resolve)(void);
    /* An address inside the allocator's object (dladdr confirms it serves malloc). */
    void *(*anchor)(void);
    /* Its version as text ("" unknown). */
    void (*version)(char *buf, size_t size);
    /*
     * Stats into the common fields of *out (heap_in_use_bytes, heap_free_bytes,
     * heap_mapped..., with MT_HEAP_HAS_* bits in out->known for those that mean
     * something) and its own figures (out->figures). The caller zeroes *out and
     * times the call.
     */
    void (*stats)(struct mt_heap *out);
    /* Release free memory to the kernel; returns the call's result (glibc:
     * malloc_trim's 1/0; others 1 when the call ran, 0 when it failed). */
    int (*release)(uint64_t pad);
    /* Optional (NULL): the number of arenas, costlier than stats (-1 unknown). */
    int (*arena_count)(void);
    /* Optional (NULL): called first thing on each of memtrim's own threads
     * (mt_thread_set_enter). jemalloc moves them into an arena of their own. */
    void (*thread_enter)(void);
};

/* One back end per row of the allocator table: alloc_glibc, alloc_jemalloc, ... */
#define ALLOC_OPS_DECL_(id, ...) extern const struct alloc_ops alloc_##id;
MT_ALLOC_ROWS(ALLOC_OPS_DECL_)

/* A back end's name ("glibc", ...) and release call (for logs and /memory/stats): its row's. */
static inline const char *alloc_name(const struct alloc_ops *a)
{
    return mt_alloc_table[a->id].name;
}
static inline const char *alloc_release_call(const struct alloc_ops *a)
{
    return mt_alloc_table[a->id].release_call;
}

/* What detection found, for logs and errors. */
struct alloc_found {
    const char *serving;   /* the back end confirmed to serve malloc, or NULL */
    char malloc_object[256]; /* the object `malloc` resolves to ("?" unknown) */
    char present[128];     /* back ends whose entry points resolve, "glibc, jemalloc" */
};

/* The back end named `name` ("glibc", ...), or NULL. */
const struct alloc_ops *alloc_by_name(const char *name);

/* Detect which back end serves malloc in this process (see alloc.c). */
void alloc_detect(struct alloc_found *found);

/*
 * Choose the back end for `wanted` ("auto" or a name). auto: the one that
 * serves malloc, or glibc (with a warning) when none is confirmed. A named
 * one must be present (its entry points resolve): otherwise -ENOENT with
 * *err (caller frees) naming what was found. Returns 0 with *out set.
 */
int alloc_select(const char *wanted, const struct alloc_ops **out, char **err);
/* The same; quiet: its warnings at debug level (a worker group's member: its leader
 * said them already, and one line per worker would flood the log). */
int alloc_select_quiet(const char *wanted, const struct alloc_ops **out, int quiet, char **err);

/* Append an allocator's own figure to out->figures (dropped when full). */
void alloc_figure(struct mt_heap *out, const char *name, uint64_t value);

/* dlsym(RTLD_DEFAULT, name), as a function pointer type-pun kept in one place. */
void *alloc_sym(const char *name);

#endif /* MEMTRIM_ALLOC_H */
