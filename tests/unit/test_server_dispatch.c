/*
 * test_server_dispatch.c - generic dispatch over a table of fake routes:
 * 404, 405 with Allow, 401 with WWW-Authenticate (token never echoed), the
 * read/write auth levels, the two scopes (read token, admin token), the unix
 * socket peer rule, unknown parameters, a failing handler turned into
 * 500, and the bearer check itself.
 *
 * Threads: one. Files: none.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>

#include "harness.h"
#include "http.h"

static int h_ok(const struct server_request *req, struct server_reply *rep)
{
    return server_reply_json(rep, 200, cJSON_CreateObject());
}

/* The method the last handler saw. */
static char seen_method[16];

static int h_seen(const struct server_request *req, struct server_reply *rep)
{
    snprintf(seen_method, sizeof(seen_method), "%s", req->method);
    return server_reply_json(rep, 200, cJSON_CreateObject());
}

static int h_fail(const struct server_request *req, struct server_reply *rep)
{
    return -EIO; /* no reply: the dispatcher must answer 500 */
}

static const char *const params[] = {"since", NULL};
static const struct server_route routes[] = {
    {"GET", "/open", SERVER_AUTH_NONE, NULL, h_ok},
    {"GET", "/read", SERVER_AUTH_READ, params, h_ok},
    {"POST", "/write", SERVER_AUTH_WRITE, NULL, h_ok},
    {"GET", "/write", SERVER_AUTH_WRITE, NULL, h_ok},
    {"GET", "/fail", SERVER_AUTH_NONE, NULL, h_fail},
    {"GET", "/seen", SERVER_AUTH_READ, params, h_seen},
    {"POST", "/post-only", SERVER_AUTH_WRITE, NULL, h_seen},
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

static unsigned run(const char *method, const char *path, const char *qs, const char *auth,
                    const char *token, int read_auth, struct server_reply *rep)
{
    struct query q;
    query_init(&q);
    query_parse(&q, qs, strlen(qs));
    struct server_request req = {.method = method, .path = path, .query = &q, .body = ""};
    server_reply_clear(rep);
    server_dispatch(routes, NROUTES, &req, auth, token, read_auth, rep);
    return rep->status;
}

static const char *header(const struct server_reply *rep, const char *name)
{
    for (int i = 0; i < rep->nheaders; i++)
        if (strcmp(rep->headers[i].name, name) == 0)
            return rep->headers[i].value;
    return NULL;
}

static void test_dispatch(void)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    CHECK_EQ_INT(run("GET", "/open", "", NULL, "", 0, &rep), 200);
    CHECK_EQ_INT(run("GET", "/nope", "", NULL, "", 0, &rep), 404);
    CHECK_CONTAINS(rep.body, "\"code\":\"not_found\"");
    CHECK_EQ_INT(run("DELETE", "/write", "", NULL, "", 0, &rep), 405);
    CHECK_CONTAINS(header(&rep, "Allow"), "POST, GET");
    CHECK_EQ_INT(run("GET", "/read", "since=1", NULL, "", 0, &rep), 200);
    CHECK_EQ_INT(run("GET", "/read", "until=1", NULL, "", 0, &rep), 400);
    CHECK_CONTAINS(rep.body, "parameter 'until': unknown");
    CHECK_EQ_INT(run("GET", "/open", "x=1", NULL, "", 0, &rep), 400);
    CHECK_EQ_INT(run("GET", "/fail", "", NULL, "", 0, &rep), 500);
    CHECK_CONTAINS(rep.body, "\"code\":\"internal_error\"");
    server_reply_clear(&rep);
}

static void test_auth(void)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    const char *tok = "s3cret-token";
    /* Writes need the token once one is set; reads only with ReadRequiresAuth. */
    CHECK_EQ_INT(run("POST", "/write", "", NULL, "", 0, &rep), 200);
    CHECK_EQ_INT(run("POST", "/write", "", NULL, tok, 0, &rep), 401);
    CHECK_CONTAINS(header(&rep, "WWW-Authenticate"), "Bearer realm=\"memtrim\"");
    CHECK(strstr(rep.body, tok) == NULL);
    CHECK_EQ_INT(run("POST", "/write", "", "Bearer wrong", tok, 0, &rep), 401);
    CHECK_CONTAINS(header(&rep, "WWW-Authenticate"), "invalid_token");
    CHECK_EQ_INT(run("POST", "/write", "", "Bearer s3cret-token", tok, 0, &rep), 200);
    CHECK_EQ_INT(run("GET", "/read", "", NULL, tok, 0, &rep), 200);
    CHECK_EQ_INT(run("GET", "/read", "", NULL, tok, 1, &rep), 401);
    CHECK_EQ_INT(run("GET", "/read", "", "bearer s3cret-token", tok, 1, &rep), 200);
    CHECK_EQ_INT(run("GET", "/open", "", NULL, tok, 1, &rep), 200);
    server_reply_clear(&rep);
}

static unsigned run_as(const char *method, const char *path, const struct server_caller *who,
                       struct server_reply *rep)
{
    struct query q;
    query_init(&q);
    struct server_request req = {.method = method, .path = path, .query = &q, .body = ""};
    server_reply_clear(rep);
    server_dispatch_as(routes, NROUTES, &req, who, rep);
    return rep->status;
}

/* When reads need a token: ReadRequiresAuth with an AuthToken, or any ReadToken (the one
 * rule both hosts' dispatch applies: the embedded server's and Orthanc's route). */
static void test_reads_need_auth(void)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    struct server_caller who = {.token = "", .read_token = ""};
    CHECK_EQ_INT(server_reads_need_auth(&who), 0);
    who.read_requires_auth = 1; /* without a token there is nothing to ask for */
    CHECK_EQ_INT(server_reads_need_auth(&who), 0);
    who.token = "admin-tok";
    CHECK_EQ_INT(server_reads_need_auth(&who), 1);
    who.read_requires_auth = 0;
    CHECK_EQ_INT(server_reads_need_auth(&who), 0);
    CHECK_EQ_INT(run_as("GET", "/read", &who, &rep), 200);
    who.read_token = "read-tok"; /* a read token without ReadRequiresAuth: reads need it */
    CHECK_EQ_INT(server_reads_need_auth(&who), 1);
    CHECK_EQ_INT(run_as("GET", "/read", &who, &rep), 401);
    who.authorization = "Bearer read-tok";
    CHECK_EQ_INT(run_as("GET", "/read", &who, &rep), 200);
    server_reply_clear(&rep);
}

/* Two scopes: the read token reads and gets 403 (not 401) on a write; the admin token does both. */
static void test_scopes(void)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    struct server_caller who = {.token = "admin-tok", .read_token = "read-tok",
                                .read_requires_auth = 1};
    CHECK_EQ_INT(run_as("GET", "/read", &who, &rep), 401);
    CHECK_EQ_INT(run_as("GET", "/open", &who, &rep), 200);
    who.authorization = "Bearer read-tok";
    CHECK_EQ_INT(run_as("GET", "/read", &who, &rep), 200);
    CHECK_EQ_INT(run_as("POST", "/write", &who, &rep), 403);
    CHECK_CONTAINS(rep.body, "insufficient_scope");
    CHECK_CONTAINS(header(&rep, "WWW-Authenticate"), "error=\"insufficient_scope\"");
    CHECK(strstr(rep.body, "read-tok") == NULL);
    who.authorization = "Bearer admin-tok";
    CHECK_EQ_INT(run_as("GET", "/read", &who, &rep), 200);
    CHECK_EQ_INT(run_as("POST", "/write", &who, &rep), 200);
    who.authorization = "Bearer read-tokx";
    CHECK_EQ_INT(run_as("GET", "/read", &who, &rep), 401);
    CHECK_CONTAINS(header(&rep, "WWW-Authenticate"), "invalid_token");
    CHECK_EQ_INT(run_as("POST", "/write", &who, &rep), 401);
    server_reply_clear(&rep);
}

/* The unix socket: the host's uid or root writes without a token, another uid does not. */
static void test_unix_peer(void)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    struct server_caller who = {.token = "", .read_token = "", .unix_peer = 1, .peer_uid = 65534};
    CHECK_EQ_INT(run_as("GET", "/read", &who, &rep), 200);
    CHECK_EQ_INT(run_as("POST", "/write", &who, &rep), 403);
    CHECK_CONTAINS(rep.body, "forbidden_peer");
    CHECK_CONTAINS(rep.body, "uid 65534");
    who.peer_admin = 1;
    CHECK_EQ_INT(run_as("POST", "/write", &who, &rep), 200);
    /* With a token: another uid writes with it, not without it. */
    who.peer_admin = 0;
    who.token = "admin-tok";
    CHECK_EQ_INT(run_as("POST", "/write", &who, &rep), 403);
    who.authorization = "Bearer admin-tok";
    CHECK_EQ_INT(run_as("POST", "/write", &who, &rep), 200);
    who.authorization = "Bearer nope";
    CHECK_EQ_INT(run_as("POST", "/write", &who, &rep), 401);
    server_reply_clear(&rep);
}

/* HEAD runs the GET route (its handler sees GET; the server drops the body), with the GET's
 * checks; a path without GET gets 405, and so does a GET that writes (HEAD is safe: it
 * must never trim); Allow names HEAD wherever a reading GET is. */
static void test_head(void)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    seen_method[0] = '\0';
    CHECK_EQ_INT(run("HEAD", "/seen", "since=1", NULL, "", 0, &rep), 200);
    CHECK(strcmp(seen_method, "GET") == 0);
    CHECK_EQ_INT(run("HEAD", "/seen", "until=1", NULL, "", 0, &rep), 400);
    CHECK_EQ_INT(run("HEAD", "/seen", "", NULL, "tok", 1, &rep), 401);
    CHECK_EQ_INT(run("HEAD", "/open", "", NULL, "", 0, &rep), 200);
    CHECK_EQ_INT(run("HEAD", "/write", "", NULL, "", 0, &rep), 405); /* not the GET's 200 */
    CHECK(strcmp(header(&rep, "Allow"), "POST, GET") == 0);
    CHECK_EQ_INT(run("HEAD", "/post-only", "", NULL, "", 0, &rep), 405);
    CHECK(strcmp(header(&rep, "Allow"), "POST") == 0);
    CHECK_EQ_INT(run("PUT", "/write", "", NULL, "", 0, &rep), 405);
    CHECK(strcmp(header(&rep, "Allow"), "POST, GET") == 0);
    CHECK_CONTAINS(rep.body, "accepts POST, GET");
    CHECK_EQ_INT(run("PUT", "/open", "", NULL, "", 0, &rep), 405);
    CHECK(strcmp(header(&rep, "Allow"), "GET, HEAD") == 0);
    server_reply_clear(&rep);
}

static void test_bearer(void)
{
    CHECK(server_auth_ok("Bearer abc", "abc"));
    CHECK(!server_auth_ok("Bearer abcd", "abc"));
    CHECK(!server_auth_ok("Bearer ab", "abc"));
    CHECK(!server_auth_ok("Bearer ", "abc"));
    CHECK(!server_auth_ok("Basic abc", "abc"));
    CHECK(!server_auth_ok("abc", "abc"));
    CHECK(!server_auth_ok(NULL, "abc"));
    CHECK(!server_auth_ok("Bearer ", ""));
}

static void test_replies(void)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    CHECK_EQ_INT(server_reply_error(&rep, 429, "rate_limited", "wait %d ms", 5), 0);
    CHECK_EQ_INT(rep.status, 429);
    cJSON *doc = cJSON_Parse(rep.body);
    cJSON *err = cJSON_GetObjectItem(doc, "error");
    CHECK(cJSON_IsString(cJSON_GetObjectItem(err, "code")));
    CHECK(strcmp(cJSON_GetObjectItem(err, "message")->valuestring, "wait 5 ms") == 0);
    cJSON_Delete(doc);
    /* A quote in a message stays valid JSON (cJSON escapes it). */
    server_reply_error(&rep, 400, "bad_parameter", "got '\"}'");
    doc = cJSON_Parse(rep.body);
    CHECK(doc != NULL);
    cJSON_Delete(doc);
    /* NULL JSON (a failed allocation upstream) gives a 500, not a crash. */
    CHECK_EQ_INT(server_reply_json(&rep, 200, NULL), -ENOMEM);
    CHECK_EQ_INT(rep.status, 500);
    for (int i = 0; i < SERVER_REPLY_MAX_HEADERS + 2; i++)
        server_reply_header(&rep, "X-Test", "%d", i);
    CHECK_EQ_INT(rep.nheaders, SERVER_REPLY_MAX_HEADERS);
    server_reply_clear(&rep);
}

int main(void)
{
    RUN(test_dispatch);
    RUN(test_auth);
    RUN(test_scopes);
    RUN(test_reads_need_auth);
    RUN(test_unix_peer);
    RUN(test_head);
    RUN(test_bearer);
    RUN(test_replies);
    return harness_end();
}
