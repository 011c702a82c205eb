/*
 * alloc.c - which allocator serves malloc in this process, and the list of
 * back ends. Detection: the object that `malloc` resolves to (dladdr of
 * dlsym(RTLD_DEFAULT, "malloc")) is compared with the object that holds each
 * back end's own entry point, so a jemalloc linked into the executable,
 * preloaded before memtrim or after it, is found the same way, and a library
 * merely loaded (its malloc not the one in use) is not mistaken for it.
 * Runs at start (mt_create) on the caller's thread; no state of its own, no locks.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_alloc.h"
#include "alloc.h"
#include "common.h"

/* The allocators with an API of their own first: glibc's symbols are always there. */
static const struct alloc_ops *const backends[] = {
    &alloc_jemalloc,
    &alloc_tcmalloc,
    &alloc_mimalloc,
    &alloc_glibc,
};
#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))

void *alloc_sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

const struct alloc_ops *alloc_by_name(const char *name)
{
    for (size_t i = 0; name && i < NBACKENDS; i++)
        if (strcmp(backends[i]->name, name) == 0)
            return backends[i];
    return NULL;
}

void alloc_figure(struct mt_heap *out, const char *name, uint64_t value)
{
    if (out->nfigures < 0 || out->nfigures >= MT_ALLOC_FIGURES)
        return;
    out->figures[out->nfigures].name = name;
    out->figures[out->nfigures].value = value;
    out->nfigures++;
}

/* The base address of the object holding addr, or NULL; its file name into name. */
static void *object_of(void *addr, char *name, size_t size)
{
    Dl_info info;
    if (name && size)
        snprintf(name, size, "?");
    if (!addr || !dladdr(addr, &info) || !info.dli_fbase)
        return NULL;
    if (name && size)
        snprintf(name, size, "%s", info.dli_fname && info.dli_fname[0] ? info.dli_fname
                                                                          : "(the executable)");
    return info.dli_fbase;
}

void alloc_detect(struct alloc_found *found)
{
    void *malloc_base = object_of(alloc_sym("malloc"), found->malloc_object,
                                  sizeof(found->malloc_object));
    size_t len = 0;

    found->serving = NULL;
    found->present[0] = '\0';
    for (size_t i = 0; i < NBACKENDS; i++) {
        const struct alloc_ops *a = backends[i];
        if (a->resolve() != 0)
            continue;
        int n = snprintf(found->present + len, sizeof(found->present) - len, "%s%s",
                         len ? ", " : "", a->name);
        if (n > 0 && (size_t)n < sizeof(found->present) - len)
            len += (size_t)n;
        if (!found->serving && malloc_base && object_of(a->anchor(), NULL, 0) == malloc_base)
            found->serving = a->name;
    }
    if (!len)
        snprintf(found->present, sizeof(found->present), "none");
}

int alloc_select(const char *wanted, const struct alloc_ops **out, char **err)
{
    return alloc_select_quiet(wanted, out, 0, err);
}

int alloc_select_quiet(const char *wanted, const struct alloc_ops **out, int quiet, char **err)
{
    struct alloc_found found;
    char buf[640];

    *out = NULL;
    alloc_detect(&found);
    if (!wanted || !wanted[0] || strcmp(wanted, "auto") == 0) {
        if (found.serving) {
            *out = alloc_by_name(found.serving);
            return 0;
        }
        /* An allocator we do not know (or a sanitizer's interceptors): glibc's
         * calls are still safe to make, they just see glibc's own heap. */
        mt_log(quiet ? MT_LOG_DEBUG : MT_LOG_WARNING, "alloc",
               "malloc is served by %s, which is none of glibc, jemalloc, tcmalloc, mimalloc; "
               "using glibc's calls (set Allocator to choose)", found.malloc_object);
        *out = &alloc_glibc;
        return 0;
    }
    const struct alloc_ops *a = alloc_by_name(wanted);
    if (!a) {
        snprintf(buf, sizeof(buf),
                 "Allocator: unknown allocator \"%.64s\" (expected auto, glibc, jemalloc, "
                 "tcmalloc or mimalloc)", wanted);
        goto fail;
    }
    if (a->resolve() != 0) {
        snprintf(buf, sizeof(buf),
                 "Allocator: %s was asked for but is not in this process (malloc is served by "
                 "%s%s%s; allocator APIs found: %s)", a->name,
                 found.serving ? found.serving : "", found.serving ? " in " : "",
                 found.malloc_object, found.present);
        goto fail;
    }
    if (!found.serving || strcmp(found.serving, a->name) != 0)
        mt_log(quiet ? MT_LOG_DEBUG : MT_LOG_WARNING, "alloc",
               "Allocator: %s forced, but malloc is served by %s%s%s: its stats and releases "
               "may not cover the host's heap", a->name, found.serving ? found.serving : "",
               found.serving ? " in " : "", found.malloc_object);
    *out = a;
    return 0;

fail:
    if (err)
        *err = mt_strdup(buf);
    return -ENOENT;
}
