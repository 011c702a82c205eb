/*
 * prio.h - the scheduling weight of memtrim's glibc thread in a target, for its call only
 * (docs/command.md, "The call's weight"). malloc_trim holds each arena's lock while it trims
 * it; a thread that holds it at the weight it inherited shares the CPUs with the threads that
 * wait for it, and they wait longer. So the tracer raises that one thread (never a thread of
 * the target's own) --raise nice levels (PRIO_RAISE) above the taken thread's (to -20 at most),
 * its policy kept, with SCHED_RESET_ON_FORK; it lowers it back if the thread outlives the
 * tracer's wait. Needs CAP_SYS_NICE in the initial user namespace: refused, the call runs
 * unraised and the report says why. The tracer's main thread.
 */
#ifndef MEMTRIM_CLI_PRIO_H
#define MEMTRIM_CLI_PRIO_H

#include <stddef.h>
#include <sys/types.h>

#define PRIO_RAISE 10 /* the tests' --raise; the command's default is 0 (docs/benchmarks.md) */

struct prio {
    int taken_nice;           /* the taken thread's, read in its stop (the base) */
    int nice;                 /* what the call thread runs at: raised, or as it inherited */
    int raised;               /* 1: set by memtrim */
    int lowered;              /* 1: it outlived the wait and was set back */
    pid_t tid;                /* the thread raised */
    unsigned long long start; /* its start time when raised: the same thread when lowered */
    char why[200];            /* not raised: why */
};

/* The nice a call thread gets above a taken thread at taken_nice: levels up, never past -20. */
int prio_target_nice(int taken_nice, int levels);
/* A /proc/PID/task/TID/stat text's nice (field 19), start time (22) and scheduling policy
 * (41), after the name's last ')': 0, or -1. */
int prio_parse_stat(const char *buf, int *nice, unsigned long long *start, unsigned *policy);
/* The last field of a /proc/PID/task/TID/status text's NSpid line: the thread's id in its own
 * (innermost) pid namespace; 0 without the line, -1 if malformed. */
pid_t prio_parse_nspid(const char *status);
/* tid, as the target's own pid namespace names it (what its gettid returned), as this process
 * names it: itself when both share one pid namespace, else the thread of pid whose NSpid ends
 * with it. 0 if none. */
pid_t prio_our_tid(pid_t pid, pid_t tid);
/* The start time (in /proc's clock ticks) of a thread created from now on: its lower bound. */
unsigned long long prio_ticks_now(void);
/* Raises thread tid of process pid, which claims to be memtrim's glibc thread, if it is: a
 * thread of pid other than pid and taken, started at or after since (prio_ticks_now before
 * the seize), at the nice it inherited (p->taken_nice), SCHED_OTHER or SCHED_BATCH, by levels
 * (1-20). 1 raised, 0 not (p->why), p->nice either way. */
int prio_raise(struct prio *p, pid_t pid, pid_t taken, pid_t tid, unsigned long long since,
               int levels);
/* The raised thread, if still alive (the same start time) at the nice memtrim set: set back
 * to the taken thread's nice. */
void prio_lower(struct prio *p, pid_t pid);

#endif
