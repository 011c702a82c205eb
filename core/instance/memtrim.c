/*
 * memtrim.c - the instance's life. mt_create runs a table of start steps (steps[]:
 * the configuration lock, the housekeeper's state, the store, the snapshot cache, the
 * trim service, the pressure path, the arenas cache, the tunables, then the threads:
 * HTTP server, store, housekeeper, pressure) and, when one fails, undoes those before
 * it in reverse; mt_destroy undoes them all. What the instance offers while it runs is
 * in instance.c. Runs on the host's thread that starts or stops it.
 *
 * This file's globals: at most one instance runs per process (malloc_trim is
 * process-wide), so `instance_running` and `instance_held` (the started instance
 * that owns a store) are guarded by `instance_lock`, which the atfork handlers
 * (installed once, `fork_once`) hold across fork(), with that store's tick lock
 * (store_fork_prepare) for every host. Lock order: an adapter's fork locks (the
 * host side's host.lock (core/group/group_host_int.h), the group's g->lock, whose
 * handlers run first), then
 * instance_lock, then the store's tick_lock;
 * `test_fail_step` lets the tests fail one step (atomic).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt_alloc.h"
#include "alloc.h"
#include "control.h"
#include "fdid.h"
#include "core.h"
#include "memtrim.h"
#include "instance.h"
#include "pressure.h"
#include "server.h"
#include "group.h"
#include "cpuquota.h"
#include "tunables.h"


static pthread_mutex_t instance_lock = PTHREAD_MUTEX_INITIALIZER;
static int instance_running;
static struct memtrim *instance_held; /* the running leader or single instance: its store's fork hold */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/*
 * fork(): the child has none of the instance's threads. Keep the global
 * locks consistent across the fork and let the child start an instance of
 * its own; the parent's instance is left alone there (see mt_destroy).
 */
static void fork_prepare(void)
{
    pthread_mutex_lock(&instance_lock);
    /* No SQLite transaction open across fork(): a child that later opens the store (a
     * FollowFork restart, a member taking over) would find its locks in SQLite's
     * per-process state, copied at fork, and the file locked for good. */
    if (instance_held)
        store_fork_prepare(&instance_held->store);
    mt_log_fork_prepare();
}

static void fork_parent(void)
{
    mt_log_fork_parent();
    if (instance_held)
        store_fork_after(&instance_held->store);
    pthread_mutex_unlock(&instance_lock);
}

static void fork_child(void)
{
    mt_log_fork_child();
    if (instance_held)
        store_fork_after(&instance_held->store); /* taken by this thread in prepare */
    instance_held = NULL; /* the parent's: its threads are not here */
    mt_canary_fork_child();
    mt_fdid_fork_child(); /* the parent's cgroup, /proc and pressure descriptors (fdid.h) */
    instance_running = 0;
    pthread_mutex_unlock(&instance_lock);
}

static void fork_hooks_install(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void mt_fork_hooks_install(void)
{
    pthread_once(&fork_once, fork_hooks_install);
}

void mt_after_fork_child(void)
{
    /* The atfork handler did the work; this is for adapters that want to be sure. */
    pthread_mutex_lock(&instance_lock);
    instance_running = 0;
    pthread_mutex_unlock(&instance_lock);
}

static char *errdup(const char *fmt, const char *arg)
{
    char buf[512];
    snprintf(buf, sizeof(buf), fmt, arg);
    return mt_strdup(buf);
}

struct role;
static int role_level(const struct role *role);

/* What the steps need beyond the configuration (in struct memtrim). */
struct start_ctx {
    const struct role *role;
    const struct alloc_ops *alloc;
    const struct server_routes *routes;
    /* a worker group's member: its channel, owned by the group step */
    int *member_fd; /* set to -1 once the group step took it */
    void (*leader_gone)(void *);
    void *gone_arg;
};

/*
 * One part of the instance. mt_create runs the steps' start in the table's
 * order; a failure, and mt_destroy, run the stops of the steps started, in
 * reverse, except that a step marked STEP_FIRST_TO_STOP stops before all others (the
 * HTTP server: its handlers use every other part, and it starts first because a
 * port in use, the likeliest failure, then leaves no thread to undo). A stop
 * that returns nonzero leaves its part running (a store thread hung on the disk)
 * and with it the memory of every step not yet undone.
 */
struct step {
    const char *module; /* names the part in the log */
    int (*start)(struct memtrim *mt, const struct start_ctx *ctx, char **err); /* NULL: none */
    int (*stop)(struct memtrim *mt);                                          /* NULL: none */
    unsigned flags;                                                           /* STEP_* */
};
#define STEP_FIRST_TO_STOP 0x1   /* stops before every other step (the server) */
/* The kinds of process a step runs in (struct role): a step without ROLE_MEMBER is
 * neither started nor stopped in a worker group's member. */
#define ROLE_ALONE 0x10  /* a process alone, or a worker group's leader (it leads later) */
#define ROLE_MEMBER 0x20 /* a worker group's member: it reports to and trims for its leader */
#define ROLE_ALL (ROLE_ALONE | ROLE_MEMBER)
#define STEP_AT_DESTROY_ONLY 0x2 /* its stop runs at mt_destroy only, not when a start fails */

static int oom(char **err, const char *what)
{
    *err = errdup("out of memory for the %s", what);
    return -ENOMEM;
}

static int cfg_lock_init(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    mt->http_port = -1;
    atomic_init(&mt->suspend_depth, 0);
    if (pthread_mutex_init(&mt->cfg_lock, NULL))
        return oom(err, "configuration lock");
    if (pthread_mutex_init(&mt->patch_lock, NULL)) {
        pthread_mutex_destroy(&mt->cfg_lock);
        return oom(err, "configuration lock");
    }
    mt_log_limit_init(&mt->patch_log, PATCH_LOG_WINDOW_NS, PATCH_LOG_BURST);
    return 0;
}

static int cfg_lock_destroy(struct memtrim *mt)
{
    pthread_mutex_destroy(&mt->cfg_lock);
    pthread_mutex_destroy(&mt->patch_lock);
    pthread_mutex_destroy(&mt->patch_log.lock);
    return 0;
}

static int hk_init(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    housekeeper_init(&mt->hk);
    return 0;
}

static int hk_destroy(struct memtrim *mt)
{
    housekeeper_destroy(&mt->hk);
    return 0;
}

static int store_make(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    return store_init(&mt->store, mt->cfg.database, mt->cfg.retention_hours) ? oom(err, "store")
                                                                              : 0;
}

static int store_unmake(struct memtrim *mt)
{
    store_destroy(&mt->store);
    return 0;
}

static int cache_init(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    if (snapshot_init(&mt->cache))
        return oom(err, "snapshot cache");
    snapshot_set_alloc(&mt->cache, ctx->alloc); /* before any thread reads the cache */
    mt_log(role_level(ctx->role), "alloc", "allocator: %s %s (releases with %s)",
           alloc_name(ctx->alloc),
           mt->cache.alloc_version[0] ? mt->cache.alloc_version : "(version unknown)",
           alloc_release_call(ctx->alloc));
    return 0;
}

static int cache_destroy(struct memtrim *mt)
{
    snapshot_destroy(&mt->cache);
    return 0;
}

/* The trim service's sinks: every result and re-fault figure go to the store thread's queue
 * (a group's leader stamps its pid on them; a member's sinks are group.c's). */
static void instance_trim_done(void *arg, const struct mt_trim_result *r)
{
    struct memtrim *mt = arg;
    struct mt_trim_result copy = *r;
    copy.pid = atomic_load(&mt->record_pid);
    if (copy.pid)
        group_count_self(mt->group, r);
    store_push_trim(&mt->store, &copy);
}

static void instance_refault_done(void *arg, const struct mt_refault *rf)
{
    struct memtrim *mt = arg;
    struct mt_refault copy = *rf;
    copy.pid = atomic_load(&mt->record_pid);
    store_push_refault(&mt->store, &copy);
}

/* A member's sinks: every result and re-fault figure to its leader (group_member.c). */
static void member_trim_done(void *arg, const struct mt_trim_result *r)
{
    struct memtrim *mt = arg;
    group_member_trim_sink(mt->group, r);
}

static void member_refault_done(void *arg, const struct mt_refault *rf)
{
    struct memtrim *mt = arg;
    group_member_refault_sink(mt->group, rf);
}

static void instance_store_wake(void *arg)
{
    struct memtrim *mt = arg;
    store_wake(&mt->store); /* the result to the disk now, not at the next 250 ms */
}

static void announce_alone(struct memtrim *mt);
static void announce_member(struct memtrim *mt);

/*
 * What kind of process an instance is: a configuration of the one table of steps below,
 * not a branch in them. A process alone (a group's leader is one that leads later:
 * mt_group_lead) runs every step and keeps its results in its store. A worker group's
 * member runs the steps marked ROLE_MEMBER: no server (its leader serves the group), no
 * tunables (its leader's, inherited at fork), no pressure thread (its pressure is the
 * group's: the leader decides), no exit summary (one line per worker that comes and goes
 * would flood the log); its results go to its leader (group_member.c), and what its leader
 * said already (the allocator, its start and stop) it says at debug level.
 */
struct role {
    unsigned mask;      /* ROLE_ALONE or ROLE_MEMBER: the steps it runs */
    int quiet;          /* its lines at debug level */
    int fail_level;     /* a start that fails (a member costs its host nothing: a warning) */
    int keeps_store;    /* its Database stands, and a fork holds its store (memtrim.c's hooks) */
    void (*trim_sink)(void *arg, const struct mt_trim_result *r);
    void (*refault_sink)(void *arg, const struct mt_refault *rf);
    void (*sink_wake)(void *arg);
    void (*announce)(struct memtrim *mt); /* its "started" lines */
};

static const struct role role_alone = {
    .mask = ROLE_ALONE, .fail_level = MT_LOG_ERROR, .keeps_store = 1,
    .trim_sink = instance_trim_done, .refault_sink = instance_refault_done,
    .sink_wake = instance_store_wake, .announce = announce_alone,
};

static const struct role role_member = {
    .mask = ROLE_MEMBER, .quiet = 1, .fail_level = MT_LOG_WARNING,
    .trim_sink = member_trim_done, .refault_sink = member_refault_done,
    .announce = announce_member,
};

static int trims_init(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    if (trim_service_init(&mt->trims))
        return oom(err, "trim service");
    mt->trims.sink = ctx->role->trim_sink;
    mt->trims.refault_sink = ctx->role->refault_sink;
    mt->trims.sink_wake = ctx->role->sink_wake;
    mt->trims.sink_arg = mt;
    mt->trims.pinned = mt_arenas_pinned_peek;
    mt->trims.suspend_depth = &mt->suspend_depth;
    mt->store.trims = &mt->trims;
    atomic_init(&mt->record_pid, 0);
    return 0;
}

static int trims_destroy(struct memtrim *mt)
{
    trim_service_destroy(&mt->trims);
    return 0;
}

/* The config feed every thread reads (PATCH /config bumps the generation). */
static struct mt_config_feed config_feed(struct memtrim *mt)
{
    return (struct mt_config_feed){&mt->cfg_lock, &mt->cfg, &mt->cfg_generation};
}

/* What a group (core/group/) is handed: the instance's parts it uses. */
struct group_deps mt_group_deps(struct memtrim *mt)
{
    return (struct group_deps){
        .config = config_feed(mt),
        .suspend_depth = &mt->suspend_depth,
        .cache = &mt->cache,
        .trims = &mt->trims,
        .store = &mt->store,
        .record_pid = &mt->record_pid,
        .pid = (int)mt->pid,
        .pressure = mt->pressure,
    };
}

static int pressure_make(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    struct pressure_deps deps = {.config = config_feed(mt), .cache = &mt->cache, .trims = &mt->trims};
    mt->pressure = pressure_create(&deps);
    return mt->pressure ? 0 : oom(err, "pressure path");
}

static int pressure_unmake(struct memtrim *mt)
{
    pressure_free(mt->pressure);
    mt->pressure = NULL;
    return 0;
}

static int arenas_init(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    return arenas_cache_init(&mt->arenas) ? oom(err, "arenas cache") : 0;
}

static int arenas_destroy(struct memtrim *mt)
{
    arenas_cache_destroy(&mt->arenas);
    return 0;
}

/* glibc's tunables before any thread of ours allocates (the LD_PRELOAD constructor gets
 * here before main); a value glibc refuses fails the start. Nothing to undo. */
static int tunables_start(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    int glibc = strcmp(alloc_name(ctx->alloc), "glibc") == 0;
    if (mt->cfg.malloc_arena_max != MT_CONFIG_AUTO)
        return tunables_apply(NULL, &mt->cfg, glibc, err);
    /* "auto": the container's CPUs, not the host's cores (glibc's 8 per core) */
    struct mt_config *cfg = mt_malloc(sizeof(*cfg));
    struct cpu_quota *q = mt_malloc(sizeof(*q));
    int rc = -ENOMEM;
    if (cfg && q) {
        *cfg = mt->cfg;
        cpu_quota_here(q);
        cfg->malloc_arena_max = glibc ? cpu_quota_arena_max(q) : -1;
        mt_log(MT_LOG_INFO, "tunables", "MallocArenaMax auto: %lld arenas for %.2f CPUs (%s)%s",
               (long long)cpu_quota_arena_max(q), q->cpus, q->source,
               glibc ? "" : "; glibc does not serve malloc here: not applied");
        tunables_set_auto(q->cpus, q->source);
        rc = tunables_apply(NULL, cfg, glibc, err);
    } else {
        *err = mt_strdup("out of memory");
    }
    free(cfg);
    free(q);
    return rc;
}

/* The server's options from the configuration. */
static void server_options_from(const struct mt_config *cfg, struct server_options *o)
{
    memset(o, 0, sizeof(*o));
    snprintf(o->bind, sizeof(o->bind), "%s", cfg->http_bind);
    o->port = cfg->http_port;
    o->threads = cfg->http_threads;
    o->max_connections = cfg->max_connections;
    o->max_connections_per_ip = cfg->max_connections_per_ip;
    o->connection_timeout_seconds = cfg->connection_timeout_seconds;
    snprintf(o->token, sizeof(o->token), "%s", cfg->auth_token);
    snprintf(o->read_token, sizeof(o->read_token), "%s", cfg->read_token);
    o->read_requires_auth = cfg->read_requires_auth;
    o->allow_unauthenticated_remote = cfg->allow_unauthenticated_remote;
    o->request_timeout_seconds = cfg->request_timeout_seconds;
    snprintf(o->tls_cert, sizeof(o->tls_cert), "%s", cfg->https_certificate);
    snprintf(o->tls_key, sizeof(o->tls_key), "%s", cfg->https_private_key);
    snprintf(o->tls_ca, sizeof(o->tls_ca), "%s", cfg->https_client_ca);
    o->socket_mode = (int)strtol(cfg->http_socket_mode, NULL, 8); /* checked by config.c */
    snprintf(o->socket_group, sizeof(o->socket_group), "%s", cfg->http_socket_group);
}

/* Its handlers cope with a store and housekeeper not yet there. */
static int http_start(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    struct server_options opt;
    server_options_from(&mt->cfg, &opt);
    int rc = server_start(&opt, ctx->routes, &mt->store.readers, mt, &mt->server, err);
    if (rc == 0)
        mt->http_port = server_port(mt->server);
    return rc;
}

static int http_stop(struct memtrim *mt)
{
    server_stop(mt->server); /* waits for running handlers */
    mt->server = NULL;
    return 0;
}

static int store_run(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    return store_start(&mt->store, err);
}

/* -ETIMEDOUT: the thread hangs on the disk and still uses the instance (left behind). */
static int store_halt(struct memtrim *mt)
{
    return store_stop(&mt->store) == -ETIMEDOUT;
}

static int exit_summary(struct memtrim *mt)
{
    advice_exit_summary(mt); /* the totals since start, in one line */
    return 0;
}

static void wake_pressure(void *p)
{
    pressure_wake(p);
}

static int hk_run(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    struct housekeeper_deps deps = {
        .config = config_feed(mt),
        .suspend_depth = &mt->suspend_depth,
        .cache = &mt->cache,
        .trims = &mt->trims,
        .arenas = &mt->arenas,
        .store = &mt->store,
        .wake_pressure = wake_pressure,
        .pressure = mt->pressure,
        .record_pid = &mt->record_pid,
    };
    return housekeeper_start(&mt->hk, &deps, err);
}

static int hk_halt(struct memtrim *mt)
{
    housekeeper_stop(&mt->hk);
    return 0;
}

static int pressure_run(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    return pressure_start(mt->pressure, err);
}

/* A member joins on the channel it was handed (the fd is group_join's from here on). A
 * leader's group starts later (mt_group_lead); either stops here, after the store: members
 * see their channel close with the store closed and the port free. */
static int group_run(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    if (!ctx->member_fd) /* no channel: a process alone, which may lead later */
        return 0;
    int fd = *ctx->member_fd;
    *ctx->member_fd = -1; /* group_join's now: it closes it on failure, group_stop after */
    struct group_deps d = mt_group_deps(mt);
    return group_join(&mt->group, &d, fd, ctx->leader_gone, ctx->gone_arg, err);
}

static int group_halt(struct memtrim *mt)
{
    group_stop(&mt->group);
    return 0;
}

/* The stall canary (core/measure/stall.h): a member's too, its trims are its own. */
static int stall_run(struct memtrim *mt, const struct start_ctx *ctx, char **err)
{
    if (stall_init(&mt->stall))
        return oom(err, "stall canary");
    int rc = stall_start(&mt->stall);
    if (rc) {
        stall_destroy(&mt->stall);
        return oom(err, "stall canary thread");
    }
    trim_set_stall(&mt->trims, &mt->stall); /* an HTTP worker's manual trim may run now */
    return 0;
}

static int stall_halt(struct memtrim *mt)
{
    /* Every trimming thread stopped before: the server first, the group, housekeeper and
     * pressure threads in reverse order (they start after this step). */
    trim_set_stall(&mt->trims, NULL);
    stall_stop(&mt->stall);
    stall_destroy(&mt->stall);
    return 0;
}

static int pressure_halt(struct memtrim *mt)
{
    pressure_stop(mt->pressure);
    return 0;
}

/* The one table of steps; each names the kinds of process it runs in (struct role). */
static const struct step steps[] = {
    {"core", cfg_lock_init, cfg_lock_destroy, ROLE_ALL},
    {"housekeeper", hk_init, hk_destroy, ROLE_ALL},
    {"store", store_make, store_unmake, ROLE_ALL},
    {"snapshot", cache_init, cache_destroy, ROLE_ALL},
    {"trim", trims_init, trims_destroy, ROLE_ALL},
    {"pressure", pressure_make, pressure_unmake, ROLE_ALL}, /* reads the cache's cgroup */
    {"arenas", arenas_init, arenas_destroy, ROLE_ALL},
    {"tunables", tunables_start, NULL, ROLE_ALONE}, /* a member's: its leader's, at fork */
    /* the threads (every step runs with all signals blocked) */
    {"server", http_start, http_stop, STEP_FIRST_TO_STOP | ROLE_ALONE},
    {"stall", stall_run, stall_halt, ROLE_ALL}, /* before every thread that trims but the server */
    {"group", group_run, group_halt, ROLE_ALL},
    {"store", store_run, store_halt, ROLE_ALL},
    {"advice", NULL, exit_summary, STEP_AT_DESTROY_ONLY | ROLE_ALONE}, /* the exit summary */
    {"housekeeper", hk_run, hk_halt, ROLE_ALL},
    {"pressure", pressure_run, pressure_halt, ROLE_ALONE}, /* a member's: the group's */
};
#define NSTEPS ((int)(sizeof(steps) / sizeof(steps[0])))

static atomic_int test_fail_step = -1;

int mt_test_fail_start_step(int index)
{
    atomic_store(&test_fail_step, index);
    return NSTEPS;
}

/* Undo the first n steps (see struct step); 1 when a part was left running, and the
 * memory with it. */
static int unwind(struct memtrim *mt, int n, int destroying)
{
    unsigned mine = mt->role->mask;
    for (int i = n - 1; i >= 0; i--)
        if ((steps[i].flags & STEP_FIRST_TO_STOP) && (steps[i].flags & mine))
            steps[i].stop(mt);
    for (int i = n - 1; i >= 0; i--) {
        const struct step *s = &steps[i];
        if (!s->stop || !(s->flags & mine) || (s->flags & STEP_FIRST_TO_STOP) ||
            ((s->flags & STEP_AT_DESTROY_ONLY) && !destroying))
            continue;
        if (s->stop(mt)) {
            mt_log(MT_LOG_WARNING, s->module, "left running (its thread hangs): the instance's "
                                              "memory is left to it");
            return 1;
        }
    }
    free(mt);
    return 0;
}

/* Run every step; on a failure undo what ran. 0, or a negative errno with *err and *module. */
static int run_steps(struct memtrim *mt, const struct start_ctx *ctx, const char **module,
                     char **err)
{
    /* memtrim's threads inherit the caller's signal mask: block every signal while they
     * start (libmicrohttpd's too), so the host's signals only ever reach the host's threads. */
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    int rc = 0, i;
    for (i = 0; i < NSTEPS && rc == 0; i++) {
        if (i == atomic_load(&test_fail_step)) {
            atomic_store(&test_fail_step, -1);
            *err = errdup("start step '%s' failed (a test asked for it)", steps[i].module);
            rc = -ENOMEM;
        } else if (steps[i].start && (steps[i].flags & ctx->role->mask)) {
            rc = steps[i].start(mt, ctx, err);
        }
        if (rc)
            *module = steps[i].module;
    }
    if (rc)
        unwind(mt, i - 1, 0);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    return rc;
}

static int role_level(const struct role *role)
{
    return role->quiet ? MT_LOG_DEBUG : MT_LOG_INFO;
}

static void announce_member(struct memtrim *mt)
{
    mt_log(MT_LOG_DEBUG, "core", "memtrim %s started in pid %ld as a member of a worker group",
           MEMTRIM_VERSION, (long)getpid());
}

static void announce_alone(struct memtrim *mt)
{
    const struct mt_config *cfg = &mt->cfg;
    if (strncmp(cfg->http_bind, "unix:", 5) == 0)
        mt_log(MT_LOG_INFO, "core", "memtrim %s started; API on %s", MEMTRIM_VERSION,
               cfg->http_bind);
    else
        mt_log(MT_LOG_INFO, "core", "memtrim %s started; API on %s://%s:%d/", MEMTRIM_VERSION,
               cfg->https_certificate[0] ? "https" : "http", cfg->http_bind, mt->http_port);
    struct mt_snapshot snap;
    char line[1400];
    mt_snapshot_get_cheap(mt, &snap);
    mt_cgroup_summary(mt, &snap, line, sizeof(line));
    mt_log(MT_LOG_INFO, "cgroup", "%s", line);
}

/* member: a worker group's member's channel and calls (its role), NULL for a process alone. */
static int instance_create(const char *config_json, const struct server_routes *routes,
                           struct start_ctx *member, struct memtrim **out, char **err)
{
    const struct role *role = member ? &role_member : &role_alone;
    struct mt_config cfg;
    struct memtrim *mt;
    const char *module = "core"; /* which part failed, for the log */
    char *e = NULL;
    int rc;

    *out = NULL;
    if (err)
        *err = NULL;
    if ((rc = config_parse(config_json, &cfg, &e)) || (rc = config_read_token_file(&cfg, &e))) {
        module = "config";
        goto fail;
    }
    if (!cfg.enabled) {
        mt_log(MT_LOG_INFO, "core", "disabled by configuration (Enabled: false)");
        if (member)
            close(*member->member_fd);
        return 0;
    }
    if (!role->keeps_store)
        cfg.database[0] = '\0'; /* the leader owns the store */
    mt_fork_hooks_install();
    pthread_mutex_lock(&instance_lock);
    if (instance_running) {
        pthread_mutex_unlock(&instance_lock);
        e = mt_strdup("an instance of memtrim already runs in this process");
        rc = -EBUSY;
        goto fail;
    }
    instance_running = 1;
    pthread_mutex_unlock(&instance_lock);

    /* Resolving the back ends writes their pointers: only while no instance runs. */
    struct start_ctx ctx = {.routes = routes};
    if (member)
        ctx = *member;
    ctx.role = role;
    if ((rc = alloc_select_quiet(cfg.allocator, &ctx.alloc, role->quiet, &e)))
        goto fail_running;
    mt_thread_set_enter(ctx.alloc->thread_enter); /* before any of memtrim's threads */
    if (!(mt = mt_calloc(1, sizeof(*mt)))) {
        rc = oom(&e, "instance");
        goto fail_running;
    }
    mt->cfg = cfg;
    mt->started_ms = mt_now_ms();
    mt->pid = getpid();
    mt->role = role;
    mt_canary_open(); /* before any descriptor of the instance: common/fdid.h */
    if ((rc = run_steps(mt, &ctx, &module, &e))) {
        mt_canary_close();
        goto fail_running;
    }
    if (role->keeps_store) {
        pthread_mutex_lock(&instance_lock);
        instance_held = mt;
        pthread_mutex_unlock(&instance_lock);
    }
    role->announce(mt);
    *out = mt;
    return 0;

fail_running:
    pthread_mutex_lock(&instance_lock);
    instance_running = 0;
    pthread_mutex_unlock(&instance_lock);
fail:
    if (member && *member->member_fd >= 0) /* not yet handed to the group step */
        close(*member->member_fd);
    if (!e)
        e = errdup("start failed: %s", strerror(-rc));
    /* A group member that cannot start costs its host nothing (it runs on without
     * memtrim, its leader serves the group): a warning. A forked child that execs at
     * once is the common case (#31 F13: its member's thread cannot start while exec
     * replaces the process), and must not log at error level. */
    int level = role->fail_level;
    if (!e) { /* out of memory even for the message */
        mt_log(level, module, "start failed: %s", strerror(-rc));
        return rc;
    }
    mt_log(level, module, "%s", e);
    if (err)
        *err = e;
    else
        free(e);
    return rc;
}

int mt_create(const char *config_json, const struct server_routes *routes, struct memtrim **out,
              char **err)
{
    return instance_create(config_json, routes, NULL, out, err);
}

int mt_create_member(const char *config_json, int fd, void (*leader_gone)(void *), void *arg,
                     struct memtrim **out, char **err)
{
    struct start_ctx m = {.member_fd = &fd, .leader_gone = leader_gone, .gone_arg = arg};
    *out = NULL;
    if (fd < 0)
        return -EBADF;
    return instance_create(config_json, NULL, &m, out, err);
}

void mt_destroy(struct memtrim *mt)
{
    if (!mt)
        return;
    int level = role_level(mt->role);
    if (mt->pid != getpid()) {
        /* A forked child holding its parent's instance: those threads are not
         * here, so touching them would hang. Leave the memory; forget it. */
        mt_log(MT_LOG_WARNING, "core", "stop called in a forked child: the parent's instance "
                                       "is left alone");
        return;
    }
    pthread_mutex_lock(&instance_lock); /* no fork holds its store from here on */
    if (instance_held == mt)
        instance_held = NULL;
    pthread_mutex_unlock(&instance_lock);
    /* A part left running (the store's thread on a hung disk) checks the canary when it
     * wakes (its last words, mt_fds_lost): the canary stays open, as the instance's memory
     * does. Closed, its number may be the host's by then (and TSan saw the close race the
     * left thread's fstat). */
    int left = unwind(mt, NSTEPS, 1);
    if (!left || mt_control("suite-canary-left"))
        mt_canary_close();
    pthread_mutex_lock(&instance_lock);
    instance_running = 0;
    pthread_mutex_unlock(&instance_lock);
    mt_log(level, "core", "stopped");
}

