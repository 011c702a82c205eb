/*
 * cli_hazard.c - unmodified glibc programs, one per hazard of issue 37, for
 * tests/e2e/test_cli_hazards.py (docs/command.md's table). It never links memtrim. Each mode
 * leaves exactly one thread blocked in a system call memtrim may take (the others wait on a
 * futex, in write or in a timed epoll_wait), prints "ready TID" with that thread's tid, then
 * answers "report" on
 * stdin with one JSON line (and "quit"), except where stdin is the hazard's own input:
 *   wakeup    a reader in read (raw syscall) with a SIGUSR1 handler without SA_RESTART; a
 *             thread signals it every 200 us. The handler classes each delivery by the
 *             interrupted context: in the read's syscall (-EINTR: an EINTR must follow), or
 *             elsewhere while the read is under way (a wake-up lost: the read restarts).
 *   wakeone   wakeup's reader and handler (with SA_RESTART if the next argument is
 *             "restart"; on an alternate stack of its own, SA_ONSTACK, with "altstack"), no
 *             signaller: stdin's "signal" sends it one SIGUSR1. With AVX its read checks
 *             ymm8-15 and MXCSR come back as they were (vec_bad); with "altstack", that
 *             nothing wrote the 8 KiB of its stack below its red zone and memtrim's slot
 *             (below_written: with SA_ONSTACK the kernel writes its frame on the alternate
 *             stack only).
 *   logger    malloc_stats() in a loop, the lines it writes holding an arena lock going
 *             through a 4 KiB pipe that a logger thread drains (in read: the thread taken).
 *   restorer  malloc_stats() raising SIGUSR1 while it holds the arena lock; its handler,
 *             installed with rt_sigaction and a restorer of its own, reads a line of stdin:
 *             the thread in read inside it holds the lock.
 *   df        a thread in read (raw syscall) with the direction flag set.
 *   eintr     threads in epoll_wait(-1), sigtimedwait without timeout, and recv on a socket
 *             with a 60 s receive timeout, each counting EINTR.
 *   errno     a reader that sets errno to 4242 before each read of a pipe and counts a
 *             successful read after which errno changed.
 *   busy      the counted loop's: two threads malloc, fill, check and free; one sleeps 5 ms at
 *             a time; a reader with a handler without SA_RESTART (wakeup's) and one with
 *             SA_RESTART, both signalled every 2 ms; a writer logs numbered lines through a
 *             pipe its logger thread reads and checks; a recv with a 50 ms receive timeout.
 *   badfs     a reader in a raw read whose thread pointer points at nothing (arch_prctl):
 *             memtrim cannot copy its thread block once its first call has mapped a page.
 *   epollmain the main thread alone, in epoll_wait(-1) on stdin, counting EINTR (a process
 *             that takes a pid the tool read: test_cli_tree.py).
 *   held      a holder thread inside malloc_stats() with main_arena's lock held, waiting on a
 *             semaphore (a futex: never taken) until stdin says "release"; errno's reader,
 *             which allocated first (an arena of its own: memtrim's raw thread allocates
 *             there) in read: the thread taken. memtrim's glibc thread then waits for that
 *             lock in malloc_trim for as long as the test holds it.
 *   loop      the main thread in poll (an event loop: a request pipe and stdin); another
 *             thread in dlopen of libcli-hazard-ctor.so, whose constructor asks the
 *             loop for a reply (hazard_wait_loop) and waits for it on a semaphore, the loader
 *             lock held; the loop replies once stdin says "go".
 * The main thread's "filter" adds a seccomp filter to every thread at once (TSYNC) that kills
 * the process on prctl(PR_SET_VMA), as another thread of a process may at any moment.
 * Threads: as said per mode; the main thread reads stdin (or loops, for "loop").
 */

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>

static atomic_long expect_eintr, eintr, lost, handled, changed, reads, stats_loops;
static atomic_long eintr_epoll, eintr_sigwait, eintr_recv, bad_results;
static atomic_int reader_tid, calm;
static volatile int in_read;
static int pipe_fd[2];

static pid_t gettid_(void)
{
    return (pid_t)syscall(SYS_gettid);
}

extern char hz_read_before[], hz_read_after[];

static int check_vec;        /* wakeone with AVX: ymm8-15 and MXCSR hold a pattern across reads */
static atomic_long vec_bad; /* reads after which they did not */
/* wakeone altstack: the reader's stack below its red zone and memtrim's 16-byte slot, BELOW
 * bytes, holds a pattern across reads; with SA_ONSTACK the kernel writes nothing there */
enum { BELOW = 8192, BELOW_FROM = 128 + 16 };
static int probe_below;
static atomic_long below_written; /* reads after which it did not */

/* read(2) made here, so that the handler knows where the syscall is: in_read is 1 from just
 * before it until just after. With check_vec, ymm8-15 (whole: their upper halves too) and
 * MXCSR (rounding down) are set before and compared after: the thread's vector state must
 * come back as it was, whatever restored the thread. Nothing between the asm blocks uses
 * vector registers. */
static long raw_read(int fd, void *buf, size_t n)
{
    static const uint64_t pat[32] = {
        0x0101010101010101, 0x0202020202020202, 0x0303030303030303, 0x0404040404040404,
        0x0505050505050505, 0x0606060606060606, 0x0707070707070707, 0x0808080808080808,
        0x0909090909090909, 0x0a0a0a0a0a0a0a0a, 0x0b0b0b0b0b0b0b0b, 0x0c0c0c0c0c0c0c0c,
        0x0d0d0d0d0d0d0d0d, 0x0e0e0e0e0e0e0e0e, 0x0f0f0f0f0f0f0f0f, 0x1010101010101010,
        0x1111111111111111, 0x1212121212121212, 0x1313131313131313, 0x1414141414141414,
        0x1515151515151515, 0x1616161616161616, 0x1717171717171717, 0x1818181818181818,
        0x1919191919191919, 0x1a1a1a1a1a1a1a1a, 0x1b1b1b1b1b1b1b1b, 0x1c1c1c1c1c1c1c1c,
        0x1d1d1d1d1d1d1d1d, 0x1e1e1e1e1e1e1e1e, 0x1f1f1f1f1f1f1f1f, 0x2020202020202020};
    uint64_t got[32];
    uint32_t down = 0x3f80, mx = 0, dflt = 0x1f80;
    if (check_vec)
        __asm__ volatile("vmovdqu 0(%0), %%ymm8\n\tvmovdqu 32(%0), %%ymm9\n\t"
                         "vmovdqu 64(%0), %%ymm10\n\tvmovdqu 96(%0), %%ymm11\n\t"
                         "vmovdqu 128(%0), %%ymm12\n\tvmovdqu 160(%0), %%ymm13\n\t"
                         "vmovdqu 192(%0), %%ymm14\n\tvmovdqu 224(%0), %%ymm15\n\t"
                         "ldmxcsr %1"
                         :
                         : "r"(pat), "m"(down)
                         : "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",
                           "xmm15", "memory");
    if (probe_below) {
        unsigned long cnt = BELOW / 8, dst;
        __asm__ volatile("lea %c[off](%%rsp), %%rdi\n\trep stosq"
                         : "+c"(cnt), "=&D"(dst)
                         : [off] "i"(-(BELOW_FROM + BELOW)), "a"(0x5a5a5a5a5a5a5a5aUL)
                         : "memory");
    }
    long ret;
    __asm__ volatile(".globl hz_read_before\nhz_read_before:\n\t"
                     "movl $1, %[flag]\n\t"
                     "syscall\n\t"
                     ".globl hz_read_after\nhz_read_after:\n\t"
                     "movl $0, %[flag]\n\t"
                     : "=a"(ret), [flag] "+m"(in_read)
                     : "a"(0L), "D"((long)fd), "S"(buf), "d"(n)
                     : "rcx", "r11", "memory");
    if (probe_below) { /* read in place: no call puts a frame there first */
        uintptr_t sp;
        __asm__ volatile("mov %%rsp, %0" : "=r"(sp));
        const volatile uint64_t *b = (const volatile uint64_t *)(sp - BELOW_FROM - BELOW);
        for (size_t i = 0; i < BELOW / 8; i++)
            if (b[i] != 0x5a5a5a5a5a5a5a5aUL) {
                below_written++;
                break;
            }
    }
    if (check_vec) {
        __asm__ volatile("vmovdqu %%ymm8, 0(%1)\n\tvmovdqu %%ymm9, 32(%1)\n\t"
                         "vmovdqu %%ymm10, 64(%1)\n\tvmovdqu %%ymm11, 96(%1)\n\t"
                         "vmovdqu %%ymm12, 128(%1)\n\tvmovdqu %%ymm13, 160(%1)\n\t"
                         "vmovdqu %%ymm14, 192(%1)\n\tvmovdqu %%ymm15, 224(%1)\n\t"
                         "stmxcsr %0\n\tldmxcsr %2\n\tvzeroupper"
                         : "=m"(mx)
                         : "r"(got), "m"(dflt)
                         : "memory");
        vec_bad += memcmp(got, pat, sizeof pat) != 0 || mx != down;
    }
    return ret;
}

static char *alt;                   /* wakeone altstack: the reader's alternate stack */
static atomic_long on_alt, alt_changed; /* handlers run on it; reads after which it changed */
enum { ALT_SIZE = 1 << 16 };

static void wakeup_handler(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
    ucontext_t *uc = ctx;
    uintptr_t rip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    long rax = (long)uc->uc_mcontext.gregs[REG_RAX];
    char here;
    on_alt += alt && &here >= alt && &here < alt + ALT_SIZE;
    handled++;
    if (!in_read)
        return;
    if (rip == (uintptr_t)hz_read_after && rax == -EINTR) {
        expect_eintr++; /* the kernel interrupted the read: it returns EINTR next */
        in_read = 0;    /* over: a second signal delivered before it returns is no second EINTR */
    }
    else if (rip < (uintptr_t)hz_read_before || rip > (uintptr_t)hz_read_after)
        lost++; /* delivered elsewhere while the program is in its read: the read restarts */
}

static void *wakeup_reader(void *arg)
{
    (void)arg;
    if (alt) {
        stack_t ss = {.ss_sp = alt, .ss_size = ALT_SIZE};
        sigaltstack(&ss, NULL);
    }
    reader_tid = gettid_();
    char c;
    for (;;) {
        long n = raw_read(pipe_fd[0], &c, 1);
        if (n == -EINTR)
            eintr++;
        else if (n >= 0)
            reads++;
        stack_t now;
        if (alt && (sigaltstack(NULL, &now) != 0 || now.ss_sp != alt ||
                    now.ss_size != ALT_SIZE || now.ss_flags != 0))
            alt_changed++;
    }
    return NULL;
}

static void *signaller(void *arg)
{
    (void)arg;
    int word = 0;
    struct timespec ts = {0, 200000};
    while (!reader_tid)
        sched_yield();
    for (;;) { /* a timed futex wait: not a call memtrim takes */
        syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
        if (!calm)
            syscall(SYS_tgkill, getpid(), reader_tid, SIGUSR1);
    }
    return NULL;
}

static void *logger(void *arg)
{
    (void)arg;
    reader_tid = gettid_();
    char buf[64];
    while (read(pipe_fd[0], buf, sizeof buf) > 0 || errno == EINTR)
        ;
    return NULL;
}

/* malloc_stats' stream: its lines written while it holds an arena's lock (from "Arena N:" to
 * the arena's last line; the totals after "Total" are written unlocked and dropped) go to the
 * pipe (logger) or, the first time, raise SIGUSR1 (restorer): every block then holds a lock. */
static int in_arena, raise_once;
static ssize_t stats_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    if (!strncmp(buf, "Arena", 5))
        in_arena = 1;
    else if (!strncmp(buf, "Total", 5))
        in_arena = 0;
    if (in_arena && raise_once && !handled) {
        raise_once = 0;
        syscall(SYS_tgkill, getpid(), gettid_(), SIGUSR1);
    }
    for (size_t done = 0; in_arena && !raise_once && done < n;) {
        ssize_t w = write(pipe_fd[1], buf + done, n - done);
        if (w > 0)
            done += (size_t)w;
        else if (errno != EINTR)
            break;
    }
    return (ssize_t)n;
}

static void stats_to_cookie(void)
{
    cookie_io_functions_t io = {.write = stats_write};
    FILE *f = fopencookie(NULL, "w", io);
    if (f) {
        setvbuf(f, NULL, _IONBF, 0);
        stderr = f;
    }
}

static void *stats_loop(void *arg)
{
    (void)arg;
    for (;;) {
        malloc_stats();
        stats_loops++;
    }
    return NULL;
}

static void *arena_user(void *arg)
{
    (void)arg;
    void *p = malloc(1000);
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&m);
    for (;;)
        pthread_cond_wait(&cv, &m); /* a futex, holding its arena */
    free(p);
    return NULL;
}

extern void hz_restorer(void);
__asm__(".globl hz_restorer\nhz_restorer:\n\tmov $15, %rax\n\tsyscall\n\thlt\n");

static void restorer_handler(int sig)
{
    (void)sig;
    char c;
    while (read(0, &c, 1) == 1 && c != '\n') /* in a handler, an arena lock held */
        ;
    handled++;
}

struct k_sigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
};

static void *stats_in_handler(void *arg)
{
    (void)arg;
    reader_tid = gettid_();
    struct k_sigaction ka = {restorer_handler, 0x04000000 /* SA_RESTORER */ | SA_RESTART,
                             hz_restorer, 0};
    syscall(SYS_rt_sigaction, SIGUSR1, &ka, NULL, 8);
    while (!handled) {
        malloc_stats();
        stats_loops++;
    }
    for (;;)
        pause();
    return NULL;
}

static void *df_reader(void *arg)
{
    (void)arg;
    reader_tid = gettid_();
    char c;
    for (;;) {
        long ret;
        __asm__ volatile("std\n\tsyscall\n\tcld" : "=a"(ret)
                         : "a"(0L), "D"((long)pipe_fd[0]), "S"(&c), "d"(1L)
                         : "rcx", "r11", "memory");
        reads += ret == 1;
    }
    return NULL;
}

static void *epoll_waiter(void *arg)
{
    (void)arg;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, pipe_fd[0], &ev);
    for (;;)
        if (epoll_wait(ep, &ev, 1, -1) < 0 && errno == EINTR)
            eintr_epoll++;
    return NULL;
}

static void *sig_waiter(void *arg)
{
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    for (;;)
        if (sigtimedwait(&set, NULL, NULL) < 0 && errno == EINTR)
            eintr_sigwait++;
    return NULL;
}

static void *recv_waiter(void *arg)
{
    (void)arg;
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
    struct timeval tv = {60, 0};
    setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    reader_tid = gettid_();
    char c;
    for (;;)
        if (recv(sv[0], &c, 1, 0) < 0 && errno == EINTR)
            eintr_recv++;
    return NULL;
}

/* badfs: a thread whose thread pointer points at nothing (arch_prctl), blocked in a raw
 * read: memtrim cannot copy its thread block, after its first call has mapped a page on it.
 * From the arch_prctl on it touches no TLS: raw system calls only. */
static void *badfs_reader(void *arg)
{
    (void)arg;
    static char c;
    long fd = pipe_fd[0];
    reader_tid = gettid_();
    __asm__ volatile("mov $158, %%eax\n\t" /* arch_prctl(ARCH_SET_FS, 0x10000) */
                     "mov $0x1002, %%edi\n\t"
                     "mov $0x10000, %%esi\n\t"
                     "syscall\n\t"
                     "1:\n\t"
                     "xor %%eax, %%eax\n\t" /* read(fd, &c, 1), for ever */
                     "mov %0, %%rdi\n\t"
                     "lea %1, %%rsi\n\t"
                     "mov $1, %%edx\n\t"
                     "syscall\n\t"
                     "jmp 1b"
                     :
                     : "r"(fd), "m"(c)
                     : "rax", "rdi", "rsi", "rdx", "rcx", "r11", "memory");
    return NULL;
}

static void *errno_reader(void *arg)
{
    (void)arg;
    reader_tid = gettid_();
    char c;
    for (;;) {
        errno = 4242;
        ssize_t n = read(pipe_fd[0], &c, 1);
        if (n == 1) {
            reads++;
            changed += errno != 4242;
        } else {
            bad_results++; /* a pipe read of 1 byte, no handler: 1, always */
        }
    }
    return NULL;
}

/* held mode: main_arena's lock held by malloc_stats' first line until "release". */
static sem_t hold_sem;
static atomic_int holding;

static ssize_t held_write(void *cookie, const char *buf, size_t n)
{
    (void)cookie;
    (void)buf;
    if (!holding) {
        holding = 1;
        while (sem_wait(&hold_sem) != 0)
            ;
        holding = 2;
    }
    return (ssize_t)n;
}

static void *arena_holder(void *arg)
{
    (void)arg;
    malloc_stats();
    int word = 0;
    for (;;) /* a futex: never taken */
        syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    return NULL;
}

static void *held_reader(void *arg)
{
    static void *volatile keep; /* kept: a malloc never used may be left out */
    keep = malloc(1000);        /* its own arena, before the holder holds the main one */
    return keep ? errno_reader(arg) : NULL;
}

/* busy mode: the counted loop's target (test_cli_hazards.py test_counted_loop). */
static atomic_long corrupt, iterations, early_sleeps, eintr_restart, log_gaps, logged;
static int log_pipe[2], restart_pipe[2];

static void *churn(void *arg)
{
    (void)arg;
    for (unsigned i = 1;; i++) {
        size_t n = 64 + (i * 7919) % 8192;
        unsigned char *b = malloc(n);
        if (!b)
            continue;
        memset(b, (int)(i & 0xff), n);
        for (size_t k = 0; k < n; k += 97)
            corrupt += b[k] != (unsigned char)(i & 0xff);
        free(b);
        iterations++;
    }
    return NULL;
}

static void *sleeper(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec a, b, d = {0, 5000000};
        clock_gettime(CLOCK_MONOTONIC, &a);
        clock_nanosleep(CLOCK_MONOTONIC, 0, &d, NULL);
        clock_gettime(CLOCK_MONOTONIC, &b);
        early_sleeps += (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 5000000;
    }
    return NULL;
}

static void restart_handler(int sig)
{
    (void)sig;
    handled++;
}

static void *restart_reader(void *arg)
{
    (void)arg;
    char c;
    for (;;)
        if (read(restart_pipe[0], &c, 1) < 0 && errno == EINTR)
            eintr_restart++; /* SA_RESTART: never */
    return NULL;
}

static void *log_writer(void *arg)
{
    (void)arg;
    char line[32];
    int word = 0;
    struct timespec ts = {0, 1000000};
    for (long seq = 1;; seq++) {
        int n = snprintf(line, sizeof line, "%ld\n", seq);
        if (write(log_pipe[1], line, (size_t)n) != n)
            log_gaps++;
        syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
    }
    return NULL;
}

static void *log_reader(void *arg)
{
    (void)arg;
    char buf[256];
    long next = 1, cur = 0;
    for (;;) {
        ssize_t n = read(log_pipe[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            log_gaps++; /* no handler on this thread's signals: never */
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n') {
                cur = cur * 10 + (buf[i] - '0');
                continue;
            }
            log_gaps += cur != next;
            next = cur + 1;
            cur = 0;
            logged++;
        }
    }
    return NULL;
}

static void *recv_timed(void *arg)
{
    (void)arg;
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
    struct timeval tv = {0, 50000};
    setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char c;
    for (;;)
        if (recv(sv[0], &c, 1, 0) < 0 && errno == EINTR)
            eintr_recv++;
    return NULL;
}

static void *busy_signaller(void *arg)
{
    pid_t restart_tid = (pid_t)(intptr_t)arg;
    int word = 0;
    struct timespec ts = {0, 2000000};
    while (!reader_tid)
        sched_yield();
    for (;;) {
        syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
        if (calm)
            continue;
        syscall(SYS_tgkill, getpid(), reader_tid, SIGUSR1);
        syscall(SYS_tgkill, getpid(), restart_tid, SIGUSR2);
    }
    return NULL;
}

static atomic_int restart_tid_;
static void *restart_reader_start(void *arg)
{
    restart_tid_ = gettid_();
    return restart_reader(arg);
}

/* loop mode: the constructor of libmemtrim-cli-hazard-ctor.so calls this (the executable
 * exports it: -rdynamic) with the loader lock held. */
static sem_t reply;
static int req_pipe[2];
__attribute__((visibility("default"))) void hazard_wait_loop(void)
{
    reader_tid = gettid_();
    if (write(req_pipe[1], "r", 1) != 1)
        return;
    while (sem_wait(&reply) != 0)
        ;
}

static void *ctor_loader(void *arg)
{
    if (!dlopen((const char *)arg, RTLD_NOW))
        fprintf(stderr, "dlopen: %s\n", dlerror());
    handled++;
    return NULL;
}

static void event_loop(void)
{
    int asked = 0, go = 0;
    char buf[64];
    for (;;) {
        struct pollfd p[2] = {{req_pipe[0], POLLIN, 0}, {0, POLLIN, 0}};
        if (poll(p, 2, -1) < 0)
            continue;
        if (p[0].revents & POLLIN)
            asked += read(req_pipe[0], buf, 1) == 1;
        if (p[1].revents & POLLIN) {
            ssize_t n = read(0, buf, sizeof buf - 1);
            if (n <= 0)
                exit(0);
            buf[n] = 0;
            if (strstr(buf, "go"))
                go = 1;
            if (strstr(buf, "report")) {
                printf("{\"asked\": %d, \"go\": %d, \"loaded\": %ld}\n", asked, go, (long)handled);
                fflush(stdout);
            }
            if (strstr(buf, "quit"))
                exit(0);
        }
        if (asked && go) {
            asked = go = 0;
            sem_post(&reply);
        }
    }
}

static void start(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    pthread_create(&t, NULL, fn, arg);
}

/* "filter": a seccomp filter on every thread at once (SECCOMP_FILTER_FLAG_TSYNC) that kills
 * the process on prctl(PR_SET_VMA, ...), the first system call memtrim's page code makes after
 * its mask; the process itself never makes it. 0, or -errno. */
static int add_filter(void)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_prctl, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x53564d41, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0)
        return -errno;
    return 0;
}

static void report(void)
{
    printf("{\"corrupt\": %ld, \"iterations\": %ld, \"early_sleeps\": %ld, "
           "\"eintr_restart\": %ld, \"log_gaps\": %ld, \"logged\": %ld, ",
           (long)corrupt, (long)iterations, (long)early_sleeps, (long)eintr_restart,
           (long)log_gaps, (long)logged);
    printf("\"expect_eintr\": %ld, \"eintr\": %ld, \"lost\": %ld, \"handled\": %ld, "
           "\"reads\": %ld, \"changed\": %ld, \"stats_loops\": %ld, \"eintr_epoll\": %ld, "
           "\"eintr_sigwait\": %ld, \"eintr_recv\": %ld, \"recv_tid\": %d, \"bad_results\": %ld, "
           "\"vec_checked\": %d, \"vec_bad\": %ld, \"on_alt\": %ld, \"alt_changed\": %ld, "
           "\"below_written\": %ld}\n",
           (long)expect_eintr, (long)eintr, (long)lost, (long)handled, (long)reads,
           (long)changed, (long)stats_loops, (long)eintr_epoll, (long)eintr_sigwait,
           (long)eintr_recv, (int)reader_tid, (long)bad_results, check_vec, (long)vec_bad,
           (long)on_alt, (long)alt_changed, (long)below_written);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    setvbuf(stdin, NULL, _IONBF, 0); /* a line at a time: the epoll below sees the rest */
    static char out_buf[4096]; /* printing never allocates (restorer: the lock is held) */
    setvbuf(stdout, out_buf, _IOLBF, sizeof out_buf);
    if (pipe2(pipe_fd, O_CLOEXEC) != 0 || pipe2(req_pipe, O_CLOEXEC) != 0)
        return 1;
    sigset_t usr2;
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &usr2, NULL);
    if (!strcmp(mode, "wakeup")) {
        struct sigaction sa = {.sa_sigaction = wakeup_handler, .sa_flags = SA_SIGINFO};
        sigaction(SIGUSR1, &sa, NULL);
        start(wakeup_reader, NULL);
        start(signaller, NULL);
    } else if (!strcmp(mode, "wakeone")) {
        int restart = argc > 2 && !strcmp(argv[2], "restart");
        if (argc > 2 && !strcmp(argv[2], "altstack"))
            alt = malloc(ALT_SIZE);
        probe_below = alt != NULL;
        struct sigaction sa = {.sa_sigaction = wakeup_handler,
                               .sa_flags = SA_SIGINFO | (restart ? SA_RESTART : 0) |
                                           (alt ? SA_ONSTACK : 0)};
        sigaction(SIGUSR1, &sa, NULL);
        check_vec = __builtin_cpu_supports("avx");
        start(wakeup_reader, NULL);
    } else if (!strcmp(mode, "logger") || !strcmp(mode, "restorer")) {
        fcntl(pipe_fd[1], F_SETPIPE_SZ, 4096);
        for (int i = 0; i < 4; i++)
            start(arena_user, NULL);
        stats_to_cookie();
        raise_once = mode[0] == 'r';
        if (mode[0] == 'l') {
            start(logger, NULL);
            start(stats_loop, NULL);
        } else {
            start(stats_in_handler, NULL);
        }
    } else if (!strcmp(mode, "df")) {
        start(df_reader, NULL);
    } else if (!strcmp(mode, "eintr")) {
        start(epoll_waiter, NULL);
        start(sig_waiter, NULL);
        start(recv_waiter, NULL);
    } else if (!strcmp(mode, "errno")) {
        start(errno_reader, NULL);
    } else if (!strcmp(mode, "held")) {
        sem_init(&hold_sem, 0, 0);
        start(held_reader, NULL);
        while (!reader_tid)
            sched_yield();
        cookie_io_functions_t io = {.write = held_write};
        FILE *f = fopencookie(NULL, "w", io);
        if (!f)
            return 1;
        setvbuf(f, NULL, _IONBF, 0);
        stderr = f;
        start(arena_holder, NULL);
        while (holding != 1)
            sched_yield();
    } else if (!strcmp(mode, "busy")) {
        if (pipe2(log_pipe, O_CLOEXEC) != 0 || pipe2(restart_pipe, O_CLOEXEC) != 0)
            return 1;
        struct sigaction sa = {.sa_sigaction = wakeup_handler, .sa_flags = SA_SIGINFO};
        sigaction(SIGUSR1, &sa, NULL);
        struct sigaction sr = {.sa_handler = restart_handler, .sa_flags = SA_RESTART};
        sigaction(SIGUSR2, &sr, NULL);
        pthread_sigmask(SIG_UNBLOCK, &usr2, NULL);
        start(churn, NULL);
        start(churn, NULL);
        start(sleeper, NULL);
        start(restart_reader_start, NULL);
        start(log_reader, NULL);
        start(log_writer, NULL);
        start(recv_timed, NULL);
        start(wakeup_reader, NULL);
        while (!restart_tid_)
            sched_yield();
        start(busy_signaller, (void *)(intptr_t)restart_tid_);
        pthread_sigmask(SIG_BLOCK, &usr2, NULL);
    } else if (!strcmp(mode, "loop") && argc > 2) {
        sem_init(&reply, 0, 0);
        start(ctor_loader, argv[2]);
        while (!reader_tid)
            sched_yield();
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        event_loop();
    } else if (!strcmp(mode, "badfs")) {
        start(badfs_reader, NULL);
    } else if (!strcmp(mode, "epollmain")) {
        reader_tid = gettid_(); /* the main thread alone, in epoll_wait(-1) below */
    } else {
        fprintf(stderr, "usage: %s wakeup|wakeone [restart|altstack]|logger|restorer|held|df|eintr|errno|badfs|epollmain|loop LIB\n",
                argv[0]);
        return 2;
    }
    while (!reader_tid)
        sched_yield();
    printf("ready %d\n", (int)reader_tid);
    fflush(stdout);
    if (!strcmp(mode, "restorer")) {
        int word = 0;
        for (;;) /* stdin is the handler's; the test ends us (a futex: never taken) */
            syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    }
    char line[128] = "";
    pthread_sigmask(SIG_BLOCK, &(sigset_t){{~0ul}}, NULL);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev);
    /* the main thread waits in a timed epoll_wait, which memtrim never takes: only the mode's
     * thread is there to take (epollmain: an untimed one, each EINTR counted) */
    int timeout = !strcmp(mode, "epollmain") ? -1 : 500;
    for (;;) {
        int n = epoll_wait(ep, &ev, 1, timeout);
        if (n < 0 && errno == EINTR)
            eintr_epoll++;
        if (n <= 0)
            continue;
        if (!fgets(line, sizeof line, stdin))
            break;
        if (!line[0])
            continue;
        if (!strncmp(line, "report", 6))
            report();
        else if (!strncmp(line, "calm", 4))
            calm = 1; /* the signaller stops: the counters settle */
        else if (!strncmp(line, "feed", 4))
            (void)!write(pipe_fd[1], "x", 1);
        else if (!strncmp(line, "quit", 4))
            return 0;
        else if (!strncmp(line, "signal", 6)) /* wakeone: one SIGUSR1 for the reader */
            syscall(SYS_tgkill, getpid(), (int)reader_tid, SIGUSR1);
        else if (!strncmp(line, "release", 7)) /* held: main_arena's lock let go */
            sem_post(&hold_sem);
        else if (!strncmp(line, "filter", 6))
            printf("filtered %d\n", add_filter()), fflush(stdout);
        line[0] = 0;
    }
    return 0;
}
