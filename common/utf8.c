/*
 * utf8.c - validating, cutting and repairing UTF-8 for response bodies (utf8.h).
 * Pure functions: any thread, no state, no locks.
 */
#include "utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "mt_alloc.h"

static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */
#define REPLACEMENT_LEN 3

size_t mt_utf8_char(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* not overlong */
        else if (c == 0xED)
            hi = 0x9F; /* not a surrogate */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F; /* not past U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

size_t mt_utf8_invalid_at(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t len = mt_utf8_char(p + i, n - i);
        if (len == 0)
            return i;
        i += len;
    }
    return n;
}

char *mt_utf8_fix(const char *s, size_t n, size_t *len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t bad = 0;
    for (size_t i = mt_utf8_invalid_at(s, n); i < n;) {
        size_t c = mt_utf8_char(p + i, n - i);
        bad += c == 0;
        i += c ? c : 1;
    }
    if (bad > (SIZE_MAX - n - 1) / (REPLACEMENT_LEN - 1))
        return NULL;
    char *out = mt_malloc(n + bad * (REPLACEMENT_LEN - 1) + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t c = mt_utf8_char(p + i, n - i);
        if (c) {
            memcpy(out + o, s + i, c);
            o += c;
            i += c;
        } else {
            memcpy(out + o, replacement, REPLACEMENT_LEN);
            o += REPLACEMENT_LEN;
            i++;
        }
    }
    out[o] = '\0';
    *len = o;
    return out;
}

void mt_utf8_quote(char *dst, size_t size, const char *s, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i = 0, o = 0;
    if (size == 0)
        return;
    if (mt_control("rt-utf8-raw")) { /* the old quote: bytes, cut anywhere */
        size_t k = n < max ? n : max;
        k = k < size - 1 ? k : size - 1;
        memcpy(dst, s, k);
        dst[k] = '\0';
        return;
    }
    while (i < n && i < max) {
        size_t c = mt_utf8_char(p + i, n - i);
        size_t take = c ? c : 1, put = c ? c : REPLACEMENT_LEN;
        if (i + take > max || o + put + 3 >= size)
            break; /* a character that does not fit whole is left out */
        memcpy(dst + o, c ? s + i : replacement, put);
        o += put;
        i += take;
    }
    if (i < n && o + 3 < size) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
}
