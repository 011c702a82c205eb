/*
 * alloc_glibc.c - glibc's malloc: mallinfo2 for the stats (every arena's
 * lock, a walk of its free lists), malloc_info for the arena count,
 * malloc_trim to give free pages back. Called from the housekeeper and HTTP
 * workers as snapshot.c and trim.c allow; no state and no locks of its own.
 */
#include <gnu/libc-version.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_alloc.h"
#include "alloc.h"

static int glibc_resolve(void)
{
    return 0; /* memtrim itself links libc: always present */
}

static void *glibc_anchor(void)
{
    /* A function only libc defines (tcmalloc, for one, defines mallinfo too). */
    return alloc_sym("gnu_get_libc_version");
}

static void glibc_version(char *buf, size_t size)
{
    snprintf(buf, size, "%s", gnu_get_libc_version());
}

static void glibc_stats(struct mt_heap *out)
{
    struct mallinfo2 mi = mallinfo2();

    out->arena_bytes = mi.arena;
    out->ordblks = mi.ordblks;
    out->smblks = mi.smblks;
    out->hblks = mi.hblks;
    out->hblkhd = mi.hblkhd;
    out->fsmblks = mi.fsmblks;
    out->uordblks = mi.uordblks;
    out->fordblks = mi.fordblks;
    out->keepcost = mi.keepcost;
    out->heap_in_use_bytes = mi.uordblks + mi.hblkhd;
    out->heap_free_bytes = mi.fordblks;
    out->heap_mmapped_bytes = mi.hblkhd;
    out->heap_mapped_bytes = mi.arena + mi.hblkhd;
    out->known = MT_HEAP_HAS_IN_USE | MT_HEAP_HAS_FREE | MT_HEAP_HAS_MAPPED | MT_HEAP_HAS_MALLINFO;
    alloc_figure(out, "arena", mi.arena);
    alloc_figure(out, "ordblks", mi.ordblks);
    alloc_figure(out, "smblks", mi.smblks);
    alloc_figure(out, "hblks", mi.hblks);
    alloc_figure(out, "hblkhd", mi.hblkhd);
    alloc_figure(out, "fsmblks", mi.fsmblks);
    alloc_figure(out, "uordblks", mi.uordblks);
    alloc_figure(out, "fordblks", mi.fordblks);
    alloc_figure(out, "keepcost", mi.keepcost);
}

static int glibc_release(uint64_t pad)
{
    return malloc_trim((size_t)pad);
}

/* Count the arenas from malloc_info's XML: one <heap nr="..."> per arena. */
static int glibc_arena_count(void)
{
    char *xml = NULL;
    size_t len = 0;
    int n = 0;
    FILE *f = mt_open_memstream(&xml, &len);
    if (!f)
        return -1;
    if (malloc_info(0, f) != 0) {
        fclose(f);
        free(xml);
        return -1;
    }
    fclose(f);
    for (const char *p = xml; p && (p = strstr(p, "<heap nr=")); p++)
        n++;
    free(xml);
    return n;
}

const struct alloc_ops alloc_glibc = {
    .id = MT_ALLOC_glibc,
    .resolve = glibc_resolve,
    .anchor = glibc_anchor,
    .version = glibc_version,
    .stats = glibc_stats,
    .release = glibc_release,
    .arena_count = glibc_arena_count,
};
