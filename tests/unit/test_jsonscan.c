/* test_jsonscan.c - the JSON pre-scan every document passes before cJSON parses it
 * (common/jsonscan.c), and the entry points that use it: config_parse (C ABI start string,
 * file, MEMTRIM_CONFIG) and config_patch (PATCH /config). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "harness.h"

/* n times open, a value, n times close: "[[[1]]]" or {"a":{"a":1}}. */
static char *nested(int n, const char *open, const char *close)
{
    size_t lo = strlen(open), lc = strlen(close);
    char *s = malloc((size_t)n * (lo + lc) + 2);
    size_t at = 0;
    for (int i = 0; i < n; i++, at += lo)
        memcpy(s + at, open, lo);
    s[at++] = '1';
    for (int i = 0; i < n; i++, at += lc)
        memcpy(s + at, close, lc);
    s[at] = '\0';
    return s;
}

static void test_scan(void)
{
    char why[160];
    CHECK_EQ_INT(mt_json_prescan("{}", 2, 100, 1, why, sizeof(why)), 0);
    CHECK_EQ_INT(mt_json_prescan("{\"a\":[1]}", 9, 100, 2, why, sizeof(why)), 0);
    CHECK_EQ_INT(mt_json_prescan("{\"a\":[1]}", 9, 100, 1, why, sizeof(why)), -ELOOP);
    CHECK_CONTAINS(why, "deeper than 1 levels");
    CHECK_CONTAINS(why, "at byte 5");
    /* brackets inside strings, escaped quotes, do not count */
    const char *s = "{\"[[[[\\\"[[[\": \"]]]{{{\"}";
    CHECK_EQ_INT(mt_json_prescan(s, strlen(s), 100, 1, why, sizeof(why)), 0);
    /* closings without openings never go below zero (cJSON refuses the text itself) */
    s = "]]]]]][[";
    CHECK_EQ_INT(mt_json_prescan(s, strlen(s), 100, 2, why, sizeof(why)), 0);
    CHECK_EQ_INT(mt_json_prescan(s, strlen(s), 100, 1, why, sizeof(why)), -ELOOP);
    /* size */
    CHECK_EQ_INT(mt_json_prescan("{}", 2, 1, 8, why, sizeof(why)), -E2BIG);
    CHECK_CONTAINS(why, "over the limit of 1 bytes");
    /* the bodies */
    char *a = nested(999, "[", "]"), *o = nested(999, "{\"a\":", "}");
    CHECK_EQ_INT(mt_json_prescan(a, strlen(a), 1 << 20, MT_JSON_DEPTH_MAX, why, sizeof(why)),
                 -ELOOP);
    CHECK_EQ_INT(mt_json_prescan(o, strlen(o), 1 << 20, MT_JSON_DEPTH_MAX, why, sizeof(why)),
                 -ELOOP);
    free(a);
    free(o);
    /* NULL why is allowed */
    CHECK_EQ_INT(mt_json_prescan("[[", 2, 100, 1, NULL, 0), -ELOOP);
}

static void test_config_entry_points(void)
{
    struct mt_config cfg;
    char *err = NULL;
    char *a = nested(999, "[", "]"), *o = nested(999, "{\"a\":", "}");
    CHECK_EQ_INT(config_parse(a, &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "deeper than 32 levels");
    free(err);
    CHECK_EQ_INT(config_parse(o, &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "deeper than 32 levels");
    free(err);
    config_defaults(&cfg);
    CHECK_EQ_INT(config_patch(&cfg, o, &err), -EINVAL);
    CHECK_CONTAINS(err, "deeper than 32 levels");
    free(err);
    /* 32 levels are still parsed (and refused for what they say) */
    char *ok = nested(31, "{\"MemoryTrim\":", "}");
    CHECK_EQ_INT(config_parse(ok, &cfg, &err), -EINVAL);
    CHECK(err && strstr(err, "deeper") == NULL);
    free(err);
    free(ok);
    /* a document over 1 MiB, whatever its shape */
    size_t big = MT_JSON_DOC_MAX + 1;
    char *b = malloc(big + 1);
    memset(b, ' ', big);
    b[0] = '{';
    b[big - 1] = '}';
    b[big] = '\0';
    CHECK_EQ_INT(config_parse(b, &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "over the limit of 1048576 bytes");
    free(err);
    free(b);
    free(a);
    free(o);
    /* what memtrim's own documents look like passes */
    CHECK_EQ_INT(config_parse("{\"MemoryTrim\": {\"Program\": [\"a*\", \"b\"]}}", &cfg, &err), 0);
}

/* cJSON's allocations through a hook that fails the fail_at-th call once (0: none), as
 * malloc fails: NULL with errno ENOMEM. */
static int calls, fail_at;
static void *failing_malloc(size_t n)
{
    if (++calls == fail_at) {
        errno = ENOMEM;
        return NULL;
    }
    return malloc(n);
}

/* One parse tells a failed allocation (-ENOMEM) from a document that is not JSON
 * (-EINVAL, *end where it stopped): the failed allocation is not retried away, and a
 * document is parsed once (as many allocations as one parse makes). */
static void test_parse_once(void)
{
    const char *doc = "{\"a\": [1, 2, {\"b\": \"text\"}]}", *end = NULL;
    cJSON *out = NULL;
    cJSON_Hooks hooks = {.malloc_fn = failing_malloc, .free_fn = free};
    cJSON_InitHooks(&hooks);
    calls = fail_at = 0;
    CHECK_EQ_INT(mt_json_parse(doc, strlen(doc), 1, &out, &end), 0);
    CHECK(out != NULL);
    cJSON_Delete(out);
    int one_parse = calls;
    CHECK(one_parse > 1);
    for (int k = 1; k <= one_parse; k++) {
        calls = 0;
        fail_at = k;
        out = (cJSON *)1;
        CHECK_MSG(mt_json_parse(doc, strlen(doc), 1, &out, &end) == -ENOMEM, "allocation %d", k);
        CHECK(out == NULL);
        CHECK_MSG(calls == k, "allocation %d failed, %d made: parsed again", k, calls);
    }
    calls = fail_at = 0;
    errno = EBADF;
    CHECK_EQ_INT(mt_json_parse("{\"a\": [1,, 2]}", 14, 1, &out, &end), -EINVAL);
    CHECK(out == NULL);
    CHECK(errno == EBADF); /* the caller's errno is left as it was */
    CHECK_EQ_INT(mt_json_parse("{} x", 4, 1, &out, &end), -EINVAL);
    CHECK(out == NULL);
    CHECK(end != NULL && *end == 'x');
    CHECK_EQ_INT(mt_json_parse("{} x", 4, 0, &out, NULL), 0); /* the end not required */
    cJSON_Delete(out);
    /* A failed allocation in config_parse says out of memory, not invalid JSON. */
    struct mt_config cfg;
    char *err = NULL;
    calls = 0;
    fail_at = 1;
    CHECK_EQ_INT(config_parse("{\"MemoryTrim\": {\"TrimIntervalSeconds\": 5}}", &cfg, &err),
                 -ENOMEM);
    CHECK_CONTAINS(err, "out of memory");
    free(err);
    cJSON_InitHooks(NULL);
}

int main(void)
{
    RUN(test_scan);
    RUN(test_config_entry_points);
    RUN(test_parse_once);
    return harness_end();
}
