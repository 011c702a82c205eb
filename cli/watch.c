/*
 * watch.c - who traces, and who watches (watch.h, docs/command.md). The tracer: a child of
 * the command in a session of its own, every catchable signal blocked, none of the command's
 * descriptors but the pipe its result goes back on; it does the ptrace work and outlives the
 * command, so the command's death detaches nothing. The command is its client: it waits for
 * the result, sends SIGCONT to a stopped tracer while it holds a thread (polled every 0.5 ms),
 * and gives back a thread the tracer held in the page's code if the tracer dies; a thread of
 * the tracer's (its only other one) sends SIGCONT to a stopped client while a thread is held.
 * The old layout (control cmd-first-call-window): the command traces and a forked watchdog
 * in its own process group plays the client's part. The words are in a shared anonymous
 * mapping; the tracer writes them, the others read them (atomics).
 */
#include "watch.h"

#include "mem.h"
#include "tramp.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
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
    atomic_int held; /* the tracer: 1 while a thread is held */
    atomic_int done; /* the tracer: 1 once its result is written */
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
    if (ptrace(PTRACE_GETREGS, tid, 0, &now) == 0 && page &&
        mem_read(pid, page + TR_KREGS, &regs, sizeof regs) == 0) {
        if (now.rip >= page && now.rip < page + TR_CODE_MAX &&
            mem_read(pid, page + TR_ORIG_MASK, &mask, 8) == 0) {
            ptrace(PTRACE_SETREGS, tid, 0, &regs);
            ptrace(PTRACE_SETSIGMASK, tid, (void *)8, &mask);
        } else if (now.orig_rax == regs.orig_rax && (int64_t)now.rax == -EINTR) {
            /* already back in its wait (it restored itself): our interrupt's EINTR becomes
             * the restart the kernel gives a wait no handler interrupted, as inject.c does */
            now.rax = (uint64_t)-ERESTARTNOHAND;
            ptrace(PTRACE_SETREGS, tid, 0, &now);
        }
    }
    ptrace(PTRACE_DETACH, tid, 0, 0);
    mem_write(pid, page + TR_T_DONE, &one, 8);
}

static void futex_wait_held(int seen, long ns)
{
    struct timespec ts = {0, ns};
    syscall(SYS_futex, &sh->held, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static void wake_all(void)
{
    syscall(SYS_futex, &sh->held, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void pause_ns(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* The old layout's watchdog (control cmd-first-call-window): the tool traces; this child of
 * its undoes its stop and gives back the thread it held in the page's code if it dies. */
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
            futex_wait_held(0, 100000000); /* the tool's death is seen within 0.1 s */
            continue;
        }
        if (state_of(tool) == 'T')
            kill(tool, SIGCONT); /* not re-sent later: a SIGCONT of the operator's may come first */
        pause_ns(500000);
    }
}

static int share(void)
{
    if (sh)
        return 0;
    void *m = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    sh = m;
    return 0;
}

void watch_start(void)
{
    static int started;
    if (started || share() != 0)
        return;
    started = 1;
    pid_t tool = getpid();
    fflush(NULL);
    pid_t child = fork();
    if (child == 0)
        watchdog(tool);
}

/* The tracer's other thread: a stopped client is sent SIGCONT while a thread is held (the
 * client gives the thread back if the tracer dies: it must not be left stopped meanwhile). */
static void *watch_client(void *arg)
{
    pid_t client = (pid_t)(intptr_t)arg;
    while (!atomic_load(&sh->done) && getppid() == client) {
        if (!atomic_load(&sh->held)) {
            futex_wait_held(0, 100000000);
            continue;
        }
        if (state_of(client) == 'T')
            kill(client, SIGCONT);
        pause_ns(500000);
    }
    return NULL;
}

static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* the client is gone: the result goes nowhere */
        p += n;
        len -= (size_t)n;
    }
}

static void tracer(int out, void (*fn)(void *, void *), void *arg, void *res, size_t len,
                   pid_t client)
{
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL); /* SIGKILL and SIGSTOP alone reach it */
    setpgid(0, 0); /* no terminal's or job's signal either (a session of its own would be an
                      autogroup of its own: the scheduler starved it beside a busy target) */
    prctl(PR_SET_NAME, "memtrim-tracer");
    if (out < 3) { /* a command started with a standard stream closed got it as the pipe */
        int high = fcntl(out, F_DUPFD_CLOEXEC, 3);
        if (high < 0)
            _exit(0);
        out = high;
    }
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3; fd++)
        if (null >= 0 && null != fd)
            dup2(null, fd);
    if (out > 3)
        syscall(SYS_close_range, 3, (unsigned)out - 1, 0);
    syscall(SYS_close_range, (unsigned)out + 1, ~0u, 0);
    pthread_t th;
    int watching = getppid() == client &&
                   pthread_create(&th, NULL, watch_client, (void *)(intptr_t)client) == 0;
    fn(arg, res);
    write_all(out, res, len);
    atomic_store(&sh->done, 1);
    wake_all();
    if (watching)
        pthread_join(th, NULL);
    _exit(0);
}

int watch_tracer(void (*fn)(void *arg, void *res), void *arg, void *res, size_t len,
                 char *err, size_t errlen)
{
    int p[2];
    if (share() != 0 || pipe2(p, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot start memtrim's tracer: %s", strerror(errno));
        return -1;
    }
    atomic_store(&sh->held, 0);
    atomic_store(&sh->done, 0);
    atomic_store(&sh->page, 0);
    pid_t client = getpid();
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        close(p[0]);
        tracer(p[1], fn, arg, res, len, client);
    }
    close(p[1]);
    if (child < 0) {
        snprintf(err, errlen, "cannot start memtrim's tracer: %s", strerror(errno));
        close(p[0]);
        return -1;
    }
    /* the client: the tracer's stop undone while it holds a thread, its death covered */
    sigset_t all, before;
    sigfillset(&all);
    int blocked = 0, status = 0, dead = 0;
    const char *left = "";
    while (!atomic_load(&sh->done)) {
        pid_t w = waitpid(child, &status, WNOHANG);
        if (w == child) {
            dead = 1;
            if (!atomic_load(&sh->done) && atomic_load(&sh->held)) {
                uint64_t page = atomic_load(&sh->page);
                if (page)
                    rescue(atomic_load(&sh->pid), atomic_load(&sh->tid), page);
                left = page ? ": the thread it held was given back"
                            : ": the kernel detached the thread it held";
            }
            break;
        }
        int held = atomic_load(&sh->held);
        if (held != blocked) { /* a terminal's stop acts once the thread is released */
            sigprocmask(held ? SIG_BLOCK : SIG_SETMASK, held ? &all : &before,
                        held ? &before : NULL);
            blocked = held;
        }
        if (state_of(child) == 'T')
            kill(child, SIGCONT); /* nobody else has a reason to stop it */
        if (held)
            pause_ns(500000);
        else
            futex_wait_held(0, 5000000);
    }
    if (blocked)
        sigprocmask(SIG_SETMASK, &before, NULL);
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(p[0], (char *)res + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(p[0]);
    if (!dead)
        while (waitpid(child, &status, 0) < 0 && errno == EINTR)
            ;
    if (got == len)
        return 0;
    snprintf(err, errlen, "memtrim's tracer (process %d) ended before its result (%s %d)%s",
             (int)child, WIFSIGNALED(status) ? "signal" : "exit",
             WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), left);
    return -1;
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
        wake_all();
    }
    if (!held)
        sigprocmask(SIG_SETMASK, &saved_mask, NULL);
}
