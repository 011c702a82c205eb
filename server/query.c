/*
 * query.c - query-string parsing and typed, validating getters (see query.h).
 * Owns nothing beyond the caller's struct query; runs on the HTTP worker
 * thread of the request (and in the fuzzer); takes no locks, never allocates.
 */
#include "query.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

void query_init(struct query *q)
{
    q->n = 0;
    q->overflow = 0;
    q->used = 0;
}

/* Copy n bytes into the query's buffer, NUL-terminated. */
static char *query_store(struct query *q, const char *s, size_t n)
{
    if (q->used + n + 1 > sizeof(q->buf)) {
        q->overflow = 1;
        return NULL;
    }
    char *dst = q->buf + q->used;
    memcpy(dst, s, n);
    dst[n] = '\0';
    q->used += n + 1;
    return dst;
}

int query_add(struct query *q, const char *key, const char *value)
{
    if (q->n >= QUERY_MAX_PARAMS) {
        q->overflow = 1;
        return -E2BIG;
    }
    if (value == NULL)
        value = "";
    const char *k = query_store(q, key, strlen(key));
    const char *v = k ? query_store(q, value, strlen(value)) : NULL;
    if (v == NULL)
        return -E2BIG;
    q->params[q->n].key = k;
    q->params[q->n].value = v;
    q->n++;
    return 0;
}

static int query_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decode s[0..n) ('+' and %XX) into the buffer; NULL on a bad escape or overflow. */
static char *query_decode(struct query *q, const char *s, size_t n, int *bad)
{
    if (q->used + n + 1 > sizeof(q->buf)) {
        q->overflow = 1;
        return NULL;
    }
    char *dst = q->buf + q->used;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '+') {
            dst[j++] = ' ';
        } else if (s[i] == '%') {
            int hi = i + 2 < n ? query_hex(s[i + 1]) : -1;
            int lo = i + 2 < n ? query_hex(s[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                *bad = 1;
                return NULL;
            }
            dst[j++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            dst[j++] = s[i];
        }
    }
    dst[j] = '\0';
    q->used += j + 1;
    return dst;
}

int query_decode_path(const char *raw, size_t n, char *out, size_t size)
{
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (j + 1 >= size)
            return -E2BIG;
        if (raw[i] != '%') {
            if (raw[i] == '\0')
                return -EINVAL;
            out[j++] = raw[i];
            continue;
        }
        int hi = i + 2 < n ? query_hex(raw[i + 1]) : -1;
        int lo = i + 2 < n ? query_hex(raw[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
            return -EINVAL;
        out[j++] = (char)(hi * 16 + lo);
        i += 2;
    }
    out[j] = '\0';
    return 0;
}

int query_parse(struct query *q, const char *raw, size_t len)
{
    size_t i = 0;
    while (i < len) {
        size_t end = i;
        while (end < len && raw[end] != '&')
            end++;
        if (end > i) {
            size_t eq = i;
            while (eq < end && raw[eq] != '=')
                eq++;
            if (eq == i)
                return -EINVAL; /* "=x": no key */
            if (q->n >= QUERY_MAX_PARAMS) {
                q->overflow = 1;
                return -E2BIG;
            }
            int bad = 0;
            char *k = query_decode(q, raw + i, eq - i, &bad);
            char *v =
                k ? query_decode(q, eq < end ? raw + eq + 1 : "", eq < end ? end - eq - 1 : 0, &bad)
                  : NULL;
            if (v == NULL)
                return bad ? -EINVAL : -E2BIG;
            if (k[0] == '\0')
                return -EINVAL;
            q->params[q->n].key = k;
            q->params[q->n].value = v;
            q->n++;
        }
        i = end + 1;
    }
    return 0;
}

const char *query_get(const struct query *q, const char *key)
{
    for (int i = 0; i < q->n; i++)
        if (strcmp(q->params[i].key, key) == 0)
            return q->params[i].value;
    return NULL;
}

/* A value short enough to quote in a message: 40 bytes, cut on a character boundary. */
static void query_quote(char *dst, size_t n, const char *s)
{
    mt_utf8_quote(dst, n, s, 40);
}

int query_check(const struct query *q, const char *const *known, char *why, size_t whylen)
{
    char shown[128];
    if (q->overflow) {
        snprintf(why, whylen, "query string: too long (at most %d parameters, %d bytes)",
                 QUERY_MAX_PARAMS, QUERY_BUF_SIZE);
        return -EINVAL;
    }
    for (int i = 0; i < q->n; i++) {
        const char *key = q->params[i].key;
        int ok = 0;
        for (const char *const *k = known; k && *k; k++)
            if (strcmp(*k, key) == 0)
                ok = 1;
        query_quote(shown, sizeof(shown), key);
        if (!ok) {
            size_t off = (size_t)snprintf(why, whylen, "parameter '%s': unknown", shown);
            const char *sep = "; known: ";
            for (const char *const *k = known; k && *k && off < whylen; k++, sep = ", ")
                off += (size_t)snprintf(why + off, whylen - off, "%s%s", sep, *k);
            if ((known == NULL || *known == NULL) && off < whylen)
                snprintf(why + off, whylen - off, "; this resource takes no parameters");
            return -EINVAL;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(q->params[j].key, key) == 0) {
                snprintf(why, whylen, "parameter '%s': given more than once", shown);
                return -EINVAL;
            }
    }
    return 0;
}

int query_parse_int(const char *s, int64_t *out)
{
    int neg = 0;
    uint64_t v = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    if (*s == '\0')
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        unsigned d = (unsigned)(*s - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

int query_parse_duration(const char *s, int64_t *out_ms)
{
    static const struct {
        const char *suffix;
        int64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}, {"", 1}};
    size_t n = strlen(s);
    size_t digits = 0;
    while (digits < n && s[digits] >= '0' && s[digits] <= '9')
        digits++;
    if (digits == 0 || digits > 18)
        return digits == 0 ? -EINVAL : -ERANGE;
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        if (strcmp(s + digits, units[u].suffix) != 0)
            continue;
        int64_t v = 0;
        for (size_t i = 0; i < digits; i++)
            v = v * 10 + (s[i] - '0');
        if (v > INT64_MAX / 4 / units[u].ms)
            return -ERANGE;
        *out_ms = v * units[u].ms;
        return 0;
    }
    return -EINVAL;
}

/* Whether s is what openapi.yaml's duration pattern takes: 1 to 18 digits, then a unit or
 * nothing (^[0-9]{1,18}(ms|s|m|h|d)?$). Such a value is never refused for its size. */
static int query_duration_form(const char *s)
{
    size_t digits = strspn(s, "0123456789");
    int64_t ignored;
    return digits >= 1 && digits <= 18 && query_parse_duration(s, &ignored) != -EINVAL;
}

/* A ranged value read with parse; the message says what was expected. A duration above max
 * (or too large to count in ms) is max: the pattern is the whole rule for its form. */
static int query_ranged(const struct query *q, const char *key, int64_t min, int64_t max,
                        int64_t *out, char *why, size_t whylen,
                        int (*parse)(const char *, int64_t *), const char *kind)
{
    const char *v = query_get(q, key);
    if (v == NULL)
        return 1;
    int64_t x = 0;
    int rc = parse(v, &x);
    if (parse == query_parse_duration && query_duration_form(v) && (rc == -ERANGE || x > max)) {
        rc = 0;
        x = max;
    }
    if (rc != 0 || x < min || x > max) {
        char shown[128];
        query_quote(shown, sizeof(shown), v);
        snprintf(why, whylen, "parameter '%s': must be %s from %lld to %lld%s, got '%s'", key, kind,
                 (long long)min, (long long)max,
                 parse == query_parse_int ? ""
                                          : " ms (digits with an optional unit ms, s, m, h or d)",
                 shown);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

int query_int(const struct query *q, const char *key, int64_t min, int64_t max, int64_t *out,
              char *why, size_t whylen)
{
    return query_ranged(q, key, min, max, out, why, whylen, query_parse_int, "an integer");
}

int query_duration_ms(const struct query *q, const char *key, int64_t min, int64_t max,
                      int64_t *out, char *why, size_t whylen)
{
    return query_ranged(q, key, min, max, out, why, whylen, query_parse_duration, "a duration");
}

int query_time_ms(const struct query *q, const char *key, int64_t now_ms, int64_t *out, char *why,
                  size_t whylen)
{
    const char *v = query_get(q, key);
    if (v == NULL)
        return 1;
    int64_t x = 0;
    int rc;
    if (v[0] == '-') {
        /* A negative duration that reaches before the epoch (or past what ms can count)
         * means the epoch: openapi.yaml's pattern is the whole rule for its form. */
        rc = query_parse_duration(v + 1, &x);
        if (rc == -ERANGE && query_duration_form(v + 1))
            rc = 0, x = now_ms;
        x = rc == 0 ? (x < now_ms ? now_ms - x : 0) : x;
    } else {
        size_t digits = strspn(v, "0123456789");
        rc = digits >= 1 && digits <= 18 && v[digits] == '\0' ? query_parse_int(v, &x) : -EINVAL;
    }
    if (rc != 0 || x < 0) {
        char shown[128];
        query_quote(shown, sizeof(shown), v);
        snprintf(why, whylen,
                 "parameter '%s': must be ms since the epoch (1 to 18 digits) or a negative "
                 "duration relative to now (e.g. -3600000 or -1h), got '%s'",
                 key, shown);
        return -EINVAL;
    }
    *out = x;
    return 0;
}
