/*
 * test_cli_prio.c - the weight of memtrim's glibc thread for its call (cli/prio.c): the nice it
 * gets (10 levels above the taken thread's, never past -20), the stat fields it reads, and the
 * raise on live threads of this process: a thread born during the call at the nice it
 * inherited is raised, with SCHED_RESET_ON_FORK (a thread it starts is not), and lowered back;
 * a thread born before, at another nice, the process's own main thread, or one gone is left as
 * it is. Without CAP_SYS_NICE the raise is refused with the kernel's reason and nothing
 * changes. The test's main thread and the threads it starts.
 */
#include "harness.h"

#include "prio.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static pid_t tid_self(void)
{
    return (pid_t)syscall(SYS_gettid);
}

static void test_target_nice(void)
{
    CHECK_EQ_INT(prio_target_nice(0, PRIO_RAISE), -10);
    CHECK_EQ_INT(prio_target_nice(19, PRIO_RAISE), 9);
    CHECK_EQ_INT(prio_target_nice(-15, PRIO_RAISE), -20);
    CHECK_EQ_INT(prio_target_nice(-20, PRIO_RAISE), -20);
    CHECK_EQ_INT(prio_target_nice(5, 3), 2);
    CHECK_EQ_INT(prio_target_nice(0, 20), -20);
}

static void test_parse_stat(void)
{
    /* fields 3..41 of a thread's stat: nice 19th (-5), start time 22nd, policy 41st (3) */
    static const char tail[] = " S 1 1 1 0 -1 4194560 100 0 0 0 5 6 0 0 25 -5 3 0 987654 "
                               "1000 200 18446744073709551615 1 2 3 4 5 0 0 0 0 0 0 0 17 1 0 3 "
                               "0 0 0\n";
    char text[512];
    int nice = 99;
    unsigned long long start = 0;
    unsigned policy = 99;
    snprintf(text, sizeof text, "4243 (server) x)%s", tail); /* a name with ") " in it */
    CHECK_EQ_INT(prio_parse_stat(text, &nice, &start, &policy), 0);
    CHECK_EQ_INT(nice, -5);
    CHECK(start == 987654);
    CHECK_EQ_INT((int)policy, 3);
    CHECK_EQ_INT(prio_parse_stat("4243 (server) S 1 1 1 0 -1 4 1 0 0 0 5 6 0 0 25 -5 3 0 9\n",
                                 &nice, &start, &policy), -1); /* cut before the policy */
    CHECK_EQ_INT(prio_parse_stat("1 (a) S 1 1 1 0 -1 4 1 0 0 0 5 6 0 0 25 -21 3 0 9 1 2 3 4 5 6 "
                                 "7 8 9 10 11 12 13 14 15 16 17 18 19 0\n", &nice, &start,
                                 &policy), -1); /* a nice no kernel writes */
    CHECK_EQ_INT(prio_parse_stat("no name here", &nice, &start, &policy), -1);
}

static void test_nspid(void)
{
    CHECK_EQ_INT((int)prio_parse_nspid("Name:\tx\nTgid:\t9\nNSpid:\t12345\t7\nNSpgid:\t1\n"), 7);
    CHECK_EQ_INT((int)prio_parse_nspid("NSpid:\t42"), 42); /* first line, no newline */
    CHECK_EQ_INT((int)prio_parse_nspid("Name:\tNSpid:\t5\n"), 0); /* a name, not the line */
    CHECK_EQ_INT((int)prio_parse_nspid("Name:\tx\nNSpid:\t12\tabc\n"), -1);
    CHECK_EQ_INT((int)prio_parse_nspid("Name:\tx\nNSpid:\n"), -1);
    /* this process's own namespace: its numbers as they are */
    pid_t self = tid_self();
    CHECK_EQ_INT((int)prio_our_tid(getpid(), self), (int)self);
}

/* A thread that waits to be told to start one more thread, and reports that one's nice. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static atomic_int worker_tid, child_nice = 99, go, quit;

static void *child(void *arg)
{
    (void)arg;
    errno = 0;
    child_nice = getpriority(PRIO_PROCESS, (id_t)tid_self());
    return NULL;
}

static void *worker(void *arg)
{
    (void)arg;
    worker_tid = tid_self();
    pthread_mutex_lock(&mu);
    while (!quit) {
        if (go) {
            go = 0;
            pthread_t t;
            if (pthread_create(&t, NULL, child, NULL) == 0)
                pthread_join(t, NULL);
            pthread_cond_broadcast(&cv);
        }
        pthread_cond_wait(&cv, &mu);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void ask_worker(void)
{
    pthread_mutex_lock(&mu);
    go = 1;
    pthread_cond_broadcast(&cv);
    while (go)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void test_raise_and_lower(void)
{
    pid_t pid = getpid(), main_tid = tid_self();
    errno = 0;
    int base = getpriority(PRIO_PROCESS, (id_t)main_tid);
    if (base - PRIO_RAISE < -20) { /* this test already at -11 or less: nothing to raise */
        CHECK_MSG(0, "the test runs at nice %d", base);
        return;
    }
    unsigned long long since = prio_ticks_now();
    pthread_t w;
    CHECK(pthread_create(&w, NULL, worker, NULL) == 0);
    while (!worker_tid)
        sched_yield();
    pid_t tid = worker_tid;
    struct prio p = {.taken_nice = base};

    /* not memtrim's: this process's own (its main thread), born before, at another nice */
    CHECK_EQ_INT(prio_raise(&p, pid, 0, pid, since, PRIO_RAISE), 0);
    CHECK_CONTAINS(p.why, "the process's own");
    CHECK_EQ_INT(prio_raise(&p, pid, 0, tid, since + 100000, PRIO_RAISE), 0);
    CHECK_CONTAINS(p.why, "born before");
    p.taken_nice = base + 1;
    CHECK_EQ_INT(prio_raise(&p, pid, 0, tid, since, PRIO_RAISE), 0);
    CHECK_CONTAINS(p.why, "not the");
    p.taken_nice = base;
    /* the taken thread itself */
    CHECK_EQ_INT(prio_raise(&p, pid, tid, tid, since, PRIO_RAISE), 0);
    CHECK_CONTAINS(p.why, "the process's own");
    CHECK_EQ_INT(getpriority(PRIO_PROCESS, (id_t)tid), base);

    int r = prio_raise(&p, pid, main_tid, tid, since, PRIO_RAISE);
    if (geteuid() != 0) { /* without CAP_SYS_NICE: refused, nothing changed */
        CHECK_EQ_INT(r, 0);
        CHECK_CONTAINS(p.why, "CAP_SYS_NICE");
        CHECK_EQ_INT(getpriority(PRIO_PROCESS, (id_t)tid), base);
    } else {
        CHECK_EQ_INT(r, 1);
        CHECK_EQ_INT(p.nice, base - PRIO_RAISE);
        CHECK_EQ_INT(getpriority(PRIO_PROCESS, (id_t)tid), base - PRIO_RAISE);
        CHECK_EQ_INT(getpriority(PRIO_PROCESS, (id_t)main_tid), base); /* nobody else */
        ask_worker(); /* SCHED_RESET_ON_FORK: a thread it starts is at 0 (the kernel resets a
                       * negative nice only) */
        CHECK_EQ_INT(child_nice, base - PRIO_RAISE < 0 ? 0 : base - PRIO_RAISE);
        prio_lower(&p, pid);
        CHECK_EQ_INT(p.lowered, 1);
        CHECK_EQ_INT(getpriority(PRIO_PROCESS, (id_t)tid), base);
    }
    pthread_mutex_lock(&mu);
    quit = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(w, NULL);
    /* gone: neither raised nor lowered (its tid is nobody's now) */
    struct prio q = {.taken_nice = base};
    CHECK_EQ_INT(prio_raise(&q, pid, main_tid, tid, since, PRIO_RAISE), 0);
    CHECK_CONTAINS(q.why, "not one of");
    q = (struct prio){.taken_nice = base, .raised = 1, .tid = tid, .nice = base - PRIO_RAISE};
    prio_lower(&q, pid);
    CHECK_EQ_INT(q.lowered, 0);
}

int main(void)
{
    RUN(test_target_nice);
    RUN(test_parse_stat);
    RUN(test_nspid);
    RUN(test_raise_and_lower);
    return harness_end();
}
