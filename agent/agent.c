/*
 * agent.c - DESIGN. `memtrim agent`: one daemon per node (docs/agent.md). Two kinds of
 * thread: the loop thread (this file: the one that runs agent_main) owns every cgroup and
 * process record, and HTTP workers (server/, api.c) that read them. The loop sleeps in
 * epoll_wait on the kernel's wake-ups (watch.c), SIGTERM/SIGINT (a signalfd) and a timer:
 * the scan (scan.c) every ScanIntervalMs, and a cgroup in its zone every ZonePollMs or as soon
 * as a member's retrim gap ends (decide.c's agent_next_due), whichever comes first. On a
 * wake or a due check it reads the cgroup; in its zone it trims its members one at a time
 * (act.c: the command runs beside the loop, its answer on a pipe in the epoll), the most
 * expected release first (decide.c), within the CPU budget, until the cgroup is out of its
 * zone. The stagger: one trim at a time per cgroup, at most MaxParallelTrims on the node.
 *
 * Locking: a->lock guards every record and the stats. The loop holds it from its wake to
 * its sleep; HTTP workers hold it while they render. Records are freed only by the loop (the
 * scan; a cgroup with a trim in flight stays until its answer).
 */
#include "agent.h"
#include "agent_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common.h"
#include "control.h"

/* A member expected to give back less than this (1 MiB, or 2 % of the aim) is not worth a trim. */
#define MIN_RELEASE (1 << 20)
#define MIN_RELEASE_SHARE 0.02
#define V2_NEAR_POLL_NS (100 * MT_MS)
#define FULL_READ_NS (10 * MT_SEC)

static void usage(FILE *f)
{
    fputs("usage: memtrim agent [--config JSON|FILE] [--dry-run] [--once]\n"
          "  --config   the agent's configuration (docs/agent.md): inline JSON or a file\n"
          "  --dry-run  say what would be trimmed, trim nothing\n"
          "  --once     scan once, print the cgroups found as JSON, and exit\n", f);
}

/* The near-limit episodes: within 5 % of the limit, then back under 90 % without a kill. */
static void bookkeep(struct agent_cgroup *cg)
{
    if (cg->limit <= 0 || cg->usage < 0)
        return;
    if (!cg->near && cg->usage >= cg->limit - cg->limit / 20) {
        cg->near = 1;
        cg->near_episodes++;
        cg->oom_kills_at_near = cg->oom_kills;
    } else if (cg->near && cg->usage < cg->limit - cg->limit / 10) {
        cg->near = 0;
        if (cg->oom_kills == cg->oom_kills_at_near)
            cg->kills_avoided++;
    }
}

/* The trims' CPU budget (decide.c's token bucket); a wait counted. */
static int budget_take(struct agent *a, int64_t now)
{
    if (agent_budget_take(&a->budget_ns, &a->budget_at_ns, now, a->cfg.cpu_budget_percent))
        return 1;
    a->stats.budget_waits++;
    return 0;
}

/* One cgroup's step: read it; in its zone, let the one decision pick a member and trim it. */
static void evaluate(struct agent *a, struct agent_cgroup *cg, int64_t now)
{
    /* At rest the usage alone decides; the limits, stat and OOM count (the series, the
     * near-limit episodes) are read in the zone, near it, and every FULL_READ_NS. */
    int near = agent_in_zone(cg->usage, agent_aim(cg), 0.5 * a->cfg.pressure_ratio);
    int full = cg->woke_ns || near || now >= cg->next_full_ns;
    if (full)
        cg->next_full_ns = now + FULL_READ_NS;
    agent_cgroup_read(cg, full);
    bookkeep(cg);
    if (cg->usage >= 0 && (cg->base_usage < 0 || cg->usage < cg->base_usage))
        cg->base_usage = cg->usage; /* the low-water mark since the last trim */
    int64_t aim = agent_aim(cg);
    double ratio = a->cfg.pressure_ratio;
    cg->in_zone = agent_in_zone(cg->usage, aim, ratio);
    int idle = !cg->in_zone && a->cfg.idle_trims && now >= cg->next_idle_ns;
    if (mt_control("agent-zone-ignored")) /* the defect: every watched cgroup trimmed */
        idle = !cg->in_zone;
    if (cg->busy)
        return; /* its trim's answer comes first */
    if (!cg->allowed || (!cg->in_zone && !idle)) {
        cg->woke_ns = 0;
        return;
    }
    agent_rescan(a, cg);
    agent_procs_refresh(a, cg);
    int64_t least = (int64_t)(MIN_RELEASE_SHARE * (double)aim);
    if (least < MIN_RELEASE)
        least = MIN_RELEASE;
    int rule = 0;
    long i;
    if (idle) {
        cg->next_idle_ns = now + (int64_t)a->cfg.idle_interval_s * MT_SEC;
        i = agent_pick_idle(cg->procs, cg->nprocs, mt_mono_ns(),
                            (int64_t)a->cfg.idle_interval_s * MT_SEC, least);
    } else {
        i = agent_decide(cg, mt_mono_ns(), ratio, (uint64_t)least, &rule);
    }
    cg->woke_ns = i < 0 ? 0 : cg->woke_ns;
    if (i < 0)
        return;
    struct agent_proc *p = &cg->procs[i];
    if (a->cfg.dry_run || mt_control("agent-never-trims")) {
        mt_log(MT_LOG_INFO, "agent", "dry run: cgroup %s (usage %lld of %lld, rule %d): would trim "
               "process %d (%s, %s), expected %lld bytes", cg->path, (long long)cg->usage,
               (long long)aim, rule, (int)p->pid, p->comm, p->alloc, (long long)agent_expected(p));
        p->last_trim_ns = mt_mono_ns(); /* as if trimmed: its growth counts from here */
        p->anon_after_trim = p->anon;
        cg->base_usage = INT64_MAX;
        cg->dry_run_picks++;
        a->stats.dry_run_picks++;
        cg->woke_ns = 0;
        return;
    }
    if (a->trims_in_flight >= a->cfg.max_parallel_trims || !budget_take(a, mt_mono_ns()))
        return; /* the node's share of trims is taken: at the next wake or poll */
    if (cg->woke_ns) {
        double ms = (double)(mt_mono_ns() - cg->woke_ns) / 1e6;
        a->stats.last_reaction_ms = ms;
        a->stats.reaction_ms_sum += ms;
        if (ms > a->stats.reaction_ms_max)
            a->stats.reaction_ms_max = ms;
        a->stats.reactions++;
        cg->woke_ns = 0;
    }
    if (agent_trim_start(a, cg, p) == 0)
        cg->base_usage = INT64_MAX; /* growth counts again from the low after this trim */
}

/* v2 has no usage lines, and a cgroup whose files could not be armed (a read-only cgroupfs)
 * has none either: past half its aim, it is read every V2_NEAR_POLL_NS. */
static int polled_near(const struct agent_cgroup *cg)
{
    return (cg->version == 2 || cg->event_fd < 0) && cg->allowed &&
           agent_in_zone(cg->usage, agent_aim(cg), 0.5);
}

static int due(const struct agent *a, const struct agent_cgroup *cg, int64_t now, int scanned)
{
    (void)a;
    (void)now;
    return scanned || cg->woke_ns || cg->in_zone || polled_near(cg);
}

static int64_t next_sleep_ms(const struct agent *a, int64_t now, int64_t next_scan)
{
    int64_t until = next_scan;
    if (a->store && a->next_sample_ns < until)
        until = a->next_sample_ns;
    for (size_t i = 0; i < a->ncgroups; i++) {
        const struct agent_cgroup *cg = a->cgroups[i];
        if (cg->in_zone && cg->allowed) {
            until = now + (int64_t)a->cfg.zone_poll_ms * MT_MS < until
                        ? now + (int64_t)a->cfg.zone_poll_ms * MT_MS : until;
            /* and the moment a member trimmed lately may be picked again, not the next poll
             * after it: a member growing 1.5 MB a millisecond grows 30 MB more in 20 ms */
            int64_t due = cg->busy ? INT64_MAX : agent_next_due(cg, now);
            until = due < until ? due : until;
        }
        else if (polled_near(cg))
            until = now + V2_NEAR_POLL_NS < until ? now + V2_NEAR_POLL_NS : until;
    }
    return until <= now ? 0 : (until - now + MT_MS - 1) / MT_MS;
}

static void loop(struct agent *a, int sigfd)
{
    struct epoll_event evs[64];
    int64_t next_scan = 0;
    for (;;) {
        pthread_mutex_lock(&a->lock);
        int64_t now = mt_mono_ns();
        int scanned = 0;
        if (now >= next_scan) {
            agent_scan(a);
            next_scan = now + (int64_t)a->cfg.scan_interval_ms * MT_MS;
            scanned = 1;
        }
        for (size_t i = 0; i < a->ncgroups; i++) {
            agent_trim_expire(a, a->cgroups[i], now);
            if (due(a, a->cgroups[i], now, scanned))
                evaluate(a, a->cgroups[i], now);
        }
        agent_history_tick(a, now);
        int timeout = (int)next_sleep_ms(a, mt_mono_ns(), next_scan);
        pthread_mutex_unlock(&a->lock);
        int n = epoll_wait(a->epfd, evs, 64, timeout);
        int64_t woke = mt_mono_ns();
        pthread_mutex_lock(&a->lock);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) { /* the signalfd */
                struct signalfd_siginfo si;
                (void)!read(sigfd, &si, sizeof si);
                mt_log(MT_LOG_INFO, "agent", "signal %u: stopping", si.ssi_signo);
                pthread_mutex_unlock(&a->lock);
                return;
            }
            if (*(enum agent_ev *)evs[i].data.ptr == AGENT_EV_TRIM) {
                agent_trim_ready(a, evs[i].data.ptr); /* an answer: due again below */
                continue;
            }
            struct agent_cgroup *cg = evs[i].data.ptr;
            agent_watch_drain(cg, -1);
            cg->wakes++;
            a->stats.wakes++;
            if (!cg->woke_ns)
                cg->woke_ns = woke;
        }
        pthread_mutex_unlock(&a->lock);
    }
}

/* `memtrim agent --ask PID --start-time T [--timeout S]`: the child the agent runs to ask a
 * process where memtrim is loaded through its own API (ask.c). */
static int ask_main(int argc, char **argv)
{
    char *end;
    long pid = argc >= 3 ? strtol(argv[2], &end, 10) : 0;
    unsigned long long start = 0;
    double timeout = 10;
    if (argc < 3 || *end || pid <= 0 || pid > INT32_MAX) {
        fprintf(stderr, "memtrim agent --ask: a pid wanted\n");
        return 1;
    }
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--start-time")) {
            start = strtoull(argv[i + 1], &end, 10);
        } else if (!strcmp(argv[i], "--timeout")) {
            timeout = strtod(argv[i + 1], &end);
        } else {
            fprintf(stderr, "memtrim agent --ask: unknown argument '%s'\n", argv[i]);
            return 1;
        }
        if (*end || !(timeout > 0 && timeout <= 600)) {
            fprintf(stderr, "memtrim agent --ask: '%s' is not a number in range\n", argv[i + 1]);
            return 1;
        }
    }
    return agent_ask((pid_t)pid, start, timeout);
}

/* --once: the cgroups found, as GET /agent/cgroups answers (api.c). */

int agent_main(int argc, char **argv)
{
    const char *config = NULL;
    int dry_run = 0, once = 0;
    if (argc >= 2 && !strcmp(argv[1], "--ask")) /* the agent's own child (act.c, ask.c) */
        return ask_main(argc, argv);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            config = argv[++i];
        } else if (!strcmp(argv[i], "--dry-run")) {
            dry_run = 1;
        } else if (!strcmp(argv[i], "--once")) {
            once = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "memtrim agent: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 1;
        }
    }
    static struct agent agent; /* the one per process: the loop and the HTTP workers share it */
    struct agent *a = &agent;
    char err[1024];
    if (agent_config_load(config, &a->cfg, err, sizeof err) != 0) {
        fprintf(stderr, "memtrim agent: %s\n", err);
        return 1;
    }
    a->cfg.dry_run |= dry_run;
    /* The command is this very executable, by /proc/self/exe: a package upgrade that
     * replaces /usr/bin/memtrim under a running agent leaves it running its own command,
     * the one its rules were built with, until it is restarted. */
    memcpy(a->self_exe, a->cfg.command[0] ? a->cfg.command : "/proc/self/exe",
           a->cfg.command[0] ? sizeof a->self_exe : sizeof "/proc/self/exe");
    /* Each limited cgroup holds one or two descriptors (its wake-ups) and each trim a pipe: a
     * node's 200 pods pass a service's usual soft limit of 1024. The agent, its server
     * (libmicrohttpd with poll or epoll) and its commands never use select(): the soft limit
     * goes up to the hard one. */
    struct rlimit nofile;
    if (!mt_control("agent-fd-soft-limit") && getrlimit(RLIMIT_NOFILE, &nofile) == 0 &&
        nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    pthread_mutex_init(&a->lock, NULL);
    a->started_ms = mt_now_ms();
    a->budget_at_ns = mt_mono_ns();
    a->budget_ns = agent_budget_start(a->cfg.cpu_budget_percent);
    a->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (a->epfd < 0) {
        fprintf(stderr, "memtrim agent: epoll: %s\n", strerror(errno));
        return 1;
    }
    if (once) {
        pthread_mutex_lock(&a->lock);
        agent_scan(a);
        char *s = agent_cgroups_json(a);
        pthread_mutex_unlock(&a->lock);
        if (s)
            puts(s);
        free(s);
        return s ? 0 : 1;
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* before any thread starts: they inherit it */
    signal(SIGPIPE, SIG_IGN);
    int sigfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (sigfd < 0 || epoll_ctl(a->epfd, EPOLL_CTL_ADD, sigfd, &ev) != 0) {
        fprintf(stderr, "memtrim agent: signalfd: %s\n", strerror(errno));
        return 1;
    }
    agent_history_open(a);
    struct server *srv = NULL;
    if (a->cfg.http_enabled) {
        char *e = NULL, addr[256];
        if (agent_http_start(a, &srv, &e) != 0) {
            fprintf(stderr, "memtrim agent: HTTP: %s\n", e ? e : "cannot start");
            free(e);
            agent_history_close(a);
            return 1;
        }
        if (server_address(srv, addr, sizeof addr) == 0)
            mt_log(MT_LOG_INFO, "agent", "listening on %s", addr);
    }
    mt_log(MT_LOG_INFO, "agent", "started%s: zone at %.0f %% of each cgroup's aim, scan every %d ms",
           a->cfg.dry_run ? " (dry run)" : "", a->cfg.pressure_ratio * 100, a->cfg.scan_interval_ms);
    loop(a, sigfd);
    server_stop(srv);
    pthread_mutex_lock(&a->lock);
    for (size_t i = 0; i < a->ncgroups; i++) {
        agent_trim_abandon(a, a->cgroups[i]);
        agent_watch_disarm(a, a->cgroups[i]);
        agent_cgroup_free(a->cgroups[i]);
    }
    free(a->cgroups);
    a->cgroups = NULL;
    a->ncgroups = 0;
    pthread_mutex_unlock(&a->lock);
    agent_history_close(a);
    close(sigfd);
    close(a->epfd);
    mt_log(MT_LOG_INFO, "agent", "stopped: %llu trims, %llu bytes released",
           (unsigned long long)a->stats.trims, (unsigned long long)a->stats.released);
    return 0;
}
