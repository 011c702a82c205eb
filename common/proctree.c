/*
 * proctree.c - the Program globs and the holder of memtrim's port among this
 * process's ancestors (see proctree.h). Called by the LD_PRELOAD start (the
 * constructor, before main, or the FollowFork thread); reads /proc only,
 * keeps no state, takes no lock.
 */
#include "proctree.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define HOLDER_INODES_MAX 16 /* listening sockets on one port: v4 and v6, a few binds */
#define ANCESTORS_MAX 64     /* a guard against a /proc that loops */

static int match_one(const char *glob, const char *exe, const char *comm)
{
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    return (exe[0] && fnmatch(glob, exe, 0) == 0) || (base[0] && fnmatch(glob, base, 0) == 0) ||
           (comm[0] && fnmatch(glob, comm, 0) == 0);
}

int proctree_match(const char *globs, const char *exe, const char *comm)
{
    char glob[PATH_MAX];

    if (!globs || !globs[0])
        return 1;
    for (const char *g = globs; *g;) {
        const char *nl = strchr(g, '\n');
        size_t len = nl ? (size_t)(nl - g) : strlen(g);
        if (len > 0 && len < sizeof(glob)) {
            memcpy(glob, g, len);
            glob[len] = '\0';
            if (match_one(glob, exe ? exe : "", comm ? comm : ""))
                return 1;
        }
        g += len + (nl != NULL);
    }
    return 0;
}

/* The first line of a small /proc file, without its newline; "" on failure. */
static void read_line(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "re");
    buf[0] = '\0';
    if (!f)
        return;
    if (!fgets(buf, (int)size, f))
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
}

void proctree_comm(pid_t pid, char *comm, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/comm", (long)pid);
    read_line(path, comm, size);
    if (!comm[0] && size > 1)
        snprintf(comm, size, "?");
}

void proctree_self(char *exe, size_t exe_size, char *comm, size_t comm_size)
{
    ssize_t n = readlink("/proc/self/exe", exe, exe_size - 1);
    static const char deleted[] = " (deleted)";

    exe[n > 0 ? n : 0] = '\0';
    size_t len = strlen(exe), dl = sizeof(deleted) - 1;
    if (len > dl && strcmp(exe + len - dl, deleted) == 0)
        exe[len - dl] = '\0';
    read_line("/proc/self/comm", comm, comm_size);
}

int proctree_no_netlink;

#define TCP_LISTEN_STATE 10 /* include/net/tcp_states.h */

/*
 * The inodes of the listening TCP sockets of one family on port, from the
 * kernel's sock_diag netlink interface: it dumps listening sockets only, so a
 * host with a hundred thousand connections costs what an idle one does
 * (/proc/net/tcp lists them all). -1 when netlink is not available here.
 */
static int diag_listening(int family, int port, unsigned long *inodes, size_t *n, size_t max)
{
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } msg = {.nlh = {.nlmsg_len = sizeof(msg),
                     .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                     .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
             .req = {.sdiag_family = (unsigned char)family,
                     .sdiag_protocol = IPPROTO_TCP,
                     .idiag_states = 1u << TCP_LISTEN_STATE}};
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    struct timeval limit = {1, 0}; /* the kernel answers at once; never hang a start on it */
    long buf[2048];                /* 16 KiB, aligned for nlmsghdr */
    int rc = -1;

    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    if (sendto(fd, &msg, sizeof(msg), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
        goto done;
    for (;;) {
        ssize_t len = recv(fd, buf, sizeof(buf), 0);
        if (len <= 0)
            goto done;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)len);
             h = NLMSG_NEXT(h, len)) {
            if (h->nlmsg_type == NLMSG_DONE) {
                rc = 0;
                goto done;
            }
            if (h->nlmsg_type == NLMSG_ERROR)
                goto done;
            const struct inet_diag_msg *m = NLMSG_DATA(h);
            if (ntohs(m->id.idiag_sport) == port && m->idiag_inode != 0 && *n < max)
                inodes[(*n)++] = m->idiag_inode;
        }
    }
done:
    close(fd);
    return rc;
}

/* The same from one /proc/net table (where netlink is not allowed). */
static size_t listening_inodes(const char *table, int port, unsigned long *inodes, size_t n,
                               size_t max)
{
    char line[512];
    FILE *f = fopen(table, "re");
    if (!f)
        return n;
    if (!fgets(line, sizeof(line), f)) { /* the header */
        fclose(f);
        return n;
    }
    while (n < max && fgets(line, sizeof(line), f)) {
        unsigned lport, state;
        unsigned long inode;
        if (sscanf(line, "%*s %*[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %*s %*s %lu", &lport, &state,
                   &inode) == 3 &&
            (int)lport == port && state == 0x0A /* TCP_LISTEN */ && inode != 0)
            inodes[n++] = inode;
    }
    fclose(f);
    return n;
}

/* Whether pid has one of the socket inodes open. */
static int holds_socket(pid_t pid, const unsigned long *inodes, size_t n)
{
    char path[64], link[64], want[40];
    struct dirent *e;
    int found = 0;

    snprintf(path, sizeof(path), "/proc/%ld/fd", (long)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0; /* another user's process: not ours to look at, and not our memtrim */
    while (!found && (e = readdir(d)) != NULL) {
        ssize_t len = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1);
        if (len <= 0)
            continue;
        link[len] = '\0'; /* before the compare: readlinkat does not terminate */
        if (strncmp(link, "socket:[", 8) != 0)
            continue;
        for (size_t i = 0; i < n && !found; i++) {
            snprintf(want, sizeof(want), "socket:[%lu]", inodes[i]);
            found = strcmp(link, want) == 0;
        }
    }
    closedir(d);
    return found;
}

/* Whether pid runs memtrim: one of its threads is memtrim's (core names them "memtrim-..."). */
static int runs_memtrim(pid_t pid)
{
    char path[96], comm[32];
    struct dirent *e;
    int found = 0;

    snprintf(path, sizeof(path), "/proc/%ld/task", (long)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/%ld/task/%.20s/comm", (long)pid, e->d_name);
        read_line(path, comm, sizeof(comm));
        found = strncmp(comm, "memtrim-", 8) == 0;
    }
    closedir(d);
    return found;
}

/* The parent of pid from /proc/PID/stat (after the comm, which may hold ')'); -1 on failure. */
static pid_t parent_of(pid_t pid)
{
    char path[64], buf[512];
    long ppid;

    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    if (!paren || sscanf(paren + 1, " %*c %ld", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
}

int proctree_port_holder(int port, pid_t *pid, char *comm, size_t comm_size)
{
    unsigned long inodes[HOLDER_INODES_MAX];
    size_t n = 0;

    if (port <= 0 || port > 65535)
        return 0;
    if (proctree_no_netlink || diag_listening(AF_INET, port, inodes, &n, HOLDER_INODES_MAX))
        n = listening_inodes("/proc/net/tcp", port, inodes, 0, HOLDER_INODES_MAX);
    size_t v4 = n;
    if (proctree_no_netlink || diag_listening(AF_INET6, port, inodes, &n, HOLDER_INODES_MAX))
        n = listening_inodes("/proc/net/tcp6", port, inodes, v4, HOLDER_INODES_MAX);
    if (n == 0)
        return 0;
    pid_t p = getppid();
    for (int depth = 0; p > 0 && depth < ANCESTORS_MAX; depth++) {
        /* An ancestor that holds the socket without memtrim may have inherited
         * it by fork from one further up that runs memtrim: look on. */
        if (holds_socket(p, inodes, n) && runs_memtrim(p)) {
            *pid = p;
            proctree_comm(p, comm, comm_size);
            return 1;
        }
        if (p == 1)
            break;
        p = parent_of(p);
    }
    return 0;
}
