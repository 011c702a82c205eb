/*
 * thread.c - the target's glibc as memtrim's own thread needs it (thread.h, docs/command.md):
 * its pthread calls, the thread block's layout from the descriptors glibc exports for
 * libthread_db, libc's thread-local variables from its TPOFF64 relocations (malloc's tcache
 * and thread_arena told apart by the order in which malloc's own code loads them), and the
 * raw thread's thread block built from the taken thread's. Reads, and one write into our
 * page; the tool's one thread.
 */
#include "thread.h"

#include "elfsym.h"
#include "mem.h"
#include "tramp.h"

#include <stdio.h>
#include <string.h>

#define MAX_SLOTS 64

/* The TPOFF64 slots malloc's code loads, in order: `mov disp32(%rip), %r64` (REX.W 8B, ModRM
 * mod 00 r/m 101) whose target is such a slot. Their count (at most 2: tcache, thread_arena). */
static int malloc_tls_slots(const struct elf_file *f, uint64_t malloc_at, const uint64_t *slots,
                            int nslots, uint64_t out[2])
{
    unsigned char code[512];
    if (elf_read(f, malloc_at, code, sizeof code) != 0)
        return 0;
    int n = 0;
    for (size_t i = 0; i + 7 <= sizeof code && n < 2; i++) {
        if ((code[i] != 0x48 && code[i] != 0x4c) || code[i + 1] != 0x8b || (code[i + 2] & 0xc7) != 0x05)
            continue;
        int32_t disp;
        memcpy(&disp, code + i + 3, 4);
        uint64_t target = malloc_at + i + 7 + (uint64_t)(int64_t)disp;
        for (int k = 0; k < nslots; k++)
            if (slots[k] == target && (n == 0 || out[0] != target))
                out[n++] = target;
    }
    return n;
}

/* main_arena: the first `lea disp32(%rip), %r64` (REX.W 8D, ModRM mod 00 r/m 101) of
 * malloc_trim, which starts its walk of the arenas there. 0 if none. */
static uint64_t main_arena_of(const struct elf_file *f, uint64_t trim_at)
{
    unsigned char code[128];
    if (!trim_at || elf_read(f, trim_at, code, sizeof code) != 0)
        return 0;
    for (size_t i = 0; i + 7 <= sizeof code; i++)
        if ((code[i] == 0x48 || code[i] == 0x4c) && code[i + 1] == 0x8d && (code[i + 2] & 0xc7) == 0x05) {
            int32_t disp;
            memcpy(&disp, code + i + 3, 4);
            return trim_at + i + 7 + (uint64_t)(int64_t)disp;
        }
    return 0;
}

static int descriptor(const struct elf_file *f, const char *name, uint32_t v[3])
{
    uint64_t size, at = elf_dynobj(f, name, &size);
    return at && size >= 4 && elf_read(f, at, v, size >= 12 ? 12 : 4) == 0 ? 0 : -1;
}

int thread_find(const struct target *t, struct glibc_thread *g, char *err, size_t errlen)
{
    struct elf_file f;
    memset(g, 0, sizeof *g);
    if (elf_open(t->libc.file, &f, err, errlen) != 0)
        return -1;
    static const char *const fns[] = {"pthread_attr_init", "pthread_attr_setstack",
                                      "pthread_attr_setdetachstate", "pthread_create",
                                      "pthread_attr_destroy"};
    uint64_t *dst[] = {&g->attr_init, &g->attr_setstack, &g->attr_setdetach, &g->create,
                       &g->attr_destroy};
    const char *missing = NULL;
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (!(*dst[i] = elf_dynsym(&f, fns[i])))
            missing = fns[i];
        else
            *dst[i] += t->libc.base;
    uint64_t size;
    g->single_threaded = elf_dynobj(&f, "__libc_single_threaded", &size);
    if (g->single_threaded)
        g->single_threaded += t->libc.base;
    uint32_t tid[3] = {0}, psize[3] = {0};
    uint64_t slots[MAX_SLOTS], loads[2] = {0, 0};
    int nslots = elf_tpoff_slots(&f, slots, MAX_SLOTS);
    uint64_t malloc_at = elf_dynsym(&f, "malloc");
    int nloads = malloc_at ? malloc_tls_slots(&f, malloc_at, slots, nslots, loads) : 0;
    g->main_arena = main_arena_of(&f, elf_dynsym(&f, "malloc_trim"));
    if (!missing && (!g->single_threaded || descriptor(&f, "_thread_db_pthread_tid", tid) != 0 ||
                     descriptor(&f, "_thread_db_sizeof_pthread", psize) != 0))
        missing = "__libc_single_threaded or libthread_db's descriptors";
    elf_close(&f);
    if (missing) {
        snprintf(err, errlen, "the target's libc (%s) exports no %s: memtrim starts its own "
                 "thread there with glibc's pthread_create, in libc.so.6 since glibc 2.34", t->libc.path,
                 missing);
        return -1;
    }
    g->tid_off = tid[2];
    g->pthread_size = psize[0];
    if (tid[0] != 32 || g->tid_off + 4 > g->pthread_size || g->pthread_size > 0x4000 || nloads != 2 ||
        !g->main_arena) {
        snprintf(err, errlen, "the target's libc (%s) keeps its thread block or malloc's "
                 "per-thread cache in a way memtrim does not know (tid at %u of %u bytes, %d of 2 "
                 "cache slots): nothing is called", t->libc.path, g->tid_off, g->pthread_size, nloads);
        return -1;
    }
    /* the offsets as the loader resolved them in this process */
    int64_t low = 0;
    for (int k = 0; k < nslots; k++) {
        int64_t v;
        if (mem_read(t->pid, t->libc.base + slots[k], &v, 8) != 0) {
            snprintf(err, errlen, "cannot read the target's libc's TLS offsets: nothing is called");
            return -1;
        }
        if (v < low)
            low = v;
        if (slots[k] == loads[0])
            g->tcache_off = v;
        if (slots[k] == loads[1])
            g->arena_off = v;
    }
    g->tls_low = low & ~(int64_t)15;
    g->main_arena += t->libc.base;
    if (g->tcache_off >= 0 || g->arena_off >= 0 || -g->tls_low > TR_R_TP_OFF - TR_R_TLS_LOW) {
        snprintf(err, errlen, "the target's libc's thread variables lie %lld bytes below the thread "
                 "pointer, more than memtrim's thread can hold: nothing is called",
                 (long long)-g->tls_low);
        return -1;
    }
    return 0;
}

int thread_block(pid_t pid, uint64_t fs_base, uint64_t page, const struct glibc_thread *g,
                 uint64_t *tp, char *why, size_t whylen)
{
    static unsigned char buf[TR_R_TLS_HIGH - TR_R_TLS_LOW];
    size_t below = (size_t)-g->tls_low, len = below + g->pthread_size;
    uint64_t cache, arena, chunk = 0;
    if (mem_read(pid, fs_base + (uint64_t)g->tls_low, buf, len) != 0) {
        snprintf(why, whylen, "its thread block at 0x%llx cannot be read",
                 (unsigned long long)fs_base);
        return -1;
    }
    memcpy(&cache, buf + below + g->tcache_off, 8);
    memcpy(&arena, buf + below + g->arena_off, 8);
    if (cache && (mem_read(pid, cache - 8, &chunk, 8) != 0 || (chunk & ~7ull) < 0x200 ||
                  (chunk & ~7ull) > 0x2000)) {
        snprintf(why, whylen, "its malloc cache is not where this libc keeps it");
        return -1;
    }
    *tp = page + TR_R_TP_OFF;
    unsigned char *tcb = buf + below;
    uint64_t fake = page + TR_FAKE_TCACHE, self = *tp;
    uint32_t one = 1, zero = 0;
    memcpy(tcb + 0, &self, 8);    /* header.tcb */
    memcpy(tcb + 0x10, &self, 8); /* header.self */
    memcpy(tcb + 0x18, &one, 4);  /* header.multiple_threads */
    memcpy(tcb + g->tid_off, &zero, 4);
    memcpy(tcb + g->tcache_off, &fake, 8);
    if (!arena) /* it never allocated: the raw thread's few allocations come from the main arena */
        memcpy(tcb + g->arena_off, &g->main_arena, 8);
    static const unsigned char empty[0x400];
    if (mem_write(pid, page + TR_FAKE_TCACHE, empty, sizeof empty) != 0 ||
        mem_write(pid, *tp - below, buf, len) != 0) {
        snprintf(why, whylen, "cannot write memtrim's thread block");
        return -1;
    }
    return 0;
}
