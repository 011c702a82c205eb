/*
 * main.c - the memtrim command: acts on a running process by pid from outside
 * (`memtrim trim PID`, `memtrim stats PID`), through one thread of it (inject.c), with the
 * kernel's reason when it may not. It talks to the engine only through the C ABI it injects;
 * for trim and stats it calls the target's own allocator. One thread; exit codes in
 * docs/memtrim.1. --tree walks a process's descendants and acts on each in turn.
 */
#include "inject.h"
#include "target.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum exit_code {
    EXIT_OK = 0,
    EXIT_USAGE = 1,
    EXIT_REFUSED = 2,     /* the kernel's rules or the target's state: untouched */
    EXIT_UNSUPPORTED = 3, /* static, musl, another allocator, another architecture */
    EXIT_NO_THREAD = 4,   /* no safe thread in time: untouched */
    EXIT_TIMEOUT = 5,     /* the call goes on past the deadline */
    EXIT_FAILED = 6,
};

struct opts {
    const char *verb;
    pid_t pid;
    int json;
    int tree;  /* --tree: pid and its descendants, one line each */
    double thread_wait_s, call_wait_s;
    long pad;
};

static void usage(FILE *f)
{
    fputs("usage: memtrim trim PID [--pad BYTES] [options]\n"
          "       memtrim stats PID [options]\n"
          "options: --json (JSON even on a terminal), --tree (PID and its descendants, a line\n"
          "         each), --thread-wait SECONDS (default 5),\n"
          "         --timeout SECONDS (the call's deadline, default 30)\n"
          "See memtrim(1).\n", f);
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || v > 3600)
        return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->thread_wait_s = 5;
    o->call_wait_s = 30;
    o->json = !isatty(STDOUT_FILENO);
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--tree")) {
            o->tree = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(EXIT_OK);
        } else if ((!strcmp(a, "--thread-wait") || !strcmp(a, "--timeout")) && i + 1 < argc) {
            if (parse_double(argv[i + 1], a[2] == 't' && a[3] == 'h' ? &o->thread_wait_s
                                                                    : &o->call_wait_s) != 0) {
                fprintf(stderr, "memtrim: %s wants seconds between 0 and 3600, not '%s'\n", a,
                        argv[i + 1]);
                return -1;
            }
            i++;
        } else if (!strcmp(a, "--pad") && i + 1 < argc) {
            char *end;
            errno = 0;
            long v = strtol(argv[i + 1], &end, 10);
            if (errno || end == argv[i + 1] || *end || v < 0) {
                fprintf(stderr, "memtrim: --pad wants a byte count, not '%s'\n", argv[i + 1]);
                return -1;
            }
            o->pad = v;
            i++;
        } else if (a[0] == '-') {
            fprintf(stderr, "memtrim: unknown option '%s'\n", a);
            return -1;
        } else if (pos == 0) {
            o->verb = a;
            pos++;
        } else if (pos == 1) {
            char *end;
            errno = 0;
            long v = strtol(a, &end, 10);
            if (errno || end == a || *end || v <= 0 || v > 0x3fffffff) {
                fprintf(stderr, "memtrim: '%s' is not a process id\n", a);
                return -1;
            }
            o->pid = (pid_t)v;
            pos++;
        } else {
            fprintf(stderr, "memtrim: unexpected argument '%s'\n", a);
            return -1;
        }
    }
    if (!o->verb || (strcmp(o->verb, "trim") && strcmp(o->verb, "stats"))) {
        fprintf(stderr, "memtrim: %s\n", o->verb ? "unknown command (trim, stats)" : "no command");
        return -1;
    }
    if (!o->pid) {
        fprintf(stderr, "memtrim: %s needs a process id\n", o->verb);
        return -1;
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The error as one JSON object on stdout (for scripts) and a line on stderr. */
static int fail(const struct opts *o, int code, const char *msg)
{
    static const char *const codes[] = {"ok", "usage", "refused", "unsupported", "no_safe_thread",
                                        "timeout", "failed"};
    if (o->tree && !o->json)
        printf("memtrim: process %d: %s\n", (int)o->pid, msg); /* its line among the others' */
    else
        fprintf(stderr, "memtrim: %s\n", msg);
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "pid", o->pid);
        cJSON *e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "code", codes[code]);
        cJSON_AddStringToObject(e, "message", msg);
        char *s = cJSON_PrintUnformatted(j);
        if (s)
            puts(s);
        free(s);
        cJSON_Delete(j);
    }
    return code;
}

static void emit(const struct opts *o, cJSON *j, const char *human)
{
    if (o->json) {
        char *s = cJSON_PrintUnformatted(j);
        if (s)
            puts(s);
        free(s);
    } else {
        puts(human);
    }
    cJSON_Delete(j);
}

static void mib(char *buf, size_t len, long long bytes)
{
    snprintf(buf, len, "%.1f MiB", (double)bytes / 1048576.0);
}

static int do_call(const struct opts *o, struct target *t, struct inject_call *c)
{
    char err[2048];
    c->thread_wait_s = o->thread_wait_s;
    c->call_wait_s = o->call_wait_s;
    int rc = inject_run(t, c, err, sizeof err);
    switch (rc) {
    case INJECT_OK:
        return 0;
    case INJECT_REFUSED:
        return fail(o, EXIT_REFUSED, err);
    case INJECT_NO_THREAD:
        return fail(o, EXIT_NO_THREAD, err);
    case INJECT_TIMEOUT:
        return fail(o, EXIT_TIMEOUT, err);
    default:
        return fail(o, EXIT_FAILED, err);
    }
}

static void add_common(cJSON *j, const struct target *t, const struct inject_call *c)
{
    cJSON_AddNumberToObject(j, "pid", t->pid);
    cJSON_AddStringToObject(j, "allocator", target_alloc_name(t->alloc));
    cJSON_AddNumberToObject(j, "thread", c->tid);
    cJSON_AddStringToObject(j, "thread_syscall", c->syscall);
    cJSON_AddNumberToObject(j, "thread_stopped_seconds", c->stopped_s);
    cJSON_AddNumberToObject(j, "call_seconds", c->call_s);
}

static int trim(const struct opts *o, struct target *t)
{
    uint64_t fn = target_sym(&t->libc, "malloc_trim");
    if (!fn)
        return fail(o, EXIT_UNSUPPORTED, "the target's libc exports no malloc_trim");
    struct inject_call c = {.func = fn, .args = {(uint64_t)o->pad}};
    int64_t before = target_rss(t->pid);
    double t0 = now_s();
    int rc = do_call(o, t, &c);
    if (rc)
        return rc;
    double dur = now_s() - t0;
    int64_t after = target_rss(t->pid);
    cJSON *j = cJSON_CreateObject();
    add_common(j, t, &c);
    cJSON_AddNumberToObject(j, "rss_before_bytes", (double)before);
    cJSON_AddNumberToObject(j, "rss_after_bytes", (double)after);
    cJSON_AddNumberToObject(j, "released_bytes", (double)(before > after ? before - after : 0));
    cJSON_AddNumberToObject(j, "duration_seconds", dur);
    cJSON_AddNumberToObject(j, "malloc_trim_return", (double)(int)c.result);
    char human[512], b[32], a[32], r[32];
    mib(b, sizeof b, before);
    mib(a, sizeof a, after);
    mib(r, sizeof r, before > after ? before - after : 0);
    snprintf(human, sizeof human, "memtrim: process %d (%s, %s): RSS %s -> %s, released %s in %.3f s "
             "(thread %d, stopped %.1f ms in %s)", (int)t->pid, t->st.name, target_alloc_name(t->alloc),
             b, a, r, dur, (int)c.tid, c.stopped_s * 1e3, c.syscall);
    emit(o, j, human);
    return EXIT_OK;
}

static int stats(const struct opts *o, struct target *t)
{
    uint64_t fn = target_sym(&t->libc, "mallinfo2");
    int v2 = fn != 0;
    if (!fn)
        fn = target_sym(&t->libc, "mallinfo");
    if (!fn)
        return fail(o, EXIT_UNSUPPORTED, "the target's libc exports neither mallinfo2 nor mallinfo");
    struct inject_call c = {.func = fn, .arg0_is_out = 1, .out_len = 80};
    double t0 = now_s();
    int rc = do_call(o, t, &c);
    if (rc)
        return rc;
    double dur = now_s() - t0;
    uint64_t f[10];
    for (int i = 0; i < 10; i++) {
        if (v2) {
            memcpy(&f[i], c.out + 8 * i, 8);
        } else {
            int x;
            memcpy(&x, c.out + 4 * i, 4);
            f[i] = (uint64_t)(unsigned)x;
        }
    }
    /* mallinfo2: arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost */
    int version;
    int64_t usage, max, rss = target_rss(t->pid);
    target_cgroup(t->pid, &version, &usage, &max);
    cJSON *j = cJSON_CreateObject();
    add_common(j, t, &c);
    cJSON_AddNumberToObject(j, "duration_seconds", dur);
    cJSON_AddNumberToObject(j, "rss_bytes", (double)rss);
    cJSON_AddNumberToObject(j, "heap_in_use_bytes", (double)(f[7] + f[4]));
    cJSON_AddNumberToObject(j, "heap_free_bytes", (double)f[8]);
    cJSON_AddNumberToObject(j, "heap_mmapped_bytes", (double)f[4]);
    cJSON_AddNumberToObject(j, "arena_bytes", (double)f[0]);
    cJSON_AddNumberToObject(j, "heap_free_chunks", (double)f[1]);
    cJSON_AddNumberToObject(j, "heap_top_pad_bytes", (double)f[9]);
    cJSON_AddStringToObject(j, "heap_source", v2 ? "mallinfo2" : "mallinfo");
    cJSON_AddNumberToObject(j, "cgroup_version", version);
    if (usage >= 0)
        cJSON_AddNumberToObject(j, "cgroup_usage_bytes", (double)usage);
    if (max >= 0)
        cJSON_AddNumberToObject(j, "cgroup_max_bytes", (double)max);
    char human[512], r[32], u[32], fr[32];
    mib(r, sizeof r, rss);
    mib(u, sizeof u, (long long)(f[7] + f[4]));
    mib(fr, sizeof fr, (long long)f[8]);
    snprintf(human, sizeof human, "memtrim: process %d (%s, %s): RSS %s, heap in use %s, free in the "
             "heap %s (%llu free chunks)", (int)t->pid, t->st.name, target_alloc_name(t->alloc), r, u,
             fr, (unsigned long long)f[1]);
    emit(o, j, human);
    return EXIT_OK;
}

/* One process: the checks, then the verb; its exit code. */
static int act(const struct opts *o)
{
    struct target t = {.pid = o->pid};
    char err[1024], buf[1024];
    if (target_read_status(o->pid, &t.st, err, sizeof err) != 0)
        return fail(o, EXIT_FAILED, err);
    if (o->pid == getpid())
        return fail(o, EXIT_USAGE, "memtrim cannot act on itself");
    if (t.st.state == 'Z' || t.st.state == 'X')
        return fail(o, EXIT_FAILED, "the process has exited (zombie)");
    if (t.st.state == 'T' || t.st.state == 't') {
        snprintf(buf, sizeof buf, "process %d is stopped (State: %c): memtrim acts only on running "
                 "processes", (int)o->pid, t.st.state);
        return fail(o, EXIT_REFUSED, buf);
    }
    const char *why = target_refusal(o->pid, &t.st, buf, sizeof buf);
    if (why)
        return fail(o, EXIT_REFUSED, why);
    if (t.st.seccomp == 1) {
        snprintf(buf, sizeof buf, "process %d runs in seccomp strict mode (Seccomp: 1): any call "
                 "memtrim makes there would kill it", (int)o->pid);
        return fail(o, EXIT_REFUSED, buf);
    }
    if (target_find_alloc(&t, err, sizeof err) != 0)
        return fail(o, t.alloc == ALLOC_GLIBC ? EXIT_FAILED : EXIT_UNSUPPORTED, err);
    return !strcmp(o->verb, "trim") ? trim(o, &t) : stats(o, &t);
}

/* --tree: each process of the tree in turn, one line each; a refusal for one does not stop
 * the others. The exit code is 0 when every one succeeded, else the first failure's. */
static int act_tree(const struct opts *o)
{
    enum { TREE_MAX = 4096 };
    pid_t *pids = malloc(TREE_MAX * sizeof *pids);
    if (!pids)
        return fail(o, EXIT_FAILED, "out of memory");
    int n = target_tree(o->pid, pids, TREE_MAX), worst = 0;
    if (n == 0) {
        free(pids);
        char buf[64];
        snprintf(buf, sizeof buf, "no process %d", (int)o->pid);
        return fail(o, EXIT_FAILED, buf);
    }
    for (int i = 0; i < n; i++) {
        if (pids[i] == getpid())
            continue; /* run from a shell of the tree */
        struct opts one = *o;
        one.pid = pids[i];
        int rc = act(&one);
        fflush(stdout);
        if (rc && !worst)
            worst = rc;
    }
    free(pids);
    return worst;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse_args(argc, argv, &o) != 0) {
        usage(stderr);
        return EXIT_USAGE;
    }
#ifndef __x86_64__
    return fail(&o, EXIT_UNSUPPORTED, "this memtrim command supports x86_64 only");
#endif
    return o.tree ? act_tree(&o) : act(&o);
}
