/*
 * fuzz_request.c - libFuzzer harness for the whole request path: a raw
 * request (method, target, the headers the server reads, a body) goes
 * through server_process exactly as libmicrohttpd hands it over: the Host
 * and cross-site checks, the strict decoding of the path and the query, the
 * route table, and every handler down to the real instance behind them (the
 * probe, the trim service, the store's readers on an in-memory SQLite, the
 * configuration). Two servers take turns: one without a token (loopback
 * rules) and one with a token and ReadRequiresAuth.
 *
 * Input: lines separated by '\n': method, target, Host, Origin,
 * Sec-Fetch-Site, Authorization, Accept; the rest is the body. A line that is
 * missing is an absent header. With an Authorization line the server with
 * the token answers, without one the server without.
 * Build and run with tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "core.h"
#include "http.h"
#include "instance.h"
#include "internal.h"

#define FIELDS 7

static struct memtrim *fuzz_mt;
static struct server *fuzz_servers[2];

static int fuzz_start(void)
{
    char *err = NULL;
    /* No periodic work, one manual trim an hour: the fuzzer measures requests, not trims. */
    const char *cfg = "{\"HttpPort\": 0, \"Database\": \":memory:\", \"TrimIntervalSeconds\": 0,"
                      " \"SampleIntervalSeconds\": 1, \"ManualTrimMinIntervalMs\": 3600000,"
                      " \"PressureRatio\": 0}";
    if (mt_create(cfg, &api_routes, &fuzz_mt, &err) != 0 || fuzz_mt == NULL) {
        fprintf(stderr, "fuzz_request: memtrim did not start: %s\n", err ? err : "?");
        return -1;
    }
    fuzz_servers[0] = fuzz_mt->server;
    struct server *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -1;
    t->app = fuzz_mt;
    t->routes = fuzz_mt->server->routes;
    t->store = fuzz_mt->server->store;
    t->loopback = 1;
    t->read_requires_auth = 1;
    snprintf(t->token, sizeof(t->token), "%s", "fuzz-token");
    server_readers_init(&t->readers);
    fuzz_servers[1] = t;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_mt == NULL && fuzz_start() != 0)
        __builtin_trap();
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    const char *field[FIELDS] = {NULL};
    char *p = s;
    int n = 0;
    while (n < FIELDS && p != NULL) {
        char *nl = memchr(p, '\n', (size_t)(s + size - p));
        if (nl == NULL)
            break;
        *nl = '\0';
        field[n++] = p;
        p = nl + 1;
    }
    struct server_input in = {
        .method = field[0] && field[0][0] ? field[0] : "GET",
        .uri = field[1] ? field[1] : "/",
        .host = field[2],
        .origin = field[3],
        .fetch_site = field[4],
        .authorization = field[5],
        .accept = field[6],
        .body = p ? p : "",
        .body_len = p ? (size_t)(s + size - p) : 0,
    };
    struct server_reply rep;
    server_process(fuzz_servers[in.authorization != NULL], &in, &rep);
    if (rep.status < 200 || rep.status > 599 || (rep.body == NULL && rep.static_body == NULL))
        __builtin_trap(); /* every request gets a reply */
    server_reply_clear(&rep);
    free(s);
    return 0;
}
