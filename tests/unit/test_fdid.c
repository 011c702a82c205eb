/*
 * test_fdid.c - memtrim never closes, reads or writes a descriptor that is no
 * longer its own (issue 31, F1): a host that closed memtrim's number and opened
 * a file of its own there (closefrom after its fork) keeps that file open and
 * untouched. One case per kind memtrim keeps: regular files (cgroup files,
 * /proc/self/statm), eventfds (the pressure wake, v1 thresholds), pipes and
 * sockets (group channels), and the kept descriptors of cgroup.c and probe.c.
 * And a forked child of a running instance keeps none of its parent's cgroup, /proc
 * and pressure descriptors (the atfork child closes them), yet leaves alone a number
 * the host took before the fork.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "api.h"
#include "cgroup.h"
#include "common.h"
#include "core.h"
#include "fdid.h"
#include "harness.h"
#include "probe.h"
#include "start.h"

static char tmp[256];

/* A host's file of its own, written with a known line: its descriptor. */
static int host_file(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmp, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0 && write(fd, "host\n", 5) != 5) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The host's file at fd is open, still 5 bytes, still "host\n", its offset where it was. */
static int host_file_intact(int fd)
{
    char buf[16] = "";
    struct stat st;
    return fcntl(fd, F_GETFD) >= 0 && fstat(fd, &st) == 0 && st.st_size == 5 &&
           lseek(fd, 0, SEEK_CUR) == 5 && pread(fd, buf, sizeof(buf), 0) == 5 &&
           memcmp(buf, "host\n", 5) == 0;
}

/* Put the host's file on number fd (as its open() after a closefrom would). */
static int take_number(int fd, const char *name)
{
    int h = host_file(name);
    if (h < 0)
        return -1;
    int rc = dup2(h, fd);
    close(h);
    return rc == fd ? 0 : -1;
}

/* Each kind: identity taken, number closed and reused by the host's file of the same
 * kind where that matters (two eventfds share an inode), never recognised as ours. */
static void test_kinds(void)
{
    struct mt_fdid id;
    int fds[2];

    int f = host_file("mine");
    CHECK_EQ_INT(mt_fdid_take(f, &id), 0);
    CHECK(mt_fdid_is(f, &id));
    CHECK_EQ_INT(take_number(f, "host-reg"), 0);
    CHECK(!mt_fdid_is(f, &id));
    CHECK_EQ_INT(mt_fdid_close(f, &id), -EBADF);
    CHECK(host_file_intact(f));
    close(f);

    /* eventfd: every one shares the anonymous inode; a host's new eventfd is no wake */
    int e = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ_INT(mt_fdid_take(e, &id), 0);
    CHECK(mt_fdid_is(e, &id));
    int host_e = eventfd(0, EFD_CLOEXEC);
    CHECK(dup2(host_e, e) == e);
    close(host_e);
    CHECK_MSG(!mt_fdid_is(e, &id), "a host's eventfd on the number passed for memtrim's");
    CHECK_EQ_INT(mt_fdid_close(e, &id), -EBADF);
    CHECK(fcntl(e, F_GETFD) >= 0);
    uint64_t v = 0;
    CHECK(write(e, &(uint64_t){3}, 8) == 8 && read(e, &v, 8) == 8 && v == 3);
    close(e);
    /* one that carries the stamp too (another of memtrim's, moved there): only the
     * kernel's eventfd-id (fdinfo, read by hand: the atfork child reads it) tells them
     * apart; the control, the same descriptor, is still ours */
    e = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ_INT(mt_fdid_take(e, &id), 0);
    CHECK_MSG(id.eventfd_id >= 0, "no eventfd-id read from /proc/self/fdinfo/%d", e);
    struct mt_fdid id2;
    host_e = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ_INT(mt_fdid_take(host_e, &id2), 0);
    CHECK(id2.eventfd_id >= 0 && id2.eventfd_id != id.eventfd_id);
    CHECK(mt_fdid_is(e, &id));
    CHECK(dup2(host_e, e) == e);
    close(host_e);
    CHECK_MSG(!mt_fdid_is(e, &id), "a stamped eventfd on the number passed for another");
    CHECK(mt_fdid_is(e, &id2));
    close(e);

    /* a pipe end and a socket, each replaced by another of its kind */
    CHECK_EQ_INT(pipe2(fds, O_CLOEXEC), 0);
    CHECK_EQ_INT(mt_fdid_take(fds[0], &id), 0);
    int other[2];
    CHECK_EQ_INT(pipe2(other, O_CLOEXEC), 0);
    CHECK(dup2(other[0], fds[0]) == fds[0]);
    CHECK(!mt_fdid_is(fds[0], &id));
    close(other[0]);
    close(other[1]);
    close(fds[0]);
    close(fds[1]);
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    CHECK_EQ_INT(mt_fdid_take(fds[0], &id), 0);
    CHECK(mt_fdid_is(fds[0], &id));
    CHECK(dup2(fds[1], fds[0]) == fds[0]); /* the other end: another socket */
    CHECK(!mt_fdid_is(fds[0], &id));
    close(fds[0]);
    close(fds[1]);

    /* a directory (a named group's), replaced by another directory */
    int d = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK_EQ_INT(mt_fdid_take(d, &id), 0);
    int other_dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(dup2(other_dir, d) == d);
    close(other_dir);
    CHECK(!mt_fdid_is(d, &id));
    CHECK_EQ_INT(mt_fdid_close(d, &id), -EBADF);
    CHECK(fcntl(d, F_GETFD) >= 0);
    close(d);

    /* closed and not reused: not ours either */
    e = eventfd(0, EFD_CLOEXEC);
    CHECK_EQ_INT(mt_fdid_take(e, &id), 0);
    close(e);
    CHECK(!mt_fdid_is(e, &id));
}

/* The host's open of the same file (same device and inode) at fd, as its open() after a
 * closefrom would put it there, read `skip` bytes in (its offset moved, as a host's
 * reader's is): 0, -1 when it cannot. */
static int take_same(int fd, const char *path, int flags, int skip)
{
    char buf[8];
    struct stat a, b;
    int h = open(path, flags | O_CLOEXEC);
    if (h < 0)
        return -1;
    int rc = fstat(fd, &a) == 0 && fstat(h, &b) == 0 && a.st_dev == b.st_dev &&
                     a.st_ino == b.st_ino && (skip == 0 || read(h, buf, (size_t)skip) == skip) &&
                     dup2(h, fd) == fd
                 ? 0
                 : -1;
    close(h);
    return rc;
}

/* fd is open on path's file, its offset at `at`. */
static int same_intact(int fd, const char *path, off_t at)
{
    struct stat a, b;
    return fcntl(fd, F_GETFD) >= 0 && fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino && lseek(fd, 0, SEEK_CUR) == at;
}

/*
 * Each kind memtrim keeps, replaced by the host's own open of the very same file (the
 * same device and inode: /proc/self/statm, a cgroup file, a PSI file, a named group's
 * lock and directory, the other end of a pipe): never recognised as memtrim's, never
 * closed, its offset where the host left it. Before the stamp on every kind (F_SETSIG
 * on the open file description) each of these passed for memtrim's.
 */
static void test_same_file(void)
{
    char lock[512], cgfile[512];
    snprintf(lock, sizeof(lock), "%s/same.lock", tmp);
    snprintf(cgfile, sizeof(cgfile), "%s/sys/fs/cgroup/memory.events", tmp);
    harness_put(tmp, "sys/fs/cgroup/memory.events", "low 0\nhigh 0\nmax 0\noom 0\n");
    close(host_file("same.lock"));
    static const struct {
        const char *path;
        int flags, skip;
    } kinds[] = {
        {"/proc/self/statm", O_RDONLY, 2},
        {"/proc/self/status", O_RDONLY, 3},
        {"/proc/self/stat", O_RDONLY, 1},
        {"/proc/pressure/memory", O_RDWR | O_NONBLOCK, 2}, /* where the kernel has PSI */
        {"/sys/fs/cgroup/memory/memory.usage_in_bytes", O_RDONLY, 1}, /* a v1 host */
        {"/sys/fs/cgroup/memory/cgroup.event_control", O_WRONLY, 0},
        {"/sys/fs/cgroup/memory.current", O_RDONLY, 1}, /* a v2 host */
        {"/sys/fs/cgroup/memory.events", O_RDONLY | O_NONBLOCK, 2},
        {NULL, O_RDONLY, 4}, /* cgfile: a harness cgroup file */
        {NULL, O_RDWR, 2},   /* lock: a named group's lock file */
    };
    int tried = 0;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        const char *path = kinds[i].path ? kinds[i].path : i == 8 ? cgfile : lock;
        struct mt_kept k = MT_KEPT_NONE("test");
        int fd = mt_kept_set(&k, open(path, kinds[i].flags | O_CLOEXEC), path);
        if (fd < 0) { /* not on this kernel or cgroup version: a skip tests/skips.txt lists */
            SKIP_PART(path, "cannot be opened on this host (another kernel or cgroup version)");
            continue;
        }
        tried++;
        CHECK_EQ_INT(mt_kept_fd(&k), fd);
        CHECK_MSG(take_same(fd, path, kinds[i].flags, kinds[i].skip) == 0, "%s", path);
        CHECK_MSG(mt_kept_fd(&k) == -1, "the host's %s on %d passed for memtrim's", path, fd);
        mt_kept_close(&k);
        CHECK_MSG(same_intact(fd, path, kinds[i].skip), "the host's %s on %d: closed or moved",
                  path, fd);
        close(fd);
        /* mt_fdid_take and mt_fdid_close, as named.c and the watchdog use them */
        fd = open(path, kinds[i].flags | O_CLOEXEC);
        struct mt_fdid id;
        CHECK_EQ_INT(mt_fdid_take(fd, &id), 0);
        CHECK(mt_fdid_is(fd, &id));
        CHECK_EQ_INT(take_same(fd, path, kinds[i].flags, kinds[i].skip), 0);
        CHECK_MSG(!mt_fdid_is(fd, &id), "the host's %s passed mt_fdid_is", path);
        CHECK_EQ_INT(mt_fdid_close(fd, &id), -EBADF);
        CHECK(same_intact(fd, path, kinds[i].skip));
        close(fd);
    }
    CHECK_MSG(tried >= 1, "none of the kinds could be opened here");

    /* a directory (a named group's), the same one opened again by the host */
    struct mt_fdid id;
    int d = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK_EQ_INT(mt_fdid_take(d, &id), 0);
    CHECK_EQ_INT(take_same(d, tmp, O_RDONLY | O_DIRECTORY, 0), 0);
    CHECK_MSG(!mt_fdid_is(d, &id), "the host's open of the same directory passed");
    CHECK_EQ_INT(mt_fdid_close(d, &id), -EBADF);
    CHECK(same_intact(d, tmp, 0));
    close(d);

    /* a pipe's read end, replaced by the host's open of the same pipe (by its write end's
     * /proc link: the same inode, a new open file description) */
    int fds[2];
    char link[64];
    CHECK_EQ_INT(pipe2(fds, O_CLOEXEC), 0);
    CHECK_EQ_INT(mt_fdid_take(fds[0], &id), 0);
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fds[1]);
    CHECK_EQ_INT(take_same(fds[0], link, O_RDONLY | O_NONBLOCK, 0), 0);
    CHECK_MSG(!mt_fdid_is(fds[0], &id), "the host's open of the same pipe passed");
    CHECK_EQ_INT(mt_fdid_close(fds[0], &id), -EBADF);
    CHECK(fcntl(fds[0], F_GETFD) >= 0);
    close(fds[0]);
    close(fds[1]);

    /* sockets and eventfds cannot be opened again (ENXIO): a host's is always another
     * inode (sockets) or carries no stamp and another eventfd-id (test_kinds) */
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fds[0]);
    errno = 0;
    CHECK(open(link, O_RDWR | O_CLOEXEC) < 0 && errno == ENXIO);
    close(fds[0]);
    close(fds[1]);
    int e = eventfd(0, EFD_CLOEXEC);
    snprintf(link, sizeof(link), "/proc/self/fd/%d", e);
    errno = 0;
    CHECK(open(link, O_RDWR | O_CLOEXEC) < 0 && errno == ENXIO);
    close(e);
}

/* struct mt_kept: the number is forgotten, never closed, once it is the host's. */
static void test_kept(void)
{
    struct mt_kept k = MT_KEPT_NONE("test");
    CHECK_EQ_INT(mt_kept_fd(&k), -1);
    int fd = mt_kept_set(&k, eventfd(0, EFD_CLOEXEC), "a wake");
    CHECK(fd >= 0);
    CHECK_EQ_INT(mt_kept_fd(&k), fd);
    CHECK_EQ_INT(take_number(fd, "host-kept"), 0);
    CHECK_EQ_INT(mt_kept_fd(&k), -1);
    CHECK_EQ_INT(k.fd, -1);
    mt_kept_close(&k); /* nothing to close: the number is the host's */
    CHECK(host_file_intact(fd));
    close(fd);

    fd = mt_kept_set(&k, host_file("mine2"), "a file");
    CHECK_EQ_INT(take_number(fd, "host-kept2"), 0);
    mt_kept_close(&k); /* close() asked: the host's file stays */
    CHECK(host_file_intact(fd));
    close(fd);
}

/* The number probe.c keeps for /proc/self/statm, by its link. */
static int find_fd(const char *target)
{
    char path[64], link[256];
    for (int fd = 3; fd < 1024; fd++) {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, link, sizeof(link) - 1);
        if (n <= 0)
            continue;
        link[n] = '\0';
        if (strstr(link, target))
            return fd;
    }
    return -1;
}

static void test_probe_statm(void)
{
    CHECK(probe_rss() > 0);
    char self[64];
    snprintf(self, sizeof(self), "/proc/%ld/statm", (long)getpid());
    int fd = find_fd(self);
    CHECK_MSG(fd >= 0, "probe.c keeps no descriptor on %s", self);
    if (fd < 0)
        return;
    CHECK_EQ_INT(take_number(fd, "host-statm"), 0);
    uint64_t rss = probe_rss(); /* reads its own statm again, not the host's file */
    CHECK_MSG(rss > 4096 * 10, "rss %llu read from the host's file?", (unsigned long long)rss);
    CHECK(host_file_intact(fd));
    close(fd);
}

/* The lowest of this process's descriptors open on exactly target (by its link), -1 none. */
static int find_exact(const char *target)
{
    char path[64], link[256];
    for (int fd = 3; fd < 1024; fd++) {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ssize_t k = readlink(path, link, sizeof(link) - 1);
        if (k > 0 && (link[k] = '\0', strcmp(link, target) == 0))
            return fd;
    }
    return -1;
}

/* How many of this process's descriptors are open on path's file (by its link). */
static int count_fds(const char *target)
{
    char path[64], link[256];
    int n = 0;
    for (int fd = 3; fd < 1024; fd++) {
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ssize_t k = readlink(path, link, sizeof(link) - 1);
        if (k > 0 && (link[k] = '\0', strcmp(link, target) == 0))
            n++;
    }
    return n;
}

/* probe.c's /proc/self/statm, replaced by the host's own open of the same file: probe.c
 * opens its own again and never reads, closes or moves the host's. */
static void test_probe_same_file(void)
{
    char self[64];
    CHECK(probe_rss() > 0);
    snprintf(self, sizeof(self), "/proc/%ld/statm", (long)getpid());
    int fd = find_exact(self);
    CHECK_MSG(fd >= 0, "probe.c keeps no descriptor on %s", self);
    if (fd < 0)
        return;
    CHECK_EQ_INT(count_fds(self), 1);
    CHECK_EQ_INT(take_same(fd, self, O_RDONLY, 2), 0);
    CHECK_MSG(probe_rss() > 4096 * 10, "no rss read");
    CHECK_MSG(count_fds(self) == 2, "probe.c kept reading the host's %s on %d", self, fd);
    CHECK(same_intact(fd, self, 2));
    close(fd);
}

/* A v1 cgroup `group` under tmp, looked up into ci and read once: the descriptor cgroup.c
 * keeps on its memory.usage_in_bytes (path into usage), -1 none. */
static int cgroup_usage_fd(const char *group, struct cgroup_info *ci, char *usage, size_t size)
{
    struct mt_cheap c;
    char rel[128], cg[128];
    const char *mounts = "35 25 0:31 / /sys/fs/cgroup/memory rw,relatime shared:15 - cgroup "
                         "cgroup rw,memory\n";
    snprintf(rel, sizeof(rel), "sys/fs/cgroup/memory/%s/memory.limit_in_bytes", group);
    harness_put(tmp, rel, "314572800\n");
    snprintf(rel, sizeof(rel), "sys/fs/cgroup/memory/%s/memory.usage_in_bytes", group);
    harness_put(tmp, rel, "104857600\n");
    harness_put(tmp, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    snprintf(usage, size, "%s/%s", tmp, rel);
    snprintf(cg, sizeof(cg), "11:memory:/%s\n", group);
    CHECK_EQ_INT(cgroup_lookup(cg, mounts, tmp, ci), 0);
    memset(&c, 0, sizeof(c));
    cgroup_read(ci, &c);
    CHECK_EQ_INT(c.cgroup_usage_bytes, 104857600);
    int fd = find_exact(usage);
    CHECK_MSG(fd >= 0, "cgroup.c keeps no descriptor on %s", usage);
    return fd;
}

/* cgroup.c's kept descriptor replaced by a host's file (another file, or with `same` the
 * host's own open of that very file, read 3 bytes in): cgroup.c opens its own again, and
 * its close leaves the host's open, untouched. */
static void cgroup_replaced(const char *group, int same)
{
    struct cgroup_info ci;
    struct mt_cheap c;
    char usage[512];
    int fd = cgroup_usage_fd(group, &ci, usage, sizeof(usage));
    if (fd < 0)
        return;
    CHECK_EQ_INT(same ? take_same(fd, usage, O_RDONLY, 3) : take_number(fd, "host-cgroup"), 0);
    memset(&c, 0, sizeof(c));
    cgroup_read(&ci, &c); /* reopens its own file */
    CHECK_EQ_INT(c.cgroup_usage_bytes, 104857600);
    CHECK_MSG(count_fds(usage) == 1 + same, "cgroup.c kept reading the host's file on %d", fd);
    cgroup_close(&ci); /* closes its own, leaves the host's */
    CHECK_MSG(same ? same_intact(fd, usage, 3) : host_file_intact(fd),
              "cgroup_close closed or moved the host's file on %d", fd);
    CHECK_EQ_INT(count_fds(usage), same);
    close(fd);
}

static void test_cgroup_kept(void)
{
    cgroup_replaced("app", 0);
}

static void test_cgroup_same_file(void)
{
    cgroup_replaced("same", 1);
}

/* How many of this process's descriptors are memtrim's kind (pid's /proc files, cgroup
 * files, an eventfd with memtrim's stamp), their numbers and targets into what. */
static int memtrim_fds(pid_t pid, int except, char *what, size_t size)
{
    char proc[64];
    int n = snprintf(proc, sizeof(proc), "/proc/%ld/", (long)pid), count = 0;
    size_t w = 0;
    what[0] = 0;
    for (int fd = 0; fd < 1024; fd++) {
        char link[64], to[512];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t k = readlink(link, to, sizeof(to) - 1);
        if (k <= 0 || fd == except)
            continue;
        to[k] = 0;
        int ours = (strncmp(to, proc, (size_t)n) == 0 && strcmp(to + n, "fd") != 0) ||
                   strstr(to, "/sys/fs/cgroup/") != NULL ||
                   (strcmp(to, "anon_inode:[eventfd]") == 0 &&
                    fcntl(fd, F_GETSIG) == MT_FDID_STAMP);
        if (ours && w < size) {
            count++;
            w += (size_t)snprintf(what + w, size - w, " %d:%s", fd, to);
        }
    }
    return count;
}

/* A running instance's kept descriptors in a forked child: none left (the atfork child
 * closed each, checked there first), except a number the host took before the fork. */
static void test_fork_child_keeps_none(void)
{
    if (harness_under_valgrind()) /* tests/skips.txt: valgrind test_fdid:test_fork_child_keeps_none */
        SKIP("the child leaves its parent's instance on purpose, which valgrind calls a leak");
    struct memtrim *mt = start("{\"HttpPort\": 0, \"Database\": \"\"}");
    if (!mt)
        return;
    struct mt_counters c;
    WAIT_FOR((mt_counters_get(mt, &c), c.housekeeper_ticks >= 1), 20); /* its probes ran */
    char mine[2048], status[64];
    int in_parent = memtrim_fds(getpid(), -1, mine, sizeof(mine));
    printf("the parent's:%s\n", mine);
    /* the control: the parent holds them (the pressure thread's statm and wake, probe.c's
     * three, the cgroup's files where there is a cgroup) */
    CHECK_MSG(in_parent >= 3, "%d of memtrim's descriptors in the parent:%s", in_parent, mine);
    snprintf(status, sizeof(status), "/proc/%ld/status", (long)getpid());
    int taken = find_fd(status); /* probe.c's: the host takes its number before the fork */
    CHECK_MSG(taken >= 0 && take_number(taken, "host-forked") == 0, "no %s kept", status);
    /* and probe.c's stat: the host opens that very file on its number (the child's
     * handler must tell the host's description from memtrim's, the file being the same) */
    char stat_path[64];
    snprintf(stat_path, sizeof(stat_path), "/proc/%ld/stat", (long)getpid());
    int same = find_exact(stat_path);
    CHECK_MSG(same >= 0 && take_same(same, stat_path, O_RDONLY, 2) == 0, "no %s kept",
              stat_path);
    int p[2];
    CHECK_EQ_INT(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        char what[2048], line[2100];
        int left = memtrim_fds(getppid(), same, what, sizeof(what));
        int n = snprintf(line, sizeof(line), "%d %d %d%s", left, host_file_intact(taken),
                         same_intact(same, stat_path, 2), what);
        _exit(write(p[1], line, (size_t)n) == n ? 0 : 1);
    }
    close(p[1]);
    char got[2100] = "";
    ssize_t k = read(p[0], got, sizeof(got) - 1);
    got[k > 0 ? k : 0] = 0;
    close(p[0]);
    int st = -1;
    CHECK_EQ_INT(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int left = -1, intact = 0, same_kept = 0;
    CHECK_MSG(sscanf(got, "%d %d %d", &left, &intact, &same_kept) == 3 && left == 0,
              "the child still holds its parent's: %s", got);
    CHECK_MSG(intact == 1, "the host's file on %d was closed in the child: %s", taken, got);
    CHECK_MSG(same_kept == 1, "the host's own %s on %d was closed in the child: %s", stat_path,
              same, got);
    CHECK(same_intact(same, stat_path, 2));
    CHECK(host_file_intact(taken)); /* and in the parent */
    mt_destroy(mt);
    CHECK(host_file_intact(taken));
    CHECK(same_intact(same, stat_path, 2));
    close(taken);
    close(same);
}

int main(void)
{
    CHECK_EQ_INT(harness_tmpdir(tmp, sizeof(tmp), "fdid"), 0);
    RUN(test_kinds);
    RUN(test_kept);
    RUN(test_same_file);
    RUN(test_probe_statm);
    RUN(test_probe_same_file);
    RUN(test_cgroup_kept);
    RUN(test_cgroup_same_file);
    RUN(test_fork_child_keeps_none);
    harness_rmtree(tmp);
    return harness_end();
}
