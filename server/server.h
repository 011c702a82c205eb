/*
 * server.h - the embedded HTTP server (libmicrohttpd), as the engine and the
 * host adapters see it: start it with its options, a route table and a way
 * to reach the store's readers; stop it. The server knows nothing of the
 * engine: what it needs comes in here (the handlers get `app` back in each
 * request, see http.h).
 */
#ifndef MEMTRIM_SERVER_H
#define MEMTRIM_SERVER_H

#include <stddef.h>
#include <stdint.h>

struct server;
struct server_route;

/* A route table (api/ owns memtrim's: api_routes). */
struct server_routes {
    const struct server_route *table;
    size_t count;
};

/* The listening side: address, threads, limits and who may call. */
struct server_options {
    char bind[128];             /* "" = every address; "unix:/path" = a unix socket */
    int port;                   /* 0 = ephemeral */
    int threads;                /* MHD's thread pool; < 1 = 1 */
    int max_connections;        /* <= 0: auto, a share of RLIMIT_NOFILE (server.c) */
    int max_connections_per_ip; /* waiting ones per address; <= 0: 3/4 of the above */
    int connection_timeout_seconds; /* <= 0: none */
    char token[256];            /* the admin token; "" = none; never logged, never sent */
    char read_token[256];       /* the read scope's token; "" = none */
    int read_requires_auth;
    int allow_unauthenticated_remote; /* else a non-loopback bind needs a token */
    int request_timeout_seconds;      /* a request must arrive whole within this */
    /* HTTPS (tls.c): PEM files; "" = plain HTTP. tls_ca: require client certificates. */
    char tls_cert[512];
    char tls_key[512];
    char tls_ca[512];
    /* A unix socket bind ("unix:/path", listen.c): its mode (0 = 0660) and group ("" = ours). */
    int socket_mode;
    char socket_group[64];
};

/*
 * How the handlers reach the store, without the server knowing what it is:
 * the engine fills this (core/threads/store.c), the server pools the readers it
 * opens. Each function may run on any HTTP worker at once.
 *   state: 0 when readers may open; -ENODEV when no store is configured;
 *          -EAGAIN when it is not available now, with why[] saying so
 *          ("retrying: <reason>"). Always sets *generation, the store's
 *          current opening: pooled readers of another opening are closed.
 *   open:  0 with *reader, or a negative errno with *err (caller frees).
 */
struct server_store {
    void *ctx;
    int (*state)(void *ctx, uint64_t *generation, char *why, size_t why_size);
    int (*open)(void *ctx, void **reader, char **err);
    void (*close)(void *reader); /* accepts NULL */
};

/*
 * Start serving opt->bind:opt->port with routes; each request carries `app`
 * and `store` to its handler. Returns 0, or a negative errno value
 * (-EADDRINUSE, -EINVAL for a bad address, ...) with *err (caller frees with
 * free()). routes and store must outlive the server.
 */
int server_start(const struct server_options *opt, const struct server_routes *routes,
                 const struct server_store *store, void *app, struct server **out, char **err);

/* The bound port. */
int server_port(const struct server *s);

/* The bound address, numeric, with its port ("127.0.0.1:8043", "[::1]:8043"),
 * read from the listening socket, or "unix:/path". 0, -ENOENT (no server or
 * socket), -ENAMETOOLONG. */
int server_address(const struct server *s, char *buf, size_t size);

/* The certificates served since start that replaced the first (tls.c); 0 without TLS. */
uint64_t server_tls_reloads(const struct server *s);

/* Stop the daemon (waits for running handlers) and free; accepts NULL. */
void server_stop(struct server *s);

#endif /* MEMTRIM_SERVER_H */
