/*
 * inject.c - one call inside a running process through ptrace, on a thread of memtrim's own
 * (docs/command.md): nobody may ever wait on what memtrim runs in the target.
 *   1. a thread blocked in a system call that the kernel restarts exactly (target_syscall_safe,
 *      pick.c) is seized alone (PTRACE_SEIZE, no PTRACE_O_EXITKILL) and interrupted; its
 *      registers must confirm it is still there;
 *   2. our page is mapped once (one mmap on that thread's own syscall instruction) and filled:
 *      the call, the thread's registers and mask (for the self-restore it falls back to), a
 *      thread block for the raw thread (thread.c);
 *   3. the taken thread runs the page's code with every signal blocked: raw system calls only,
 *      it clones memtrim's raw thread and waits; the tool interrupts it again, puts back its
 *      registers and mask at that ptrace stop and detaches: the kernel restarts its system call
 *      itself, and delivers what came meanwhile as it would have (tramp.S);
 *   4. the raw thread (ABI state reset, guard pages) starts a glibc thread with the target's own
 *      pthread_create, which makes the call, waits for locks like any thread, and ends.
 * The tracer polls the page under deadlines. It runs in memtrim's tracer, a child of the
 * command that outlives it (watch.c; inject_run is the command's side), on the tracer's main
 * thread; one tool per target at a time (lock.c).
 */
#include "inject.h"

#include "../common/control.h"
#include "lock.h"
#include "mem.h"
#include "pick.h"
#include "prio.h"
#include "thread.h"
#include "tramp.h"
#include "watch.h"

#include <cpuid.h>
#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern const unsigned char mt_tramp_start[], mt_tramp_end[];

#define NR_RESTART_SYSCALL 219
#define SIGSETXID 33 /* glibc's SIGRTMIN + 1, which its setxid sends every thread it started */
#define CLONE_RAW (0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x40000 | 0x80000 | 0x100000 | \
                   0x200000) /* VM FS FILES SIGHAND THREAD SYSVSEM SETTLS PARENT_SETTID
                                CHILD_CLEARTID */
#define T_WAIT_NS 250000000L /* how long the taken thread waits for the tool before it restores
                                itself (the tool is gone, or stopped) */

/* The system calls memtrim makes in a target (inject.h): map_page's mmap; tramp.S's
 * rt_sigprocmask, prctl naming the page, clone and ppoll on the taken thread, and its
 * self-restore's rt_sigpending, rt_sigaction (reading), sigaltstack (reading) and
 * rt_sigreturn; the raw thread's mprotect (guards) and exit; the
 * glibc thread's rt_sigprocmask (SIGSETXID) and gettid; and glibc's pthread_create and a
 * thread's start and exit (clone3, or clone on ENOSYS; rt_sigaction for its first thread's
 * handlers; rseq, set_robust_list; futex; madvise and munmap of nothing on a stack of ours,
 * but listed as glibc may). An
 * argument that is an address in the page is not known beforehand (bit clear in known). */
const struct inject_syscall inject_syscalls[] = {
    {"mmap(NULL, 1 MiB, PROT_READ|PROT_WRITE|PROT_EXEC, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0)",
     SYS_mmap, {0, TR_MAP_SIZE, 7, 0x22, (uint64_t)-1, 0}, 0x3f},
    {"rt_sigprocmask(SIG_SETMASK, set, NULL, 8)", SYS_rt_sigprocmask, {2, 0, 0, 8, 0, 0}, 0xd},
    {"prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, page, 1 MiB, name)", SYS_prctl,
     {0x53564d41, 0, 0, TR_MAP_SIZE, 0, 0}, 0xb},
    {"clone(CLONE_VM|CLONE_THREAD|..., stack, &tid, &tid, tls)", SYS_clone, {CLONE_RAW}, 0x1},
    {"ppoll(NULL, 0, &timeout, NULL, 8)", SYS_ppoll, {0, 0, 0, 0, 8, 0}, 0x1b},
    {"rt_sigreturn()", SYS_rt_sigreturn, {0}, 0},
    /* the self-restore's reads: each failed answer falls back (tramp.S: the old restore, the
     * signal passed over, the alternate stack left as it is) */
    {"rt_sigpending(set, 8)", SYS_rt_sigpending, {0, 8}, 0x2 | SECCOMP_CALL_FAILS_OK},
    {"rt_sigaction(sig, NULL, old, 8)", SYS_rt_sigaction, {0, 0, 0, 8},
     0xa | SECCOMP_CALL_FAILS_OK},
    {"sigaltstack(NULL, old)", SYS_sigaltstack, {0}, 0x1 | SECCOMP_CALL_FAILS_OK},
    {"mprotect(guard, 4096, PROT_NONE)", SYS_mprotect, {0, 4096, 0}, 0x6},
    {"exit(0)", SYS_exit, {0}, 0x1},
    {"rt_sigprocmask(SIG_UNBLOCK, {SIGSETXID}, NULL, 8)", SYS_rt_sigprocmask, {1, 0, 0, 8, 0, 0},
     0xd},
    {"gettid()", SYS_gettid, {0}, 0},
    {"clone3 (pthread_create; it falls back to clone)", SYS_clone3, {0}, SECCOMP_CALL_FAILS_OK},
    {"clone (pthread_create)", SYS_clone, {0}, 0},
    {"rt_sigaction (pthread_create's first thread)", SYS_rt_sigaction, {0}, 0},
    {"rt_sigprocmask (pthread_create)", SYS_rt_sigprocmask, {0}, 0},
    {"rseq (a glibc thread's start)", SYS_rseq, {0}, 0},
    {"set_robust_list (a glibc thread's start)", SYS_set_robust_list, {0}, 0},
    {"futex (glibc's locks)", SYS_futex, {0}, 0},
    {"madvise (a glibc thread's exit)", SYS_madvise, {0}, 0},
    {"munmap (a glibc thread's exit)", SYS_munmap, {0}, 0},
};
const size_t inject_syscalls_n = sizeof inject_syscalls / sizeof inject_syscalls[0];

int inject_left_seized;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Waits for tid's next stop; its status, or -1 at the deadline (errno ETIMEDOUT) / on an
 * error. The deadline is read before the last look: a tool that was itself late (stopped with
 * its watchdog, starved of CPU, under valgrind) sees a stop that came meanwhile instead of
 * failing on time it did not give the thread. */
static int wait_stop(pid_t tid, double deadline, int *status)
{
    for (;;) {
        int late = now_s() > deadline;
        pid_t r = waitpid(tid, status, __WALL | WNOHANG);
        if (r == tid)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
        if (late || (mt_control("cmd-map-deadline") && now_s() > deadline)) {
            errno = ETIMEDOUT;
            return -1;
        }
        pause_us(20);
    }
}

/* Waits for tid's interrupt (or group) stop, letting through what else stops it (a signal on
 * its way is delivered as it would have been). 0 in the stop; -2 not in time (still seized:
 * only this process's exit releases it); -3 gone; -1 other. */
static int wait_event_stop(pid_t tid, double deadline, char *err, size_t errlen, int *group)
{
    for (;;) {
        int status;
        *group = 0;
        if (wait_stop(tid, deadline, &status) != 0) {
            snprintf(err, errlen, "thread %d did not stop in time: it stays seized until memtrim "
                     "exits; nothing more is done", (int)tid);
            return -2;
        }
        if (!WIFSTOPPED(status)) {
            snprintf(err, errlen, "thread %d exited", (int)tid);
            return -3;
        }
        int sig = WSTOPSIG(status), event = status >> 16;
        if (event == PTRACE_EVENT_STOP) {
            *group = sig != SIGTRAP; /* a group stop: the process is being stopped */
            return 0;
        }
        if (ptrace(PTRACE_CONT, tid, 0, (void *)(long)sig) != 0) {
            snprintf(err, errlen, "ptrace(PTRACE_CONT, %d): %s", (int)tid, strerror(errno));
            return -1;
        }
    }
}

/* Seizes and interrupts tid; 0 once it is in its interrupt stop. Between the two, once it
 * is seized (its tid cannot be reused from then on), it must still be a thread of pid, and
 * pid the process read (its start time): otherwise it is released never interrupted (an
 * interrupt alone makes an epoll_wait or sigtimedwait return EINTR): -5 reused, -6 gone.
 * The thread has wait_s from the interrupt to stop: a tracer late between the seize and the
 * interrupt (stopped, starved) counts none of that against the thread (control
 * cmd-seize-deadline: the deadline ran from before the seize, and a tracer stopped there
 * found it past on its first look, leaving the thread seized for good). */
static int seize_stop(pid_t pid, pid_t tid, unsigned long long start, double wait_s,
                      char *err, size_t errlen)
{
    double t0 = now_s();
    if (ptrace(PTRACE_SEIZE, tid, 0, (void *)(long)PTRACE_O_TRACESYSGOOD) != 0) {
        int e = errno;
        snprintf(err, errlen, "ptrace(PTRACE_SEIZE, %d): %s", (int)tid, strerror(e));
        return e == EPERM ? -4 : -1;
    }
    char task[64];
    snprintf(task, sizeof task, "/proc/%d/task/%d", (int)pid, (int)tid);
    if (!mt_control("cmd-reused-interrupt") &&
        ((start && target_start_time(pid) != start) || access(task, F_OK) != 0)) {
        int reused = start && target_start_time(pid) != start;
        ptrace(PTRACE_DETACH, tid, 0, 0);
        return reused ? -5 : -6;
    }
    if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) != 0) {
        int e = errno;
        snprintf(err, errlen, "ptrace(PTRACE_INTERRUPT, %d): %s", (int)tid, strerror(e));
        if (ptrace(PTRACE_DETACH, tid, 0, 0) == 0 || errno == ESRCH)
            return -1; /* released, or gone */
        snprintf(err, errlen, "ptrace(PTRACE_INTERRUPT, %d): %s, and it cannot be released: it "
                 "stays seized until memtrim exits; nothing more is done", (int)tid, strerror(e));
        return -2;
    }
    double deadline = (mt_control("cmd-seize-deadline") ? t0 : now_s()) + wait_s;
    int group, r = wait_event_stop(tid, deadline, err, errlen, &group);
    if (r == 0 && group) {
        snprintf(err, errlen, "process is being stopped: not touched");
        ptrace(PTRACE_DETACH, tid, 0, 0);
        return -1;
    }
    return r;
}

/* Where the thread resumes, as the kernel's signal code would restart its system call: for
 * the self-restore (the tool gone), and for the registers the tool puts back (regs->rax). An
 * -EINTR (epoll_wait, sigtimedwait without a timeout: the pick takes no other) becomes
 * -ERESTARTNOHAND, what the kernel gives a wait it restarts unless a handler runs. */
static int resume_point(struct user_regs_struct *r, long nr, uint64_t *rip, uint64_t *rax)
{
    long ret = (long)r->rax;
    if ((long)r->orig_rax != nr)
        return -1;
    switch (-ret) {
    case EINTR:
        if (!mt_control("cmd-eintr-passthrough"))
            r->rax = (uint64_t)-ERESTARTNOHAND;
        else {
            *rip = r->rip;
            *rax = r->rax;
            return 0;
        }
        /* fall through */
    case ERESTARTSYS:
    case ERESTARTNOINTR:
    case ERESTARTNOHAND:
        *rip = r->rip - 2;
        *rax = r->orig_rax;
        return 0;
    case ERESTART_RESTARTBLOCK:
        *rip = r->rip - 2;
        *rax = NR_RESTART_SYSCALL;
        return 0;
    default:
        return -1; /* it has returned: not where it was judged */
    }
}

static uint64_t remote_syscall(pid_t tid, const struct user_regs_struct *orig,
                               const struct user_regs_struct *resume, const uint64_t call[7],
                               double deadline, int *sig, int *at_exit, char *err, size_t errlen)
{
    *sig = 0;
    *at_exit = 0;
    struct user_regs_struct m = *orig;
    m.rip = orig->rip - 2; /* the thread's own syscall instruction */
    m.rax = call[0];
    m.rdi = call[1];
    m.rsi = call[2];
    m.rdx = call[3];
    m.r10 = call[4];
    m.r8 = call[5];
    m.r9 = call[6];
    m.orig_rax = (uint64_t)-1;
    if (ptrace(PTRACE_SETREGS, tid, 0, &m) != 0)
        goto fail;
    /* the thread runs one system call under our control: no deadline, and no polling (a
     * blocking wait keeps the window the tool's death leaves to the scheduler's latency). The
     * old path (control cmd-map-deadline) polled within the attempt's second: a tool that was
     * late before it let the thread go (valgrind at load 20: 'could not map a page in thread
     * N: File exists', errno left from lock.c) gave up on a thread on its way to its stop and
     * left it, in no stop, with our mmap's registers and every signal blocked. */
    for (int step = 0; step < 2; step++) { /* syscall entry, then exit */
        int status;
        pid_t w = tid;
        if (ptrace(PTRACE_SYSCALL, tid, 0, 0) != 0)
            goto fail;
        if (mt_control("cmd-map-deadline")) {
            if (wait_stop(tid, deadline, &status) != 0)
                goto fail;
        } else {
            while ((w = waitpid(tid, &status, __WALL)) < 0 && errno == EINTR)
                ;
        }
        if (w == tid && !WIFSTOPPED(status)) {
            snprintf(err, errlen, "thread %d exited", (int)tid);
            return 0;
        }
        if (w != tid)
            goto fail;
        if (WSTOPSIG(status) != (SIGTRAP | 0x80)) {
            if (step == 0 && status >> 16 == 0) /* a signal came first: it is the thread's */
                *sig = WSTOPSIG(status);
            snprintf(err, errlen, "thread %d took signal %d before system call %d: not made",
                     (int)tid, WSTOPSIG(status), (int)call[0]);
            return 0;
        }
    }
    *at_exit = 1;
    int got = ptrace(PTRACE_GETREGS, tid, 0, &m);
    if (ptrace(PTRACE_SETREGS, tid, 0, resume) != 0)
        goto fail;
    if (got != 0 || ((int64_t)m.rax < 0 && (int64_t)m.rax > -4096)) {
        snprintf(err, errlen, "system call %d in the target failed: %s", (int)call[0],
                 strerror((int)-(int64_t)m.rax));
        return 0;
    }
    return m.rax ? m.rax : 1;
fail:
    snprintf(err, errlen, "could not make system call %d in thread %d: %s", (int)call[0],
             (int)tid, strerror(errno));
    return 0;
}

/* The first call into a target maps our page: one mmap made on the stopped thread's own
 * syscall instruction, under ptrace (the one step that needs the tracer alive: see
 * docs/command.md). At the mmap's syscall-exit stop the thread is set at its restart point at
 * once (resume: its system call made again, by hand, as nothing restarts it from that stop),
 * so that a tracer killed from then on leaves it where it was. A signal that stops the thread
 * before the mmap is passed back in *sig (at that signal stop the caller's registers hold). */
static uint64_t map_page(pid_t tid, const struct user_regs_struct *orig,
                         const struct user_regs_struct *resume, double deadline, int *sig,
                         int *at_exit, char *err, size_t errlen)
{
    static const uint64_t mmap_call[7] = {9, 0, TR_MAP_SIZE, 7 /* PROT_READ|WRITE|EXEC */,
                                          0x22 /* MAP_PRIVATE|MAP_ANONYMOUS */, (uint64_t)-1, 0};
    return remote_syscall(tid, orig, resume, mmap_call, deadline, sig, at_exit, err, errlen);
}

struct saved {
    struct user_regs_struct regs; /* as the kernel is to see them again (rax: a restart code) */
    int restartable;              /* regs read, in the picked call, rax its restart code */
    uint64_t resume_rip, resume_rax, sigmask;
    unsigned char xsave[16384]; /* controls only: the old design's call clobbers it */
    struct iovec xiov;
};

/* One attempt on one picked thread: what it reads and where it reports. */
struct attempt {
    struct target *t;
    struct inject_call *c;
    const struct pick *pick;
    const struct glibc_thread *g;
    int single;          /* __libc_single_threaded was set: the taken thread is the only one */
    uint64_t known_page; /* our page as the maps showed it before any stop, or 0 */
    uint64_t fresh;      /* a page this attempt mapped and has not yet run: unmapped on failure */
    int filters;         /* the taken thread's seccomp filters when they were judged */
    unsigned long long since; /* /proc's clock before the seize: memtrim's threads are younger */
    int raise;           /* the call asks for its thread raised, and the base nice is known */
    char *err, *reason;  /* err: the call's failure; reason: why a thread was passed over */
    size_t errlen, reasonlen;
};

/* Whether a page's previous call is over: the taken thread left it (its flag, or /proc shows
 * it elsewhere), the raw thread and the glibc thread exited (their tid words, cleared by the
 * kernel). 1 free, 0 busy. */
static int page_free(pid_t pid, uint64_t page, const struct glibc_thread *g)
{
    uint64_t d[(TR_P_THREAD + 8 - TR_MAGIC_OFF) / 8];
    if (mem_read(pid, page + TR_MAGIC_OFF, d, sizeof d) != 0)
        return 0;
#define F(off) d[((off) - TR_MAGIC_OFF) / 8]
    uint32_t rtid = 0, ptid = 0;
    if (F(TR_R_CTID))
        mem_read(pid, F(TR_R_CTID), &rtid, 4);
    if (F(TR_P_THREAD))
        mem_read(pid, F(TR_P_THREAD) + g->tid_off, &ptid, 4);
    if (rtid || ptid)
        return 0;
    if (F(TR_T_DONE) == 1 || !F(TR_T_TID))
        return 1;
    uint64_t args[7];
    long nr = target_thread_syscall(pid, (pid_t)F(TR_T_TID), args);
    if (nr == -2 && target_thread_syscall(pid, (pid_t)F(TR_T_TID), args) == -2) {
        char task[64];
        snprintf(task, sizeof task, "/proc/%d/task/%d", (int)pid, (int)F(TR_T_TID));
        return access(task, F_OK) != 0; /* gone, or running (in doubt: busy) */
    }
    uint64_t pc = 0;
    char path[96], buf[512];
    snprintf(path, sizeof path, "/proc/%d/task/%d/syscall", (int)pid, (int)F(TR_T_TID));
    if (target_read_file(path, buf, sizeof buf) > 0) {
        const char *last = strrchr(buf, ' ');
        if (last)
            sscanf(last + 1, "%" SCNx64, &pc);
    }
#undef F
    return pc && (pc < page || pc >= page + TR_CODE_MAX);
}

/* Our page, if the target has one that no call is using (a killed tool's call may still run:
 * it is waited for). */
static uint64_t usable_page(pid_t pid, uint64_t page, const struct glibc_thread *g,
                            double deadline, int *busy)
{
    *busy = 0;
    if (!page)
        return 0;
    for (;;) {
        char m[8];
        if (mem_read(pid, page + TR_MAGIC_OFF, m, 8) != 0 || memcmp(m, TR_MAGIC, 8) != 0)
            return 0; /* someone else's name, or another layout: a page of our own */
        if (page_free(pid, page, g))
            return page;
        if (now_s() > deadline) {
            *busy = 1;
            return 0;
        }
        pause_us(1000);
    }
}

/* The page this attempt mapped, unmapped again on the thread, still at the mmap's exit stop
 * (its registers at its restart point): the process's maps as before. A failed munmap leaves
 * it, named by nothing (the failure is the call's). */
static void unmap_fresh(struct attempt *a, const struct saved *s)
{
    pid_t tid = a->pick->tid;
    struct user_regs_struct resume;
    uint64_t all = ~0ull, call[7] = {11, a->fresh, TR_MAP_SIZE, 0, 0, 0, 0};
    int sig, at_exit;
    char why[160];
    if (ptrace(PTRACE_GETREGS, tid, 0, &resume) != 0)
        return;
    ptrace(PTRACE_SETSIGMASK, tid, (void *)8, &all);
    if (!remote_syscall(tid, &s->regs, &resume, call, now_s() + 1.0, &sig, &at_exit, why,
                        sizeof why))
        ptrace(PTRACE_SETREGS, tid, 0, &resume);
    ptrace(PTRACE_SETSIGMASK, tid, (void *)8, &s->sigmask);
    a->fresh = 0;
}

/* Releases a seized thread that is not to run the page's code. At its interrupt stop the
 * registers go back as read but with the restart code in rax (resume_point): a wait that our
 * interrupt ended with -EINTR (epoll_wait, sigtimedwait) is restarted by the kernel as the
 * thread resumes, as after the call, instead of returning EINTR. At the syscall-exit stop of
 * a page just mapped (c->new_page) map_page has already set it at its restart point. */
static void release_thread(struct attempt *a, const struct saved *s)
{
    if (a->fresh && !mt_control("cmd-fresh-page-kept"))
        unmap_fresh(a, s);
    if (!a->c->new_page && s->restartable && !mt_control("cmd-release-eintr"))
        ptrace(PTRACE_SETREGS, a->pick->tid, 0, &s->regs);
    ptrace(PTRACE_DETACH, a->pick->tid, 0, 0);
}

static int save_thread(pid_t tid, struct saved *s)
{
    s->xiov = (struct iovec){s->xsave, sizeof s->xsave};
    if (mt_control("cmd-call-on-taken-thread") &&
        ptrace(PTRACE_GETREGSET, tid, (void *)NT_X86_XSTATE, &s->xiov) != 0)
        return -1;
    return ptrace(PTRACE_GETSIGMASK, tid, (void *)8, &s->sigmask) == 0 ? 0 : -1;
}

/* Seizes the picked thread and checks it is where it was judged (the process read, its start
 * time unchanged; the thread still its own; its registers still in that system call, a
 * syscall instruction before rip; alone in its process, not inside a signal handler), then
 * saves its state. 0: stopped and saved; 1: released untouched (reason says why); -2, -4: as
 * seize_stop; -5: the pid is another process's now. */
static int take_thread(struct attempt *a, struct saved *s, double t0)
{
    pid_t tid = a->pick->tid, pid = a->t->pid;
    s->restartable = 0;
    int sr = seize_stop(pid, tid, a->t->start_time, 1.0, a->reason, a->reasonlen);
    if (sr == -2 || sr == -4)
        return sr;
    if (sr == -5 || (sr == 0 && a->t->start_time && /* the control: checked after the stop */
                     target_start_time(pid) != a->t->start_time)) {
        if (sr == 0)
            ptrace(PTRACE_DETACH, tid, 0, 0);
        snprintf(a->reason, a->reasonlen, "process %d is not the one read (its start time "
                 "changed: it exited and the pid was reused): not touched", (int)pid);
        return -5;
    }
    if (sr == -6) {
        snprintf(a->reason, a->reasonlen, "thread %d is no longer the process's", (int)tid);
        return 1;
    }
    if (sr != 0)
        return 1;
    char task[64];
    snprintf(task, sizeof task, "/proc/%d/task/%d", (int)pid, (int)tid);
    unsigned char insn[2] = {0};
    int e = 0, sh = 0;
    unsigned char single = 0;
    const char *why = NULL;
    static const char gone[] = "thread %d is no longer the process's",
                      left[] = "thread %d left its system call"; /* it moved on: untouched */
    if (access(task, F_OK) != 0)
        why = gone;
    else if (ptrace(PTRACE_GETREGS, tid, 0, &s->regs) != 0 || s->regs.rsp != a->pick->sp ||
             resume_point(&s->regs, a->pick->nr, &s->resume_rip, &s->resume_rax) != 0)
        why = left;
    else if (mem_read(pid, s->regs.rip - 2, insn, 2) != 0 || insn[0] != 0x0f || insn[1] != 0x05)
        why = "thread %d: the instruction before rip is not syscall";
    else if (target_thread_shstk(pid, tid)) /* read in its stop: the pick reads the process's */
        why = "thread %d runs with a shadow stack (CET): the page's restore would fault there";
    else if (mem_read(pid, a->g->single_threaded, &single, 1) != 0 ||
             (single && target_thread_count(pid) != 1))
        why = "thread %d: its process has threads glibc did not start (__libc_single_threaded "
              "is set): memtrim's thread could race them in malloc";
    else if (single && (sh = pick_in_signal_handler(pid, s->regs.rsp, a->pick->stack_end)) != 0)
        why = sh > 0 ? "thread %d, its process's only thread, is inside a signal handler "
                       "(which may have interrupted malloc, unlocked while it is alone)"
                     : "thread %d: its stack could not be scanned whole for a signal frame";
    else if (save_thread(tid, s) != 0) {
        e = errno;
        why = "cannot read thread %d's state: %s";
    }
    a->single = single;
    s->restartable = why != gone && why != left;
    if (!why) { /* its restart code set now: a tracer dying at this stop leaves no EINTR */
        if (!mt_control("cmd-release-eintr"))
            ptrace(PTRACE_SETREGS, tid, 0, &s->regs);
        return 0;
    }
    release_thread(a, s);
    snprintf(a->reason, a->reasonlen, why, (int)tid, strerror(e));
    return 1;
}

/* Whether the taken thread still has the seccomp filters seccomp_check judged: another
 * thread's SECCOMP_FILTER_FLAG_TSYNC may have added one since. Read right before each batch
 * of system calls memtrim makes there (the page's mmap, the jump); 0, or -1 with the thread
 * released untouched (a page this attempt mapped stays: its munmap is not judged either). */
static int filters_unchanged(struct attempt *a, const struct saved *s)
{
    int now = seccomp_count(a->t->pid, a->pick->tid);
    if (now == a->filters || mt_control("cmd-seccomp-recheck"))
        return 0;
    a->fresh = 0;
    release_thread(a, s);
    snprintf(a->err, a->errlen, "thread %d of process %d: a seccomp filter was added since its "
             "filters were judged (%d, now %d): refused, nothing more was done",
             (int)a->pick->tid, (int)a->t->pid, a->filters, now);
    return -1;
}

/* Our page for this call: the one known if no call uses it, else one mapped now on the
 * stopped thread. 0 with err set (the thread restored and released: the caller only returns
 * rc). */
static uint64_t page_for_call(struct attempt *a, const struct saved *s, double t0, int *rc)
{
    pid_t tid = a->pick->tid, pid = a->t->pid;
    int busy, sig;
    uint64_t page = usable_page(pid, a->known_page, a->g, 0, &busy); /* once more: no wait */
    a->c->new_page = 0;
    if (page)
        return page;
    if (busy) {
        release_thread(a, s);
        snprintf(a->err, a->errlen, "an earlier call in process %d has not finished", (int)pid);
        *rc = INJECT_TIMEOUT;
        return 0;
    }
    struct user_regs_struct resume = s->regs;
    resume.rip = s->resume_rip;
    resume.rax = s->resume_rax;
    resume.orig_rax = (uint64_t)-1;
    int at_exit;
    if (filters_unchanged(a, s) != 0) {
        *rc = INJECT_REFUSED;
        return 0;
    }
    uint64_t all = ~0ull; /* no signal stops the mmap: they wait, as they do for the call */
    ptrace(PTRACE_SETSIGMASK, tid, (void *)8, &all);
    page = map_page(tid, &s->regs, &resume, t0 + 1.0, &sig, &at_exit, a->reason, a->reasonlen);
    ptrace(PTRACE_SETSIGMASK, tid, (void *)8, &s->sigmask);
    a->c->new_page = 1;
    a->fresh = page;
    if (!page) { /* the thread as it was, and the signal that came meanwhile */
        ptrace(PTRACE_SETREGS, tid, 0, at_exit ? &resume : &s->regs);
        ptrace(PTRACE_DETACH, tid, 0, (void *)(long)sig);
        snprintf(a->err, a->errlen, "%s", a->reason);
        *rc = INJECT_FAILED;
    }
    return page;
}

/* The xsave features and area size of the self-restore's signal frame, as the kernel's own
 * frames have them for a thread that never asked for AMX's tile data (a dynamic feature:
 * its frames are larger, and a larger size would make the kernel restore x87/SSE only):
 * XCR0 less tile data, standard format. 0 and 0 without XSAVE (the old restore is used). */
static void xsave_layout(uint64_t *mask, uint64_t *size)
{
    unsigned a, b, c, d;
    *mask = *size = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
        return;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    uint64_t xcr0 = ((uint64_t)hi << 32 | lo) & ~(1ull << 18), end = 576;
    for (unsigned i = 2; i < 63; i++) {
        if (!(xcr0 >> i & 1))
            continue;
        __cpuid_count(0xd, i, a, b, c, d);
        if ((uint64_t)a + b > end)
            end = (uint64_t)a + b; /* eax: its size, ebx: its offset */
    }
    *mask = xcr0;
    *size = end;
}

/* Fills the page for one call and the thread's stack slot (flags, resume address). */
static int fill_page(struct attempt *a, uint64_t page, const struct saved *s, uint64_t tp)
{
    static unsigned char data[TR_OUT - TR_MAGIC_OFF];
    const struct inject_call *c = a->c;
    pid_t pid = a->t->pid;
    memset(data, 0, sizeof data);
#define AT(off) (data + (off) - TR_MAGIC_OFF)
#define PUT(off, v) do { uint64_t v_ = (v); memcpy(AT(off), &v_, 8); } while (0)
    memcpy(AT(TR_MAGIC_OFF), TR_MAGIC, 8);
    PUT(TR_SELF, page);
    PUT(TR_FUNC, c->func);
    PUT(TR_ARG0, c->arg0_is_out ? page + TR_OUT : c->args[0] + (c->page_args & 1 ? page : 0));
    PUT(TR_ARG1, c->args[1] + (c->page_args & 2 ? page : 0));
    PUT(TR_ARG2, c->args[2] + (c->page_args & 4 ? page : 0));
    PUT(TR_ARG3, c->args[3]);
    PUT(TR_ARG4, c->args[4]);
    PUT(TR_T_TID, (uint64_t)a->pick->tid);
    PUT(TR_R_CTID, tp + a->g->tid_off);
    PUT(TR_R_TP, tp);
    PUT(TR_CLONE_FLAGS, CLONE_RAW);
    PUT(TR_ALL_MASK, ~0ull);
    PUT(TR_ORIG_MASK, s->sigmask);
    PUT(TR_LOW_RSP, s->regs.rsp - TR_RED_ZONE - 16);
    PUT(TR_NAME_VMA, 1);
    PUT(TR_MAP_LEN, TR_MAP_SIZE);
    PUT(TR_WAIT_TS, 0);
    PUT(TR_WAIT_TS + 8, T_WAIT_NS);
    PUT(TR_FN_ATTR_INIT, a->g->attr_init);
    PUT(TR_FN_ATTR_STACK, a->g->attr_setstack);
    PUT(TR_FN_ATTR_DETACH, a->g->attr_setdetach);
    PUT(TR_FN_CREATE, a->g->create);
    PUT(TR_FN_ATTR_DESTROY, a->g->attr_destroy);
    PUT(TR_P_STACK, page + TR_P_STACK_OFF);
    PUT(TR_P_STACK_SIZE, TR_MAP_SIZE - TR_P_STACK_OFF);
    PUT(TR_MXCSR, 0x1f80);
    PUT(TR_NO_GUARD, (uint64_t)mt_control("cmd-no-guard"));
    PUT(TR_KEEP_DF, (uint64_t)mt_control("cmd-keep-df"));
    PUT(TR_OLD_CALL, (uint64_t)mt_control("cmd-call-on-taken-thread"));
    PUT(TR_SETXID_MASK, mt_control("cmd-setxid-blocked") ? 0 : 1ull << (SIGSETXID - 1));
    memcpy(AT(TR_VMA_NAME), "memtrim-inject", 15);
    const struct user_regs_struct *r = &s->regs;
    uint64_t regs[15] = {s->resume_rax, r->rbx, r->rcx, r->rdx, r->rsi, r->rdi, r->rbp, r->r8,
                         r->r9, r->r10, r->r11, r->r12, r->r13, r->r14, r->r15};
    memcpy(AT(TR_REGS), regs, sizeof regs);
    memcpy(AT(TR_KREGS), &s->regs, sizeof s->regs);
    /* the self-restore's ucontext: the thread at its restart point (tramp.S patches rip and
     * rax for EINTR), its flags, stack and mask; the altstack and fpstate filled there */
    uint64_t uc[TR_UC_SIZE / 8] = {
        7, /* UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS, as the kernel's frames */
        0, 0, 0, 0, /* the altstack: tramp.S copies TR_SS */
        r->r8, r->r9, r->r10, r->r11, r->r12, r->r13, r->r14, r->r15, r->rdi, r->rsi, r->rbp,
        r->rbx, r->rdx, s->resume_rax, r->rcx, r->rsp, s->resume_rip, r->eflags,
        (r->cs & 0xffff) | (r->ss & 0xffff) << 48};
    uc[TR_UC_SIZE / 8 - 1] = s->sigmask;
    memcpy(AT(TR_UC), uc, sizeof uc);
    PUT(TR_SS + 8, 3); /* sigaltstack's answer until it writes one: invalid, changes nothing */
    PUT(TR_EINTR_RIP, r->rip);
    uint64_t xs_mask, xs_size;
    xsave_layout(&xs_mask, &xs_size);
    PUT(TR_XS_MASK, xs_mask);
    PUT(TR_XS_SIZE, xs_size);
    /* the old restore, alone or with the old design (which had only that one) */
    PUT(TR_OLD_RESTORE,
        (uint64_t)(mt_control("cmd-restore-pending") || mt_control("cmd-self-restore")));
    PUT(TR_FRAME_HERE, (uint64_t)mt_control("cmd-frame-on-own-stack"));
#undef PUT
#undef AT
    uint64_t slot[2] = {r->eflags, s->resume_rip};
    size_t code_len = (size_t)(mt_tramp_end - mt_tramp_start);
    if (code_len > TR_CODE_MAX || mem_write(pid, page, mt_tramp_start, code_len) != 0)
        return -1;
    if (c->in) {
        size_t n = strlen(c->in);
        if (n >= TR_PATH_MAX || mem_write(pid, page + TR_PATH, c->in, n + 1) != 0)
            return -1;
    }
    return mem_write(pid, page + TR_MAGIC_OFF, data, sizeof data) != 0 ||
           mem_write(pid, s->regs.rsp - TR_RED_ZONE - 16, slot, sizeof slot) != 0 ? -1 : 0;
}

/* The stopped thread, back as it was: its registers (a restart code in rax: the kernel
 * restarts the call itself when it resumes) and its mask, set at this ptrace stop; then
 * detached. Unless it has already left the page on its own (the tool was late). */
static void give_back(struct attempt *a, uint64_t page, const struct saved *s)
{
    pid_t tid = a->pick->tid;
    struct user_regs_struct now;
    uint64_t one = 1;
    int in_page = ptrace(PTRACE_GETREGS, tid, 0, &now) == 0 && now.rip >= page &&
                  now.rip < page + TR_CODE_MAX;
    a->c->self_restored = !in_page;
    if (in_page) {
        ptrace(PTRACE_SETREGS, tid, 0, &s->regs);
        if (mt_control("cmd-call-on-taken-thread"))
            ptrace(PTRACE_SETREGSET, tid, (void *)NT_X86_XSTATE, &s->xiov);
        ptrace(PTRACE_SETSIGMASK, tid, (void *)8, &s->sigmask);
    }
    /* from here the thread is its own: a rescue would only interrupt its wait again */
    watch_target(a->t->pid, tid, 0);
    ptrace(PTRACE_DETACH, tid, 0, 0);
    mem_write(a->t->pid, page + TR_T_DONE, &one, 8);
}

/* The taken thread runs the page's code (still seized): once its clone is done (and, alone
 * in its process, once glibc's pthread_create has made it multi-threaded), it is interrupted
 * and given back. INJECT_OK, or the failure with err set; the thread is released either way
 * (or stays seized for good: inject_left_seized). */
static int run_taken(struct attempt *a, uint64_t page, const struct saved *s, double *released)
{
    pid_t tid = a->pick->tid, pid = a->t->pid;
    struct user_regs_struct jump = s->regs;
    jump.rip = page;
    jump.rsp = page + TR_T_STACK_TOP;
    jump.rax = 0;
    jump.orig_rax = (uint64_t)-1; /* nothing is restarted now */
    uint64_t none = ~0ull;
    if (filters_unchanged(a, s) != 0)
        return INJECT_REFUSED;
    if (ptrace(PTRACE_SETREGS, tid, 0, &jump) != 0) {
        snprintf(a->err, a->errlen, "cannot start the call in process %d: %s", (int)pid,
                 strerror(errno));
        release_thread(a, s); /* at its restart point, a page it mapped unmapped */
        return INJECT_FAILED;
    }
    a->fresh = 0; /* the page is in use from here: a failure marks it free, never unmaps it */
    ptrace(PTRACE_SETSIGMASK, tid, (void *)8, &none);
    double t1 = now_s(), deadline = t1 + (a->c->call_wait_s < 2 ? a->c->call_wait_s : 2);
    int old = mt_control("cmd-call-on-taken-thread");
    if (old)
        deadline = t1 + a->c->call_wait_s;
    ptrace(PTRACE_CONT, tid, 0, 0);
    int64_t cloned = 0;
    uint64_t r_done = 0, done = 0;
    unsigned char single = a->single;
    int status, stopped_early = 0;
    while (now_s() < deadline && !mt_control("cmd-self-restore")) {
        if (old ? mem_read(pid, page + TR_DONE_CALL, &done, 8) == 0 && done
                : mem_read(pid, page + TR_CLONE_RET, &cloned, 8) == 0 && cloned &&
                      (!single || cloned < 0 ||
                       (mem_read(pid, a->g->single_threaded, &single, 1) == 0 && !single) ||
                       (mem_read(pid, page + TR_R_DONE, &r_done, 8) == 0 && r_done)))
            break;
        pid_t w = waitpid(tid, &status, __WALL | WNOHANG);
        if (w == tid) { /* stopped meanwhile (a group stop): give it back from this stop */
            stopped_early = WIFSTOPPED(status);
            if (!stopped_early)
                break;
            if (status >> 16 != PTRACE_EVENT_STOP) { /* SIGSTOP's delivery: let it through */
                ptrace(PTRACE_CONT, tid, 0, (void *)(long)WSTOPSIG(status));
                stopped_early = 0;
                continue;
            }
            break;
        }
        pause_us(20);
    }
    if (mt_control("cmd-self-restore")) { /* the old design: the thread restores itself */
        ptrace(PTRACE_DETACH, tid, 0, 0);
        *released = now_s();
        return INJECT_OK;
    }
    int group = 0;
    if (!stopped_early) {
        ptrace(PTRACE_INTERRUPT, tid, 0, 0);
        int r = wait_event_stop(tid, now_s() + 1.0, a->err, a->errlen, &group);
        if (r != 0) {
            inject_left_seized = r == -2;
            return INJECT_FAILED;
        }
    }
    /* the loop's last look may be older than the clone (the tool late: stopped, starved): read
     * again in the stop, or a call under way would be reported as never made */
    if (!old && !cloned && !mt_control("cmd-map-deadline"))
        mem_read(pid, page + TR_CLONE_RET, &cloned, 8);
    give_back(a, page, s);
    *released = now_s();
    if (!old && cloned <= 0) {
        snprintf(a->err, a->errlen, "thread %d could not start memtrim's thread in process %d "
                 "(clone: %s): it is back in its system call, nothing was called", (int)tid,
                 (int)pid, cloned ? strerror((int)-cloned) : "not in time");
        return INJECT_FAILED;
    }
    return INJECT_OK;
}

/* memtrim's glibc thread, once it has said its tid, raised for its call (prio.c: the tid is
 * checked, as the page is the target's to write). Control cmd-call-unraised: left at the
 * weight it inherited, as before. */
static void raise_call_thread(struct attempt *a, pid_t tid, int returned)
{
    struct prio *p = &a->c->prio;
    if (returned)
        snprintf(p->why, sizeof p->why, "its call had returned when memtrim saw it");
    else if (mt_control("cmd-call-unraised"))
        snprintf(p->why, sizeof p->why, "control cmd-call-unraised");
    else /* its gettid: the number of the target's pid namespace (control cmd-raise-ns-tid:
          * taken as the tool's; from the host into a container no thread had it) */
        prio_raise(p, a->t->pid, a->pick->tid, mt_control("cmd-raise-ns-tid") ? tid :
                   prio_our_tid(a->t->pid, tid), a->since, a->c->raise);
}

/* The calling threads are on their own: waits for the result under the call's deadline,
 * then for both threads' exits (the page is free once they are gone). */
static int wait_call(struct attempt *a, uint64_t page, double released)
{
    struct inject_call *c = a->c;
    pid_t pid = a->t->pid;
    double call_deadline = released + c->call_wait_s;
    uint64_t d[(TR_P_TID + 8 - TR_MAGIC_OFF) / 8];
#define F(off) d[((off) - TR_MAGIC_OFF) / 8]
    uint64_t ctid = 0;
    int asked = !a->raise; /* the raise is asked once, when the glibc thread says its tid */
    mem_read(pid, page + TR_R_CTID, &ctid, 8);
    for (;;) {
        uint32_t rtid = 1; /* read before the flags: a thread seen gone had set them before */
        int r_gone = ctid && mem_read(pid, ctid, &rtid, 4) == 0 && !rtid;
        if (mem_read(pid, page + TR_MAGIC_OFF, d, sizeof d) != 0) {
            snprintf(a->err, a->errlen, "process %d is gone", (int)pid);
            return INJECT_FAILED;
        }
        if (!asked && F(TR_P_TID)) {
            asked = 1;
            raise_call_thread(a, (pid_t)F(TR_P_TID), F(TR_DONE_CALL) == 1);
        }
        if (F(TR_DONE_CALL) == 1)
            break;
        if (F(TR_R_DONE) && F(TR_R_CREATE) != 0) {
            snprintf(a->err, a->errlen, "memtrim's thread in process %d could not start a glibc "
                     "thread: pthread_create: %s; nothing was called", (int)pid,
                     strerror((int)F(TR_R_CREATE)));
            return INJECT_FAILED;
        }
        if (!F(TR_R_DONE) && r_gone && (int64_t)F(TR_CLONE_RET) > 0 &&
            !mt_control("cmd-call-on-taken-thread")) {
            snprintf(a->err, a->errlen, "memtrim's thread in process %d ended before its call",
                     (int)pid);
            return INJECT_FAILED;
        }
        if (now_s() > call_deadline) {
            snprintf(a->err, a->errlen, "the call in process %d has not returned after %.1f s; "
                     "it goes on in memtrim's thread%s, which ends when it returns", (int)pid,
                     c->call_wait_s, F(TR_P_TID) ? "" : " (still starting)");
            return INJECT_TIMEOUT;
        }
        pause_us(50);
    }
    c->call_s = now_s() - released;
    c->call_tid = (pid_t)F(TR_P_TID);
    c->raw_tid = (pid_t)F(TR_CLONE_RET);
#undef F
    mem_read(pid, page + TR_RESULT, &c->result, 8);
    if (c->out_len)
        mem_read(pid, page + TR_OUT, c->out, c->out_len < sizeof c->out ? c->out_len : sizeof c->out);
    double end = now_s() + 2.0;
    int busy;
    c->threads_ended = usable_page(pid, page, a->g, end, &busy) == page;
    c->threads_s = now_s() - released;
    a->t->page = page;
    return INJECT_OK;
}

/* One picked thread: taken, started, given back, the call waited for. INJECT_NO_THREAD:
 * passed over untouched. */
static int try_thread(struct attempt *a, const struct pick *p)
{
    static struct saved s;
    double t0 = now_s(), released = 0;
    a->pick = p;
    a->c->new_page = 0;
    a->fresh = 0;
    a->since = prio_ticks_now();
    watch_hold(1); /* from the seize to the release: the tool's stop is undone (watch.c) */
    watch_target(a->t->pid, p->tid, 0);
    int took = take_thread(a, &s, t0);
    if (took != 0) {
        watch_hold(0);
        if (took < 0) {
            inject_left_seized = took == -2;
            snprintf(a->err, a->errlen, "%s", a->reason);
            return took == -4 ? INJECT_REFUSED : INJECT_FAILED;
        }
        return INJECT_NO_THREAD;
    }
    struct seccomp_calls sc = {inject_syscalls, a->c->syscalls, inject_syscalls_n,
                               a->c->n_syscalls, a->c->any_syscall};
    a->filters = seccomp_count(a->t->pid, p->tid); /* read first: a later one is seen */
    if (!mt_control("cmd-seccomp") && seccomp_check(a->t->pid, p->tid, &sc, a->err, a->errlen)) {
        release_thread(a, &s); /* untouched: its filters were only read */
        watch_hold(0);
        return INJECT_REFUSED;
    }
    int rc = INJECT_OK;
    errno = 0; /* the base of the call thread's weight: the nice it will inherit (prio.h) */
    int nice = getpriority(PRIO_PROCESS, (id_t)p->tid);
    a->c->prio = (struct prio){.taken_nice = nice, .nice = nice};
    a->raise = a->c->raise > 0 && !(nice == -1 && errno);
    if (!a->raise)
        snprintf(a->c->prio.why, sizeof a->c->prio.why, "%s%s", a->c->raise > 0 ?
                 "the taken thread's nice cannot be read: " : "not asked (--raise 0, or load)",
                 a->c->raise > 0 ? strerror(errno) : "");
    uint64_t tp = 0, page = page_for_call(a, &s, t0, &rc);
    if (page && thread_block(a->t->pid, s.regs.fs_base, page, a->g, &tp, a->reason,
                             a->reasonlen) != 0) {
        release_thread(a, &s);
        watch_hold(0);
        return INJECT_NO_THREAD; /* this thread cannot lend its block; maybe another can */
    }
    if (page && fill_page(a, page, &s, tp) != 0) {
        snprintf(a->err, a->errlen, "cannot prepare the call in process %d: %s", (int)a->t->pid,
                 strerror(errno));
        release_thread(a, &s);
        rc = INJECT_FAILED;
    }
    if (page && rc == INJECT_OK) {
        watch_target(a->t->pid, p->tid, page); /* the tracer's death: the client gives it back */
        rc = run_taken(a, page, &s, &released);
    }
    watch_hold(0);
    if (rc != INJECT_OK)
        return rc;
    a->c->tid = p->tid;
    a->c->stopped_s = released - t0; /* from before its seize: the whole stop, page made */
    snprintf(a->c->syscall, sizeof a->c->syscall, "%s", target_syscall_name(p->nr));
    rc = wait_call(a, page, released);
    /* it outlived the wait (a timeout, a failure): set back, and said so in the error.
     * Control cmd-raise-not-lowered: left raised for the rest of its call. */
    if (!mt_control("cmd-raise-not-lowered"))
        prio_lower(&a->c->prio, a->t->pid);
    if (rc != INJECT_OK && a->c->prio.lowered) {
        size_t n = strlen(a->err);
        if (n < a->errlen)
            snprintf(a->err + n, a->errlen - n, "; memtrim's thread %d, raised for its "
                     "call, set back to nice %d", (int)a->c->prio.tid, a->c->prio.taken_nice);
    }
    if (!a->c->prio.raised && !a->c->prio.why[0])
        snprintf(a->c->prio.why, sizeof a->c->prio.why, "memtrim's glibc thread never said "
                 "its tid");
    return rc;
}

static int run_here(struct target *t, struct inject_call *c, char *err, size_t errlen)
{
    struct glibc_thread g;
    if (thread_find(t, &g, err, errlen) != 0)
        return INJECT_UNSUPPORTED;
    double thread_deadline = now_s() + c->thread_wait_s;
    struct target_lock lock;
    int locked = target_lock_take(&lock, t, thread_deadline, err, errlen);
    if (locked != 0)
        return locked > 0 ? INJECT_NO_THREAD : INJECT_FAILED;
    char why[1024] = "", reason[512] = "";
    struct attempt a = {.t = t, .c = c, .g = &g, .err = err, .errlen = errlen, .reason = reason,
                        .reasonlen = sizeof reason};
    int rc = INJECT_NO_THREAD, busy;
    while (rc == INJECT_NO_THREAD) {
        struct pick picks[64];
        int n = pick_threads(t->pid, picks, 64, why, sizeof why);
        a.known_page = n ? target_find_page(t->pid) : 0; /* read before any stop */
        if (a.known_page && !usable_page(t->pid, a.known_page, &g, thread_deadline, &busy) &&
            busy) {
            snprintf(err, errlen, "an earlier call in process %d has not finished", (int)t->pid);
            rc = INJECT_TIMEOUT; /* waited for with no thread stopped */
            break;
        }
        for (int i = 0; i < n && rc == INJECT_NO_THREAD; i++)
            rc = try_thread(&a, &picks[i]);
        if (rc == INJECT_NO_THREAD && now_s() > thread_deadline) {
            snprintf(err, errlen, "no thread of process %d was blocked in a system call memtrim "
                     "can restart exactly within %.1f s (%s%s%s); nothing was changed",
                     (int)t->pid, c->thread_wait_s, why[0] ? why : "no thread",
                     reason[0] ? "; " : "", reason);
            break;
        }
        if (rc == INJECT_NO_THREAD)
            pause_us(2000);
    }
    target_lock_drop(&lock);
    return rc;
}

/* What the tracer sends back (watch.c): the call's results, as run_here left them. */
struct tracer_result {
    int rc, left_seized;
    uint64_t page;
    struct inject_call c;
    char err[2048];
};

struct tracer_job {
    struct target *t;
    struct inject_call *c;
};

static void traced(void *arg, void *res)
{
    const struct tracer_job *j = arg;
    struct tracer_result *r = res;
    r->rc = run_here(j->t, j->c, r->err, sizeof r->err);
    r->left_seized = inject_left_seized;
    r->page = j->t->page;
    r->c = *j->c;
}

/* The ptrace work runs in the tracer, which the command's death or stop does not reach
 * (watch.c): a SIGKILL of the command while the first call's mmap runs on the thread left it
 * returning into its own code with the page's address (control cmd-first-call-window: the
 * command traces, as before). */
int inject_run(struct target *t, struct inject_call *c, char *err, size_t errlen)
{
    if (mt_control("cmd-first-call-window")) {
        watch_start();
        return run_here(t, c, err, errlen);
    }
    static struct tracer_result r;
    struct tracer_job j = {t, c};
    memset(&r, 0, sizeof r);
    if (watch_tracer(traced, &j, &r, sizeof r, err, errlen) != 0)
        return INJECT_FAILED;
    *c = r.c; /* the pointers in it are the caller's own (a fork's copy) */
    t->page = r.page;
    inject_left_seized = r.left_seized;
    snprintf(err, errlen, "%s", r.err);
    return r.rc;
}
