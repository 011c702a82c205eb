/*
 * host_preload.c - starts memtrim inside an unmodified program:
 * LD_PRELOAD=libmemtrim.so MEMTRIM_CONFIG=<file or inline JSON> ./server.
 * Without MEMTRIM_CONFIG it does nothing; a configuration error is printed
 * once and the program runs on without memtrim. Every process of a tree
 * inherits LD_PRELOAD: memtrim starts only in the one Program names (others
 * stay silent), and a process whose ancestor already serves memtrim's port
 * says so once (info) and stays off; another program on the port is an error.
 * What follows a fork (FollowFork, worker groups, named groups: the election,
 * adoption and takeover) is core/group/'s (group_host.h): this file hands it
 * the instance's calls (mt_group_host_calls) and its own, the start of a full
 * instance with api/'s routes and the PortFile.
 *
 * Threads: the constructor runs on the program's main thread before main(),
 * the destructor at exit (return from main, exit(), a handled SIGTERM that
 * ends in exit); memtrim_attach on one of the host's threads. Locks:
 * attach_lock keeps memtrim_attach's start from racing another; the
 * instance and its threads' state are group_host.c's, under its lock. The
 * PortFile state is written by whichever of a start and the room's restart
 * thread started memtrim in this process (the pid it records tells a forked
 * child's inherited copy apart) and read by the destructor after the room
 * joined that thread.
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt_alloc.h"
#include "config.h"
#include "api.h"
#include "core.h"
#include "group_host.h"
#include "proctree.h"
#include "memtrim.h"

#define CONFIG_FILE_MAX (1024 * 1024)

static char *preload_json;           /* the configuration, kept for FollowFork */
static struct mt_config preload_cfg; /* written by a start only */

/* MEMTRIM_CONFIG holds inline JSON (starts with '{') or a file path. */
static char *load_config(const char *value, char **err)
{
    const char *p = value;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    if (*p == '{')
        return mt_strdup(p);
    FILE *f = fopen(value, "re");
    if (!f) {
        char buf[600];
        snprintf(buf, sizeof(buf), "MEMTRIM_CONFIG: cannot read %.500s: %s", value,
                 strerror(errno));
        *err = mt_strdup(buf);
        return NULL;
    }
    char *text = mt_malloc(CONFIG_FILE_MAX + 1);
    size_t n = text ? fread(text, 1, CONFIG_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (!text || n > CONFIG_FILE_MAX) {
        free(text);
        *err = mt_strdup("MEMTRIM_CONFIG: file too large (over 1 MiB) or out of memory");
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* Only when this library was preloaded: a host that dlopens it starts it itself. */
static int preloaded(void)
{
    const char *lp = getenv("LD_PRELOAD");
    return lp && strstr(lp, "libmemtrim") != NULL;
}

/* ---- PortFile -------------------------------------------------------------- */

static char port_file[MT_CONFIG_STR_MAX + 32]; /* the file this process wrote, "" = none */
static pid_t port_file_pid;                    /* ...and the process that wrote it */

/* The PortFile pattern with %p = pid and %% = %; -1 when it does not fit. */
static int port_file_path(const char *pattern, pid_t pid, char *out, size_t size)
{
    size_t n = 0;
    for (const char *p = pattern; *p; p++) {
        char piece[24] = {*p, '\0'};
        if (p[0] == '%' && (p[1] == 'p' || p[1] == '%')) {
            if (*++p == 'p')
                snprintf(piece, sizeof(piece), "%ld", (long)pid);
        }
        size_t len = strlen(piece);
        if (n + len >= size)
            return -1;
        memcpy(out + n, piece, len);
        n += len;
    }
    out[n] = '\0';
    return 0;
}

/* Publish the port memtrim bound (HttpPort 0: the kernel's choice) for scripts. */
static void port_file_write(void *mt)
{
    char path[sizeof(port_file)], tmp[sizeof(port_file) + 32];
    int ok;

    if (!preload_cfg.port_file[0] || !mt)
        return;
    if (port_file_path(preload_cfg.port_file, getpid(), path, sizeof(path)) != 0) {
        mt_log(MT_LOG_WARNING, "preload", "PortFile: the path is too long; no port file");
        return;
    }
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "we");
    ok = f && fprintf(f, "%d\n", mt_http_port(mt)) > 0;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) { /* rename: a reader never sees a half-written file */
        mt_log(MT_LOG_WARNING, "preload", "PortFile %s: cannot write it: %s", path,
               strerror(errno));
        unlink(tmp);
        return;
    }
    snprintf(port_file, sizeof(port_file), "%s", path);
    port_file_pid = getpid();
}

/* At stop: remove the port file when this process wrote it and it still names our port. */
static void port_file_remove(void *mt)
{
    char line[32];
    int port = mt_http_port(mt);

    if (!port_file[0] || port_file_pid != getpid())
        return;
    FILE *f = fopen(port_file, "re");
    if (f && fgets(line, sizeof(line), f) && atoi(line) == port)
        unlink(port_file);
    if (f)
        fclose(f);
    port_file[0] = '\0';
}

/* ---- which process ------------------------------------------------------- */

/* Whether Program names this process; the one debug line when it does not. */
static int program_wanted(const struct mt_config *cfg)
{
    char exe[4096], comm[64];

    if (!cfg->program[0])
        return 1;
    proctree_self(exe, sizeof(exe), comm, sizeof(comm));
    if (proctree_match(cfg->program, exe, comm))
        return 1;
    mt_log(MT_LOG_DEBUG, "preload", "not started in pid %ld (%s, %s): Program does not name it",
           (long)getpid(), comm, exe[0] ? exe : "?");
    return 0;
}

/* ---- what the room is handed ------------------------------------------------ */

/* The full instance, with api/'s routes (the leader's, a restart's). */
static int preload_create(const char *json, void **out, char **err)
{
    struct memtrim *mt = NULL;
    int rc = mt_create(json, &api_routes, &mt, err);
    *out = mt;
    return rc;
}

static struct group_host_ops preload_ops; /* filled by a start (the same calls each time) */

static const struct group_host_ops *host_ops(void)
{
    mt_group_host_calls(&preload_ops);
    preload_ops.create = preload_create;
    preload_ops.serves = port_file_write;
    preload_ops.withdraw = port_file_remove;
    return &preload_ops;
}

/* ---- start and stop ------------------------------------------------------- */

/* Starts memtrim from a configuration (inline JSON or a file path) as the constructor does:
 * 0 (started, or nothing wanted here: *started says which), or a negative errno value with
 * *err set; *logged when mt_create has already logged why. Called by the constructor (the
 * program's only thread) or by memtrim_attach under attach_lock, never both: attach starts
 * nothing once preload_json is set. */
static int preload_begin(const char *value, char **err, int *started, int *logged)
{
    struct memtrim *mt = NULL;
    *started = 0;
    *logged = 0;
    preload_json = load_config(value, err);
    if (preload_json && config_parse(preload_json, &preload_cfg, err) != 0) {
        free(preload_json);
        preload_json = NULL;
    }
    if (!preload_json) {
        if (!*err)
            *err = mt_strdup("unknown error");
        return -EINVAL;
    }
    int wanted = program_wanted(&preload_cfg);
    if (wanted && group_host_named(&preload_cfg)) {
        int rc = group_host_start_named(host_ops(), preload_json, &preload_cfg, err);
        if (rc != 0) { /* nothing runs: leave nothing that says it does (attach) */
            free(preload_json);
            preload_json = NULL;
            return rc;
        }
        *started = 1;
        return 0;
    }
    if (!wanted || (preload_cfg.enabled && group_host_held_by_ancestor(&preload_cfg))) {
        free(preload_json);
        preload_json = NULL;
        return 0;
    }
    /* Any other failure (a port in use, ...) is logged once by mt_create itself. */
    int rc = mt_create(preload_json, &api_routes, &mt, err);
    if (rc == 0 && mt) {
        *started = 1;
        group_host_start(host_ops(), preload_json, &preload_cfg, mt);
    }
    *logged = rc != 0;
    return rc;
}

__attribute__((constructor)) static void preload_init(void)
{
    const char *value = getenv("MEMTRIM_CONFIG");
    char *err = NULL;
    int started, logged;

    if (!value || !*value || !preloaded())
        return;
    if (preload_begin(value, &err, &started, &logged) != 0 && !logged) /* the one line it prints */
        fprintf(stderr, "memtrim: not started: %s\n", err ? err : "unknown error");
    free(err);
}

/* memtrim_attach (memtrim.h): the memtrim command's `load`, on one of the host's threads. */
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;

MEMTRIM_API int memtrim_attach(const char *config_json, char *out, size_t size)
{
    if (!config_json || !out || size < 2)
        return -EINVAL;
    out[0] = '\0';
    pthread_mutex_lock(&attach_lock);
    int running;
    group_host_report(out, size, &running); /* the address, when an instance serves */
    running = running || preload_json != NULL;
    if (running) {
        pthread_mutex_unlock(&attach_lock);
        return -EALREADY;
    }
    char *err = NULL;
    int started, logged;
    int rc = preload_begin(config_json, &err, &started, &logged);
    if (rc != 0) {
        snprintf(out, size, "%s", err ? err : strerror(-rc));
    } else if (!started) {
        snprintf(out, size, "nothing started: Enabled is false, or Program names another program");
        rc = 1;
    } else {
        int threads, served = group_host_report(out, size, &threads);
        if (served != 0)
            snprintf(out, size, "%s", served == -ESRCH ? "a named group: electing" : "no HTTP server");
    }
    free(err);
    pthread_mutex_unlock(&attach_lock);
    return rc;
}

__attribute__((destructor)) static void preload_fini(void)
{
    group_host_stop(); /* its threads, then the instance (the PortFile first) */
}
