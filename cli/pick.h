/*
 * pick.h - which threads of a target may be taken for a call (docs/architecture.md, "The
 * memtrim command"): blocked in a system call the allocator and ld.so never make with a lock
 * held, owning no loader lock (load), and once stopped, not inside a signal handler. Reads
 * only; the tool's one thread.
 */
#ifndef MEMTRIM_CLI_PICK_H
#define MEMTRIM_CLI_PICK_H

#include "inject.h"

#include <stdint.h>
#include <sys/types.h>

struct pick {
    pid_t tid;
    long nr;
    uint64_t sp, stack_end; /* its stack pointer in the call, and the end of that mapping */
};

/* The safe threads now, up to max, the main thread last; why says what the others were
 * doing. Their count. */
int pick_threads(pid_t pid, const struct inject_call *c, struct pick *out, int max, char *why,
                 size_t whylen);
/* 1 if the stopped thread's stack from rsp to end holds a signal frame (restorer: glibc's
 * signal restorer in the target), 0 if not, -1 if it cannot be scanned whole (unsafe too). */
int pick_in_signal_handler(pid_t pid, uint64_t rsp, uint64_t end, uint64_t restorer);

#endif
