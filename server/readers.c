/*
 * readers.c - read connections to the store for the HTTP workers: a small
 * pool, so that each worker reuses a connection instead of opening one per
 * request (SQLite connections are used by one thread at a time: a reader is
 * taken out of the pool for the request and put back). What a reader is, and
 * whether the store can be read now, the server learns only through the
 * struct server_store it was given (server.h). Runs on HTTP worker threads;
 * the pool's mutex is held only to push or pop. The pool is emptied by
 * server_stop after the daemon's threads are gone.
 */
#include "http.h"
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void server_readers_init(struct server_readers *p)
{
    pthread_mutex_init(&p->lock, NULL);
    p->nidle = 0;
}

void server_readers_free(struct server_readers *p, const struct server_store *store)
{
    for (int i = 0; i < p->nidle; i++)
        store->close(p->idle[i]);
    p->nidle = 0;
    pthread_mutex_destroy(&p->lock);
}

/* The store opening the reader this thread holds belongs to (get and put run on
 * the same thread, one request at a time). */
static __thread uint64_t reader_generation;

int server_reader_get(const struct server_request *req, void **out, struct server_reply *rep)
{
    const struct server_store *store = req->store;
    struct server *s = req->srv;
    uint64_t generation = 0;
    char why[256] = "";
    int state = store ? store->state(store->ctx, &generation, why, sizeof(why)) : -ENODEV;
    if (state == -ENODEV) {
        server_reply_error(rep, 503, "store_disabled",
                           "no store is configured (\"Database\" is empty), so no history is kept");
        return -ENODEV;
    }
    if (state != 0) {
        server_reply_error(rep, 503, "store_unavailable", "the store is %s", why);
        server_reply_header(rep, "Retry-After", "1");
        return -EAGAIN;
    }
    void *r = NULL, *stale[SERVER_READERS_MAX];
    int nstale = 0;
    reader_generation = generation; /* read before opening: a reopen after it makes it old */
    if (s != NULL) {
        pthread_mutex_lock(&s->readers.lock);
        if (s->readers.generation != generation) {
            /* The store was opened again (perhaps a new file): old readers go. */
            nstale = s->readers.nidle;
            memcpy(stale, s->readers.idle, (size_t)nstale * sizeof(*stale));
            s->readers.nidle = 0;
            s->readers.generation = generation;
        }
        if (s->readers.nidle > 0)
            r = s->readers.idle[--s->readers.nidle];
        pthread_mutex_unlock(&s->readers.lock);
        for (int i = 0; i < nstale; i++)
            store->close(stale[i]);
    }
    if (r == NULL) {
        char *err = NULL;
        int rc = store->open(store->ctx, &r, &err);
        if (rc != 0) {
            server_reply_error(rep, 503, "store_unavailable",
                               "cannot open the store for reading: %s",
                               err ? err : "unknown error");
            server_reply_header(rep, "Retry-After", "1");
            free(err);
            return rc < 0 ? rc : -EIO;
        }
    }
    *out = r;
    return 0;
}

void server_reader_put(const struct server_request *req, void *r, int broken)
{
    const struct server_store *store = req->store;
    struct server *s = req->srv;
    uint64_t generation = 0;
    char why[8];
    if (r == NULL || store == NULL)
        return;
    if (s != NULL && !broken) {
        store->state(store->ctx, &generation, why, sizeof(why));
        pthread_mutex_lock(&s->readers.lock);
        if (reader_generation == generation && s->readers.generation == generation &&
            s->readers.nidle < SERVER_READERS_MAX) {
            s->readers.idle[s->readers.nidle++] = r;
            r = NULL;
        }
        pthread_mutex_unlock(&s->readers.lock);
    }
    store->close(r);
}
