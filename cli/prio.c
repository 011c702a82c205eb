/*
 * prio.c - memtrim's glibc thread raised for its call (prio.h, docs/command.md): which thread
 * may be raised (its tid comes from our page, which the target can write: it must be a thread
 * of the target born during this call, at the nice it inherited), the raise itself
 * (sched_setattr: the nice and SCHED_RESET_ON_FORK, the policy kept) and its undoing. The
 * tracer's main thread; no state but the caller's struct prio (and prio_our_tid's buffer of
 * tids, that thread's alone), no locks.
 */
#include "prio.h"

#include "../common/control.h"
#include "target.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SCHED_OTHER_ 0
#define SCHED_BATCH_ 3
#define RESET_ON_FORK 0x01ull /* SCHED_FLAG_RESET_ON_FORK */

/* The kernel's struct sched_attr, its first version (48 bytes: SCHED_ATTR_SIZE_VER0). */
struct sched_attr_v0 {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
};

int prio_target_nice(int taken_nice, int levels)
{
    return taken_nice - levels < -20 ? -20 : taken_nice - levels;
}

int prio_parse_stat(const char *buf, int *nice, unsigned long long *start, unsigned *policy)
{
    const char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    int field = 2, got = 0; /* p: the end of field 2, the name */
    for (p++; *p && got < 3;) {
        while (*p == ' ')
            p++;
        if (!*p || *p == '\n')
            break;
        field++;
        char *end;
        errno = 0;
        if (field == 19) {
            long v = strtol(p, &end, 10);
            if (end == p || errno || v < -20 || v > 19)
                return -1;
            *nice = (int)v;
            got++;
        } else if (field == 22 || field == 41) {
            unsigned long long v = strtoull(p, &end, 10);
            if (end == p || errno || *p == '-' || (field == 41 && v > 0xffff))
                return -1;
            if (field == 22)
                *start = v;
            else
                *policy = (unsigned)v;
            got++;
        }
        while (*p && *p != ' ' && *p != '\n')
            p++;
    }
    return got == 3 ? 0 : -1;
}

pid_t prio_parse_nspid(const char *status)
{
    const char *p = !strncmp(status, "NSpid:", 6) ? status : strstr(status, "\nNSpid:");
    if (!p)
        return 0;
    long last = -1;
    for (p = strchr(p, ':') + 1; *p && *p != '\n';) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '\n')
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v <= 0 || v > 0x3fffffff)
            return -1;
        last = v;
        p = end;
    }
    return last > 0 ? (pid_t)last : -1;
}

pid_t prio_our_tid(pid_t pid, pid_t tid)
{
    static pid_t tids[4096];
    if (target_same_ns(pid, "pid"))
        return tid;
    int n = target_threads(pid, tids, 4096);
    for (int i = n - 1; i >= 0; i--) { /* the newest last in /proc: ours among them */
        char path[64], buf[2048];
        snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pid, (int)tids[i]);
        if (target_read_file(path, buf, sizeof buf) > 0 && prio_parse_nspid(buf) == tid)
            return tids[i];
    }
    return 0;
}

unsigned long long prio_ticks_now(void)
{
    struct timespec ts;
    long hz = sysconf(_SC_CLK_TCK);
    clock_gettime(CLOCK_BOOTTIME, &ts); /* the clock of /proc's start times */
    if (hz <= 0)
        hz = 100;
    return (unsigned long long)ts.tv_sec * (unsigned long long)hz +
           (unsigned long long)ts.tv_nsec / (1000000000ull / (unsigned long long)hz);
}

static int thread_stat(pid_t pid, pid_t tid, int *nice, unsigned long long *start, unsigned *policy)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    if (target_read_file(path, buf, sizeof buf) <= 0)
        return -1;
    return prio_parse_stat(buf, nice, start, policy);
}

static int set_nice(pid_t tid, unsigned policy, int nice)
{
    struct sched_attr_v0 a = {.size = sizeof a, .policy = policy, .flags = RESET_ON_FORK,
                              .nice = nice};
    return (int)syscall(SYS_sched_setattr, tid, &a, 0);
}

int prio_raise(struct prio *p, pid_t pid, pid_t taken, pid_t tid, unsigned long long since,
               int levels)
{
    int nice = 0;
    unsigned long long start = 0;
    unsigned policy = 0;
    p->nice = p->taken_nice;
    p->raised = 0;
    if (tid == pid || tid == taken) {
        snprintf(p->why, sizeof p->why, "thread %d is the process's own: not memtrim's", (int)tid);
        return 0;
    }
    if (tid <= 0 || thread_stat(pid, tid, &nice, &start, &policy) != 0) {
        snprintf(p->why, sizeof p->why, "its thread %d is not one of the process's now (it "
                 "ended first)", (int)tid);
        return 0;
    }
    p->nice = nice;
    if (start < since) { /* the page said so: the target can write it */
        snprintf(p->why, sizeof p->why, "thread %d was born before the call: not memtrim's",
                 (int)tid);
        return 0;
    }
    if (nice != p->taken_nice) {
        snprintf(p->why, sizeof p->why, "thread %d runs at nice %d, not the %d it would have "
                 "inherited: not memtrim's, or changed", (int)tid, nice, p->taken_nice);
        return 0;
    }
    if (policy != SCHED_OTHER_ && policy != SCHED_BATCH_) {
        snprintf(p->why, sizeof p->why, "its scheduling policy (%u, the taken thread's) is not "
                 "a fair one: left as it is", policy);
        return 0;
    }
    int to = prio_target_nice(nice, levels);
    if (to >= nice) {
        snprintf(p->why, sizeof p->why, "the taken thread is at nice %d already", nice);
        return 0;
    }
    /* control cmd-raise-eperm-unseen: the kernel's refusal taken for a raise */
    if (set_nice(tid, policy, to) != 0 && !mt_control("cmd-raise-eperm-unseen")) {
        int e = errno;
        snprintf(p->why, sizeof p->why, "sched_setattr: %s%s", strerror(e),
                 e == EPERM ? " (raising a thread needs CAP_SYS_NICE in the initial user "
                              "namespace)" : "");
        return 0;
    }
    p->nice = to;
    p->raised = 1;
    p->tid = tid;
    p->start = start;
    p->why[0] = 0;
    return 1;
}

void prio_lower(struct prio *p, pid_t pid)
{
    int nice;
    unsigned long long start;
    unsigned policy;
    if (!p->raised || p->lowered)
        return;
    if (thread_stat(pid, p->tid, &nice, &start, &policy) != 0 || start != p->start ||
        nice != p->nice)
        return; /* ended (its raise with it), or no longer as memtrim set it */
    p->lowered = set_nice(p->tid, policy, p->taken_nice) == 0;
}
