/*
 * store.c - DESIGN. The store thread owns the SQLite writer. It wakes every
 * 250 ms, or at once when woken (a trim result, a stop), and writes what is
 * queued (trim results from the trim service, samples from the housekeeper)
 * in one transaction, applies retention in small batches, and reports the
 * store's health. It runs apart from the housekeeper so that a slow or hung
 * disk never delays a pressure trim; if it hangs at stop, the stop gives up
 * waiting after STORE_JOIN_NS and the instance is left to it.
 * Locks: mt->store_lock guards the sample queue, the stop flag and the store
 * counters, and is never held across an SQLite call.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "db.h"
#include "instance.h"

#define MS (1000000LL)
#define SEC (1000000000LL)
#define STORE_TICK_NS (250 * MS)
#define STORE_JOIN_NS (2 * SEC)
#define RETENTION_EVERY_NS (60 * SEC)
#define RETENTION_BATCH 2000
#define DB_RETRY_MIN_NS (1 * SEC)
#define DB_RETRY_MAX_NS (60 * SEC)
#define FILE_CHECK_EVERY_NS (2 * SEC) /* is the file opened still the one at the path? */

struct store_state {
    struct db_writer *db;
    int64_t retry_at, retry_delay, next_retention, next_file_check;
    char error[256]; /* the last failure, "" when healthy */
};

static void count(struct memtrim *mt, uint64_t *counter)
{
    pthread_mutex_lock(&mt->store_lock);
    (*counter)++;
    pthread_mutex_unlock(&mt->store_lock);
}

/*
 * A failure: report it, back off, and keep going without the store. After a
 * failed write the writer has rolled its batch back and stays usable, so it
 * is kept when the cause is passing (locked, disk full); otherwise it is
 * closed and reopened after the back-off.
 */
static void store_failed(struct memtrim *mt, struct store_state *st, int64_t now,
                         const char *what, int rc, char *err)
{
    char reason[256];
    snprintf(reason, sizeof(reason), "database %s: %s", what, err ? err : "unknown error");
    free(err);
    if (strcmp(reason, st->error) != 0)
        mt_log(MT_LOG_ERROR, "store", "%s; trims go on, the store retries", reason);
    snprintf(st->error, sizeof(st->error), "%s", reason);
    count(mt, &mt->store_errors);
    atomic_store(&mt->db_available, 0);
    mt_set_health(mt, "retrying", reason);
    if (rc != -EBUSY && rc != -ENOSPC) {
        db_writer_close(st->db);
        st->db = NULL;
    }
    st->retry_delay = st->retry_delay ? st->retry_delay * 2 : DB_RETRY_MIN_NS;
    if (st->retry_delay > DB_RETRY_MAX_NS)
        st->retry_delay = DB_RETRY_MAX_NS;
    st->retry_at = now + st->retry_delay;
}

static void store_recovered(struct memtrim *mt, struct store_state *st)
{
    if (st->error[0])
        mt_log(MT_LOG_INFO, "store", "database %s is available again", mt->db_path);
    st->error[0] = '\0';
    st->retry_delay = 0;
    atomic_store(&mt->db_available, 1);
    mt_set_health(mt, "ok", "");
}

static int store_open(struct memtrim *mt, struct store_state *st, int64_t now)
{
    char *err = NULL;
    if (now < st->retry_at)
        return -EAGAIN;
    if (st->db)
        return 0; /* open, or kept open through a passing failure: try again */
    int rc = db_writer_open(mt->db_path, &st->db, &err);
    if (rc) {
        st->db = NULL;
        store_failed(mt, st, now, "cannot be opened", rc, err);
        return rc;
    }
    int64_t max_id = 0;
    if (db_writer_max_trim_id(st->db, &max_id, &err) == 0)
        trim_ids_above(&mt->trims, max_id); /* ids stay unique even if the clock went back */
    else
        free(err);
    atomic_fetch_add(&mt->db_generation, 1);
    store_recovered(mt, st);
    return 0;
}

/* Take the queued samples (at most max) out of the queue. */
static unsigned take_samples(struct memtrim *mt, struct mt_snapshot *buf, unsigned max)
{
    pthread_mutex_lock(&mt->store_lock);
    unsigned n = mt->store_nsamples < max ? mt->store_nsamples : max;
    memcpy(buf, mt->store_samples, n * sizeof(*buf));
    mt->store_nsamples = 0;
    pthread_mutex_unlock(&mt->store_lock);
    return n;
}

/* Write queued trims and samples in one transaction; retention now and then (not when
 * `last`: the final write at stop must be short). */
static void store_tick(struct memtrim *mt, struct store_state *st, int64_t now, int last)
{
    struct mt_trim_result batch[64];
    struct mt_snapshot samples[STORE_SAMPLE_QUEUE];
    struct mt_refault refaults[16];
    unsigned n, ns, nr, i;
    char *err = NULL;
    int rc = 0;

    if (store_open(mt, st, now))
        return;
    if (now >= st->next_file_check) {
        /* Deleted or replaced under us: writes would go to an inode nobody can read. */
        st->next_file_check = now + FILE_CHECK_EVERY_NS;
        if ((rc = db_writer_check_file(st->db, &err)) != 0) {
            store_failed(mt, st, now, "file is gone", rc, err); /* closes; reopens at the path */
            return;
        }
    }
    n = trim_drain(&mt->trims, batch, 64);
    ns = take_samples(mt, samples, STORE_SAMPLE_QUEUE);
    nr = trim_drain_refaults(&mt->trims, refaults, 16);
    for (i = 0; i < n && rc == 0; i++)
        rc = db_writer_add_trim(st->db, &batch[i], &err);
    /* After the trims: a figure may belong to a trim of this batch. A figure
     * lost to a failed write leaves its trim's refaulted_bytes unknown. */
    for (i = 0; i < nr && rc == 0; i++)
        rc = db_writer_set_refault(st->db, &refaults[i], &err);
    for (i = 0; i < ns && rc == 0; i++)
        rc = db_writer_add_sample(st->db, &samples[i], &err);
    if (rc == 0)
        rc = db_writer_flush(st->db, &err);
    if (rc) {
        trim_requeue(&mt->trims, batch, n); /* nothing committed: keep them for later */
        pthread_mutex_lock(&mt->store_lock);
        mt->samples_dropped += ns; /* samples are what we can afford to lose: count them */
        pthread_mutex_unlock(&mt->store_lock);
        store_failed(mt, st, now, "write failed", rc, err);
        return;
    }
    if (st->error[0])
        store_recovered(mt, st);
    pthread_mutex_lock(&mt->store_lock);
    mt->samples_stored += ns;
    pthread_mutex_unlock(&mt->store_lock);
    if (!last && now >= st->next_retention) {
        struct mt_config cfg;
        int64_t deleted = 0;
        mt_config_get(mt, &cfg);
        int64_t cutoff = mt_now_ms() - (int64_t)(cfg.retention_hours * 3600.0 * 1000.0);
        rc = db_writer_retention(st->db, cutoff, RETENTION_BATCH, &deleted, &err);
        if (rc)
            store_failed(mt, st, now, "retention failed", rc, err);
        /* More to delete: come back next tick rather than hold the writer. */
        st->next_retention = deleted >= RETENTION_BATCH ? now : now + RETENTION_EVERY_NS;
    }
}

static void *store_main(void *arg)
{
    struct memtrim *mt = arg;
    struct store_state st;

    mt_thread_begin("memtrim-store");
    memset(&st, 0, sizeof(st));

    pthread_mutex_lock(&mt->store_lock);
    while (!mt->store_stop) {
        pthread_mutex_unlock(&mt->store_lock);
        store_tick(mt, &st, mt_mono_ns(), 0);
        pthread_mutex_lock(&mt->store_lock);
        if (mt->store_stop)
            break;
        struct timespec deadline;
        mt_deadline(&deadline, STORE_TICK_NS);
        if (!mt->store_kicked)
            pthread_cond_timedwait(&mt->store_cond, &mt->store_lock, &deadline);
        mt->store_kicked = 0;
    }
    pthread_mutex_unlock(&mt->store_lock);

    /* Last words: what is queued goes to the store (one last try even while
     * backing off); then close it. */
    st.retry_at = 0;
    store_tick(mt, &st, mt_mono_ns(), 1);
    db_writer_close(st.db);
    atomic_store(&mt->db_available, 0);
    pthread_mutex_lock(&mt->store_lock);
    mt->store_done = 1;
    pthread_cond_broadcast(&mt->store_cond);
    pthread_mutex_unlock(&mt->store_lock);
    return NULL;
}

int store_start(struct memtrim *mt, char **err)
{
    if (!mt->db_path[0])
        return 0;
    int rc = pthread_create(&mt->store_thread, NULL, store_main, mt);
    if (rc) {
        *err = strdup("cannot start the store thread");
        return -rc;
    }
    mt->store_started = 1;
    return 0;
}

void store_push_sample(struct memtrim *mt, const struct mt_snapshot *s)
{
    if (!mt->store_started)
        return;
    pthread_mutex_lock(&mt->store_lock);
    if (mt->store_nsamples < STORE_SAMPLE_QUEUE)
        mt->store_samples[mt->store_nsamples++] = *s;
    else
        mt->samples_dropped++; /* the store is stuck or slow: samples are the thing to lose */
    pthread_mutex_unlock(&mt->store_lock);
}

void store_wake(struct memtrim *mt)
{
    pthread_mutex_lock(&mt->store_lock);
    mt->store_kicked = 1;
    pthread_cond_broadcast(&mt->store_cond);
    pthread_mutex_unlock(&mt->store_lock);
}

int store_stop(struct memtrim *mt)
{
    struct timespec deadline;
    int rc = 0;
    if (!mt->store_started)
        return 0;
    mt_deadline(&deadline, STORE_JOIN_NS);
    pthread_mutex_lock(&mt->store_lock);
    mt->store_stop = 1;
    pthread_cond_broadcast(&mt->store_cond);
    while (!mt->store_done && rc == 0)
        rc = pthread_cond_timedwait(&mt->store_cond, &mt->store_lock, &deadline);
    int done = mt->store_done;
    pthread_mutex_unlock(&mt->store_lock);
    if (!done) {
        /* A hung disk: the host's stop must not wait for it. The thread will
         * run our code when the disk answers: keep the library mapped even if
         * the host unloads it (Orthanc does, right after finalize). */
        Dl_info self;
        if (dladdr((void *)store_main, &self) && self.dli_fname)
            dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        mt_log(MT_LOG_ERROR, "store", "the store did not finish within %d s; leaving it behind",
               (int)(STORE_JOIN_NS / SEC));
        pthread_detach(mt->store_thread);
        mt->store_started = 0;
        return -ETIMEDOUT;
    }
    pthread_join(mt->store_thread, NULL);
    mt->store_started = 0;
    return 0;
}
