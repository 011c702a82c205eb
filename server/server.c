/*
 * server.c - the libmicrohttpd daemon: start (options, bind address, limits),
 * the access handler (request bodies with a cap, query parameters, dispatch
 * to the route table), replies to MHD responses, stop.
 *
 * Threads: MHD's internal epoll threads (a pool of HttpThreads) run
 * everything below except server_start/server_stop, which run on the
 * instance's lifecycle thread. struct server is read-only once the daemon
 * runs; per-request state lives in the connection (req_cls). Locks: none here
 * (the reader pool has its own, see readers.c).
 */
#include "server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "core.h"
#include "http.h"
#include "internal.h"

/* Per-connection memory: caps the request line, the URL and the headers. */
#define SERVER_CONN_MEMORY (32 * 1024)

/* The state of a request that has a body (req_cls). */
struct server_upload {
    char *body;
    size_t len;
    int too_large;
};

/* req_cls of a request without a body (no allocation for those), and of one refused early. */
static char server_no_upload;
static char server_too_large_upload;

static char *server_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *server_strdupf(const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

static void server_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    mt_log(MT_LOG_WARNING, "server", "libmicrohttpd: %s", msg);
}

/*
 * MHD calls this on internal inconsistencies instead of abort(). It is
 * allowed to return ("MHD will then try to continue"); a plugin must not end
 * its host, so we log and return.
 */
static void server_mhd_panic(void *cls, const char *file, unsigned int line, const char *reason)
{
    mt_log(MT_LOG_ERROR, "server", "libmicrohttpd panic at %s:%u: %s; trying to continue",
           file ? file : "?", line, reason ? reason : "no reason given");
}

static enum MHD_Result server_query_add(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value)
{
    query_add(cls, key, value);
    return MHD_YES;
}

/* Turn a reply into an MHD response and queue it. */
static enum MHD_Result server_send(struct MHD_Connection *conn, struct server_reply *rep)
{
    struct MHD_Response *resp;
    if (rep->body != NULL) {
        resp = MHD_create_response_from_buffer(rep->len, rep->body, MHD_RESPMEM_MUST_FREE);
        if (resp == NULL)
            free(rep->body);
        rep->body = NULL;
    } else {
        resp = MHD_create_response_from_buffer(rep->len, (void *)rep->static_body,
                                               MHD_RESPMEM_PERSISTENT);
    }
    if (resp == NULL)
        return MHD_NO;
    if (rep->content_type != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, rep->content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    for (int i = 0; i < rep->nheaders; i++)
        MHD_add_response_header(resp, rep->headers[i].name, rep->headers[i].value);
    enum MHD_Result ret = MHD_queue_response(conn, rep->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/*
 * A loopback name, with or without a port: localhost (also "localhost.",
 * localhost6, localhost.localdomain), 127.x.y.z, or an IPv6 loopback literal
 * in brackets ([::1], [0:0:0:0:0:0:0:1], [::ffff:127.0.0.1]).
 */
static int server_host_is_local(const char *host)
{
    static const char *const names[] = {"localhost", "localhost6", "localhost.localdomain",
                                        "ip6-localhost", NULL};
    char name[256];
    size_t n;
    if (host[0] == '[') {
        const char *end = strchr(host, ']');
        struct in6_addr a6;
        n = end ? (size_t)(end - host - 1) : 0;
        if (n == 0 || n >= sizeof(name) || (end[1] != '\0' && end[1] != ':'))
            return 0;
        memcpy(name, host + 1, n);
        name[n] = '\0';
        if (inet_pton(AF_INET6, name, &a6) != 1)
            return 0;
        return IN6_IS_ADDR_LOOPBACK(&a6) ||
               (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    }
    n = strcspn(host, ":");
    if (n == 0 || n >= sizeof(name))
        return 0;
    memcpy(name, host, n);
    name[n] = '\0';
    if (name[n - 1] == '.') /* a fully qualified name, as curl sends "localhost." */
        name[--n] = '\0';
    for (int i = 0; names[i]; i++)
        if (strcasecmp(name, names[i]) == 0)
            return 1;
    struct in_addr a4;
    return n >= 4 && strncmp(name, "127.", 4) == 0 && inet_pton(AF_INET, name, &a4) == 1;
}

/*
 * Without a token, a server on loopback trusts whoever can connect: then a
 * browser page must not reach it by another name (DNS rebinding) nor send it
 * writes from another site. Returns 0, or 403 filled in rep.
 */
static int server_check_origin(const struct server *s, struct MHD_Connection *conn,
                               const char *method, struct server_reply *rep)
{
    if (s->token[0] != '\0' || !s->loopback)
        return 0;
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (host != NULL && !server_host_is_local(host)) {
        server_reply_error(rep, 403, "forbidden_host",
                           "Host '%.100s' is not a loopback name; this server answers to "
                           "localhost and 127.0.0.1 only unless an AuthToken is set",
                           host);
        return 403;
    }
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (origin != NULL && strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        const char *o = strstr(origin, "://");
        if (o == NULL || !server_host_is_local(o + 3)) {
            server_reply_error(rep, 403, "forbidden_origin",
                               "a %s from the web page at '%.100s' is refused; set an AuthToken "
                               "to allow other origins",
                               method, origin);
            return 403;
        }
    }
    return 0;
}

static enum MHD_Result server_handle(struct server *s, struct MHD_Connection *conn, const char *url,
                                     const char *method, const char *body, size_t body_len)
{
    struct query q;
    query_init(&q);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, server_query_add, &q);

    struct server_request req = {
        .mt = s->mt,
        .srv = s,
        .method = method,
        .path = url,
        .query = &q,
        .body = body,
        .body_len = body_len,
        .accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT),
    };
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    if (server_check_origin(s, conn, method, &rep) == 0) {
        const char *authorization =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        server_dispatch(server_routes, server_nroutes, &req, authorization, s->token,
                        s->read_requires_auth, &rep);
    }
    return server_send(conn, &rep);
}

static enum MHD_Result server_too_large(struct MHD_Connection *conn)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    server_reply_error(&rep, 413, "body_too_large", "request bodies are limited to %d bytes",
                       SERVER_BODY_MAX);
    return server_send(conn, &rep);
}

/*
 * The first call, with the headers only. Replies are queued on the next call
 * (MHD closes the connection after a reply queued this early), except 413
 * for a declared body over the cap: then closing is what we want.
 */
static enum MHD_Result server_begin(struct MHD_Connection *conn, void **req_cls)
{
    const char *length =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *chunked =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    int64_t declared = 0;
    if (length != NULL && query_parse_int(length, &declared) != 0)
        declared = INT64_MAX;
    if (chunked == NULL && declared == 0) {
        *req_cls = &server_no_upload;
        return MHD_YES;
    }
    if (declared > SERVER_BODY_MAX) {
        *req_cls = &server_too_large_upload;
        return server_too_large(conn);
    }
    struct server_upload *up = calloc(1, sizeof(*up));
    if (up == NULL)
        return MHD_NO;
    *req_cls = up;
    return MHD_YES;
}

static enum MHD_Result server_access(void *cls, struct MHD_Connection *conn, const char *url,
                                     const char *method, const char *version,
                                     const char *upload_data, size_t *upload_data_size,
                                     void **req_cls)
{
    struct server *s = cls;
    if (*req_cls == NULL)
        return server_begin(conn, req_cls);
    if (*req_cls == &server_no_upload || *req_cls == &server_too_large_upload) {
        if (*upload_data_size > 0) {
            *upload_data_size = 0; /* an undeclared body, or one after a 413: dropped */
            return MHD_YES;
        }
        if (*req_cls == &server_too_large_upload)
            return MHD_YES;
        return server_handle(s, conn, url, method, "", 0);
    }
    struct server_upload *up = *req_cls;
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (up->too_large || up->len + n > SERVER_BODY_MAX) {
            up->too_large = 1;
            free(up->body);
            up->body = NULL;
            return MHD_YES;
        }
        char *grown = realloc(up->body, up->len + n + 1);
        if (grown == NULL)
            return MHD_NO;
        memcpy(grown + up->len, upload_data, n);
        up->body = grown;
        up->len += n;
        up->body[up->len] = '\0';
        return MHD_YES;
    }
    if (up->too_large)
        return server_too_large(conn);
    return server_handle(s, conn, url, method, up->body ? up->body : "", up->len);
}

static void server_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                             enum MHD_RequestTerminationCode toe)
{
    if (*req_cls != NULL && *req_cls != &server_no_upload && *req_cls != &server_too_large_upload) {
        struct server_upload *up = *req_cls;
        free(up->body);
        free(up);
    }
    *req_cls = NULL;
}

/* Resolve HttpBind:HttpPort (numeric addresses or names such as "localhost"). */
static int server_resolve(const struct mt_config *cfg, struct sockaddr_storage *addr,
                          socklen_t *addrlen, char **err)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof(port), "%d", cfg->http_port);
    struct addrinfo *res = NULL;
    const char *host = cfg->http_bind[0] ? cfg->http_bind : NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL || res->ai_addrlen > sizeof(*addr)) {
        *err = server_strdupf("memtrim/server: HttpBind '%s': %s", cfg->http_bind,
                              rc ? gai_strerror(rc) : "no address");
        if (res)
            freeaddrinfo(res);
        return -EINVAL;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* MHD does not say why it failed: try the bind ourselves to find out. */
static int server_bind_errno(const struct sockaddr_storage *addr, socklen_t addrlen)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int e = bind(fd, (const struct sockaddr *)addr, addrlen) == 0 ? 0 : errno;
    close(fd);
    return e;
}

static struct MHD_Daemon *server_daemon_start(struct server *s, const struct mt_config *cfg,
                                              const struct sockaddr_storage *addr)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    if (addr->ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    unsigned threads = cfg->http_threads > 0 ? (unsigned)cfg->http_threads : 1;
    unsigned limit = cfg->max_connections > 0 ? (unsigned)cfg->max_connections : 256;
    unsigned per_ip = cfg->max_connections_per_ip > 0 ? (unsigned)cfg->max_connections_per_ip : 0;
    unsigned timeout =
        cfg->connection_timeout_seconds > 0 ? (unsigned)cfg->connection_timeout_seconds : 0;
    MHD_set_panic_func(server_mhd_panic, NULL);
    return MHD_start_daemon(
        flags, (uint16_t)cfg->http_port, NULL, NULL, server_access, s, MHD_OPTION_EXTERNAL_LOGGER,
        server_mhd_log, (void *)s, MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)addr,
        MHD_OPTION_NOTIFY_COMPLETED, server_completed, (void *)s, MHD_OPTION_THREAD_POOL_SIZE,
        threads > 1 ? threads : 0u, MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT, timeout,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SERVER_CONN_MEMORY,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 256u, MHD_OPTION_END);
}

int server_start(struct memtrim *mt, const struct mt_config *cfg, struct server **out, char **err)
{
    struct sockaddr_storage addr;
    socklen_t addrlen = 0;
    *out = NULL;
    if (err)
        *err = NULL;
    char *msg = NULL;
    int rc = server_resolve(cfg, &addr, &addrlen, &msg);
    if (rc != 0)
        goto fail;

    struct server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        rc = -ENOMEM;
        msg = server_strdupf("memtrim/server: out of memory");
        goto fail;
    }
    s->mt = mt;
    snprintf(s->token, sizeof(s->token), "%s", cfg->auth_token);
    s->read_requires_auth = cfg->read_requires_auth;
    s->loopback = server_host_is_local(cfg->http_bind) || strcmp(cfg->http_bind, "::1") == 0;
    server_readers_init(&s->readers);

    s->daemon = server_daemon_start(s, cfg, &addr);
    if (s->daemon == NULL) {
        int e = server_bind_errno(&addr, addrlen);
        rc = e ? -e : -EIO;
        msg = server_strdupf("memtrim/server: cannot serve HTTP on %s:%d (HttpBind, HttpPort): %s",
                             cfg->http_bind, cfg->http_port,
                             e ? strerror(e) : "libmicrohttpd failed to start");
        server_readers_free(&s->readers);
        free(s);
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : cfg->http_port;
    mt_log(MT_LOG_INFO, "server", "serving HTTP on %s:%d with %d thread(s)", cfg->http_bind,
           s->port, cfg->http_threads > 0 ? cfg->http_threads : 1);
    *out = s;
    return 0;

fail:
    if (err)
        *err = msg;
    else
        free(msg);
    return rc;
}

int server_port(const struct server *s)
{
    return s ? s->port : -1;
}

int server_address(const struct server *s, char *buf, size_t size)
{
    const union MHD_DaemonInfo *info =
        s && s->daemon ? MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_LISTEN_FD) : NULL;
    struct sockaddr_storage addr;
    socklen_t len = sizeof(addr);
    char host[INET6_ADDRSTRLEN];
    if (info == NULL || info->listen_fd < 0 ||
        getsockname(info->listen_fd, (struct sockaddr *)&addr, &len) != 0 ||
        getnameinfo((struct sockaddr *)&addr, len, host, sizeof(host), NULL, 0, NI_NUMERICHOST))
        return -ENOENT;
    int n = snprintf(buf, size, addr.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, s->port);
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

void server_stop(struct server *s)
{
    if (s == NULL)
        return;
    /* Reverse of start: the threads first (this waits for running handlers), then what they read.
     */
    MHD_stop_daemon(s->daemon);
    server_readers_free(&s->readers);
    free(s);
}
