/*
 * group_host.c - this process's instance for a host adapter whose process forks
 * (group_host.h; plugin/host_preload.c, LD_PRELOAD): its state (group_host_int.h),
 * its start, report and stop, the fork hooks, and the port checks the room's other
 * host files share.
 *
 * After fork() the child has none of the instance's threads: it forgets the instance
 * (never touching it), closes the inherited listening socket so that the port stays
 * the parent's, and with FollowFork starts a new instance from a "memtrim-fork" thread
 * (group_follow.c), which waits while the parent still holds the port. Worker groups
 * (FollowFork with a fixed HttpPort, Group true): the process that serves is the
 * group's leader; its fork hooks make a channel for each child (group_fork.c), and the
 * child's thread starts it as a member on that channel (no port, no store). A child
 * that a member forks (or that this process forks between its roles: before its member
 * started, after its leader left) waits on a channel to it without starting anything,
 * and joins if its parent takes the group over (host.adopt_*): a daemonized master's
 * workers. Named groups (GroupName): a "memtrim-named" thread elects (group_elect.c).
 *
 * Threads: a start on the host's thread that starts memtrim, the stop from the
 * library's destructor (after it joined the restart thread), the fork hooks on the
 * thread that forks. Locks: host.lock (group_host_int.h), held across fork().
 */
#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mt_alloc.h"
#include "group.h"
#include "group_host.h"
#include "group_host_int.h"
#include "proctree.h"

struct group_host_state host = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .cond = PTHREAD_COND_INITIALIZER,
    .member_fd = -1,
    .adopt_pair = {-1, -1},
    .named = {.dirfd = -1, .lock_fd = -1, .listen_fd = -1},
    .named_chan = -1,
};

int group_host_named(const struct mt_config *cfg)
{
    return cfg->enabled && cfg->group_name[0] != '\0';
}

int group_host_forks_join(const struct mt_config *cfg)
{
    return cfg->follow_fork && cfg->group && cfg->http_port != 0;
}

/* ---- the port ------------------------------------------------------------- */

static int socket_port(int fd)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof(a);
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    if (a.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&a)->sin_port);
    if (a.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
    return -1;
}

/* Close the child's copy of the parent's listening socket (bound to port). */
static void close_inherited_listener(int port)
{
    DIR *d = port > 0 ? opendir("/proc/self/fd") : NULL;
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name), listening = 0;
        socklen_t len = sizeof(listening);
        if (fd <= 2 || fd == dirfd(d))
            continue;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening &&
            socket_port(fd) == port)
            close(fd);
    }
    closedir(d);
}

int group_host_port_free(const struct mt_config *cfg)
{
    struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    char port[16];
    int ok = 1;

    if (cfg->http_port == 0)
        return 1;
    snprintf(port, sizeof(port), "%d", cfg->http_port);
    if (getaddrinfo(cfg->http_bind, port, &hints, &ai) != 0 || !ai)
        return 1; /* let mt_create say what is wrong */
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        ok = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno != EADDRINUSE;
        close(fd);
    }
    freeaddrinfo(ai);
    return ok;
}

int group_host_held_by_ancestor(const struct mt_config *cfg)
{
    pid_t holder;
    char comm[64], self[64];

    if (cfg->http_port == 0 || group_host_port_free(cfg) ||
        !proctree_port_holder(cfg->http_port, &holder, comm, sizeof(comm)))
        return 0;
    proctree_comm(getpid(), self, sizeof(self));
    mt_log(MT_LOG_INFO, "preload",
           "not started in pid %ld (%s): port %d is served by memtrim in its ancestor pid %ld "
           "(%s); set Program to choose the process memtrim belongs in",
           (long)getpid(), self, cfg->http_port, (long)holder, comm);
    return 1;
}

/* ---- waiting for the exit ------------------------------------------------ */

int64_t group_host_mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int group_host_wait_exiting_locked(int ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_nsec += (long)ms * 1000000L;
    deadline.tv_sec += deadline.tv_nsec / 1000000000L;
    deadline.tv_nsec %= 1000000000L;
    while (!host.exiting && pthread_cond_timedwait(&host.cond, &host.lock, &deadline) == 0)
        ; /* woken for leader_gone, or spuriously: on to the deadline */
    return host.exiting;
}

int group_host_wait_exiting(int ms)
{
    pthread_mutex_lock(&host.lock);
    int stop = group_host_wait_exiting_locked(ms);
    pthread_mutex_unlock(&host.lock);
    return stop;
}

int group_host_exiting(void)
{
    pthread_mutex_lock(&host.lock);
    int stop = host.exiting;
    pthread_mutex_unlock(&host.lock);
    return stop;
}

/* The member's group thread: the leader's end closed. */
void group_host_leader_gone(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&host.lock);
    host.leader_gone = 1;
    pthread_cond_broadcast(&host.cond);
    pthread_mutex_unlock(&host.lock);
}

/* ---- fork ------------------------------------------------------------------ */

static void host_prepare_fork(void)
{
    pthread_mutex_lock(&host.lock);
    group_fork_prepare(host.ops->group(host.instance)); /* a leader: the child's channel */
    if (host.adopting && !host.instance && host.adopt_n < MT_GROUP_MAX &&
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, host.adopt_pair) != 0)
        host.adopt_pair[0] = host.adopt_pair[1] = -1; /* between roles: the child waits for us */
}

static void host_parent_after_fork(void)
{
    group_fork_parent(host.ops->group(host.instance));
    if (host.adopt_pair[0] >= 0) {
        close(host.adopt_pair[1]);
        host.adopt_fds[host.adopt_n++] = host.adopt_pair[0];
    }
    host.adopt_pair[0] = host.adopt_pair[1] = -1;
    pthread_mutex_unlock(&host.lock);
}

/* The child's copies of what is the parent's: the instance (forgotten, not touched, but
 * the group's descriptors it inherited closed), the adoption's and the named group's.
 * Under host.lock; returns the child's channel to its leader (-1 none), *waits set. */
static int forget_parent(void *old, int *waits)
{
    host.instance = NULL;
    host.restart_running = 0;
    host.leader_gone = 0;
    pthread_cond_init(&host.cond, NULL); /* a waiter of the parent's is not here */
    *waits = 0;
    int fd = old ? group_fork_child(host.ops->group(old), waits) : -1;
    if (host.adopt_pair[1] >= 0) { /* forked between roles: a channel to this parent */
        close(host.adopt_pair[0]);
        fd = host.adopt_pair[1];
        *waits = 1;
    }
    host.adopt_pair[0] = host.adopt_pair[1] = -1;
    for (int i = 0; i < host.adopt_n; i++)
        close(host.adopt_fds[i]); /* the parent's */
    host.adopt_n = 0;
    host.adopting = 0;
    mt_named_fork_child(&host.named); /* the parent's lock and socket: never a child's */
    if (host.named_chan >= 0) {
        close(host.named_chan);
        host.named_chan = -1;
    }
    return fd;
}

static void host_child_after_fork(void)
{
    void *old = host.instance;
    int waits;
    int fd = forget_parent(old, &waits);
    pthread_mutex_unlock(&host.lock);
    if (old)
        close_inherited_listener(host.ops->http_port(old));
    if (!host.cfg.follow_fork || !host.json) { /* !json: a start that failed, nothing runs */
        if (fd >= 0)
            close(fd);
        return;
    }
    host.ops->after_fork_child(); /* the core's own atfork handler did it too; be sure */
    pthread_mutex_lock(&host.lock);
    host.forked_ms = group_host_mono_ms();
    host.member_fd = fd >= 0 && mt_fdid_take(fd, &host.member_id) != 0 ? (close(fd), -1) : fd;
    host.member_waits = waits;
    /* Until its member starts, children it forks wait on a channel to it (a daemon forks
     * its workers at once). */
    host.adopting = fd >= 0 && !group_host_named(&host.cfg);
    host.restart_running = mt_thread_start(&host.restart_thread, "memtrim-fork",
                                           group_follow_main, NULL) == 0;
    if (!host.restart_running && host.member_fd >= 0) {
        close(host.member_fd);
        host.member_fd = -1;
    }
    pthread_mutex_unlock(&host.lock);
}

static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

static void hooks_install_once(void)
{
    pthread_atfork(host_prepare_fork, host_parent_after_fork, host_child_after_fork);
}

/* Once per process: a start retried after a failed one (memtrim_attach) must not install
 * them twice (a second prepare would lock host.lock again: the next fork would hang). */
static void install_fork_hooks(void)
{
    pthread_once(&hooks_once, hooks_install_once);
}

/* What a start hands the room, under host.lock: a fork on another host thread meanwhile
 * (memtrim_attach runs beside the host's threads) gives its child all or nothing of it. */
static void host_set(const struct group_host_ops *ops, const char *json,
                     const struct mt_config *cfg)
{
    pthread_mutex_lock(&host.lock);
    host.ops = ops;
    host.json = json;
    if (cfg)
        host.cfg = *cfg;
    pthread_mutex_unlock(&host.lock);
}

/* ---- start, report, stop ----------------------------------------------------- */

int group_host_start_named(const struct group_host_ops *ops, const char *json,
                           const struct mt_config *cfg, char **err)
{
    host_set(ops, json, cfg);
    /* A named group: the election runs on its own thread (it may wait for a leader). */
    if (mt_named_open(&host.named, &host.cfg, err) != 0) {
        if (!*err)
            *err = mt_strdup("GroupName: no directory");
        host_set(ops, NULL, NULL); /* the caller frees json: a child must not read it */
        return -EINVAL;
    }
    ops->fork_hooks_install(); /* the core's handlers before ours (their order: core.h) */
    install_fork_hooks();
    pthread_mutex_lock(&host.lock);
    host.restart_running = mt_thread_start(&host.restart_thread, "memtrim-named",
                                           group_elect_main, NULL) == 0;
    pthread_mutex_unlock(&host.lock);
    if (!host.restart_running) {
        char buf[300];
        snprintf(buf, sizeof(buf), "GroupName %s: cannot start its thread", cfg->group_name);
        *err = mt_strdup(buf);
        /* Nothing runs: leave nothing that says it does (memtrim_attach would answer
         * "already loaded"), nor the named group's directory, lock and socket open; nor
         * json, which the caller frees, for a forked child's hook to start from. */
        pthread_mutex_lock(&host.lock);
        mt_named_close(&host.named);
        host.json = NULL;
        pthread_mutex_unlock(&host.lock);
        return -EAGAIN;
    }
    return 0;
}

void group_host_start(const struct group_host_ops *ops, const char *json,
                      const struct mt_config *cfg, void *mt)
{
    host_set(ops, json, cfg);
    if (group_host_forks_join(cfg)) { /* before it is published: a fork hook reads its group */
        char *gerr = NULL;
        if (ops->lead(mt, -1, NULL, 1, &gerr) != 0)
            mt_log(MT_LOG_WARNING, "preload", "%s; forked children will not join a group",
                   gerr ? gerr : "group: cannot lead");
        free(gerr);
    }
    pthread_mutex_lock(&host.lock);
    host.instance = mt;
    pthread_mutex_unlock(&host.lock);
    ops->serves(mt);
    install_fork_hooks();
}

int group_host_report(char *buf, size_t size, int *running)
{
    pthread_mutex_lock(&host.lock);
    *running = host.restart_running;
    int rc = host.instance ? host.ops->http_address(host.instance, buf, size) : -ESRCH;
    pthread_mutex_unlock(&host.lock);
    return rc;
}

void group_host_stop(void)
{
    pthread_mutex_lock(&host.lock);
    host.exiting = 1;
    host.exiting_ms = group_host_mono_ms();
    pthread_cond_broadcast(&host.cond); /* a member's restart thread waits on it */
    int joining = host.restart_running;
    host.restart_running = 0;
    pthread_mutex_unlock(&host.lock);
    if (joining)
        pthread_join(host.restart_thread, NULL);
    pthread_mutex_lock(&host.lock);
    void *mt = host.instance;
    host.instance = NULL;
    /* A named leader withdraws its socket first: newcomers wait for the next leader
     * rather than queue at a socket nobody will accept on. */
    mt_named_unpublish(&host.named);
    pthread_mutex_unlock(&host.lock);
    if (mt) {
        host.ops->withdraw(mt);
        host.ops->destroy(mt);
    }
    pthread_mutex_lock(&host.lock);
    mt_named_close(&host.named); /* drops the lock: a member takes the role over */
    pthread_mutex_unlock(&host.lock);
}
