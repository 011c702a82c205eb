/*
 * watch.c - the tool's watchdog (watch.h): a forked child in its own process group, which a
 * terminal's or a job's stop does not reach, polls the tool's state every 0.5 ms while the
 * shared word says a thread is held, and sends SIGCONT to a stopped tool; it dies with the
 * tool (PR_SET_PDEATHSIG) and holds none of its descriptors. The word is in a shared
 * anonymous mapping; the tool writes it, the child reads it (atomics).
 */
#include "watch.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct shared {
    atomic_int held;    /* the tool: 1 while a thread is held */
    atomic_int stopped; /* the watchdog: the tool was stopped while it held one */
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

static void watchdog(pid_t tool)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != tool)
        _exit(0);
    for (int fd = 0; fd < 3; fd++)
        close(fd);
    syscall(SYS_close_range, 3, ~0u, 0);
    for (;;) {
        if (!atomic_load(&sh->held)) {
            struct timespec ts = {1, 0}; /* a second at a time: the tool's death ends us too */
            syscall(SYS_futex, &sh->held, FUTEX_WAIT, 0, &ts, NULL, 0);
            continue;
        }
        if (state_of(tool) == 'T') {
            atomic_store(&sh->stopped, 1);
            kill(tool, SIGCONT);
        }
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

void watch_hold(int held)
{
    if (held) {
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, &saved_mask);
    }
    if (sh) {
        atomic_store(&sh->held, held);
        syscall(SYS_futex, &sh->held, FUTEX_WAKE, 1, NULL, NULL, 0);
    }
    if (!held)
        sigprocmask(SIG_SETMASK, &saved_mask, NULL);
}

void watch_honour_stop(void)
{
    if (sh && atomic_exchange(&sh->stopped, 0))
        kill(getpid(), SIGSTOP);
}
