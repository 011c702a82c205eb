/*
 * seccomp.h - whether a target thread's seccomp filters allow every system call an injected
 * call makes there, read from the kernel (PTRACE_SECCOMP_GET_FILTER) and evaluated
 * (bpfeval.c) before anything is changed. The tool's one thread.
 */
#ifndef MEMTRIM_CLI_SECCOMP_H
#define MEMTRIM_CLI_SECCOMP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One system call as an injected call makes it: the arguments whose bit is set in known
 * are exactly these; the others may be anything (a path through the filter for every value
 * must allow it). */
struct inject_syscall {
    const char *name;
    long nr;
    uint64_t args[6];
    unsigned known; /* bits 0-5: the arguments known; SECCOMP_CALL_FAILS_OK: see below */
};
/* In known: the call may fail (an ERRNO answer, as Docker's profile gives clone3: glibc's
 * pthread_create falls back to clone), only a death or a stop is refused. */
#define SECCOMP_CALL_FAILS_OK 0x100u

/* The system calls of one call: the mechanism's and the function's own, each of which must
 * be allowed; any: every other system call number too (load: the engine's threads, sockets
 * and files), for which a failed call (ERRNO) or a logged one passes, as memtrim's engine
 * contains its failures, but never one that kills, traps or waits for a supervisor. */
struct seccomp_calls {
    const struct inject_syscall *mech, *call;
    size_t n_mech, n_call;
    int any;
};

/* 0 when thread tid of pid (seized and stopped by this tool) may make every one; else -1
 * with the reason in err (the call and the filter's action, or why the filters cannot be
 * read). The thread is not touched. */
int seccomp_check(pid_t pid, pid_t tid, const struct seccomp_calls *calls, char *err,
                  size_t errlen);

/* How many seccomp filters thread tid of pid has (0 none; -1 unreadable): filters are only
 * ever added (another thread's SECCOMP_FILTER_FLAG_TSYNC adds one to every thread), so a
 * count that changed since seccomp_check means a filter it did not judge. */
int seccomp_count(pid_t pid, pid_t tid);

#endif
