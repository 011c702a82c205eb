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
 *                   [--schedule relative|absolute] [--trace FILE]
 *                   [--cycles N] [--hold] [--pid-dir DIR] [--shared-mb 0]
 *                   [--closefrom FILES] [--closefrom-delay-ms 0] [--closefrom-when FILE]
 *                   [--closefrom-master] [--closefrom-same]
 *
 * --trim-after: malloc_trim(0) after every study (the comparison).
 * --schedule: relative (the default): each study starts pause-ms after the
 *   previous one ended, so a delay shifts every later study of that worker;
 *   absolute: worker i's studies start in its slots t0 + i * stagger + k * pause
 *   (CLOCK_MONOTONIC, clock_nanosleep TIMER_ABSTIME); a study late by more than
 *   half the stagger waits for the worker's next slot. Why both: on a node
 *   short of CPU, studies that overlap share it and end together, and under
 *   the relative schedule they then start together from there on
 *   (docs/groups.md, measured); the absolute one keeps the workers stagger-ms
 *   apart, as issue 21's workload says.
 * --trace FILE: each worker appends one JSON line per study (times in ms since
 *   the master started, and that start as CLOCK_MONOTONIC ms: start, allocated, freed,
 *   trimmed; the thread's CPU ms
 *   and minor faults in the study).
 * --shared-mb N: the master touches N MB before it forks (a preloaded
 *   application's pages): the workers share them, and each one's RSS counts them.
 * --cycles N: N more workers after those, one at a time, each doing its
 *   studies and exiting (fork/exit churn).
 * --hold: after the workers, the master waits for SIGTERM (and the workers
 *   wait too, after their studies, until the master ends them), so a test can
 *   look at the group.
 * --pid-dir: each worker writes DIR/worker.<pid> when its studies are done.
 * --solo INDEX: no fork: this process runs the studies itself, as worker INDEX of a
 *   group of separately started processes (a named group); --origin-ns T: the
 *   absolute schedule's origin, CLOCK_MONOTONIC ns, shared by the processes of
 *   such a group (default: this process's start). It prints the same last line
 *   for itself (workers 1) and exits 0 once its studies are done.
 * --closefrom FILES: each worker, as a daemon does after its fork, closes every
 *   descriptor from 3 up (closefrom), opens FILES files of its own (which take the
 *   freed numbers), and after every study appends a record to each and checks that
 *   each number is still its file and holds exactly what it wrote. A worker whose
 *   file was closed, replaced or written by someone else (memtrim, by number)
 *   says which on stderr and exits 5. --closefrom-delay-ms: the worker does that
 *   this long after its fork. --closefrom-when FILE: it does that once FILE exists
 *   (looked for every 10 ms, after the delay; a worker whose master is gone exits 4): a
 *   test creates it once it has seen memtrim join every worker to the group (a fixed delay
 *   cannot promise that on a loaded machine).
 *   --closefrom-master: the master does it instead (memtrim's serving process),
 *   once its workers are forked, and checks its files every 50 ms until they end.
 *   --closefrom-same: first, at each number where memtrim held one of this
 *   process's /proc files or a cgroup file before the closefrom, it opens that
 *   very file again (the same device and inode) and reads up to 3 bytes of it;
 *   each is checked too: still open, still that file, its offset where it was.
 * The master prints one JSON line: {"workers":N,"finished":K,"killed":[pids],
 * "status":[{"pid":P,"exit":E} or {"pid":P,"signal":S}, ...]} (every worker of
 * --workers, in fork order: how each ended, as waitpid said) and exits 0 when
 * every worker finished. The master is single-threaded.
 * SPDX-License-Identifier: MIT
 */

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int shared_mb = 0;
static int workers = 4, studies = 20, study_mb = 80, block = 1024, pause_ms = 400,
           stagger_ms = 100, trim_after, cycles, hold, absolute;
static const char *pid_dir;
static int own_files;                   /* --closefrom: how many */
static int own_delay_ms;                /* --closefrom-delay-ms */
static const char *own_when;            /* --closefrom-when: the file that says "now" */
static int own_in_master;               /* --closefrom-master */
static int own_fd[256];                 /* the worker's own files, after its closefrom */
static unsigned long long own_ino[256]; /* ...their inodes */
static off_t own_len[256];              /* ...and what it wrote into each */
static void own_check(int study);
static int same_files;                  /* --closefrom-same */
static int same_fd[64], nsame;          /* the files opened again at memtrim's numbers */
static unsigned long long same_ino[64]; /* ...their inodes */
static off_t same_off[64];              /* ...and their offsets, after this process's read */
static int trace_fd = -1;  /* --trace: one line per study */
static int worker_index;   /* this worker's place in the start order (0 first) */
static int64_t t0_ns;      /* the master's start (CLOCK_MONOTONIC): the trace's origin */
static int64_t origin_ns;  /* the absolute schedule's origin: t0, a churn worker's fork */
static volatile sig_atomic_t stop_master;
static int solo = -1;      /* --solo INDEX: run the studies here, no fork */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int64_t mono_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sleep until the CLOCK_MONOTONIC time at_ns (at once when it is past). */
static void sleep_until(int64_t at_ns)
{
    struct timespec ts = {(time_t)(at_ns / 1000000000), (long)(at_ns % 1000000000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* --trace: one line per study, written when it ends (times in ms since the master's start,
 * CLOCK_MONOTONIC): worker index, pid, study, start, allocated (its live peak), freed,
 * trimmed (--trim-after), the worker thread's CPU ms and minor faults in the study. */
static void trace_study(int s, int64_t start, int64_t alloc, int64_t freed, int64_t trimmed,
                        int64_t cpu_ns, long minflt)
{
    if (trace_fd < 0)
        return;
    char line[256];
    int len = snprintf(line, sizeof(line),
                       "{\"w\":%d,\"pid\":%ld,\"s\":%d,\"t0\":%.3f,\"start\":%.3f,"
                       "\"alloc\":%.3f,\"freed\":%.3f,\"trimmed\":%.3f,\"cpu\":%.3f,"
                       "\"minflt\":%ld}\n",
                       worker_index, (long)getpid(), s, t0_ns / 1e6, (start - t0_ns) / 1e6,
                       (alloc - t0_ns) / 1e6, (freed - t0_ns) / 1e6, (trimmed - t0_ns) / 1e6,
                       cpu_ns / 1e6, minflt);
    if (len > 0 && write(trace_fd, line, (size_t)len) < 0) {
        /* a trace that cannot be written is lost, the study is not */
    }
}

static void *worker_thread(void *arg)
{
    (void)arg;
    size_t n = (size_t)study_mb * 1024 * 1024 / (size_t)block;
    char *keeper = NULL;
    int64_t slot = 0; /* the absolute schedule's next slot */
    for (int s = 0; s < studies; s++) {
        if (absolute && pause_ms > 0) {
            /* The absolute schedule: this worker's slots are origin + index * stagger +
             * k * pause; a study starts in its slot. One that is late by up to half the
             * stagger starts at once; later than that it waits for the worker's next slot
             * (a slow study skips slots: the workers stay stagger_ms apart and a slow node
             * runs fewer studies a second instead of bunching them). */
            int64_t phase = origin_ns + (int64_t)worker_index * stagger_ms * 1000000,
                    period = (int64_t)pause_ms * 1000000, now = mono_ns(CLOCK_MONOTONIC);
            int64_t late = now - (phase + slot * period);
            if (late > (int64_t)stagger_ms * 500000)
                slot += (late + period - 1) / period;
            sleep_until(phase + slot * period);
            slot++;
        }
        int64_t start = mono_ns(CLOCK_MONOTONIC), cpu0 = mono_ns(CLOCK_THREAD_CPUTIME_ID);
        struct rusage ru0, ru1;
        getrusage(RUSAGE_THREAD, &ru0);
        char **p = malloc(n * sizeof(*p));
        if (!p)
            exit(3);
        for (size_t i = 0; i < n; i++) {
            p[i] = malloc((size_t)block);
            if (!p[i])
                exit(3);
            memset(p[i], (int)(i & 0xff), (size_t)block);
        }
        int64_t alloc = mono_ns(CLOCK_MONOTONIC);
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
        int64_t freed = mono_ns(CLOCK_MONOTONIC);
        if (trim_after)
            malloc_trim(0);
        int64_t trimmed = mono_ns(CLOCK_MONOTONIC);
        getrusage(RUSAGE_THREAD, &ru1);
        trace_study(s, start, alloc, freed, trimmed, mono_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0,
                    ru1.ru_minflt - ru0.ru_minflt);
        if (own_files && !own_in_master)
            own_check(s);
        if (s + 1 < studies && !absolute)
            sleep_ms(pause_ms); /* the relative schedule: the pause after the study's end */
    }
    (void)keeper; /* the last one stays for the worker's life: its last study stays resident */
    return NULL;
}

/* --closefrom-same: each file opened again at memtrim's number still open, that file, and
 * its offset where this process left it. */
static void same_check(int study)
{
    for (int i = 0; i < nsame; i++) {
        struct stat st;
        if (fstat(same_fd[i], &st) != 0 || (unsigned long long)st.st_ino != same_ino[i] ||
            lseek(same_fd[i], 0, SEEK_CUR) != same_off[i]) {
            fprintf(stderr, "memtrim-prefork: worker %ld: descriptor %d, the file memtrim had "
                            "there opened again by this process, was closed, replaced or read "
                            "by someone else (study %d)\n",
                    (long)getpid(), same_fd[i], study);
            _exit(5);
        }
    }
}

/* --closefrom-same: the numbers of this process's /proc and cgroup files (memtrim's), and
 * their paths, before the closefrom. */
static int same_list(char paths[][256], int *fds, int cap)
{
    char proc[64], link[64];
    int n = 0, plen = snprintf(proc, sizeof(proc), "/proc/%ld/", (long)getpid());
    for (int fd = 3; fd < 1024 && n < cap; fd++) {
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t k = readlink(link, paths[n], 255);
        if (k <= 0)
            continue;
        paths[n][k] = '\0';
        if ((!strncmp(paths[n], proc, (size_t)plen) && strchr(paths[n] + plen, '/') == NULL) ||
            !strncmp(paths[n], "/sys/fs/cgroup/", 15))
            fds[n++] = fd;
    }
    return n;
}

/* --closefrom-same: after the closefrom, each of those files opened again at its number. */
static void same_open(char paths[][256], const int *fds, int n)
{
    char buf[3];
    for (int i = 0; i < n; i++) {
        struct stat st;
        int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
        ssize_t got = fd < 0 ? -1 : read(fd, buf, sizeof(buf));
        if (got <= 0 || (fd != fds[i] && dup2(fd, fds[i]) != fds[i]) || fstat(fds[i], &st) != 0) {
            fprintf(stderr, "memtrim-prefork: --closefrom-same: %s: %s\n", paths[i],
                    strerror(errno));
            _exit(4);
        }
        if (fd != fds[i])
            close(fd);
        same_fd[nsame] = fds[i];
        same_off[nsame] = (off_t)got;
        same_ino[nsame++] = (unsigned long long)st.st_ino;
    }
}

/* --closefrom: append one record to each own file and check every byte of each. */
static void own_check(int study)
{
    char rec[64], back[64];
    same_check(study);
    for (int i = 0; i < own_files; i++) {
        struct stat st;
        int n = snprintf(rec, sizeof(rec), "worker %ld file %d study %d\n", (long)getpid(), i,
                         study);
        if (fstat(own_fd[i], &st) != 0 || (unsigned long long)st.st_ino != own_ino[i]) {
            fprintf(stderr, "memtrim-prefork: worker %ld: descriptor %d, its file %d, was closed "
                            "or replaced by someone else (study %d)\n",
                    (long)getpid(), own_fd[i], i, study);
            _exit(5);
        }
        if (st.st_size != own_len[i]) {
            fprintf(stderr, "memtrim-prefork: worker %ld: descriptor %d, its file %d, holds %lld "
                            "bytes where it wrote %lld (study %d)\n",
                    (long)getpid(), own_fd[i], i, (long long)st.st_size, (long long)own_len[i],
                    study);
            _exit(5);
        }
        if (pwrite(own_fd[i], rec, (size_t)n, own_len[i]) != n ||
            pread(own_fd[i], back, (size_t)n, own_len[i]) != n || memcmp(rec, back, (size_t)n)) {
            fprintf(stderr, "memtrim-prefork: worker %ld: descriptor %d, its file %d: a record "
                            "did not read back (study %d)\n", (long)getpid(), own_fd[i], i, study);
            _exit(5);
        }
        own_len[i] += n;
    }
}

static void own_open(void)
{
    const char *dir = pid_dir ? pid_dir : "/tmp";
    static char paths[64][256];
    int fds[64], n = 0;
    if (own_delay_ms)
        sleep_ms(own_delay_ms);
    for (pid_t master = getppid(); own_when && access(own_when, F_OK) != 0; sleep_ms(10))
        if (!own_in_master && getppid() != master) { /* nobody will say "now" */
            fprintf(stderr, "memtrim-prefork: --closefrom-when: the master is gone\n");
            _exit(4);
        }
    if (same_files)
        n = same_list(paths, fds, 64);
    closefrom(3);
    same_open(paths, fds, n);
    if (same_files)
        fprintf(stderr, "memtrim-prefork: --closefrom-same: %d of memtrim's files opened again "
                        "at their numbers\n", n);
    for (int i = 0; i < own_files; i++) {
        struct stat st;
        own_fd[i] = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (own_fd[i] < 0 || fstat(own_fd[i], &st) != 0) {
            fprintf(stderr, "memtrim-prefork: --closefrom: a file in %s: %s\n", dir,
                    strerror(errno));
            _exit(4);
        }
        own_ino[i] = (unsigned long long)st.st_ino;
        own_len[i] = 0;
    }
    own_check(-1);
}

/* --pid-dir: DIR/worker.<pid> says this process's studies are done. */
static void done_file(void)
{
    if (pid_dir) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/worker.%ld", pid_dir, (long)getpid());
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0)
            close(fd);
    }
}

static void worker(void)
{
    pthread_t t;
    signal(SIGTERM, SIG_DFL);
    if (own_files && !own_in_master)
        own_open();
    if (pthread_create(&t, NULL, worker_thread, NULL) != 0)
        _exit(4);
    pthread_join(t, NULL);
    done_file();
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
    const char *trace = NULL;
    long long origin_arg = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--workers")) workers = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--studies")) studies = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--study-mb")) study_mb = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--block")) block = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--shared-mb")) shared_mb = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--pause-ms")) pause_ms = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--stagger-ms")) stagger_ms = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--cycles")) cycles = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--trim-after")) trim_after = 1;
        else if (!strcmp(argv[i], "--hold")) hold = 1;
        else if (!strcmp(argv[i], "--closefrom-delay-ms")) own_delay_ms = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--closefrom-master")) own_in_master = 1;
        else if (!strcmp(argv[i], "--closefrom-same")) same_files = 1;
        else if (!strcmp(argv[i], "--solo")) solo = arg_int(argc, argv, &i);
        else if (!strcmp(argv[i], "--origin-ns") && i + 1 < argc) {
            char *end;
            long long v = strtoll(argv[++i], &end, 10);
            if (*end || v <= 0) {
                fprintf(stderr, "memtrim-prefork: bad value for --origin-ns: %s\n", argv[i]);
                return 2;
            }
            origin_arg = v;
        }
        else if (!strcmp(argv[i], "--closefrom")) {
            own_files = arg_int(argc, argv, &i);
            if (own_files > 256) {
                fprintf(stderr, "memtrim-prefork: --closefrom takes at most 256 files\n");
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--pid-dir") && i + 1 < argc) pid_dir = argv[++i];
        else if (!strcmp(argv[i], "--closefrom-when") && i + 1 < argc) own_when = argv[++i];
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc) trace = argv[++i];
        else if (!strcmp(argv[i], "--schedule") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "absolute")) absolute = 1;
            else if (!strcmp(v, "relative")) absolute = 0;
            else {
                fprintf(stderr, "memtrim-prefork: --schedule is absolute or relative, not %s\n", v);
                return 2;
            }
        }
        else {
            fprintf(stderr, "memtrim-prefork: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (block < 16)
        block = 16;
    if (trace && (trace_fd = open(trace, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0) {
        fprintf(stderr, "memtrim-prefork: --trace %s: %s\n", trace, strerror(errno));
        return 2;
    }
    t0_ns = origin_ns = mono_ns(CLOCK_MONOTONIC);
    if (origin_arg)
        origin_ns = (int64_t)origin_arg;
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    pid_t *pids = calloc((size_t)workers + 1, sizeof(*pids));
    char *shared = shared_mb ? malloc((size_t)shared_mb << 20) : NULL;
    if (shared)
        memset(shared, 1, (size_t)shared_mb << 20); /* kept for the master's life */
    int finished = 0, total = workers + cycles;
    char killed[4096] = "";
    size_t klen = 0;
    if (solo >= 0) { /* a named group's member: the studies in this process */
        pthread_t t;
        worker_index = solo;
        if (pthread_create(&t, NULL, worker_thread, NULL) != 0)
            return 4;
        pthread_join(t, NULL);
        done_file();
        printf("{\"workers\":1,\"finished\":1,\"killed\":[],\"status\":[{\"pid\":%ld,"
               "\"exit\":0}]}\n", (long)getpid());
        fflush(stdout);
        while (hold && !stop_master)
            pause();
        return 0;
    }
    size_t slen = 0, scap = (size_t)workers * 48 + 1;
    char *status_json = calloc(scap, 1);
    for (int w = 0; w < workers; w++) {
        if (w && absolute)
            sleep_until(t0_ns + (int64_t)w * stagger_ms * 1000000);
        else if (w)
            sleep_ms(stagger_ms);
        worker_index = w;
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
    if (own_files && own_in_master) {
        own_open();
        for (int k = 0, left = workers; left > 0; k++) {
            sleep_ms(50);
            own_check(k);
            left = 0;
            for (int w = 0; w < workers; w++) { /* not reaped: the loop below does that */
                siginfo_t si = {0};
                left += waitid(P_PID, (id_t)pids[w], &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                        si.si_pid == 0;
            }
        }
    }
    /* The churn: one more worker at a time, each exits after its studies. */
    int held = hold;
    hold = 0;
    for (int c = 0; c < cycles && !stop_master; c++) {
        int status;
        worker_index = workers + c;
        origin_ns = mono_ns(CLOCK_MONOTONIC) - (int64_t)worker_index * stagger_ms * 1000000;
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
        if (status_json)
            slen += (size_t)snprintf(status_json + slen, scap - slen,
                                     WIFSIGNALED(status) ? "%s{\"pid\":%ld,\"signal\":%d}"
                                                         : "%s{\"pid\":%ld,\"exit\":%d}",
                                     w ? "," : "", (long)pids[w],
                                     WIFSIGNALED(status) ? WTERMSIG(status)
                                                         : WEXITSTATUS(status));
        if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) ||
            (hold && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM))
            finished++;
        else if (klen + 24 < sizeof(killed))
            klen += (size_t)snprintf(killed + klen, sizeof(killed) - klen, "%s%ld",
                                     klen ? "," : "", (long)pids[w]);
    }
    printf("{\"workers\":%d,\"finished\":%d,\"killed\":[%s],\"status\":[%s]}\n", total,
           finished, killed, status_json ? status_json : "");
    fflush(stdout);
    free(status_json);
    free(pids);
    return finished == total ? 0 : 1;
}
