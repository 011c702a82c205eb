/*
 * request.c - one request from its raw parts to a reply, without MHD: the
 * head's framing (Host present once on HTTP/1.1, Content-Length fields that
 * agree), the Host check (DNS rebinding), the cross-site check, the path and the query
 * decoded strictly from the raw request target (a %00 or a bad escape is a
 * 400, never a truncated value), then the route table. server.c feeds it
 * from libmicrohttpd; the fuzzer (tests/fuzz/fuzz_request.c) feeds it
 * directly, so both drive the same code down to the handlers.
 *
 * Threads: the HTTP worker thread of the request (or the fuzzer's); reads
 * struct server, which is read-only while the daemon runs; no locks.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http.h"
#include "internal.h"
#include "utf8.h"

#define SERVER_PATH_MAX 256

/*
 * A loopback name, with or without a port: localhost (also "localhost.",
 * localhost6, localhost.localdomain), 127.x.y.z, or an IPv6 loopback literal
 * in brackets ([::1], [0:0:0:0:0:0:0:1], [::ffff:127.0.0.1]).
 */
int server_host_is_local(const char *host)
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
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
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

/* The port of "host[:port]" or "[v6][:port]"; def when none is given, -1 when malformed. */
static long server_host_port(const char *hostport, long def)
{
    const char *p = hostport[0] == '[' ? strchr(hostport, ']') : hostport;
    if (p == NULL)
        return -1;
    p = strchr(p, ':');
    if (p == NULL)
        return def;
    char *end = NULL;
    long port = strtol(p + 1, &end, 10);
    return p[1] != '\0' && *end == '\0' && port >= 0 && port <= 65535 ? port : -1;
}

/* The length of the name in "host[:port]": up to the port, or the bracketed IPv6 literal. */
static size_t server_host_name_len(const char *hostport)
{
    const char *close = hostport[0] == '[' ? strchr(hostport, ']') : NULL;
    return close ? (size_t)(close - hostport) + 1 : strcspn(hostport, ":");
}

/* Whether origin "host[:port]" (after the scheme) names the server that Host names. */
static int server_same_server(const char *o, const char *host, int https)
{
    long oport = server_host_port(o, https ? 443 : 80);
    if (oport < 0 || oport != server_host_port(host, 80))
        return 0;
    if (server_host_is_local(o) && server_host_is_local(host))
        return 1;
    size_t n = server_host_name_len(o);
    return n == server_host_name_len(host) && strncasecmp(o, host, n) == 0;
}

/*
 * Whether a browser sent this request from another origin: Sec-Fetch-Site
 * other than same-origin or none (a page on another port of localhost is
 * "same-site", and still another origin), or an Origin that is not this
 * server as the Host header names it (two loopback names with the same port
 * count as the same server; another port is another origin). Returns NULL,
 * or why (in why).
 */
const char *server_cross_site(const char *host, const char *origin, const char *fetch_site,
                              char *why, size_t whylen)
{
    if (fetch_site != NULL && strcasecmp(fetch_site, "same-origin") != 0 &&
        strcasecmp(fetch_site, "none") != 0) {
        char shown[128];
        mt_utf8_quote(shown, sizeof(shown), fetch_site, 40);
        snprintf(why, whylen, "the browser says it comes from another site (Sec-Fetch-Site: %s)",
                 shown);
        return why;
    }
    if (origin == NULL)
        return NULL; /* curl, scripts, or a browser's own navigation */
    int https = strncasecmp(origin, "https://", 8) == 0;
    if (host != NULL && (https || strncasecmp(origin, "http://", 7) == 0) &&
        server_same_server(origin + (https ? 8 : 7), host, https))
        return NULL;
    char shown[320];
    mt_utf8_quote(shown, sizeof(shown), origin, 100);
    snprintf(why, whylen, "it comes from the web page at '%s'", shown);
    return why;
}

/* Split the raw target into the decoded path and the parsed query; NULL, or why not. */
static const char *server_target(const char *uri, char *path, size_t pathlen, struct query *q)
{
    size_t n = strcspn(uri, "?");
    int rc = query_decode_path(uri, n, path, pathlen);
    if (rc == -E2BIG) {
        snprintf(path, pathlen, "%s", "(too long)");
        return NULL; /* no route is that long: a 404 below */
    }
    if (rc != 0)
        return "the path: a bad percent-encoding or an encoded NUL (%00)";
    if (uri[n] == '?') {
        rc = query_parse(q, uri + n + 1, strlen(uri + n + 1));
        if (rc == -EINVAL)
            return "query string: a bad percent-encoding, an encoded NUL (%00) or an empty "
                   "parameter name";
    }
    return NULL; /* -E2BIG set q->overflow: query_check says so */
}

int server_check_head(const struct server_head *h, struct server_reply *rep)
{
    memset(rep, 0, sizeof(*rep));
    int http11 = h->version != NULL && strcmp(h->version, "HTTP/1.1") == 0;
    if (http11 && h->hosts == 0) {
        server_reply_error(rep, 400, "bad_request",
                           "an HTTP/1.1 request needs a Host header (RFC 9112 3.2)");
        return -EINVAL;
    }
    if (h->hosts > 1) {
        server_reply_error(rep, 400, "bad_request",
                           "%u Host headers: a request has one (RFC 9112 3.2)", h->hosts);
        return -EINVAL;
    }
    if (h->lengths > SERVER_HEAD_LENGTHS) { /* the ones past those kept could disagree */
        server_reply_error(rep, 400, "bad_request",
                           "%u Content-Length headers: a request has one (RFC 9112 6.3)",
                           h->lengths);
        return -EINVAL;
    }
    int64_t first = -1;
    for (unsigned i = 0; i < h->lengths; i++) {
        int64_t v;
        if (h->length[i] == NULL || query_parse_int(h->length[i], &v) != 0 || v < 0) {
            char shown[128];
            mt_utf8_quote(shown, sizeof(shown), h->length[i] ? h->length[i] : "", 40);
            server_reply_error(rep, 400, "bad_request",
                               "Content-Length '%s' is not one number of bytes", shown);
            return -EINVAL;
        }
        if (i > 0 && v != first) {
            server_reply_error(rep, 400, "bad_request",
                               "Content-Length headers disagree (%lld and %lld): which one "
                               "frames the body cannot be known (RFC 9112 6.3)",
                               (long long)first, (long long)v);
            return -EINVAL;
        }
        first = v;
    }
    return 0;
}

void server_process(struct server *s, const struct server_input *in, struct server_reply *rep)
{
    struct query q;
    char path[SERVER_PATH_MAX], cross[256];
    memset(rep, 0, sizeof(*rep));
    /* (A unix socket is never loopback here: no browser reaches it, any Host is fine.) */
    if (s->token[0] == '\0' && s->loopback && in->host != NULL && !server_host_is_local(in->host)) {
        char shown[320];
        mt_utf8_quote(shown, sizeof(shown), in->host, 100);
        server_reply_error(rep, 403, "forbidden_host",
                           "Host '%s' is not a loopback name; this server answers to "
                           "localhost and 127.0.0.1 only unless an AuthToken is set",
                           shown);
        return;
    }
    query_init(&q);
    const char *bad = server_target(in->uri, path, sizeof(path), &q);
    if (bad != NULL) {
        server_reply_error(rep, 400, "bad_parameter", "%s", bad);
        return;
    }
    struct server_request req = {
        .app = s->app,
        .srv = s,
        .store = s->store,
        .method = in->method,
        .path = path,
        .query = &q,
        .body = in->body,
        .body_len = in->body_len,
        .accept = in->accept,
        .cross_site = server_cross_site(in->host, in->origin, in->fetch_site, cross, sizeof(cross)),
    };
    struct server_caller who = {
        .authorization = in->authorization,
        .token = s->token,
        .read_token = s->read_token,
        .read_requires_auth = s->read_requires_auth, /* and a ReadToken: server_reads_need_auth */
        .unix_peer = in->unix_peer,
        .peer_admin = in->unix_peer && in->peer_uid >= 0 &&
                      (in->peer_uid == 0 || in->peer_uid == (long)s->uid),
        .peer_uid = in->peer_uid,
        .is_write = in->is_write,
    };
    server_dispatch_as(s->routes->table, s->routes->count, &req, &who, rep);
}
