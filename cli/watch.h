/*
 * watch.h - the tool's watchdog (docs/command.md): while the tool holds a target's thread
 * in a ptrace stop or running the page's code, a stop of the tool (SIGSTOP, or SIGTSTP that
 * a terminal sends) must not hold the target. Catchable signals are blocked over that window;
 * SIGSTOP is undone by a child of the tool (in its own process group) that sends SIGCONT, and
 * the stop is honoured once the thread is released. The tool's one thread and that child.
 */
#ifndef MEMTRIM_CLI_WATCH_H
#define MEMTRIM_CLI_WATCH_H

/* Starts the watchdog once (a failure leaves the tool without it: still correct, only a
 * SIGSTOP of the tool then holds the thread while the tool is stopped). */
void watch_start(void);
/* 1: a thread is held from now on (catchable signals blocked); 0: released (unblocked). */
void watch_hold(int held);
/* A stop that came while a thread was held, honoured now that none is. */
void watch_honour_stop(void);

#endif
