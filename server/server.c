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
#include "mt_alloc.h"
#include "server.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "http.h"
#include "internal.h"

/* Per-connection memory: caps the request line, the URL and the headers. */
#define SERVER_CONN_MEMORY (32 * 1024)

/* Body bytes read and dropped past SERVER_BODY_MAX before the connection is cut. */
#define SERVER_DROP_MAX (1024 * 1024)

/*
 * libmicrohttpd's messages: a client causes most of them (a connection closed
 * mid-request, one over a limit), so they are rate-limited together
 * (SERVER_MHD_LOG_BURST per SERVER_MHD_LOG_WINDOW_NS, the rest counted).
 */
#define SERVER_MHD_LOG_BURST 5
#define SERVER_MHD_LOG_WINDOW_NS (10 * MT_SEC)

static void server_mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct server *s = cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    mt_log_limited(&s->mhd_log, MT_LOG_WARNING, "server", "libmicrohttpd: %s", msg);
}

/* Turn a reply into an MHD response and queue it. */
/* A connection of a daemon a renewed certificate replaced (d: the daemon's context, NULL
 * when unknown): its reply ends it, so that the client reconnects to the new one (tls.c).
 * (MHD_CONNECTION_INFO_DAEMON names a worker of the pool, never the daemon started: compared
 * with it, every TLS reply closed its connection, a handshake per request.) */
static int server_conn_draining(const struct server_dctx *d)
{
    return d != NULL && d->gen != __atomic_load_n(&d->s->tls_gen, __ATOMIC_ACQUIRE);
}

static enum MHD_Result server_send(const struct server_dctx *d, struct MHD_Connection *conn,
                                   struct server_reply *rep)
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
    if (server_conn_draining(d))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(conn, rep->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* The state of one request (req_cls), from its request line (MHD's URI log callback) on. */
struct server_call {
    char *uri; /* the raw request target, as received */
    char *body;
    size_t len;
    int begun;     /* the first call (headers only) has been seen */
    int too_large; /* more body than SERVER_BODY_MAX: refused, the rest dropped */
    int replied;   /* a reply is queued already (413) */
    int no_memory; /* the body could not be kept: 503 at its end */
    size_t dropped; /* body bytes read past the cap */
};

static void *server_uri_log(void *cls, const char *uri, struct MHD_Connection *conn)
{
    mt_thread_enter(); /* an MHD thread: the allocator's hook, once (common.h) */
    struct server_call *c = mt_calloc(1, sizeof(*c));
    if (c != NULL && (c->uri = mt_strdup(uri)) == NULL) {
        free(c);
        c = NULL;
    }
    return c; /* NULL: out of memory; the access handler answers 503 */
}

static struct server_conn *server_conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

/* Connections start and end: list them with the watchdog (the request deadline). */
static void server_notify_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                                     enum MHD_ConnectionNotificationCode code)
{
    struct server *s = cls;
    mt_thread_enter();
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *i =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *a =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        struct server_addr_key key;
        int admit = 1;
        if (s->listener.is_unix && i != NULL) {
            /* The unix socket's admission, by the peer's uid: server_accept left it here,
             * where the connection's descriptor is known (MHD's, handed just now). */
            server_addr_key_of_peer(i->connect_fd, &key);
            admit = server_conns_admit(&s->watchdog, &key);
        } else {
            server_addr_key_of(a ? a->client_addr : NULL, &key);
        }
        *socket_context = NULL;
        if (i != NULL && admit)
            *socket_context = server_watchdog_add(&s->watchdog, i->connect_fd, &key);
        else if (i != NULL) /* refused: unlisted, so it counts against no limit while closing */
            shutdown(i->connect_fd, SHUT_RDWR); /* MHD sees it closed and closes it */
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        server_watchdog_remove(&s->watchdog, *socket_context);
        *socket_context = NULL;
    }
}

static const char *server_header(struct MHD_Connection *conn, const char *name)
{
    return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, name);
}

/* The unix socket peer's credentials (SO_PEERCRED): 0, or -1 when they cannot be read. */
static int server_peer(struct MHD_Connection *conn, struct server_input *in)
{
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct ucred cred;
    socklen_t len = sizeof(cred);
    in->unix_peer = 1;
    in->peer_uid = in->peer_gid = in->peer_pid = -1;
    if (i == NULL || getsockopt(i->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return -1;
    in->peer_uid = (long)cred.uid;
    in->peer_gid = (long)cred.gid;
    in->peer_pid = (long)cred.pid;
    return 0;
}

static enum MHD_Result server_handle(const struct server_dctx *d, struct MHD_Connection *conn,
                                     const char *method, const struct server_call *c)
{
    struct server *s = d->s;
    struct server_reply rep;
    int is_write = 0;
    struct server_input in = {
        .method = method,
        .uri = c->uri,
        .host = server_header(conn, MHD_HTTP_HEADER_HOST),
        .origin = server_header(conn, "Origin"),
        .fetch_site = server_header(conn, "Sec-Fetch-Site"),
        .authorization = server_header(conn, MHD_HTTP_HEADER_AUTHORIZATION),
        .body = c->body ? c->body : "",
        .body_len = c->len,
        .accept = server_header(conn, MHD_HTTP_HEADER_ACCEPT),
        .is_write = &is_write,
    };
    char why[512];
    if (s->tls_client_ca && !server_tls_peer_ok(conn, why, sizeof(why))) {
        memset(&rep, 0, sizeof(rep));
        server_reply_error(&rep, 403, "client_certificate", "%s", why);
        server_reply_header(&rep, MHD_HTTP_HEADER_CONNECTION, "close");
        return server_send(d, conn, &rep);
    }
    if (s->listener.is_unix)
        server_peer(conn, &in);
    server_process(s, &in, &rep);
    if (is_write && in.unix_peer)
        mt_log_limited(&s->peer_log, MT_LOG_INFO, "server",
                       "unix socket: %s %.100s by uid %ld gid %ld pid %ld: %u", method,
                       c->uri, in.peer_uid, in.peer_gid, in.peer_pid, rep.status);
    return server_send(d, conn, &rep);
}

static enum MHD_Result server_too_large(struct MHD_Connection *conn, struct server_call *c)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    c->replied = 1;
    server_reply_error(&rep, 413, "body_too_large", "request bodies are limited to %d bytes",
                       SERVER_BODY_MAX);
    return server_send(NULL, conn, &rep);
}

/*
 * The first call, with the headers only. Replies are queued on the next call
 * (MHD closes the connection after a reply queued this early), except 413
 * for a declared body over the cap: then closing is what we want.
 */
static enum MHD_Result server_head_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                         size_t key_size, const char *value, size_t value_size)
{
    struct server_head *h = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0) {
        h->hosts++;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (h->lengths < SERVER_HEAD_LENGTHS)
            h->length[h->lengths] = value;
        h->lengths++;
    }
    return MHD_YES;
}

static enum MHD_Result server_begin(struct MHD_Connection *conn, const char *version,
                                    struct server_call *c)
{
    const char *length = server_header(conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
    int64_t declared = 0;
    c->begun = 1;
    /* A head that cannot be framed or lacks its Host: 400 now, and the connection closes. */
    struct server_head head = {.version = version};
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, server_head_field, &head);
    struct server_reply rep;
    if (server_check_head(&head, &rep) != 0) {
        c->replied = 1;
        return server_send(NULL, conn, &rep);
    }
    if (length != NULL && query_parse_int(length, &declared) != 0)
        declared = INT64_MAX;
    if (declared > SERVER_BODY_MAX) {
        c->too_large = 1;
        return server_too_large(conn, c);
    }
    return MHD_YES;
}

/*
 * Take a piece of the body. Past the cap the rest is read and dropped, for
 * a 413 at its end (MHD can reply only then); past SERVER_DROP_MAX more, or
 * at the request deadline, an endless body gets its connection cut.
 */
static enum MHD_Result server_upload(struct MHD_Connection *conn, struct server_call *c,
                                     const char *data, size_t *size)
{
    size_t n = *size;
    *size = 0;
    if (c->too_large) {
        c->dropped += n;
        return c->replied || c->dropped <= SERVER_DROP_MAX ? MHD_YES : MHD_NO;
    }
    if (n > SERVER_BODY_MAX - c->len) {
        c->too_large = 1;
        c->dropped = n;
        free(c->body);
        c->body = NULL;
        c->len = 0;
        return MHD_YES;
    }
    char *grown = mt_realloc(c->body, c->len + n + 1);
    if (grown == NULL) { /* read and drop the rest, as past the cap; 503 at the end */
        c->too_large = c->no_memory = 1;
        c->dropped = n;
        free(c->body);
        c->body = NULL;
        c->len = 0;
        return MHD_YES;
    }
    memcpy(grown + c->len, data, n);
    c->body = grown;
    c->len += n;
    c->body[c->len] = '\0';
    return MHD_YES;
}

/* Out of memory for a request's own state (its target, its body): a 503 that says so
 * (the reply falls back to a static body), and the connection closes. */
static enum MHD_Result server_no_memory(struct MHD_Connection *conn)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    server_reply_error(&rep, 503, "out_of_memory",
                       "memtrim could not allocate what this request needs; try again");
    server_reply_header(&rep, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    server_reply_header(&rep, MHD_HTTP_HEADER_CONNECTION, "close");
    return server_send(NULL, conn, &rep);
}

static enum MHD_Result server_access(void *cls, struct MHD_Connection *conn, const char *url,
                                     const char *method, const char *version,
                                     const char *upload_data, size_t *upload_data_size,
                                     void **req_cls)
{
    const struct server_dctx *d = cls; /* the daemon's: server_daemon_start */
    struct server *s = d->s;
    struct server_call *c = *req_cls;
    if (c == NULL) { /* no memory for the request's state (server_uri_log) */
        *upload_data_size = 0;
        return server_no_memory(conn);
    }
    if (!c->begun)
        return server_begin(conn, version, c);
    if (c->replied && !c->too_large) { /* refused on its head: the body is not ours to read */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size > 0)
        return server_upload(conn, c, upload_data, upload_data_size);
    if (c->replied)
        return MHD_YES;
    if (c->too_large)
        return c->no_memory ? server_no_memory(conn) : server_too_large(conn, c);
    /* The request is here whole: its deadline stops while it runs and replies. */
    server_watchdog_arm(&s->watchdog, server_conn_of(conn), 0);
    return server_handle(d, conn, method, c);
}

static void server_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                             enum MHD_RequestTerminationCode toe)
{
    struct server *s = cls;
    struct server_call *c = *req_cls;
    if (c != NULL) {
        free(c->uri);
        free(c->body);
        free(c);
    }
    *req_cls = NULL;
    /* A kept-alive connection waits for its next request: the deadline runs again. */
    server_watchdog_arm(&s->watchdog, server_conn_of(conn), 1);
}

/*
 * Connection limits (conns.c says how they act). Every connection holds one
 * of the host's descriptors, and the host needs them more than we do: by
 * default (MaxConnections 0) at most 1/8 of the soft RLIMIT_NOFILE, never
 * more than 128 (64 kept-alive clients behind one address and room beside
 * them), at least 8; at 1024, the common default, that is 128. One address
 * may have 3/4 of them waiting (MaxConnectionsPerIp 0): 64 idle kept-alive
 * connections and a flood beside them from the same address leave the 64
 * alone (the flood displaces its own). On the unix socket a peer's uid is its
 * address: another user's flood displaces its own connections, not the host
 * user's. Evicted connections close within MHD's next
 * round, and each of its threads accepts up to 10 connections in a round
 * (MHD_epoll's accept series) before it gets there: `hard` leaves them that
 * many and an eighth of the cap more (at least 4) before new ones are
 * refused.
 */
static void server_limits(const struct server_options *cfg, struct server_limits *lim)
{
    struct rlimit rl;
    rlim_t share = 128;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 8 < share)
        share = rl.rlim_cur / 8 < 8 ? 8 : rl.rlim_cur / 8;
    lim->cap = cfg->max_connections > 0 ? (unsigned)cfg->max_connections : (unsigned)share;
    lim->per_addr = cfg->max_connections_per_ip > 0 ? (unsigned)cfg->max_connections_per_ip
                                                    : (lim->cap * 3 + 3) / 4;
    unsigned threads = cfg->threads > 0 ? (unsigned)cfg->threads : 1;
    lim->hard = lim->cap + (lim->cap / 8 > 4 ? lim->cap / 8 : 4) + 10 * threads;
}

/* MHD's accept policy: the limits above, before MHD allocates anything (a refusal is silent).
 * The unix socket's connections are admitted by their peer's uid, which needs the descriptor
 * that this call does not get: server_notify_connection decides for them. */
static enum MHD_Result server_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    struct server *s = cls;
    mt_thread_enter(); /* before MHD's first allocation for a connection on this thread */
    if (s->listener.is_unix)
        return MHD_YES;
    struct server_addr_key key;
    server_addr_key_of(addrlen > 0 ? addr : NULL, &key);
    return server_conns_admit(&s->watchdog, &key) ? MHD_YES : MHD_NO;
}

struct MHD_Daemon *server_daemon_start(struct server *s, struct server_pems *pems)
{
    const struct server_options *cfg = &s->opt;
    /* The access handler's context names the daemon's generation (tls.c swaps s->tls_gen). */
    struct server_dctx *dctx = pems ? &pems->dctx : &s->plain_dctx;
    dctx->s = s;
    dctx->gen = pems ? ++s->tls_gen_started : 0;
    /* The first daemon's generation is the current one before its workers run: they read it
     * (server_conn_draining) as soon as a request comes, maybe before this returns (TSan saw
     * the write after them). A renewal's (reload.c) becomes current once it serves. */
    if (__atomic_load_n(&s->daemon, __ATOMIC_ACQUIRE) == NULL)
        __atomic_store_n(&s->tls_gen, dctx->gen, __ATOMIC_RELEASE);
    /* MHD_USE_ITC: MHD_quiesce_daemon hands the socket back (a renewal, and every stop). */
    /* TLS: poll(), not epoll. With libmicrohttpd 0.9.75's epoll, a connection whose TLS
     * handshake stalls keeps its worker spinning: 20 stalled ClientHellos took 0.25-0.30 s of
     * CPU a second, with poll none (test_hostile_tls measures it); our connections are few. */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | (pems ? MHD_USE_POLL : MHD_USE_EPOLL) |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (pems != NULL)
        flags |= MHD_USE_TLS;
    unsigned threads = cfg->threads > 0 ? (unsigned)cfg->threads : 1;
    /* MHD splits its own limit among its threads, and one thread may take every connection:
     * each gets room for all of ours, so that only server_accept ever refuses. */
    unsigned limit = (s->watchdog.limits.hard + threads) * threads;
    unsigned timeout =
        cfg->connection_timeout_seconds > 0 ? (unsigned)cfg->connection_timeout_seconds : 0;
    struct MHD_OptionItem tls[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, pems ? pems->cert : NULL},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, pems ? pems->key : NULL},
        {MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)server_tls_priorities},
        {pems && pems->ca ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END, 0,
         pems ? pems->ca : NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    server_panic_install(); /* once per process, and not over a host's own handler */
    return MHD_start_daemon(
        flags, 0, server_accept, s, server_access, dctx, MHD_OPTION_EXTERNAL_LOGGER, server_mhd_log,
        (void *)s, MHD_OPTION_LISTEN_SOCKET, s->listener.fd, MHD_OPTION_NOTIFY_COMPLETED,
        server_completed, (void *)s, MHD_OPTION_URI_LOG_CALLBACK, server_uri_log, (void *)s,
        MHD_OPTION_NOTIFY_CONNECTION, server_notify_connection, (void *)s,
        MHD_OPTION_THREAD_POOL_SIZE, threads > 1 ? threads : 0u, MHD_OPTION_CONNECTION_LIMIT,
        limit, MHD_OPTION_CONNECTION_TIMEOUT, timeout, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SERVER_CONN_MEMORY,
        MHD_OPTION_ARRAY, pems ? tls : &tls[4], MHD_OPTION_END);
}

/* Stop a daemon without letting it close the listening socket, which is ours (listen.c). */
static void server_daemon_stop(struct server *s, struct MHD_Daemon *d)
{
    if (d == NULL)
        return;
    if (server_quiesce(d) != 0) {
        /* Never seen: a worker that did not clear its flag within a second. Its stop
         * closes the listening socket's number (not quiesced): ours is forgotten. */
        mt_log(MT_LOG_WARNING, "server", "libmicrohttpd's quiesce did not complete: its stop "
                                         "closes the listening socket");
        s->listener.fd = -1;
    }
    MHD_stop_daemon(d);
}

/* Free what server_start made; the daemons are stopped already. */
static void server_free(struct server *s)
{
    server_listen_close(&s->listener);
    server_pems_free(s->pems);
    pthread_mutex_destroy(&s->tls_lock);
    pthread_mutex_destroy(&s->mhd_log.lock);
    pthread_mutex_destroy(&s->peer_log.lock);
    explicit_bzero(s->token, sizeof(s->token));
    explicit_bzero(s->read_token, sizeof(s->read_token));
    free(s);
}

/* Who may reach the listener, and whether the configuration allows it: 0 or -EPERM + *msg. */
static int server_check_exposure(const struct server *s, const struct server_options *cfg,
                                 char **msg)
{
    if (s->listener.is_unix || s->listener.loopback)
        return 0;
    if (s->token[0] == '\0' && !cfg->allow_unauthenticated_remote) {
        *msg = server_strdupf(
            "HttpBind '%s' is reachable from other machines and no AuthToken "
            "is set, so anyone there could trim and change the configuration; set AuthToken "
            "or AuthTokenFile, bind to 127.0.0.1, or set AllowUnauthenticatedRemote to true "
            "to accept that",
            cfg->bind);
        return -EPERM;
    }
    if (s->token[0] == '\0')
        mt_log(MT_LOG_WARNING, "server",
               "HttpBind '%s' is reachable from other machines without a token "
               "(AllowUnauthenticatedRemote): anyone there may trim and change the configuration",
               cfg->bind);
    if (s->pems == NULL)
        mt_log(MT_LOG_WARNING, "server",
               "HttpBind '%s' is reachable from other machines over plain HTTP: the token and "
               "every reply cross the network in clear; set HttpsCertificate and "
               "HttpsPrivateKey (docs/security.md)",
               cfg->bind);
    return 0;
}

/*
 * GnuTLS, which libmicrohttpd links, tears its global state down in an ELF destructor at
 * every exit (~160,000 instructions freeing its ASN.1 trees, callgrind) and, in a forked
 * child, writes to pages the child shares with its parent, each then copied: that was most
 * of what a FollowFork fork() cost (#31 F13). A running server holds one reference of
 * GnuTLS's own init count (gnutls_global_init, found at run time: memtrim links no GnuTLS
 * of its own), let go at its stop. A forked child never stops its parent's server, so it
 * exits with the count above one and GnuTLS's destructor only lowers it; the process that
 * started the server stops it first (the preload's destructor runs before GnuTLS's, which
 * it depends on) and GnuTLS frees everything at its exit as before.
 */
static int gnutls_hold(int take)
{
    int (*fn)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, take ? "gnutls_global_init"
                                                              : "gnutls_global_deinit");
    if (!fn)
        return 0; /* a libmicrohttpd without TLS: no GnuTLS in the process */
    if (!take) {
        fn();
        return 0;
    }
    return fn() == 0;
}

int server_start(const struct server_options *cfg, const struct server_routes *routes,
                 const struct server_store *store, void *app, struct server **out, char **err)
{
    *out = NULL;
    if (err)
        *err = NULL;
    char *msg = NULL;
    int rc;
    struct server *s = mt_calloc(1, sizeof(*s));
    if (s == NULL) {
        rc = -ENOMEM;
        msg = server_strdupf("out of memory");
        goto fail;
    }
    s->app = app;
    s->routes = routes;
    s->store = store;
    s->opt = *cfg;
    s->uid = geteuid();
    snprintf(s->token, sizeof(s->token), "%s", cfg->token);
    snprintf(s->read_token, sizeof(s->read_token), "%s", cfg->read_token);
    s->read_requires_auth = cfg->read_requires_auth;
    s->listener.fd = -1;
    pthread_mutex_init(&s->tls_lock, NULL);
    mt_log_limit_init(&s->mhd_log, SERVER_MHD_LOG_WINDOW_NS, SERVER_MHD_LOG_BURST);
    mt_log_limit_init(&s->peer_log, SERVER_MHD_LOG_WINDOW_NS, SERVER_MHD_LOG_BURST);
    /* The files first: a bad certificate must not leave a socket behind. */
    if (cfg->tls_cert[0] && ((rc = server_tls_available(&msg)) != 0 ||
                             (rc = server_tls_load(cfg, &s->pems, &msg)) != 0)) {
        server_free(s);
        goto fail;
    }
    s->tls = s->pems != NULL;
    s->tls_client_ca = s->pems != NULL && s->pems->ca != NULL;
    if ((rc = server_listen_open(cfg, &s->listener, &msg)) != 0) {
        server_free(s);
        goto fail;
    }
    s->port = s->listener.port;
    s->loopback = s->listener.loopback;
    if ((rc = server_check_exposure(s, cfg, &msg)) != 0) {
        server_free(s);
        goto fail;
    }
    server_readers_init(&s->readers);
    rc = server_watchdog_start(&s->watchdog, cfg->request_timeout_seconds);
    if (rc == 0) /* before any connection */
        server_limits(cfg, &s->watchdog.limits);
    if (rc != 0) {
        msg = server_strdupf("cannot start the request watchdog: %s", strerror(-rc));
        server_readers_free(&s->readers, s->store);
        server_free(s);
        goto fail;
    }
    s->daemon_start = server_daemon_start;
    s->daemon = server_daemon_start(s, s->pems); /* it sets tls_gen (the first daemon's) */
    if (s->daemon == NULL) {
        rc = -EIO;
        msg = server_strdupf("cannot serve HTTP%s on %s (HttpBind, HttpPort): libmicrohttpd "
                             "failed to start%s",
                             s->pems ? "S" : "", cfg->bind,
                             s->pems ? " with the certificate (see its message above)" : "");
        server_watchdog_stop(&s->watchdog);
        server_readers_free(&s->readers, s->store);
        server_free(s);
        goto fail;
    }
    if (s->pems != NULL && (rc = server_tls_reload_start(s)) != 0) {
        msg = server_strdupf("cannot start the certificate reload thread: %s", strerror(-rc));
        server_daemon_stop(s, s->daemon);
        server_watchdog_stop(&s->watchdog);
        server_readers_free(&s->readers, s->store);
        server_tls_reload_stop(s);
        server_free(s);
        goto fail;
    }
    s->gnutls_held = gnutls_hold(1);
    char where[256];
    if (s->listener.is_unix)
        snprintf(where, sizeof(where), "unix socket %s (mode %04o%s%s)", s->listener.unix_path,
                 cfg->socket_mode > 0 ? (unsigned)cfg->socket_mode : 0660u,
                 cfg->socket_group[0] ? ", group " : "", cfg->socket_group);
    else
        snprintf(where, sizeof(where), "%s:%d", cfg->bind, s->port);
    mt_log(MT_LOG_INFO, "server",
           "serving HTTP%s on %s with %d thread(s), at most %u connections (%u waiting per "
           "address; past either, a waiting one gives way), %d s for a request to arrive%s",
           s->pems ? "S" : "", where, cfg->threads > 0 ? cfg->threads : 1,
           s->watchdog.limits.cap, s->watchdog.limits.per_addr, cfg->request_timeout_seconds,
           s->pems && s->pems->ca ? "; client certificates required (HttpsClientCA)" : "");
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

uint64_t server_tls_reloads(const struct server *s)
{
    return s ? __atomic_load_n(&s->tls_reloads, __ATOMIC_RELAXED) : 0;
}

int server_address(const struct server *s, char *buf, size_t size)
{
    struct sockaddr_storage addr;
    socklen_t len = sizeof(addr);
    char host[INET6_ADDRSTRLEN];
    int n;
    if (s == NULL || s->listener.fd < 0)
        return -ENOENT;
    if (s->listener.is_unix) {
        n = snprintf(buf, size, "unix:%s", s->listener.unix_path);
    } else {
        if (getsockname(s->listener.fd, (struct sockaddr *)&addr, &len) != 0 ||
            getnameinfo((struct sockaddr *)&addr, len, host, sizeof(host), NULL, 0,
                        NI_NUMERICHOST))
            return -ENOENT;
        n = snprintf(buf, size, addr.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, s->port);
    }
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

void server_stop(struct server *s)
{
    if (s == NULL)
        return;
    /* Reverse of start: the threads first (this waits for running handlers), then what they
     * read. The reload thread first, so that no daemon starts behind our back. */
    server_tls_reload_stop(s);
    if (mt_fds_lost()) {
        /* The host closed memtrim's descriptors (common/fdid.h): stopping libmicrohttpd
         * would write its wake-up and close the listening and connection sockets by
         * number, numbers that are the host's files now. Its threads sleep in
         * epoll_wait on an epoll file only they hold (its descriptor is gone): they are
         * left there, with everything they may read (the server is not freed). */
        server_watchdog_stop(&s->watchdog);
        mt_log(MT_LOG_WARNING, "server", "stopped without closing: the host closed memtrim's "
                                         "descriptors, so libmicrohttpd's are left as they are");
        return;
    }
    server_daemon_stop(s, s->daemon);
    server_watchdog_stop(&s->watchdog);
    server_readers_free(&s->readers, s->store);
    if (s->gnutls_held)
        gnutls_hold(0);
    uint64_t dropped = mt_log_limit_flush(&s->mhd_log);
    if (dropped > 0)
        mt_log(MT_LOG_WARNING, "server", "libmicrohttpd: %llu more message(s) dropped since the "
               "last one logged", (unsigned long long)dropped);
    server_free(s);
}
