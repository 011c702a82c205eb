/* test_proctree.c - the Program globs, and the ancestor that holds memtrim's port (real
 * sockets, real forked processes, a real thread named as memtrim names its threads). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "proctree.h"

static void test_match(void)
{
    const char *exe = "/usr/local/bin/memtrim-demo", *comm = "memtrim-demo";

    CHECK(proctree_match("", exe, comm)); /* no Program: every process */
    CHECK(proctree_match(NULL, exe, comm));
    CHECK(proctree_match("memtrim-demo", exe, comm));                /* the basename */
    CHECK(proctree_match("/usr/local/bin/memtrim-demo", exe, comm)); /* the path */
    CHECK(proctree_match("memtrim-*", exe, comm));
    CHECK(proctree_match("*/bin/memtrim-demo", exe, comm));
    CHECK(proctree_match("/usr/*", exe, comm)); /* '*' crosses '/' in a path */
    CHECK(proctree_match("memtrim-de?o", exe, comm));
    CHECK(proctree_match("memtrim-[a-d]emo", exe, comm));
    CHECK(!proctree_match("memtrim", exe, comm)); /* whole names, not substrings */
    CHECK(!proctree_match("demo", exe, comm));
    CHECK(!proctree_match("bash", exe, comm));
    CHECK(!proctree_match("/usr/bin/memtrim-demo", exe, comm));
    CHECK(!proctree_match("Memtrim-demo", exe, comm)); /* case matters, as in file names */
    /* a list: any of its lines */
    CHECK(proctree_match("bash\nsh\nmemtrim-demo", exe, comm));
    CHECK(proctree_match("bash\n*/memtrim-demo", exe, comm));
    CHECK(!proctree_match("bash\nsh\ntime", exe, comm));
    CHECK(!proctree_match("\n\n", exe, comm)); /* empty lines name nothing */
    /* comm: a script started through its #! line has the script's name as comm */
    CHECK(proctree_match("start.sh", "/usr/bin/bash", "start.sh"));
    CHECK(!proctree_match("start.sh", "/usr/bin/bash", "bash"));
    /* comm is cut to 15 characters by the kernel: the exe's basename still matches whole */
    CHECK(proctree_match("orthanc-server-long", "/opt/orthanc-server-long", "orthanc-server-"));
    /* nothing readable: only "" matches */
    CHECK(!proctree_match("*x", "", ""));
    CHECK(proctree_match("*", "", "x"));
}

static void test_self(void)
{
    char exe[4096], comm[64];
    proctree_self(exe, sizeof(exe), comm, sizeof(comm));
    CHECK_CONTAINS(exe, "/test_proctree");
    CHECK(strcmp(comm, "test_proctree") == 0);
    CHECK(proctree_match("test_proctree", exe, comm));
    CHECK(proctree_match("*/tests/*", exe, comm) || proctree_match("*/test_proctree", exe, comm));
    proctree_comm(getpid(), comm, sizeof(comm));
    CHECK(strcmp(comm, "test_proctree") == 0);
    proctree_comm(0x7ffffff0, comm, sizeof(comm)); /* no such process */
    CHECK(strcmp(comm, "?") == 0);
}

/* A listening socket on loopback (v4 or v6), its port in *port; -1 when not possible. */
static int listen_on(int family, int *port)
{
    struct sockaddr_storage a = {0};
    socklen_t len;
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&a;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a;
        in6->sin6_family = AF_INET6;
        in6->sin6_addr = in6addr_loopback;
        len = sizeof(*in6);
    }
    if (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&a)->sin_port
                                    : ((struct sockaddr_in6 *)&a)->sin6_port);
    return fd;
}

/*
 * Ask proctree_port_holder from a child `depth` generations below this
 * process. Returns what it answered: 1 with *holder, or 0; -1 on failure.
 */
static int holder_from_descendant(int port, int depth, pid_t *holder)
{
    int pfd[2];
    if (pipe(pfd) != 0)
        return -1;
    pid_t child = fork();
    if (child < 0)
        return -1;
    if (child == 0) {
        close(pfd[0]);
        for (int d = 1; d < depth; d++) { /* go deeper: each level waits for the next */
            pid_t c = fork();
            if (c < 0)
                _exit(2);
            if (c > 0) {
                int st;
                waitpid(c, &st, 0);
                _exit(0);
            }
        }
        pid_t who = 0;
        char comm[64];
        long answer[2] = {proctree_port_holder(port, &who, comm, sizeof(comm)), 0};
        answer[1] = who;
        if (write(pfd[1], answer, sizeof(answer)) != (ssize_t)sizeof(answer))
            _exit(3);
        _exit(0);
    }
    close(pfd[1]);
    long answer[2] = {-1, 0};
    ssize_t n = read(pfd[0], answer, sizeof(answer));
    close(pfd[0]);
    int st;
    waitpid(child, &st, 0);
    if (n != (ssize_t)sizeof(answer))
        return -1;
    *holder = (pid_t)answer[1];
    return (int)answer[0];
}

static int stop_pipe[2];

static void *memtrim_like_thread(void *arg)
{
    char c;
    (void)arg;
    pthread_setname_np(pthread_self(), "memtrim-hk");
    if (read(stop_pipe[0], &c, 1) < 0)
        return NULL;
    return NULL;
}

static void test_port_holder(void)
{
    pthread_t t;
    pid_t holder = 0;
    int port4 = 0, port6 = 0;
    int fd4 = listen_on(AF_INET, &port4), fd6 = listen_on(AF_INET6, &port6);
    char name[32] = "";

    CHECK(fd4 >= 0);
    /* the port is ours, but this process runs no memtrim thread yet: a genuine clash */
    CHECK_EQ_INT(holder_from_descendant(port4, 1, &holder), 0);

    CHECK_EQ_INT(pipe(stop_pipe), 0);
    CHECK_EQ_INT(pthread_create(&t, NULL, memtrim_like_thread, NULL), 0);
    /* wait until the thread has its name (a condition, not a sleep) */
    for (int i = 0; i < 100000 && strcmp(name, "memtrim-hk") != 0; i++) {
        pthread_getname_np(t, name, sizeof(name));
        sched_yield();
    }
    CHECK(strcmp(name, "memtrim-hk") == 0);

    /* a child, and a grandchild, find this process */
    holder = 0;
    CHECK_EQ_INT(holder_from_descendant(port4, 1, &holder), 1);
    CHECK_EQ_INT(holder, getpid());
    holder = 0;
    CHECK_EQ_INT(holder_from_descendant(port4, 3, &holder), 1);
    CHECK_EQ_INT(holder, getpid());
    if (fd6 >= 0) {
        holder = 0;
        CHECK_EQ_INT(holder_from_descendant(port6, 2, &holder), 1);
        CHECK_EQ_INT(holder, getpid());
    } else {
        SKIP_PART("ipv6", "no IPv6 loopback here, the tcp6 table is not exercised");
    }
    /* the same from /proc/net/tcp{,6}, where sock_diag is refused */
    proctree_no_netlink = 1;
    holder = 0;
    CHECK_EQ_INT(holder_from_descendant(port4, 2, &holder), 1);
    CHECK_EQ_INT(holder, getpid());
    if (fd6 >= 0) {
        holder = 0;
        CHECK_EQ_INT(holder_from_descendant(port6, 1, &holder), 1);
        CHECK_EQ_INT(holder, getpid());
    }
    proctree_no_netlink = 0;
    /* this process asking about its own port: it is nobody's ancestor of itself */
    CHECK_EQ_INT(proctree_port_holder(port4, &holder, name, sizeof(name)), 0);
    /* a port nobody listens on */
    close(fd4);
    CHECK_EQ_INT(holder_from_descendant(port4, 1, &holder), 0);
    CHECK_EQ_INT(proctree_port_holder(0, &holder, name, sizeof(name)), 0);
    CHECK_EQ_INT(proctree_port_holder(70000, &holder, name, sizeof(name)), 0);
    if (fd6 >= 0)
        close(fd6);

    CHECK_EQ_INT(write(stop_pipe[1], "x", 1), 1);
    pthread_join(t, NULL);
    close(stop_pipe[0]);
    close(stop_pipe[1]);
}

/* A holder that is not an ancestor (a sibling, here the child) is not reported. */
static void test_holder_not_ancestor(void)
{
    int port = 0, ready[2], stop[2];
    pid_t holder = 0;
    char comm[64], c;

    CHECK_EQ_INT(pipe(ready), 0);
    CHECK_EQ_INT(pipe(stop), 0);
    pid_t child = fork();
    if (child == 0) {
        int fd = listen_on(AF_INET, &port);
        if (write(ready[1], &port, sizeof(port)) != (ssize_t)sizeof(port) || fd < 0)
            _exit(1);
        if (read(stop[0], &c, 1) < 0)
            _exit(1);
        _exit(0);
    }
    CHECK(child > 0);
    CHECK_EQ_INT(read(ready[0], &port, sizeof(port)), (long)sizeof(port));
    CHECK(port > 0);
    CHECK_EQ_INT(proctree_port_holder(port, &holder, comm, sizeof(comm)), 0);
    CHECK_EQ_INT(write(stop[1], "x", 1), 1);
    int st;
    waitpid(child, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(ready[0]);
    close(ready[1]);
    close(stop[0]);
    close(stop[1]);
}

int main(void)
{
    RUN(test_match);
    RUN(test_self);
    RUN(test_port_holder);
    RUN(test_holder_not_ancestor);
    return harness_end();
}
