/*
 * fdid.c - a kept descriptor's identity (fdid.h). No lock: any thread; a struct
 * mt_kept belongs to the thread that holds it. State: the canary, and the list of
 * kept numbers a forked child closes (atomics, each slot claimed by one thread).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "control.h"
#include "fdid.h"

/* "/proc/self/fdinfo/<fd>" into path (at least 40 bytes), by hand: */
static void fdinfo_path(int fd, char *path)
{
    static const char prefix[] = "/proc/self/fdinfo/";
    char digits[12];
    int n = 0;
    unsigned v = (unsigned)fd;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    memcpy(path, prefix, sizeof(prefix) - 1);
    char *p = path + sizeof(prefix) - 1;
    while (n > 0)
        *p++ = digits[--n];
    *p = '\0';
}

/* The kernel's eventfd-id of fd (fdinfo): -1 when it has none (older kernels, not an
 * eventfd), -2 when fdinfo could not be read (a host at its descriptor limit).
 * Async-signal-safe (open, read, close, strstr; no stdio, no strtoll): the atfork child
 * handler reaches it (mt_fdid_fork_child -> mt_fdid_close -> mt_fdid_is). */
static int64_t eventfd_id(int fd)
{
    char path[40], buf[512];
    fdinfo_path(fd, path);
    ssize_t n = mt_read_small(path, buf, sizeof(buf));
    if (n <= 0)
        return n == -ENOENT || n == 0 ? -1 : -2;
    const char *p = strstr(buf, "\neventfd-id:");
    if (!p)
        return -1;
    p += 12;
    while (*p == ' ' || *p == '\t')
        p++;
    int64_t v = 0;
    const char *start = p;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT64_MAX - (*p - '0')) / 10)
            return -1; /* no id the kernel writes */
        v = v * 10 + (*p - '0');
    }
    return p == start ? -1 : v;
}

/* Async-signal-safe (fcntl): the atfork child handler reaches mt_fdid_stamped. */
int mt_fdid_stamp(int fd)
{
    return fcntl(fd, F_SETSIG, MT_FDID_STAMP) == 0 ? 0 : -errno;
}

int mt_fdid_stamped(int fd)
{
    return fcntl(fd, F_GETSIG) == MT_FDID_STAMP;
}

int mt_fdid_take(int fd, struct mt_fdid *id)
{
    struct stat st;
    memset(id, 0, sizeof(*id));
    id->eventfd_id = -1;
    if (fd < 0)
        return -EBADF;
    (void)mt_control("suite-fdid-no-stamp"); /* its list read here, never first in a child */
    /* The stamp, on the open file description: a host's own open of the same file
     * (same device and inode) at this number later has none (fdid.h). */
    if (fstat(fd, &st) != 0)
        return -errno;
    int rc = mt_fdid_stamp(fd);
    if (rc != 0)
        return rc;
    id->dev = (uint64_t)st.st_dev;
    id->ino = (uint64_t)st.st_ino;
    id->type = (uint32_t)(st.st_mode & S_IFMT);
    if (id->type == 0) { /* anon_inode: eventfd, timerfd, epoll... one inode for all */
        id->anon = 1;
        id->eventfd_id = eventfd_id(fd);
        if (id->eventfd_id < 0)
            id->eventfd_id = -1;
    }
    return 0;
}

/* Async-signal-safe (fstat, fcntl, and eventfd_id's open/read/close): the atfork child
 * handler reaches it. */
int mt_fdid_is(int fd, const struct mt_fdid *id)
{
    struct stat st;
    if (fd < 0 || !id || (id->ino == 0 && id->dev == 0) || fstat(fd, &st) != 0)
        return 0;
    if ((uint64_t)st.st_dev != id->dev || (uint64_t)st.st_ino != id->ino ||
        (uint32_t)(st.st_mode & S_IFMT) != id->type)
        return 0;
    /* control suite-fdid-no-stamp: 7303d86's identity, device and inode only */
    if (!mt_fdid_stamped(fd) && !mt_control("suite-fdid-no-stamp"))
        return 0; /* the same file, opened again by someone else: not our description */
    if (!id->anon || id->eventfd_id < 0)
        return 1;
    int64_t now = eventfd_id(fd);
    return now == id->eventfd_id || now == -2; /* -2: unreadable, the stamp decides */
}

int mt_fdid_close(int fd, const struct mt_fdid *id)
{
    if (!mt_fdid_is(fd, id))
        return -EBADF;
    close(fd);
    return 0;
}

void mt_fdid_file(uint64_t dev, uint64_t ino, struct mt_fdid *id)
{
    memset(id, 0, sizeof(*id));
    id->dev = dev;
    id->ino = ino;
    id->type = S_IFREG;
    id->eventfd_id = -1;
}

/* The list (fdid.h): a slot is 0 (free), -1 (claimed: being filled, or looked at by one
 * thread) or fd + 1 (listed; its id written before, read only by the thread that claims it). */
static struct listed {
    _Atomic int v;
    struct mt_fdid id;
} listed[MT_FDID_LISTED];

void mt_fdid_list(int fd, const struct mt_fdid *id)
{
    if (fd < 0 || !id || (id->dev == 0 && id->ino == 0))
        return;
    for (int i = 0; i < MT_FDID_LISTED; i++) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&listed[i].v, &free_slot, -1)) {
            listed[i].id = *id;
            atomic_store(&listed[i].v, fd + 1);
            return;
        }
    }
}

static int same_id(const struct mt_fdid *a, const struct mt_fdid *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->type == b->type;
}

void mt_fdid_unlist(int fd, const struct mt_fdid *id)
{
    if (fd < 0 || !id)
        return;
    for (int i = 0; i < MT_FDID_LISTED; i++) {
        int v = fd + 1;
        if (!atomic_compare_exchange_strong(&listed[i].v, &v, -1))
            continue;
        if (same_id(&listed[i].id, id)) {
            atomic_store(&listed[i].v, 0);
            return;
        }
        atomic_store(&listed[i].v, fd + 1); /* the same number, another file: not this one */
    }
}

int mt_fdid_fork_child(void)
{
    int closed = 0;
    for (int i = 0; i < MT_FDID_LISTED; i++) {
        int v = atomic_exchange(&listed[i].v, 0);
        /* -1: a parent's thread was filling or looking at it at the fork: forgotten */
        if (v > 0 && mt_fdid_close(v - 1, &listed[i].id) == 0)
            closed++;
    }
    return closed;
}

int mt_kept_set(struct mt_kept *k, int fd, const char *what)
{
    k->what = what;
    k->fd = -1;
    if (fd < 0)
        return -1;
    if (mt_fdid_take(fd, &k->id) != 0) {
        close(fd); /* just opened by our caller: certainly ours */
        return -1;
    }
    k->fd = fd;
    mt_fdid_list(fd, &k->id);
    return fd;
}

static void lost(int fd, const char *what)
{
    mt_log(MT_LOG_WARNING, "fd", "descriptor %d (%s) was closed by someone else in pid %ld "
                                 "(the host?): memtrim leaves that number alone from now on",
           fd, what ? what : "memtrim's", (long)getpid());
}

int mt_kept_fd(struct mt_kept *k)
{
    if (k->fd < 0)
        return -1;
    if (mt_fdid_is(k->fd, &k->id))
        return k->fd;
    mt_fdid_unlist(k->fd, &k->id);
    lost(k->fd, k->what);
    k->fd = -1;
    return -1;
}

void mt_kept_close(struct mt_kept *k)
{
    if (k->fd >= 0)
        mt_fdid_unlist(k->fd, &k->id); /* before the close: a child never sees it listed closed */
    if (k->fd >= 0 && mt_fdid_close(k->fd, &k->id) != 0)
        lost(k->fd, k->what);
    k->fd = -1;
}

/* The canary (fdid.h): written at an instance's start and stop (one instance at a time,
 * under the instance lock) and in the atfork child handler; read by any thread. */
static _Atomic int canary_fd = -1;
static _Atomic uint64_t canary_dev, canary_ino;
static _Atomic int canary_lost;

void mt_canary_open(void)
{
    if (atomic_load(&canary_fd) >= 0)
        return;
    int fd = memfd_create("memtrim-canary", MFD_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return; /* no canary: a host's closefrom goes unseen, as before */
    }
    atomic_store(&canary_dev, (uint64_t)st.st_dev);
    atomic_store(&canary_ino, (uint64_t)st.st_ino);
    atomic_store(&canary_lost, 0);
    atomic_store(&canary_fd, fd);
}

int mt_fds_lost(void)
{
    if (atomic_load(&canary_lost))
        return 1;
    int fd = atomic_load(&canary_fd);
    struct stat st;
    if (fd < 0 || (fstat(fd, &st) == 0 && (uint64_t)st.st_dev == atomic_load(&canary_dev) &&
                   (uint64_t)st.st_ino == atomic_load(&canary_ino)))
        return 0;
    if (!atomic_exchange(&canary_lost, 1))
        mt_log(MT_LOG_ERROR, "fd", "the host closed memtrim's descriptors in pid %ld (closefrom, "
                                   "or a loop over every descriptor): memtrim leaves its store "
                                   "and its HTTP server as they are, never to touch their "
                                   "descriptors again (those numbers are the host's now); "
                                   "trims go on. Start memtrim after that point (the C ABI) "
                                   "to keep them",
               (long)getpid());
    return 1;
}

/* fd is not the canary any more. */
static int mt_fds_lost_at(int fd)
{
    struct stat st;
    return fstat(fd, &st) != 0 || (uint64_t)st.st_dev != atomic_load(&canary_dev) ||
           (uint64_t)st.st_ino != atomic_load(&canary_ino);
}

void mt_canary_close(void)
{
    int fd = atomic_exchange(&canary_fd, -1);
    if (fd >= 0 && !mt_fds_lost_at(fd))
        close(fd);
}

void mt_canary_fork_child(void)
{
    /* No host code has run in the child yet, but the parent's may have closed the canary
     * and reused its number before the fork: closed only while it is still the canary. */
    int fd = atomic_exchange(&canary_fd, -1);
    if (fd >= 0 && !mt_fds_lost_at(fd))
        close(fd);
    atomic_store(&canary_lost, 0);
}
