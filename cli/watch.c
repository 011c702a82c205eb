/*
 * watch.c - the tool's watchdog (watch.h): a forked child in its own process group, which a
 * terminal's or a job's stop does not reach, polls the tool's state every 0.5 ms while the
 * shared word says a thread is held, and sends SIGCONT to a stopped tool; it dies with the
 * tool (seen within 0.1 s, 0.5 ms while a thread is held) after giving back a thread the
 * tool held in the page's code, and holds none of its descriptors. The word is in a shared
 * anonymous mapping; the tool writes it, the child reads it (atomics).
 */
#include "watch.h"

#include "mem.h"
#include "tramp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct shared {
    atomic_int held; /* the tool: 1 while a thread is held */
    atomic_int pid, tid;
    _Atomic uint64_t page; /* the page the held thread runs, 0 before the jump */
};

static struct shared *sh;
static sigset_t saved_mask;

/* The tool's state letter (/proc/PID/stat's third field), 0 if unreadable. */
static char state_of(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : 0;
}

/* The tool died holding tid (the kernel has detached it): if it is in the page's code, give
 * it back from a ptrace stop, as inject.c's give_back does. */
static void rescue(pid_t pid, pid_t tid, uint64_t page)
{
    struct user_regs_struct now, regs;
    uint64_t mask, one = 1;
    int status;
    if (ptrace(PTRACE_SEIZE, tid, 0, 0) != 0 || ptrace(PTRACE_INTERRUPT, tid, 0, 0) != 0)
        return;
    for (int i = 0; i < 100000; i++) {
        pid_t r = waitpid(tid, &status, __WALL | WNOHANG);
        if (r == tid && WIFSTOPPED(status) && status >> 16 == PTRACE_EVENT_STOP)
            break;
        if (r == tid && WIFSTOPPED(status)) { /* a signal on its way: delivered */
            ptrace(PTRACE_CONT, tid, 0, (void *)(long)WSTOPSIG(status));
            continue;
        }
        if (r == tid || (r < 0 && errno != EINTR))
            return;
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    if (ptrace(PTRACE_GETREGS, tid, 0, &now) == 0 && page && now.rip >= page &&
        now.rip < page + TR_CODE_MAX && mem_read(pid, page + TR_KREGS, &regs, sizeof regs) == 0 &&
        mem_read(pid, page + TR_ORIG_MASK, &mask, 8) == 0) {
        ptrace(PTRACE_SETREGS, tid, 0, &regs);
        ptrace(PTRACE_SETSIGMASK, tid, (void *)8, &mask);
    }
    ptrace(PTRACE_DETACH, tid, 0, 0);
    mem_write(pid, page + TR_T_DONE, &one, 8);
}

static void watchdog(pid_t tool)
{
    setpgid(0, 0);
    if (getppid() != tool)
        _exit(0);
    for (int fd = 0; fd < 3; fd++)
        close(fd);
    syscall(SYS_close_range, 3, ~0u, 0);
    for (;;) {
        if (getppid() != tool) { /* the tool is gone: its thread, if held, given back */
            if (atomic_load(&sh->held) && atomic_load(&sh->page))
                rescue(atomic_load(&sh->pid), atomic_load(&sh->tid), atomic_load(&sh->page));
            _exit(0);
        }
        if (!atomic_load(&sh->held)) {
            struct timespec ts = {0, 100000000}; /* the tool's death is seen within 0.1 s */
            syscall(SYS_futex, &sh->held, FUTEX_WAIT, 0, &ts, NULL, 0);
            continue;
        }
        if (state_of(tool) == 'T')
            kill(tool, SIGCONT); /* not re-sent later: a SIGCONT of the operator's may come first */
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
    }
}

void watch_start(void)
{
    if (sh)
        return;
    void *m = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return;
    sh = m;
    pid_t tool = getpid();
    fflush(NULL);
    pid_t child = fork();
    if (child == 0)
        watchdog(tool);
    if (child < 0) {
        munmap(m, sizeof *sh);
        sh = NULL;
    }
}

void watch_target(pid_t pid, pid_t tid, uint64_t page)
{
    if (!sh)
        return;
    atomic_store(&sh->pid, pid);
    atomic_store(&sh->tid, tid);
    atomic_store(&sh->page, page);
}

void watch_hold(int held)
{
    if (held) {
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, &saved_mask);
    }
    if (sh) {
        if (!held)
            atomic_store(&sh->page, 0);
        atomic_store(&sh->held, held);
        syscall(SYS_futex, &sh->held, FUTEX_WAKE, 1, NULL, NULL, 0);
    }
    if (!held)
        sigprocmask(SIG_SETMASK, &saved_mask, NULL);
}
