/*
 * reload.c - the "memtrim-tls" thread: serves renewed certificate files
 * without a restart (the design is at the top of tls.c). Every
 * TLS_RELOAD_CHECK_NS it compares the files' identity; when one changed and
 * the new set loads (tls.c, server_tls_load), it starts a second daemon on the
 * same listening socket through s->daemon_start (handed by server.c, so this
 * file needs nothing of server.c's), quiesces the old one and stops it once
 * drained.
 *
 * Threads and locks: this thread alone swaps s->daemon and s->pems, under
 * s->tls_lock (which also guards s->draining and s->tls_stop).
 */
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common.h"
#include "internal.h"

#define TLS_RELOAD_CHECK_NS (2 * MT_SEC) /* how often the files are compared */
#define TLS_DRAIN_MAX_NS (60 * MT_SEC)   /* the old daemon's connections may finish this long */

static int tls_id_changed(const char *path, const struct server_file_id *was)
{
    struct stat st;
    struct server_file_id now;
    if (path[0] == '\0')
        return 0;
    if (stat(path, &st) != 0)
        return 1; /* gone (a rename in progress): try to load, which says what is wrong */
    server_file_id_of(&st, &now);
    return memcmp(&now, was, sizeof(now)) != 0;
}

static int64_t tls_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * MT_SEC + ts.tv_nsec;
}

static unsigned tls_connections(struct MHD_Daemon *d)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return i ? i->num_connections : 0;
}

/* Stop the draining daemon once it holds no connection, or past its time. Called unlocked. */
static void tls_drain(struct server *s, int64_t now)
{
    pthread_mutex_lock(&s->tls_lock);
    struct MHD_Daemon *old = s->draining;
    struct server_pems *pems = s->draining_pems;
    int done = old != NULL && (tls_connections(old) == 0 || now >= s->draining_until_ns);
    if (done) {
        s->draining = NULL;
        s->draining_pems = NULL;
    }
    pthread_mutex_unlock(&s->tls_lock);
    if (!done)
        return;
    unsigned left = tls_connections(old);
    MHD_stop_daemon(old); /* quiesced: the listening socket stays open for the new daemon */
    server_pems_free(pems);
    if (left)
        mt_log(MT_LOG_WARNING, "server",
               "the daemon of the previous certificate still held %u connection(s) after %d s; "
               "closed", left, (int)(TLS_DRAIN_MAX_NS / MT_SEC));
}

/* Start a daemon on the new certificate, quiesce the old one. */
static void tls_swap(struct server *s, struct server_pems *p)
{
    struct MHD_Daemon *fresh = s->daemon_start(s, p);
    if (fresh == NULL) {
        mt_log(MT_LOG_ERROR, "server",
               "the renewed certificate loads, but libmicrohttpd would not start with it; the "
               "previous one stays in use");
        server_pems_free(p);
        return;
    }
    pthread_mutex_lock(&s->tls_lock);
    struct MHD_Daemon *old = s->daemon;
    struct server_pems *old_pems = s->pems;
    __atomic_store_n(&s->daemon, fresh, __ATOMIC_RELEASE);
    __atomic_store_n(&s->tls_gen, p->dctx.gen, __ATOMIC_RELEASE); /* the old one's now drain */
    s->pems = p;
    /* One drain at a time: a second renewal within the drain stops the older one now. */
    struct MHD_Daemon *older = s->draining;
    struct server_pems *older_pems = s->draining_pems;
    s->draining = old;
    s->draining_pems = old_pems;
    s->draining_until_ns = tls_now() + TLS_DRAIN_MAX_NS;
    MHD_quiesce_daemon(old); /* accepts no more; the socket stays open for the new daemon */
    pthread_mutex_unlock(&s->tls_lock);
    if (older) {
        MHD_stop_daemon(older);
        server_pems_free(older_pems);
    }
    __atomic_add_fetch(&s->tls_reloads, 1, __ATOMIC_RELAXED);
    mt_log(MT_LOG_INFO, "server",
           "HttpsCertificate '%s' renewed: new connections get it; open ones finish on the "
           "previous one", s->opt.tls_cert);
}

static void tls_check(struct server *s)
{
    const struct server_pems *cur = s->pems; /* only this thread swaps it */
    if (!tls_id_changed(s->opt.tls_cert, &cur->id[0]) &&
        !tls_id_changed(s->opt.tls_key, &cur->id[1]) &&
        !tls_id_changed(s->opt.tls_ca, &cur->id[2]))
        return;
    struct server_pems *p = NULL;
    char *err = NULL;
    int rc = server_tls_load(&s->opt, &p, &err);
    if (rc != 0) {
        /* Half-written files fail until the writer is done: log each reason once. */
        if (err && strcmp(err, s->tls_last_error) != 0) {
            mt_log(MT_LOG_WARNING, "server",
                   "the certificate files changed but cannot be used, the previous certificate "
                   "stays in use: %s", err);
            snprintf(s->tls_last_error, sizeof(s->tls_last_error), "%s", err);
        }
        free(err);
        return;
    }
    s->tls_last_error[0] = '\0';
    tls_swap(s, p);
}

static void *tls_main(void *arg)
{
    struct server *s = arg;
    pthread_mutex_lock(&s->tls_lock);
    while (!s->tls_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t at = (int64_t)ts.tv_sec * MT_SEC + ts.tv_nsec + TLS_RELOAD_CHECK_NS;
        ts.tv_sec = (time_t)(at / MT_SEC);
        ts.tv_nsec = (long)(at % MT_SEC);
        pthread_cond_timedwait(&s->tls_cond, &s->tls_lock, &ts);
        if (s->tls_stop)
            break;
        pthread_mutex_unlock(&s->tls_lock);
        tls_drain(s, tls_now());
        tls_check(s);
        pthread_mutex_lock(&s->tls_lock);
    }
    pthread_mutex_unlock(&s->tls_lock);
    return NULL;
}

int server_tls_reload_start(struct server *s)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&s->tls_cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        return -rc;
    s->tls_cond_init = 1;
    rc = mt_thread_start(&s->tls_thread, "memtrim-tls", tls_main, s);
    if (rc != 0)
        return -rc;
    s->tls_started = 1;
    return 0;
}

void server_tls_reload_stop(struct server *s)
{
    if (s->tls_started) {
        pthread_mutex_lock(&s->tls_lock);
        s->tls_stop = 1;
        pthread_cond_signal(&s->tls_cond);
        pthread_mutex_unlock(&s->tls_lock);
        pthread_join(s->tls_thread, NULL);
        s->tls_started = 0;
    }
    if (s->tls_cond_init) {
        pthread_cond_destroy(&s->tls_cond);
        s->tls_cond_init = 0;
    }
    if (s->draining) {
        MHD_stop_daemon(s->draining);
        s->draining = NULL;
    }
    server_pems_free(s->draining_pems);
    s->draining_pems = NULL;
}
