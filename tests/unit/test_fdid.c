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

/* cgroup.c's kept descriptors: replaced by a host's file, neither read nor closed. */
static void test_cgroup_kept(void)
{
    struct cgroup_info ci;
    struct mt_cheap c;
    harness_put(tmp, "sys/fs/cgroup/memory/app/memory.limit_in_bytes", "314572800\n");
    harness_put(tmp, "sys/fs/cgroup/memory/app/memory.usage_in_bytes", "104857600\n");
    harness_put(tmp, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    const char *cg = "11:memory:/app\n";
    const char *mounts = "35 25 0:31 / /sys/fs/cgroup/memory rw,relatime shared:15 - cgroup "
                         "cgroup rw,memory\n";
    CHECK_EQ_INT(cgroup_lookup(cg, mounts, tmp, &ci), 0);
    memset(&c, 0, sizeof(c));
    cgroup_read(&ci, &c);
    CHECK_EQ_INT(c.cgroup_usage_bytes, 104857600);
    int fd = find_fd("app/memory.usage_in_bytes");
    CHECK_MSG(fd >= 0, "cgroup.c keeps no descriptor on memory.usage_in_bytes");
    if (fd < 0)
        return;
    CHECK_EQ_INT(take_number(fd, "host-cgroup"), 0);
    memset(&c, 0, sizeof(c));
    cgroup_read(&ci, &c); /* reopens its own file */
    CHECK_EQ_INT(c.cgroup_usage_bytes, 104857600);
    CHECK(host_file_intact(fd));
    int again = find_fd("app/memory.usage_in_bytes");
    CHECK(again >= 0 && again != fd);
    cgroup_close(&ci); /* closes its own, leaves the host's */
    CHECK(host_file_intact(fd));
    CHECK_EQ_INT(find_fd("app/memory.usage_in_bytes"), -1);
    close(fd);
}

/* How many of this process's descriptors are memtrim's kind (pid's /proc files, cgroup
 * files, an eventfd with memtrim's stamp), their numbers and targets into what. */
static int memtrim_fds(pid_t pid, char *what, size_t size)
{
    char proc[64];
    int n = snprintf(proc, sizeof(proc), "/proc/%ld/", (long)pid), count = 0;
    size_t w = 0;
    what[0] = 0;
    for (int fd = 0; fd < 1024; fd++) {
        char link[64], to[512];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t k = readlink(link, to, sizeof(to) - 1);
        if (k <= 0)
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
    struct memtrim *mt = start("{\"HttpPort\": 0, \"Database\": \"\"}");
    if (!mt)
        return;
    struct mt_counters c;
    WAIT_FOR((mt_counters_get(mt, &c), c.housekeeper_ticks >= 1), 20); /* its probes ran */
    char mine[2048], status[64];
    int in_parent = memtrim_fds(getpid(), mine, sizeof(mine));
    printf("the parent's:%s\n", mine);
    /* the control: the parent holds them (the pressure thread's statm and wake, probe.c's
     * three, the cgroup's files where there is a cgroup) */
    CHECK_MSG(in_parent >= 3, "%d of memtrim's descriptors in the parent:%s", in_parent, mine);
    snprintf(status, sizeof(status), "/proc/%ld/status", (long)getpid());
    int taken = find_fd(status); /* probe.c's: the host takes its number before the fork */
    CHECK_MSG(taken >= 0 && take_number(taken, "host-forked") == 0, "no %s kept", status);
    int p[2];
    CHECK_EQ_INT(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        char what[2048], line[2100];
        int left = memtrim_fds(getppid(), what, sizeof(what));
        int n = snprintf(line, sizeof(line), "%d %d%s", left, host_file_intact(taken), what);
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
    int left = -1, intact = 0;
    CHECK_MSG(sscanf(got, "%d %d", &left, &intact) == 2 && left == 0,
              "the child still holds its parent's: %s", got);
    CHECK_MSG(intact == 1, "the host's file on %d was closed in the child: %s", taken, got);
    CHECK(host_file_intact(taken)); /* and in the parent */
    mt_destroy(mt);
    CHECK(host_file_intact(taken));
    close(taken);
}

int main(void)
{
    CHECK_EQ_INT(harness_tmpdir(tmp, sizeof(tmp), "fdid"), 0);
    RUN(test_kinds);
    RUN(test_kept);
    RUN(test_probe_statm);
    RUN(test_cgroup_kept);
    RUN(test_fork_child_keeps_none);
    harness_rmtree(tmp);
    return harness_end();
}
