/*
 * inject.c - one call inside a running process through ptrace, on one thread, made safe by
 * construction (docs/architecture.md, "The memtrim command"):
 *   1. a thread blocked in a system call the allocator and ld.so never make with a lock held
 *      (target_syscall_safe), not inside a signal handler, is seized alone (PTRACE_SEIZE, no
 *      PTRACE_O_EXITKILL) and interrupted; its registers must confirm it is still there;
 *   2. its registers, extended state and signal mask are written into our page in the target
 *      (mapped once, by one injected mmap, and named so that later calls find it), and its
 *      flags and resume address below its stack's red zone;
 *   3. it is pointed at the page's code (tramp.S) with every signal blocked and detached at
 *      once: it makes the call un-traced, restores itself and resumes its system call as the
 *      kernel would have restarted it. From then on nothing depends on this tool.
 * The tool polls the page's done flags with process_vm_readv under a deadline. One thread
 * (the tool's); one tool per target at a time (lock.c).
 */
#include "inject.h"

#include "../common/control.h"
#include "lock.h"
#include "mem.h"
#include "pick.h"
#include "tramp.h"

#include <cpuid.h>
#include <elf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern const unsigned char mt_tramp_start[], mt_tramp_end[];

#define ERESTARTSYS 512
#define ERESTARTNOINTR 513
#define ERESTARTNOHAND 514
#define ERESTART_RESTARTBLOCK 516
#define NR_RESTART_SYSCALL 219

int inject_left_seized;

/* map_page's mmap, then tramp.S's rt_sigprocmask (twice) and prctl naming the page; an
 * argument that is an address in the page is not known beforehand (bit clear in known). */
const struct inject_syscall inject_syscalls[] = {
    {"mmap(NULL, 128 KiB, PROT_READ|PROT_WRITE|PROT_EXEC, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0)",
     SYS_mmap, {0, TR_MAP_SIZE, 7, 0x22, (uint64_t)-1, 0}, 0x3f},
    {"rt_sigprocmask(SIG_SETMASK, set, NULL, 8)", SYS_rt_sigprocmask, {2, 0, 0, 8, 0, 0}, 0xd},
    {"prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, page, 128 KiB, name)", SYS_prctl,
     {0x53564d41, 0, 0, TR_MAP_SIZE, 0, 0}, 0xb},
};
const size_t inject_syscalls_n = sizeof inject_syscalls / sizeof inject_syscalls[0];


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

/* Waits for tid's next stop; its status, or -1 at the deadline / on an error. */
static int wait_stop(pid_t tid, double deadline, int *status)
{
    for (;;) {
        pid_t r = waitpid(tid, status, __WALL | WNOHANG);
        if (r == tid)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
        if (now_s() > deadline)
            return -1;
        pause_us(20);
    }
}

/* Seizes and interrupts tid; 0 once it is in its interrupt stop. */
static int seize_stop(pid_t tid, double deadline, char *err, size_t errlen)
{
    if (ptrace(PTRACE_SEIZE, tid, 0, (void *)(long)PTRACE_O_TRACESYSGOOD) != 0) {
        int e = errno;
        snprintf(err, errlen, "ptrace(PTRACE_SEIZE, %d): %s", (int)tid, strerror(e));
        return e == EPERM ? -4 : -1;
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
    for (;;) {
        int status;
        if (wait_stop(tid, deadline, &status) != 0) {
            snprintf(err, errlen, "thread %d did not stop in time: it stays seized until memtrim "
                     "exits; nothing more is done", (int)tid);
            return -2; /* still seized: only this process's exit releases it */
        }
        if (!WIFSTOPPED(status)) {
            snprintf(err, errlen, "thread %d exited", (int)tid);
            return -3;
        }
        int sig = WSTOPSIG(status), event = status >> 16;
        if (event == PTRACE_EVENT_STOP && sig == SIGTRAP)
            return 0; /* the interrupt stop */
        if (event == PTRACE_EVENT_STOP) {
            snprintf(err, errlen, "process is being stopped (signal %d): not touched", sig);
            ptrace(PTRACE_DETACH, tid, 0, 0);
            return -1;
        }
        /* a signal was on its way: deliver it as it would have been, and wait again */
        if (ptrace(PTRACE_CONT, tid, 0, (void *)(long)sig) != 0) {
            snprintf(err, errlen, "ptrace(PTRACE_CONT, %d): %s", (int)tid, strerror(errno));
            return -1;
        }
    }
}

/* Where the thread resumes, as the kernel's signal code would restart its system call. */
static int resume_point(const struct user_regs_struct *r, long nr, uint64_t *rip, uint64_t *rax)
{
    long ret = (long)r->rax;
    if ((long)r->orig_rax != nr)
        return -1;
    switch (-ret) {
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
    case EINTR: /* epoll_wait, sigtimedwait: EINTR, as after any stop (signal(7)) */
        *rip = r->rip;
        *rax = r->rax;
        return 0;
    default:
        return -1; /* it has returned: not where it was judged */
    }
}

static uint64_t xcr0(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* The first call into a target maps our page: one mmap made on the stopped thread's own
 * syscall instruction, under ptrace (the one step that needs the tool alive: see
 * docs/architecture.md). Its registers are put back as soon as the mmap returns, so that a
 * tool killed later leaves the thread as it was. A signal that stops the thread before the
 * mmap is passed back in *sig (the caller restores the registers and delivers it). */
static uint64_t map_page(pid_t tid, const struct user_regs_struct *orig, double deadline, int *sig,
                         char *err, size_t errlen)
{
    *sig = 0;
    struct user_regs_struct m = *orig;
    m.rip = orig->rip - 2;
    m.rax = 9; /* mmap */
    m.rdi = 0;
    m.rsi = TR_MAP_SIZE;
    m.rdx = 7;    /* PROT_READ | PROT_WRITE | PROT_EXEC */
    m.r10 = 0x22; /* MAP_PRIVATE | MAP_ANONYMOUS */
    m.r8 = (uint64_t)-1;
    m.r9 = 0;
    m.orig_rax = (uint64_t)-1;
    if (ptrace(PTRACE_SETREGS, tid, 0, &m) != 0)
        goto fail;
    for (int step = 0; step < 2; step++) { /* syscall entry, then exit */
        int status;
        if (ptrace(PTRACE_SYSCALL, tid, 0, 0) != 0 || wait_stop(tid, deadline, &status) != 0 ||
            !WIFSTOPPED(status))
            goto fail;
        if (WSTOPSIG(status) != (SIGTRAP | 0x80)) {
            if (step == 0 && status >> 16 == 0) /* a signal came first: it is the thread's */
                *sig = WSTOPSIG(status);
            snprintf(err, errlen, "thread %d took signal %d before the mmap: not mapped", (int)tid,
                     WSTOPSIG(status));
            return 0;
        }
    }
    int got = ptrace(PTRACE_GETREGS, tid, 0, &m);
    if (ptrace(PTRACE_SETREGS, tid, 0, orig) != 0) /* the thread as it was, from now on */
        goto fail;
    if (got != 0 || ((int64_t)m.rax < 0 && (int64_t)m.rax > -4096)) {
        snprintf(err, errlen, "mmap in the target failed: %s", strerror((int)-(int64_t)m.rax));
        return 0;
    }
    return m.rax;
fail:
    snprintf(err, errlen, "could not map a page in thread %d: %s", (int)tid, strerror(errno));
    return 0;
}

struct saved {
    struct user_regs_struct regs;
    uint64_t resume_rip, resume_rax, sigmask;
    unsigned char xsave[TR_XSAVE_SIZE];
    size_t xsave_len;
    int use_fxsr;
};

static int save_thread(pid_t tid, struct saved *s)
{
    struct iovec iov = {s->xsave, sizeof s->xsave};
    memset(s->xsave, 0, sizeof s->xsave);
    if (xcr0() && ptrace(PTRACE_GETREGSET, tid, (void *)NT_X86_XSTATE, &iov) == 0) {
        s->xsave_len = iov.iov_len;
        s->use_fxsr = 0;
    } else if (ptrace(PTRACE_GETFPREGS, tid, 0, s->xsave) == 0) {
        s->xsave_len = sizeof(struct user_fpregs_struct);
        s->use_fxsr = 1;
    } else {
        return -1;
    }
    return ptrace(PTRACE_GETSIGMASK, tid, (void *)8, &s->sigmask) == 0 ? 0 : -1;
}

/* Fills the page for one call and the thread's stack slot (flags, resume address). */
static int fill_page(pid_t pid, uint64_t page, int write_code, const struct saved *s,
                     const struct inject_call *c)
{
    static unsigned char data[TR_XSAVE - TR_MAGIC_OFF];
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
    if (c->in) {
        size_t n = strlen(c->in);
        if (n >= TR_PATH_MAX)
            return -1;
        memcpy(AT(TR_PATH), c->in, n + 1);
    }
    uint64_t low = s->regs.rsp - TR_RED_ZONE - 16;
    PUT(TR_LOW_RSP, low);
    /* the features the kernel saved (its sw_reserved bytes say which: XCR0), never AMX's
     * (glibc's malloc leaves it, and a disarmed one would fault) */
    uint64_t features = 0;
    uint32_t magic1 = 0;
    memcpy(&magic1, s->xsave + 464, 4);
    memcpy(&features, s->xsave + 464 + 8, 8);
    if (s->use_fxsr || magic1 != 0x46505853 /* FP_XSTATE_MAGIC1 */ || !features)
        features = xcr0();
    PUT(TR_XMASK, features & ~((1ull << 17) | (1ull << 18)));
    PUT(TR_ORIG_MASK, s->sigmask);
    PUT(TR_ALL_MASK, ~0ull);
    PUT(TR_NAME_VMA, 1);
    PUT(TR_MAP_LEN, TR_MAP_SIZE);
    PUT(TR_USE_FXSR, (uint64_t)s->use_fxsr);
    memcpy(AT(TR_VMA_NAME), "memtrim-inject", 15);
    const struct user_regs_struct *r = &s->regs;
    uint64_t regs[15] = {s->resume_rax, r->rbx, r->rcx, r->rdx, r->rsi, r->rdi, r->rbp, r->r8,
                         r->r9, r->r10, r->r11, r->r12, r->r13, r->r14, r->r15};
    memcpy(AT(TR_REGS), regs, sizeof regs);
#undef PUT
#undef AT
    uint64_t slot[2] = {r->eflags, s->resume_rip};
    size_t code_len = (size_t)(mt_tramp_end - mt_tramp_start);
    if (write_code && (code_len > TR_CODE_MAX || mem_write(pid, page, mt_tramp_start, code_len) != 0))
        return -1;
    if (mem_write(pid, page + TR_MAGIC_OFF, data, sizeof data) != 0 ||
        mem_write(pid, page + TR_XSAVE, s->xsave, s->xsave_len) != 0 ||
        mem_write(pid, low, slot, sizeof slot) != 0)
        return -1;
    return 0;
}

/* Our page, if the target has one that no call is using (a killed tool's call may still run:
 * it is waited for). */
static uint64_t usable_page(pid_t pid, uint64_t page, double deadline, int *busy)
{
    *busy = 0;
    if (!page)
        return 0;
    for (;;) {
        char m[8];
        uint64_t done = 0;
        if (mem_read(pid, page + TR_MAGIC_OFF, m, 8) != 0 || memcmp(m, TR_MAGIC, 8) != 0)
            return 0; /* someone else's name, or another layout: a page of our own */
        if (mem_read(pid, page + TR_DONE_ALL, &done, 8) == 0 && done == 1)
            return page;
        if (now_s() > deadline) {
            *busy = 1;
            return 0;
        }
        pause_us(1000);
    }
}

/* One attempt on one picked thread: what it reads and where it reports. */
struct attempt {
    struct target *t;
    struct inject_call *c;
    const struct pick *pick;
    uint64_t restorer;   /* glibc's signal restorer: a signal frame's mark */
    uint64_t known_page; /* our page as the maps showed it before any stop, or 0 */
    char *err, *reason;  /* err: the call's failure; reason: why a thread was passed over */
    size_t errlen, reasonlen;
};

/* Seizes the picked thread and checks it is where it was judged (the process read, its
 * start time unchanged; the thread still its own; its registers still in that system call,
 * a syscall instruction before rip, no signal frame on its stack), then saves its state.
 * 0: stopped and saved; 1: released untouched (reason says why); -2, -4: as seize_stop
 * (seized for good; the kernel refused); -5: the pid is another process's now. */
static int take_thread(struct attempt *a, struct saved *s, double t0)
{
    pid_t tid = a->pick->tid, pid = a->t->pid;
    int sr = seize_stop(tid, t0 + 1.0, a->reason, a->reasonlen);
    if (sr == -2 || sr == -4)
        return sr;
    if (sr != 0)
        return 1;
    char task[64];
    snprintf(task, sizeof task, "/proc/%d/task/%d", (int)pid, (int)tid);
    if (a->t->start_time && target_start_time(pid) != a->t->start_time) {
        ptrace(PTRACE_DETACH, tid, 0, 0); /* seized, it cannot be reused from now on */
        snprintf(a->reason, a->reasonlen, "process %d is not the one read (its start time "
                 "changed: it exited and the pid was reused): not touched", (int)pid);
        return -5;
    }
    if (access(task, F_OK) != 0) {
        ptrace(PTRACE_DETACH, tid, 0, 0);
        snprintf(a->reason, a->reasonlen, "thread %d is no longer process %d's", (int)tid,
                 (int)pid);
        return 1;
    }
    unsigned char insn[2] = {0};
    int sh = 0, e = 0;
    const char *why = NULL;
    if (ptrace(PTRACE_GETREGS, tid, 0, &s->regs) != 0 || s->regs.rsp != a->pick->sp ||
        resume_point(&s->regs, a->pick->nr, &s->resume_rip, &s->resume_rax) != 0)
        why = "thread %d left its system call"; /* it moved on: untouched */
    else if (mem_read(pid, s->regs.rip - 2, insn, 2) != 0 || insn[0] != 0x0f || insn[1] != 0x05)
        why = "thread %d: the instruction before rip is not syscall";
    else if ((sh = pick_in_signal_handler(pid, s->regs.rsp, a->pick->stack_end, a->restorer)) != 0)
        why = sh > 0 ? "thread %d is inside a signal handler"
                     : "thread %d: its stack could not be scanned whole for a signal frame "
                       "(unreadable, or deeper than 128 KiB): refused";
    else if (save_thread(tid, s) != 0) {
        e = errno;
        why = "cannot read thread %d's state: %s";
    }
    if (!why)
        return 0;
    ptrace(PTRACE_DETACH, tid, 0, 0);
    snprintf(a->reason, a->reasonlen, why, (int)tid, strerror(e));
    return 1;
}

/* Our page for this call: the one known if no call uses it, else one mapped now on the
 * stopped thread. 0 with err set (the thread restored and released: the caller only
 * returns rc). */
static uint64_t page_for_call(struct attempt *a, const struct saved *s, double t0, int *rc)
{
    pid_t tid = a->pick->tid, pid = a->t->pid;
    int busy, sig;
    uint64_t page = usable_page(pid, a->known_page, 0, &busy); /* once more: no wait */
    a->c->new_page = 0;
    if (page)
        return page;
    if (busy) {
        ptrace(PTRACE_DETACH, tid, 0, 0);
        snprintf(a->err, a->errlen, "an earlier call in process %d has not finished", (int)pid);
        *rc = INJECT_TIMEOUT;
        return 0;
    }
    page = map_page(tid, &s->regs, t0 + 1.0, &sig, a->reason, a->reasonlen);
    a->c->new_page = 1;
    if (!page) { /* the thread as it was, and the signal that came meanwhile */
        ptrace(PTRACE_SETREGS, tid, 0, &s->regs);
        ptrace(PTRACE_DETACH, tid, 0, (void *)(long)sig);
        snprintf(a->err, a->errlen, "%s", a->reason);
        *rc = INJECT_FAILED;
    }
    return page;
}

/* Points the stopped thread at our page with every signal blocked and detaches it: from then
 * on it runs the call and restores itself. INJECT_OK with *page and *released; else the
 * thread is restored and released and err says why. */
static int start_call(struct attempt *a, const struct saved *s, double t0, uint64_t *page,
                      double *released)
{
    pid_t tid = a->pick->tid, pid = a->t->pid;
    int rc = INJECT_OK;
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old); /* only SIGKILL can end the tool from here */
    *page = page_for_call(a, s, t0, &rc);
    struct user_regs_struct jump = s->regs;
    jump.rip = *page;
    jump.rsp = *page + TR_STACK_TOP;
    jump.rax = 0;
    jump.orig_rax = (uint64_t)-1; /* nothing is restarted now: the trampoline does it */
    uint64_t none = ~0ull, zero = 0, one = 1;
    if (*page && (fill_page(pid, *page, 1, s, a->c) != 0 ||
                  mem_write(pid, *page + TR_DONE_ALL, &zero, 8) != 0 ||
                  ptrace(PTRACE_SETREGS, tid, 0, &jump) != 0)) {
        int e = errno;
        /* fill_page zeroed it: the page is free again (a new one is left mapped, unnamed:
         * unmapping needs another injection) */
        mem_write(pid, *page + TR_DONE_ALL, &one, 8);
        ptrace(PTRACE_SETREGS, tid, 0, &s->regs);
        ptrace(PTRACE_DETACH, tid, 0, 0);
        snprintf(a->err, a->errlen, "cannot prepare the call in process %d: %s", (int)pid,
                 strerror(e));
        rc = INJECT_FAILED;
    } else if (*page) {
        /* after the jump's SETREGS only: a tool killed before this leaves a thread whose
         * trampoline blocks them itself */
        ptrace(PTRACE_SETSIGMASK, tid, (void *)8, &none);
        ptrace(PTRACE_DETACH, tid, 0, 0);
        *released = now_s();
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* The thread is on its own: waits for its done flags under the call's deadline, then reads
 * the result and the output buffer. */
static int wait_call(struct attempt *a, uint64_t page, double released)
{
    struct inject_call *c = a->c;
    pid_t pid = a->t->pid;
    double call_deadline = released + c->call_wait_s;
    uint64_t flags[2] = {0, 0}; /* TR_DONE_CALL, TR_DONE_ALL */
    while (mem_read(pid, page + TR_DONE_CALL, flags, sizeof flags) == 0 && flags[1] != 1) {
        if (flags[0] == 1 && !c->call_s)
            c->call_s = now_s() - released;
        if (now_s() > call_deadline) {
            snprintf(a->err, a->errlen, "the call in thread %d has not returned after %.1f s; it "
                     "goes on, and the thread restores itself when it returns", (int)c->tid,
                     c->call_wait_s);
            return INJECT_TIMEOUT;
        }
        pause_us(50);
    }
    if (flags[1] != 1) {
        snprintf(a->err, a->errlen, "process %d is gone", (int)pid);
        return INJECT_FAILED;
    }
    if (!c->call_s)
        c->call_s = now_s() - released;
    mem_read(pid, page + TR_RESULT, &c->result, 8);
    if (c->out_len)
        mem_read(pid, page + TR_OUT, c->out, c->out_len < sizeof c->out ? c->out_len : sizeof c->out);
    a->t->page = page;
    return INJECT_OK;
}

/* One picked thread: taken, started, waited for. INJECT_NO_THREAD: passed over untouched. */
static int try_thread(struct attempt *a, const struct pick *p)
{
    static struct saved s;
    double t0 = now_s(), released = 0;
    uint64_t page = 0;
    a->pick = p;
    int took = take_thread(a, &s, t0);
    if (took < 0) {
        inject_left_seized = took == -2;
        snprintf(a->err, a->errlen, "%s", a->reason);
        return took == -4 ? INJECT_REFUSED : INJECT_FAILED;
    }
    if (took != 0)
        return INJECT_NO_THREAD;
    struct seccomp_calls sc = {inject_syscalls, a->c->syscalls, inject_syscalls_n,
                               a->c->n_syscalls, a->c->any_syscall};
    if (!mt_control("cmd-seccomp") && seccomp_check(a->t->pid, p->tid, &sc, a->err, a->errlen)) {
        ptrace(PTRACE_DETACH, p->tid, 0, 0); /* untouched: its filters were only read */
        return INJECT_REFUSED;
    }
    int rc = start_call(a, &s, t0, &page, &released);
    if (rc != INJECT_OK)
        return rc;
    a->c->tid = p->tid;
    a->c->stopped_s = released - t0;
    snprintf(a->c->syscall, sizeof a->c->syscall, "%s", target_syscall_name(p->nr));
    return wait_call(a, page, released);
}

int inject_run(struct target *t, struct inject_call *c, char *err, size_t errlen)
{
    double thread_deadline = now_s() + c->thread_wait_s;
    struct target_lock lock;
    int locked = target_lock_take(&lock, t, thread_deadline, err, errlen);
    if (locked != 0)
        return locked > 0 ? INJECT_NO_THREAD : INJECT_FAILED;
    char why[1024] = "", reason[512] = "";
    struct attempt a = {.t = t, .c = c, .err = err, .errlen = errlen, .reason = reason,
                        .reasonlen = sizeof reason,
                        .restorer = target_code(&t->libc, "\x48\xc7\xc0\x0f\x00\x00\x00\x0f\x05", 9)};
    int rc = INJECT_NO_THREAD, busy;
    while (rc == INJECT_NO_THREAD) {
        struct pick picks[64];
        int n = pick_threads(t->pid, c, picks, 64, why, sizeof why);
        a.known_page = n ? target_find_page(t->pid) : 0; /* read before any stop */
        if (a.known_page && !usable_page(t->pid, a.known_page, thread_deadline, &busy) && busy) {
            snprintf(err, errlen, "an earlier call in process %d has not finished", (int)t->pid);
            rc = INJECT_TIMEOUT; /* waited for with no thread stopped */
            break;
        }
        for (int i = 0; i < n && rc == INJECT_NO_THREAD; i++)
            rc = try_thread(&a, &picks[i]);
        if (rc == INJECT_NO_THREAD && now_s() > thread_deadline) {
            snprintf(err, errlen, "no thread of process %d was blocked in a system call outside the "
                     "allocator within %.1f s (%s%s%s); nothing was changed", (int)t->pid,
                     c->thread_wait_s, why[0] ? why : "no thread", reason[0] ? "; " : "", reason);
            break;
        }
        if (rc == INJECT_NO_THREAD)
            pause_us(2000);
    }
    target_lock_drop(&lock);
    return rc;
}
