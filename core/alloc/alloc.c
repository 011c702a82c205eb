/*
 * alloc.c - which allocator serves malloc in this process, and the list of
 * back ends. Detection: the object that `malloc` resolves to (dladdr of
 * dlsym(RTLD_DEFAULT, "malloc")) is compared with the object that holds each
 * back end's own entry point, so a jemalloc linked into the executable,
 * preloaded before memtrim or after it, is found the same way, and a library
 * merely loaded (its malloc not the one in use) is not mistaken for it.
 * A non-PIE executable that takes malloc's address (python3, node) holds an
 * undefined `malloc` with a value: its PLT entry, which dlsym returns. That
 * executable does not serve malloc, it imports it: the object that does is the
 * first after it, in the order the dynamic linker searches, that defines malloc
 * (definer_after).
 * The back ends are the allocator table's rows (common/alloc_table/alloc_table.h).
 * Runs at start (mt_create) on the caller's thread; no state of its own, no locks.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt_alloc.h"
#include "alloc.h"
#include "common.h"
#include "control.h"

/* Each row's back end. Which one serves is found by the object malloc resolves to, so the
 * order does not matter; glibc's symbols are always there, and "present" lists it too. */
#define ALLOC_OPS_(id, ...) [MT_ALLOC_##id] = &alloc_##id,
static const struct alloc_ops *const backends[MT_ALLOC_COUNT] = {MT_ALLOC_ROWS(ALLOC_OPS_)};
#define NBACKENDS ((size_t)MT_ALLOC_COUNT)

void *alloc_sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

const struct alloc_ops *alloc_by_name(const char *name)
{
    for (size_t i = 0; name && i < NBACKENDS; i++)
        if (strcmp(mt_alloc_table[i].name, name) == 0)
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

/* Whether the object that holds symbol address addr defines the symbol there (0 for an
 * executable's PLT entry or copy of an import: its symbol is undefined, with a value);
 * *map: that object. */
static int defines(void *addr, struct link_map **map)
{
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    *map = NULL;
    if (!addr || !dladdr1(addr, &info, (void **)map, RTLD_DL_LINKMAP) || !*map)
        return 0;
    if (!dladdr1(addr, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym)
        return 1; /* no symbol entry said otherwise */
    return sym->st_shndx != SHN_UNDEF;
}

/* malloc as the objects after `importer` in link-map order define it: the first that does,
 * as the dynamic linker binds the importer's own PLT (which skips undefined symbols); the
 * objects loaded at start (the executable, LD_PRELOAD, their dependencies) come first in
 * both orders. NULL when none does. */
static void *definer_after(struct link_map *importer)
{
    for (struct link_map *l = importer->l_next; l; l = l->l_next) {
        if (!l->l_name || !l->l_name[0])
            continue;
        void *h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
        if (!h)
            continue; /* the vDSO, or a name that no longer opens */
        struct link_map *where = NULL;
        void *addr = dlsym(h, "malloc"); /* the object's own first, then its dependencies' */
        int own = defines(addr, &where) && where == l;
        dlclose(h);
        if (own)
            return addr;
    }
    return NULL;
}

/* The address of the malloc that serves this process. */
static void *serving_malloc(void)
{
    void *addr = alloc_sym("malloc");
    struct link_map *map = NULL;
    if (mt_control("rt-alloc-nonpie"))
        return addr; /* the old check: an executable's PLT entry taken for its own malloc */
    if (addr && !defines(addr, &map) && map) {
        void *real = definer_after(map);
        if (real)
            return real;
    }
    return addr;
}

void alloc_detect(struct alloc_found *found)
{
    void *malloc_base = object_of(serving_malloc(), found->malloc_object,
                                  sizeof(found->malloc_object));
    size_t len = 0;

    found->serving = NULL;
    found->present[0] = '\0';
    for (size_t i = 0; i < NBACKENDS; i++) {
        const struct alloc_ops *a = backends[i];
        if (a->resolve() != 0)
            continue;
        int n = snprintf(found->present + len, sizeof(found->present) - len, "%s%s",
                         len ? ", " : "", alloc_name(a));
        if (n > 0 && (size_t)n < sizeof(found->present) - len)
            len += (size_t)n;
        if (!found->serving && malloc_base && object_of(a->anchor(), NULL, 0) == malloc_base)
            found->serving = alloc_name(a);
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
               "malloc is served by %s, which is none of %s; using glibc's calls (set "
               "Allocator to choose)", found.malloc_object, &MT_ALLOC_LIST[2]);
        *out = &alloc_glibc;
        return 0;
    }
    const struct alloc_ops *a = alloc_by_name(wanted);
    if (!a) {
        snprintf(buf, sizeof(buf),
                 "Allocator: unknown allocator \"%.64s\" (expected auto" MT_ALLOC_LIST ")",
                 wanted);
        goto fail;
    }
    if (a->resolve() != 0) {
        snprintf(buf, sizeof(buf),
                 "Allocator: %s was asked for but is not in this process (malloc is served by "
                 "%s%s%s; allocator APIs found: %s)", alloc_name(a),
                 found.serving ? found.serving : "", found.serving ? " in " : "",
                 found.malloc_object, found.present);
        goto fail;
    }
    if (!found.serving || strcmp(found.serving, alloc_name(a)) != 0)
        mt_log(quiet ? MT_LOG_DEBUG : MT_LOG_WARNING, "alloc",
               "Allocator: %s forced, but malloc is served by %s%s%s: its stats and releases "
               "may not cover the host's heap", alloc_name(a), found.serving ? found.serving : "",
               found.serving ? " in " : "", found.malloc_object);
    *out = a;
    return 0;

fail:
    if (err)
        *err = mt_strdup(buf);
    return -ENOENT;
}
