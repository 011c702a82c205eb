/*
 * fuzz_query.c - libFuzzer harness for the query-string parser
 * (server/query.c): any bytes go through query_parse, query_check and every
 * typed getter on every parsed key, and through the number and duration
 * parsers directly. Build and run with tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "query.h"

static const char *const known[] = {"since",  "until", "limit", "trigger",
                                    "metric", "step",  "pad",   NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    struct query q;
    char why[QUERY_WHY_SIZE];
    int64_t v = 0;
    query_init(&q);
    if (query_parse(&q, s, size) == 0) {
        query_check(&q, known, why, sizeof(why));
        query_check(&q, NULL, why, sizeof(why));
        for (int i = 0; i < q.n; i++) {
            const char *key = q.params[i].key;
            query_int(&q, key, 1, 10000, &v, why, sizeof(why));
            query_duration_ms(&q, key, 1, INT64_MAX / 8, &v, why, sizeof(why));
            query_time_ms(&q, key, INT64_MAX / 4, &v, why, sizeof(why));
            query_time_ms(&q, key, 0, &v, why, sizeof(why));
        }
    }
    query_parse_int(s, &v);
    query_parse_duration(s, &v);
    free(s);
    return 0;
}
