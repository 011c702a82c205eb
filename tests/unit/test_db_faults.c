/*
 * test_db_faults.c - the store when things go wrong: a directory that cannot
 * hold the file, a read-only file system, a file of garbage, a database
 * locked by another connection, a full disk. Each must give a negative errno
 * and a message, never abort, and the writer must recover once the cause is
 * gone.
 *
 * Threads: one. Files: a mkdtemp directory under /tmp; the read-only and
 * full-disk cases mount small tmpfs file systems in it (root only: root
 * ignores permission bits, so nothing weaker really fails) and unmount them.
 */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "db.h"
#include "harness.h"


static char tmpdir[64];

static char *tpath(const char *name)
{
    return harness_path(tmpdir, name);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct mt_snapshot snap(int64_t ts)
{
    struct mt_snapshot s;
    memset(&s, 0, sizeof(s));
    s.cheap.timestamp_ms = ts;
    s.cheap.rss_bytes = 1000000 + (uint64_t)ts;
    s.cheap.cgroup_usage_bytes = -1;
    s.memory_limit_bytes = -1;
    return s;
}

/* Print what the store said, then free it. */
static void said(const char *what, int rc, char **err)
{
    printf("%s: %d (%s): %s\n", what, rc, strerror(-rc), *err ? *err : "(no message)");
    free(*err);
    *err = NULL;
}

static int64_t count_samples(const char *path)
{
    struct db_reader *r = NULL;
    struct db_bucket *b = NULL;
    size_t n = 0;
    int64_t total = -1;
    char *err = NULL;

    if (db_reader_open(path, &r, &err) == 0 &&
        db_query_series(r, "rss_bytes", 0, INT64_MAX / 2, INT64_MAX / 2, &b, &n, &err) == 0) {
        total = n == 1 ? b[0].count : 0;
    } else {
        said("count samples", -EIO, &err);
    }
    free(b);
    db_reader_close(r);
    return total;
}

/* A tmpfs at dir with opts; -errno when this process may not mount. */
static int mount_tmpfs(const char *dir, const char *opts)
{
    mkdir(dir, 0700);
    if (geteuid() != 0)
        return -EPERM;
    if (mount("tmpfs", dir, "tmpfs", 0, opts) != 0)
        return -errno;
    return 0;
}

static void test_unwritable_dir(void)
{
    const char *file = tpath("file"), *inside = tpath("file/db.sqlite");
    const char *ro = tpath("ro"), *ro_db = tpath("ro/db.sqlite");
    struct db_writer *w = NULL;
    char *err = NULL;
    int fd, rc;

    /* A regular file where a directory should be: fails for root too. */
    fd = open(file, O_CREAT | O_WRONLY, 0600);
    close(fd);
    rc = db_writer_open(inside, &w, &err);
    CHECK_EQ_INT(rc, -ENOTDIR);
    CHECK(w == NULL && err != NULL && strstr(err, "cannot open") != NULL);
    said("file as directory", rc, &err);

    rc = mount_tmpfs(ro, "size=64k");
    if (rc < 0)
        SKIP("cannot mount a tmpfs (needs root): read-only directory not tested");
    CHECK_EQ_INT(mount("tmpfs", ro, "tmpfs", MS_REMOUNT | MS_RDONLY, "size=64k"), 0);
    rc = db_writer_open(ro_db, &w, &err);
    CHECK_EQ_INT(rc, -EROFS);
    CHECK(w == NULL && err != NULL && strstr(err, "not writable") != NULL);
    said("read-only directory", rc, &err);
    CHECK_EQ_INT(umount2(ro, MNT_DETACH), 0);
    /* A directory that does not exist stays -ENOENT. */
    rc = db_writer_open(tpath("missing/db.sqlite"), &w, &err);
    CHECK_EQ_INT(rc, -ENOENT);
    said("missing directory", rc, &err);
}

static void test_readonly_file(void)
{
    const char *dir = tpath("rofile"), *p = tpath("rofile/db.sqlite");
    struct db_writer *w = NULL;
    struct mt_snapshot s = snap(1000);
    char *err = NULL;
    int rc;

    rc = mount_tmpfs(dir, "size=1m");
    if (rc < 0)
        SKIP("cannot mount a tmpfs (needs root): read-only file not tested");
    rc = db_writer_open(p, &w, &err);
    CHECK_EQ_INT(rc, 0);
    if (rc == 0) {
        CHECK_EQ_INT(db_writer_add_sample(w, &s, &err), 0);
        db_writer_close(w);
        w = NULL;
    }
    CHECK_EQ_INT(mount("tmpfs", dir, "tmpfs", MS_REMOUNT | MS_RDONLY, "size=1m"), 0);
    rc = db_writer_open(p, &w, &err);
    CHECK_EQ_INT(rc, -EROFS);
    CHECK(w == NULL && err != NULL && strstr(err, "read-only") != NULL);
    said("read-only file", rc, &err);
    CHECK_EQ_INT(umount2(dir, MNT_DETACH), 0);
}

static void test_garbage(void)
{
    const char *p = tpath("garbage.sqlite"), *empty = tpath("empty.sqlite");
    struct db_writer *w = NULL;
    struct db_reader *r = NULL;
    char junk[8192], *err = NULL;
    struct stat st;
    FILE *f;
    int rc;

    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (char)("memtrim was here; "[i % 18] ^ (i / 18));
    f = fopen(p, "wb");
    fwrite(junk, 1, sizeof(junk), f);
    fclose(f);
    rc = db_writer_open(p, &w, &err);
    CHECK_EQ_INT(rc, -EBADMSG);
    CHECK(w == NULL && err != NULL && strstr(err, "not an SQLite database") != NULL);
    said("garbage file", rc, &err);
    CHECK_EQ_INT(db_reader_open(p, &r, &err), -EBADMSG);
    free(err);
    err = NULL;
    /* Left as it was: same size, no WAL beside it. */
    CHECK(stat(p, &st) == 0 && st.st_size == (off_t)sizeof(junk));
    CHECK(access(tpath("garbage.sqlite-wal"), F_OK) != 0);

    /* An empty file is an empty database: the store is created in it. */
    close(open(empty, O_CREAT | O_WRONLY, 0600));
    CHECK_EQ_INT(db_writer_open(empty, &w, &err), 0);
    db_writer_close(w);
}

static void test_locked(void)
{
    const char *p = tpath("locked.sqlite"), *fresh = tpath("locked-fresh.sqlite");
    struct db_writer *w = NULL;
    struct mt_snapshot s = snap(2000), s2 = snap(3000);
    sqlite3 *other = NULL;
    char *err = NULL;
    int64_t t0;
    int rc;

    CHECK_EQ_INT(db_writer_open(p, &w, &err), 0);
    sqlite3_open(p, &other);
    CHECK_EQ_INT(sqlite3_exec(other,
                          "BEGIN EXCLUSIVE;"
                          "INSERT INTO samples (timestamp_ms, rss_bytes) VALUES (1000, 1);",
                          NULL, NULL, NULL),
             SQLITE_OK);
    t0 = now_ms();
    rc = db_writer_add_sample(w, &s, &err);
    CHECK_EQ_INT(rc, -EBUSY);
    CHECK(now_ms() - t0 < 10000); /* busy timeout, not a hang (a loose bound: CI is shared) */
    said("locked by another connection", rc, &err);
    CHECK_EQ_INT(count_samples(p), 0); /* readers still read (WAL) */
    CHECK_EQ_INT(sqlite3_exec(other, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    /* The lock is gone: the writer goes on. */
    CHECK_EQ_INT(db_writer_add_sample(w, &s, &err), 0);
    CHECK_EQ_INT(db_writer_add_sample(w, &s2, &err), 0);
    CHECK_EQ_INT(db_writer_flush(w, &err), 0);
    CHECK_EQ_INT(count_samples(p), 3);
    db_writer_close(w);
    w = NULL;

    /* Opening a file another connection holds exclusively (rollback journal). */
    CHECK_EQ_INT(sqlite3_close(other), SQLITE_OK);
    sqlite3_open(fresh, &other);
    CHECK_EQ_INT(sqlite3_exec(other, "BEGIN EXCLUSIVE; CREATE TABLE t (x);", NULL, NULL, NULL),
             SQLITE_OK);
    rc = db_writer_open(fresh, &w, &err);
    CHECK_EQ_INT(rc, -EBUSY);
    CHECK(w == NULL);
    said("open while locked", rc, &err);
    CHECK_EQ_INT(sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    CHECK_EQ_INT(db_writer_open(fresh, &w, &err), 0);
    db_writer_close(w);
    sqlite3_close(other);
}

/* Fill the file system holding path; returns the filler's fd (caller unlinks). */
static int fill_disk(const char *filler)
{
    static char block[4096];
    int fd = open(filler, O_CREAT | O_WRONLY | O_TRUNC, 0600);

    while (fd >= 0 && write(fd, block, sizeof(block)) > 0)
        ;
    while (fd >= 0 && write(fd, block, 1) > 0)
        ;
    return fd;
}

static void test_disk_full(void)
{
    const char *dir = tpath("full"), *p = tpath("full/db.sqlite"), *filler = tpath("full/filler");
    struct db_writer *w = NULL;
    int64_t ts = 1000000, stored = 0;
    char *err = NULL;
    int rc = 0, fd;

    rc = mount_tmpfs(dir, "size=256k");
    if (rc < 0)
        SKIP("cannot mount a tmpfs (needs root): full disk not tested");
    CHECK_EQ_INT(db_writer_open(p, &w, &err), 0);
    if (w == NULL)
        goto out;
    fd = fill_disk(filler);
    CHECK(fd >= 0);
    /* Leave room for a few batches, so the store fills up while in use. */
    CHECK_EQ_INT(ftruncate(fd, lseek(fd, 0, SEEK_END) - 48 * 1024), 0);
    for (int batch = 0; batch < 2000 && rc == 0; batch++) {
        for (int i = 0; i < 50 && rc == 0; i++) {
            struct mt_snapshot s = snap(ts++);
            rc = db_writer_add_sample(w, &s, &err);
        }
        if (rc == 0)
            rc = db_writer_flush(w, &err);
        if (rc == 0)
            stored += 50;
    }
    CHECK_EQ_INT(rc, -ENOSPC);
    CHECK(err != NULL && strstr(err, "dropped") != NULL);
    said("disk full", rc, &err);
    /* Space again: the same writer recovers. */
    close(fd);
    unlink(filler);
    for (int i = 0; i < 10; i++) {
        struct mt_snapshot s = snap(ts++);
        CHECK_EQ_INT(db_writer_add_sample(w, &s, &err), 0);
    }
    CHECK_EQ_INT(db_writer_flush(w, &err), 0);
    free(err);
    printf("disk full: %lld samples stored before, 10 after\n", (long long)stored);
    CHECK_EQ_INT(count_samples(p), stored + 10);
out:
    db_writer_close(w);
    CHECK_EQ_INT(umount2(dir, MNT_DETACH), 0);
}

int main(void)
{
    if (harness_tmpdir(tmpdir, sizeof(tmpdir), "test-dbf"))
        return 1;
    db_test_busy_timeout_ms(10); /* each locked write or open waits 10 ms, not 100 (tests only) */
    RUN(test_unwritable_dir);
    RUN(test_readonly_file);
    RUN(test_garbage);
    RUN(test_locked);
    RUN(test_disk_full);
    harness_rmtree(tmpdir);
    return harness_end();
}
