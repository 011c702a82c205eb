/*
 * watch.h - the tool's watchdog (docs/command.md): while the tool holds a target's thread
 * in a ptrace stop or running the page's code, a stop of the tool (SIGSTOP, or SIGTSTP that
 * a terminal sends) must not hold the target. Catchable signals are blocked over that window
 * (a SIGTSTP stops the tool once it is over); SIGSTOP is undone by a child of the tool (in
 * its own process group) that sends SIGCONT: the call finishes. If the tool dies, that child
 * gives the thread back itself. The tool's one thread and that child.
 */
#ifndef MEMTRIM_CLI_WATCH_H
#define MEMTRIM_CLI_WATCH_H

#include <stdint.h>
#include <sys/types.h>

/* Starts the watchdog once (a failure leaves the tool without it: still correct, only a
 * SIGSTOP of the tool then holds the thread while the tool is stopped). */
void watch_start(void);
/* 1: a thread is held from now on (catchable signals blocked); 0: released (unblocked). */
void watch_hold(int held);
/* The thread held and, once it runs the page's code, the page: if the tool dies meanwhile,
 * the watchdog seizes it and gives it back from a ptrace stop as the tool would have (its
 * registers and mask from the page's TR_KREGS and TR_ORIG_MASK), so that no self-restore
 * happens; then it exits. */
void watch_target(pid_t pid, pid_t tid, uint64_t page);

#endif
