/*
 * harness.h - the unit tests' small harness: CHECK macros that count and
 * report, and a closing "N passed, N failed, N skipped" line. Each test binary
 * is one ctest test; it fails when any check failed, or when it checked
 * nothing. A binary that skipped a case (with its reason printed) and failed
 * none exits HARNESS_SKIP_CODE, which ctest reports as skipped
 * (SKIP_RETURN_CODE): a skip is never counted silently as a pass.
 *
 * A skip is accepted only when tests/skips.txt lists it for the build it happens in
 * (plain, asan, tsan, valgrind), with its reason: any other skip is a failed check, so a
 * stage that skipped a case nobody decided to skip fails (ctest and tests/run.sh's valgrind
 * stage alike).
 */
#ifndef MEMTRIM_HARNESS_H
#define MEMTRIM_HARNESS_H

#include <dirent.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int h_passed, h_failed, h_skipped;

/* The exit code ctest reads as "skipped" (CMakeLists.txt sets SKIP_RETURN_CODE). */
#define HARNESS_SKIP_CODE 77

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (cond) {                                                                                \
            h_passed++;                                                                            \
        } else {                                                                                   \
            h_failed++;                                                                            \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond);                     \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK(cond) CHECK_MSG(cond, "%s", "")
#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long h_a_ = (long long)(a), h_b_ = (long long)(b);                                    \
        CHECK_MSG(h_a_ == h_b_, "%lld != %lld (%s vs %s)", h_a_, h_b_, #a, #b);                    \
    } while (0)
static inline int h_contains(const char *s, const char *sub)
{
    return s && strstr(s, sub) != NULL;
}
static inline const char *h_str(const char *s)
{
    return s ? s : "(null)";
}
#define CHECK_CONTAINS(s, sub)                                                                     \
    CHECK_MSG(h_contains((s), (sub)), "'%s' does not contain '%s'", h_str(s), (sub))

/* Sanitizer builds replace glibc's allocator: mallinfo2 and malloc_trim then
 * say nothing about glibc's arenas, so tests of their effects skip there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HARNESS_SANITIZER_ALLOCATOR 1
#else
#define HARNESS_SANITIZER_ALLOCATOR 0
#endif
/* Valgrind replaces it too, at run time (its preload library is in LD_PRELOAD). */
static inline int harness_under_valgrind(void)
{
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "vgpreload") != NULL;
}
#define SKIP_IF_SANITIZER_ALLOCATOR()                                                              \
    do {                                                                                           \
        if (HARNESS_SANITIZER_ALLOCATOR || harness_under_valgrind())                               \
            SKIP("a sanitizer's or valgrind's allocator replaces glibc's here (the plain run "    \
                 "does this)");                                                                    \
    } while (0)

/* MEMTRIM_TEST_CASE=name[,name...]: run only those cases of a binary (a control's command,
 * tests/controls.txt, names the case its switch breaks). A name that no RUN matched is an
 * error of the command, not a failure of the test: harness_end exits HARNESS_NOT_RUN_CODE. */
#define HARNESS_NOT_RUN_CODE 126
static int h_selected_runs;
static inline int harness_selected(const char *name)
{
    const char *only = getenv("MEMTRIM_TEST_CASE");
    size_t n = strlen(name);
    if (only == NULL || *only == '\0')
        return 1;
    for (const char *p = only; (p = strstr(p, name)) != NULL; p += n)
        if ((p == only || p[-1] == ',') && (p[n] == '\0' || p[n] == ',')) {
            h_selected_runs++;
            return 1;
        }
    return 0;
}

#define RUN(test)                                                                                  \
    do {                                                                                           \
        if (!harness_selected(#test))                                                              \
            break;                                                                                 \
        double t0_ = harness_now_s();                                                              \
        fprintf(stderr, "-- %s\n", #test);                                                         \
        test();                                                                                    \
        fprintf(stderr, "   %s: %.3f s\n", #test, harness_now_s() - t0_);                          \
    } while (0)

/* The build a skip happens in, as tests/skips.txt names it. */
static inline const char *harness_build(void)
{
    if (harness_under_valgrind())
        return "valgrind";
#if defined(__SANITIZE_ADDRESS__)
    return "asan";
#elif defined(__SANITIZE_THREAD__)
    return "tsan";
#else
    return "plain";
#endif
}

/* Whether tests/skips.txt lists id ("test_abi:test_fork") for build: a line
 * "<builds> <id glob> <reason>", builds comma-separated; '#' starts a comment. */
static inline int harness_skip_listed(const char *build, const char *id)
{
#ifdef MEMTRIM_SOURCE_DIR
    FILE *f = fopen(MEMTRIM_SOURCE_DIR "/tests/skips.txt", "re");
    if (!f) {
        fprintf(stderr, "cannot open " MEMTRIM_SOURCE_DIR "/tests/skips.txt\n");
        return 0;
    }
    char line[1024], builds[256], glob[512];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f)) {
        if (line[0] == '#' || sscanf(line, "%255s %511s", builds, glob) != 2)
            continue;
        if (!strcmp(glob, id) || !fnmatch(glob, id, 0))
            for (char *save = NULL, *b = strtok_r(builds, ",", &save); b && !found;
                 b = strtok_r(NULL, ",", &save))
                found = strcmp(b, build) == 0;
    }
    fclose(f);
    return found;
#else
    (void)build;
    (void)id;
    return 0;
#endif
}

/* A case (or, with part, one part of a case) that cannot run here: counted as skipped when
 * tests/skips.txt lists it for this build, else as a failed check. Its id is
 * <file>:<function>, or <file>:<function>/<part>. */
static inline void harness_skip(const char *file, const char *func, const char *part,
                                const char *why)
{
    const char *base = strrchr(file, '/');
    char id[320];
    snprintf(id, sizeof(id), "%.100s:%.100s%s%.60s", base ? base + 1 : file, func,
             part ? "/" : "", part ? part : "");
    char *dot = strstr(id, ".c:");
    if (dot)
        memmove(dot, dot + 2, strlen(dot + 2) + 1);
    if (harness_skip_listed(harness_build(), id)) {
        h_skipped++;
        printf("SKIP %s: %s\n", id, why);
    } else {
        h_failed++;
        printf("SKIP %s: %s\n", id, why);
        fprintf(stderr, "FAILED: %s skipped in the %s build (%s), and tests/skips.txt does "
                "not list it for that build\n", id, harness_build(), why);
    }
}

#define SKIP(why)                                                                                  \
    do {                                                                                           \
        harness_skip(__FILE__, __func__, NULL, why);                                               \
        return;                                                                                    \
    } while (0)

/* One part of a case that loops over several (a library, an address family) cannot run here:
 * the same rule as SKIP under the id <file>:<function>/<part>; the case goes on. */
#define SKIP_PART(part, why) harness_skip(__FILE__, __func__, part, why)

/* Monotonic seconds, for the deadlines below. */
static inline double harness_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wait up to `seconds` for cond; the deadlines are generous: they guard against hangs. */
#define WAIT_FOR(cond, seconds)                                                                    \
    do {                                                                                           \
        double until_ = harness_now_s() + (seconds);                                               \
        while (!(cond) && harness_now_s() < until_)                                                \
            usleep(2000);                                                                          \
    } while (0)

/* 1 ms of the calling thread's CPU: the host at work while a test waits for memtrim to read
 * its heap. The housekeeper reads the heap of a host that ran (10 ms of its CPU since the last
 * reading: an idle host frees nothing); a test idle in WAIT_FOR after its frees saw the next
 * reading only once memtrim's own threads had added up those 10 ms, up to seconds on a loaded
 * machine. WAIT_FOR(cond || (harness_host_works(), 0), seconds). */
static inline void harness_host_works(void)
{
    double until = harness_now_s() + 0.001;
    while (harness_now_s() < until)
        ;
}

/* Whether a thread of this process named `name` (its comm, as mt_thread_start names it) is
 * in system call `nr` (/proc/self/task/<tid>/syscall), and that call's first argument. */
static inline int harness_thread_in(const char *name, long nr, unsigned long *arg0)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int in = 0;
    while (d && !in && (e = readdir(d)) != NULL) {
        char path[320], comm[64];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        int named = f && fgets(comm, sizeof(comm), f) &&
                    strncmp(comm, name, strlen(name)) == 0 && comm[strlen(name)] == '\n';
        if (f)
            fclose(f);
        if (!named)
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/syscall", e->d_name);
        long at = -1;
        f = fopen(path, "r");
        in = f && fscanf(f, "%ld %lx", &at, arg0) == 2 && at == nr;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return in;
}

/* Whether this process has a thread named `name` (its comm). */
static inline int harness_thread_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d)) != NULL) {
        char path[320], comm[64];
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = e->d_name[0] == '.' ? NULL : fopen(path, "r");
        found = f && fgets(comm, sizeof(comm), f) && strncmp(comm, name, strlen(name)) == 0 &&
                comm[strlen(name)] == '\n';
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return found;
}

/* Whether that thread is waiting in futex(2): on a lock or a condition, parked. A condition
 * to wait on (WAIT_FOR) where a test needs that thread asleep, not a time. */
static inline int harness_thread_waits(const char *name)
{
    unsigned long arg0 = 0;
    return harness_thread_in(name, SYS_futex, &arg0);
}

/* A fresh directory /tmp/memtrim-<name>-XXXXXX into buf; 0 or -1. */
static inline int harness_tmpdir(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "/tmp/memtrim-%s-XXXXXX", name);
    if (mkdtemp(buf) == NULL) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

/* dir/name in one of four rotating static buffers (enough for a call's arguments). */
static inline char *harness_path(const char *dir, const char *name)
{
    static char buf[4][256];
    static int i;
    char *p = buf[i++ % 4];
    snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
    return p;
}

/* Write root/rel (a fake /proc or cgroup tree), making its directories. */
static inline void harness_put(const char *root, const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(path, 0755);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Remove a test directory and everything in it. */
static inline void harness_rmtree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static inline int harness_end(void)
{
    const char *only = getenv("MEMTRIM_TEST_CASE");
    if (only != NULL && *only != '\0' && h_selected_runs == 0) {
        printf("MEMTRIM_TEST_CASE=%s: no case of this binary has that name\n", only);
        return HARNESS_NOT_RUN_CODE;
    }
    printf("%d passed, %d failed, %d skipped\n", h_passed, h_failed, h_skipped);
    if (h_failed)
        return 1;
    if (h_passed == 0) {
        printf("FAILED: no check ran\n");
        return 1;
    }
    return h_skipped ? HARNESS_SKIP_CODE : 0;
}

#endif /* MEMTRIM_HARNESS_H */
