/*
 * dispatch.c - generic dispatch over a route table: find the path (404), the
 * method (405 + Allow), check the token (401 + WWW-Authenticate), refuse
 * cross-site writes (403), unknown or repeated query parameters (400), run the handler, and turn a
 * handler that failed without a reply into a 500. Knows nothing of MHD, so
 * unit tests drive it with their own tables. Runs on HTTP worker threads;
 * reads only its arguments; no locks.
 */
#include "http.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int server_route_needs_token(const struct server_route *r, const char *token,
                                    int read_requires_auth)
{
    if (token == NULL || token[0] == '\0')
        return 0;
    switch (r->auth) {
    case SERVER_AUTH_WRITE:
        return 1;
    case SERVER_AUTH_READ:
        return read_requires_auth;
    default:
        return 0;
    }
}

void server_dispatch(const struct server_route *routes, size_t nroutes,
                     const struct server_request *req, const char *authorization, const char *token,
                     int read_requires_auth, struct server_reply *rep)
{
    const struct server_route *match = NULL;
    char allow[128] = "";
    size_t off = 0;

    for (size_t i = 0; i < nroutes; i++) {
        if (strcmp(routes[i].path, req->path) != 0)
            continue;
        if (strcmp(routes[i].method, req->method) == 0)
            match = &routes[i];
        if (off < sizeof(allow))
            off += (size_t)snprintf(allow + off, sizeof(allow) - off, "%s%s", off ? ", " : "",
                                    routes[i].method);
    }
    if (off == 0) {
        server_reply_error(rep, 404, "not_found",
                           "no resource at '%.100s' (the API is described at /openapi.yaml)",
                           req->path);
        return;
    }
    if (match == NULL) {
        server_reply_error(rep, 405, "method_not_allowed", "%.100s accepts %s, not %.16s",
                           req->path, allow, req->method);
        server_reply_header(rep, "Allow", "%s", allow);
        return;
    }
    if (server_route_needs_token(match, token, read_requires_auth) &&
        !server_auth_ok(authorization, token)) {
        int given = authorization != NULL && authorization[0] != '\0';
        server_reply_error(rep, 401, "unauthorized",
                           "%s %s needs 'Authorization: Bearer <token>'%s", match->method,
                           match->path, given ? "; the credentials given are not valid" : "");
        server_reply_header(rep, "WWW-Authenticate", "Bearer realm=\"memtrim\"%s",
                            given ? ", error=\"invalid_token\"" : "");
        return;
    }
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
    int rc = match->handler(req, rep);
    if (rep->status == 0)
        server_reply_error(rep, 500, "internal_error", "%s %s failed: %s", match->method,
                           match->path, strerror(rc < 0 ? -rc : EIO));
}
