/*
 * inject.h - runs one function call inside a target process on one of its threads, chosen
 * because it is blocked in a system call outside the allocator and the loader, and leaves
 * that thread exactly where it was (docs/architecture.md, "The memtrim command").
 */
#ifndef MEMTRIM_CLI_INJECT_H
#define MEMTRIM_CLI_INJECT_H

#include "seccomp.h"
#include "target.h"

#include <stdint.h>

enum inject_rc {
    INJECT_OK = 0,
    INJECT_REFUSED = -1,   /* the kernel or the target's state forbids it; untouched */
    INJECT_NO_THREAD = -2, /* no safe thread before the deadline; untouched */
    INJECT_TIMEOUT = -3,   /* the call runs on past the deadline (it restores the thread itself) */
    INJECT_FAILED = -4,    /* anything else (the target exited, ...) */
};

struct inject_call {
    uint64_t func;        /* in the target */
    uint64_t args[5];     /* rdi rsi rdx rcx r8 */
    int arg0_is_out;      /* args[0] := the page's output buffer (a struct returned in memory) */
    size_t out_len;       /* bytes of the output buffer to read back, at most 1024 */
    const char *in;       /* a string copied to the page's TR_PATH (at most TR_PATH_MAX bytes) */
    unsigned page_args;   /* bit i: args[i] is an offset in the page (TR_PATH, TR_OUT) */
    uint64_t locks, locks_len; /* a thread owning a recursive mutex here is never taken
                                  (ld.so's _rtld_global: its loader locks); 0: no check */
    /* the system calls the function makes (a seccomp filter must allow each: seccomp.c);
     * any_syscall: every one (load) */
    const struct inject_syscall *syscalls;
    size_t n_syscalls;
    int any_syscall;
    double thread_wait_s; /* how long to look for a safe thread */
    double call_wait_s;   /* how long the call may take */
    /* results */
    uint64_t result;
    unsigned char out[1024];
    pid_t tid;
    char syscall[32];     /* where the thread was */
    double stopped_s;     /* how long that one thread was in a ptrace stop */
    double call_s;        /* from its release until the call returned */
    int new_page;         /* the page was mapped by this call */
};

/* The system calls the injection itself makes on the target's thread, with the arguments it
 * makes them with (seccomp.h): a filter must allow each before anything is changed. */
extern const struct inject_syscall inject_syscalls[];
extern const size_t inject_syscalls_n;

int inject_run(struct target *t, struct inject_call *c, char *err, size_t errlen);
/* Set once a thread stays seized by this process (it did not stop in time, or could not be
 * released): only this process's exit frees it, so nothing more is done (--tree stops). */
extern int inject_left_seized;

#endif
