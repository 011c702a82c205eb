/*
 * test_server_request.c - what server/request.c refuses from a request's
 * head before its body is read (server_check_head): HTTP/1.1 without Host or
 * with two, Content-Length fields that disagree or are not numbers; what it
 * lets through (HTTP/1.0 without Host, repeated equal lengths).
 *
 * Threads: one. Files: none.
 */
#include <errno.h>
#include <string.h>

#include "harness.h"
#include "http.h"
#include "internal.h"

static int check(const char *version, unsigned hosts, unsigned n, const char *const *lengths,
                 struct server_reply *rep)
{
    struct server_head h = {.version = version, .hosts = hosts, .lengths = n};
    for (unsigned i = 0; i < n && i < SERVER_HEAD_LENGTHS; i++)
        h.length[i] = lengths[i];
    server_reply_clear(rep);
    return server_check_head(&h, rep);
}

static void test_host(void)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    CHECK_EQ_INT(check("HTTP/1.1", 1, 0, NULL, &rep), 0);
    CHECK_EQ_INT(rep.status, 0);
    CHECK_EQ_INT(check("HTTP/1.1", 0, 0, NULL, &rep), -EINVAL);
    CHECK_EQ_INT(rep.status, 400);
    CHECK_CONTAINS(rep.body, "needs a Host header");
    CHECK_EQ_INT(check("HTTP/1.1", 2, 0, NULL, &rep), -EINVAL);
    CHECK_CONTAINS(rep.body, "2 Host headers");
    CHECK_EQ_INT(check("HTTP/1.0", 2, 0, NULL, &rep), -EINVAL);
    /* HTTP/1.0 has no Host requirement (and browsers always send one). */
    CHECK_EQ_INT(check("HTTP/1.0", 0, 0, NULL, &rep), 0);
    server_reply_clear(&rep);
}

static void test_lengths(void)
{
    struct server_reply rep;
    memset(&rep, 0, sizeof(rep));
    const char *one[] = {"5"};
    const char *same[] = {"5", "5", "5"};
    const char *differ[] = {"5", "50"};
    const char *late[] = {"5", "5", "5", "5", "5", "5", "5", "6"};
    const char *same8[] = {"5", "5", "5", "5", "5", "5", "5", "5"};
    const char *bad[] = {"5", "x"};
    const char *neg[] = {"-1"};
    const char *huge[] = {"99999999999999999999"};
    CHECK_EQ_INT(check("HTTP/1.1", 1, 1, one, &rep), 0);
    CHECK_EQ_INT(check("HTTP/1.1", 1, 3, same, &rep), 0);
    CHECK_EQ_INT(check("HTTP/1.1", 1, 2, differ, &rep), -EINVAL);
    CHECK_EQ_INT(rep.status, 400);
    CHECK_CONTAINS(rep.body, "disagree (5 and 50)");
    CHECK_EQ_INT(check("HTTP/1.1", 1, 8, late, &rep), -EINVAL);
    /* Past the fields kept (SERVER_HEAD_LENGTHS), the rest cannot be compared: refused. */
    CHECK_EQ_INT(check("HTTP/1.1", 1, SERVER_HEAD_LENGTHS + 1, same8, &rep), -EINVAL);
    CHECK_CONTAINS(rep.body, "9 Content-Length headers");
    CHECK_EQ_INT(check("HTTP/1.1", 1, 2, bad, &rep), -EINVAL);
    CHECK_CONTAINS(rep.body, "'x' is not one number");
    CHECK_EQ_INT(check("HTTP/1.1", 1, 1, neg, &rep), -EINVAL);
    CHECK_EQ_INT(check("HTTP/1.1", 1, 1, huge, &rep), -EINVAL);
    server_reply_clear(&rep);
}

int main(void)
{
    RUN(test_host);
    RUN(test_lengths);
    return harness_end();
}
