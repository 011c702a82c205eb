/*
 * pick.h - which threads of a target may be taken to start memtrim's own (docs/command.md):
 * blocked in a system call the kernel restarts exactly, with no timeout it would lose (a
 * socket's receive timeout included); and, alone in its process, not inside a signal handler.
 * Reads only; the tool's one thread.
 */
#ifndef MEMTRIM_CLI_PICK_H
#define MEMTRIM_CLI_PICK_H

#include <stdint.h>
#include <sys/types.h>

struct pick {
    pid_t tid;
    long nr;
    int nice;               /* its nice, which memtrim's glibc thread inherits */
    uint64_t sp, stack_end; /* its stack pointer in the call, and the end of that mapping */
};

/* The safe threads now, up to max (at most 64), those at the main thread's nice, on its
 * CPUs and in its cgroups first, the main thread last among them; why says what the others
 * were doing. Their count. */
int pick_threads(pid_t pid, struct pick *out, int max, char *why, size_t whylen);
/* 1 if the stopped thread's stack from rsp to end holds a signal frame (whatever its
 * restorer: the kernel's frame is recognised by its own fields), 0 if not, -1 if it cannot be
 * scanned whole (unsafe too). */
int pick_in_signal_handler(pid_t pid, uint64_t rsp, uint64_t end);

#endif
