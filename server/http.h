/*
 * http.h - what the server hands to the handlers in api/ and what they hand
 * back: a request (method, path, parsed query, body) and a reply (status,
 * content type, body, a few headers), plus the route table that connects the
 * two. Internal to server/ and api/; core/ and plugin/ see only server.h.
 *
 * Threads: a request and its reply belong to the HTTP worker thread that runs
 * the handler; nothing here is shared, so nothing here locks.
 */
#ifndef MEMTRIM_SERVER_HTTP_H
#define MEMTRIM_SERVER_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include "query.h"

struct memtrim;
struct server;
struct cJSON;
struct db_reader;

/* Request bodies larger than this are refused with 413. */
#define SERVER_BODY_MAX (64 * 1024)

struct server_request {
    struct memtrim *mt;
    struct server *srv;
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

/* The route table (routes.c). */
extern const struct server_route server_routes[];
extern const size_t server_nroutes;

/*
 * Generic dispatch over a route table: 404, 405 + Allow, 401, a cross-site
 * request to a state-changing (SERVER_AUTH_WRITE) route without a token
 * configured (403, whatever the method), unknown query parameters (400),
 * then the handler; a handler that fails without a reply
 * gives 500. `token` is "" when no token is configured. Always fills *rep.
 */
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

/*
 * A read connection to the store for this request (readers.c): 0 with *out,
 * or a negative errno after filling a 503 reply that says why. Give it back
 * with server_reader_put (broken = 1 closes it instead of keeping it).
 */
int server_reader_get(struct server *s, struct memtrim *mt, struct db_reader **out,
                      struct server_reply *rep);
void server_reader_put(struct server *s, struct db_reader *r, int broken);

#endif /* MEMTRIM_SERVER_HTTP_H */
