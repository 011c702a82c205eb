/*
 * store.c - DESIGN. The store thread owns the SQLite writer. It wakes every
 * 250 ms (unit tests alone shorten it, and the first retry, with
 * store_test_tick), or at once when woken (a trim result, a stop), takes what waits in
 * its one queue (trim results and their re-fault figures from the trim
 * service, samples from the housekeeper), writes them in one transaction, applies retention in small
 * batches, and reports the store's health. It runs apart from the
 * housekeeper so that a slow or hung disk never delays a pressure trim; if
 * it hangs at stop, the stop gives up waiting after STORE_JOIN_NS and the
 * instance is left to it. Locks: see store.h.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mt_alloc.h"
#include "db.h"
#include "fdid.h"
#include "store.h"

#define STORE_TICK_NS (250 * MT_MS)
#define STORE_JOIN_NS (2 * MT_SEC)
#define RETENTION_EVERY_NS (60 * MT_SEC)
#define RETENTION_BATCH 2000
#define DB_RETRY_MIN_NS (1 * MT_SEC)
#define DB_RETRY_MAX_NS (60 * MT_SEC)
#define FILE_CHECK_EVERY_NS (2 * MT_SEC) /* is the file opened still the one at the path? */
#define STORE_BATCH 64

/* The store thread's own state (no lock: only it touches this). */
struct store_state {
    struct db_writer *db;
    int64_t retry_at, retry_delay, next_retention, next_file_check;
    char error[256]; /* the last failure, "" when healthy */
    int have_file;     /* dev/ino: the file this store opened (or created) last */
    uint64_t dev, ino;
    int replaced;      /* another file took its place: the store stopped for good */
};

static void set_health(struct store *st, const char *state, const char *reason)
{
    pthread_mutex_lock(&st->health_lock);
    snprintf(st->state, sizeof(st->state), "%s", state);
    snprintf(st->reason, sizeof(st->reason), "%s", reason ? reason : "");
    pthread_mutex_unlock(&st->health_lock);
}

/*
 * A failure: report it, back off, and keep going without the store. After a
 * failed write the writer has rolled its batch back and stays usable, so it
 * is kept when the cause is passing (locked, disk full); otherwise it is
 * closed and reopened after the back-off.
 */
static void store_failed(struct store *st, struct store_state *ss, int64_t now,
                         const char *what, int rc, char *err)
{
    char reason[256];
    snprintf(reason, sizeof(reason), "database %s: %s", what, err ? err : "unknown error");
    free(err);
    if (strcmp(reason, ss->error) != 0)
        mt_log(MT_LOG_ERROR, "store", "%s; trims go on, the store retries", reason);
    snprintf(ss->error, sizeof(ss->error), "%s", reason);
    pthread_mutex_lock(&st->lock);
    st->errors++;
    int64_t retry_min = st->test_retry_min_ns > 0 ? st->test_retry_min_ns : DB_RETRY_MIN_NS;
    pthread_mutex_unlock(&st->lock);
    atomic_store(&st->available, 0);
    set_health(st, "retrying", reason);
    if (rc != -EBUSY && rc != -ENOSPC) {
        db_writer_close(ss->db);
        ss->db = NULL;
    }
    ss->retry_delay = ss->retry_delay ? ss->retry_delay * 2 : retry_min;
    if (ss->retry_delay > DB_RETRY_MAX_NS)
        ss->retry_delay = DB_RETRY_MAX_NS;
    ss->retry_at = now + ss->retry_delay;
}

static void store_recovered(struct store *st, struct store_state *ss)
{
    if (ss->error[0])
        mt_log(MT_LOG_INFO, "store", "database %s is available again", st->path);
    ss->error[0] = '\0';
    ss->retry_delay = 0;
    atomic_store(&st->available, 1);
    set_health(st, "ok", "");
}

static unsigned store_queued(struct store *st)
{
    pthread_mutex_lock(&st->lock);
    unsigned n = st->qcount;
    pthread_mutex_unlock(&st->lock);
    return n;
}

static char *strdup_printf_replaced(const char *path)
{
    char buf[400];
    snprintf(buf, sizeof(buf), "%.100s was replaced by another file while closed after a "
             "failure: not opened, left alone; restart to use it", path);
    return mt_strdup(buf);
}

/* Move up to max queued items, oldest first, into buf. */
static unsigned take(struct store *st, struct store_item *buf, unsigned max)
{
    unsigned n = 0;
    pthread_mutex_lock(&st->lock);
    while (n < max && st->qcount > 0) {
        buf[n] = st->queue[st->qhead];
        if (buf[n].kind == STORE_SAMPLE)
            st->qsamples--;
        st->qhead = (st->qhead + 1) % STORE_QUEUE_LEN;
        st->qcount--;
        n++;
    }
    pthread_mutex_unlock(&st->lock);
    return n;
}

/*
 * Another file is at the path (a backup moved into place, anything else): the
 * store stops writing for good and never opens it. The writer is abandoned so
 * that closing it touches no file at the path (db_writer_abandon), the
 * readers' pool is renewed (its connections may be to either file), what is
 * queued and what comes later is dropped and counted. /healthz: "replaced".
 */
static void store_replaced(struct store *st, struct store_state *ss, char *err)
{
    char reason[256];
    snprintf(reason, sizeof(reason), "database %.240s",
             err ? err : "was replaced by another file while open");
    free(err);
    db_writer_abandon(ss->db);
    ss->db = NULL;
    ss->replaced = 1;
    atomic_store(&st->available, 0);
    atomic_fetch_add(&st->generation, 1);
    set_health(st, "replaced", reason);
    mt_log(MT_LOG_ERROR, "store", "%s", reason);
    pthread_mutex_lock(&st->lock);
    st->errors++;
    pthread_mutex_unlock(&st->lock);
}

/* Once replaced, what is queued is dropped (counted as give_back counts it). */
static void store_drop_queued(struct store *st, struct store_item *batch)
{
    unsigned n;
    while ((n = take(st, batch, STORE_BATCH)) > 0) {
        pthread_mutex_lock(&st->lock);
        for (unsigned i = 0; i < n; i++) {
            if (batch[i].kind == STORE_SAMPLE)
                st->samples_dropped++;
            else
                st->trims_dropped++;
        }
        pthread_mutex_unlock(&st->lock);
    }
}

/*
 * The host closed memtrim's descriptors in this process (the canary, common/fdid.h):
 * SQLite's numbers may be the host's files now. The writer is forgotten without one
 * SQLite call, the store never opens again, the readers' pool is renewed (readers_close
 * forgets them too), what is queued and what comes later is dropped and counted.
 * /healthz: "lost".
 */
static void store_lost(struct store *st, struct store_state *ss)
{
    db_writer_forget(ss->db);
    ss->db = NULL;
    ss->replaced = 1; /* never reopened, as a replaced file */
    atomic_store(&st->available, 0);
    atomic_fetch_add(&st->generation, 1);
    set_health(st, "lost", "the host closed memtrim's descriptors (closefrom?): the store is "
                           "left as it was, never written or closed");
    pthread_mutex_lock(&st->lock);
    st->errors++;
    pthread_mutex_unlock(&st->lock);
}

static int store_open(struct store *st, struct store_state *ss, int64_t now)
{
    char *err = NULL;
    if (!ss->replaced && mt_fds_lost())
        store_lost(st, ss);
    if (ss->replaced)
        return -ESTALE;
    if (now < ss->retry_at)
        return -EAGAIN;
    if (ss->db)
        return 0; /* open, or kept open through a passing failure: try again */
    /* Reopening after a failure: only the file this store had, or a new one where none is. */
    if (ss->have_file && db_path_is_file(st->path, ss->dev, ss->ino) == -ESTALE) {
        store_replaced(st, ss, strdup_printf_replaced(st->path));
        return -ESTALE;
    }
    int rc = db_writer_open(st->path, &ss->db, &err);
    if (rc) {
        ss->db = NULL;
        store_failed(st, ss, now, "cannot be opened", rc, err);
        return rc;
    }
    ss->have_file = db_writer_file_id(ss->db, &ss->dev, &ss->ino);
    int64_t max_id = 0;
    if (st->trims && db_writer_max_trim_id(ss->db, &max_id, &err) == 0)
        trim_ids_above(st->trims, max_id); /* ids stay unique even if the clock went back */
    else
        free(err);
    atomic_fetch_add(&st->generation, 1);
    store_recovered(st, ss);
    return 0;
}

/* Nothing was committed: trims go back to the head of the queue (what does not
 * fit is counted as dropped); samples are what we can afford to lose: counted. */
static void give_back(struct store *st, const struct store_item *buf, unsigned n)
{
    pthread_mutex_lock(&st->lock);
    for (unsigned i = n; i-- > 0;) { /* backwards: the oldest ends up first */
        if (buf[i].kind == STORE_SAMPLE) {
            st->samples_dropped++;
        } else if (st->qcount >= STORE_QUEUE_LEN) { /* a trim or a re-fault figure */
            st->trims_dropped++;
        } else {
            st->qhead = (st->qhead + STORE_QUEUE_LEN - 1) % STORE_QUEUE_LEN;
            st->queue[st->qhead] = buf[i];
            st->qcount++;
        }
    }
    pthread_mutex_unlock(&st->lock);
}

/* Write what is queued in one transaction; retention now and then (not when
 * `last`: the final write at stop must be short). */
static void store_tick(struct store *st, struct store_state *ss, struct store_item *batch,
                       int64_t now, int last)
{
    unsigned n, i, nsamples = 0;
    char *err = NULL;
    int rc = 0;

    if (store_open(st, ss, now)) {
        if (ss->replaced)
            store_drop_queued(st, batch);
        return;
    }
    if (now >= ss->next_file_check || store_queued(st)) {
        /* Before every batch: deleted under us, writes would go to an inode nobody can
         * read (reopen: a new file); replaced, they would go through a WAL file that the
         * new file at the path would read as its own (stop). */
        ss->next_file_check = now + FILE_CHECK_EVERY_NS;
        if ((rc = db_writer_check_file(ss->db, &err)) == -ESTALE) {
            store_replaced(st, ss, err);
            store_drop_queued(st, batch);
            return;
        }
        if (rc != 0) {
            store_failed(st, ss, now, "file is gone", rc, err); /* closes; reopens at the path */
            return;
        }
    }
    do {
        n = take(st, batch, STORE_BATCH);
        for (i = 0; i < n && rc == 0; i++) {
            if (batch[i].kind == STORE_TRIM) {
                rc = db_writer_add_trim(ss->db, &batch[i].u.trim, &err);
            } else if (batch[i].kind == STORE_REFAULT) {
                /* Queued after its trim, so written after it (or it was stored before). */
                rc = db_writer_set_refault(ss->db, &batch[i].u.refault, &err);
            } else {
                rc = db_writer_add_sample(ss->db, &batch[i].u.sample, &err);
                nsamples++;
            }
        }
        if (rc == 0)
            rc = db_writer_flush(ss->db, &err);
        if (rc) {
            give_back(st, batch, n);
            store_failed(st, ss, now, "write failed", rc, err);
            return;
        }
        pthread_mutex_lock(&st->lock);
        st->samples_stored += nsamples;
        pthread_mutex_unlock(&st->lock);
        nsamples = 0;
    } while (n == STORE_BATCH);
    if (ss->error[0])
        store_recovered(st, ss);
    if (!last && now >= ss->next_retention) {
        int64_t deleted = 0;
        int64_t cutoff = mt_now_ms() - (int64_t)atomic_load(&st->retention_ms);
        rc = db_writer_retention(ss->db, cutoff, RETENTION_BATCH, &deleted, &err);
        if (rc)
            store_failed(st, ss, now, "retention failed", rc, err);
        /* More to delete: come back next tick rather than hold the writer. */
        ss->next_retention = deleted >= RETENTION_BATCH ? now : now + RETENTION_EVERY_NS;
    }
}

static void *store_main(void *arg)
{
    struct store *st = arg;
    struct store_state ss;
    struct store_item *batch = st->batch; /* store_init made it */

    memset(&ss, 0, sizeof(ss));
    pthread_mutex_lock(&st->lock);
    while (!st->stop) {
        pthread_mutex_unlock(&st->lock);
        pthread_mutex_lock(&st->tick_lock);
        store_tick(st, &ss, batch, mt_mono_ns(), 0);
        pthread_mutex_unlock(&st->tick_lock);
        pthread_mutex_lock(&st->lock);
        if (st->stop)
            break;
        struct timespec deadline;
        mt_deadline(&deadline, st->test_tick_ns > 0 ? st->test_tick_ns : STORE_TICK_NS);
        if (!st->kicked)
            pthread_cond_timedwait(&st->cond, &st->lock, &deadline);
        st->kicked = 0;
    }
    pthread_mutex_unlock(&st->lock);

    /* Last words: what is queued goes to the store (one last try even while
     * backing off); then close it. */
    ss.retry_at = 0;
    pthread_mutex_lock(&st->tick_lock);
    store_tick(st, &ss, batch, mt_mono_ns(), 1);
    if (mt_fds_lost())
        db_writer_forget(ss.db); /* lost after the last tick: not one SQLite call */
    else
        db_writer_close(ss.db);
    pthread_mutex_unlock(&st->tick_lock);
    atomic_store(&st->available, 0);
    pthread_mutex_lock(&st->lock);
    st->done = 1;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

/* ---- the HTTP server's way to the store (struct server_store) ------------ */

static int readers_state(void *ctx, uint64_t *generation, char *why, size_t why_size)
{
    struct store *st = ctx;
    *generation = atomic_load(&st->generation);
    if (!st->path[0])
        return -ENODEV;
    if (atomic_load(&st->available) && !mt_fds_lost())
        return 0;
    pthread_mutex_lock(&st->health_lock);
    snprintf(why, why_size, "%s%s%s", st->state, st->reason[0] ? ": " : "", st->reason);
    pthread_mutex_unlock(&st->health_lock);
    return -EAGAIN;
}

static int readers_open(void *ctx, void **reader, char **err)
{
    struct store *st = ctx;
    struct db_reader *r = NULL;
    if (mt_fds_lost()) {
        *reader = NULL;
        *err = mt_strdup("the host closed memtrim's descriptors: the store is not read");
        return -EBADF;
    }
    int rc = db_reader_open(st->path, &r, err);
    *reader = r;
    return rc;
}

static void readers_close(void *reader)
{
    if (mt_fds_lost())
        db_reader_forget(reader); /* its descriptors' numbers are the host's now */
    else
        db_reader_close(reader);
}

/* ---- lifecycle ------------------------------------------------------------ */

int store_init(struct store *st, const char *database, double retention_hours)
{
    pthread_condattr_t attr;

    memset(st, 0, sizeof(*st));
    /* ":memory:" becomes a shared-cache URI private to this store, so that
     * the HTTP workers' readers see the store thread's writes. */
    if (strcmp(database, ":memory:") == 0)
        db_memory_uri(st->path, sizeof(st->path), st);
    else
        snprintf(st->path, sizeof(st->path), "%s", database);
    /* The store thread's batch too: out of memory fails the start, rather than a store
     * thread that could never write. */
    if (st->path[0] && (!(st->queue = mt_calloc(STORE_QUEUE_LEN, sizeof(*st->queue))) ||
                        !(st->batch = mt_calloc(STORE_BATCH, sizeof(*st->batch))))) {
        free(st->queue);
        st->queue = NULL;
        return -ENOMEM;
    }
    pthread_mutex_init(&st->lock, NULL);
    pthread_mutex_init(&st->health_lock, NULL);
    pthread_mutex_init(&st->tick_lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cond, &attr);
    pthread_condattr_destroy(&attr);
    atomic_init(&st->available, 0);
    atomic_init(&st->generation, 0);
    atomic_init(&st->retention_ms, 0);
    store_set_retention(st, retention_hours);
    set_health(st, st->path[0] ? "opening" : "disabled", "");
    st->readers = (struct server_store){
        .ctx = st, .state = readers_state, .open = readers_open, .close = readers_close};
    return 0;
}

void store_destroy(struct store *st)
{
    pthread_cond_destroy(&st->cond);
    pthread_mutex_destroy(&st->lock);
    pthread_mutex_destroy(&st->health_lock);
    pthread_mutex_destroy(&st->tick_lock);
    free(st->queue);
    free(st->batch);
    st->queue = NULL;
    st->batch = NULL;
}

int store_start(struct store *st, char **err)
{
    if (!st->path[0])
        return 0;
    int rc = mt_thread_start(&st->thread, "memtrim-store", store_main, st);
    if (rc) {
        *err = mt_strdup("cannot start the store thread");
        return -rc;
    }
    st->started = 1;
    return 0;
}

int store_enabled(const struct store *st)
{
    return st->path[0] != '\0';
}

void store_set_retention(struct store *st, double hours)
{
    atomic_store(&st->retention_ms, (int_fast64_t)(hours * 3600.0 * 1000.0));
}

void store_push_trim(struct store *st, const struct mt_trim_result *r)
{
    if (!st->queue)
        return;
    pthread_mutex_lock(&st->lock);
    if (st->qcount < STORE_QUEUE_LEN) {
        struct store_item *it = &st->queue[(st->qhead + st->qcount) % STORE_QUEUE_LEN];
        it->kind = STORE_TRIM;
        it->u.trim = *r;
        st->qcount++;
    } else {
        st->trims_dropped++;
    }
    pthread_mutex_unlock(&st->lock);
}

void store_push_refault(struct store *st, const struct mt_refault *rf)
{
    if (!st->queue)
        return;
    pthread_mutex_lock(&st->lock);
    if (st->qcount < STORE_QUEUE_LEN) {
        struct store_item *it = &st->queue[(st->qhead + st->qcount) % STORE_QUEUE_LEN];
        it->kind = STORE_REFAULT;
        it->u.refault = *rf;
        st->qcount++;
    } else {
        st->trims_dropped++; /* its trim's refaulted_bytes stays unknown */
    }
    pthread_mutex_unlock(&st->lock);
}

void store_fork_prepare(struct store *st)
{
    /* A tick takes milliseconds; a hung disk must not hang the host's fork(): 1 s at most. */
    struct timespec deadline;
    st->fork_held = 0;
    if (!st->path[0] || clock_gettime(CLOCK_REALTIME, &deadline) != 0)
        return;
    deadline.tv_sec += 1;
    st->fork_held = pthread_mutex_timedlock(&st->tick_lock, &deadline) == 0;
}

void store_fork_after(struct store *st)
{
    if (st->fork_held)
        pthread_mutex_unlock(&st->tick_lock);
    st->fork_held = 0;
}

void store_push_sample(struct store *st, const struct mt_snapshot *s)
{
    if (!st->started)
        return;
    pthread_mutex_lock(&st->lock);
    if (st->qsamples < STORE_QUEUE_SAMPLES && st->qcount < STORE_QUEUE_LEN) {
        struct store_item *it = &st->queue[(st->qhead + st->qcount) % STORE_QUEUE_LEN];
        it->kind = STORE_SAMPLE;
        it->u.sample = *s;
        st->qcount++;
        st->qsamples++;
    } else {
        st->samples_dropped++; /* the store is stuck or slow: samples are the thing to lose */
    }
    pthread_mutex_unlock(&st->lock);
}

void store_wake(struct store *st)
{
    pthread_mutex_lock(&st->lock);
    st->kicked = 1;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
}

void store_health(struct store *st, char *state, size_t state_size, char *reason,
                  size_t reason_size)
{
    pthread_mutex_lock(&st->health_lock);
    snprintf(state, state_size, "%s", st->state);
    snprintf(reason, reason_size, "%s", st->reason);
    pthread_mutex_unlock(&st->health_lock);
}

void store_counters(struct store *st, struct mt_counters *out)
{
    pthread_mutex_lock(&st->lock);
    out->samples_stored = st->samples_stored;
    out->samples_dropped = st->samples_dropped;
    out->store_errors = st->errors;
    out->trims_dropped = st->trims_dropped;
    pthread_mutex_unlock(&st->lock);
}

void store_test_tick(struct store *st, int64_t tick_ns, int64_t retry_min_ns)
{
    pthread_mutex_lock(&st->lock);
    st->test_tick_ns = tick_ns;
    st->test_retry_min_ns = retry_min_ns;
    st->kicked = 1;
    pthread_cond_broadcast(&st->cond);
    pthread_mutex_unlock(&st->lock);
}

int store_stop(struct store *st)
{
    struct timespec deadline;
    int rc = 0;
    if (!st->started)
        return 0;
    mt_deadline(&deadline, STORE_JOIN_NS);
    pthread_mutex_lock(&st->lock);
    st->stop = 1;
    pthread_cond_broadcast(&st->cond);
    while (!st->done && rc == 0)
        rc = pthread_cond_timedwait(&st->cond, &st->lock, &deadline);
    int done = st->done;
    pthread_mutex_unlock(&st->lock);
    if (!done) {
        /* A hung disk: the host's stop must not wait for it. The thread will
         * run our code when the disk answers: keep the library mapped even if
         * the host unloads it (Orthanc does, right after finalize). */
        Dl_info self;
        if (dladdr((void *)store_main, &self) && self.dli_fname)
            dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        mt_log(MT_LOG_ERROR, "store", "the store did not finish within %d s; leaving it behind",
               (int)(STORE_JOIN_NS / MT_SEC));
        pthread_detach(st->thread);
        st->started = 0;
        return -ETIMEDOUT;
    }
    pthread_join(st->thread, NULL);
    st->started = 0;
    return 0;
}
