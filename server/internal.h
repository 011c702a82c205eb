/*
 * internal.h - struct server, shared by the files of server/ only.
 * Written once by server_start before the daemon runs; afterwards the worker
 * threads only read it, except the reader pool, which has its own mutex.
 */
#ifndef MEMTRIM_SERVER_INTERNAL_H
#define MEMTRIM_SERVER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common.h"
#include "fdid.h"
#include "http.h"

struct MHD_Daemon;

struct MHD_Daemon;
struct MHD_Connection;
struct stat;
struct sockaddr_storage;

#define SERVER_READERS_MAX 16

struct server_readers {
    pthread_mutex_t lock;
    void *idle[SERVER_READERS_MAX]; /* opened by the store interface */
    int nidle;
    uint64_t generation; /* the store opening the idle readers belong to */
};

/*
 * A client's address as the connection limits count it (conns.c): every
 * loopback address (127.0.0.0/8, ::1, ::ffff:127.x) is one, an IPv4-mapped
 * IPv6 address is its IPv4 address, an IPv6 address counts by its /64 (one
 * host has a whole /64 to pick from), and the unix socket is one.
 */
enum server_addr_kind {
    SERVER_ADDR_OTHER = 0,
    SERVER_ADDR_LOOPBACK,
    SERVER_ADDR_V4,
    SERVER_ADDR_V6_64,
    SERVER_ADDR_UNIX
};
struct server_addr_key {
    uint8_t kind;     /* enum server_addr_kind */
    uint8_t bytes[8]; /* V4: 4 bytes; V6_64: the first 8; UNIX: the peer's uid (uint32_t,
                       * UINT32_MAX unknown); else zeros */
};
struct sockaddr;
void server_addr_key_of(const struct sockaddr *sa, struct server_addr_key *key);
/* A unix socket connection's key: its peer's uid (SO_PEERCRED on fd, the connection's own). */
void server_addr_key_of_peer(int fd, struct server_addr_key *key);
int server_addr_key_eq(const struct server_addr_key *a, const struct server_addr_key *b);
void server_addr_key_text(const struct server_addr_key *key, char *buf, size_t size);

/* One entry per open connection (watchdog.c keeps the list, conns.c admits). */
struct server_conn {
    struct server_conn *prev, *next;
    int fd;
    struct mt_fdid fd_id; /* the socket's identity: shut down only while fd is still it */
    struct server_addr_key key;
    int64_t deadline_ns; /* 0 = not waiting for a request (handler or reply running), or gone */
    int gone;            /* cut or evicted: shut down, MHD has yet to close it */
    int served;          /* has completed a request: waiting now means idle kept-alive */
};

/*
 * The connection limits (conns.c; DESIGN in docs/architecture.md). A
 * connection is "waiting" while the server waits for its client: no request
 * yet, one not arrived whole, or idle between kept-alive requests. Busy ones
 * (a handler or a reply running) are never evicted.
 * Of the waiting ones, those that never completed a request give way first,
 * the longest-waiting of them first; then idle kept-alive ones, the longest
 * idle first.
 *   cap:      open connections (MaxConnections); a new one past it evicts a
 *             waiting connection of any address, and is refused only when
 *             none waits;
 *   per_addr: waiting connections of one address (MaxConnectionsPerIp); a
 *             new one past it evicts one of that address's;
 *   hard:     open plus evicted-but-not-yet-closed connections: past it new
 *             ones are refused (evictions are not closing fast enough).
 */
struct server_limits {
    unsigned cap, per_addr, hard;
};

/* What to do with a new connection from `key`, given the open ones (pure, under the lock). */
struct server_admit {
    int refuse;                 /* 1: close the new connection at once */
    unsigned gone;              /* with refuse: evicted connections MHD has not closed yet */
    struct server_conn *victim; /* else: NULL, or the waiting connection to evict first */
    unsigned open;              /* open connections that are not gone */
    unsigned waiting_here;      /* waiting connections of the new one's address */
};
void server_admit_decide(const struct server_conn *head, const struct server_addr_key *key,
                         const struct server_limits *lim, struct server_admit *out);

struct server_watchdog {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    pthread_t thread;
    int started, stop, idle;
    int64_t timeout_ns;
    struct server_conn head; /* the list's sentinel */
    uint64_t cut;            /* connections cut at their deadline */
    struct server_limits limits;
    uint64_t evicted, refused; /* by the limits (conns.c) */
    struct mt_log_limit evict_log, refuse_log;
};

int server_watchdog_start(struct server_watchdog *w, int timeout_seconds);
void server_watchdog_stop(struct server_watchdog *w); /* after MHD has stopped */
/* A new connection, listed with its request deadline armed. */
void server_conn_shutdown(struct server_conn *c);
struct server_conn *server_watchdog_add(struct server_watchdog *w, int fd,
                                        const struct server_addr_key *key);
void server_watchdog_remove(struct server_watchdog *w, struct server_conn *c);
void server_watchdog_arm(struct server_watchdog *w, struct server_conn *c, int on);
uint64_t server_watchdog_cut(struct server_watchdog *w);
/* MHD's accept policy: 1 to take a connection from `key` (evicting one first if the
 * limits say so), 0 to refuse it (counted, and logged rate-limited). */
int server_conns_admit(struct server_watchdog *w, const struct server_addr_key *key);
/* Counters of the limits, for tests and the log. */
void server_conns_counts(struct server_watchdog *w, uint64_t *evicted, uint64_t *refused);

/* A request as received (server.c from MHD, or the fuzzer): header values NULL when absent. */
struct server_input {
    const char *method;
    const char *uri; /* the raw request target: path[?query], not decoded */
    const char *host;
    const char *origin;
    const char *fetch_site; /* Sec-Fetch-Site */
    const char *authorization;
    const char *accept;
    const char *body; /* NUL-terminated */
    size_t body_len;
    int unix_peer;  /* over the unix socket, with the peer's credentials: */
    long peer_uid, peer_gid, peer_pid;
    int *is_write; /* NULL, or set to 1 when the route matched changes state */
};

/*
 * What a request's head says about its framing, read before its body
 * (server.c from MHD, or a test): the checks that must refuse it before any
 * body is read, since the body's length is in question (request.c).
 */
#define SERVER_HEAD_LENGTHS 8
struct server_head {
    const char *version;  /* "HTTP/1.1", "HTTP/1.0", ... */
    unsigned hosts;       /* Host fields */
    unsigned lengths;     /* Content-Length fields (the first SERVER_HEAD_LENGTHS kept) */
    const char *length[SERVER_HEAD_LENGTHS];
};

/*
 * 0, or -EINVAL with a 400 in *rep: HTTP/1.1 without a Host field (so that
 * the loopback Host check against DNS rebinding cannot be skipped), more
 * than one Host, or Content-Length fields that are not one number each or
 * disagree (RFC 9112 6.3: which one frames the body is unknowable), or more
 * of them than SERVER_HEAD_LENGTHS (those past it are not kept to compare).
 */
int server_check_head(const struct server_head *h, struct server_reply *rep);

/* Run one request through the checks and the route table (request.c); always fills *rep. */
void server_process(struct server *s, const struct server_input *in, struct server_reply *rep);

int server_host_is_local(const char *host);

/* A message in a new string (vasprintf), NULL without memory; the caller frees it. */
char *server_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A file's identity, to see it replaced or rewritten (tls.c, listen.c). */
struct server_file_id {
    uint64_t ino, dev;
    int64_t size, mtime_ns, ctime_ns;
};
void server_file_id_of(const struct stat *st, struct server_file_id *id);

/* The listening socket (listen.c): TCP or unix, made here, handed to each daemon. */
struct server_listener {
    int fd;       /* -1 = none */
    int port;     /* TCP: the bound port */
    int loopback; /* TCP: bound to a loopback address */
    int is_unix;
    char unix_path[108];
    struct server_file_id unix_id; /* the socket file we made: removed at stop if still ours */
};
int server_listen_open(const struct server_options *cfg, struct server_listener *l, char **err);
void server_listen_close(struct server_listener *l);
int server_addr_is_loopback(const struct sockaddr_storage *addr);

/* A daemon's own context, handed to its access handler: which server, which generation of
 * the certificate (0 for plain HTTP; tls.c counts renewals in s->tls_gen). */
struct server;
struct server_dctx {
    struct server *s;
    unsigned gen;
};

/* The PEM files a TLS daemon serves, read and checked (tls.c); they live as long as it does. */
struct server_pems {
    struct server_dctx dctx; /* the daemon serving these files */
    char *cert, *key, *ca; /* NUL-terminated; ca NULL without HttpsClientCA */
    size_t cert_len, key_len, ca_len;
    struct server_file_id id[3]; /* cert, key, ca: what was read */
};
extern const char server_tls_priorities[];
int server_tls_available(char **err);
int server_tls_load(const struct server_options *o, struct server_pems **out, char **err);
void server_pems_free(struct server_pems *p); /* accepts NULL; wipes the key */
int server_tls_peer_ok(struct MHD_Connection *conn, char *why, size_t whylen);
/* reload.c: the "memtrim-tls" thread (needs s->daemon_start set); 0 or -errno */
int server_tls_reload_start(struct server *s);
void server_tls_reload_stop(struct server *s); /* joins it; stops a draining daemon */

struct server {
    struct MHD_Daemon *daemon; /* the current one; swapped by reload.c (read it atomically) */
    int gnutls_held; /* one reference of GnuTLS's global init count (server.c, gnutls_hold) */
    /* starts a daemon on s->listener (server.c's server_daemon_start, handed to
     * the reload thread so that reload.c needs nothing of server.c) */
    struct MHD_Daemon *(*daemon_start)(struct server *s, struct server_pems *pems);
    void *app;                        /* handed to every request */
    const struct server_routes *routes;
    const struct server_store *store; /* NULL: no store */
    int port;
    char token[256]; /* "" = no token; never logged, never sent */
    char read_token[256]; /* the read scope; "" = none */
    int read_requires_auth;
    int loopback;   /* bound to a loopback address: only local names may be the Host */
    struct server_readers readers;
    struct server_watchdog watchdog;
    struct mt_log_limit mhd_log; /* libmicrohttpd's messages (server.c) */
    struct server_options opt;   /* a copy: a daemon started later (tls.c) uses it */
    struct server_listener listener;
    uid_t uid;                   /* the host's: a unix peer of this uid (or root) is an admin */
    struct mt_log_limit peer_log; /* writes over the unix socket, with the peer (server.c) */
    /* TLS (tls.c): the current daemon's files, the one still draining after a renewal */
    struct server_pems *pems; /* NULL: plain HTTP; swapped by the reload thread only */
    int tls, tls_client_ca;   /* fixed at start: what the handlers read */
    struct server_dctx plain_dctx; /* a plain HTTP daemon's context */
    unsigned tls_gen;         /* the current daemon's generation (atomic: handlers read it) */
    unsigned tls_gen_started; /* the last generation started (start, then the reload thread) */
    pthread_mutex_t tls_lock;
    pthread_cond_t tls_cond;
    pthread_t tls_thread;
    int tls_started, tls_cond_init, tls_stop;
    struct MHD_Daemon *draining;
    struct server_pems *draining_pems;
    int64_t draining_until_ns;
    uint64_t tls_reloads;
    char tls_last_error[512];
};

/* Start a daemon on s->listener with s->opt and pems (NULL: plain HTTP); NULL when MHD fails. */
struct MHD_Daemon *server_daemon_start(struct server *s, struct server_pems *pems);

/* libmicrohttpd's process-wide panic handler: ours, unless another user of it is loaded (panic.c). */
void server_panic_install(void);
/* MHD_quiesce_daemon(d), surviving libmicrohttpd 0.9.75's race of its pool's quiesce with
 * its own workers (panic.c): 0, or -EBUSY when the race did not end in time (d is then
 * quiesced only in part: its stop must not be called, it would close our socket). */
int server_quiesce(struct MHD_Daemon *d);
/* How many of those races this process met and came through (tests). */
unsigned server_mhd_panics_survived(void);
/* The first loaded object other than memtrim's own that needs libmicrohttpd, or NULL
 * (its name is owned by the dynamic loader). */
const char *server_mhd_other_user(void);

void server_readers_init(struct server_readers *p);
void server_readers_free(struct server_readers *p, const struct server_store *store); /* closes the idle readers */

#endif /* MEMTRIM_SERVER_INTERNAL_H */
