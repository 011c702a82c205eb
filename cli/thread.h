/*
 * thread.h - what memtrim needs of the target's glibc to start a thread of its own there
 * (docs/command.md): pthread_create and its attribute calls, the thread block's layout
 * (libthread_db's descriptors, which glibc exports), the thread-local variables of libc (their
 * offsets from the thread pointer, from its TPOFF64 relocations), malloc's per-thread cache,
 * and __libc_single_threaded. Reads only; the tool's one thread.
 */
#ifndef MEMTRIM_CLI_THREAD_H
#define MEMTRIM_CLI_THREAD_H

#include "target.h"

#include <stddef.h>
#include <stdint.h>

struct glibc_thread {
    uint64_t attr_init, attr_setstack, attr_setdetach, create, attr_destroy;
    uint64_t single_threaded; /* &__libc_single_threaded in the target */
    uint32_t tid_off;         /* struct pthread's tid (_thread_db_pthread_tid) */
    uint32_t pthread_size;    /* sizeof (struct pthread) (_thread_db_sizeof_pthread) */
    int64_t tls_low;          /* the lowest offset of a libc thread variable from the pointer */
    int64_t tcache_off;       /* malloc's per-thread cache pointer (tcache) */
    int64_t arena_off;        /* malloc's per-thread arena pointer (thread_arena) */
    uint64_t main_arena;      /* &main_arena, for a thread that never allocated */
};

/* 0, or -1 with err naming what this libc lacks (glibc before 2.34; another layout). */
int thread_find(const struct target *t, struct glibc_thread *g, char *err, size_t errlen);

/* Builds the raw thread's thread block on the page from the stopped taken thread's (fs_base):
 * its copy of libc's thread variables and struct pthread, pointing at itself, its tid
 * cleared for CLONE_CHILD_SETTID, its malloc cache an empty one of the page's (never the
 * taken thread's). *tp: the raw thread's thread pointer. 0, or -1 with why (the thread is
 * passed over: its cache is not where this libc keeps it). */
int thread_block(pid_t pid, uint64_t fs_base, uint64_t page, const struct glibc_thread *g,
                 uint64_t *tp, char *why, size_t whylen);

#endif
