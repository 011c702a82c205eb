/*
 * inject.h - runs one function call inside a target process on a thread of memtrim's own
 * (docs/command.md): a thread blocked in a system call is taken only to start it, with raw
 * system calls, and is back in its call at once; the call runs on a glibc thread that
 * memtrim's raw thread creates with the target's pthread_create.
 */
#ifndef MEMTRIM_CLI_INJECT_H
#define MEMTRIM_CLI_INJECT_H

#include "prio.h"
#include "seccomp.h"
#include "target.h"

#include <stdint.h>

enum inject_rc {
    INJECT_OK = 0,
    INJECT_REFUSED = -1,     /* the kernel or the target's state forbids it; untouched */
    INJECT_NO_THREAD = -2,   /* no safe thread before the deadline; untouched */
    INJECT_TIMEOUT = -3,     /* the call runs on past the deadline (on memtrim's thread) */
    INJECT_FAILED = -4,      /* anything else (the target exited, ...) */
    INJECT_UNSUPPORTED = -5, /* the target's glibc lacks what memtrim's thread needs */
};

struct inject_call {
    uint64_t func;        /* in the target */
    uint64_t args[5];     /* rdi rsi rdx rcx r8 */
    int arg0_is_out;      /* args[0] := the page's output buffer (a struct returned in memory) */
    size_t out_len;       /* bytes of the output buffer to read back, at most 1024 */
    const char *in;       /* a string copied to the page's TR_PATH (at most TR_PATH_MAX bytes) */
    unsigned page_args;   /* bit i: args[i] is an offset in the page (TR_PATH, TR_OUT) */
    /* the system calls the function makes (a seccomp filter must allow each: seccomp.c);
     * any_syscall: every one (load) */
    const struct inject_syscall *syscalls;
    size_t n_syscalls;
    int any_syscall;
    double thread_wait_s; /* how long to look for a safe thread */
    double call_wait_s;   /* how long the call may take */
    int raise;            /* nice levels memtrim's glibc thread is raised by for its call
                             (prio.h): trim and stats (--raise); 0 none */
    /* results */
    uint64_t result;
    unsigned char out[1024];
    pid_t tid;            /* the taken thread */
    char syscall[32];     /* where it was */
    double stopped_s;     /* from its interrupt until it was back in its system call */
    pid_t raw_tid;        /* memtrim's raw thread (clone) */
    pid_t call_tid;       /* the glibc thread that made the call */
    double call_s;        /* from the taken thread's release until the call returned */
    double threads_s;     /* until both of memtrim's threads had exited (or 2 s more) */
    int threads_ended;    /* 1: both exited, the page free again */
    int new_page;         /* the page was mapped by this call */
    int self_restored;    /* the taken thread restored itself (the tool came too late) */
    struct prio prio;     /* the glibc thread's weight: taken_nice, nice, raised or why not */
};

/* The system calls memtrim itself makes in a target, on the taken thread (the page's mmap,
 * its code's rt_sigprocmask, prctl, clone and ppoll) and on its own threads (mprotect for the
 * guards, exit, gettid; pthread_create and a glibc thread's start and exit: clone3 or clone,
 * rt_sigaction, rt_sigprocmask, set_robust_list, rseq, futex, madvise, munmap), with the
 * arguments it makes them with where known (seccomp.h): a filter must allow each before
 * anything is changed. */
extern const struct inject_syscall inject_syscalls[];
extern const size_t inject_syscalls_n;

int inject_run(struct target *t, struct inject_call *c, char *err, size_t errlen);
/* Set once a thread stays seized by this process (it did not stop in time, or could not be
 * released): only this process's exit frees it, so nothing more is done (--tree stops). */
extern int inject_left_seized;

#endif
