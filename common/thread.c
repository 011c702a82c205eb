/*
 * thread.c - starting memtrim's own threads, the allocator's hook on each as it starts,
 * and their CPU time: every thread mt_thread_start starts, and every libmicrohttpd thread
 * that called mt_thread_enter, is listed with its CPU clock (pthread_getcpuclockid) until
 * it ends; at its end (a thread-specific key's destructor, on that thread) its CPU time
 * moves into the sum of the threads that ended. mt_threads_cpu_seconds reads them all.
 *
 * Locking: threads_lock guards the table and the sum; a listed thread takes it to leave,
 * so a clock read under it belongs to a live thread. The hook is an atomic pointer set at
 * start (memtrim.c), each thread's "entered" flag its own. After fork() the child keeps
 * the parent's table: entries of another pid are dropped on the next read, and the sum
 * starts again at 0; and threads_lock anew (threads_fork_child): another thread of the
 * parent may have held it at the fork, and nothing it guarded there is the child's.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "control.h"

#define THREADS_MAX 64 /* memtrim has about ten; a full table leaves a thread uncounted */

static _Atomic(mt_thread_enter_fn) thread_enter_fn;
static __thread int thread_entered;

static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    clockid_t clock;
    pid_t pid; /* 0: a free slot */
} threads[THREADS_MAX];
static double ended_seconds; /* CPU time of the listed threads that ended, in ended_pid */
static pid_t ended_pid;
static pthread_key_t thread_key;
static int thread_key_ok;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;
static pthread_once_t threads_fork_once = PTHREAD_ONCE_INIT;

/* The child of a fork: threads_lock as new (held or not by a thread of the parent, which
 * is not here; every entry is of the parent's pid, dropped on the next read). */
static void threads_fork_child(void)
{
    static const pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    threads_lock = fresh;
}

static void threads_fork_install(void)
{
    if (mt_control("suite-fork-child-lock")) /* d56556b's defect: the child keeps the lock */
        return;
    pthread_atfork(NULL, NULL, threads_fork_child);
}

static double clock_seconds(clockid_t clock)
{
    struct timespec ts;
    if (clock_gettime(clock, &ts))
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The sum of the threads that ended, in this process (a forked child starts at 0). */
static double *ended_locked(pid_t pid)
{
    if (ended_pid != pid) {
        ended_pid = pid;
        ended_seconds = 0;
    }
    return &ended_seconds;
}

/* A listed thread ends: its CPU time into the sum, its slot free. On that thread. */
static void thread_leave(void *slot)
{
    size_t i = (size_t)(uintptr_t)slot - 1;
    pthread_mutex_lock(&threads_lock);
    if (i < THREADS_MAX && threads[i].pid == getpid()) {
        *ended_locked(threads[i].pid) += clock_seconds(CLOCK_THREAD_CPUTIME_ID);
        threads[i].pid = 0;
    }
    pthread_mutex_unlock(&threads_lock);
}

static void thread_key_make(void)
{
    pthread_once(&threads_fork_once, threads_fork_install);
    thread_key_ok = pthread_key_create(&thread_key, thread_leave) == 0;
}

/* List the calling thread with its CPU clock (once per thread, from mt_thread_enter). */
static void thread_list(void)
{
    clockid_t clock;
    pthread_once(&thread_key_once, thread_key_make);
    if (!thread_key_ok || pthread_getcpuclockid(pthread_self(), &clock))
        return;
    pid_t pid = getpid();
    pthread_mutex_lock(&threads_lock);
    for (size_t i = 0; i < THREADS_MAX; i++) {
        if (threads[i].pid == pid)
            continue;
        threads[i].clock = clock;
        threads[i].pid = pid;
        pthread_setspecific(thread_key, (void *)(uintptr_t)(i + 1));
        break;
    }
    pthread_mutex_unlock(&threads_lock);
}

double mt_threads_cpu_seconds(void)
{
    pthread_once(&threads_fork_once, threads_fork_install);
    pid_t pid = getpid();
    pthread_mutex_lock(&threads_lock);
    double sum = *ended_locked(pid);
    for (size_t i = 0; i < THREADS_MAX; i++) {
        if (threads[i].pid == 0)
            continue;
        if (threads[i].pid != pid)
            threads[i].pid = 0; /* the parent's, before a fork: not a thread here */
        else
            sum += clock_seconds(threads[i].clock);
    }
    pthread_mutex_unlock(&threads_lock);
    return sum;
}

void mt_thread_set_enter(mt_thread_enter_fn fn)
{
    atomic_store(&thread_enter_fn, fn);
}

void mt_thread_enter(void)
{
    if (thread_entered)
        return;
    thread_entered = 1;
    mt_thread_enter_fn fn = atomic_load(&thread_enter_fn);
    if (fn)
        fn();
    thread_list();
}

struct thread_start {
    void *(*fn)(void *);
    void *arg;
};

static void *thread_trampoline(void *p)
{
    mt_thread_enter(); /* before this thread's first allocation below */
    struct thread_start ts = *(struct thread_start *)p;
    free(p);
    return ts.fn(ts.arg);
}

int mt_thread_start(pthread_t *thread, const char *name, void *(*fn)(void *), void *arg)
{
    sigset_t all, saved;
    struct thread_start *ts = malloc(sizeof(*ts));
    if (!ts)
        return ENOMEM;
    ts->fn = fn;
    ts->arg = arg;
    /* The new thread inherits the mask in force here: block everything for it. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    int rc = pthread_create(thread, NULL, thread_trampoline, ts);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (rc == 0)
        pthread_setname_np(*thread, name);
    else
        free(ts);
    return rc;
}
