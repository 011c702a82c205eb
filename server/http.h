/*
 * http.h - what the server hands to the handlers in api/ and what they hand
 * back: a request (method, path, parsed query, body) and a reply (status,
 * content type, body, a few headers), plus the route table that connects the
 * two. Used by server/ and api/, and by a host adapter that serves the routes
 * through its host's own HTTP server (plugin/host_orthanc.c); the engine
 * (core/) sees only server.h.
 *
 * Threads: a request and its reply belong to the HTTP worker thread that runs
 * the handler; nothing here is shared, so nothing here locks.
 */
#ifndef MEMTRIM_SERVER_HTTP_H
#define MEMTRIM_SERVER_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include "query.h"
#include "server.h"

struct cJSON;

/* Request bodies larger than this are refused with 413. */
#define SERVER_BODY_MAX (64 * 1024)

struct server_request {
    void *app;                        /* what server_start was given (the instance) */
    struct server *srv;               /* NULL outside the daemon: readers are not pooled */
    const struct server_store *store; /* NULL: no store */
    const char *method;
    const char *path;
    const struct query *query;
    const char *body; /* NUL-terminated; "" when there is none */
    size_t body_len;
    const char *accept; /* the Accept header, NULL when absent */
    const char *cross_site; /* NULL, or why a browser sent it from another origin */
};

#define SERVER_REPLY_MAX_HEADERS 4

struct server_header {
    const char *name; /* a string literal */
    char value[128];
};

struct server_reply {
    unsigned status;          /* 0 = not filled */
    const char *content_type; /* a string literal */
    char *body;               /* malloc'd, freed by the server */
    const void *static_body;  /* or: bytes that outlive the response (assets) */
    size_t len;
    struct server_header headers[SERVER_REPLY_MAX_HEADERS];
    int nheaders;
};

typedef int (*server_handler)(const struct server_request *req, struct server_reply *rep);

/* Who may call a route (see the auth rules in auth.c). */
enum server_auth {
    SERVER_AUTH_NONE = 0, /* open even with a token: health, the contract, the page */
    SERVER_AUTH_READ,     /* needs the token when ReadRequiresAuth is set */
    SERVER_AUTH_WRITE     /* needs the token whenever one is set */
};

struct server_route {
    const char *method;
    const char *path;
    enum server_auth auth;
    const char *const *params; /* accepted query parameters, NULL-terminated; NULL = none */
    server_handler handler;
};

/*
 * Whether a browser sent a request from another origin (request.c): a
 * Sec-Fetch-Site other than same-origin/none, or an Origin that is not the
 * server the Host header names (another port is another origin). NULL, or
 * why (written to why): what server_request.cross_site takes.
 */
const char *server_cross_site(const char *host, const char *origin, const char *fetch_site,
                              char *why, size_t whylen);

/*
 * Who is calling and what the server accepts (auth.c, dispatch.c). Two scopes:
 * the admin token (AuthToken) may do everything, the read token (ReadToken)
 * only SERVER_AUTH_READ routes; a read token on a write gets 403. A peer on
 * the unix socket that runs as the host's user or root (SO_PEERCRED) is an
 * admin without a token; any other peer there writes only with the admin token.
 */
struct server_caller {
    const char *authorization; /* the Authorization header, NULL when absent */
    const char *token;         /* AuthToken, "" = none */
    const char *read_token;    /* ReadToken, "" = none (needs a token beside it) */
    int read_requires_auth;    /* ReadRequiresAuth as configured (server_reads_need_auth) */
    int unix_peer;             /* came over the unix socket listener */
    int peer_admin;            /* ... as the host's uid or root */
    long peer_uid;             /* when unix_peer, for the messages */
    int *is_write;             /* NULL, or set to 1 when the route matched changes state */
};

/*
 * Generic dispatch over a route table: 404, 405 + Allow, 401, 403 for a read
 * token on a write (insufficient_scope) or a unix peer that may not write,
 * a cross-site request to a state-changing (SERVER_AUTH_WRITE) route without
 * a token configured (403, whatever the method), unknown query parameters
 * (400), then the handler; a handler that fails without a reply gives 500.
 * Always fills *rep.
 */
void server_dispatch_as(const struct server_route *routes, size_t nroutes,
                        const struct server_request *req, const struct server_caller *who,
                        struct server_reply *rep);

/* The same for a TCP caller with the admin token only (`token` "" when none). */
void server_dispatch(const struct server_route *routes, size_t nroutes,
                     const struct server_request *req, const char *authorization, const char *token,
                     int read_requires_auth, struct server_reply *rep);

/* Replies (reply.c). Each returns 0, or -ENOMEM after filling a 500. */
int server_reply_json(struct server_reply *rep, unsigned status,
                      struct cJSON *json); /* frees json */
int server_reply_error(struct server_reply *rep, unsigned status, const char *code, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));
int server_reply_text(struct server_reply *rep, unsigned status, const char *content_type,
                      char *body, size_t len); /* takes body (malloc'd) */
void server_reply_static(struct server_reply *rep, unsigned status, const char *content_type,
                         const void *body, size_t len);
void server_reply_header(struct server_reply *rep, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void server_reply_clear(struct server_reply *rep); /* frees the body, zeroes */

/*
 * 400 for a bad query parameter: "parameter 'since': <why>". Returns -EINVAL
 * so that a handler can `return server_reply_bad_param(...)`.
 */
int server_reply_bad_param(struct server_reply *rep, const char *why);

/*
 * Constant-time check of an Authorization header against the token (auth.c).
 * Returns 1 when it carries "Bearer <token>", else 0.
 */
int server_auth_ok(const char *authorization, const char *token);
/* Whether a SERVER_AUTH_READ route needs a token: ReadRequiresAuth with an AuthToken,
 * or any ReadToken (a read scope is there to be asked for). The one place of the rule:
 * server_dispatch_as applies it for every host (request.c, host_orthanc.c), which pass
 * the configured ReadRequiresAuth as it is. */
int server_reads_need_auth(const struct server_caller *who);

/*
 * A read connection to the store for this request (readers.c), through
 * req->store: 0 with *out, or a negative errno after filling a 503 reply that
 * says why. Give it back with server_reader_put (broken = 1 closes it instead
 * of keeping it in the pool).
 */
int server_reader_get(const struct server_request *req, void **out, struct server_reply *rep);
void server_reader_put(const struct server_request *req, void *reader, int broken);

#endif /* MEMTRIM_SERVER_HTTP_H */
