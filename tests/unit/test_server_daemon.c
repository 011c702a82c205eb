/*
 * test_server_daemon.c - the libmicrohttpd daemon without an instance:
 * ephemeral port, a taken port (-EADDRINUSE with a message), a bad bind
 * address (-EINVAL), and real HTTP over a socket for what does not reach a
 * handler: 404, 405 + Allow, 401 + WWW-Authenticate, 413 (declared and
 * chunked bodies), keep-alive, and a clean stop. A child forked while the
 * server runs skips GnuTLS's teardown at its exit (its ASN.1 frees, counted
 * by this binary's asn1_delete_structure in front of libtasn1's); the control,
 * a child forked after the stop, runs it.
 *
 * Threads: the test's and MHD's. Files: none.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlfcn.h>

#include "api.h"
#include "harness.h"
#include "internal.h"
#include "server.h"

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Send a request on fd and read one response (headers + Content-Length body) into buf. */
static int exchange(int fd, const char *req, size_t reqlen, char *buf, size_t n)
{
    if (send(fd, req, reqlen, MSG_NOSIGNAL) < 0)
        return -1;
    size_t got = 0;
    while (got + 1 < n) {
        ssize_t r = recv(fd, buf + got, n - got - 1, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
        buf[got] = '\0';
        const char *end = strstr(buf, "\r\n\r\n");
        const char *cl = strstr(buf, "Content-Length: ");
        if (end && cl && got >= (size_t)(end + 4 - buf) + (size_t)atoi(cl + 16))
            break;
    }
    buf[got] = '\0';
    return (int)got;
}

static int request(int port, const char *req, char *buf, size_t n)
{
    int fd = connect_to(port);
    if (fd < 0)
        return -1;
    int rc = exchange(fd, req, strlen(req), buf, n);
    close(fd);
    return rc;
}

/* memtrim's own routes, without an instance or a store behind them. */
static struct server *start(const char *token, int port, int *rc, char **err)
{
    struct server_options opt = {.bind = "127.0.0.1", .port = port, .threads = 2};
    snprintf(opt.token, sizeof(opt.token), "%s", token);
    struct server *s = NULL;
    *rc = server_start(&opt, &api_routes, NULL, NULL, &s, err);
    return s;
}

static void test_ports(void)
{
    int rc;
    char *err = NULL;
    struct server *a = start("", 0, &rc, &err);
    CHECK_EQ_INT(rc, 0);
    CHECK(server_port(a) > 0);
    struct server *b = start("", server_port(a), &rc, &err);
    CHECK(b == NULL);
    CHECK_EQ_INT(rc, -EADDRINUSE);
    CHECK_CONTAINS(err, "in use");
    free(err);
    err = NULL;
    server_stop(a);

    struct server_options opt = {.bind = "not an address"};
    CHECK_EQ_INT(server_start(&opt, &api_routes, NULL, NULL, &b, &err), -EINVAL);
    CHECK_CONTAINS(err, "HttpBind");
    free(err);
    server_stop(NULL);
}

static void test_http(void)
{
    int rc;
    char *err = NULL;
    char buf[8192];
    struct server *s = start("tok", 0, &rc, &err);
    CHECK_EQ_INT(rc, 0);
    int port = server_port(s);

    request(port, "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", buf, sizeof(buf));
    CHECK_CONTAINS(buf, "HTTP/1.1 404");
    CHECK_CONTAINS(buf, "application/json");
    CHECK_CONTAINS(buf, "\"not_found\"");

    request(port, "DELETE /config HTTP/1.1\r\nHost: x\r\n\r\n", buf, sizeof(buf));
    CHECK_CONTAINS(buf, "HTTP/1.1 405");
    CHECK_CONTAINS(buf, "Allow: GET, HEAD, PATCH");

    request(port, "POST /memory/trim HTTP/1.1\r\nHost: x\r\n\r\n", buf, sizeof(buf));
    CHECK_CONTAINS(buf, "HTTP/1.1 401");
    CHECK_CONTAINS(buf, "WWW-Authenticate: Bearer realm=\"memtrim\"");
    CHECK(strstr(buf, "tok\"") == NULL);

    request(port, "PATCH /config HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", buf,
            sizeof(buf));
    CHECK_CONTAINS(buf, "HTTP/1.1 413");
    CHECK_CONTAINS(buf, "\"body_too_large\"");

    /* A chunked body over the cap: read, dropped, then 413. */
    int fd = connect_to(port);
    const char *head = "PATCH /config HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    send(fd, head, strlen(head), MSG_NOSIGNAL);
    char chunk[4096 + 16];
    int k = snprintf(chunk, sizeof(chunk), "1000\r\n");
    memset(chunk + k, ' ', 4096);
    memcpy(chunk + k + 4096, "\r\n", 2);
    for (int i = 0; i < 20; i++)
        send(fd, chunk, (size_t)k + 4096 + 2, MSG_NOSIGNAL);
    exchange(fd, "0\r\n\r\n", 5, buf, sizeof(buf));
    CHECK_CONTAINS(buf, "HTTP/1.1 413");
    close(fd);

    /* Keep-alive: two requests on one connection. */
    fd = connect_to(port);
    const char *req = "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n";
    exchange(fd, req, strlen(req), buf, sizeof(buf));
    CHECK_CONTAINS(buf, "HTTP/1.1 404");
    CHECK(strstr(buf, "Connection: close") == NULL);
    exchange(fd, req, strlen(req), buf, sizeof(buf));
    CHECK_CONTAINS(buf, "HTTP/1.1 404");
    close(fd);

    /* HEAD: the GET's status and headers (Content-Length too), no body. */
    char get[8192];
    request(port, "GET /openapi.yaml HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", get,
            sizeof(get));
    request(port, "HEAD /openapi.yaml HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", buf,
            sizeof(buf));
    CHECK_CONTAINS(buf, "HTTP/1.1 200");
    const char *cl = strstr(get, "Content-Length: ");
    CHECK(cl != NULL && atoi(cl + 16) > 0);
    if (cl != NULL) {
        char want[64];
        snprintf(want, sizeof(want), "Content-Length: %d\r\n", atoi(cl + 16));
        CHECK_CONTAINS(buf, want);
    }
    const char *end = strstr(buf, "\r\n\r\n");
    CHECK(end != NULL && end[4] == '\0');

    /* HTTP/1.1 without Host, and two Content-Length fields that disagree: 400, closed. */
    request(port, "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", buf, sizeof(buf));
    CHECK_CONTAINS(buf, "HTTP/1.1 400");
    CHECK_CONTAINS(buf, "needs a Host header");
    request(port, "PATCH /config HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
            "Content-Length: 30\r\n\r\n{}", buf, sizeof(buf));
    CHECK_CONTAINS(buf, "HTTP/1.1 400");
    CHECK_CONTAINS(buf, "Content-Length headers disagree");

    /* Query strings reach dispatch (unknown parameters come after auth and routing). */
    request(port, "GET /nowhere?a=%zz HTTP/1.1\r\nHost: x\r\n\r\n", buf, sizeof(buf));
    CHECK(strstr(buf, "HTTP/1.1 ") != NULL);
    server_stop(s);
}

/* The connection limits in the real daemon (two threads): 20 half-sent requests from one
 * address against MaxConnections 8 never keep out a whole request that comes after them;
 * the oldest ones are shut down (their peers see the end), none is refused. */
static void test_limits(void)
{
    struct server_options opt = {.bind = "127.0.0.1", .threads = 2, .max_connections = 8,
                                 .request_timeout_seconds = 3600};
    struct server *s = NULL;
    char *err = NULL, buf[8192];
    CHECK_EQ_INT(server_start(&opt, &api_routes, NULL, NULL, &s, &err), 0);
    if (s == NULL)
        return;
    int port = server_port(s);
    int half[20];
    const char *part = "PATCH /config HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n{\"a";
    for (int i = 0; i < 20; i++) {
        half[i] = connect_to(port);
        CHECK(half[i] >= 0);
        if (half[i] >= 0)
            send(half[i], part, strlen(part), MSG_NOSIGNAL);
    }
    request(port, "GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", buf,
            sizeof(buf));
    CHECK_CONTAINS(buf, "HTTP/1.1 404");
    uint64_t evicted = 0, refused = 0;
    server_conns_counts(&s->watchdog, &evicted, &refused);
    CHECK(evicted >= 13); /* 21 connections, at most 6 waiting from one address (3/4 of 8) */
    CHECK_EQ_INT(refused, 0);
    /* The first of them was displaced: its peer reads the end (the timeout guards a hang). */
    char c;
    CHECK(half[0] < 0 || recv(half[0], &c, 1, 0) <= 0);
    for (int i = 0; i < 20; i++)
        if (half[i] >= 0)
            close(half[i]);
    server_stop(s);
}

/* libmicrohttpd's panic handler is process-wide: memtrim installs its own only when
 * no other loaded object uses libmicrohttpd (a host's handler is never replaced). */
/* HttpSocketGroup as a number: a group id that does not fit gid_t, or is (gid_t)-1
 * ("no change" to chown), is refused with the key's name, not truncated. */
static void test_socket_group_id(void)
{
    char dir[] = "/tmp/memtrim-sockgrp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const char *bad[] = {"4294967295", "4294967296", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct server_options o;
        struct server_listener l;
        char *err = NULL;
        memset(&o, 0, sizeof(o));
        memset(&l, 0, sizeof(l));
        snprintf(o.bind, sizeof(o.bind), "unix:%s/s.sock", dir);
        snprintf(o.socket_group, sizeof(o.socket_group), "%s", bad[i]);
        CHECK_EQ_INT(server_listen_open(&o, &l, &err), -EINVAL);
        CHECK_MSG(err && strstr(err, "HttpSocketGroup") && strstr(err, "not a group id"),
                  "%s: %s", bad[i], err ? err : "(no error)");
        free(err);
    }
    rmdir(dir);
}

static void test_panic_handler_owner(void)
{
    /* This program links the server statically: it is memtrim's own object. */
    const char *other = server_mhd_other_user();
    CHECK_MSG(other == NULL, "another user of libmicrohttpd: %s", other);
    /* libmemtrim.so needs libmicrohttpd: loaded, it is another user. */
    void *lib = dlopen(MEMTRIM_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(lib != NULL, "dlopen: %s", dlerror());
    other = server_mhd_other_user();
    CHECK_CONTAINS(other, "libmemtrim.so");
    if (lib)
        dlclose(lib);
}

/* libtasn1's call, in front of it (CMakeLists.txt exports it from this binary, so GnuTLS's
 * calls come here): each call writes a byte to asn1_report while that is set. */
__attribute__((visibility("default"))) int asn1_delete_structure(void **structure);
static _Atomic int asn1_report = -1;
int asn1_delete_structure(void **structure)
{
    int (*real)(void **) = (int (*)(void **))dlsym(RTLD_NEXT, "asn1_delete_structure");
    int fd = atomic_load(&asn1_report);
    if (fd >= 0 && write(fd, "x", 1) != 1)
        atomic_store(&asn1_report, -1);
    return real ? real(structure) : 0;
}

/* LeakSanitizer's own hook (sanitizer/lsan_interface.h): its check at exit takes ASan's
 * allocator lock, which a thread of the parent (libmicrohttpd's) may have held at the fork:
 * the child would wait on it for ever (seen under ASan). The child turns the check off; its
 * GnuTLS destructor, the thing measured, still runs. */
static volatile int in_forked_child;
__attribute__((visibility("default"))) int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
    return in_forked_child;
}

/* The calls GnuTLS makes in a child that exits at once, -1 when no child ran. */
static int child_teardown_calls(void)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        in_forked_child = 1;
        atomic_store(&asn1_report, p[1]);
        exit(0); /* its atexit handlers and destructors run */
    }
    close(p[1]);
    char buf[4096];
    int n = 0;
    ssize_t k;
    while ((k = read(p[0], buf, sizeof(buf))) > 0)
        n += (int)k;
    close(p[0]);
    int st = -1;
    /* any exit status: a sanitizer's leak check may end a child that holds its parent's
     * memory (the calls were counted by then: GnuTLS's destructor runs before it) */
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? n : -1;
}

static void test_forked_child_skips_gnutls_teardown(void)
{
    /* memtrim builds against GnuTLS (CMakeLists.txt, tests/install-deps.sh): a libmicrohttpd
     * without it here is a broken build, not a case to skip */
    CHECK_MSG(dlsym(RTLD_DEFAULT, "gnutls_global_init") != NULL,
              "this libmicrohttpd links no GnuTLS");
    if (!dlsym(RTLD_DEFAULT, "gnutls_global_init"))
        return;
    int rc;
    char *err = NULL;
    struct server *s = start("", 0, &rc, &err);
    CHECK_EQ_INT(rc, 0);
    int running = child_teardown_calls();
    server_stop(s);
    int stopped = child_teardown_calls(); /* the control */
    printf("GnuTLS's teardown in a child: %d calls while the server runs, %d after its stop\n",
           running, stopped);
    CHECK_EQ_INT(running, 0);
    CHECK_MSG(stopped > 0, "the control: %d calls after the stop", stopped);
}

int main(void)
{
    RUN(test_panic_handler_owner);
    RUN(test_socket_group_id);
    RUN(test_ports);
    RUN(test_http);
    RUN(test_limits);
    RUN(test_forked_child_skips_gnutls_teardown);
    return harness_end();
}
