/*
 * host_preload.c - starts memtrim inside an unmodified program:
 * LD_PRELOAD=libmemtrim.so MEMTRIM_CONFIG=<file or inline JSON> ./server.
 * Without MEMTRIM_CONFIG it does nothing; a configuration error is printed
 * once and the program runs on without memtrim.
 *
 * Threads: the constructor runs on the program's main thread before main(),
 * the destructor at exit (return from main, exit(), a handled SIGTERM that
 * ends in exit), the fork handlers on the thread that forks. After fork() the
 * child has none of the instance's threads: it forgets the instance (never
 * touching it), closes the inherited listening socket so that the port stays
 * the parent's, and with FollowFork starts a new instance from a
 * "memtrim-fork" thread, which waits while the parent still holds the port.
 * Locks: preload_lock guards preload_instance and the restart thread's state;
 * it is held across fork() (prepare/parent/child handlers), never across a
 * start or a stop.
 * SPDX-License-Identifier: MIT
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

#include "config.h"
#include "api.h"
#include "core.h"

#define CONFIG_FILE_MAX (1024 * 1024)
#define FORK_RETRY_MS 100    /* the child retries a taken port this often... */
#define FORK_RETRY_MAX 50    /* ...for 5 s: a daemon's parent exits well within that */

static pthread_mutex_t preload_lock = PTHREAD_MUTEX_INITIALIZER;
static struct memtrim *preload_instance; /* guarded by preload_lock */
static char *preload_json;               /* the configuration, kept for FollowFork */
static struct mt_config preload_cfg;     /* written by the constructor only */
static pthread_t restart_thread;         /* guarded by preload_lock, with: */
static int restart_running, exiting;

/* MEMTRIM_CONFIG holds inline JSON (starts with '{') or a file path. */
static char *load_config(const char *value, char **err)
{
    const char *p = value;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    if (*p == '{')
        return strdup(p);
    FILE *f = fopen(value, "re");
    if (!f) {
        char buf[600];
        snprintf(buf, sizeof(buf), "MEMTRIM_CONFIG: cannot read %.500s: %s", value,
                 strerror(errno));
        *err = strdup(buf);
        return NULL;
    }
    char *text = malloc(CONFIG_FILE_MAX + 1);
    size_t n = text ? fread(text, 1, CONFIG_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (!text || n > CONFIG_FILE_MAX) {
        free(text);
        *err = strdup("MEMTRIM_CONFIG: file too large (over 1 MiB) or out of memory");
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

/*
 * FollowFork in the child: wait (quietly) while the port is taken, then
 * start. A port that stays taken (several children, or a parent that lives
 * on) is reported once by mt_create; the program runs on without memtrim.
 */
static void *restart_main(void *arg)
{
    struct timespec pause = {0, FORK_RETRY_MS * 1000000L};
    struct memtrim *mt = NULL;
    char *err = NULL;

    for (int i = 0; i < FORK_RETRY_MAX && !port_free(&preload_cfg); i++) {
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&preload_lock);
        int stop = exiting;
        pthread_mutex_unlock(&preload_lock);
        if (stop)
            return NULL;
    }
    if (mt_create(preload_json, &api_routes, &mt, &err) != 0)
        fprintf(stderr, "memtrim: FollowFork: not restarted in child %ld (see above); "
                        "the program runs on without memtrim\n", (long)getpid());
    free(err);
    pthread_mutex_lock(&preload_lock);
    if (exiting) { /* the destructor is waiting for us: stop what we started */
        pthread_mutex_unlock(&preload_lock);
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
}

static void preload_parent_after_fork(void)
{
    pthread_mutex_unlock(&preload_lock);
}

static void preload_child_after_fork(void)
{
    struct memtrim *old = preload_instance;

    /* The child has none of the parent's threads: forget the instance, don't touch it. */
    preload_instance = NULL;
    restart_running = 0;
    pthread_mutex_unlock(&preload_lock);
    if (old)
        close_inherited_listener(mt_http_port(old));
    if (!preload_cfg.follow_fork)
        return;
    mt_after_fork_child(); /* the core's own atfork handler did it too; be sure */
    pthread_mutex_lock(&preload_lock);
    restart_running = mt_thread_start(&restart_thread, "memtrim-fork", restart_main, NULL) == 0;
    pthread_mutex_unlock(&preload_lock);
}

/* ---- start and stop ------------------------------------------------------- */

__attribute__((constructor)) static void preload_init(void)
{
    const char *value = getenv("MEMTRIM_CONFIG");
    struct memtrim *mt = NULL;
    char *err = NULL;

    if (!value || !*value || !preloaded())
        return;
    preload_json = load_config(value, &err);
    if (preload_json && config_parse(preload_json, &preload_cfg, &err) != 0) {
        free(preload_json);
        preload_json = NULL;
    }
    if (!preload_json) { /* the one line a configuration error prints */
        fprintf(stderr, "memtrim: not started: %s\n", err ? err : "unknown error");
        free(err);
        return;
    }
    /* Any other failure (a port in use, ...) is logged once by mt_create itself. */
    if (mt_create(preload_json, &api_routes, &mt, &err) == 0 && mt) {
        preload_instance = mt;
        pthread_atfork(preload_prepare_fork, preload_parent_after_fork, preload_child_after_fork);
    }
    free(err);
}

__attribute__((destructor)) static void preload_fini(void)
{
    struct memtrim *mt;
    int joining;

    pthread_mutex_lock(&preload_lock);
    exiting = 1;
    joining = restart_running;
    restart_running = 0;
    pthread_mutex_unlock(&preload_lock);
    if (joining)
        pthread_join(restart_thread, NULL);
    pthread_mutex_lock(&preload_lock);
    mt = preload_instance;
    preload_instance = NULL;
    pthread_mutex_unlock(&preload_lock);
    mt_destroy(mt);
}
