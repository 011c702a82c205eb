/*
 * watch.h - who traces and who watches (docs/command.md): the ptrace work is done by a
 * tracer, a child of the command in a session of its own that blocks every catchable signal,
 * so the command's death or stop detaches and holds nothing; the command is its client. While
 * a thread is held the client undoes the tracer's stop and the tracer the client's (SIGCONT);
 * if the tracer dies, the client gives the thread back from the page. The command's thread,
 * the tracer's two.
 */
#ifndef MEMTRIM_CLI_WATCH_H
#define MEMTRIM_CLI_WATCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Runs fn(arg, res) in the tracer, a child in a session of its own that blocks every
 * catchable signal and outlives the caller, and waits for its len bytes of res as its client
 * (its stop undone, a thread it held given back if it dies). 0 with res filled; -1 with err
 * set (it could not start, or died first). */
int watch_tracer(void (*fn)(void *arg, void *res), void *arg, void *res, size_t len, char *err,
                 size_t errlen);
/* Control cmd-first-call-window only (the caller traces): starts the old watchdog once. */
void watch_start(void);
/* 1: a thread is held from now on (catchable signals blocked); 0: released (unblocked). */
void watch_hold(int held);
/* The thread held and, once it runs the page's code, the page: if the tool dies meanwhile,
 * the watchdog seizes it and gives it back from a ptrace stop as the tool would have (its
 * registers and mask from the page's TR_KREGS and TR_ORIG_MASK), so that no self-restore
 * happens; then it exits. */
void watch_target(pid_t pid, pid_t tid, uint64_t page);

#endif
