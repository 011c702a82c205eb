/*
 * act.c - a trim from outside: the agent runs the memtrim command itself (`memtrim trim PID
 * --json --start-time T`, this same executable), so every rule of the command applies as it
 * is (its refusals, its injector, its identity check of the process read), a fault or a hang
 * of a call stays in a child, and the agent killed mid-trim is the command's own case (the
 * child runs on to its end; nothing is left to the agent). The child's JSON answer says what
 * was released or, with the command's error code, why not, and its time inside the process
 * (charged to that member's own budget of it: decide.c); its CPU (wait4's rusage) is charged
 * to the trims' budget. The loop thread; a->lock is released while the child runs (the records
 * it fills afterwards are freed only by this same thread's scan).
 */
#include "agent_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "control.h"
#include "target.h"

extern char **environ;

enum agent_reason agent_reason_of(const char *code, const char *message)
{
    if (!code)
        return AR_FAILED;
    if (!strcmp(code, "unsupported"))
        return strstr(message, "musl") ? AR_MUSL : strstr(message, "static") ? AR_STATIC
                                                                            : AR_RUNTIME;
    /* the command's refusal for want of room in the process's memory cgroup (cli/output.c:
     * a call could charge it past its limit), or in its pids cgroup (memtrim's threads could
     * take the tasks it starts), passes with the usage: it stays a member. Taken
     * for the kernel's refusal, it left puma alone for good at its first one. But a room the
     * command cannot read (its cgroup namespace shows no mount of the process's cgroup) is
     * the command's for good: left alone and reported, as the kernel's; held only for room,
     * it was asked again each time the agent read room there, a command forked each time. */
    if (!strcmp(code, "refused") && strstr(message, TARGET_UNSEEN_WORDS) &&
        !mt_control("agent-unseen-room-retried"))
        return AR_KERNEL;
    if (!strcmp(code, "refused") && (strstr(message, TARGET_NO_ROOM_WORDS) ||
                                     strstr(message, TARGET_NO_PIDS_WORDS)) &&
        !mt_control("agent-room-refusal-final"))
        return AR_NO_ROOM;
    if (!strcmp(code, "refused"))
        return strstr(message, "seccomp") ? AR_SECCOMP : AR_KERNEL;
    if (!strcmp(code, "no_safe_thread"))
        return AR_NO_THREAD;
    if (!strcmp(code, "timeout"))
        return AR_TIMEOUT;
    if (!strcmp(code, "api_unreachable")) /* its memtrim's API (ask.c): left alone, never */
        return AR_API_UNREACHABLE;        /* trimmed from outside */
    if (!strcmp(code, "api_refused"))
        return AR_API_REFUSED;
    return AR_FAILED; /* api_busy, api_failed among them: it stays a member */
}

/* Starts argv with its stdout into a pipe (*out_fd, non-blocking); the child's pid or -errno. */
static pid_t spawn(char *const argv[], int *out_fd)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
        return -errno;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, def;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none); /* the loop blocks SIGTERM; the child must not */
    sigemptyset(&def);
    sigaddset(&def, SIGTERM);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_setsigdefault(&attr, &def);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t child;
    int rc = posix_spawn(&child, argv[0], &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return -rc;
    }
    *out_fd = fds[0];
    return child;
}

static int64_t proc_anon_now(pid_t pid)
{
    struct agent_proc one = {.pid = pid};
    struct agent_cgroup cg = {.procs = &one, .nprocs = 1};
    agent_procs_refresh(NULL, &cg);
    return one.anon;
}

/* Learn from one answer (the trim started at started, its answer read at now): what the
 * process gave back, or why it is left alone. */
static void learn(struct agent_cgroup *cg, struct agent_proc *p, const char *answer,
                  int64_t started, int64_t now, int64_t *released)
{
    cJSON *j = cJSON_Parse(answer);
    const cJSON *rel = cJSON_GetObjectItemCaseSensitive(j, "released_bytes");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(j, "thread_stopped_seconds");
    const cJSON *life = cJSON_GetObjectItemCaseSensitive(j, "call_threads_seconds");
    agent_trimmed(p, started, now);
    /* its time inside the process, charged to its own budget of it (decide.c; none in a
     * refusal, in an ask through its memtrim's API, or in a trim that gave back a MiB or more;
     * a call past the command's deadline, or no answer: the whole trim's time) */
    const cJSON *ecode = cJSON_GetObjectItemCaseSensitive(err, "code");
    int64_t gave = cJSON_IsNumber(rel) && rel->valuedouble >= 0 &&
                   rel->valuedouble < 9007199254740992.0 ? (int64_t)rel->valuedouble : -1;
    double stop_s = cJSON_IsNumber(stop) ? stop->valuedouble : 0;
    double life_s = cJSON_IsNumber(life) ? life->valuedouble : 0;
    int64_t charged = agent_answer_inside_ns(cJSON_IsString(ecode) ? ecode->valuestring : NULL,
                                             cJSON_IsObject(j), stop_s, life_s, gave, started,
                                             now);
    agent_inside_charge(p, now, charged);
    /* what it spent there: the charge, or a trim that paid, its figures */
    p->last_inside_ns = charged ? charged : agent_in_target_ns(stop_s, life_s);
    cg->inside_ns += (uint64_t)p->last_inside_ns;
    cg->inside_charged_ns += (uint64_t)charged;
    if (cJSON_IsNumber(rel)) {
        /* (a child's answer, checked before the cast: a NaN or one past int64 is none) */
        int64_t r = rel->valuedouble > 0 && (rel->valuedouble < 9007199254740992.0 ||
                                             mt_control("agent-api-answer-unchecked"))
                        ? (int64_t)rel->valuedouble : 0;
        int64_t before = agent_expected(p);
        *released = r;
        p->last_released = r;
        p->trims++;
        p->released += (uint64_t)r;
        cg->trims++;
        cg->released += (uint64_t)r;
        p->anon_after_trim = p->anon = proc_anon_now(p->pid); /* its growth counts from here */
        p->reason = AR_NONE;
        p->why[0] = 0;
        /* a process that gives nothing back three times running, with heap to give, is
         * unreleasable (a runtime that keeps its own heap) and left alone */
        if (r < (1 << 20) && before >= (16 << 20)) {
            if (++p->zero_trims >= 3) {
                p->reason = AR_GIVES_NOTHING;
                snprintf(p->why, sizeof p->why, "three trims in a row gave back under 1 MiB");
                cg->refusals[AR_GIVES_NOTHING]++;
            }
        } else {
            p->zero_trims = 0;
        }
    } else {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
        const char *m = cJSON_IsString(msg) ? msg->valuestring : "the command gave no answer";
        p->reason = agent_reason_of(cJSON_IsString(code) ? code->valuestring : NULL, m);
        snprintf(p->why, sizeof p->why, "%s", m);
        if (p->reason == AR_NO_ROOM) { /* (decide.c: held until its cgroup has room) */
            p->no_room_ns = now;
            p->no_room_read = agent_room(cg);
        }
        cg->refusals[p->reason]++;
    }
    cJSON_Delete(j);
}

static struct agent_proc *find_proc(struct agent_cgroup *cg, pid_t pid, unsigned long long start)
{
    for (size_t i = 0; i < cg->nprocs; i++)
        if (cg->procs[i].pid == pid && cg->procs[i].start == start)
            return &cg->procs[i];
    return NULL;
}

int agent_trim_start(struct agent *a, struct agent_cgroup *cg, struct agent_proc *p)
{
    struct agent_trim *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    char pid[24], start[32], tw[32], cw[32];
    snprintf(pid, sizeof pid, "%d", (int)p->pid);
    snprintf(start, sizeof start, "%llu", p->start);
    snprintf(tw, sizeof tw, "%g", a->cfg.thread_wait_s);
    snprintf(cw, sizeof cw, "%g", a->cfg.call_wait_s);
    char *argv[] = {a->self_exe, "trim", pid, "--json", "--start-time", start, "--thread-wait", tw,
                    "--timeout", cw, NULL};
    /* A process where memtrim is loaded is asked through its own API, never trimmed from
     * outside (ask.c); the same child, pipe and answer. */
    char *ask[] = {a->self_exe, "agent", "--ask", pid, "--start-time", start, "--timeout", cw, NULL};
    if (!p->memtrim_loaded && !mt_control("agent-loaded-once")) /* the defect: first sight only */
        p->memtrim_loaded = agent_memtrim_loaded(p->pid); /* loaded since (`memtrim load`)? */
    int asking = p->memtrim_loaded && !mt_control("agent-inject-loaded"); /* the defect: injected */
    t->ev_kind = AGENT_EV_TRIM;
    t->cg = cg;
    t->pid = p->pid;
    t->start = p->start;
    t->t0 = mt_mono_ns();
    /* the command keeps its own deadlines; past them and 10 s more, it is ended (its own
     * death at any instant is one of the command's tested cases) */
    t->deadline = t->t0 + (int64_t)((a->cfg.thread_wait_s + a->cfg.call_wait_s + 10) * 1e9);
    t->child = spawn(asking ? ask : argv, &t->out_fd);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = t};
    if (t->child < 0 || epoll_ctl(a->epfd, EPOLL_CTL_ADD, t->out_fd, &ev) != 0) {
        int e = t->child < 0 ? (int)-t->child : errno;
        if (t->child > 0) {
            close(t->out_fd);
            kill(t->child, SIGKILL);
            waitpid(t->child, NULL, 0);
        }
        snprintf(t->buf, sizeof t->buf, "{\"error\":{\"code\":\"failed\",\"message\":\"cannot run "
                 "%s: %s\"}}", a->self_exe, strerror(e));
        int64_t released;
        learn(cg, p, t->buf, t->t0, mt_mono_ns(), &released);
        free(t);
        return -e;
    }
    p->last_trim_ns = t->t0;
    p->in_flight = 1; /* not picked again meanwhile */
    cg->busy = t;
    a->trims_in_flight++;
    return 0;
}

/* The trim is over (its answer read whole, or its deadline past): what it did, learnt. */
static void finish(struct agent *a, struct agent_trim *t)
{
    struct agent_cgroup *cg = t->cg;
    epoll_ctl(a->epfd, EPOLL_CTL_DEL, t->out_fd, NULL);
    close(t->out_fd);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(t->child, &status, 0, &ru) < 0 && errno == EINTR)
        ;
    int64_t cpu = (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * MT_SEC +
                  (int64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
    t->buf[t->n] = 0;
    int64_t released = 0, now = mt_mono_ns();
    struct agent_proc *p = find_proc(cg, t->pid, t->start);
    struct agent_proc gone = {.pid = t->pid, .start = t->start}; /* it left the cgroup meanwhile */
    if (!p)
        p = &gone;
    p->in_flight = 0;
    learn(cg, p, t->buf, t->t0, now, &released);
    a->stats.trims_cpu_ns += cpu;
    a->budget_ns -= (double)cpu;
    if (!p->reason) {
        a->stats.trims++;
        a->stats.released += (uint64_t)released;
    }
    agent_history_trim(a, cg, p, released, now - t->t0, cpu);
    mt_log(MT_LOG_INFO, "agent", "cgroup %s: process %d (%s): %s %lld bytes in %.1f ms (%.1f ms "
           "CPU, %.1f ms in the process, %.1f ms of it charged, %.3f s left)%s%s%s", cg->path,
           (int)p->pid, p->comm[0] ? p->comm : "gone",
           p->reason ? "not trimmed," : "released", (long long)released,
           (double)(now - t->t0) / 1e6, (double)cpu / 1e6, (double)p->last_inside_ns / 1e6,
           (double)p->last_in_target_ns / 1e6, agent_inside_left(p, now) / 1e9,
           strstr(t->buf, "\"via\":\"api\"") ? ", asked through its memtrim's API" : "",
           p->reason ? ": " : "", p->reason ? p->why : "");
    cg->busy = NULL;
    a->trims_in_flight--;
    free(t);
}

void agent_trim_ready(struct agent *a, struct agent_trim *t)
{
    for (;;) {
        ssize_t r = read(t->out_fd, t->buf + t->n, sizeof t->buf - 1 - t->n);
        if (r > 0) {
            t->n += (size_t)r;
            if (t->n < sizeof t->buf - 1)
                continue;
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else if (r < 0 && errno == EAGAIN) {
            return; /* more to come */
        }
        finish(a, t); /* end of its output (or a full buffer, or an error) */
        return;
    }
}

void agent_trim_expire(struct agent *a, struct agent_cgroup *cg, int64_t now)
{
    if (cg->busy && now >= cg->busy->deadline) {
        kill(cg->busy->child, SIGKILL);
        finish(a, cg->busy);
    }
}

void agent_trim_abandon(struct agent *a, struct agent_cgroup *cg)
{
    /* the agent stops: the command runs on to its end alone; its answer goes nowhere */
    if (!cg->busy)
        return;
    epoll_ctl(a->epfd, EPOLL_CTL_DEL, cg->busy->out_fd, NULL);
    close(cg->busy->out_fd);
    free(cg->busy);
    cg->busy = NULL;
}
