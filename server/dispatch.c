/*
 * dispatch.c - generic dispatch over a route table: find the path (404), the
 * method (405 + Allow; HEAD runs the GET route), check the caller's scope (401 + WWW-Authenticate; 403
 * for a read token or a unix peer on a write), refuse
 * cross-site writes (403), unknown or repeated query parameters (400), run the handler, and turn a
 * handler that failed without a reply into a 500. Knows nothing of MHD, so
 * unit tests drive it with their own tables. Runs on HTTP worker threads;
 * reads only its arguments; no locks.
 */
#include "http.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

/* The scope the caller holds: 2 admin, 1 read, 0 none; *given: a credential was sent. */
static int server_scope(const struct server_caller *who, int *given)
{
    *given = who->authorization != NULL && who->authorization[0] != '\0';
    /* Both compared every time, in constant time, so the timing says nothing of which. */
    int admin = server_auth_ok(who->authorization, who->token);
    int read = server_auth_ok(who->authorization, who->read_token);
    if (admin || who->peer_admin)
        return 2;
    return read ? 1 : 0;
}

static void server_unauthorized(struct server_reply *rep, const struct server_route *r, int given)
{
    server_reply_error(rep, 401, "unauthorized", "%s %s needs 'Authorization: Bearer <token>'%s",
                       r->method, r->path,
                       given ? "; the credentials given are not valid" : "");
    server_reply_header(rep, "WWW-Authenticate", "Bearer realm=\"memtrim\"%s",
                        given ? ", error=\"invalid_token\"" : "");
}

/* 0 when the caller may use the route, else fills *rep (401/403) and returns -EACCES. */
static int server_authorize(const struct server_route *r, const struct server_caller *who,
                            struct server_reply *rep)
{
    int given, scope = server_scope(who, &given);
    int has_token = who->token != NULL && who->token[0] != '\0';
    if (r->auth == SERVER_AUTH_READ) {
        if (!server_reads_need_auth(who) || scope >= 1)
            return 0;
        server_unauthorized(rep, r, given);
        return -EACCES;
    }
    if (r->auth != SERVER_AUTH_WRITE || scope == 2)
        return 0;
    if (!has_token && !who->unix_peer)
        return 0; /* no token: writes are open (loopback; the cross-site check still applies) */
    if (scope == 1) {
        server_reply_error(rep, 403, "insufficient_scope",
                           "%s %s needs the admin token (AuthToken); the read token (ReadToken) "
                           "given may only read",
                           r->method, r->path);
        server_reply_header(rep, "WWW-Authenticate",
                            "Bearer realm=\"memtrim\", error=\"insufficient_scope\"");
        return -EACCES;
    }
    if (who->unix_peer && (!has_token || !given)) {
        server_reply_error(rep, 403, "forbidden_peer",
                           "%s %s over the unix socket is for the host's own user and root; uid "
                           "%ld may write only with the admin token%s",
                           r->method, r->path, who->peer_uid,
                           has_token ? "" : ", and none is configured");
        return -EACCES;
    }
    server_unauthorized(rep, r, given);
    return -EACCES;
}

void server_dispatch(const struct server_route *routes, size_t nroutes,
                     const struct server_request *req, const char *authorization, const char *token,
                     int read_requires_auth, struct server_reply *rep)
{
    struct server_caller who = {.authorization = authorization,
                                .token = token ? token : "",
                                .read_token = "",
                                .read_requires_auth = read_requires_auth};
    server_dispatch_as(routes, nroutes, req, &who, rep);
}

void server_dispatch_as(const struct server_route *routes, size_t nroutes,
                        const struct server_request *req, const struct server_caller *who,
                        struct server_reply *rep)
{
    const char *token = who->token;
    const struct server_route *match = NULL;
    char allow[128] = "";
    size_t off = 0;
    /* HEAD is GET without the body (RFC 9110 9.3.2): the GET route runs and the server
     * sends its status and headers only; Allow names HEAD wherever such a GET is. HEAD is
     * a safe method, so a GET that changes state (GET /memory/trim trims, for curl's
     * sake) has no HEAD: a link checker or a monitor's HEAD must never trim. */
    int head = strcmp(req->method, "HEAD") == 0;

    for (size_t i = 0; i < nroutes; i++) {
        if (strcmp(routes[i].path, req->path) != 0)
            continue;
        int get = strcmp(routes[i].method, "GET") == 0 && routes[i].auth != SERVER_AUTH_WRITE;
        if (strcmp(routes[i].method, req->method) == 0 || (head && get))
            match = &routes[i];
        if (off < sizeof(allow))
            off += (size_t)snprintf(allow + off, sizeof(allow) - off, "%s%s%s", off ? ", " : "",
                                    routes[i].method, get ? ", HEAD" : "");
    }
    char path[320], method[64];
    if (off == 0 || match == NULL)
        mt_utf8_quote(path, sizeof(path), req->path, 100);
    if (off == 0) {
        server_reply_error(rep, 404, "not_found",
                           "no resource at '%s' (the API is described at /openapi.yaml)", path);
        return;
    }
    if (match == NULL) {
        mt_utf8_quote(method, sizeof(method), req->method, 16);
        server_reply_error(rep, 405, "method_not_allowed", "%s accepts %s, not %s", path, allow,
                           method);
        server_reply_header(rep, "Allow", "%s", allow);
        return;
    }
    if (who->is_write != NULL && match->auth == SERVER_AUTH_WRITE)
        *who->is_write = 1;
    if (server_authorize(match, who, rep) != 0)
        return;
    /* A browser page must not change state here: without a token nothing else would stop it
     * (with one, the page cannot send it: browsers never add Authorization on their own). */
    if (match->auth == SERVER_AUTH_WRITE && req->cross_site != NULL &&
        (token == NULL || token[0] == '\0')) {
        server_reply_error(rep, 403, "forbidden_origin",
                           "%s %s from a browser on another origin is refused: %s; set an "
                           "AuthToken to allow other origins",
                           match->method, match->path, req->cross_site);
        return;
    }
    char why[QUERY_WHY_SIZE];
    if (query_check(req->query, match->params, why, sizeof(why)) != 0) {
        server_reply_bad_param(rep, why);
        return;
    }
    struct server_request as_get;
    if (head) {
        as_get = *req;
        as_get.method = "GET";
        req = &as_get;
    }
    int rc = match->handler(req, rep);
    if (rep->status == 0)
        server_reply_error(rep, 500, "internal_error", "%s %s failed: %s", match->method,
                           match->path, strerror(rc < 0 ? -rc : EIO));
}
