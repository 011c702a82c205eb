/*
 * alloc_mimalloc.c - mimalloc 2 through its C API, found with dlsym (no link
 * against libmimalloc). Stats: mi_process_info (committed memory; a release
 * build of mimalloc, as Debian's, keeps no count of allocated bytes, so the
 * in-use and free fields stay unknown). Release: mi_collect(true), which
 * collects the calling thread's heap, abandoned segments and the segment
 * cache (other threads' heaps purge their free pages themselves after
 * mimalloc's reset delay). Called from the housekeeper, the pressure thread and
 * HTTP workers as snapshot.c and trim.c allow. No state but the resolved
 * pointers (alloc.h), set at start; no locks of its own (mimalloc's are its own).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>

#include "alloc.h"

typedef void (*mi_collect_fn)(bool);
typedef void (*mi_process_info_fn)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *,
                                   size_t *, size_t *);
typedef int (*mi_version_fn)(void);

static mi_collect_fn mi_collect_p;
static mi_process_info_fn mi_info_p;
static mi_version_fn mi_version_p;

static int mi_resolve(void)
{
    mi_collect_p = (mi_collect_fn)alloc_sym("mi_collect");
    mi_info_p = (mi_process_info_fn)alloc_sym("mi_process_info");
    mi_version_p = (mi_version_fn)alloc_sym("mi_version");
    return mi_collect_p && mi_info_p ? 0 : -ENOENT;
}

static void *mi_anchor(void)
{
    return (void *)mi_collect_p;
}

static void mi_version(char *buf, size_t size)
{
    if (!mi_version_p)
        return;
    int v = mi_version_p(); /* 209 = 2.0.9 */
    snprintf(buf, size, "%d.%d.%d", v / 100, v / 10 % 10, v % 10);
}

static void mi_stats(struct mt_heap *out)
{
    size_t elapsed = 0, user = 0, sys = 0, rss = 0, peak_rss = 0, commit = 0, peak_commit = 0,
           faults = 0;
    if (!mi_info_p)
        return;
    mi_info_p(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
    out->heap_mapped_bytes = commit;
    out->known = MT_HEAP_HAS_MAPPED;
    alloc_figure(out, "current_commit", commit);
    alloc_figure(out, "peak_commit", peak_commit);
    alloc_figure(out, "peak_rss", peak_rss);
    alloc_figure(out, "page_faults", faults);
}

static int mi_release(uint64_t pad)
{
    (void)pad;
    if (!mi_collect_p)
        return 0;
    mi_collect_p(true);
    return 1;
}

const struct alloc_ops alloc_mimalloc = {
    .id = MT_ALLOC_mimalloc,
    .resolve = mi_resolve,
    .anchor = mi_anchor,
    .version = mi_version,
    .stats = mi_stats,
    .release = mi_release,
};
