/*
 * named.c - named worker groups (GroupName, docs/groups.md): processes
 * started separately that load memtrim with one GroupName meet at a unix
 * socket in a private directory. The first to take the group's lock leads:
 * it binds <dir>/<name>.sock, serves the API and owns the store; the others
 * connect and run as members on that channel, with the protocol of the
 * FollowFork groups (group.c). This file is the rendezvous only: choose and
 * check the directory, elect, publish and withdraw the socket.
 *
 * Why a lock beside the socket: the leader holds flock(<name>.lock) for its
 * whole life and the kernel drops it however the leader dies (SIGKILL
 * included), so two leaders can never coexist, and a socket file found while
 * holding the lock is a dead leader's (it is replaced only after a connect
 * finds nobody behind it). The directory is private (0700, this uid's own;
 * checked with lstat then fstat of the opened directory, O_NOFOLLOW, so a
 * symbolic link or a swapped directory is refused); the socket is reached
 * through /proc/self/fd/<dirfd>/, the directory already checked, never by
 * its path again. The directory must be this uid's own for root too: a root
 * process that took another user's directory would let that user plant the
 * group's socket (a leader that sends it trims and reads its reports). Peers
 * are checked with SO_PEERCRED: only this uid, or root, joins.
 *
 * Threads and locks: none of its own. A struct mt_named belongs to its
 * caller (core/group/group_host.c keeps one under host.lock); every function
 * here is a few non-blocking system calls. mt_named_dir_choose and
 * mt_named_peer_allowed are pure.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "mt_alloc.h"
#include "common.h"
#include "named.h"

_Static_assert(sizeof(((struct sockaddr_un *)0)->sun_path) == MT_GROUP_SOCK_PATH_MAX + 1,
               "MT_GROUP_SOCK_PATH_MAX is sun_path's size without its NUL");

/* *err = the message (NULL when out of memory: the caller says something general). */
#define set_err(...)                                                                               \
    do {                                                                                           \
        if (mt_asprintf(err, __VA_ARGS__) < 0)                                                     \
            *err = NULL;                                                                           \
    } while (0)

int mt_named_dir_choose(const char *group_dir, const char *xdg_runtime_dir, unsigned euid,
                        char *out, size_t size)
{
    int n;
    if (group_dir && group_dir[0])
        n = snprintf(out, size, "%s", group_dir);
    else if (xdg_runtime_dir && xdg_runtime_dir[0] == '/')
        n = snprintf(out, size, "%s/memtrim", xdg_runtime_dir);
    else if (euid == 0)
        n = snprintf(out, size, "/run/memtrim");
    else /* no runtime directory (a daemon without a login session): tmux's way */
        n = snprintf(out, size, "/tmp/memtrim-%u", euid);
    if (n < 0 || (size_t)n >= size)
        return -ENAMETOOLONG;
    while (n > 1 && out[n - 1] == '/') /* "/x/" and "/x" are one directory */
        out[--n] = '\0';
    return 0;
}

int mt_named_peer_allowed(unsigned peer_uid, unsigned leader_uid)
{
    return peer_uid == leader_uid || peer_uid == 0;
}

/*
 * Another user's directory. Where GroupDir did not name it (the default
 * /tmp/memtrim-<uid>, which anyone may create first in /tmp), say what the
 * operator does: a GroupDir of this user's own, or XDG_RUNTIME_DIR (systemd's
 * /run/user/<uid>, which nobody else can create).
 */
static int owner_err(const char *path, unsigned owner, unsigned euid, const char *what,
                     char **err)
{
    int chosen = strstr(what, "GroupDir") != NULL;
    set_err("%s %s: owned by uid %u, not by this process's uid %u; a group's directory must "
            "be its user's own (0700): not joining%s%u%s",
            what, path, owner, euid,
            chosen ? "; set GroupDir to a directory of uid "
                   : " (another user created it first); set GroupDir to a directory of uid ",
            euid,
            chosen ? "'s own (0700)"
                   : "'s own (0700), or start the process with XDG_RUNTIME_DIR set (systemd's "
                     "/run/user/<uid>)");
    return -EPERM;
}

int mt_named_dir_open(const char *path, unsigned euid, const char *what, char **err)
{
    struct stat l, f;
    *err = NULL;
    if (lstat(path, &l) != 0 && errno == ENOENT) {
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            set_err("%s %s: cannot create it: %s", what, path, strerror(errno));
            return -errno;
        }
    }
    if (lstat(path, &l) != 0) {
        int e = errno;
        set_err("%s %s: %s", what, path, strerror(e));
        return -e;
    }
    if (S_ISLNK(l.st_mode)) {
        set_err("%s %s: is a symbolic link; a group's directory must be a directory of "
                "its own (0700)",
                what, path);
        return -ELOOP;
    }
    if (!S_ISDIR(l.st_mode)) {
        set_err("%s %s: is not a directory", what, path);
        return -ENOTDIR;
    }
    if (l.st_uid != euid) /* said before open() could only say EACCES */
        return owner_err(path, (unsigned)l.st_uid, euid, what, err);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        set_err("%s %s: cannot open it: %s", what, path, strerror(e));
        return -e;
    }
    int rc = 0;
    if (fstat(fd, &f) != 0 || f.st_dev != l.st_dev || f.st_ino != l.st_ino) {
        set_err("%s %s: changed while it was checked; not used", what, path);
        rc = -EAGAIN;
    } else if (f.st_uid != euid) {
        rc = owner_err(path, (unsigned)f.st_uid, euid, what, err);
    } else if (f.st_mode & 077) {
        set_err("%s %s: mode %04o lets other users in; a group's directory must be "
                "0700 (chmod 700 it)",
                what, path, (unsigned)(f.st_mode & 07777));
        rc = -EPERM;
    }
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}

void mt_named_init(struct mt_named *n)
{
    memset(n, 0, sizeof(*n));
    n->dirfd = n->lock_fd = n->listen_fd = -1;
}

int mt_named_open(struct mt_named *n, const struct mt_config *cfg, char **err)
{
    char what[64];
    mt_named_init(n);
    *err = NULL;
    if (mt_named_dir_choose(cfg->group_dir, getenv("XDG_RUNTIME_DIR"), (unsigned)geteuid(), n->dir,
                            sizeof(n->dir)) != 0) {
        set_err("configuration key GroupDir: the directory's path is too long");
        return -ENAMETOOLONG;
    }
    snprintf(n->name, sizeof(n->name), "%s", cfg->group_name);
    /* The socket is reached through /proc/self/fd/N/ when /proc has it, by its path
     * otherwise: that path must fit (config.c says so for GroupDir at parse time). */
    size_t sock = config_group_sock_len(n->dir, n->name);
    if (sock > MT_GROUP_SOCK_PATH_MAX) {
        set_err("GroupName %s: the group's socket %s/%s.sock would be %zu bytes long; a unix "
                "socket's path holds %d at most (sun_path): set GroupDir to a shorter "
                "directory%s",
                n->name, n->dir, n->name, sock, MT_GROUP_SOCK_PATH_MAX,
                cfg->group_dir[0] ? "" : " (this one comes from XDG_RUNTIME_DIR)");
        return -ENAMETOOLONG;
    }
    snprintf(what, sizeof(what), "%s",
             cfg->group_dir[0] ? "configuration key GroupDir:" : "GroupName's directory");
    int fd = mt_named_dir_open(n->dir, (unsigned)geteuid(), what, err);
    if (fd < 0)
        return fd;
    int rc = mt_fdid_take(fd, &n->dir_id); /* stamps it (fdid.h): else never closed later */
    if (rc != 0) {
        set_err("%s %s: %s", what, n->dir, strerror(-rc));
        close(fd);
        return rc;
    }
    n->dirfd = fd;
    return 0;
}

/* The socket's address: through the checked directory's descriptor when /proc has it. */
static int named_addr(const struct mt_named *n, struct sockaddr_un *a, socklen_t *len)
{
    struct stat d, p;
    char proc[64];
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", n->dirfd);
    int k;
    if (fstat(n->dirfd, &d) == 0 && stat(proc, &p) == 0 && d.st_dev == p.st_dev &&
        d.st_ino == p.st_ino)
        k = snprintf(a->sun_path, sizeof(a->sun_path), "%s/%s.sock", proc, n->name);
    else
        k = snprintf(a->sun_path, sizeof(a->sun_path), "%s/%s.sock", n->dir, n->name);
    if (k < 0 || (size_t)k >= sizeof(a->sun_path))
        return -ENAMETOOLONG;
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)k + 1);
    return 0;
}

/* A connected channel to the group's leader (its uid checked), or -errno. */
static int named_connect(const struct mt_named *n, char **err)
{
    struct sockaddr_un a;
    socklen_t len;
    int rc = named_addr(n, &a, &len);
    if (rc) {
        set_err("GroupName %s: the group's socket %s/%s.sock is longer than a unix socket's "
                "path may be (%d bytes): set GroupDir to a shorter directory",
                n->name, n->dir, n->name, MT_GROUP_SOCK_PATH_MAX);
        return rc;
    }
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&a, len) != 0) {
        rc = errno == EINPROGRESS ? -EAGAIN : -errno; /* a full backlog: the leader is busy */
        close(fd);
        return rc;
    }
    struct ucred cred = {.pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1}; /* if getsockopt fails */
    socklen_t cl = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 ||
        !mt_named_peer_allowed((unsigned)geteuid(), (unsigned)cred.uid)) {
        set_err("GroupName %s: the group's leader (pid %ld) runs as uid %u, this "
                "process as uid %u: only the same uid, or root, may join; memtrim "
                "stays off in this process",
                n->name, (long)cred.pid, (unsigned)cred.uid, (unsigned)geteuid());
        close(fd);
        return -EPERM;
    }
    return fd;
}

static void name_of(const struct mt_named *n, const char *ext, char *out, size_t size)
{
    snprintf(out, size, "%s.%s", n->name, ext);
}

/* Holding the lock: replace what a dead leader left, bind, listen. */
static int named_bind(struct mt_named *n, char **err)
{
    char sock[MT_GROUP_NAME_MAX + 8];
    struct sockaddr_un a;
    socklen_t len;
    struct stat st;
    name_of(n, "sock", sock, sizeof(sock));
    if (fstatat(n->dirfd, sock, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            set_err("GroupName %s: %s/%s is not a socket; remove it", n->name, n->dir, sock);
            return -EEXIST;
        }
        if (unlinkat(n->dirfd, sock, 0) != 0 && errno != ENOENT) {
            set_err("GroupName %s: cannot replace the stale socket %s/%s: %s", n->name, n->dir,
                    sock, strerror(errno));
            return -errno;
        }
        mt_log(MT_LOG_INFO, "group",
               "GroupName %s: replaced the socket its last leader left "
               "(nobody answered on it)",
               n->name);
    }
    int rc = named_addr(n, &a, &len);
    if (rc) {
        set_err("GroupName %s: the group's socket %s/%s is longer than a unix socket's path "
                "may be (%d bytes): set GroupDir to a shorter directory",
                n->name, n->dir, sock, MT_GROUP_SOCK_PATH_MAX);
        return rc;
    }
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || mt_fdid_take(fd, &n->listen_id) != 0 ||
        bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, MT_GROUP_MAX) != 0 ||
        fstatat(n->dirfd, sock, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        rc = -errno;
        set_err("GroupName %s: cannot listen on %s/%s: %s", n->name, n->dir, sock, strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    n->listen_fd = fd;
    n->sock_dev = (uint64_t)st.st_dev;
    n->sock_ino = (uint64_t)st.st_ino;
    return 0;
}

/* The group's socket answers but its backlog is full: somebody leads there, busy. */
static void busy_err(const struct mt_named *n, char **err)
{
    set_err("GroupName %s: %s/%s.sock is served but its backlog is full (its leader is busy); "
            "asking again",
            n->name, n->dir, n->name);
}

/* Someone leads, or is taking the role: join it once its socket answers. */
static int named_join_leader(struct mt_named *n, int *member_fd, char **err)
{
    int c = named_connect(n, err);
    if (c >= 0) {
        *member_fd = c;
        return MT_NAMED_MEMBER;
    }
    if (c == -EPERM || c == -ENAMETOOLONG)
        return c; /* no retry helps (*err says why) */
    if (c == -EAGAIN && !*err)
        busy_err(n, err);
    return -EAGAIN;
}

int mt_named_elect(struct mt_named *n, int *member_fd, char **err)
{
    char lock[MT_GROUP_NAME_MAX + 8];
    *member_fd = -1;
    *err = NULL;
    if (n->dirfd < 0)
        return -EBADF;
    if (n->lock_fd >= 0)
        return MT_NAMED_LEADER;
    name_of(n, "lock", lock, sizeof(lock));
    int fd = openat(n->dirfd, lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct mt_fdid id; /* stamps it (fdid.h): a lock never closed would stay held */
    if (fd < 0 || mt_fdid_take(fd, &id) != 0) {
        int e = errno;
        set_err("GroupName %s: cannot open %s/%s: %s", n->name, n->dir, lock, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e != EWOULDBLOCK) {
            set_err("GroupName %s: cannot lock %s/%s: %s", n->name, n->dir, lock, strerror(e));
            return -e;
        }
        return named_join_leader(n, member_fd, err);
    }
    /* The lock is ours: nobody leads. A socket that still answers (a process that holds
     * a leader's listening socket without its lock: a child forked without the atfork
     * handlers) is joined rather than replaced, and so is one whose backlog is full
     * (EAGAIN: somebody listens there, busy): never replaced, asked again later. Only
     * ECONNREFUSED (nobody listens) or ENOENT (no socket) lets this process bind. */
    int c = named_connect(n, err);
    if (c >= 0 || (c != -ECONNREFUSED && c != -ENOENT)) {
        close(fd);
        if (c >= 0)
            *member_fd = c;
        else if (c == -EAGAIN && !*err)
            busy_err(n, err);
        else if (c != -EPERM && !*err)
            set_err("GroupName %s: cannot connect to %s/%s.sock: %s", n->name, n->dir, n->name,
                    strerror(-c));
        return c >= 0 ? MT_NAMED_MEMBER : c;
    }
    int rc = named_bind(n, err);
    if (rc) {
        close(fd);
        return rc;
    }
    n->lock_fd = fd;
    n->lock_id = id;
    return MT_NAMED_LEADER;
}

void mt_named_unpublish(struct mt_named *n)
{
    char sock[MT_GROUP_NAME_MAX + 8];
    struct stat st;
    if (n->listen_fd < 0 || n->dirfd < 0 || n->sock_ino == 0)
        return;
    name_of(n, "sock", sock, sizeof(sock));
    /* Only the file this leader bound (the lock keeps anyone else from binding meanwhile). */
    if (fstatat(n->dirfd, sock, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        (uint64_t)st.st_dev == n->sock_dev && (uint64_t)st.st_ino == n->sock_ino)
        unlinkat(n->dirfd, sock, 0);
    n->sock_ino = 0;
}

void mt_named_resign(struct mt_named *n)
{
    mt_named_unpublish(n);
    /* Each only while its number is still it: a host that closed it may have reused it. */
    mt_fdid_close(n->listen_fd, &n->listen_id);
    mt_fdid_close(n->lock_fd, &n->lock_id); /* the next leader may take the role from here */
    n->listen_fd = n->lock_fd = -1;
}

void mt_named_fork_child(struct mt_named *n)
{
    /* The parent's: a child holding the lock or the listening socket would keep a dead
     * leader's role alive. Only close() (the lock stays the parent's), and only while each
     * is still it: a parent that ran closefrom may have its own files at those numbers. */
    mt_fdid_close(n->listen_fd, &n->listen_id);
    mt_fdid_close(n->lock_fd, &n->lock_id);
    n->listen_fd = n->lock_fd = -1;
    n->sock_ino = 0;
}

void mt_named_close(struct mt_named *n)
{
    mt_named_resign(n);
    mt_fdid_close(n->dirfd, &n->dir_id);
    n->dirfd = -1;
}
