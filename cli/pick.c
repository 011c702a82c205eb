/*
 * pick.c - the threads a call may be taken on (pick.h): /proc's view of each thread's system
 * call, ld.so's loader locks read from the target, and the signal-frame scan of a stopped
 * thread's stack. Reads only; the tool's one thread.
 */
#include "pick.h"

#include "mem.h"
#include "target.h"

#include <stdio.h>
#include <string.h>

#define MAX_THREADS 4096

/* Whether the restorer's address at f is the top of a real rt_sigframe (pretcode, then the
 * ucontext), not a stale copy of it in a live frame's unused slot (Apache's children showed
 * such copies): the kernel's uc_flags (UC_FP_XSTATE, UC_SIGCONTEXT_SS, UC_STRICT_RESTORE_SS
 * at most), user code segment 0x33 in the saved context, and the fpstate pointer within
 * 64 KiB above the frame (the kernel puts the xsave area there, on the thread's stack or its
 * alternate one alike). Offsets from f: uc_flags at 8; the sigcontext starts at 48 (after
 * pretcode, uc_flags, uc_link, uc_stack); cs is the first u16 at 192, fpstate at 232. An
 * unreadable frame counts as one (refused: fail closed). */
static int is_sigframe(pid_t pid, uint64_t f)
{
    uint64_t w[30];
    if (mem_read(pid, f, w, sizeof w) != 0)
        return 1;
    uint64_t flags = w[1], cs = w[24] & 0xffff, fpstate = w[29];
    return (flags & ~(uint64_t)7) == 0 && cs == 0x33 && fpstate > f && fpstate - f < (64u << 10);
}

/* Is the thread inside a signal handler (which may have interrupted malloc with its lock
 * held)? A handler's frame starts with glibc's restorer address: look for it on the stack.
 * 1: yes; -1: the stack could not be read, or it is deeper than the scan (unsafe too). */
int pick_in_signal_handler(pid_t pid, uint64_t rsp, uint64_t end, uint64_t restorer)
{
    if (!restorer)
        return 0;
    static uint64_t buf[4096]; /* 32 KiB a read, 128 KiB of stack at most */
    uint64_t at = rsp & ~(uint64_t)7, stop = end < at + 4 * sizeof buf ? end : at + 4 * sizeof buf;
    if (stop < end)
        return -1;
    while (at < stop) {
        size_t len = stop - at < sizeof buf ? (size_t)(stop - at) : sizeof buf;
        if (mem_read(pid, at, buf, len) != 0)
            return -1;
        for (size_t i = 0; i < len / 8; i++)
            if (buf[i] == restorer && is_sigframe(pid, at + 8 * i))
                return 1;
        at += len;
    }
    return 0;
}

/* 1 if tid is the owner of a recursive pthread mutex in [locks, locks + len) of the target:
 * ld.so's _dl_load_lock, _dl_load_write_lock, _dl_load_tls_lock and its namespaces' symbol
 * table locks all are (x86_64 layout: __owner at +8, __kind at +16, PTHREAD_MUTEX_RECURSIVE_NP
 * 1, 40 bytes). Scanned rather than found at an offset: _rtld_global's layout changes between
 * glibc versions; a stray match only makes that thread skipped. Unreadable: 1 (skipped). */
static int owns_loader_lock(pid_t pid, pid_t tid, uint64_t locks, uint64_t len)
{
    static unsigned char area[16384];
    if (!locks)
        return 0;
    if (len > sizeof area)
        len = sizeof area;
    if (len < 40 || mem_read(pid, locks, area, len) != 0)
        return 1;
    for (uint64_t off = 0; off + 40 <= len; off += 4) {
        int32_t owner, kind;
        memcpy(&owner, area + off + 8, 4);
        memcpy(&kind, area + off + 16, 4);
        if (owner == tid && (kind & 0x7f) == 1)
            return 1;
    }
    return 0;
}

/* The safe threads now, the main thread last (it is the host's own loop more often). */
int pick_threads(pid_t pid, const struct inject_call *c, struct pick *out, int max,
                        char *why, size_t whylen)
{
    static pid_t tids[MAX_THREADS];
    int n = target_threads(pid, tids, MAX_THREADS), k = 0;
    size_t w = 0;
    why[0] = 0;
    for (int i = n - 1; i >= 0 && k < max; i--) {
        uint64_t args[7], start, end;
        long nr = target_thread_syscall(pid, tids[i], args);
        int locked = nr >= 0 && owns_loader_lock(pid, tids[i], c->locks, c->locks_len);
        if (locked) {
            if (w + 64 < whylen)
                w += (size_t)snprintf(why + w, whylen - w, "%s%d holds the loader lock (in %s)",
                                      w ? ", " : "", (int)tids[i],
                                      target_syscall_name(nr) ? target_syscall_name(nr) : "a call");
        } else if (nr >= 0 && target_syscall_safe(nr, args) &&
            target_mapping(pid, args[6], &start, &end) == 0) {
            out[k].tid = tids[i];
            out[k].sp = args[6];
            out[k].stack_end = end;
            out[k++].nr = nr;
        } else if (w + 64 < whylen) {
            const char *name = nr >= 0 ? target_syscall_name(nr) : NULL;
            char num[40];
            snprintf(num, sizeof num, "syscall %ld", nr);
            w += (size_t)snprintf(why + w, whylen - w, "%s%d %s", w ? ", " : "", (int)tids[i],
                                  nr == -2 ? "running" : nr == -1 ? "in user code" : name ? name : num);
        }
    }
    return k;
}
