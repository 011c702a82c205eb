/*
 * cli_target.c - an unmodified glibc program for the memtrim command's tests and benchmark
 * (tests/unit/test_cli.c, tests/e2e/test_cli.py, bench/cli/): it never links memtrim.
 *   --hold-mb N --holders K  K threads each fill N MiB of small blocks and free 90 % of them
 *                           (freed heap in K arenas), then wait in a pipe read
 *   --churn C               C threads malloc, fill, check and free blocks in a loop and
 *                           timestamp each iteration (the longest gap is the stall)
 *   --sleeper               one thread sleeps 20 ms at a time and counts sleeps cut short
 *   --busy-main             the main thread waits on a futex and reads no command
 *   --read-in-handler       the main thread reads stdin inside a SIGUSR1 handler (raised by
 *                           itself) and exits when the read returns; no command is read
 *   --spawner               one thread starts two short threads and joins them every
 *                           millisecond, and counts the starts that failed (a pids cgroup at
 *                           its limit: EAGAIN)
 * Commands on stdin (the main thread reads it: a read the tool may interrupt), one a line:
 * "reset" clears the gaps, "report" prints one JSON line (the longest gap and when it began,
 * CLOCK_MONOTONIC), "cutsleep" installs a SIGUSR2 handler without SA_RESTART (and says the
 * sleeper's tid), "quit" exits 0.
 * A block found changed counts as corrupt; glibc aborts on a damaged heap by itself.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 256
#define MAX_CHURN 128

static atomic_long iterations, corrupt, early_sleeps, sleeps, usr1, spawns, spawn_failures;
static atomic_llong gap_ns[MAX_CHURN];
static atomic_llong gap_at[MAX_CHURN]; /* when each churner's longest gap began */
static atomic_int reset_gen;
static atomic_int sleeper_tid;
static int hold_pipe[2];
static sem_t held;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *holder(void *arg)
{
    size_t mb = (size_t)(uintptr_t)arg, n = mb * 1024 * 1024 / 2048, kept = 0;
    char **b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++) {
        b[i] = malloc(1024 + (i * 7919) % 3072);
        memset(b[i], 0x5a, 1024);
    }
    for (size_t i = 0; i < n; i++)
        if (i % 10)
            free(b[i]);
        else
            b[kept++] = b[i];
    sem_post(&held);
    char c;
    while (read(hold_pipe[0], &c, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

static void *churner(void *arg)
{
    int id = (int)(uintptr_t)arg, gen = -1;
    unsigned seed = (unsigned)id * 2654435761u + 1;
    unsigned char *slot[SLOTS] = {0};
    size_t size[SLOTS] = {0};
    unsigned char mark[SLOTS] = {0};
    long long last = now_ns();
    for (;;) {
        int k = (int)(rand_r(&seed) % SLOTS);
        if (slot[k]) {
            for (size_t i = 0; i < size[k]; i += 61)
                if (slot[k][i] != mark[k]) {
                    atomic_fetch_add(&corrupt, 1);
                    break;
                }
            free(slot[k]);
        }
        size[k] = 16 + rand_r(&seed) % 8192;
        mark[k] = (unsigned char)rand_r(&seed);
        slot[k] = malloc(size[k]);
        memset(slot[k], mark[k], size[k]);
        atomic_fetch_add_explicit(&iterations, 1, memory_order_relaxed);
        long long t = now_ns();
        int g = atomic_load_explicit(&reset_gen, memory_order_relaxed);
        if (g != gen) {
            gen = g;
            last = t;
        }
        if (t - last > atomic_load_explicit(&gap_ns[id], memory_order_relaxed)) {
            atomic_store_explicit(&gap_ns[id], t - last, memory_order_relaxed);
            atomic_store_explicit(&gap_at[id], last, memory_order_relaxed);
        }
        last = t;
    }
    return NULL;
}

static void *sleeper(void *arg)
{
    atomic_store(&sleeper_tid, (int)gettid());
    sigset_t usr1; /* a handler's signal would end a sleep by itself (EINTR, SA_RESTART or not) */
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    for (;;) {
        struct timespec ts = {0, 20 * 1000000L};
        long long t0 = now_ns();
        int r = clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
        if (r != 0 || now_ns() - t0 < 20 * 1000000LL)
            atomic_fetch_add(&early_sleeps, 1);
        atomic_fetch_add(&sleeps, 1);
    }
    return arg;
}

static void *spawned(void *arg)
{
    return arg;
}

static void *spawner(void *arg)
{
    for (;;) {
        pthread_t t[2];
        struct timespec ms = {0, 1000000};
        int ok[2];
        for (int i = 0; i < 2; i++)
            if (!(ok[i] = pthread_create(&t[i], NULL, spawned, NULL) == 0))
                atomic_fetch_add(&spawn_failures, 1);
        for (int i = 0; i < 2; i++)
            if (ok[i]) {
                pthread_join(t[i], NULL);
                atomic_fetch_add(&spawns, 1);
            }
        nanosleep(&ms, NULL);
    }
    return arg;
}

static void on_usr2(int sig)
{
    (void)sig;
}

static void on_usr1(int sig)
{
    (void)sig;
    atomic_fetch_add(&usr1, 1);
}

static void on_usr1_read(int sig)
{
    char c;
    (void)sig;
    if (read(0, &c, 1) < 0) {
        /* ended by the test's kill */
    }
    _exit(0);
}

int main(int argc, char **argv)
{
    int churn = 0, holders = 0, want_sleeper = 0, busy_main = 0, read_in_handler = 0;
    int want_spawner = 0;
    size_t hold_mb = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--churn") && i + 1 < argc)
            churn = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--holders") && i + 1 < argc)
            holders = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hold-mb") && i + 1 < argc)
            hold_mb = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--sleeper"))
            want_sleeper = 1;
        else if (!strcmp(argv[i], "--spawner"))
            want_spawner = 1;
        else if (!strcmp(argv[i], "--busy-main"))
            busy_main = 1;
        else if (!strcmp(argv[i], "--read-in-handler"))
            read_in_handler = 1;
        else {
            fprintf(stderr, "cli_target: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (churn > MAX_CHURN)
        churn = MAX_CHURN;
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_RESTART};
    sigaction(SIGUSR1, &sa, NULL);
    if (pipe(hold_pipe) != 0 || sem_init(&held, 0, 0) != 0)
        return 1;
    pthread_t t;
    for (int i = 0; i < holders; i++) {
        pthread_create(&t, NULL, holder, (void *)(uintptr_t)hold_mb);
        while (sem_wait(&held) != 0) /* one at a time, each in an arena of its own */
            ;
    }
    for (int i = 0; i < churn; i++)
        pthread_create(&t, NULL, churner, (void *)(uintptr_t)i);
    if (want_sleeper)
        pthread_create(&t, NULL, sleeper, NULL);
    if (want_spawner)
        pthread_create(&t, NULL, spawner, NULL);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    if (busy_main) /* no thread in a read or a sleep: the main one waits on a futex */
        pthread_join(t, NULL);
    if (read_in_handler) { /* its read inside the handler, where malloc may have been cut */
        struct sigaction in = {.sa_handler = on_usr1_read};
        sigaction(SIGUSR1, &in, NULL);
        raise(SIGUSR1);
    }
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "reset", 5)) {
            for (int i = 0; i < churn; i++)
                atomic_store(&gap_ns[i], 0);
            atomic_fetch_add(&reset_gen, 1);
            printf("ok\n");
        } else if (!strncmp(line, "report", 6)) {
            long long max = 0, at = 0;
            for (int i = 0; i < churn; i++)
                if (atomic_load(&gap_ns[i]) > max) {
                    max = atomic_load(&gap_ns[i]);
                    at = atomic_load(&gap_at[i]);
                }
            printf("{\"iterations\": %ld, \"corrupt\": %ld, \"max_gap_seconds\": %.6f, "
                   "\"max_gap_at_seconds\": %.6f, "
                   "\"sleeps\": %ld, \"early_sleeps\": %ld, \"usr1\": %ld, \"spawns\": %ld, "
                   "\"spawn_failures\": %ld}\n",
                   atomic_load(&iterations), atomic_load(&corrupt), (double)max / 1e9,
                   (double)at / 1e9,
                   atomic_load(&sleeps), atomic_load(&early_sleeps), atomic_load(&usr1),
                   atomic_load(&spawns), atomic_load(&spawn_failures));
        } else if (!strncmp(line, "cutsleep", 8)) {
            /* a handler without SA_RESTART: the next signal cuts the sleeper's sleep short */
            struct sigaction cut = {.sa_handler = on_usr2};
            sigaction(SIGUSR2, &cut, NULL);
            printf("ok %d\n", atomic_load(&sleeper_tid));
        } else if (!strncmp(line, "quit", 4)) {
            return 0;
        } else {
            printf("unknown\n");
        }
        fflush(stdout);
    }
    return 0;
}
