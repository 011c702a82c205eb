/*
 * test_cli.c - the memtrim command (cli/) against a real glibc program (cli_target.c), each
 * rule beside a control: a trim releases what the target freed and restarts the system call
 * it interrupted (a sleep sleeps on, a read still reads, a signal is delivered); a caller
 * without the right, a traced, stopped, static or non-glibc target, and a target without a
 * safe thread are refused with the reason and left untouched. MEMTRIM_CLI_WRAP (a command
 * such as "valgrind -q --error-exitcode=99") runs the tool under it (ctest test_cli_valgrind).
 */
#include "harness.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>

struct tgt {
    pid_t pid;
    FILE *in, *out;
};

static void child_env(void)
{
    unsetenv("LD_PRELOAD"); /* valgrind's, when this test runs under it */
}

static int spawn_target(struct tgt *t, const char *exe, const char *const *args, uid_t uid,
                        const char *preload)
{
    int in[2], out[2];
    if (pipe(in) || pipe(out))
        return -1;
    t->pid = fork();
    if (t->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        child_env();
        if (preload)
            setenv("LD_PRELOAD", preload, 1);
        if (uid && (setgroups(0, NULL) || setgid(uid) || setuid(uid)))
            _exit(126);
        char *argv[16] = {(char *)exe};
        for (int i = 0; args[i] && i < 14; i++)
            argv[i + 1] = (char *)args[i];
        execv(exe, argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    t->in = fdopen(in[1], "w");
    t->out = fdopen(out[0], "r");
    char line[64];
    if (!fgets(line, sizeof line, t->out) || strncmp(line, "ready", 5))
        return -1;
    return 0;
}

static void stop_target(struct tgt *t)
{
    kill(t->pid, SIGKILL);
    waitpid(t->pid, NULL, 0);
    fclose(t->in);
    fclose(t->out);
}

/* The target's counters ("report"): a JSON object the caller deletes, NULL if it died. */
static cJSON *report(struct tgt *t)
{
    char line[512];
    fputs("report\n", t->in);
    fflush(t->in);
    if (!fgets(line, sizeof line, t->out))
        return NULL;
    return cJSON_Parse(line);
}

static double num(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

enum { AS_ROOT, AS_ROOT_NO_PTRACE_CAP, AS_NOBODY };

/* Runs the tool; its exit code, stdout in out (parsed in *json), stderr in err. */
static int run_tool(const char *exe, int as, const char *verb, pid_t pid, const char *extra,
                    char *out, size_t outlen, char *err, size_t errlen, cJSON **json)
{
    int o[2], e[2];
    if (pipe(o) || pipe(e))
        return -1;
    pid_t c = fork();
    if (c == 0) {
        dup2(o[1], 1);
        dup2(e[1], 2);
        child_env();
        if (as == AS_ROOT_NO_PTRACE_CAP && prctl(PR_CAPBSET_DROP, 19 /* CAP_SYS_PTRACE */) != 0)
            _exit(126);
        if (as == AS_NOBODY && (setgroups(0, NULL) || setgid(65534) || setuid(65534)))
            _exit(126);
        char pidbuf[16];
        snprintf(pidbuf, sizeof pidbuf, "%d", (int)pid);
        char *argv[24];
        int n = 0;
        static char wrap[512];
        const char *w = getenv("MEMTRIM_CLI_WRAP");
        if (w && *w) {
            snprintf(wrap, sizeof wrap, "%s", w);
            for (char *save = NULL, *tok = strtok_r(wrap, " ", &save); tok && n < 12;
                 tok = strtok_r(NULL, " ", &save))
                argv[n++] = tok;
        }
        argv[n++] = (char *)exe;
        argv[n++] = (char *)verb;
        argv[n++] = pidbuf;
        argv[n++] = "--json";
        static char ex[256];
        if (extra) {
            snprintf(ex, sizeof ex, "%s", extra);
            for (char *save = NULL, *tok = strtok_r(ex, " ", &save); tok && n < 22;
                 tok = strtok_r(NULL, " ", &save))
                argv[n++] = tok;
        }
        argv[n] = NULL;
        execvp(argv[0], argv);
        _exit(127);
    }
    close(o[1]);
    close(e[1]);
    size_t no = 0, ne = 0;
    for (;;) { /* stdout first, then stderr: both are small */
        ssize_t r = read(o[0], out + no, outlen - 1 - no);
        if (r <= 0)
            break;
        no += (size_t)r;
    }
    for (;;) {
        ssize_t r = read(e[0], err + ne, errlen - 1 - ne);
        if (r <= 0)
            break;
        ne += (size_t)r;
    }
    out[no] = err[ne] = 0;
    close(o[0]);
    close(e[0]);
    int st;
    waitpid(c, &st, 0);
    if (json)
        *json = cJSON_Parse(out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char tool_copy[256], target_copy[256], static_copy[256], tmpdir[128];

/* Copies of the binaries another uid can run (the checkout may be a 0700 directory). */
static void copy_binaries(void)
{
    if (harness_tmpdir(tmpdir, sizeof tmpdir, "cli") != 0)
        return;
    chmod(tmpdir, 0755);
    const char *src[3] = {MEMTRIM_CLI_PATH, MEMTRIM_CLI_TARGET, MEMTRIM_CLI_TARGET_STATIC};
    char *dst[3] = {tool_copy, target_copy, static_copy};
    for (int i = 0; i < 3; i++) {
        snprintf(dst[i], sizeof tool_copy, "%s/%s", tmpdir, strrchr(src[i], '/') + 1);
        char cmd[768];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s' && chmod 0755 '%s'", src[i], dst[i], dst[i]);
        CHECK_EQ_INT(system(cmd), 0);
    }
}

static long rwx_mappings(pid_t pid)
{
    char cmd[96], buf[32] = "";
    snprintf(cmd, sizeof cmd, "grep -c ' rwxp ' /proc/%d/maps", (int)pid);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    if (!fgets(buf, sizeof buf, p))
        buf[0] = 0;
    pclose(p);
    return atol(buf);
}

static pid_t tracer_of(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    int tp = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "TracerPid: %d", &tp) == 1)
            break;
    if (f)
        fclose(f);
    return tp;
}

/* trim releases the freed heap of four arenas (30 MiB of blocks each, 90 % freed: ~143 MB
 * free, ~117 MB released); stats reads mallinfo2 from outside. */
static void test_trim_and_stats(void)
{
    struct tgt t;
    const char *args[] = {"--hold-mb", "30", "--holders", "4", "--churn", "1", NULL};
    CHECK_EQ_INT(spawn_target(&t, MEMTRIM_CLI_TARGET, args, 0, NULL), 0);
    char out[4096], err[4096];
    cJSON *j = NULL;
    int rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "stats", t.pid, NULL, out, sizeof out, err,
                      sizeof err, &j);
    CHECK_MSG(rc == 0, "stats: %d %s", rc, err);
    CHECK_MSG(num(j, "heap_free_bytes") > 100e6, "stats: %s", out);
    CHECK_EQ_INT(num(j, "pid"), t.pid);
    cJSON_Delete(j);
    rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "trim", t.pid, NULL, out, sizeof out, err, sizeof err,
                  &j);
    CHECK_MSG(rc == 0, "trim: %d %s", rc, err);
    CHECK_MSG(num(j, "released_bytes") > 80e6, "trim: %s", out);
    CHECK_EQ_INT(num(j, "malloc_trim_return"), 1);
    CHECK_CONTAINS(out, "\"allocator\":\"glibc\"");
    char task[64];
    snprintf(task, sizeof task, "/proc/%d/task/%d", (int)t.pid, (int)num(j, "thread"));
    CHECK_MSG(access(task, F_OK) == 0, "thread %s is not the target's", task);
    cJSON_Delete(j);
    /* the control: a second trim finds nothing more to give back */
    rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "trim", t.pid, NULL, out, sizeof out, err, sizeof err,
                  &j);
    CHECK_MSG(rc == 0 && num(j, "released_bytes") < 80e6, "second trim: %s", out);
    cJSON_Delete(j);
    cJSON *r = report(&t);
    CHECK_MSG(r && num(r, "corrupt") == 0, "target: %s", r ? "corrupt blocks" : "gone");
    cJSON_Delete(r);
    CHECK_EQ_INT(tracer_of(t.pid), 0);
    stop_target(&t);
}

/* The interrupted call goes on: 40 attaches on a sleeper and a reader cut no sleep short and
 * lose no command; a signal sent meanwhile is delivered. The control: a signal handler without
 * SA_RESTART does cut the sleep, and the counter sees it. */
static void test_syscall_resumes(void)
{
    struct tgt t;
    const char *args[] = {"--sleeper", NULL};
    CHECK_EQ_INT(spawn_target(&t, MEMTRIM_CLI_TARGET, args, 0, NULL), 0);
    char out[4096], err[4096];
    int ok = 0, sleeper = 0;
    for (int i = 0; i < 40; i++) {
        cJSON *j = NULL;
        int rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, i % 2 ? "trim" : "stats", t.pid, NULL, out,
                          sizeof out, err, sizeof err, &j);
        ok += rc == 0;
        sleeper += rc == 0 && strstr(out, "clock_nanosleep") != NULL;
        if (rc)
            fprintf(stderr, "attach %d: %d %s\n", i, rc, err);
        cJSON_Delete(j);
        if (i == 20)
            kill(t.pid, SIGUSR1);
    }
    CHECK_EQ_INT(ok, 40);
    CHECK_MSG(sleeper > 0, "the sleeper was never the thread taken");
    cJSON *r = report(&t);
    CHECK_MSG(r != NULL, "the target did not answer");
    CHECK_EQ_INT(num(r, "early_sleeps"), 0);
    CHECK_EQ_INT(num(r, "usr1"), 1);
    cJSON_Delete(r);
    CHECK_EQ_INT(rwx_mappings(t.pid), 3); /* one page for 40 calls (its two guard pages split it) */
    /* the control */
    char line[256];
    int sl = 0;
    fputs("cutsleep\n", t.in);
    fflush(t.in);
    CHECK(fgets(line, sizeof line, t.out) != NULL && sscanf(line, "ok %d", &sl) == 1 && sl > 0);
    /* A signal that lands while the sleeper is between two sleeps (preempted there on a
     * loaded machine) runs its handler and cuts nothing: one is sent each round until a
     * sleep is cut (1 run in 11 failed with a single signal). */
    cJSON *r2 = NULL;
    WAIT_FOR((cJSON_Delete(r2), syscall(SYS_tgkill, t.pid, sl, SIGUSR2), r2 = report(&t),
              r2 && num(r2, "early_sleeps") > 0), 10);
    CHECK_MSG(r2 && num(r2, "early_sleeps") > 0, "a signal with a handler did not cut the sleep");
    cJSON_Delete(r2);
    stop_target(&t);
}

/* A traced target, a stopped one: refused, named, untouched. */
static void test_traced_and_stopped(void)
{
    struct tgt t;
    const char *args[] = {NULL};
    CHECK_EQ_INT(spawn_target(&t, MEMTRIM_CLI_TARGET, args, 0, NULL), 0);
    char out[4096], err[4096];
    CHECK_EQ_INT(ptrace(PTRACE_SEIZE, t.pid, 0, 0), 0);
    int rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "trim", t.pid, NULL, out, sizeof out, err,
                      sizeof err, NULL);
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(err, "already traced");
    CHECK_EQ_INT(tracer_of(t.pid), getpid());
    CHECK_EQ_INT(ptrace(PTRACE_INTERRUPT, t.pid, 0, 0), 0);
    int st;
    CHECK_EQ_INT(waitpid(t.pid, &st, __WALL), t.pid);
    CHECK_EQ_INT(ptrace(PTRACE_DETACH, t.pid, 0, 0), 0);
    /* the control: untraced, the same call works */
    rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "trim", t.pid, NULL, out, sizeof out, err, sizeof err,
                  NULL);
    CHECK_MSG(rc == 0, "%s", err);
    kill(t.pid, SIGSTOP);
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)t.pid);
    int stopped = 0;
    WAIT_FOR((({ FILE *f = fopen(path, "r"); stopped = f && fgets(buf, sizeof buf, f) &&
                 strstr(buf, ") T "); if (f) fclose(f); }), stopped), 10);
    rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "trim", t.pid, NULL, out, sizeof out, err, sizeof err,
                  NULL);
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(err, "is stopped");
    kill(t.pid, SIGCONT);
    cJSON *r = report(&t);
    CHECK(r != NULL);
    cJSON_Delete(r);
    stop_target(&t);
}

/* Another uid, and root without CAP_SYS_PTRACE: refused with the rule; the control (root with
 * it) works on the same target. */
static void test_permissions(void)
{
    if (getuid() != 0)
        SKIP("needs root to run the target and the tool as other users");
    struct tgt t, r;
    const char *args[] = {NULL};
    CHECK_EQ_INT(spawn_target(&t, target_copy, args, 65534, NULL), 0);
    CHECK_EQ_INT(spawn_target(&r, target_copy, args, 0, NULL), 0);
    char out[4096], err[4096];
    int rc = run_tool(tool_copy, AS_ROOT_NO_PTRACE_CAP, "trim", t.pid, NULL, out, sizeof out, err,
                      sizeof err, NULL);
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(err, "without CAP_SYS_PTRACE");
    CHECK_CONTAINS(err, "uid 65534");
    rc = run_tool(tool_copy, AS_NOBODY, "trim", r.pid, NULL, out, sizeof out, err, sizeof err, NULL);
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(err, "runs as uid 0");
    CHECK_EQ_INT(rwx_mappings(t.pid), 0);
    CHECK_EQ_INT(rwx_mappings(r.pid), 0);
    rc = run_tool(tool_copy, AS_ROOT, "trim", t.pid, NULL, out, sizeof out, err, sizeof err, NULL);
    CHECK_MSG(rc == 0, "%s", err);
    stop_target(&t);
    stop_target(&r);
}

/* A static binary, and stats on a program whose malloc is jemalloc (trim calls jemalloc's
 * own purge: tests/e2e/test_cli_allocators.py): refused by name, untouched. */
static void test_unsupported(void)
{
    struct tgt t;
    const char *args[] = {NULL};
    char out[4096], err[4096];
    CHECK_EQ_INT(spawn_target(&t, MEMTRIM_CLI_TARGET_STATIC, args, 0, NULL), 0);
    int rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "trim", t.pid, NULL, out, sizeof out, err,
                      sizeof err, NULL);
    CHECK_EQ_INT(rc, 3);
    CHECK_CONTAINS(err, "static binary");
    CHECK_EQ_INT(rwx_mappings(t.pid), 0);
    stop_target(&t);
    if (access("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", R_OK) != 0)
        SKIP("Debian's libjemalloc2 is not installed");
    CHECK_EQ_INT(spawn_target(&t, MEMTRIM_CLI_TARGET, args, 0,
                              "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"), 0);
    rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "stats", t.pid, NULL, out, sizeof out, err,
                  sizeof err, NULL);
    CHECK_EQ_INT(rc, 3);
    CHECK_CONTAINS(err, "jemalloc: stats reads glibc's mallinfo2 only");
    CHECK_EQ_INT(rwx_mappings(t.pid), 0);
    stop_target(&t);
}

/* A target whose one thread blocks in read() inside a SIGUSR1 handler (in_handler) or
 * outside one: the first is refused by name (a handler may have interrupted malloc with its
 * lock held), the second, the control, is trimmed. The target is memtrim-cli-target, built
 * without sanitizers in every build: a fork of this binary is, in the TSan build, a process
 * whose malloc is TSan's and whose static TLS (768 KiB) memtrim's thread refuses to copy. */
static void test_signal_handler_refused(void)
{
    for (int in_handler = 1; in_handler >= 0; in_handler--) {
        struct tgt t;
        const char *args[] = {in_handler ? "--read-in-handler" : NULL, NULL};
        CHECK_EQ_INT(spawn_target(&t, MEMTRIM_CLI_TARGET, args, 0, NULL), 0);
        char path[64], sc[128] = "";
        snprintf(path, sizeof path, "/proc/%d/syscall", (int)t.pid);
        struct timespec t0, now, ms = {0, 1000000};
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do { /* the condition: blocked in read (0); the deadline only guards a hang */
            FILE *f = fopen(path, "re");
            sc[0] = 0;
            if (f) {
                if (!fgets(sc, sizeof sc, f))
                    sc[0] = 0;
                fclose(f);
            }
            nanosleep(&ms, NULL);
            clock_gettime(CLOCK_MONOTONIC, &now);
        } while (strncmp(sc, "0 ", 2) != 0 && now.tv_sec - t0.tv_sec < 30);
        char out[4096], err[4096];
        int rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "trim", t.pid, "--thread-wait 0.05", out,
                          sizeof out, err, sizeof err, NULL);
        if (in_handler) {
            CHECK_MSG(rc == 4 && strstr(err, "inside a signal handler"),
                      "a thread in a handler: %d %s %s", rc, out, err);
            CHECK_EQ_INT(rwx_mappings(t.pid), 0);
        } else {
            CHECK_MSG(rc == 0, "control, the same read outside a handler: %d %s %s", rc, out, err);
        }
        CHECK_EQ_INT(tracer_of(t.pid), 0);
        stop_target(&t);
    }
}

/* No thread in a safe system call (the main thread waits on a futex, another computes):
 * the tool gives up in time with each thread's state, and the target is untouched. */
static void test_no_safe_thread(void)
{
    struct tgt t;
    const char *args[] = {"--churn", "1", "--busy-main", NULL};
    CHECK_EQ_INT(spawn_target(&t, MEMTRIM_CLI_TARGET, args, 0, NULL), 0);
    char out[4096], err[4096];
    int rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "trim", t.pid, "--thread-wait 0.05", out,
                      sizeof out, err, sizeof err, NULL);
    CHECK_EQ_INT(rc, 4);
    CHECK_CONTAINS(err, "futex");
    CHECK_CONTAINS(err, "nothing was changed");
    CHECK_CONTAINS(out, "no_safe_thread");
    CHECK_EQ_INT(rwx_mappings(t.pid), 0);
    CHECK_EQ_INT(tracer_of(t.pid), 0);
    stop_target(&t);
}

/* The first child of pid (0 if none yet), from /proc/PID/task/PID/children. */
static pid_t first_child(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "re");
    int c = 0;
    if (f) {
        if (fscanf(f, "%d", &c) != 1)
            c = 0;
        fclose(f);
    }
    return (pid_t)c;
}

/* --tree reaches children's children: sh -> sh -> sleep, one JSON line each, parents first;
 * the outer sh waits in rt_sigsuspend (dash's `wait`), which is never safe: its line says so
 * (no_safe_thread) and the two below it still answer (wait4, clock_nanosleep); the exit code
 * is the first failure's. The control without --tree: the root's line alone. */
static void test_tree(void)
{
    pid_t root = fork();
    if (root == 0) {
        setpgid(0, 0);
        execl("/bin/sh", "sh", "-c", "/bin/sh -c 'sleep 600; :' & wait", (char *)NULL);
        _exit(127);
    }
    CHECK_MSG(root > 0, "fork: %s", strerror(errno));
    if (root <= 0)
        return;
    setpgid(root, root);
    pid_t mid = 0, leaf = 0;
    char exe_path[64], exe[256] = "";
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do { /* the condition: three levels, the leaf exec'd; the deadline only guards a hang */
        mid = first_child(root);
        leaf = mid ? first_child(mid) : 0;
        ssize_t n = -1;
        if (leaf) {
            snprintf(exe_path, sizeof exe_path, "/proc/%d/exe", (int)leaf);
            n = readlink(exe_path, exe, sizeof exe - 1);
        }
        exe[n > 0 ? n : 0] = 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (!strstr(exe, "sleep") && now.tv_sec - t0.tv_sec < 30);
    CHECK_MSG(strstr(exe, "sleep") != NULL, "sh -> sh -> sleep did not start");
    char out[8192], err[4096];
    int rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "stats", root, "--thread-wait 0.05", out, sizeof out,
                      err, sizeof err, NULL);
    CHECK_MSG(rc == 4 && strchr(out, '\n') == strrchr(out, '\n'), "control: %d %s %s", rc, out,
              err);
    rc = run_tool(MEMTRIM_CLI_PATH, AS_ROOT, "stats", root, "--tree --thread-wait 0.05", out,
                  sizeof out, err, sizeof err, NULL);
    CHECK_MSG(rc == 4, "--tree: %d %s %s", rc, out, err);
    pid_t want[3] = {root, mid, leaf};
    char *line = out;
    for (int i = 0; i < 3 && line; i++) {
        char *nl = strchr(line, '\n');
        CHECK_MSG(nl != NULL, "--tree: line %d missing in %s", i + 1, out);
        if (!nl)
            break;
        *nl = 0;
        cJSON *j = cJSON_Parse(line);
        CHECK_MSG(j && num(j, "pid") == want[i], "--tree line %d: %s", i + 1, line);
        if (i == 0)
            CHECK_MSG(strstr(line, "no_safe_thread") && strstr(line, "rt_sigsuspend"),
                      "--tree line 1: %s", line);
        else
            CHECK_MSG(j && num(j, "heap_free_bytes") >= 0, "--tree line %d: %s", i + 1, line);
        cJSON_Delete(j);
        line = nl + 1;
    }
    CHECK_MSG(line && *line == 0, "--tree: more than 3 lines: %s", line ? line : "");
    CHECK_EQ_INT(tracer_of(leaf), 0);
    kill(-root, SIGKILL);
    waitpid(root, NULL, 0);
}

int main(void)
{
    copy_binaries();
    RUN(test_trim_and_stats);
    RUN(test_syscall_resumes);
    RUN(test_traced_and_stopped);
    RUN(test_permissions);
    RUN(test_unsupported);
    RUN(test_no_safe_thread);
    RUN(test_signal_handler_refused);
    RUN(test_tree);
    if (tmpdir[0])
        harness_rmtree(tmpdir);
    return harness_end();
}
