/*
 * test_named.c - named worker groups' rendezvous (core/group/named.c) and
 * GroupName's validation (core/config/config.c): the name's rules, the
 * directory's choice and checks (mode, owner, symbolic link, not a
 * directory), who may join, and the election in a temporary directory (the
 * first leads, the next joins, a dead leader's socket is replaced, a held
 * lock with nobody behind the socket says "try again", and so does a live socket whose
 * backlog is full, which is never replaced). One thread, no
 * clock; tests/e2e/test_named_groups.py runs real processes.
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

#include "config.h"
#include "core.h"
#include "named.h"
#include "harness.h"

static void test_group_names(void)
{
    char *err = NULL;
    const char *good[] = {"web", "a", "gunicorn-main", "php_fpm.8.2", "0day"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        CHECK_EQ_INT(config_group_name_check(good[i], &err), 0);
        CHECK(err == NULL);
    }
    char long_name[MT_GROUP_NAME_MAX + 2];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    const char *bad[] = {"",    long_name, "../etc",      ".hidden", "-x",
                         "a/b", "a b",     "caf\xc3\xa9", "x\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ_INT(config_group_name_check(bad[i], &err), -EINVAL);
        CHECK(err != NULL);
        if (err)
            CHECK_CONTAINS(err, "GroupName");
        free(err);
        err = NULL;
    }
    long_name[MT_GROUP_NAME_MAX] = '\0'; /* exactly the maximum */
    CHECK_EQ_INT(config_group_name_check(long_name, &err), 0);
}

static void test_config_keys(void)
{
    struct mt_config cfg;
    char *err = NULL;
    CHECK_EQ_INT(config_parse("{\"GroupName\": \"web\", \"GroupDir\": \"/run/x\"}", &cfg, &err), 0);
    CHECK(strcmp(cfg.group_name, "web") == 0 && strcmp(cfg.group_dir, "/run/x") == 0);
    CHECK_EQ_INT(config_parse("{\"GroupName\": null}", &cfg, &err), 0);
    CHECK(cfg.group_name[0] == '\0');
    CHECK_EQ_INT(config_parse("{\"GroupName\": \"\"}", &cfg, &err), 0); /* "": no group */
    CHECK(cfg.group_name[0] == '\0');
    const char *bad[][2] = {{"{\"GroupName\": \"a/b\"}", "GroupName"},
                            {"{\"GroupName\": 3}", "GroupName"},
                            {"{\"GroupName\": \"web\", \"GroupDir\": \"rel\"}", "GroupDir"},
                            {"{\"GroupDir\": \"/run/x\"}", "GroupDir"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ_INT(config_parse(bad[i][0], &cfg, &err), -EINVAL);
        CHECK(err != NULL);
        if (err)
            CHECK_CONTAINS(err, bad[i][1]);
        free(err);
        err = NULL;
    }
}

/* The socket's path must fit a unix socket's (107 bytes): said at configuration time for
 * GroupDir, at start for a directory from XDG_RUNTIME_DIR, with the path and the limit. */
static void test_socket_path_length(void)
{
    struct mt_config cfg;
    struct mt_named n;
    char json[512], dir[128], *err = NULL;
    /* "/srv/" + 97 x's + "/web.sock" = 111 bytes; one of 93 makes exactly 107. */
    char longdir[128] = "/srv/";
    memset(longdir + 5, 'x', 97);
    longdir[102] = '\0';
    snprintf(json, sizeof(json), "{\"GroupName\": \"web\", \"GroupDir\": \"%s\"}", longdir);
    CHECK_EQ_INT(config_parse(json, &cfg, &err), -EINVAL);
    CHECK(err && strstr(err, "GroupDir") && strstr(err, longdir) && strstr(err, "web.sock") &&
          strstr(err, "111 bytes") && strstr(err, "107 at most"));
    free(err);
    err = NULL;
    longdir[98] = '\0'; /* 107 bytes: fits */
    snprintf(json, sizeof(json), "{\"GroupName\": \"web\", \"GroupDir\": \"%s\"}", longdir);
    CHECK_EQ_INT(config_parse(json, &cfg, &err), 0);
    CHECK_EQ_INT((int)config_group_sock_len(longdir, "web"), MT_GROUP_SOCK_PATH_MAX);
    CHECK_EQ_INT((int)config_group_sock_len("/a/", "web"), 11); /* "/a/web.sock" */

    /* No GroupDir: the directory comes from XDG_RUNTIME_DIR, known at start. */
    snprintf(dir, sizeof(dir), "/run/user/");
    memset(dir + 10, 'y', 90);
    dir[100] = '\0';
    const char *old = getenv("XDG_RUNTIME_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("XDG_RUNTIME_DIR", dir, 1);
    config_defaults(&cfg);
    snprintf(cfg.group_name, sizeof(cfg.group_name), "web");
    CHECK_EQ_INT(mt_named_open(&n, &cfg, &err), -ENAMETOOLONG);
    CHECK(err && strstr(err, dir) && strstr(err, "/memtrim/web.sock") && strstr(err, "107") &&
          strstr(err, "XDG_RUNTIME_DIR") && strstr(err, "GroupDir"));
    CHECK(n.dirfd < 0); /* nothing made, nothing opened */
    free(err);
    if (saved)
        setenv("XDG_RUNTIME_DIR", saved, 1);
    else
        unsetenv("XDG_RUNTIME_DIR");
    free(saved);
}

static void test_dir_choice(void)
{
    char out[128];
    CHECK_EQ_INT(mt_named_dir_choose("/srv/g/", "/run/user/1000", 1000, out, sizeof(out)), 0);
    CHECK(strcmp(out, "/srv/g") == 0); /* GroupDir first; a trailing '/' dropped */
    CHECK_EQ_INT(mt_named_dir_choose("", "/run/user/1000", 1000, out, sizeof(out)), 0);
    CHECK(strcmp(out, "/run/user/1000/memtrim") == 0);
    CHECK_EQ_INT(mt_named_dir_choose(NULL, "relative", 0, out, sizeof(out)), 0);
    CHECK(strcmp(out, "/run/memtrim") == 0); /* a relative XDG_RUNTIME_DIR is no runtime dir */
    CHECK_EQ_INT(mt_named_dir_choose(NULL, NULL, 1000, out, sizeof(out)), 0);
    CHECK(strcmp(out, "/tmp/memtrim-1000") == 0);
    CHECK_EQ_INT(mt_named_dir_choose("/a/very/long/path", NULL, 0, out, 8), -ENAMETOOLONG);
}

static void test_who_may_join(void)
{
    CHECK(mt_named_peer_allowed(1000, 1000));
    CHECK(mt_named_peer_allowed(0, 1000));     /* root joins anyone's group */
    CHECK(!mt_named_peer_allowed(1001, 1000)); /* another user does not */
    CHECK(!mt_named_peer_allowed(1000, 0));    /* nor a user root's */
}

static char base[64];

static void path_in(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", base, name);
}

static void test_dir_checks(void)
{
    char p[128], *err = NULL;
    unsigned me = (unsigned)geteuid();
    struct stat st;

    path_in(p, sizeof(p), "new");
    int fd = mt_named_dir_open(p, me, "GroupDir", &err);
    CHECK(fd >= 0);
    CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
    if (fd >= 0)
        close(fd);

    path_in(p, sizeof(p), "open");
    CHECK(mkdir(p, 0755) == 0 && chmod(p, 0755) == 0);
    CHECK_EQ_INT(mt_named_dir_open(p, me, "GroupDir", &err), -EPERM);
    CHECK(err && strstr(err, "GroupDir") && strstr(err, "0755") && strstr(err, "0700"));
    free(err);
    err = NULL;

    path_in(p, sizeof(p), "link");
    char target[128];
    path_in(target, sizeof(target), "new");
    CHECK(symlink(target, p) == 0);
    CHECK_EQ_INT(mt_named_dir_open(p, me, "GroupDir", &err), -ELOOP);
    CHECK(err && strstr(err, "symbolic link"));
    free(err);
    err = NULL;

    path_in(p, sizeof(p), "file");
    int f = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    CHECK(f >= 0);
    if (f >= 0)
        close(f);
    CHECK_EQ_INT(mt_named_dir_open(p, me, "GroupDir", &err), -ENOTDIR);
    free(err);
    err = NULL;

    /* Another user's directory (here: ours, seen by a process of another uid). */
    path_in(p, sizeof(p), "new");
    CHECK_EQ_INT(mt_named_dir_open(p, me + 4242, "GroupDir", &err), -EPERM);
    CHECK(err && strstr(err, "owned by uid") && strstr(err, "set GroupDir to a directory of uid"));
    CHECK(err && !strstr(err, "XDG_RUNTIME_DIR")); /* GroupDir named it: that is the fix */
    free(err);
    err = NULL;
    /* The default directory (/tmp/memtrim-<uid>), made first by another user: what to do. */
    CHECK_EQ_INT(mt_named_dir_open(p, me + 4242, "GroupName's directory", &err), -EPERM);
    CHECK(err && strstr(err, "another user created it first") && strstr(err, "set GroupDir") &&
          strstr(err, "XDG_RUNTIME_DIR"));
    free(err);
    err = NULL;

    /* Root too refuses another user's directory: that user could plant the socket. */
    if (me == 0) {
        path_in(p, sizeof(p), "theirs");
        CHECK(mkdir(p, 0700) == 0 && chown(p, 65534, 65534) == 0);
        CHECK_EQ_INT(mt_named_dir_open(p, 0, "GroupDir", &err), -EPERM);
        CHECK(err && strstr(err, "owned by uid 65534"));
        free(err);
        err = NULL;
    }

    path_in(p, sizeof(p), "missing/below");
    CHECK(mt_named_dir_open(p, me, "GroupDir", &err) < 0 && err != NULL);
    free(err);
}

static int open_group(struct mt_named *n, const char *dir, const char *name)
{
    struct mt_config cfg;
    char *err = NULL;
    config_defaults(&cfg);
    snprintf(cfg.group_dir, sizeof(cfg.group_dir), "%s", dir);
    snprintf(cfg.group_name, sizeof(cfg.group_name), "%s", name);
    int rc = mt_named_open(n, &cfg, &err);
    free(err);
    return rc;
}

static void test_election(void)
{
    char dir[128], sock[160], *err = NULL;
    struct mt_named a, b, c;
    struct stat st1, st2;
    int fd = -1;
    path_in(dir, sizeof(dir), "elect");
    CHECK_EQ_INT(open_group(&a, dir, "web"), 0);
    CHECK_EQ_INT(open_group(&b, dir, "web"), 0);
    CHECK_EQ_INT(open_group(&c, dir, "api"), 0);

    CHECK_EQ_INT(mt_named_elect(&a, &fd, &err), MT_NAMED_LEADER);
    CHECK(a.lock_fd >= 0 && a.listen_fd >= 0 && fd == -1);
    snprintf(sock, sizeof(sock), "%s/web.sock", dir);
    CHECK(lstat(sock, &st1) == 0 && S_ISSOCK(st1.st_mode));
    /* The second process finds the lock taken and the socket answering: it joins. */
    CHECK_EQ_INT(mt_named_elect(&b, &fd, &err), MT_NAMED_MEMBER);
    CHECK(fd >= 0 && b.lock_fd < 0);
    if (fd >= 0)
        close(fd);
    /* Another name is another group: it leads its own. */
    CHECK_EQ_INT(mt_named_elect(&c, &fd, &err), MT_NAMED_LEADER);
    mt_named_close(&c);

    /* The leader dies without a word (its copies closed, nothing withdrawn): the socket
     * file stays, the lock is free; the next one connects, finds nobody, replaces it. */
    mt_named_fork_child(&a); /* closes the lock and the socket without unlinking */
    CHECK(lstat(sock, &st1) == 0);
    CHECK_EQ_INT(mt_named_elect(&b, &fd, &err), MT_NAMED_LEADER);
    CHECK(lstat(sock, &st2) == 0 && S_ISSOCK(st2.st_mode));
    CHECK_EQ_INT(open_group(&c, dir, "web"), 0); /* the new socket answers */
    CHECK_EQ_INT(mt_named_elect(&c, &fd, &err), MT_NAMED_MEMBER);
    if (fd >= 0)
        close(fd);
    mt_named_close(&c);

    /* A clean exit withdraws its own socket file. */
    mt_named_resign(&b);
    CHECK(lstat(sock, &st2) != 0 && errno == ENOENT);

    /* The lock held (a leader starting) but no socket yet: try again, nothing replaced. */
    char lockp[160];
    snprintf(lockp, sizeof(lockp), "%s/web.lock", dir);
    int l = open(lockp, O_RDWR | O_CLOEXEC);
    CHECK(l >= 0 && flock(l, LOCK_EX | LOCK_NB) == 0);
    CHECK_EQ_INT(mt_named_elect(&a, &fd, &err), -EAGAIN);
    if (l >= 0)
        close(l);
    CHECK_EQ_INT(mt_named_elect(&a, &fd, &err), MT_NAMED_LEADER);
    mt_named_resign(&a);

    /* Something that is no socket where the socket goes: refused with its path. */
    int f = open(sock, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (f >= 0)
        close(f);
    CHECK_EQ_INT(mt_named_elect(&a, &fd, &err), -EEXIST);
    CHECK(err && strstr(err, "web.sock") && strstr(err, "not a socket"));
    free(err);
    CHECK(a.lock_fd < 0); /* and the lock given back */
    mt_named_close(&a);
    mt_named_close(&b);
    mt_named_close(&c);
}

/* A live socket whose backlog is full while the lock is free (its leader forked a child
 * without the atfork handlers, which kept the listening socket and closed the lock, say):
 * connect says EAGAIN. Somebody listens there: never replaced, asked again later. */
static void test_busy_socket_is_not_replaced(void)
{
    char dir[128], sock[160], *err = NULL;
    struct mt_named a, b;
    struct stat before, after;
    int fd = -1, conns[MT_GROUP_MAX + 8], nconn = 0;
    path_in(dir, sizeof(dir), "busy");
    CHECK_EQ_INT(open_group(&a, dir, "web"), 0);
    CHECK_EQ_INT(open_group(&b, dir, "web"), 0);
    CHECK_EQ_INT(mt_named_elect(&a, &fd, &err), MT_NAMED_LEADER);
    snprintf(sock, sizeof(sock), "%s/web.sock", dir);
    CHECK(lstat(sock, &before) == 0);
    close(a.lock_fd); /* the lock given up, the listening socket still open and live */
    a.lock_fd = -1;
    /* Fill its backlog (nobody accepts): the next connect says EAGAIN. */
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    CHECK(strlen(sock) < sizeof(addr.sun_path));
    memcpy(addr.sun_path, sock, strlen(sock) + 1 < sizeof(addr.sun_path) ? strlen(sock) + 1 : 0);
    int full = 0;
    while (nconn < (int)(sizeof(conns) / sizeof(conns[0])) && !full) {
        int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        CHECK(c >= 0);
        if (c < 0)
            break;
        if (connect(c, (struct sockaddr *)&addr, sizeof(addr)) == 0) {
            conns[nconn++] = c;
            continue;
        }
        full = errno == EAGAIN;
        CHECK_MSG(full, "connect: %s", strerror(errno));
        close(c);
    }
    CHECK(full);
    int rc = mt_named_elect(&b, &fd, &err);
    CHECK_EQ_INT(rc, -EAGAIN);
    CHECK(b.lock_fd < 0 && b.listen_fd < 0); /* the lock given back: not a leader */
    CHECK(err && strstr(err, "backlog is full"));
    free(err);
    err = NULL;
    CHECK(lstat(sock, &after) == 0 && after.st_ino == before.st_ino); /* not replaced */
    /* The live socket still takes a member once there is room. */
    for (int i = 0; i < nconn; i++) {
        int c = accept4(a.listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c >= 0)
            close(c);
        close(conns[i]);
    }
    CHECK_EQ_INT(mt_named_elect(&b, &fd, &err), MT_NAMED_MEMBER);
    if (fd >= 0)
        close(fd);
    free(err);
    mt_named_close(&a);
    mt_named_close(&b);
}

int main(void)
{
    snprintf(base, sizeof(base), "/tmp/memtrim-test-named.XXXXXX");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_group_names);
    RUN(test_config_keys);
    RUN(test_socket_path_length);
    RUN(test_dir_choice);
    RUN(test_who_may_join);
    RUN(test_dir_checks);
    RUN(test_election);
    RUN(test_busy_socket_is_not_replaced);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", base);
    return harness_end();
}
