/*
 * alloc_tcmalloc.c - gperftools tcmalloc through its C API
 * (MallocExtension_*), found with dlsym (no link against libtcmalloc).
 * Stats: numeric properties (each takes tcmalloc's page heap lock briefly).
 * Release: MallocExtension_ReleaseFreeMemory, which unmaps the page heap's
 * free spans. Called from the housekeeper, the pressure thread and HTTP workers
 * as snapshot.c and trim.c allow. No state but the resolved pointers (alloc.h),
 * set at start; no locks of its own.
 */
#include <errno.h>
#include <stdio.h>

#include "alloc.h"

typedef int (*tc_prop_fn)(const char *, size_t *);
typedef void (*tc_release_fn)(void);
typedef const char *(*tc_version_fn)(int *, int *, const char **);

static tc_prop_fn tc_prop;
static tc_release_fn tc_release_free;
static tc_version_fn tc_version_get;

static int tc_resolve(void)
{
    tc_prop = (tc_prop_fn)alloc_sym("MallocExtension_GetNumericProperty");
    tc_release_free = (tc_release_fn)alloc_sym("MallocExtension_ReleaseFreeMemory");
    tc_version_get = (tc_version_fn)alloc_sym("tc_version");
    return tc_prop && tc_release_free ? 0 : -ENOENT;
}

static void *tc_anchor(void)
{
    return (void *)tc_release_free;
}

static void tc_version(char *buf, size_t size)
{
    int major = 0, minor = 0;
    const char *patch = NULL;
    if (!tc_version_get)
        return;
    tc_version_get(&major, &minor, &patch);
    snprintf(buf, size, "%d.%d%s", major, minor, patch ? patch : "");
}

static int tc_get(const char *name, uint64_t *out)
{
    size_t v = 0;
    if (!tc_prop(name, &v))
        return -1;
    *out = v;
    return 0;
}

static void tc_stats(struct mt_heap *out)
{
    uint64_t allocated, heap, pfree, unmapped, central = 0, transfer = 0, thread = 0;

    if (!tc_prop)
        return;
    if (tc_get("generic.current_allocated_bytes", &allocated) ||
        tc_get("generic.heap_size", &heap) || tc_get("tcmalloc.pageheap_free_bytes", &pfree) ||
        tc_get("tcmalloc.pageheap_unmapped_bytes", &unmapped))
        return;
    tc_get("tcmalloc.central_cache_free_bytes", &central);
    tc_get("tcmalloc.transfer_cache_free_bytes", &transfer);
    tc_get("tcmalloc.thread_cache_free_bytes", &thread);
    out->heap_in_use_bytes = allocated;
    /* Free pages held: the page heap's free spans, what ReleaseFreeMemory returns
     * (free objects in the caches are in the own figures, not here). */
    out->heap_free_bytes = pfree;
    out->heap_mapped_bytes = heap > unmapped ? heap - unmapped : 0;
    out->heap_retained_bytes = unmapped;
    out->known = MT_HEAP_HAS_IN_USE | MT_HEAP_HAS_FREE | MT_HEAP_HAS_MAPPED | MT_HEAP_HAS_RETAINED;
    alloc_figure(out, "current_allocated_bytes", allocated);
    alloc_figure(out, "heap_size", heap);
    alloc_figure(out, "pageheap_free_bytes", pfree);
    alloc_figure(out, "pageheap_unmapped_bytes", unmapped);
    alloc_figure(out, "central_cache_free_bytes", central);
    alloc_figure(out, "transfer_cache_free_bytes", transfer);
    alloc_figure(out, "thread_cache_free_bytes", thread);
}

static int tc_release(uint64_t pad)
{
    (void)pad;
    if (!tc_release_free)
        return 0;
    tc_release_free();
    return 1;
}

const struct alloc_ops alloc_tcmalloc = {
    .id = MT_ALLOC_tcmalloc,
    .resolve = tc_resolve,
    .anchor = tc_anchor,
    .version = tc_version,
    .stats = tc_stats,
    .release = tc_release,
};
