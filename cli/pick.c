/*
 * pick.c - the threads a call may be taken on (pick.h): /proc's view of each thread's system
 * call and scheduling policy (a fair one only: fair_policy), a socket's receive timeout (read
 * from a copy of its descriptor: pidfd_getfd, closed at once), and the signal-frame scan of a
 * stopped thread's stack. Reads only; the tool's one thread.
 */
#include "pick.h"

#include "../common/control.h"
#include "mem.h"
#include "prio.h"
#include "target.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_THREADS 4096

/* Whether the words at w are the top of a kernel rt_sigframe, whatever its restorer (pretcode,
 * which a raw rt_sigaction may set to any code): the kernel's uc_flags (UC_FP_XSTATE,
 * UC_SIGCONTEXT_SS, UC_STRICT_RESTORE_SS at most), user code segment 0x33 in the saved
 * context, and the fpstate pointer within 64 KiB above the frame (the kernel puts the xsave
 * area there, on the thread's stack or its alternate one alike). Offsets in words: uc_flags
 * 1; the sigcontext from 6; cs the first u16 of word 24, fpstate word 29. */
static int is_sigframe(const uint64_t *w, uint64_t at)
{
    uint64_t flags = w[1], cs = w[24] & 0xffff, fpstate = w[29];
    return w[0] && (flags & ~(uint64_t)7) == 0 && cs == 0x33 && fpstate > at &&
           fpstate - at < (64u << 10);
}

/* Is the thread inside a signal handler (which may have interrupted malloc)? 1: yes; -1: the
 * stack could not be read, or it is deeper than the 128 KiB scanned (unsafe too). */
int pick_in_signal_handler(pid_t pid, uint64_t rsp, uint64_t end)
{
    static uint64_t buf[16384 + 30];
    uint64_t at = rsp & ~(uint64_t)7;
    if (end < at || end - at > 8 * 16384)
        return -1;
    size_t len = (size_t)(end - at);
    memset(buf, 0, sizeof buf);
    if (mem_read(pid, at, buf, len) != 0)
        return -1;
    for (size_t i = 0; i + 30 <= len / 8; i++)
        if (is_sigframe(buf + i, at + 8 * i))
            return 1;
    return 0;
}

/* A socket's receive timeout (SO_RCVTIMEO) in the target: 1 set, 0 none or not a socket, -1
 * unknown (its descriptor cannot be copied: refused too). Only the copy is touched. */
static int socket_timeout(pid_t pid, int fd)
{
    char path[64], link[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0)
        return -1;
    link[n] = 0;
    if (strncmp(link, "socket:", 7) != 0)
        return 0;
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int copy = pfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pfd, fd, 0) : -1;
    struct timeval tv = {0, 0};
    socklen_t len = sizeof tv;
    int r = copy >= 0 && getsockopt(copy, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) == 0 ?
            (tv.tv_sec || tv.tv_usec) : -1;
    if (copy >= 0)
        close(copy);
    if (pfd >= 0)
        close(pfd);
    return r;
}

/* Whether a thread runs under a fair scheduling policy (SCHED_OTHER 0 or SCHED_BATCH 3). The
 * thread the taken one clones inherits its policy, and the glibc thread that makes the call
 * the raw thread's: taken in a SCHED_FIFO or SCHED_RR thread, memtrim's call would run in
 * real time, holding a CPU from every fair thread of the process for its whole call; in a
 * SCHED_IDLE one it would hold arena locks at almost no CPU while the process's threads wait
 * on them; SCHED_DEADLINE's clone fails. 1 fair, 0 not or unreadable (passed over). */
static int fair_policy(pid_t pid, pid_t tid, int *nice)
{
    char path[96], buf[1024];
    unsigned long long start;
    unsigned policy;
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    *nice = 0;
    if (target_read_file(path, buf, sizeof buf) <= 0 ||
        prio_parse_stat(buf, nice, &start, &policy) != 0)
        return mt_control("cmd-unfair-policy-taken");
    return policy == 0 || policy == 3 || mt_control("cmd-unfair-policy-taken");
}

static int on_socket(long nr)
{
    return nr == SYS_read || nr == SYS_readv || nr == SYS_recvfrom || nr == SYS_recvmsg ||
           nr == SYS_recvmmsg || nr == SYS_accept || nr == SYS_accept4;
}

/* The safe threads now, the main thread last (it is the host's own loop more often). */
int pick_threads(pid_t pid, struct pick *out, int max, char *why, size_t whylen)
{
    static pid_t tids[MAX_THREADS];
    why[0] = 0;
    /* a thread run with the x86 user shadow stack (CET) is never taken (target.h): glibc turns
     * it on for the whole process, read once here, before the states (a read between a
     * thread's state and its seize is time for it to leave its call: test_logger_thread);
     * take_thread reads the taken thread's own in its stop */
    if (target_thread_shstk(pid, pid)) {
        snprintf(why, whylen, "%d runs with a shadow stack (CET): never taken", (int)pid);
        return 0;
    }
    int n = target_threads(pid, tids, MAX_THREADS), k = 0;
    size_t w = 0;
    for (int i = n - 1; i >= 0 && k < max; i--) {
        uint64_t args[7], start, end;
        long nr = target_thread_syscall(pid, tids[i], args);
        int timed = nr >= 0 && on_socket(nr) && socket_timeout(pid, (int)args[0]) != 0;
        int nice = 0, unfair = nr >= 0 && !timed && target_syscall_safe(nr, args) &&
                               !fair_policy(pid, tids[i], &nice);
        if (!timed && !unfair && nr >= 0 && target_syscall_safe(nr, args) &&
            target_mapping(pid, args[6], &start, &end) == 0) {
            out[k].tid = tids[i];
            out[k].nice = nice;
            out[k].sp = args[6];
            out[k].stack_end = end;
            out[k++].nr = nr;
        } else if (w + 64 < whylen) {
            const char *name = nr >= 0 ? target_syscall_name(nr) : NULL;
            char num[40];
            snprintf(num, sizeof num, "syscall %ld", nr);
            w += (size_t)snprintf(why + w, whylen - w, "%s%d %s%s", w ? ", " : "", (int)tids[i],
                                  nr == -2 ? "running" : nr == -1 ? "in user code" : name ? name : num,
                                  timed ? " with a receive timeout" :
                                  unfair ? " under a real-time or idle scheduling policy" : "");
        }
    }
    /* The threads at the main thread's nice, on its CPUs and in its cgroups first, the others
     * after them, each in that order: memtrim's glibc thread inherits the taken thread's nice,
     * affinity and cgroups. At a nice above the process's own (a background thread's 19), or
     * in a thread's CPU-throttled cgroup, it holds arena locks at a sliver of a CPU while the
     * process's threads wait on them; below it, it takes a CPU from them as --raise does;
     * pinned to a thread's own CPUs (an isolated core), it takes them from that thread
     * (docs/command-rules.md). */
    int main_nice;
    fair_policy(pid, pid, &main_nice); /* 0 when unreadable */
    static cpu_set_t main_cpus, cpus;
    static char main_cg[4096], cg[4096];
    char path[96];
    int main_known = sched_getaffinity(pid, sizeof main_cpus, &main_cpus) == 0;
    snprintf(path, sizeof path, "/proc/%d/task/%d/cgroup", (int)pid, (int)pid);
    int main_cg_known = target_read_file(path, main_cg, sizeof main_cg) > 0;
    static struct pick later[64];
    int first = 0, m = 0;
    for (int i = 0; i < k; i++) {
        int same_cpus = !main_known || (sched_getaffinity(out[i].tid, sizeof cpus, &cpus) == 0 &&
                                         CPU_EQUAL(&cpus, &main_cpus));
        snprintf(path, sizeof path, "/proc/%d/task/%d/cgroup", (int)pid, (int)out[i].tid);
        int same_cg = !main_cg_known || (target_read_file(path, cg, sizeof cg) > 0 &&
                                         !strcmp(cg, main_cg));
        if ((out[i].nice == main_nice && same_cpus && same_cg) ||
            mt_control("cmd-nice-unordered"))
            out[first++] = out[i];
        else if (m < (int)(sizeof later / sizeof later[0]))
            later[m++] = out[i];
    }
    for (int i = 0; i < m; i++)
        out[first++] = later[i];
    return first;
}
