/*
 * query.h - query strings: parsed once per request into a small fixed-size
 * struct (no allocation), then read with typed getters that validate and say
 * what was wrong ("parameter 'limit': must be ..."). Used by the dispatcher,
 * the handlers and the fuzzer (tests/fuzz/fuzz_query.c).
 *
 * Threads: a struct query belongs to the thread that parsed it; no locks.
 *
 * Values the getters accept:
 *   integer   [-]digits, no sign for unsigned ranges, no spaces, no overflow
 *   duration  digits with an optional unit: ms (default), s, m, h, d ("90s", "1h")
 *   time      ms since the epoch ("1700000000000"), or a negative duration
 *             relative to now ("-3600000", "-1h")
 */
#ifndef MEMTRIM_SERVER_QUERY_H
#define MEMTRIM_SERVER_QUERY_H

#include <stddef.h>
#include <stdint.h>

#define QUERY_MAX_PARAMS 16
#define QUERY_BUF_SIZE 2048
#define QUERY_WHY_SIZE 256

struct query_param {
    const char *key;
    const char *value;
};

struct query {
    struct query_param params[QUERY_MAX_PARAMS];
    int n;
    int overflow; /* more parameters or bytes than fit: the request is refused */
    size_t used;
    char buf[QUERY_BUF_SIZE];
};

void query_init(struct query *q);

/* Add one decoded parameter (copied). Returns 0 or -E2BIG (sets overflow). */
int query_add(struct query *q, const char *key, const char *value);

/*
 * Parse a raw query string ("a=1&b=x%20y", without the '?'): '&'-separated,
 * '+' and %XX decoded, a key without '=' has the value "". Returns 0,
 * -EINVAL for a bad escape or an empty key, -E2BIG when it does not fit.
 */
int query_parse(struct query *q, const char *raw, size_t len);

/*
 * Decode a raw URI path (%XX, no '+' rule) into out (size bytes with the
 * NUL). Returns 0, -EINVAL for a bad escape or a NUL (%00), -E2BIG when it
 * does not fit.
 */
int query_decode_path(const char *raw, size_t n, char *out, size_t size);

/* The value of key, NULL when absent (the first one if repeated). */
const char *query_get(const struct query *q, const char *key);

/*
 * Refuse unknown keys (known is NULL-terminated, may be NULL), repeated keys
 * and overflow. Returns 0 or -EINVAL with the reason in why.
 */
int query_check(const struct query *q, const char *const *known, char *why, size_t whylen);

/*
 * Typed getters: 0 with *out set, 1 when the parameter is absent (*out
 * untouched), -EINVAL with the reason in why (which names the parameter).
 */
int query_int(const struct query *q, const char *key, int64_t min, int64_t max, int64_t *out,
              char *why, size_t whylen);
int query_duration_ms(const struct query *q, const char *key, int64_t min, int64_t max,
                      int64_t *out, char *why, size_t whylen);
int query_time_ms(const struct query *q, const char *key, int64_t now_ms, int64_t *out, char *why,
                  size_t whylen);

/* The parsers behind the getters, for tests: 0 or -EINVAL / -ERANGE. */
int query_parse_int(const char *s, int64_t *out);
int query_parse_duration(const char *s, int64_t *out_ms);

#endif /* MEMTRIM_SERVER_QUERY_H */
