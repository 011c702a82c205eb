/*
 * test_thread.c - memtrim's thread list (common/thread.c) across fork(): a child forked
 * while another thread reads the CPU clocks (threads_lock held most of the time) reads
 * them too, and does not hang on the parent's lock. Counted: FORKS children, each with
 * a hang guard (alarm); none may hang. Control (the child handler that re-initialises the
 * lock taken out): the first child hangs. Threads: the test's main thread, a reader, and
 * LISTED threads started by mt_thread_start that wait for the end.
 */
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "harness.h"

#define FORKS 20
#define LISTED 8

static atomic_int done;

static void *waiter(void *arg)
{
    (void)arg;
    while (!atomic_load(&done))
        usleep(1000);
    return NULL;
}

static void *reader(void *arg)
{
    (void)arg;
    double sum = 0;
    while (!atomic_load(&done))
        sum += mt_threads_cpu_seconds(); /* the lock, held over LISTED clock reads */
    return sum < 0 ? arg : NULL;
}

static void test_fork_while_listed_threads_are_read(void)
{
    pthread_t t[LISTED], r;
    for (int i = 0; i < LISTED; i++)
        CHECK_EQ_INT(mt_thread_start(&t[i], "test-listed", waiter, NULL), 0);
    CHECK_EQ_INT(mt_thread_start(&r, "test-reader", reader, NULL), 0);
    while (mt_threads_cpu_seconds() <= 0) /* listed and reading: a condition */
        sched_yield();
    int hung = 0, ran = 0;
    for (int i = 0; i < FORKS && !hung; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(10); /* a hang guard: the child is killed by SIGALRM */
            double s = mt_threads_cpu_seconds();
            _exit(s >= 0 ? 0 : 1);
        }
        CHECK(pid > 0);
        if (pid < 0)
            break;
        int st = 0;
        CHECK(waitpid(pid, &st, 0) == pid);
        hung += WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM;
        ran += WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    CHECK_MSG(hung == 0 && ran == FORKS, "%d children of %d read the clocks, %d hung", ran,
              FORKS, hung);
    atomic_store(&done, 1);
    for (int i = 0; i < LISTED; i++)
        pthread_join(t[i], NULL);
    pthread_join(r, NULL);
}

int main(void)
{
    RUN(test_fork_while_listed_threads_are_read);
    return harness_end();
}
