/*
 * demo.c - memtrim-demo, a small server-like host. It loads libmemtrim.so
 * with dlopen and the C ABI exactly as a real host would, and runs an
 * Orthanc-like workload: long-lived worker threads (each gets its own glibc
 * arena) take "studies" in turn, allocate a few hundred MB in 1-64 KB blocks,
 * keep a small fraction until their next study and free the rest. Freed
 * memory piles up across arenas, which is what memtrim gives back.
 *
 * With --canary a thread allocates a small block every millisecond from its
 * own arena and times it; every worker times its own allocations too
 * (latency.c): at the end the demo prints p50/p99/max and its throughput,
 * which is how the cost of trimming to the host is measured. --trim-loop-ms
 * runs Orthanc 1.11.3's loop instead (malloc_trim(128 KiB) every N ms).
 *
 * Threads: main (signals, start/stop), one dispatcher, N workers, and the
 * canary and the trim loop when asked. A mutex and two condition variables
 * guard the job queue; counters are atomics; each thread owns its histogram
 * until it is joined.
 * SPDX-License-Identifier: MIT
 */
#include <dlfcn.h>
#include <malloc.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "latency.h"
#include "memtrim.h"

#ifndef MEMTRIM_DEFAULT_LIB
#define MEMTRIM_DEFAULT_LIB "libmemtrim.so"
#endif

struct options {
    const char *lib, *config, *port_file, *state_dir;
    int workers, study_mb, keep_permille, concurrency, pause_ms, studies, quiet, no_memtrim;
    int canary, seconds, trim_loop_ms, live_mb;
    int trim_each;
    int linger; /* seconds idle after the workload, then RSS is printed */
};

struct abi {
    void *handle;
    int (*start)(const char *, memtrim_t **, char **);
    void (*stop)(memtrim_t *);
    int (*port)(const memtrim_t *);
    int (*address)(const memtrim_t *, char *, size_t); /* NULL in an older library */
    const char *(*version)(void);
    void (*free_)(void *);
};

struct worker {
    pthread_t thread;
    int id;
    void **kept; /* blocks kept from the last study, freed at the next */
    size_t nkept;
    struct lat_hist lat; /* this worker's malloc latencies */
};

static struct options opt = {.workers = 8, .study_mb = 200, .keep_permille = 20,
                             .concurrency = 1, .pause_ms = 1000};
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;   /* work for workers */
static pthread_cond_t qdone = PTHREAD_COND_INITIALIZER;   /* a study finished */
static int *queue_for;      /* per worker: pending study number, 0 = none */
static int in_flight, stopping;
static atomic_int studies_done;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: memtrim-demo [options]\n"
            "  --config JSON|FILE   memtrim configuration (default: memtrim's defaults)\n"
            "  --lib PATH           libmemtrim.so to dlopen (default: %s)\n"
            "  --no-memtrim         run the workload without memtrim\n"
            "  --workers N          worker threads, each with its own arena (8)\n"
            "  --study-mb N         MB allocated per study (200)\n"
            "  --keep-percent P     share of each study kept until the worker's next (2)\n"
            "  --concurrency N      studies in progress at once (1)\n"
            "  --pause-ms N         pause between studies, 0 = back to back (1000)\n"
            "  --trim-each          malloc_trim(0) after every study (the ideal, for comparison)\n"
            "  --studies N          studies to run, then exit; 0 = until signalled (0)\n"
            "  --port-file PATH     write memtrim's HTTP port there once it listens\n"
            "  --quiet              no line per study\n"
            "  --state-dir DIR      directory for memtrim's state: a relative \"Database\"\n"
            "                       (memtrim.sqlite by default) is created there; made if\n"
            "                       missing (default: the current directory)\n"
            "  --seconds N          run N seconds, then exit (0 = no limit) (0)\n"
            "  --linger N           after the last study, stay idle N seconds with the\n"
            "                       workers' kept blocks (memtrim runs on), then print RSS (0)\n"
            "  --canary             a thread allocates and frees a small block every ms from its\n"
            "                       own arena and times it; latencies and throughput at the end\n"
            "  --trim-loop-ms N     Orthanc 1.11.3's loop: malloc_trim(128 KiB) every N ms\n"
            "                       (with --no-memtrim, to compare)\n"
            "  --live-mb N          memory the host keeps live from start to end (0)\n",
            MEMTRIM_DEFAULT_LIB);
}

static int parse_int(const char *name, const char *s, int min, int max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < min || v > max) {
        fprintf(stderr, "memtrim-demo: --%s: '%s' is not a whole number in [%d, %d]\n", name, s,
                min, max);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", required_argument, 0, 'c'},   {"lib", required_argument, 0, 'l'},
        {"no-memtrim", no_argument, 0, 'n'},     {"workers", required_argument, 0, 'w'},
        {"study-mb", required_argument, 0, 's'}, {"keep-percent", required_argument, 0, 'k'},
        {"concurrency", required_argument, 0, 'C'}, {"pause-ms", required_argument, 0, 'p'},
        {"studies", required_argument, 0, 'N'},  {"port-file", required_argument, 0, 'P'},
        {"quiet", no_argument, 0, 'q'},          {"help", no_argument, 0, 'h'},
        {"seconds", required_argument, 0, 'S'},  {"canary", no_argument, 0, 'Y'},
        {"trim-loop-ms", required_argument, 0, 'T'}, {"live-mb", required_argument, 0, 'L'},
        {"trim-each", no_argument, 0, 'E'},
        {"state-dir", required_argument, 0, 'D'},
        {"linger", required_argument, 0, 'G'},
        {0, 0, 0, 0}};
    int c, pct = 2;
    opt.lib = getenv("MEMTRIM_LIB") ? getenv("MEMTRIM_LIB") : MEMTRIM_DEFAULT_LIB;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'c': opt.config = optarg; break;
        case 'l': opt.lib = optarg; break;
        case 'n': opt.no_memtrim = 1; break;
        case 'w': rc = parse_int("workers", optarg, 1, 256, &opt.workers); break;
        case 's': rc = parse_int("study-mb", optarg, 1, 65536, &opt.study_mb); break;
        case 'k': rc = parse_int("keep-percent", optarg, 0, 100, &pct); break;
        case 'C': rc = parse_int("concurrency", optarg, 1, 256, &opt.concurrency); break;
        case 'p': rc = parse_int("pause-ms", optarg, 0, 3600000, &opt.pause_ms); break;
        case 'N': rc = parse_int("studies", optarg, 0, 1000000000, &opt.studies); break;
        case 'P': opt.port_file = optarg; break;
        case 'D': opt.state_dir = optarg; break;
        case 'q': opt.quiet = 1; break;
        case 'S': rc = parse_int("seconds", optarg, 0, 1000000000, &opt.seconds); break;
        case 'G': rc = parse_int("linger", optarg, 0, 86400, &opt.linger); break;
        case 'Y': opt.canary = 1; break;
        case 'L': rc = parse_int("live-mb", optarg, 0, 1 << 20, &opt.live_mb); break;
        case 'T': rc = parse_int("trim-loop-ms", optarg, 1, 3600000, &opt.trim_loop_ms); break;
        case 'E': opt.trim_each = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (rc)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "memtrim-demo: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    opt.keep_permille = pct * 10;
    return 0;
}

/* ---- memtrim through the C ABI ----------------------------------------- */

static int abi_load(struct abi *a)
{
    a->handle = dlopen(opt.lib, RTLD_NOW | RTLD_LOCAL);
    if (!a->handle) {
        fprintf(stderr, "memtrim-demo: cannot load %s: %s\n", opt.lib, dlerror());
        return -1;
    }
    a->start = (int (*)(const char *, memtrim_t **, char **))dlsym(a->handle, "memtrim_start");
    a->stop = (void (*)(memtrim_t *))dlsym(a->handle, "memtrim_stop");
    a->port = (int (*)(const memtrim_t *))dlsym(a->handle, "memtrim_http_port");
    a->version = (const char *(*)(void))dlsym(a->handle, "memtrim_version");
    a->address = (int (*)(const memtrim_t *, char *, size_t))dlsym(a->handle,
                                                                   "memtrim_http_address");
    a->free_ = (void (*)(void *))dlsym(a->handle, "memtrim_free");
    if (!a->start || !a->stop || !a->port || !a->version || !a->free_) {
        fprintf(stderr, "memtrim-demo: %s lacks the memtrim C ABI\n", opt.lib);
        return -1;
    }
    return 0;
}

/*
 * --state-dir: make it (and its parents) and work from it, so that memtrim's
 * relative paths (the "Database") land there. The library, the configuration
 * and the port file are resolved before.
 */
static int enter_state_dir(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path)) {
        fprintf(stderr, "memtrim-demo: --state-dir: path too long\n");
        return -1;
    }
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST) {
                fprintf(stderr, "memtrim-demo: --state-dir: cannot create %s: %s\n", path,
                        strerror(errno));
                return -1;
            }
            *p = c;
            if (c == '\0')
                break;
        }
    }
    if (chdir(dir) != 0) {
        fprintf(stderr, "memtrim-demo: --state-dir: cannot enter %s: %s\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* A relative --port-file, made absolute before --state-dir changes directory. */
static char *absolute(const char *path)
{
    char cwd[4096];
    char *out = NULL;
    if (path == NULL || path[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL)
        return path ? strdup(path) : NULL;
    if (asprintf(&out, "%s/%s", cwd, path) < 0)
        return NULL;
    return out;
}

/* What the user should open: the address memtrim bound (wildcards said so). */
static void print_address(struct abi *a, memtrim_t *mt)
{
    char addr[128];
    int port = a->port(mt);
    if (a->address == NULL || a->address(mt, addr, sizeof(addr)) != 0)
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    if (strncmp(addr, "0.0.0.0:", 8) == 0 || strncmp(addr, "[::]:", 5) == 0)
        printf("memtrim %s: API on every address (%s); from this machine: "
               "http://127.0.0.1:%d/ (try: curl http://127.0.0.1:%d/memory/stats)\n",
               a->version(), addr, port, port);
    else
        printf("memtrim %s: API on http://%s/ (try: curl http://%s/memory/stats)\n",
               a->version(), addr, addr);
}

/* --config takes inline JSON or a file. */
static char *read_config(const char *value)
{
    if (!value)
        return NULL;
    if (value[0] == '{')
        return strdup(value);
    FILE *f = fopen(value, "r");
    if (!f) {
        fprintf(stderr, "memtrim-demo: --config: cannot read %s: %s\n", value, strerror(errno));
        return NULL;
    }
    char *text = calloc(1, 1 << 20);
    size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (text)
        text[n] = '\0';
    return text;
}

/* ---- the workload ------------------------------------------------------- */

static long rss_mb(const char *key)
{
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, strlen(key)) == 0)
            kb = atol(line + strlen(key));
    fclose(f);
    return kb / 1024;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static atomic_int trim_loop_stop;

/* Orthanc 1.11.3: malloc_trim(128 KiB) every 100 ms, whatever the heap holds. */
static void *trim_loop_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&trim_loop_stop)) {
        malloc_trim(128 * 1024);
        struct timespec d = {opt.trim_loop_ms / 1000, (long)(opt.trim_loop_ms % 1000) * 1000000};
        nanosleep(&d, NULL);
    }
    return NULL;
}

static void study(struct worker *w, int number, unsigned *seed)
{
    size_t target = (size_t)opt.study_mb << 20, total = 0, n = 0, cap = target / 512 + 16;
    void **blocks = malloc(cap * sizeof(*blocks));
    double t0 = now_s();

    if (!blocks)
        return;
    while (total < target && n < cap) {
        size_t size = 1024 + (size_t)(rand_r(seed) % (63 * 1024));
        uint64_t a0 = lat_now_ns();
        char *p = malloc(size);
        lat_record(&w->lat, lat_now_ns() - a0);
        if (!p)
            break;
        memset(p, (int)(n & 0xff), size);
        blocks[n++] = p;
        total += size;
    }
    /* Free what the last study kept, then all but a fraction of this one. */
    for (size_t i = 0; i < w->nkept; i++)
        free(w->kept[i]);
    free(w->kept);
    size_t keep_cap = n * (size_t)opt.keep_permille / 500 + 16; /* twice the expected share */
    w->kept = malloc(keep_cap * sizeof(void *));
    w->nkept = 0;
    for (size_t i = 0; i < n; i++) {
        if (w->kept && w->nkept < keep_cap &&
            (size_t)(rand_r(seed) % 1000) < (size_t)opt.keep_permille)
            w->kept[w->nkept++] = blocks[i];
        else
            free(blocks[i]);
    }
    free(blocks);
    if (opt.trim_each)
        malloc_trim(0);
    if (!opt.quiet)
        printf("study %d on worker %d: %zu MB in %.2f s, kept %zu blocks, RSS %ld MB\n", number,
               w->id, total >> 20, now_s() - t0, w->nkept, rss_mb("VmRSS:"));
    fflush(stdout);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    unsigned seed = (unsigned)w->id * 7919u + 17u;
    pthread_mutex_lock(&qlock);
    for (;;) {
        while (!stopping && queue_for[w->id] == 0)
            pthread_cond_wait(&qcond, &qlock);
        if (stopping)
            break;
        int number = queue_for[w->id];
        pthread_mutex_unlock(&qlock);
        study(w, number, &seed);
        atomic_fetch_add(&studies_done, 1);
        pthread_mutex_lock(&qlock);
        queue_for[w->id] = 0;
        in_flight--;
        pthread_cond_broadcast(&qdone);
    }
    pthread_mutex_unlock(&qlock);
    for (size_t i = 0; i < w->nkept; i++)
        free(w->kept[i]);
    free(w->kept);
    return NULL;
}

/* Hand studies to the workers in turn, opt.concurrency at a time, at opt.pause_ms. */
static void *dispatcher_main(void *arg)
{
    (void)arg;
    int next = 1, turn = 0;
    for (;;) {
        pthread_mutex_lock(&qlock);
        while (!stopping && (in_flight >= opt.concurrency || queue_for[turn] != 0))
            pthread_cond_wait(&qdone, &qlock);
        if (stopping || (opt.studies && next > opt.studies)) {
            pthread_mutex_unlock(&qlock);
            break;
        }
        queue_for[turn] = next++;
        in_flight++;
        turn = (turn + 1) % opt.workers;
        pthread_cond_broadcast(&qcond);
        /* The pause between studies; a stop ends it at once. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += opt.pause_ms / 1000;
        until.tv_nsec += (long)(opt.pause_ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        while (!stopping && pthread_cond_timedwait(&qdone, &qlock, &until) != ETIMEDOUT)
            ;
        pthread_mutex_unlock(&qlock);
    }
    return NULL;
}

static int write_port_file(int port)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", opt.port_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, opt.port_file)) {
        fprintf(stderr, "memtrim-demo: cannot write %s: %s\n", opt.port_file, strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct abi abi = {0};
    memtrim_t *mt = NULL;
    struct worker *workers;
    pthread_t dispatcher, trim_loop;
    struct canary canary;
    sigset_t sigs;
    int sig = 0, status = 0;

    if (parse_args(argc, argv))
        return 2;
    /* Signals are handled by the main thread alone, synchronously. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    char *port_file = absolute(opt.port_file);
    opt.port_file = port_file;
    if (!opt.no_memtrim) {
        char *config = read_config(opt.config), *err = NULL;
        if ((opt.config && !config) || abi_load(&abi))
            return 1;
        if (opt.state_dir && enter_state_dir(opt.state_dir))
            return 1;
        int rc = abi.start(config, &mt, &err);
        free(config);
        if (rc) {
            fprintf(stderr, "memtrim-demo: memtrim did not start: %s\n", err ? err : "?");
            abi.free_(err);
            return 1;
        }
        if (mt && abi.port(mt) > 0) {
            print_address(&abi, mt);
            if (opt.port_file && write_port_file(abi.port(mt)))
                status = 1;
        }
        fflush(stdout);
    }

    queue_for = calloc((size_t)opt.workers, sizeof(int));
    workers = calloc((size_t)opt.workers, sizeof(*workers));
    if (!queue_for || !workers) {
        fprintf(stderr, "memtrim-demo: out of memory\n");
        return 1;
    }
    /* The live set: 1 MB blocks, touched, kept to the end. */
    char **live = opt.live_mb ? calloc((size_t)opt.live_mb, sizeof(char *)) : NULL;
    for (int i = 0; live && i < opt.live_mb; i++)
        if ((live[i] = malloc(1 << 20)))
            memset(live[i], 1, 1 << 20);

    /* The canary first: its first malloc gives it an arena of its own. */
    if (opt.canary && canary_start(&canary)) {
        fprintf(stderr, "memtrim-demo: cannot start the canary thread\n");
        return 1;
    }
    if (opt.trim_loop_ms && pthread_create(&trim_loop, NULL, trim_loop_main, NULL)) {
        fprintf(stderr, "memtrim-demo: cannot start the trim loop\n");
        return 1;
    }
    double t_start = now_s();
    for (int i = 0; i < opt.workers; i++) {
        workers[i].id = i;
        if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) == 0)
            pthread_setname_np(workers[i].thread, "demo-worker"); /* for top, perf, the soak */
    }
    pthread_create(&dispatcher, NULL, dispatcher_main, NULL);

    /* Wait for a signal, for the last study when --studies was given, or --seconds. */
    for (;;) {
        struct timespec wait = {0, 100000000};
        sig = sigtimedwait(&sigs, NULL, &wait);
        if (sig > 0)
            break;
        if (opt.studies && atomic_load(&studies_done) >= opt.studies)
            break;
        if (opt.seconds && now_s() - t_start >= opt.seconds)
            break;
    }
    double elapsed = now_s() - t_start;
    int done = atomic_load(&studies_done);
    if (opt.linger > 0 && sig <= 0) {
        /* Idle as a server between bursts: workers alive, holding what they kept;
         * memtrim runs on. A signal ends the wait. */
        printf("memtrim-demo: workload done (%d studies), idle for %d s\n", done, opt.linger);
        fflush(stdout);
        struct timespec wait = {opt.linger, 0};
        sig = sigtimedwait(&sigs, NULL, &wait);
        printf("memtrim-demo: RSS %ld MB %d s after the workload (peak %ld MB)\n",
               rss_mb("VmRSS:"), opt.linger, rss_mb("VmHWM:"));
    }
    pthread_mutex_lock(&qlock);
    stopping = 1;
    pthread_cond_broadcast(&qcond);
    pthread_cond_broadcast(&qdone);
    pthread_mutex_unlock(&qlock);
    pthread_join(dispatcher, NULL);
    struct lat_hist all;
    memset(&all, 0, sizeof(all));
    for (int i = 0; i < opt.workers; i++) {
        pthread_join(workers[i].thread, NULL);
        lat_merge(&all, &workers[i].lat);
    }
    if (opt.trim_loop_ms) {
        atomic_store(&trim_loop_stop, 1);
        pthread_join(trim_loop, NULL);
    }
    printf("memtrim-demo: %d studies done, peak RSS %ld MB, RSS now %ld MB%s\n",
           atomic_load(&studies_done), rss_mb("VmHWM:"), rss_mb("VmRSS:"),
           sig > 0 ? " (signalled)" : "");
    printf("memtrim-demo: throughput: %d studies in %.2f s = %.3f studies/s\n", done, elapsed,
           elapsed > 0 ? done / elapsed : 0);
    lat_print(stdout, "workers", &all);

    if (opt.canary) {
        canary_stop(&canary);
        lat_print(stdout, "canary", &canary.hist);
    }
    fflush(stdout);
    if (mt)
        abi.stop(mt);
    free(workers);
    free(queue_for);
    for (int i = 0; live && i < opt.live_mb; i++)
        free(live[i]);
    free(live);
    free(port_file);
    /* The library stays loaded: a host unloads it only after stop, and need not at all. */
    return status;
}
