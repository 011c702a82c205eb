/*
 * prefork.c - memtrim-prefork, a preforking host for the worker-group tests
 * and benchmark (issue 21; docs/groups.md): a master forks N workers, each
 * runs one long-lived worker thread that does S studies (allocate M MB in
 * small blocks, touch them, free them), P ms apart; the workers start D ms
 * apart. A small block allocated after each study's blocks lives until the
 * next study (as a real worker's caches do), so what a study freed stays
 * resident in the worker's arena until malloc_trim gives it back. It knows nothing of memtrim: LD_PRELOAD=libmemtrim.so starts it.
 *
 *   memtrim-prefork [--workers 4] [--studies 20] [--study-mb 80] [--block 1024]
 *                   [--pause-ms 400] [--stagger-ms 100] [--trim-after]
 *                   [--cycles N] [--hold] [--pid-dir DIR]
 *
 * --trim-after: malloc_trim(0) after every study (the comparison).
 * --cycles N: N more workers after those, one at a time, each doing its
 *   studies and exiting (fork/exit churn).
 * --hold: after the workers, the master waits for SIGTERM (and the workers
 *   wait too, after their studies, until the master ends them), so a test can
 *   look at the group.
 * --pid-dir: each worker writes DIR/worker.<pid> when its studies are done.
 * The master prints one JSON line: {"workers":N,"finished":K,"killed":[pids]}
 * and exits 0 when every worker finished. The master is single-threaded.
 * SPDX-License-Identifier: MIT
 */

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int workers = 4, studies = 20, study_mb = 80, block = 1024, pause_ms = 400,
           stagger_ms = 100, trim_after, cycles, hold;
static const char *pid_dir;
static volatile sig_atomic_t stop_master;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void *worker_thread(void *arg)
{
    (void)arg;
    size_t n = (size_t)study_mb * 1024 * 1024 / (size_t)block;
    char *keeper = NULL;
    for (int s = 0; s < studies; s++) {
        char **p = malloc(n * sizeof(*p));
        if (!p)
            exit(3);
        for (size_t i = 0; i < n; i++) {
            p[i] = malloc((size_t)block);
            if (!p[i])
                exit(3);
            memset(p[i], (int)(i & 0xff), (size_t)block);
        }
        /* The study's last block stays until the next study: it came from the heap's top,
         * after every other block, so the freed ones below it stay resident until trimmed.
         * (A fresh malloc(64) here was not always above them: a small chunk already free in
         * a forked worker's arena served it, glibc then trimmed the freed study itself,
         * and the group test saw a worker with nothing left to release.) */
        free(keeper);
        keeper = n ? p[n - 1] : NULL;
        for (size_t i = 0; i + 1 < n; i++)
            free(p[i]);
        free(p);
        if (trim_after)
            malloc_trim(0);
        if (s + 1 < studies)
            sleep_ms(pause_ms);
    }
    (void)keeper; /* the last one stays for the worker's life: its last study stays resident */
    return NULL;
}

static void worker(void)
{
    pthread_t t;
    signal(SIGTERM, SIG_DFL);
    if (pthread_create(&t, NULL, worker_thread, NULL) != 0)
        _exit(4);
    pthread_join(t, NULL);
    if (pid_dir) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/worker.%ld", pid_dir, (long)getpid());
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0)
            close(fd);
    }
    while (hold && getppid() != 1)
        sleep_ms(100);
    exit(0); /* exit(), not _exit(): destructors run, as in a real worker */
}

static void on_term(int sig)
{
    (void)sig;
    stop_master = 1;
}

static int arg_int(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "memtrim-prefork: %s needs a value\n", argv[*i]);
        exit(2);
    }
    char *end;
    long v = strtol(argv[++*i], &end, 10);
    if (*end || v < 0 || v > 1000000) {
        fprintf(stderr, "memtrim-prefork: bad value for %s: %s\n", argv[*i - 1], argv[*i]);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--workers")) workers = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--studies")) studies = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--study-mb")) study_mb = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--block")) block = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--pause-ms")) pause_ms = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--stagger-ms")) stagger_ms = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--cycles")) cycles = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--trim-after")) trim_after = 1;
        else if (!strcmp(argv[i], "--hold")) hold = 1;
        else if (!strcmp(argv[i], "--pid-dir") && i + 1 < argc) pid_dir = argv[++i];
        else {
            fprintf(stderr, "memtrim-prefork: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (block < 16)
        block = 16;
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    pid_t *pids = calloc((size_t)workers + 1, sizeof(*pids));
    int finished = 0, total = workers + cycles;
    char killed[4096] = "";
    size_t klen = 0;
    for (int w = 0; w < workers; w++) {
        if (w)
            sleep_ms(stagger_ms);
        pid_t pid = fork();
        if (pid == 0)
            worker();
        pids[w] = pid;
    }
    printf("{\"event\":\"forked\",\"master\":%ld,\"pids\":[", (long)getpid());
    for (int w = 0; w < workers; w++)
        printf("%s%ld", w ? "," : "", (long)pids[w]);
    printf("]}\n");
    fflush(stdout);
    /* The churn: one more worker at a time, each exits after its studies. */
    int held = hold;
    hold = 0;
    for (int c = 0; c < cycles && !stop_master; c++) {
        int status;
        pid_t pid = fork();
        if (pid == 0)
            worker();
        if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0)
            finished++;
    }
    hold = held;
    if (cycles) {
        printf("{\"event\":\"cycles\",\"done\":%d}\n", finished);
        fflush(stdout);
    }
    if (hold) {
        while (!stop_master)
            pause();
        for (int w = 0; w < workers; w++)
            kill(pids[w], SIGTERM);
    }
    for (int w = 0; w < workers; w++) {
        int status;
        while (waitpid(pids[w], &status, 0) < 0 && errno == EINTR)
            ;
        if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) ||
            (hold && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM))
            finished++;
        else if (klen + 24 < sizeof(killed))
            klen += (size_t)snprintf(killed + klen, sizeof(killed) - klen, "%s%ld",
                                     klen ? "," : "", (long)pids[w]);
    }
    printf("{\"workers\":%d,\"finished\":%d,\"killed\":[%s]}\n", total, finished, killed);
    fflush(stdout);
    free(pids);
    return finished == total ? 0 : 1;
}
