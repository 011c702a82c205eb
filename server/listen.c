/*
 * listen.c - the listening socket, made here and handed to libmicrohttpd
 * (MHD_OPTION_LISTEN_SOCKET), so that a second daemon can take it over (a
 * renewed certificate, tls.c) and so that it can be a unix socket:
 *   TCP:  HttpBind:HttpPort resolved, bound, listening; bind's own errno is
 *         the start error.
 *   unix: "unix:/path". Every directory on the path, walked from "/" by
 *         descriptor with no link followed, must belong to the host's user or
 *         root and not be writable by others (sticky ones allowed on the way,
 *         not as the socket's own directory: anyone could bind the name first);
 *         a file already at the path must be a socket that nobody answers on
 *         (a stale one from a crashed host is replaced; one that answers stops
 *         the start). Bound in the checked directory (/proc/self/fd/N/name),
 *         given HttpSocketMode and HttpSocketGroup through that directory's
 *         descriptor (fchmodat/fchownat, AT_SYMLINK_NOFOLLOW) before listen()
 *         (nobody can connect before that), removed at stop if it is still ours.
 * Runs on the thread that starts and stops the server; no shared state, no locks.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"

/* The kernel's queue of connections whose handshake is done and that the server
 * has not accepted yet (clamped to net.core.somaxconn, 4096 by default). It costs
 * the host no descriptors. At 256, a burst of 400 connections that came while the
 * server's thread was off the CPU for a few ms filled it, the kernel dropped the
 * next SYN, and a legitimate client waited for its 1 s retransmission (ci failed
 * so, twice: /healthz went 1.02 s without an answer beside 400 half-open
 * connections). What the queue holds is accepted, evicted or refused at once
 * (server_conns_admit), ten to a round. */
#define SERVER_BACKLOG 4096

int server_addr_is_loopback(const struct sockaddr_storage *addr)
{
    if (addr->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr) >> 24) == 127;
    if (addr->ss_family != AF_INET6)
        return 0;
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)addr)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
}

/* Resolve HttpBind:HttpPort (numeric addresses or names such as "localhost"). */
static int listen_resolve(const struct server_options *cfg, struct sockaddr_storage *addr,
                          socklen_t *addrlen, char **err)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof(port), "%d", cfg->port);
    struct addrinfo *res = NULL;
    const char *host = cfg->bind[0] ? cfg->bind : NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL || res->ai_addrlen > sizeof(*addr)) {
        *err = server_strdupf("HttpBind '%s': %s", cfg->bind, rc ? gai_strerror(rc) : "no address");
        if (res)
            freeaddrinfo(res);
        return -EINVAL;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static int listen_tcp(const struct server_options *cfg, struct server_listener *l, char **err)
{
    struct sockaddr_storage addr;
    socklen_t addrlen = 0;
    int rc = listen_resolve(cfg, &addr, &addrlen, err);
    if (rc != 0)
        return rc;
    l->loopback = server_addr_is_loopback(&addr);
    int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        rc = -errno;
        *err = server_strdupf("cannot serve HTTP on %s:%d (HttpBind, HttpPort): %s", cfg->bind,
                           cfg->port, strerror(errno));
        return rc;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr.ss_family == AF_INET6) /* as libmicrohttpd does: "::" is IPv6 only */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)&addr, addrlen) != 0 || listen(fd, SERVER_BACKLOG) != 0) {
        rc = -errno;
        *err = server_strdupf("cannot serve HTTP on %s:%d (HttpBind, HttpPort): %s", cfg->bind,
                           cfg->port, strerror(errno));
        close(fd);
        return rc;
    }
    struct sockaddr_storage got;
    socklen_t len = sizeof(got);
    if (getsockname(fd, (struct sockaddr *)&got, &len) == 0)
        l->port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                                  : ((struct sockaddr_in *)&got)->sin_port);
    l->fd = fd;
    return 0;
}

/* One directory on the socket's path, as its descriptor shows it: it must belong to the host's
 * user or root; one that others may write to is refused, unless it has the sticky bit and is
 * not the socket's own (others cannot rename what it holds then). */
static int listen_check_one(const char *path, const char *dir, const struct stat *st, int last,
                            char **err)
{
    if (!S_ISDIR(st->st_mode)) {
        *err = server_strdupf("HttpBind 'unix:%s': '%s' is not a directory", path, dir);
        return -ENOTDIR;
    }
    if (!mt_secret_owner_ok((unsigned)st->st_uid)) {
        *err = server_strdupf("HttpBind 'unix:%s': the directory '%s' belongs to uid %u, neither "
                              "the host's user (uid %u) nor root: that user could replace the "
                              "socket or what leads to it",
                              path, dir, (unsigned)st->st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) && (last || !(st->st_mode & S_ISVTX))) {
        *err = server_strdupf(
            "HttpBind 'unix:%s': the directory '%s' has mode %04o: anyone may replace the socket "
            "%s (use a directory that only the host's user or root may write to, such as "
            "/run/memtrim, made by systemd's RuntimeDirectory=)",
            path, dir, (unsigned)(st->st_mode & 07777),
            last ? "there, or put their own at the path before the host starts; the sticky bit "
                   "does not stop that"
                 : "or a directory on the way to it");
        return -EPERM;
    }
    return 0;
}

/*
 * The socket's directory as an O_PATH descriptor, reached from "/" one component at a time
 * by descriptor, no link followed, each directory checked (listen_check_one): so what is
 * checked is what the socket is bound in and what its mode and group are set through.
 * *name: the socket's name in it (inside path). The descriptor, or -errno with *err.
 */
static int listen_open_dir(const char *path, const char **name, char **err)
{
    char walked[sizeof(((struct sockaddr_un *)0)->sun_path)] = "";
    const char *p = path + 1; /* path is absolute (config.c) */
    int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        *err = server_strdupf("HttpBind 'unix:%s': cannot open '/': %s", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    const char *slash = strrchr(path, '/');
    int rc = listen_check_one(path, "/", &st, slash == path, err);
    while (rc == 0 && p < slash) {
        const char *end = strchr(p, '/');
        size_t len = (size_t)(end - p);
        char comp[sizeof(walked)];
        memcpy(comp, p, len);
        comp[len] = '\0';
        p = end + 1;
        if (len == 0 || strcmp(comp, ".") == 0)
            continue;
        size_t w = strlen(walked); /* walked is a prefix of path: it fits */
        walked[w] = '/';
        memcpy(walked + w + 1, comp, len + 1);
        if (strcmp(comp, "..") == 0) {
            *err = server_strdupf("HttpBind 'unix:%s': '..' in the path; give it without", path);
            rc = -EINVAL;
            break;
        }
        struct stat l;
        if (fstatat(fd, comp, &l, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = -errno;
            *err = server_strdupf("HttpBind 'unix:%s': its directory '%s': %s", path, walked,
                                  errno == ENOENT ? "no such directory (create it, e.g. with "
                                                    "systemd's RuntimeDirectory=)"
                                                  : strerror(errno));
            break;
        }
        if (S_ISLNK(l.st_mode)) {
            char real[PATH_MAX];
            int known = realpath(walked, real) != NULL;
            *err = server_strdupf("HttpBind 'unix:%s': '%s' is a symbolic link%s%s%s: give the "
                                  "path without links (whoever may change a link may move the "
                                  "socket)",
                                  path, walked, known ? " (to '" : "", known ? real : "",
                                  known ? "')" : "");
            rc = -ELOOP;
            break;
        }
        int next = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 || fstat(next, &st) != 0 || st.st_dev != l.st_dev || st.st_ino != l.st_ino) {
            rc = next < 0 ? -errno : -EAGAIN;
            *err = server_strdupf("HttpBind 'unix:%s': its directory '%s': %s", path, walked,
                                  next < 0 ? strerror(errno) : "changed while it was checked");
            if (next >= 0)
                close(next);
            break;
        }
        close(fd);
        fd = next;
        rc = listen_check_one(path, walked, &st, p > slash, err);
    }
    if (rc != 0) {
        close(fd);
        return rc;
    }
    *name = slash + 1;
    return fd;
}

/* The socket's address: through the checked directory's descriptor when /proc has it (the
 * kernel then binds in that very directory), by its path otherwise (every directory on it
 * checked, none that others may write to). */
static void listen_addr(int dirfd, const char *path, const char *name, struct sockaddr_un *sun)
{
    struct stat d, p;
    char proc[64];
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", dirfd);
    size_t plen = strlen(proc), nlen = strlen(name);
    if (fstat(dirfd, &d) == 0 && stat(proc, &p) == 0 && d.st_dev == p.st_dev &&
        d.st_ino == p.st_ino && plen + 1 + nlen < sizeof(sun->sun_path)) {
        memcpy(sun->sun_path, proc, plen);
        sun->sun_path[plen] = '/';
        memcpy(sun->sun_path + plen + 1, name, nlen + 1);
    } else {
        memcpy(sun->sun_path, path, strlen(path) + 1); /* shorter than sun_path (listen_unix) */
    }
}

/* A file already at the path: a stale socket is removed, anything else stops the start. */
static int listen_clear_stale(int dirfd, const char *path, const char *name,
                              const struct sockaddr_un *sun, char **err)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode)) {
        *err = server_strdupf("HttpBind 'unix:%s': a file that is not a socket is already there; "
                           "remove it or choose another path",
                           path);
        return -EEXIST;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int c = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
    int e = errno;
    close(fd);
    if (c == 0) {
        *err = server_strdupf("HttpBind 'unix:%s': another process answers on that socket (a "
                           "second host with the same configuration?); not replaced",
                           path);
        return -EADDRINUSE;
    }
    if (e != ECONNREFUSED) {
        *err = server_strdupf("HttpBind 'unix:%s': a socket is there and cannot be tested: %s",
                           path, strerror(e));
        return -e;
    }
    if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT) {
        e = errno;
        *err = server_strdupf("HttpBind 'unix:%s': cannot remove the stale socket: %s", path,
                           strerror(e));
        return -e;
    }
    mt_log(MT_LOG_INFO, "server", "HttpBind 'unix:%s': a stale socket (nobody answered on it) "
                                  "was replaced", path);
    return 0;
}

/* The mode, then the group, of the socket just bound: through the checked directory's
 * descriptor, no link followed (glibc's fchmodat does that through an O_PATH descriptor and
 * /proc; without /proc, the entry is checked to be a socket and changed by name, in a
 * directory nobody else may write to). */
static int listen_set_perms(int dirfd, const char *name, mode_t mode, gid_t gid, const char **step)
{
    struct stat st;
    *step = "chmod";
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST;
    if (fchmodat(dirfd, name, mode, AT_SYMLINK_NOFOLLOW) != 0 &&
        (errno != EOPNOTSUPP || fchmodat(dirfd, name, mode, 0) != 0))
        return -errno;
    *step = "chown to HttpSocketGroup";
    if (gid != (gid_t)-1 && fchownat(dirfd, name, (uid_t)-1, gid, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    return 0;
}

static int listen_group(const char *name, gid_t *gid, char **err)
{
    char *end = NULL;
    errno = 0;
    unsigned long n = strtoul(name, &end, 10);
    if (name[0] >= '0' && name[0] <= '9' && *end == '\0') {
        /* gid_t is 32 bits, and (gid_t)-1 means "no change" to chown: refuse both */
        if (errno == ERANGE || n >= (unsigned long)(gid_t)-1) {
            *err = server_strdupf("HttpSocketGroup '%s': not a group id (0 to %lu)", name,
                                  (unsigned long)(gid_t)-1 - 1);
            return -EINVAL;
        }
        *gid = (gid_t)n;
        return 0;
    }
    char buf[4096];
    struct group gr, *found = NULL;
    if (getgrnam_r(name, &gr, buf, sizeof(buf), &found) != 0 || found == NULL) {
        *err = server_strdupf("HttpSocketGroup '%s': no such group", name);
        return -EINVAL;
    }
    *gid = found->gr_gid;
    return 0;
}

static int listen_unix(const struct server_options *cfg, struct server_listener *l, char **err)
{
    const char *path = cfg->bind + 5;
    struct sockaddr_un sun;
    if (strlen(path) >= sizeof(sun.sun_path)) {
        *err = server_strdupf("HttpBind 'unix:%s': the path is too long for a socket", path);
        return -ENAMETOOLONG;
    }
    gid_t gid = (gid_t)-1;
    const char *name = NULL;
    int rc = cfg->socket_group[0] ? listen_group(cfg->socket_group, &gid, err) : 0;
    int dirfd = rc == 0 ? listen_open_dir(path, &name, err) : -1;
    if (rc == 0 && dirfd < 0)
        rc = dirfd;
    if (rc == 0) {
        listen_addr(dirfd, path, name, &sun);
        rc = listen_clear_stale(dirfd, path, name, &sun, err);
    }
    if (rc != 0) {
        if (*err == NULL)
            *err = server_strdupf("HttpBind 'unix:%s': %s", path, strerror(-rc));
        if (dirfd >= 0)
            close(dirfd);
        return rc;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        rc = -errno;
        *err = server_strdupf("HttpBind 'unix:%s': socket: %s", path, strerror(errno));
        close(dirfd);
        return rc;
    }
    mode_t mode = cfg->socket_mode > 0 ? (mode_t)cfg->socket_mode : 0660;
    const char *step = "bind";
    struct stat st;
    if (bind(fd, (const struct sockaddr *)&sun, sizeof(sun)) != 0) {
        rc = -errno;
        goto fail;
    }
    /* Nobody can connect before listen(): the mode and group are in place by then. */
    if ((rc = listen_set_perms(dirfd, name, mode, gid, &step)) != 0)
        goto fail_unlink;
    step = "listen";
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || listen(fd, SERVER_BACKLOG) != 0) {
        rc = -errno;
        goto fail_unlink;
    }
    close(dirfd);
    server_file_id_of(&st, &l->unix_id);
    snprintf(l->unix_path, sizeof(l->unix_path), "%s", path);
    l->is_unix = 1;
    l->fd = fd;
    return 0;

fail_unlink:
    unlinkat(dirfd, name, 0);
fail:
    *err = server_strdupf("HttpBind 'unix:%s': %s: %s", path, step, strerror(-rc));
    close(fd);
    close(dirfd);
    return rc;
}

int server_listen_open(const struct server_options *cfg, struct server_listener *l, char **err)
{
    memset(l, 0, sizeof(*l));
    l->fd = -1;
    *err = NULL;
    if (strncmp(cfg->bind, "unix:", 5) == 0)
        return listen_unix(cfg, l, err);
    return listen_tcp(cfg, l, err);
}

void server_listen_close(struct server_listener *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    if (!l->is_unix)
        return;
    /* Only the socket we made: a host started after us with the same path keeps its own. */
    struct stat st;
    struct server_file_id id;
    if (lstat(l->unix_path, &st) == 0) {
        server_file_id_of(&st, &id);
        if (id.ino == l->unix_id.ino && id.dev == l->unix_id.dev)
            unlink(l->unix_path);
    }
    l->is_unix = 0;
}
