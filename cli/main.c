/*
 * main.c - the memtrim command: acts on a running process by pid from outside
 * (`memtrim trim PID`, `memtrim stats PID`), through one thread of it (inject.c), with the
 * kernel's reason when it may not. It talks to the engine only through the C ABI it injects;
 * for trim and stats it calls the target's own allocator; `memtrim load PID` is load.c. One
 * thread; exit codes in docs/memtrim.1. --tree walks a process's descendants and acts on each
 * in turn, each checked to be the process read (its start time) before anything is done.
 */
#include "agent.h"
#include "cli.h"
#include "libhold.h"
#include "tramp.h"

#include "../common/control.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fputs("usage: memtrim trim PID [--pad BYTES] [options]\n"
          "       memtrim stats PID [options]\n"
          "       memtrim load PID [--config JSON|FILE] [--library PATH] [options]\n"
          "       memtrim agent [--config JSON|FILE] [--dry-run] (the node daemon)\n"
          "options: --json (JSON even on a terminal), --tree (PID and its descendants, a line\n"
          "         each), --thread-wait SECONDS (default 5),\n"
          "         --timeout SECONDS (the call's deadline, default 30),\n"
          "         --raise LEVELS (trim, stats: nice levels above the taken thread for the\n"
          "         call's thread, 0-20; default 0: as it inherits)\n"
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

static int parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* argv[*i], an option (with its value, *i moved past it): 0, or -1 with the reason printed. */
static int parse_option(int argc, char **argv, int *i, struct opts *o)
{
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    long n;
    if (!strcmp(a, "--json")) {
        o->json = 1;
    } else if (!strcmp(a, "--tree")) {
        o->tree = 1;
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
        usage(stdout);
        exit(fflush(stdout) == 0 && !ferror(stdout) ? EXIT_OK : EXIT_FAILED); /* as main's */
    } else if ((!strcmp(a, "--thread-wait") || !strcmp(a, "--timeout")) && v) {
        if (parse_double(v, a[3] == 'h' ? &o->thread_wait_s : &o->call_wait_s) != 0) {
            fprintf(stderr, "memtrim: %s wants seconds between 0 and 3600, not '%s'\n", a, v);
            return -1;
        }
        (*i)++;
    } else if ((!strcmp(a, "--config") || !strcmp(a, "--library")) && v) {
        *(a[2] == 'c' ? &o->config : &o->library) = v;
        (*i)++;
    } else if (!strcmp(a, "--start-time") && v) { /* the agent: act only on that process */
        unsigned long long t;
        char *end;
        errno = 0;
        t = strtoull(v, &end, 10);
        if (errno || end == v || *end || !t) {
            fprintf(stderr, "memtrim: --start-time wants /proc/PID/stat's start time, not '%s'\n", v);
            return -1;
        }
        o->start_time = t;
        (*i)++;
    } else if (!strcmp(a, "--raise") && v) {
        if (parse_long(v, 0, 20, &n) != 0) {
            fprintf(stderr, "memtrim: --raise wants nice levels from 0 to 20, not '%s'\n", v);
            return -1;
        }
        o->raise = (int)n;
        o->raise_given = 1;
        (*i)++;
    } else if (!strcmp(a, "--pad") && v) {
        if (parse_long(v, 0, LONG_MAX, &n) != 0) {
            fprintf(stderr, "memtrim: --pad wants a byte count, not '%s'\n", v);
            return -1;
        }
        o->pad = n;
        (*i)++;
    } else {
        fprintf(stderr, "memtrim: unknown option '%s'\n", a);
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->thread_wait_s = 5;
    o->call_wait_s = 30;
    o->raise = 0; /* not raised unless asked: no gain measured quiet (docs/benchmarks.md) */
    o->json = !isatty(STDOUT_FILENO);
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (a[0] == '-') {
            if (parse_option(argc, argv, &i, o) != 0)
                return -1;
        } else if (pos == 0) {
            o->verb = a;
            pos++;
        } else if (pos == 1) {
            if (parse_long(a, 1, 0x3fffffff, &v) != 0) {
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
    if (!o->verb || (strcmp(o->verb, "trim") && strcmp(o->verb, "stats") && strcmp(o->verb, "load"))) {
        fprintf(stderr, "memtrim: %s\n", o->verb ? "unknown command (trim, stats, load)" : "no command");
        return -1;
    }
    if (!o->pid) {
        fprintf(stderr, "memtrim: %s needs a process id\n", o->verb);
        return -1;
    }
    if (o->tree && !strcmp(o->verb, "load")) {
        fprintf(stderr, "memtrim: --tree is for trim and stats; load acts on one process\n");
        return -1;
    }
    if (o->raise_given && !strcmp(o->verb, "load")) { /* memtrim_attach's threads would inherit it */
        fprintf(stderr, "memtrim: --raise is for trim and stats; load's thread is never raised\n");
        return -1;
    }
    return 0;
}

static void mib(char *buf, size_t len, long long bytes)
{
    snprintf(buf, len, "%.1f MiB", (double)bytes / 1048576.0);
}

/* The system calls each verb's function makes (seccomp.c checks them against a filter):
 * glibc's malloc_trim returns memory with madvise(MADV_DONTNEED), sbrk and munmap (and a
 * PROT_NONE mmap over a heap's tail under overcommit 2), and waits on its arenas' locks;
 * the other allocators' release calls with arguments of their own choosing. */
#define FUTEX_LOCKS {"futex(lock, FUTEX_WAIT_PRIVATE)", SYS_futex, {0, 128}, 0x2}, \
                    {"futex(lock, FUTEX_WAKE_PRIVATE)", SYS_futex, {0, 129}, 0x2}
static const struct inject_syscall glibc_trim_calls[] = {
    {"madvise(addr, len, MADV_DONTNEED)", SYS_madvise, {0, 0, 4}, 0x4},
    {"brk(addr)", SYS_brk, {0}, 0},
    {"munmap(addr, len)", SYS_munmap, {0}, 0},
    {"mmap(addr, len, PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_FIXED, -1, 0)", SYS_mmap,
     {0, 0, 0, 0x32, (uint64_t)-1, 0}, 0x3c},
    FUTEX_LOCKS,
};
static const struct inject_syscall other_trim_calls[] = {
    {"madvise", SYS_madvise, {0}, 0}, {"munmap", SYS_munmap, {0}, 0},
    {"mmap", SYS_mmap, {0}, 0},       {"futex", SYS_futex, {0}, 0},
};
static const struct inject_syscall stats_calls[] = {FUTEX_LOCKS};

/* The allocator's own release call, as its row of the allocator table (common/alloc_table)
 * says, the one core/alloc makes in-process: glibc malloc_trim(pad); jemalloc
 * mallctl("arena.4096.purge", NULL, NULL, NULL, 0) (the string copied into our page);
 * tcmalloc MallocExtension_ReleaseFreeMemory(); mimalloc mi_collect(true). */
static int trim(const struct opts *o, struct target *t)
{
    const struct mt_alloc_row *row = target_alloc_row(t);
    if (row->release_own_thread) {
        char buf[512];
        snprintf(buf, sizeof buf, "process %d's malloc is %s, whose release call %s collects the "
                 "calling thread's own heap: on memtrim's own thread it would release nothing "
                 "another thread freed, and memtrim calls on no other thread (docs/command.md): "
                 "trim refuses it", (int)t->pid, row->name, row->release_call);
        return cli_fail(o, EXIT_UNSUPPORTED, buf);
    }
    const struct target_lib *lib = row->libc ? &t->libc : &t->alloc_lib;
    const char *sym = row->release_sym;
    if (row->libc && mt_control("suite-cli-release-usable-size")) /* 5c3509f's control */
        sym = "malloc_usable_size";
    uint64_t fn = target_sym(lib, sym);
    if (!fn) {
        char buf[700];
        snprintf(buf, sizeof buf, "the target's %s (%s) exports no %s", target_alloc_name(t->alloc),
                 lib->path, sym);
        return cli_fail(o, EXIT_UNSUPPORTED, buf);
    }
    struct inject_call c = {.func = fn, .args = {(uint64_t)o->pad}};
    if (row->release_arg == MT_ALLOC_ARG_STRING)
        c = (struct inject_call){.func = fn, .in = row->release_str, .args = {TR_PATH},
                                 .page_args = 1};
    else if (row->release_arg == MT_ALLOC_ARG_INT)
        c.args[0] = (uint64_t)row->release_int;
    c.raise = o->raise; /* the call thread raised for its call (prio.h) */
    int glibc = row->libc;
    c.syscalls = glibc ? glibc_trim_calls : other_trim_calls;
    c.n_syscalls = glibc ? sizeof glibc_trim_calls / sizeof glibc_trim_calls[0]
                         : sizeof other_trim_calls / sizeof other_trim_calls[0];
    int64_t before = target_rss(t->pid);
    double t0 = cli_now();
    int rc = cli_call(o, t, &c);
    if (rc)
        return rc;
    double dur = cli_now() - t0;
    int64_t after = target_rss(t->pid);
    cJSON *j = cJSON_CreateObject();
    cli_add_common(j, t, &c);
    cJSON_AddNumberToObject(j, "rss_before_bytes", (double)before);
    cJSON_AddNumberToObject(j, "rss_after_bytes", (double)after);
    cJSON_AddNumberToObject(j, "released_bytes", (double)(before > after ? before - after : 0));
    cJSON_AddNumberToObject(j, "duration_seconds", dur);
    cJSON_AddStringToObject(j, "release_call", row->release_call);
    if (row->release_result[0])
        cJSON_AddNumberToObject(j, row->release_result, (double)(int)c.result);
    char human[768], b[32], a[32], r[32];
    mib(b, sizeof b, before);
    mib(a, sizeof a, after);
    mib(r, sizeof r, before > after ? before - after : 0);
    snprintf(human, sizeof human, "memtrim: process %d (%s, %s): RSS %s -> %s, released %s in %.3f s "
             "(thread %d, stopped %.1f ms in %s; the call at nice %d%s%s)", (int)t->pid, t->st.name,
             target_alloc_name(t->alloc), b, a, r, dur, (int)c.tid, c.stopped_s * 1e3, c.syscall,
             c.prio.nice, c.prio.raised ? "" : ", not raised: ", c.prio.raised ? "" : c.prio.why);
    cli_emit(o, j, human);
    return EXIT_OK;
}

/* mallinfo2's ten size_t fields, or mallinfo's ten ints (before glibc 2.33), in order:
 * arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost. */
static void mallinfo_fields(const unsigned char *out, int v2, uint64_t f[10])
{
    for (int i = 0; i < 10; i++) {
        if (v2) {
            memcpy(&f[i], out + 8 * i, 8);
        } else {
            int x;
            memcpy(&x, out + 4 * i, 4);
            f[i] = (uint64_t)(unsigned)x;
        }
    }
}

static int stats(const struct opts *o, struct target *t)
{
    const struct mt_alloc_row *row = target_alloc_row(t);
    if (!row->stats_sym) {
        char buf[256];
        snprintf(buf, sizeof buf, "process %d's malloc is %s: stats reads glibc's mallinfo2 only "
                 "(trim calls %s)", (int)t->pid, row->name, row->release_call);
        return cli_fail(o, EXIT_UNSUPPORTED, buf);
    }
    const struct target_lib *lib = row->libc ? &t->libc : &t->alloc_lib;
    uint64_t fn = target_sym(lib, row->stats_sym);
    int v2 = fn != 0;
    if (!fn && row->stats_sym_old)
        fn = target_sym(lib, row->stats_sym_old);
    if (!fn)
        return cli_fail(o, EXIT_UNSUPPORTED, "the target's libc exports neither mallinfo2 nor mallinfo");
    struct inject_call c = {.func = fn, .arg0_is_out = 1, .out_len = 80, .syscalls = stats_calls,
                            .n_syscalls = sizeof stats_calls / sizeof stats_calls[0],
                            .raise = o->raise};
    double t0 = cli_now();
    int rc = cli_call(o, t, &c);
    if (rc)
        return rc;
    double dur = cli_now() - t0;
    uint64_t f[10];
    mallinfo_fields(c.out, v2, f);
    int version;
    int64_t usage, max, rss = target_rss(t->pid);
    target_cgroup(t->pid, &version, &usage, &max);
    cJSON *j = cJSON_CreateObject();
    cli_add_common(j, t, &c);
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
    cli_emit(o, j, human);
    return EXIT_OK;
}

/* One process: the checks, then the verb; its exit code. */
static int act(const struct opts *o)
{
    struct target t = {.pid = o->pid, .start_time = o->start_time}; /* inject.c checks it too */
    char err[1024], buf[1024];
    unsigned long long start = target_start_time(o->pid);
    if (target_read_status(o->pid, &t.st, err, sizeof err) != 0)
        return cli_fail(o, EXIT_FAILED, err);
    if (!t.start_time)
        t.start_time = start;
    if (start != t.start_time) { /* --tree: not the process read */
        snprintf(buf, sizeof buf, "process %d is not the one the tree was read with (its start "
                 "time changed: it exited and the pid was reused): not touched", (int)o->pid);
        return cli_fail(o, EXIT_FAILED, buf);
    }
    if (o->pid == getpid())
        return cli_fail(o, EXIT_USAGE, "memtrim cannot act on itself");
    if (t.st.state == 'Z' || t.st.state == 'X')
        return cli_fail(o, EXIT_FAILED, "the process has exited (zombie)");
    if (t.st.state == 'T' || t.st.state == 't') {
        snprintf(buf, sizeof buf, "process %d is stopped (State: %c): memtrim acts only on running "
                 "processes", (int)o->pid, t.st.state);
        return cli_fail(o, EXIT_REFUSED, buf);
    }
    const char *why = target_refusal(o->pid, &t.st, buf, sizeof buf);
    if (why)
        return cli_fail(o, EXIT_REFUSED, why);
    if (t.st.seccomp == 1) {
        snprintf(buf, sizeof buf, "process %d runs in seccomp strict mode (Seccomp: 1): any call "
                 "memtrim makes there would kill it", (int)o->pid);
        return cli_fail(o, EXIT_REFUSED, buf);
    }
    if (target_find_alloc(&t, err, sizeof err) != 0)
        return cli_fail(o, t.alloc == MT_ALLOC_glibc ? EXIT_FAILED : EXIT_UNSUPPORTED, err);
    if ((why = target_memory_refusal(&t, buf, sizeof buf)))
        return cli_fail(o, EXIT_REFUSED, why);
    if (strcmp(o->verb, "load") &&
        (why = cli_cgroup_refusal(&t, CLI_CALL_CHARGE, o->verb, buf, sizeof buf)))
        return cli_fail(o, EXIT_REFUSED, why);
    if (strcmp(o->verb, "load") && /* (load's engine's threads too: load.c) */
        (why = cli_pids_refusal(&t, CLI_CALL_THREADS, o->verb, buf, sizeof buf)))
        return cli_fail(o, EXIT_REFUSED, why);
    if (!strcmp(o->verb, "load"))
        return load_run(o, &t);
    return !strcmp(o->verb, "trim") ? trim(o, &t) : stats(o, &t);
}

/* --tree: each process of the tree in turn, one line each; a refusal for one does not stop
 * the others. Each is acted on only while it is the process the tree was read with (its
 * start time: act, then inject.c once its thread is seized). The exit code is 0 when every
 * one succeeded, else the first failure's. */
static int act_tree(const struct opts *o)
{
    enum { TREE_MAX = 4096 };
    pid_t *pids = malloc(TREE_MAX * sizeof *pids);
    unsigned long long *starts = malloc(TREE_MAX * sizeof *starts);
    int n = pids && starts ? target_tree(o->pid, pids, starts, TREE_MAX) : -1, worst = 0;
    if (n <= 0) {
        free(pids);
        free(starts);
        if (n < 0)
            return cli_fail(o, EXIT_FAILED, "out of memory");
        char buf[64];
        snprintf(buf, sizeof buf, "no process %d", (int)o->pid);
        return cli_fail(o, EXIT_FAILED, buf);
    }
    for (int i = 0; i < n && !inject_left_seized; i++) { /* a thread still seized: stop */
        if (pids[i] == getpid())
            continue; /* run from a shell of the tree */
        struct opts one = *o;
        one.pid = pids[i];
        one.start_time = starts[i];
        int rc = act(&one);
        fflush(stdout);
        if (rc && !worst)
            worst = rc;
    }
    free(pids);
    free(starts);
    return worst;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], LIB_HOLD_VERB)) /* load's helper (libhold.c) */
        return lib_hold_main(argc, argv);
    struct opts o;
    if (argc > 1 && !strcmp(argv[1], "agent"))
        return agent_main(argc - 1, argv + 1);
    if (parse_args(argc, argv, &o) != 0) {
        usage(stderr);
        return EXIT_USAGE;
    }
#ifndef __x86_64__
    return cli_fail(&o, EXIT_UNSUPPORTED, "this memtrim command supports x86_64 only");
#endif
    int rc = o.tree ? act_tree(&o) : act(&o);
    /* what was done must reach the operator (load's address and token): a result that could
     * not be written is a failure, whatever was done */
    if ((fflush(stdout) != 0 || ferror(stdout)) && !mt_control("cmd-stdout")) {
        fprintf(stderr, "memtrim: cannot write the result to standard output: %s\n",
                strerror(errno ? errno : EIO));
        return rc ? rc : EXIT_FAILED;
    }
    return rc;
}
