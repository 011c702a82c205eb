/*
 * test_query.c - the query-string parser and its typed getters: decoding,
 * limits, unknown and repeated keys, integers, durations, relative times,
 * and that every refusal names the parameter.
 *
 * Threads: one. Files: none.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "query.h"

static int parse(struct query *q, const char *raw)
{
    query_init(q);
    return query_parse(q, raw, strlen(raw));
}

static void test_parse(void)
{
    struct query q;
    CHECK_EQ_INT(parse(&q, "a=1&b=x%20y+z&c&&d="), 0);
    CHECK_EQ_INT(q.n, 4);
    CHECK(strcmp(query_get(&q, "a"), "1") == 0);
    CHECK(strcmp(query_get(&q, "b"), "x y z") == 0);
    CHECK(strcmp(query_get(&q, "c"), "") == 0);
    CHECK(strcmp(query_get(&q, "d"), "") == 0);
    CHECK(query_get(&q, "e") == NULL);
    CHECK_EQ_INT(parse(&q, ""), 0);
    CHECK_EQ_INT(q.n, 0);
    CHECK_EQ_INT(parse(&q, "a=%zz"), -EINVAL);
    CHECK_EQ_INT(parse(&q, "a=%4"), -EINVAL);
    CHECK_EQ_INT(parse(&q, "a=%00"), -EINVAL);
    CHECK_EQ_INT(parse(&q, "=1"), -EINVAL);
    CHECK_EQ_INT(parse(&q, "%41=%4a"), 0);
    CHECK(strcmp(query_get(&q, "A"), "J") == 0);
}

static void test_limits(void)
{
    struct query q;
    char raw[QUERY_BUF_SIZE * 2];
    size_t off = 0;
    for (int i = 0; i < QUERY_MAX_PARAMS + 1; i++)
        off += (size_t)snprintf(raw + off, sizeof(raw) - off, "k%d=v&", i);
    CHECK_EQ_INT(parse(&q, raw), -E2BIG);
    CHECK(q.overflow);
    memset(raw, 'a', sizeof(raw) - 1);
    raw[sizeof(raw) - 1] = '\0';
    raw[1] = '=';
    CHECK_EQ_INT(parse(&q, raw), -E2BIG);
    char why[QUERY_WHY_SIZE];
    CHECK_EQ_INT(query_check(&q, NULL, why, sizeof(why)), -EINVAL);
    CHECK_CONTAINS(why, "too long");

    query_init(&q);
    for (int i = 0; i < QUERY_MAX_PARAMS; i++)
        CHECK_EQ_INT(query_add(&q, "k", "v"), 0);
    CHECK_EQ_INT(query_add(&q, "k", "v"), -E2BIG);
}

static void test_check(void)
{
    static const char *const known[] = {"since", "limit", NULL};
    struct query q;
    char why[QUERY_WHY_SIZE];
    parse(&q, "since=1&limit=2");
    CHECK_EQ_INT(query_check(&q, known, why, sizeof(why)), 0);
    parse(&q, "sinse=1");
    CHECK_EQ_INT(query_check(&q, known, why, sizeof(why)), -EINVAL);
    CHECK_CONTAINS(why, "parameter 'sinse': unknown; known: since, limit");
    parse(&q, "limit=1&limit=2");
    CHECK_EQ_INT(query_check(&q, known, why, sizeof(why)), -EINVAL);
    CHECK_CONTAINS(why, "'limit': given more than once");
    parse(&q, "x=1");
    CHECK_EQ_INT(query_check(&q, NULL, why, sizeof(why)), -EINVAL);
    CHECK_CONTAINS(why, "takes no parameters");
}

static void test_numbers(void)
{
    int64_t v = 0;
    CHECK_EQ_INT(query_parse_int("0", &v), 0);
    CHECK_EQ_INT(query_parse_int("-42", &v), 0);
    CHECK_EQ_INT(v, -42);
    CHECK_EQ_INT(query_parse_int("9223372036854775807", &v), 0);
    CHECK_EQ_INT(query_parse_int("9223372036854775808", &v), -ERANGE);
    CHECK_EQ_INT(query_parse_int("", &v), -EINVAL);
    CHECK_EQ_INT(query_parse_int("-", &v), -EINVAL);
    CHECK_EQ_INT(query_parse_int(" 1", &v), -EINVAL);
    CHECK_EQ_INT(query_parse_int("1e3", &v), -EINVAL);
    CHECK_EQ_INT(query_parse_int("+1", &v), -EINVAL);

    CHECK_EQ_INT(query_parse_duration("1500", &v), 0);
    CHECK_EQ_INT(v, 1500);
    CHECK_EQ_INT(query_parse_duration("1500ms", &v), 0);
    CHECK_EQ_INT(v, 1500);
    CHECK_EQ_INT(query_parse_duration("90s", &v), 0);
    CHECK_EQ_INT(v, 90000);
    CHECK_EQ_INT(query_parse_duration("2m", &v), 0);
    CHECK_EQ_INT(v, 120000);
    CHECK_EQ_INT(query_parse_duration("1h", &v), 0);
    CHECK_EQ_INT(v, 3600000);
    CHECK_EQ_INT(query_parse_duration("7d", &v), 0);
    CHECK_EQ_INT(v, 7 * 86400000LL);
    CHECK_EQ_INT(query_parse_duration("1w", &v), -EINVAL);
    CHECK_EQ_INT(query_parse_duration("h", &v), -EINVAL);
    CHECK_EQ_INT(query_parse_duration("-1s", &v), -EINVAL);
    CHECK_EQ_INT(query_parse_duration("999999999999999999d", &v), -ERANGE);
    CHECK_EQ_INT(query_parse_duration("9999999999999999999", &v), -ERANGE);
}

static void test_getters(void)
{
    struct query q;
    char why[QUERY_WHY_SIZE];
    int64_t v = 7;
    parse(&q, "limit=0&step=1m&since=-1h&until=1700000000000&bad=-x&neg=-5");
    CHECK_EQ_INT(query_int(&q, "absent", 1, 10, &v, why, sizeof(why)), 1);
    CHECK_EQ_INT(v, 7);
    CHECK_EQ_INT(query_int(&q, "limit", 1, 10, &v, why, sizeof(why)), -EINVAL);
    CHECK_CONTAINS(why, "parameter 'limit': must be an integer from 1 to 10, got '0'");
    CHECK_EQ_INT(query_duration_ms(&q, "step", 1, 3600000, &v, why, sizeof(why)), 0);
    CHECK_EQ_INT(v, 60000);
    /* above the maximum (or beyond what ms count) a duration is the maximum */
    CHECK_EQ_INT(query_duration_ms(&q, "step", 1, 1000, &v, why, sizeof(why)), 0);
    CHECK_EQ_INT(v, 1000);
    CHECK_EQ_INT(query_duration_ms(&q, "step", 120000, 3600000, &v, why, sizeof(why)), -EINVAL);
    CHECK_CONTAINS(why, "parameter 'step'");
    CHECK_EQ_INT(query_time_ms(&q, "since", 10000000, &v, why, sizeof(why)), 0);
    CHECK_EQ_INT(v, 10000000 - 3600000);
    CHECK_EQ_INT(query_time_ms(&q, "until", 0, &v, why, sizeof(why)), 0);
    CHECK_EQ_INT(v, 1700000000000LL);
    CHECK_EQ_INT(query_time_ms(&q, "bad", 0, &v, why, sizeof(why)), -EINVAL);
    CHECK_CONTAINS(why, "parameter 'bad'");
    CHECK_EQ_INT(query_time_ms(&q, "neg", 1000, &v, why, sizeof(why)), 0);
    CHECK_EQ_INT(v, 995);
    /* Relative times before the epoch are the epoch; 19 digits are not a time. */
    CHECK_EQ_INT(query_time_ms(&q, "since", 1000, &v, why, sizeof(why)), 0);
    CHECK_EQ_INT(v, 0);
    parse(&q, "big=-999999999999999999d&long=1000000000000000000&huge=-9999999999999999999");
    CHECK_EQ_INT(query_time_ms(&q, "big", 1000, &v, why, sizeof(why)), 0);
    CHECK_EQ_INT(v, 0);
    CHECK_EQ_INT(query_time_ms(&q, "long", 1000, &v, why, sizeof(why)), -EINVAL);
    CHECK_EQ_INT(query_time_ms(&q, "huge", 1000, &v, why, sizeof(why)), -EINVAL);
    parse(&q, "d=999999999999999999d&e=9999999999999999999");
    CHECK_EQ_INT(query_duration_ms(&q, "d", 0, 5000, &v, why, sizeof(why)), 0);
    CHECK_EQ_INT(v, 5000);
    CHECK_EQ_INT(query_duration_ms(&q, "e", 0, 5000, &v, why, sizeof(why)), -EINVAL);
}

int main(void)
{
    RUN(test_parse);
    RUN(test_limits);
    RUN(test_check);
    RUN(test_numbers);
    RUN(test_getters);
    return harness_end();
}
