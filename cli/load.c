/*
 * load.c - `memtrim load PID`: the target's own dlopen on libmemtrim.so (its own path, or a
 * helper's memfd when the target does not share the tool's mount namespace and uid; never a
 * file written for it), then memtrim_attach
 * (include/memtrim.h) in the library now mapped, each on memtrim's own glibc thread, which
 * waits for the loader lock like any thread (docs/command.md). The tool's one thread.
 */
#include "cli.h"
#include "libhold.h"
#include "tramp.h"

#include "../common/control.h"

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
#include <unistd.h>

/* What memtrim's engine charges to the process once started, beside the library's pages
 * (threads' stacks, the store's cache, the HTTP server): 5.3 MiB of RSS in all measured in
 * python3, 1.1 MiB of it anonymous; this bound leaves room. */
#define LOAD_ENGINE_CHARGE ((int64_t)8 << 20)

/* The threads memtrim's engine starts in the process and keeps (the housekeeper, the pressure
 * thread, the store's writer, the stall canary, the HTTP watchdog), beside HttpThreads of
 * MHD's: 7 with the defaults, counted in test_cli_pids_room.py; a worker group's (GroupName,
 * FollowFork) adds its own thread and the one that restarts it in a child. The pids cgroup
 * and RLIMIT_NPROC count each as the process's own for as long as it runs. */
#define LOAD_ENGINE_THREADS 5
#define LOAD_GROUP_THREADS 2
#define LOAD_HTTP_THREADS_DEFAULT 2 /* core/config/config.c's HttpThreads */

/* The threads a load starts there: the call's two, the engine's and the configuration's
 * HttpThreads (its default when absent or not a number; the engine refuses one out of 1-64). */
static int load_threads(const char *json)
{
    cJSON *j = cJSON_Parse(json), *sec = cJSON_GetObjectItemCaseSensitive(j, "MemoryTrim");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(sec) ? sec : j,
                                                      "HttpThreads");
    int http = cJSON_IsNumber(h) && h->valuedouble >= 1 && h->valuedouble <= 64
                   ? (int)h->valuedouble : LOAD_HTTP_THREADS_DEFAULT;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(sec) ? sec : j,
                                                         "GroupName");
    int group = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(sec) ? sec : j,
                                                              "FollowFork")) ||
                (cJSON_IsString(name) && name->valuestring[0]);
    cJSON_Delete(j);
    if (mt_control("cmd-load-pids-engine")) /* the call's threads alone, as trim counts */
        return CLI_CALL_THREADS;
    return CLI_CALL_THREADS + LOAD_ENGINE_THREADS + http + (group ? LOAD_GROUP_THREADS : 0);
}

/* What dlopen makes of the system calls (each must be allowed: seccomp.c): open, read and
 * stat the file, map it (PROT_EXEC), protect and unmap, close, the loader's and malloc's
 * locks. Anything else load makes (the library's constructor, the engine's threads and
 * sockets) is checked as any system call: it may fail, never kill. */
static const struct inject_syscall load_calls[] = {
    {"openat(AT_FDCWD, path, O_RDONLY|O_CLOEXEC)", SYS_openat, {(uint64_t)-100, 0, 0x80000}, 0x5},
    {"read", SYS_read, {0}, 0},               {"pread64", SYS_pread64, {0}, 0},
    {"newfstatat", SYS_newfstatat, {0}, 0},   {"fstat", SYS_fstat, {0}, 0},
    {"mmap", SYS_mmap, {0}, 0},               {"mprotect", SYS_mprotect, {0}, 0},
    {"munmap", SYS_munmap, {0}, 0},           {"close", SYS_close, {0}, 0},
    {"brk", SYS_brk, {0}, 0},                 {"futex", SYS_futex, {0}, 0},
};

/* A --config file's whole text (at most 1 MiB: any more is no configuration), read here, in
 * the tool's mount namespace: the target may not see the file. NULL with err set. */
static char *read_config_file(const char *path, char *err, size_t errlen)
{
    enum { CONFIG_FILE_MAX = 1 << 20 };
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "--config: cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = malloc(CONFIG_FILE_MAX + 1);
    size_t n = text ? fread(text, 1, CONFIG_FILE_MAX + 1, f) : 0;
    int bad = text && ferror(f), e = errno;
    fclose(f);
    if (!text || bad || n > CONFIG_FILE_MAX) {
        snprintf(err, errlen, !text ? "out of memory" : bad ? "--config: cannot read %s: %s"
                 : "--config: %s is larger than 1 MiB", path, strerror(e));
        free(text);
        return NULL;
    }
    text[n] = 0;
    return text;
}

/* The configuration as text: inline JSON, or the file's contents; parsed and sent compact,
 * which must fit the page's string buffer (TR_PATH_MAX). NULL with err set. */
/* What load adds to a configuration that does not say otherwise, so that nothing changes for
 * the process's neighbours (issue 37): the store in memory, not a memtrim.sqlite in its
 * working directory ("Database" names a file when one is wanted), and an API no other local
 * user may use: a generated admin token (printed to the operator, JSON "token") that reads
 * need too. The keys go where the configuration has them ({"MemoryTrim": {...}} or the
 * root). 0, or -1 when no random bytes could be had. */
static char load_token[33];

static int load_defaults(cJSON *j)
{
    cJSON *sec = cJSON_GetObjectItemCaseSensitive(j, "MemoryTrim");
    if (!cJSON_IsObject(sec))
        sec = j;
    if (!cJSON_HasObjectItem(sec, "Database") && !mt_control("cmd-load-store"))
        cJSON_AddStringToObject(sec, "Database", ":memory:");
    if (cJSON_HasObjectItem(sec, "AuthToken") || cJSON_HasObjectItem(sec, "AuthTokenFile") ||
        mt_control("cmd-load-token"))
        return 0;
    unsigned char rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return -1;
    for (int i = 0; i < 16; i++)
        snprintf(load_token + 2 * i, 3, "%02x", rnd[i]);
    cJSON_AddStringToObject(sec, "AuthToken", load_token);
    if (!cJSON_HasObjectItem(sec, "ReadRequiresAuth"))
        cJSON_AddBoolToObject(sec, "ReadRequiresAuth", 1);
    return 0;
}

static char *load_config_text(const char *arg, char *err, size_t errlen)
{
    const char *p = arg ? arg : "{}";
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    char *text = *p == '{' ? strdup(p) : read_config_file(arg, err, errlen);
    if (!text) {
        if (*p == '{')
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
    if (load_defaults(j) != 0) {
        snprintf(err, errlen, "no random bytes for the API's token: %s", strerror(errno));
        cJSON_Delete(j);
        free(text);
        return NULL;
    }
    char *compact = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    free(text);
    if (!compact) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (strlen(compact) >= TR_PATH_MAX) {
        snprintf(err, errlen, "--config: %zu bytes once compacted; load carries at most %d (the "
                 "buffer of its page in the process): shorten the configuration", strlen(compact),
                 TR_PATH_MAX - 1);
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
/* Or, where the tool may (root, the target's user namespace), no file at all: a memfd. */
static struct lib_hold hold = {.helper = -1, .stay = -1};

static void copy_remove(char *copy)
{
    lib_hold_stop(&hold);
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
 * and uid; else, for a tool running as root in the target's user namespace, a memfd a helper
 * of the target's credentials holds (libhold.c: no file anywhere, so a killed load leaves
 * none); otherwise refused (-3). The control cmd-load-file brings back the old copy in the
 * target's own /tmp (a file a killed load left): under a random name, created there
 * exclusively through a directory resolved inside the target's root and never by a path
 * that could follow a link of the container's, mode 0644 set on the descriptor, removed once
 * loaded. 0, -1 a failure, -3 refused, with err set. */
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
    if (!mt_control("cmd-load-file")) { /* the copy below is the control's only */
        if (!lib_hold_possible(t)) {
            snprintf(err, errlen, "process %d shares neither memtrim's mount namespace and uid "
                     "(the library's own path) nor, with memtrim root in its user namespace and "
                     "a procfs in its root, a helper's memfd: the library would have to be "
                     "copied into its /tmp, where a killed memtrim would leave it; refused, "
                     "nothing was changed", (int)t->pid);
            return -3;
        }
        int h = lib_hold_start(t, lib, &hold, err, errlen);
        if (h == 0) {
            snprintf(out, len, "%s", hold.path);
            return 0;
        }
        if (h == -2)
            snprintf(err, errlen, "process %d's /proc is another pid namespace's: a helper's "
                     "memfd cannot be named there, and a copy of the library in its /tmp "
                     "would be left by a killed memtrim; refused, nothing was changed",
                     (int)t->pid);
        return h == -2 ? -3 : -1;
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

/* memtrim_attach in an instance already loaded: 0, or an exit code. */
static int attach(const struct opts *o, struct target *t, const struct target_lib *lib,
                  const char *json, int loaded_now, double t0)
{
    uint64_t fn = target_sym(lib, "memtrim_attach");
    if (!fn) {
        char msg[800];
        snprintf(msg, sizeof msg, "process %d maps %s, which exports no memtrim_attach (an older "
                 "memtrim?)", (int)t->pid, lib->path);
        return cli_fail(o, EXIT_UNSUPPORTED, msg);
    }
    struct inject_call c = {.func = fn, .args = {TR_PATH, TR_OUT, 1024}, .page_args = 3,
                            .in = json, .out_len = 1024, .any_syscall = 1, .syscalls = load_calls,
                            .n_syscalls = sizeof load_calls / sizeof load_calls[0]};
    int rc = cli_call(o, t, &c);
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
            cli_emit(o, j, msg); /* JSON only: the line is on stderr already */
        else
            cJSON_Delete(j);
        return EXIT_ALREADY;
    }
    if (r < 0 || r == 1) {
        snprintf(msg, sizeof msg, "memtrim was loaded into process %d but did not start: %s",
                 (int)t->pid, out[0] ? out : strerror(-r));
        return cli_fail(o, r == 1 ? EXIT_REFUSED : EXIT_FAILED, msg);
    }
    snprintf(c.prio.why, sizeof c.prio.why, "load: the threads memtrim_attach starts would "
             "inherit it"); /* never asked (prio.h) */
    cJSON *j = cJSON_CreateObject();
    cli_add_common(j, t, &c);
    cJSON_AddStringToObject(j, "listen", out);
    if (load_token[0])
        cJSON_AddStringToObject(j, "token", load_token);
    cJSON_AddStringToObject(j, "library", lib->path);
    cJSON_AddBoolToObject(j, "loaded_now", loaded_now);
    cJSON_AddNumberToObject(j, "duration_seconds", cli_now() - t0);
    snprintf(msg, sizeof msg, "memtrim: loaded into process %d (%s); its API listens on %s%s%s",
             (int)t->pid, t->st.name, out, load_token[0] ? ", token " : "", load_token);
    cli_emit(o, j, msg);
    return EXIT_OK;
}

int load_run(const struct opts *o, struct target *t)
{
    char err[1024], lib[PATH_MAX], path[PATH_MAX + 64], copy[PATH_MAX + 128];
    double t0 = cli_now();
    char *json = load_config_text(o->config, err, sizeof err);
    if (!json)
        return cli_fail(o, EXIT_USAGE, err);
    const char *why = cli_pids_refusal(t, load_threads(json), "load (the call and memtrim's "
                                       "engine)", err, sizeof err);
    if (why) {
        free(json);
        return cli_fail(o, EXIT_REFUSED, why);
    }
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
        return cli_fail(o, EXIT_UNSUPPORTED, "the target's libc exports no dlopen (glibc before 2.34 "
                    "keeps it in libdl): load needs glibc 2.34 or later");
    }
    if (find_library(o, lib, sizeof lib) != 0) {
        free(json);
        snprintf(err, sizeof err, "cannot find libmemtrim.so.0 (%s): give it with --library PATH",
                 o->library ? o->library : "beside this command or in " MEMTRIM_INSTALL_LIBDIR);
        return cli_fail(o, EXIT_FAILED, err);
    }
    struct stat lib_st;
    why = stat(lib, &lib_st) == 0
        ? cli_cgroup_refusal(t, CLI_CALL_CHARGE + LOAD_ENGINE_CHARGE + (int64_t)lib_st.st_size,
                             "load (the library, memtrim's engine and the page)", err, sizeof err)
        : NULL;
    if (why) {
        free(json);
        return cli_fail(o, EXIT_REFUSED, why);
    }
    int tp = target_path(t, lib, path, sizeof path, copy, sizeof copy, err, sizeof err);
    if (tp != 0) {
        free(json);
        return cli_fail(o, tp == -3 ? EXIT_UNSUPPORTED : EXIT_FAILED, err);
    }
    struct inject_call c = {.func = dl, .args = {TR_PATH, 2 /* RTLD_NOW */}, .page_args = 1,
                            .in = path, .any_syscall = 1, .syscalls = load_calls,
                            .n_syscalls = sizeof load_calls / sizeof load_calls[0]};
    rc = cli_call(o, t, &c);
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
        return cli_fail(o, EXIT_FAILED, err);
    }
    rc = attach(o, t, &mt, json, 1, t0);
    free(json);
    return rc;
}
