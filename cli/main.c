/*
 * main.c - the memtrim command: acts on a running process by pid from outside
 * (`memtrim trim PID`, `memtrim stats PID`), through one thread of it (inject.c), with the
 * kernel's reason when it may not. It talks to the engine only through the C ABI it injects;
 * for trim and stats it calls the target's own allocator; `memtrim load PID` calls the
 * target's dlopen on libmemtrim.so, then its memtrim_attach (include/memtrim.h). One thread;
 * exit codes in docs/memtrim.1. --tree walks a process's descendants and acts on each in turn.
 */
#include "inject.h"
#include "target.h"
#include "tramp.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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
    EXIT_ALREADY = 7,     /* load: memtrim already runs there */
};

struct opts {
    const char *verb;
    pid_t pid;
    int json;
    int tree;  /* --tree: pid and its descendants, one line each */
    double thread_wait_s, call_wait_s;
    long pad;
    const char *config, *library; /* load */
};

static void usage(FILE *f)
{
    fputs("usage: memtrim trim PID [--pad BYTES] [options]\n"
          "       memtrim stats PID [options]\n"
          "       memtrim load PID [--config JSON|FILE] [--library PATH] [options]\n"
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
        } else if ((!strcmp(a, "--config") || !strcmp(a, "--library")) && i + 1 < argc) {
            *(a[2] == 'c' ? &o->config : &o->library) = argv[++i];
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
                                        "timeout", "failed", "already_loaded"};
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

/* The allocator's own release call, as core/alloc names it: glibc malloc_trim(pad); jemalloc
 * mallctl("arena.<MALLCTL_ARENAS_ALL>.purge", NULL, NULL, NULL, 0) (its name copied into our
 * page); tcmalloc MallocExtension_ReleaseFreeMemory(); mimalloc mi_collect(true). */
static const struct {
    const char *sym, *call;
} release_calls[] = {
    [ALLOC_GLIBC] = {"malloc_trim", "malloc_trim"},
    [ALLOC_JEMALLOC] = {"mallctl", "mallctl(\"arena.4096.purge\")"},
    [ALLOC_TCMALLOC] = {"MallocExtension_ReleaseFreeMemory", "MallocExtension_ReleaseFreeMemory"},
    [ALLOC_MIMALLOC] = {"mi_collect", "mi_collect(true)"},
};

static int trim(const struct opts *o, struct target *t)
{
    const struct target_lib *lib = t->alloc == ALLOC_GLIBC ? &t->libc : &t->alloc_lib;
    const char *sym = release_calls[t->alloc].sym;
    uint64_t fn = target_sym(lib, sym);
    if (!fn) {
        char buf[700];
        snprintf(buf, sizeof buf, "the target's %s (%s) exports no %s", target_alloc_name(t->alloc),
                 lib->path, sym);
        return fail(o, EXIT_UNSUPPORTED, buf);
    }
    struct inject_call c = {.func = fn, .args = {(uint64_t)o->pad}};
    if (t->alloc == ALLOC_JEMALLOC) /* 4096: MALLCTL_ARENAS_ALL, every arena */
        c = (struct inject_call){.func = fn, .in = "arena.4096.purge", .args = {TR_PATH},
                                 .page_args = 1};
    else if (t->alloc == ALLOC_TCMALLOC)
        c.args[0] = 0;
    else if (t->alloc == ALLOC_MIMALLOC)
        c.args[0] = 1; /* force */
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
    cJSON_AddStringToObject(j, "release_call", release_calls[t->alloc].call);
    if (t->alloc == ALLOC_GLIBC)
        cJSON_AddNumberToObject(j, "malloc_trim_return", (double)(int)c.result);
    else if (t->alloc == ALLOC_JEMALLOC)
        cJSON_AddNumberToObject(j, "mallctl_return", (double)(int)c.result);
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
    if (t->alloc != ALLOC_GLIBC) {
        char buf[256];
        snprintf(buf, sizeof buf, "process %d's malloc is %s: stats reads glibc's mallinfo2 only "
                 "(trim calls %s)", (int)t->pid, target_alloc_name(t->alloc),
                 release_calls[t->alloc].call);
        return fail(o, EXIT_UNSUPPORTED, buf);
    }
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

/* The configuration as text: inline JSON, or the file's contents (read here, in the tool's
 * mount namespace: the target may not see the file). NULL with err set. */
static char *load_config_text(const char *arg, char *err, size_t errlen)
{
    const char *p = arg ? arg : "{}";
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    char *text = NULL;
    if (*p == '{') {
        text = strdup(p);
    } else {
        FILE *f = fopen(arg, "re");
        if (!f) {
            snprintf(err, errlen, "--config: cannot read %s: %s", arg, strerror(errno));
            return NULL;
        }
        text = calloc(1, TR_PATH_MAX + 1);
        size_t n = text ? fread(text, 1, TR_PATH_MAX, f) : 0;
        fclose(f);
        if (text)
            text[n] = 0;
    }
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    cJSON *j = cJSON_Parse(text);
    if (!j || !cJSON_IsObject(j)) {
        snprintf(err, errlen, "--config: not a JSON object: %.200s", text);
        cJSON_Delete(j);
        free(text);
        return NULL;
    }
    /* sent compact: it must fit the page's string buffer */
    char *compact = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    free(text);
    if (compact && strlen(compact) >= TR_PATH_MAX) {
        snprintf(err, errlen, "--config: %zu bytes once compacted, more than the %d the call "
                 "carries", strlen(compact), TR_PATH_MAX - 1);
        free(compact);
        return NULL;
    }
    return compact;
}

/* libmemtrim.so.0: --library, beside this command (a build tree), or the install's libdir. */
static int find_library(const struct opts *o, char *out, size_t len)
{
    if (o->library)
        return realpath(o->library, out) && len >= PATH_MAX ? 0 : -1;
    char exe[PATH_MAX], cand[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        snprintf(cand, sizeof cand, "%s/libmemtrim.so.0", exe);
        if (realpath(cand, out))
            return 0;
    }
    /* the soname: the runtime package ships it (libmemtrim.so is the dev package's link) */
    snprintf(cand, sizeof cand, "%s/libmemtrim.so.0", MEMTRIM_INSTALL_LIBDIR);
    return realpath(cand, out) ? 0 : -1;
}

static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* The copy in the target's /tmp: its directory (opened inside the target's root) and name,
 * so that it is removed there and nowhere else. */
static int copy_dirfd = -1;
static char copy_name[64];

static void copy_remove(char *copy)
{
    if (copy[0] && copy_dirfd >= 0)
        unlinkat(copy_dirfd, copy_name, 0);
    if (copy_dirfd >= 0)
        close(copy_dirfd);
    copy_dirfd = -1;
    copy[0] = 0;
}

/* The target's /tmp, resolved inside its root: a symbolic link there (absolute or with
 * "..") stays inside the container instead of leading into ours (openat2 RESOLVE_IN_ROOT,
 * Linux 5.6). An O_PATH descriptor, or -1 with errno. */
static int target_tmp(pid_t pid)
{
    char root[64];
    snprintf(root, sizeof root, "/proc/%d/root", (int)pid);
    int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return -1;
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    int d = (int)syscall(SYS_openat2, rfd, "tmp", &how, sizeof how);
    int e = errno;
    close(rfd);
    errno = e;
    return d;
}

/* The path the target opens: the library itself when the target shares our mount namespace
 * and uid; otherwise a copy in the target's own /tmp, under a random name, created there
 * exclusively through a directory resolved inside the target's root (its mount namespace:
 * a container's) and never by a path that could follow a link of the container's, mode
 * 0644 set on the descriptor, removed once loaded (docs/architecture.md). */
static int target_path(const struct target *t, const char *lib, char *out, size_t len, char *copy,
                       size_t copylen, char *err, size_t errlen)
{
    char ns[64];
    unsigned char rnd[8];
    copy[0] = 0;
    snprintf(ns, sizeof ns, "/proc/%d/ns/mnt", (int)t->pid);
    if (same_file("/proc/self/ns/mnt", ns) && t->st.euid == geteuid()) {
        snprintf(out, len, "%s", lib);
        return 0;
    }
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        snprintf((char *)rnd, sizeof rnd, "%07x", (unsigned)getpid() & 0xfffffff);
    snprintf(copy_name, sizeof copy_name, "libmemtrim-load-%02x%02x%02x%02x%02x%02x%02x%02x.so",
             rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    snprintf(out, len, "/tmp/%s", copy_name);
    snprintf(copy, copylen, "/proc/%d/root%s", (int)t->pid, out);
    copy_dirfd = target_tmp(t->pid);
    FILE *in = fopen(lib, "rbe");
    int fd = copy_dirfd >= 0 ? openat(copy_dirfd, copy_name, O_WRONLY | O_CREAT | O_EXCL |
                                      O_CLOEXEC | O_NOFOLLOW, 0644) : -1;
    int ok = fd >= 0 && fchmod(fd, 0644) == 0; /* whatever the umask: the target's uid reads it */
    FILE *w = fd >= 0 ? fdopen(fd, "wb") : NULL;
    ok = ok && in && w;
    char buf[65536];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, n, w) == n;
    ok = ok && !ferror(in);
    int e = errno;
    if (in)
        fclose(in);
    if (w)
        ok = fclose(w) == 0 && ok;
    else if (fd >= 0)
        close(fd);
    if (!ok) {
        snprintf(err, errlen, "cannot copy %.400s to %.400s (the target's /tmp): %s", lib, copy,
                 strerror(e ? e : EIO));
        if (fd < 0)
            copy[0] = 0; /* nothing was created: nothing of ours to remove */
        copy_remove(copy);
        return -1;
    }
    return 0;
}

/* ld.so's _rtld_global, whose recursive mutexes (the loader locks) the chosen thread must not
 * own: dlopen and memtrim_attach's dlsym take them. -1 when the target's ld.so is not found. */
static int loader_locks(const struct target *t, uint64_t *addr, uint64_t *len)
{
    struct target_lib ld;
    if (target_find_lib(t->pid, "ld-linux", &ld) != 0)
        return -1;
    *addr = target_obj(&ld, "_rtld_global", len);
    return *addr && *len >= 40 ? 0 : -1;
}

/* memtrim_attach in an instance already loaded: 0, or an exit code. */
static int attach(const struct opts *o, struct target *t, const struct target_lib *lib,
                  const char *json, int loaded_now, double t0)
{
    uint64_t fn = target_sym(lib, "memtrim_attach");
    if (!fn) {
        char msg[800];
        snprintf(msg, sizeof msg, "process %d maps %s, which exports no memtrim_attach (an older "
                 "memtrim?)", (int)t->pid, lib->path);
        return fail(o, EXIT_UNSUPPORTED, msg);
    }
    struct inject_call c = {.func = fn, .args = {TR_PATH, TR_OUT, 1024}, .page_args = 3,
                            .in = json, .out_len = 1024};
    if (loader_locks(t, &c.locks, &c.locks_len) != 0)
        return fail(o, EXIT_UNSUPPORTED, "the target's ld.so (ld-linux*) or its _rtld_global is not "
                    "found: the loader lock cannot be checked, nothing is called");
    int rc = do_call(o, t, &c);
    if (rc)
        return rc;
    char out[1025];
    memcpy(out, c.out, 1024);
    out[1024] = 0;
    int r = (int)c.result;
    char msg[1400];
    if (r == -EALREADY) {
        snprintf(msg, sizeof msg, "memtrim is already loaded in process %d%s%s", (int)t->pid,
                 out[0] ? "; its API listens on " : " (no API address)", out);
        fprintf(stderr, "memtrim: %s\n", msg);
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "pid", t->pid);
        cJSON *e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "code", "already_loaded");
        cJSON_AddStringToObject(e, "message", msg);
        if (out[0])
            cJSON_AddStringToObject(j, "listen", out);
        cJSON_AddStringToObject(j, "library", lib->path);
        if (o->json)
            emit(o, j, msg); /* JSON only: the line is on stderr already */
        else
            cJSON_Delete(j);
        return EXIT_ALREADY;
    }
    if (r < 0 || r == 1) {
        snprintf(msg, sizeof msg, "memtrim was loaded into process %d but did not start: %s",
                 (int)t->pid, out[0] ? out : strerror(-r));
        return fail(o, r == 1 ? EXIT_REFUSED : EXIT_FAILED, msg);
    }
    cJSON *j = cJSON_CreateObject();
    add_common(j, t, &c);
    cJSON_AddStringToObject(j, "listen", out);
    cJSON_AddStringToObject(j, "library", lib->path);
    cJSON_AddBoolToObject(j, "loaded_now", loaded_now);
    cJSON_AddNumberToObject(j, "duration_seconds", now_s() - t0);
    snprintf(msg, sizeof msg, "memtrim: loaded into process %d (%s); its API listens on %s",
             (int)t->pid, t->st.name, out);
    emit(o, j, msg);
    return EXIT_OK;
}

static int load(const struct opts *o, struct target *t)
{
    char err[1024], lib[PATH_MAX], path[PATH_MAX + 64], copy[PATH_MAX + 128];
    double t0 = now_s();
    char *json = load_config_text(o->config, err, sizeof err);
    if (!json)
        return fail(o, EXIT_USAGE, err);
    struct target_lib mt;
    int rc;
    if (target_find_lib(t->pid, "libmemtrim", &mt) == 0) { /* loaded: it says how it runs */
        rc = attach(o, t, &mt, json, 0, t0);
        free(json);
        return rc;
    }
    uint64_t dl = target_sym(&t->libc, "dlopen");
    if (!dl) {
        free(json);
        return fail(o, EXIT_UNSUPPORTED, "the target's libc exports no dlopen (glibc before 2.34 "
                    "keeps it in libdl): load needs glibc 2.34 or later");
    }
    if (find_library(o, lib, sizeof lib) != 0) {
        free(json);
        snprintf(err, sizeof err, "cannot find libmemtrim.so.0 (%s): give it with --library PATH",
                 o->library ? o->library : "beside this command or in " MEMTRIM_INSTALL_LIBDIR);
        return fail(o, EXIT_FAILED, err);
    }
    if (target_path(t, lib, path, sizeof path, copy, sizeof copy, err, sizeof err) != 0) {
        free(json);
        return fail(o, EXIT_FAILED, err);
    }
    struct inject_call c = {.func = dl, .args = {TR_PATH, 2 /* RTLD_NOW */}, .page_args = 1,
                            .in = path};
    if (loader_locks(t, &c.locks, &c.locks_len) != 0) {
        copy_remove(copy);
        free(json);
        return fail(o, EXIT_UNSUPPORTED, "the target's ld.so (ld-linux*) or its _rtld_global is not "
                    "found: the loader lock cannot be checked, nothing is called");
    }
    rc = do_call(o, t, &c);
    if (rc != EXIT_TIMEOUT)
        copy_remove(copy); /* mapped now (or never): the file is not needed */
    if (rc) {
        free(json);
        return rc;
    }
    if (!c.result || target_find_lib(t->pid, "libmemtrim", &mt) != 0) {
        free(json);
        snprintf(err, sizeof err, "dlopen(\"%.800s\") failed in process %d (see its dlerror; a "
                 "library built for another glibc?)", path, (int)t->pid);
        return fail(o, EXIT_FAILED, err);
    }
    rc = attach(o, t, &mt, json, 1, t0);
    free(json);
    return rc;
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
    if (!strcmp(o->verb, "load"))
        return load(o, &t);
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
    for (int i = 0; i < n && !inject_left_seized; i++) { /* a thread still seized: stop */
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
