/*
 * host_preload.c - starts memtrim inside an unmodified program:
 * LD_PRELOAD=libmemtrim.so MEMTRIM_CONFIG=<file or inline JSON> ./server.
 * Without MEMTRIM_CONFIG it does nothing; a configuration error is printed
 * once and the program runs on without memtrim. Every process of a tree
 * inherits LD_PRELOAD: memtrim starts only in the one Program names (others
 * stay silent), and a process whose ancestor already serves memtrim's port
 * says so once (info) and stays off; another program on the port is an error.
 *
 * Threads: the constructor runs on the program's main thread before main(),
 * the destructor at exit (return from main, exit(), a handled SIGTERM that
 * ends in exit), the fork handlers on the thread that forks. After fork() the
 * child has none of the instance's threads: it forgets the instance (never
 * touching it), closes the inherited listening socket so that the port stays
 * the parent's, and with FollowFork starts a new instance from a
 * "memtrim-fork" thread, which waits while the parent still holds the port.
 * Worker groups (FollowFork with a fixed HttpPort, Group true): the process
 * that serves is the group's leader; its fork handlers make a channel for
 * each child (mt_group_fork_*), and the child's "memtrim-fork" thread starts
 * it as a member on that channel (no port, no store), then waits: when the
 * leader's end closes (it exited), the member stops and, first in the join
 * order, takes the port over as the new leader (docs/groups.md). A child
 * that a member forks (or that this process forks between its roles: before
 * its member started, after its leader left) waits on a channel to it without
 * starting anything, and joins if its parent takes the group over (the
 * adopt_* state below, mt_group_adopt): a daemonized master's workers.
 * Named groups (GroupName, for processes started separately): a
 * "memtrim-named" thread elects (core/group/named.c): the winner holds the
 * group's lock for its life, listens on the group's socket and starts the
 * full instance; the others connect and run as members on that channel; when
 * their leader's end closes they elect again (one takes over, the others join
 * it). The thread ends once this process leads, or for good on a refusal.
 * Locks: preload_lock guards preload_instance and the restart thread's state;
 * it is held across fork() (prepare/parent/child handlers), never across a
 * start or a stop; it also guards the named group's rendezvous (named,
 * named_chan), so that a forked child closes every copy of its descriptors. The PortFile state is written by whichever of the
 * constructor and the restart thread started memtrim in this process (the
 * pid it records tells a forked child's inherited copy apart) and read by the
 * destructor after it joined that thread.
 * SPDX-License-Identifier: MIT
 */
#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mt_alloc.h"
#include "config.h"
#include "api.h"
#include "core.h"
#include "named.h"
#include "proctree.h"
#include "memtrim.h"

#define CONFIG_FILE_MAX (1024 * 1024)
#define FORK_RETRY_MS 100    /* the child retries a taken port this often... */
#define FORK_RETRY_MAX 50    /* ...for 5 s: a daemon's parent exits well within that */
/* A forked child starts its member (or instance) only once it has lived this long: a
 * child that exits or execs sooner (a shell's, a CGI server's, a test runner's) pays
 * the fork handlers' few system calls and one thread, not a member's start and stop
 * (#31 F13: 500 fork/exit cycles cost 8-13x without memtrim). */
#define FORK_JOIN_DELAY_MS 200
#define NAMED_RETRY_MS 20    /* a named group's role being taken: ask again this often... */
#define NAMED_RETRY_MAX 500  /* ...for 10 s, then: */
#define NAMED_RETRY_SLOW_MS 1000 /* once a second, for as long as the lock stays held */
#define NAMED_REFUSALS_WARN 5 /* channels closed before a welcome, in a row: said once... */
#define NAMED_REFUSED_MAX_MS 5000 /* ...and asked again on a back-off up to this (#31 F8) */

static pthread_mutex_t preload_lock = PTHREAD_MUTEX_INITIALIZER;
static int wait_exiting(int ms); /* 1 once the process exits (preload_lock not held) */
static struct memtrim *preload_instance; /* guarded by preload_lock */
static char *preload_json;               /* the configuration, kept for FollowFork */
static struct mt_config preload_cfg;     /* written by the constructor only */
static pthread_t restart_thread;         /* guarded by preload_lock, with: */
static int restart_running, exiting;
static int member_fd = -1;              /* a forked child's channel to its leader */
static struct mt_fdid member_id;        /* ...its identity: a host's closefrom frees it */
static int64_t forked_ms, exiting_ms;   /* when this child was forked, when its exit began */
static int member_waits;                /* ...which leads to a member: wait to be adopted */
/* A member whose leader left, until it leads (or stays off): the channels of the children
 * forked by it meanwhile or while it was a member, adopted by its new leader instance. */
static int adopting, adopt_n, adopt_fds[MT_GROUP_MAX];
static int adopt_pair[2] = {-1, -1};    /* made in the fork prepare handler */
static int leader_gone;                 /* the leader's end closed */
static pthread_cond_t preload_cond = PTHREAD_COND_INITIALIZER; /* leader_gone or exiting */
static struct mt_named named = {.dirfd = -1, .lock_fd = -1, .listen_fd = -1}; /* GroupName's */
static int named_chan = -1; /* a named member's channel until its instance owns it */

static int named_wanted(const struct mt_config *cfg)
{
    return cfg->enabled && cfg->group_name[0] != '\0';
}

/* Forked children join this process's group: FollowFork on one fixed port. */
static int group_wanted(const struct mt_config *cfg)
{
    return cfg->follow_fork && cfg->group && cfg->http_port != 0;
}

/* MEMTRIM_CONFIG holds inline JSON (starts with '{') or a file path. */
static char *load_config(const char *value, char **err)
{
    const char *p = value;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    if (*p == '{')
        return mt_strdup(p);
    FILE *f = fopen(value, "re");
    if (!f) {
        char buf[600];
        snprintf(buf, sizeof(buf), "MEMTRIM_CONFIG: cannot read %.500s: %s", value,
                 strerror(errno));
        *err = mt_strdup(buf);
        return NULL;
    }
    char *text = mt_malloc(CONFIG_FILE_MAX + 1);
    size_t n = text ? fread(text, 1, CONFIG_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (!text || n > CONFIG_FILE_MAX) {
        free(text);
        *err = mt_strdup("MEMTRIM_CONFIG: file too large (over 1 MiB) or out of memory");
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* Only when this library was preloaded: a host that dlopens it starts it itself. */
static int preloaded(void)
{
    const char *lp = getenv("LD_PRELOAD");
    return lp && strstr(lp, "libmemtrim") != NULL;
}

/* ---- fork ---------------------------------------------------------------- */

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

/* 1 when HttpBind:HttpPort can be bound now (or the port is ephemeral). */
static int port_free(const struct mt_config *cfg)
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

/* ---- PortFile -------------------------------------------------------------- */

static char port_file[MT_CONFIG_STR_MAX + 32]; /* the file this process wrote, "" = none */
static pid_t port_file_pid;                    /* ...and the process that wrote it */

/* The PortFile pattern with %p = pid and %% = %; -1 when it does not fit. */
static int port_file_path(const char *pattern, pid_t pid, char *out, size_t size)
{
    size_t n = 0;
    for (const char *p = pattern; *p; p++) {
        char piece[24] = {*p, '\0'};
        if (p[0] == '%' && (p[1] == 'p' || p[1] == '%')) {
            if (*++p == 'p')
                snprintf(piece, sizeof(piece), "%ld", (long)pid);
        }
        size_t len = strlen(piece);
        if (n + len >= size)
            return -1;
        memcpy(out + n, piece, len);
        n += len;
    }
    out[n] = '\0';
    return 0;
}

/* Publish the port memtrim bound (HttpPort 0: the kernel's choice) for scripts. */
static void port_file_write(struct memtrim *mt)
{
    char path[sizeof(port_file)], tmp[sizeof(port_file) + 32];
    int ok;

    if (!preload_cfg.port_file[0] || !mt)
        return;
    if (port_file_path(preload_cfg.port_file, getpid(), path, sizeof(path)) != 0) {
        mt_log(MT_LOG_WARNING, "preload", "PortFile: the path is too long; no port file");
        return;
    }
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "we");
    ok = f && fprintf(f, "%d\n", mt_http_port(mt)) > 0;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) { /* rename: a reader never sees a half-written file */
        mt_log(MT_LOG_WARNING, "preload", "PortFile %s: cannot write it: %s", path,
               strerror(errno));
        unlink(tmp);
        return;
    }
    snprintf(port_file, sizeof(port_file), "%s", path);
    port_file_pid = getpid();
}

/* At stop: remove the port file when this process wrote it and it still names our port. */
static void port_file_remove(int port)
{
    char line[32];

    if (!port_file[0] || port_file_pid != getpid())
        return;
    FILE *f = fopen(port_file, "re");
    if (f && fgets(line, sizeof(line), f) && atoi(line) == port)
        unlink(port_file);
    if (f)
        fclose(f);
    port_file[0] = '\0';
}

/* ---- which process ------------------------------------------------------- */

/* Whether Program names this process; the one debug line when it does not. */
static int program_wanted(const struct mt_config *cfg)
{
    char exe[4096], comm[64];

    if (!cfg->program[0])
        return 1;
    proctree_self(exe, sizeof(exe), comm, sizeof(comm));
    if (proctree_match(cfg->program, exe, comm))
        return 1;
    mt_log(MT_LOG_DEBUG, "preload", "not started in pid %ld (%s, %s): Program does not name it",
           (long)getpid(), comm, exe[0] ? exe : "?");
    return 0;
}

/*
 * 1 when HttpPort is taken by memtrim in an ancestor (a shell, /usr/bin/time,
 * the parent of a forked child): not an error, said once at info level.
 */
static int held_by_ancestor(const struct mt_config *cfg)
{
    pid_t holder;
    char comm[64], self[64];

    if (cfg->http_port == 0 || port_free(cfg) ||
        !proctree_port_holder(cfg->http_port, &holder, comm, sizeof(comm)))
        return 0;
    proctree_comm(getpid(), self, sizeof(self));
    mt_log(MT_LOG_INFO, "preload",
           "not started in pid %ld (%s): port %d is served by memtrim in its ancestor pid %ld "
           "(%s); set Program to choose the process memtrim belongs in",
           (long)getpid(), self, cfg->http_port, (long)holder, comm);
    return 1;
}

/*
 * FollowFork in the child: wait (quietly) while the port is taken, then
 * start. A port that stays taken by memtrim in the parent (a preforking
 * server) is said once at info level; by anything else (several children),
 * it is reported once by mt_create; the program runs on without memtrim.
 */
/* 1 while pid runs (a zombie has closed its files: it does not). */
static int process_running(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')');
    return close_paren && close_paren[1] == ' ' && close_paren[2] != 'Z' && close_paren[2] != 'X';
}

/* The member's group thread: the leader's end closed. */
static void on_leader_gone(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&preload_lock);
    leader_gone = 1;
    pthread_cond_broadcast(&preload_cond);
    pthread_mutex_unlock(&preload_lock);
}

/*
 * A member of its parent's group until the leader goes; 1 when this process
 * should then try to take the port over (the caller goes on as a FollowFork
 * restart), 0 when it is done (exiting, or the member could not start).
 */
static int run_member(int fd)
{
    struct memtrim *mt = NULL;
    char *err = NULL;
    pid_t leader = getppid(); /* the process that forked us leads the group */
    int rc = mt_create_member(preload_json, fd, on_leader_gone, NULL, &mt, &err);
    free(err);
    if (rc != 0 || !mt) {
        fprintf(stderr, "memtrim: FollowFork: pid %ld did not join its parent's group (see "
                        "above); the program runs on without memtrim\n", (long)getpid());
        return 0;
    }
    pthread_mutex_lock(&preload_lock);
    preload_instance = mt;
    /* Children forked before the member started waited on channels to us: it watches them. */
    int held = mt_group_hold_pending(mt, adopt_fds, adopt_n);
    for (int i = held; i < adopt_n; i++)
        close(adopt_fds[i]);
    adopt_n = 0;
    adopting = 0;
    while (!leader_gone && !exiting)
        pthread_cond_wait(&preload_cond, &preload_lock);
    if (exiting) { /* the destructor stops preload_instance once it joined us */
        pthread_mutex_unlock(&preload_lock);
        return 0;
    }
    preload_instance = NULL;
    if (!named_wanted(&preload_cfg)) { /* its waiting children: adopted if it leads */
        adopting = 1;
        adopt_n += mt_group_take_pending(mt, adopt_fds + adopt_n, MT_GROUP_MAX - adopt_n);
    }
    pthread_mutex_unlock(&preload_lock);
    int index = mt_group_join_index(mt);
    mt_destroy(mt);
    if (named_wanted(&preload_cfg))
        return 2; /* the named group elects its next leader (named_main) */
    /* Until the leader is gone for good: the kernel re-parents us after it closed its
     * files, so its store's locks are released by then (at most 5 s). */
    for (int i = 0; i < 250 && (getppid() == leader || process_running(leader)); i++)
        if (wait_exiting(20))
            return 0; /* this process exits meanwhile: its exit must not wait 5 s for us */
    /* Members take over in their join order, 300 ms apart: the first binds the port,
     * the others then find it taken and stay off, without racing each other for it. */
    struct timespec pause = {0, FORK_RETRY_MS * 1000000L};
    for (int i = 0; i < 3 * (index > 1 ? (index - 1) % 16 : 0); i++) {
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&preload_lock);
        int stop = exiting;
        pthread_mutex_unlock(&preload_lock);
        if (stop)
            return 0;
    }
    if (!port_free(&preload_cfg)) {
        mt_log(MT_LOG_INFO, "preload", "pid %ld: the group's leader exited and port %d is "
                                       "served again; memtrim stays off in this process",
               (long)getpid(), preload_cfg.http_port);
        return 0;
    }
    return 1;
}

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Wait up to ms for exiting (under preload_lock); returns exiting. */
static int wait_exiting_locked(int ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_nsec += (long)ms * 1000000L;
    deadline.tv_sec += deadline.tv_nsec / 1000000000L;
    deadline.tv_nsec %= 1000000000L;
    while (!exiting && pthread_cond_timedwait(&preload_cond, &preload_lock, &deadline) == 0)
        ; /* woken for leader_gone, or spuriously: on to the deadline */
    return exiting;
}

static int wait_exiting(int ms)
{
    pthread_mutex_lock(&preload_lock);
    int stop = wait_exiting_locked(ms);
    pthread_mutex_unlock(&preload_lock);
    return stop;
}

/* Won the election: serve the port and the store, accept the members. 1 leads, 0 not. */
static int named_lead(void)
{
    struct memtrim *mt = NULL;
    char *err = NULL;
    /* A leader that was killed closes its descriptors one by one: its port may outlive
     * its lock a moment. */
    for (int i = 0; i < FORK_RETRY_MAX && !port_free(&preload_cfg); i++)
        if (wait_exiting(FORK_RETRY_MS))
            return 0;
    if (mt_create(preload_json, &api_routes, &mt, &err) != 0 || !mt) {
        fprintf(stderr, "memtrim: GroupName %s: pid %ld cannot lead the group (see above); "
                        "the program runs on without memtrim\n", preload_cfg.group_name,
                (long)getpid());
        free(err);
        pthread_mutex_lock(&preload_lock);
        mt_named_resign(&named); /* another member may take the role */
        pthread_mutex_unlock(&preload_lock);
        return 0;
    }
    free(err);
    err = NULL;
    pthread_mutex_lock(&preload_lock);
    int listen_fd = named.listen_fd;
    pthread_mutex_unlock(&preload_lock);
    if (mt_group_lead_named(mt, listen_fd, preload_cfg.group_name,
                            preload_cfg.follow_fork && preload_cfg.group, &err) != 0) {
        mt_log(MT_LOG_WARNING, "preload", "GroupName %s: %s; memtrim stops in this process",
               preload_cfg.group_name, err ? err : "cannot lead");
        free(err);
        mt_destroy(mt);
        pthread_mutex_lock(&preload_lock);
        mt_named_resign(&named);
        pthread_mutex_unlock(&preload_lock);
        return 0;
    }
    free(err);
    port_file_write(mt);
    pthread_mutex_lock(&preload_lock);
    if (exiting) { /* the destructor waits for us; it withdraws the socket after */
        pthread_mutex_unlock(&preload_lock);
        port_file_remove(mt_http_port(mt));
        mt_destroy(mt);
        return 0;
    }
    preload_instance = mt;
    pthread_mutex_unlock(&preload_lock);
    return 1;
}

/* Connected to the leader: run as a member on that channel. 1 joined, 0 not. */
static int named_join(int fd)
{
    struct memtrim *mt = NULL;
    char *err = NULL;
    int rc = mt_create_member(preload_json, fd, on_leader_gone, NULL, &mt, &err);
    free(err);
    pthread_mutex_lock(&preload_lock);
    named_chan = -1; /* the instance's (or closed) from here on */
    if (rc != 0 || !mt) {
        pthread_mutex_unlock(&preload_lock);
        fprintf(stderr, "memtrim: GroupName %s: pid %ld did not join the group (see above); "
                        "the program runs on without memtrim\n", preload_cfg.group_name,
                (long)getpid());
        return 0;
    }
    if (exiting) {
        pthread_mutex_unlock(&preload_lock);
        mt_destroy(mt);
        return 0;
    }
    preload_instance = mt;
    pthread_mutex_unlock(&preload_lock);
    mt_log(MT_LOG_DEBUG, "preload", "pid %ld joined the worker group %s", (long)getpid(),
           preload_cfg.group_name);
    return 1;
}

/* Elect until this process leads or is a member: 1, or 0 when memtrim stays off here. */
static int named_attempt(void)
{
    for (int tries = 0;; tries++) {
        int fd = -1;
        char *err = NULL;
        pthread_mutex_lock(&preload_lock);
        if (exiting) {
            pthread_mutex_unlock(&preload_lock);
            return 0;
        }
        int rc = mt_named_elect(&named, &fd, &err);
        if (rc == MT_NAMED_MEMBER)
            named_chan = fd; /* a fork from here on closes the child's copy */
        pthread_mutex_unlock(&preload_lock);
        if (rc == MT_NAMED_LEADER) {
            free(err);
            return named_lead();
        }
        if (rc == MT_NAMED_MEMBER) {
            free(err);
            return named_join(fd);
        }
        if (rc != -EAGAIN) {
            fprintf(stderr, "memtrim: not started: %s\n", err ? err : strerror(-rc));
            free(err);
            return 0;
        }
        /* The lock is held and nobody answers: a leader stopping slowly, or stopped
         * (SIGSTOP, a debugger); or the socket's backlog is full (*err says so). Ask fast
         * for 10 s, then once a second for as long as it lasts: giving up would leave this
         * process without memtrim until it restarts. */
        if (tries == NAMED_RETRY_MAX && err)
            mt_log(MT_LOG_WARNING, "preload", "%s (for %d s now); pid %ld asks again every "
                                              "second",
                   err, NAMED_RETRY_MAX * NAMED_RETRY_MS / 1000, (long)getpid());
        else if (tries == NAMED_RETRY_MAX)
            mt_log(MT_LOG_WARNING, "preload", "GroupName %s: the group's lock is held but "
                                              "nobody answered on its socket for %d s; pid %ld "
                                              "asks again every second",
                   preload_cfg.group_name, NAMED_RETRY_MAX * NAMED_RETRY_MS / 1000,
                   (long)getpid());
        free(err);
        if (wait_exiting(tries >= NAMED_RETRY_MAX ? NAMED_RETRY_SLOW_MS : NAMED_RETRY_MS))
            return 0;
    }
}

/*
 * The "memtrim-named" thread: elect; as a member, wait until the leader's end
 * closes, then elect again. Ends once this process leads (the instance stays
 * until exit), at exit, or when memtrim stays off here.
 */
static void *named_main(void *arg)
{
    int refusals = 0;
    (void)arg;
    for (;;) {
        struct memtrim *mt = NULL;
        pthread_mutex_lock(&preload_lock);
        while (preload_instance && !leader_gone && !exiting)
            pthread_cond_wait(&preload_cond, &preload_lock);
        if (exiting) { /* the destructor stops preload_instance once it joined us */
            pthread_mutex_unlock(&preload_lock);
            return NULL;
        }
        if (preload_instance && leader_gone) {
            mt = preload_instance;
            preload_instance = NULL;
        }
        leader_gone = 0;
        pthread_mutex_unlock(&preload_lock);
        if (mt) {
            /* Closed before its welcome: refused (the group is full, or not ours). */
            refusals = mt_group_join_index(mt) > 0 ? 0 : refusals + 1;
            mt_destroy(mt);
            mt_log(MT_LOG_INFO, "preload", "GroupName %s: the group's leader is gone; pid %ld "
                                           "takes part in choosing the next one",
                   preload_cfg.group_name, (long)getpid());
            /* Refused (the registry full, maybe of connections that never said hello): ask
             * again on a back-off, never give up for good (a full group frees places). */
            if (refusals == NAMED_REFUSALS_WARN)
                mt_log(MT_LOG_WARNING, "preload", "GroupName %s: the leader closed the channel "
                                                  "before welcoming pid %ld %d times in a row "
                                                  "(the group is full?); asking again every "
                                                  "%d s at most",
                       preload_cfg.group_name, (long)getpid(), refusals,
                       NAMED_REFUSED_MAX_MS / 1000);
            int backoff = FORK_RETRY_MS << (refusals < 8 ? refusals - 1 : 7);
            if (refusals && wait_exiting(backoff < NAMED_REFUSED_MAX_MS ? backoff
                                                                        : NAMED_REFUSED_MAX_MS))
                return NULL;
        }
        if (!named_attempt())
            return NULL;
        pthread_mutex_lock(&preload_lock);
        int leads = named.lock_fd >= 0;
        pthread_mutex_unlock(&preload_lock);
        if (leads)
            return NULL;
    }
}

/* The waiting children's channels into leader mt's registry (NULL: closed; they stay off). */
static void adopt_finish(struct memtrim *mt)
{
    pthread_mutex_lock(&preload_lock);
    int adopted = 0;
    for (int i = 0; i < adopt_n; i++) {
        if (mt && mt_group_adopt(mt, adopt_fds[i]) == 0)
            adopted++;
        else
            close(adopt_fds[i]);
    }
    if (adopted)
        mt_log(MT_LOG_DEBUG, "preload", "the new leader pid %ld adopts %d children that "
                                        "waited for it", (long)getpid(), adopted);
    adopt_n = 0;
    adopting = 0;
    pthread_mutex_unlock(&preload_lock);
}

/* A child forked by a member: 1 once its parent, now the leader, adopted its channel. */
static int wait_adopted(int fd)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, FORK_RETRY_MS) < 0 && errno != EINTR)
            p.revents = POLLERR;
        if (p.revents & POLLIN)
            return 1;
        pthread_mutex_lock(&preload_lock);
        int stop = exiting;
        pthread_mutex_unlock(&preload_lock);
        if (stop || (p.revents & (POLLHUP | POLLERR | POLLNVAL))) {
            if (!(p.revents & POLLNVAL)) /* closed by someone else: the number is not ours */
                close(fd);
            if (!stop)
                mt_log(MT_LOG_DEBUG, "preload", "pid %ld: forked by a member of a worker "
                                                "group that did not take it over: memtrim "
                                                "stays off in this process", (long)getpid());
            return 0;
        }
    }
}

static void *restart_run(void *arg);

static void *restart_main(void *arg)
{
    void *r = restart_run(arg);
    adopt_finish(NULL); /* channels nobody adopted (this process did not lead) */
    return r;
}

static void *restart_run(void *arg)
{
    struct timespec pause = {0, FORK_RETRY_MS * 1000000L};
    struct memtrim *mt = NULL;
    char *err = NULL;

    pthread_mutex_lock(&preload_lock);
    int fd = member_fd, waits = member_waits;
    member_fd = -1;
    /* Nothing until the child has lived a while; exiting meanwhile, it leaves the
     * channel to the kernel's close at exit (the leader then sees its end close). */
    if (wait_exiting_locked(FORK_JOIN_DELAY_MS) && exiting_ms - forked_ms < FORK_JOIN_DELAY_MS) {
        pthread_mutex_unlock(&preload_lock);
        return NULL;
    } /* one that lived that long joins even if this thread woke late, into its exit */
    pthread_mutex_unlock(&preload_lock);
    if (fd >= 0 && !mt_fdid_is(fd, &member_id)) {
        mt_log(MT_LOG_DEBUG, "preload", "pid %ld: the channel to the worker group's leader "
                                        "was closed by the program (its number is not "
                                        "memtrim's now): memtrim stays off in this process",
               (long)getpid());
        return NULL; /* the host's number now: left alone */
    }
    if (fd >= 0 && waits && !wait_adopted(fd))
        return NULL;
    int rc = fd >= 0 ? run_member(fd) : 1;
    if (rc == 2 || (fd < 0 && named_wanted(&preload_cfg)))
        return named_main(arg); /* a named group: its election, not the port's race */
    if (rc == 0)
        return NULL;
    for (int i = 0; i < FORK_RETRY_MAX && !port_free(&preload_cfg); i++) {
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&preload_lock);
        int stop = exiting;
        pthread_mutex_unlock(&preload_lock);
        if (stop)
            return NULL;
    }
    if (held_by_ancestor(&preload_cfg))
        return NULL; /* a parent that lives on keeps the port: said once, not an error */
    if (mt_create(preload_json, &api_routes, &mt, &err) != 0)
        fprintf(stderr, "memtrim: FollowFork: not restarted in child %ld (see above); "
                        "the program runs on without memtrim\n", (long)getpid());
    free(err);
    if (mt && group_wanted(&preload_cfg)) { /* the new leader: its own forks join it */
        err = NULL;
        if (mt_group_lead(mt, &err) != 0)
            mt_log(MT_LOG_WARNING, "preload", "%s; forked children will not join a group",
                   err ? err : "group: cannot lead");
        else
            adopt_finish(mt);
        free(err);
    }
    port_file_write(mt);
    pthread_mutex_lock(&preload_lock);
    if (exiting) { /* the destructor is waiting for us: stop what we started */
        pthread_mutex_unlock(&preload_lock);
        if (mt)
            port_file_remove(mt_http_port(mt));
        mt_destroy(mt);
        return NULL;
    }
    preload_instance = mt;
    pthread_mutex_unlock(&preload_lock);
    return NULL;
}

static void preload_prepare_fork(void)
{
    pthread_mutex_lock(&preload_lock);
    mt_group_fork_prepare(preload_instance); /* a leader: the child's channel */
    if (adopting && !preload_instance && adopt_n < MT_GROUP_MAX &&
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, adopt_pair) != 0)
        adopt_pair[0] = adopt_pair[1] = -1; /* between roles: the child waits for us */
}

static void preload_parent_after_fork(void)
{
    mt_group_fork_parent(preload_instance);
    if (adopt_pair[0] >= 0) {
        close(adopt_pair[1]);
        adopt_fds[adopt_n++] = adopt_pair[0];
    }
    adopt_pair[0] = adopt_pair[1] = -1;
    pthread_mutex_unlock(&preload_lock);
}

static void preload_child_after_fork(void)
{
    struct memtrim *old = preload_instance;

    /* The child has none of the parent's threads: forget the instance, don't touch it
     * (but close the group's descriptors it inherited: they are the parent's). */
    preload_instance = NULL;
    restart_running = 0;
    leader_gone = 0;
    pthread_cond_init(&preload_cond, NULL); /* a waiter of the parent's is not here */
    int waits = 0;
    int fd = old ? mt_group_fork_child(old, &waits) : -1;
    if (adopt_pair[1] >= 0) { /* forked between roles: a channel to this parent */
        close(adopt_pair[0]);
        fd = adopt_pair[1];
        waits = 1;
    }
    adopt_pair[0] = adopt_pair[1] = -1;
    for (int i = 0; i < adopt_n; i++)
        close(adopt_fds[i]); /* the parent's */
    adopt_n = 0;
    adopting = 0;
    mt_named_fork_child(&named); /* the parent's lock and socket: never a child's */
    if (named_chan >= 0) {
        close(named_chan);
        named_chan = -1;
    }
    pthread_mutex_unlock(&preload_lock);
    if (old)
        close_inherited_listener(mt_http_port(old));
    if (!preload_cfg.follow_fork) {
        if (fd >= 0)
            close(fd);
        return;
    }
    mt_after_fork_child(); /* the core's own atfork handler did it too; be sure */
    pthread_mutex_lock(&preload_lock);
    forked_ms = mono_ms();
    member_fd = fd >= 0 && mt_fdid_take(fd, &member_id) != 0 ? (close(fd), -1) : fd;
    member_waits = waits;
    /* Until its member starts, children it forks wait on a channel to it (a daemon forks
     * its workers at once). */
    adopting = fd >= 0 && !named_wanted(&preload_cfg);
    restart_running = mt_thread_start(&restart_thread, "memtrim-fork", restart_main, NULL) == 0;
    if (!restart_running && member_fd >= 0) {
        close(member_fd);
        member_fd = -1;
    }
    pthread_mutex_unlock(&preload_lock);
}

/* ---- start and stop ------------------------------------------------------- */

/* Starts memtrim from a configuration (inline JSON or a file path) as the constructor does:
 * 0 (started, or nothing wanted here: *started says which), or a negative errno value with
 * *err set; *logged when mt_create has already logged why. Called by the constructor (the
 * program's only thread) or by memtrim_attach under attach_lock, never both: attach starts
 * nothing once preload_json is set. */
static int preload_begin(const char *value, char **err, int *started, int *logged)
{
    struct memtrim *mt = NULL;
    *started = 0;
    *logged = 0;
    preload_json = load_config(value, err);
    if (preload_json && config_parse(preload_json, &preload_cfg, err) != 0) {
        free(preload_json);
        preload_json = NULL;
    }
    if (!preload_json) {
        if (!*err)
            *err = mt_strdup("unknown error");
        return -EINVAL;
    }
    int wanted = program_wanted(&preload_cfg);
    if (wanted && named_wanted(&preload_cfg)) {
        /* A named group: the election runs on its own thread (it may wait for a leader). */
        if (mt_named_open(&named, &preload_cfg, err) != 0) {
            if (!*err)
                *err = mt_strdup("GroupName: no directory");
            free(preload_json);
            preload_json = NULL;
            return -EINVAL;
        }
        mt_fork_hooks_install(); /* the core's handlers before ours (see core.h) */
        pthread_atfork(preload_prepare_fork, preload_parent_after_fork, preload_child_after_fork);
        pthread_mutex_lock(&preload_lock);
        restart_running = mt_thread_start(&restart_thread, "memtrim-named", named_main, NULL) == 0;
        pthread_mutex_unlock(&preload_lock);
        if (!restart_running) {
            char buf[300];
            snprintf(buf, sizeof(buf), "GroupName %s: cannot start its thread",
                     preload_cfg.group_name);
            *err = mt_strdup(buf);
            /* Nothing runs: leave nothing that says it does (memtrim_attach would answer
             * "already loaded"), nor the named group's directory, lock and socket open. */
            mt_named_close(&named);
            free(preload_json);
            preload_json = NULL;
            return -EAGAIN;
        }
        *started = 1;
        return 0;
    }
    if (!wanted || (preload_cfg.enabled && held_by_ancestor(&preload_cfg))) {
        free(preload_json);
        preload_json = NULL;
        return 0;
    }
    /* Any other failure (a port in use, ...) is logged once by mt_create itself. */
    int rc = mt_create(preload_json, &api_routes, &mt, err);
    if (rc == 0 && mt) {
        pthread_mutex_lock(&preload_lock);
        preload_instance = mt;
        pthread_mutex_unlock(&preload_lock);
        *started = 1;
        if (group_wanted(&preload_cfg)) {
            char *gerr = NULL;
            if (mt_group_lead(mt, &gerr) != 0)
                mt_log(MT_LOG_WARNING, "preload", "%s; forked children will not join a group",
                       gerr ? gerr : "group: cannot lead");
            free(gerr);
        }
        port_file_write(mt);
        pthread_atfork(preload_prepare_fork, preload_parent_after_fork, preload_child_after_fork);
    }
    *logged = rc != 0;
    return rc;
}

__attribute__((constructor)) static void preload_init(void)
{
    const char *value = getenv("MEMTRIM_CONFIG");
    char *err = NULL;
    int started, logged;

    if (!value || !*value || !preloaded())
        return;
    if (preload_begin(value, &err, &started, &logged) != 0 && !logged) /* the one line it prints */
        fprintf(stderr, "memtrim: not started: %s\n", err ? err : "unknown error");
    free(err);
}

/* memtrim_attach (memtrim.h): the memtrim command's `load`, on one of the host's threads. */
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;

MEMTRIM_API int memtrim_attach(const char *config_json, char *out, size_t size)
{
    if (!config_json || !out || size < 2)
        return -EINVAL;
    out[0] = '\0';
    pthread_mutex_lock(&attach_lock);
    pthread_mutex_lock(&preload_lock);
    int running = preload_json != NULL || restart_running;
    if (preload_instance)
        mt_http_address(preload_instance, out, size);
    pthread_mutex_unlock(&preload_lock);
    if (running) {
        pthread_mutex_unlock(&attach_lock);
        return -EALREADY;
    }
    char *err = NULL;
    int started, logged;
    int rc = preload_begin(config_json, &err, &started, &logged);
    if (rc != 0) {
        snprintf(out, size, "%s", err ? err : strerror(-rc));
    } else if (!started) {
        snprintf(out, size, "nothing started: Enabled is false, or Program names another program");
        rc = 1;
    } else {
        pthread_mutex_lock(&preload_lock);
        if (!preload_instance || mt_http_address(preload_instance, out, size) != 0)
            snprintf(out, size, "%s", preload_instance ? "no HTTP server" : "a named group: electing");
        pthread_mutex_unlock(&preload_lock);
    }
    free(err);
    pthread_mutex_unlock(&attach_lock);
    return rc;
}

__attribute__((destructor)) static void preload_fini(void)
{
    struct memtrim *mt;
    int joining;

    pthread_mutex_lock(&preload_lock);
    exiting = 1;
    exiting_ms = mono_ms();
    pthread_cond_broadcast(&preload_cond); /* a member's restart thread waits on it */
    joining = restart_running;
    restart_running = 0;
    pthread_mutex_unlock(&preload_lock);
    if (joining)
        pthread_join(restart_thread, NULL);
    pthread_mutex_lock(&preload_lock);
    mt = preload_instance;
    preload_instance = NULL;
    /* A named leader withdraws its socket first: newcomers wait for the next leader
     * rather than queue at a socket nobody will accept on. */
    mt_named_unpublish(&named);
    pthread_mutex_unlock(&preload_lock);
    if (mt)
        port_file_remove(mt_http_port(mt));
    mt_destroy(mt);
    pthread_mutex_lock(&preload_lock);
    mt_named_close(&named); /* drops the lock: a member takes the role over */
    pthread_mutex_unlock(&preload_lock);
}
