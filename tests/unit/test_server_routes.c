/*
 * test_server_routes.c - the route table against the contract: every route
 * is unique and its path and method appear in the embedded openapi.yaml;
 * every metric the store can chart (db_series_metrics) is a numeric field of
 * /memory/stats. With --list it prints "METHOD PATH" per route, which the
 * E2E contract test (tests/e2e/test_contract.py) compares with the spec in
 * both directions.
 *
 * Threads: one. Files: none.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "db.h"
#include "harness.h"
#include "http.h"
#include "types.h"

extern const unsigned char mt_asset_openapi[];
extern const unsigned long mt_asset_openapi_len;

/* The "  <path>:" block of the spec's paths, up to the next path; NULL if absent. */
static const char *spec_path_block(const char *spec, const char *path, size_t *len)
{
    char key[160];
    snprintf(key, sizeof(key), "\n  %s:\n", path);
    const char *p = strstr(spec, key);
    if (p == NULL)
        return NULL;
    p += strlen(key);
    const char *end = p;
    /* The block ends at the next line indented by exactly two spaces. */
    while ((end = strchr(end, '\n')) != NULL) {
        if (end[1] == ' ' && end[2] == ' ' && end[3] != ' ')
            break;
        if (end[1] != ' ' && end[1] != '\n')
            break;
        end++;
    }
    *len = end ? (size_t)(end - p) : strlen(p);
    return p;
}

static void test_routes_in_spec(void)
{
    const char *spec = (const char *)mt_asset_openapi;
    CHECK_EQ_INT(strlen(spec), mt_asset_openapi_len);
    for (size_t i = 0; i < api_routes.count; i++) {
        const struct server_route *r = &api_routes.table[i];
        CHECK_MSG(r->path[0] == '/' && r->handler != NULL, "%s", r->path);
        for (size_t j = 0; j < i; j++)
            CHECK_MSG(strcmp(r->path, api_routes.table[j].path) != 0 ||
                          strcmp(r->method, api_routes.table[j].method) != 0,
                      "%s %s twice", r->method, r->path);
        size_t len = 0;
        const char *block = spec_path_block(spec, r->path, &len);
        CHECK_MSG(block != NULL, "%s is not in openapi.yaml", r->path);
        if (block == NULL)
            continue;
        char op[32];
        size_t k = 0;
        k += (size_t)snprintf(op, sizeof(op), "    ");
        for (const char *m = r->method; *m && k < sizeof(op) - 3; m++)
            op[k++] = (char)(*m | 0x20);
        op[k++] = ':';
        op[k] = '\0';
        int found = 0;
        for (const char *p = block; p && p < block + len; p = strchr(p, '\n'), p = p ? p + 1 : p)
            if (strncmp(p, op, k) == 0 && p[k] == '\n')
                found = 1;
        CHECK_MSG(found, "%s %s is not in openapi.yaml", r->method, r->path);
    }
}

static void test_series_metrics_are_stats_fields(void)
{
    struct mt_snapshot s;
    memset(&s, 0, sizeof(s));
    s.cheap.timestamp_ms = 1;
    s.heap.timestamp_ms = 1;
    s.heap.known = MT_HEAP_HAS_IN_USE | MT_HEAP_HAS_FREE | MT_HEAP_HAS_MAPPED | MT_HEAP_HAS_MALLINFO;
    s.fragmentation_ratio = 1.5;
    s.cheap.cgroup_usage_bytes = 1;
    s.memory_limit_bytes = 1;
    s.heap.arena_count = 1;
    s.heap.known = MT_HEAP_HAS_IN_USE | MT_HEAP_HAS_FREE | MT_HEAP_HAS_MAPPED |
                   MT_HEAP_HAS_MALLINFO; /* a glibc reading: its fields are numbers */
    cJSON *stats = api_stats_to_json(&s);
    CHECK(stats != NULL);
    for (int i = 0; db_series_metrics[i] != NULL; i++) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(stats, db_series_metrics[i]);
        /* Integers are raw JSON numbers, printed once (api/json.c). */
        char *end = NULL;
        int numeric = cJSON_IsNumber(v) ||
                      (cJSON_IsRaw(v) && v->valuestring && v->valuestring[0] &&
                       (strtod(v->valuestring, &end), *end == '\0'));
        CHECK_MSG(numeric, "metric %s is not a numeric /memory/stats field",
                  db_series_metrics[i]);
    }
    cJSON_Delete(stats);
}

/* #31 F9: what the API prints is valid UTF-8 (a member's program name of other bytes made
 * /metrics unparseable): each bad byte becomes U+FFFD, a cut never splits a character. */
static void test_utf8_clean(void)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"memtrim-prefork", "memtrim-prefork"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"bad\xff\xfe", "bad\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc3", "\xef\xbf\xbd"},                      /* a lead byte at the end */
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},          /* overlong '/' */
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* a surrogate */
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
        {"a\x80" "b", "a\xef\xbf\xbd" "b"},
    };
    char out[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        api_utf8_clean(out, sizeof(out), cases[i].in, 0);
        CHECK_MSG(strcmp(out, cases[i].out) == 0, "case %zu", i);
    }
    api_utf8_clean(out, sizeof(out), "a\"b\\c\nd\xff", 1); /* a label value */
    CHECK(strcmp(out, "a\\\"b\\\\c\\nd\xef\xbf\xbd") == 0);
    CHECK_EQ_INT(api_utf8_clean(out, 5, "ab\xe2\x82\xac", 0), 2); /* no half euro sign */
    CHECK(strcmp(out, "ab") == 0);
    CHECK_EQ_INT(api_utf8_clean(out, 6, "ab\xe2\x82\xac", 0), 5);
    /* JSON strings too */
    cJSON *o = cJSON_CreateObject();
    int failed = 0;
    api_json_str(o, "program", "w\xff", &failed);
    CHECK(!failed);
    CHECK(strcmp(cJSON_GetObjectItem(o, "program")->valuestring, "w\xef\xbf\xbd") == 0);
    cJSON_Delete(o);
}

/* #31 F6: a member's released bytes added up (200 trims of 2^56) passed INT64_MAX and
 * /memory/stats printed a negative sum; unsigned counts saturate instead. */
static void test_u64_saturates(void)
{
    cJSON *o = cJSON_CreateObject();
    int failed = 0;
    api_json_u64(o, "big", UINT64_C(200) << 56, &failed);
    api_json_u64(o, "max", UINT64_MAX, &failed);
    api_json_u64(o, "exact", (UINT64_C(1) << 62) + 1, &failed);
    CHECK(!failed);
    char *text = cJSON_PrintUnformatted(o);
    CHECK_CONTAINS(text, "\"big\":9223372036854775807,\"max\":9223372036854775807,"
                         "\"exact\":4611686018427387905");
    free(text);
    cJSON_Delete(o);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < api_routes.count; i++)
            printf("%s %s\n", api_routes.table[i].method, api_routes.table[i].path);
        return 0;
    }
    RUN(test_routes_in_spec);
    RUN(test_series_metrics_are_stats_fields);
    RUN(test_utf8_clean);
    RUN(test_u64_saturates);
    return harness_end();
}
