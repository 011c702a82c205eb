/*
 * memtrim.c - the instance's life: start in order (configuration, cache, trim
 * service, HTTP server, store, housekeeper, pressure thread), stop in
 * reverse; what it offers while it runs is in instance.c. At most one
 * instance runs per process (malloc_trim is process-wide), guarded by
 * `instance_lock`, the one global besides the log sink.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "core.h"
#include "memtrim.h"
#include "instance.h"
#include "pressure.h"
#include "server.h"
#include "tunables.h"


static pthread_mutex_t instance_lock = PTHREAD_MUTEX_INITIALIZER;
static int instance_running;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/*
 * fork(): the child has none of the instance's threads. Keep the global
 * locks consistent across the fork and let the child start an instance of
 * its own; the parent's instance is left alone there (see mt_destroy).
 */
static void fork_prepare(void)
{
    pthread_mutex_lock(&instance_lock);
    mt_log_fork_prepare();
}

static void fork_parent(void)
{
    mt_log_fork_parent();
    pthread_mutex_unlock(&instance_lock);
}

static void fork_child(void)
{
    mt_log_fork_child();
    instance_running = 0;
    pthread_mutex_unlock(&instance_lock);
}

static void fork_hooks_install(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
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
    return strdup(buf);
}

/* The instance's own parts and locks, then the memory. */
static void instance_free_parts(struct memtrim *mt)
{
    store_destroy(&mt->store);
    housekeeper_destroy(&mt->hk);
    pthread_mutex_destroy(&mt->cfg_lock);
    free(mt);
}

static void instance_free(struct memtrim *mt)
{
    pressure_free(mt);
    arenas_cache_destroy(&mt->arenas);
    trim_service_destroy(&mt->trims);
    snapshot_destroy(&mt->cache);
    instance_free_parts(mt);
}

/* The trim service's sinks: every result and re-fault figure go to the store thread's queue. */
static void instance_trim_done(void *arg, const struct mt_trim_result *r)
{
    store_push_trim(arg, r);
}

static void instance_refault_done(void *arg, const struct mt_refault *rf)
{
    store_push_refault(arg, rf);
}

static struct memtrim *instance_alloc(const struct mt_config *cfg)
{
    struct memtrim *mt = calloc(1, sizeof(*mt));
    if (!mt)
        return NULL;
    mt->cfg = *cfg;
    mt->http_port = -1;
    pthread_mutex_init(&mt->cfg_lock, NULL);
    housekeeper_init(&mt->hk);
    if (store_init(&mt->store, cfg->database, cfg->retention_hours)) {
        instance_free_parts(mt);
        return NULL;
    }
    int cache_ok = snapshot_init(&mt->cache) == 0;
    int trims_ok = cache_ok && trim_service_init(&mt->trims) == 0;
    if (!trims_ok || pressure_create(mt)) {
        if (trims_ok)
            trim_service_destroy(&mt->trims);
        if (cache_ok)
            snapshot_destroy(&mt->cache);
        instance_free_parts(mt);
        return NULL;
    }
    if (arenas_cache_init(&mt->arenas)) {
        trim_service_destroy(&mt->trims);
        snapshot_destroy(&mt->cache);
        instance_free_parts(mt);
        return NULL;
    }
    mt->trims.sink = instance_trim_done;
    mt->trims.refault_sink = instance_refault_done;
    mt->trims.sink_arg = &mt->store;
    mt->store.trims = &mt->trims;
    atomic_init(&mt->suspend_depth, 0);
    return mt;
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

int mt_create(const char *config_json, const struct server_routes *routes, struct memtrim **out,
              char **err)
{
    struct mt_config cfg;
    struct server_options opt;
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
        return 0;
    }
    pthread_once(&fork_once, fork_hooks_install);
    pthread_mutex_lock(&instance_lock);
    if (instance_running) {
        pthread_mutex_unlock(&instance_lock);
        e = strdup("an instance of memtrim already runs in this process");
        rc = -EBUSY;
        goto fail;
    }
    instance_running = 1;
    pthread_mutex_unlock(&instance_lock);

    /* Resolving the back ends writes their pointers: only while no instance runs. */
    const struct alloc_ops *alloc;
    if ((rc = alloc_select(cfg.allocator, &alloc, &e)))
        goto fail_running;

    if (!(mt = instance_alloc(&cfg))) {
        e = strdup("out of memory");
        rc = -ENOMEM;
        goto fail_running;
    }
    mt->started_ms = mt_now_ms();
    mt->pid = getpid();
    snapshot_set_alloc(&mt->cache, alloc); /* before any thread reads the cache */
    mt_log(MT_LOG_INFO, "alloc", "allocator: %s %s (releases with %s)", alloc->name,
           mt->cache.alloc_version[0] ? mt->cache.alloc_version : "(version unknown)",
           alloc->release_call);
    /* glibc's tunables before any thread of ours allocates (the LD_PRELOAD
     * constructor gets here before main); a value glibc refuses fails the start. */
    if ((rc = tunables_apply(NULL, &cfg, strcmp(alloc->name, "glibc") == 0, &e)) != 0)
        goto fail_free;
    /* memtrim's threads inherit the caller's signal mask: block every signal
     * while they start (libmicrohttpd's too), so the host's signals only ever
     * reach the host's threads. */
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    /* The server first: a port in use, the likeliest failure, then leaves no
     * thread to undo. Its handlers cope with a store and housekeeper not yet there. */
    int left_behind = 0;
    server_options_from(&cfg, &opt);
    rc = server_start(&opt, routes, &mt->store.readers, mt, &mt->server, &e);
    if (rc)
        module = "server";
    if (rc == 0 && (rc = store_start(&mt->store, &e)) != 0) {
        module = "store";
        server_stop(mt->server);
    }
    if (rc == 0 && (rc = housekeeper_start(mt, &e)) != 0) {
        module = "housekeeper";
        server_stop(mt->server);
        left_behind = store_stop(&mt->store) == -ETIMEDOUT;
    }
    if (rc == 0 && (rc = pressure_start(mt, &e)) != 0) {
        module = "pressure";
        server_stop(mt->server);
        housekeeper_stop(&mt->hk);
        left_behind = store_stop(&mt->store) == -ETIMEDOUT;
    }
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (rc && left_behind)
        goto fail_running; /* a hung store thread still uses the instance: leave it */
    if (rc)
        goto fail_free;
    mt->http_port = server_port(mt->server);
    if (strncmp(cfg.http_bind, "unix:", 5) == 0)
        mt_log(MT_LOG_INFO, "core", "memtrim %s started; API on %s", MEMTRIM_VERSION,
               cfg.http_bind);
    else
        mt_log(MT_LOG_INFO, "core", "memtrim %s started; API on %s://%s:%d/", MEMTRIM_VERSION,
               cfg.https_certificate[0] ? "https" : "http", cfg.http_bind, mt->http_port);
    *out = mt;
    return 0;

fail_free:
    instance_free(mt);
fail_running:
    pthread_mutex_lock(&instance_lock);
    instance_running = 0;
    pthread_mutex_unlock(&instance_lock);
fail:
    if (!e)
        e = errdup("start failed: %s", strerror(-rc));
    if (!e) { /* out of memory even for the message */
        mt_log(MT_LOG_ERROR, module, "start failed: %s", strerror(-rc));
        return rc;
    }
    mt_log(MT_LOG_ERROR, module, "%s", e);
    if (err)
        *err = e;
    else
        free(e);
    return rc;
}

void mt_destroy(struct memtrim *mt)
{
    if (!mt)
        return;
    if (mt->pid != getpid()) {
        /* A forked child holding its parent's instance: those threads are not
         * here, so touching them would hang. Leave the memory; forget it. */
        mt_log(MT_LOG_WARNING, "core", "stop called in a forked child: the parent's instance "
                                       "is left alone");
        return;
    }
    server_stop(mt->server);
    mt->server = NULL;
    pressure_stop(mt);
    housekeeper_stop(&mt->hk);
    advice_exit_summary(mt); /* the totals since start, in one line */
    if (store_stop(&mt->store) == -ETIMEDOUT) {
        /* Its thread still uses the instance: leave the memory to it. */
        mt_log(MT_LOG_WARNING, "core", "stopped, leaving the hung store thread behind");
    } else {
        instance_free(mt);
    }
    pthread_mutex_lock(&instance_lock);
    instance_running = 0;
    pthread_mutex_unlock(&instance_lock);
    mt_log(MT_LOG_INFO, "core", "stopped");
}

