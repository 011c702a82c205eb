/*
 * keys.c - the rules a configuration key follows in each of memtrim's configuration parsers
 * (the plugin's core/config and the node agent's agent/config.c): what a bearer token may
 * hold (mt_token_bad_byte, mt_token_check) and the closest known key to a mistyped one
 * (mt_closest_key, for "did you mean"). One place, so that the two parsers cannot drift.
 * No state, no locks: any thread.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

long mt_token_bad_byte(const char *tok, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)tok[i] <= ' ' || (unsigned char)tok[i] >= 0x7f)
            return (long)i;
    return -1;
}

int mt_token_check(const char *key, const char *tok, char *err, size_t errlen)
{
    long at = mt_token_bad_byte(tok, strlen(tok));
    if (at < 0)
        return 0;
    snprintf(err, errlen,
             "configuration key %s: the token holds a space, a control character or a "
             "non-ASCII byte (byte 0x%02x at offset %ld); a token is printable ASCII, as a "
             "bearer token in an HTTP header must be",
             key, (unsigned char)tok[at], at);
    return -EINVAL;
}

/* Case-insensitive edit distance, capped strings (keys are short). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64], prev;
    if (la >= 63 || lb >= 63)
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cur = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t best = prev + cost;
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            prev = cur;
        }
    }
    return row[lb];
}

const char *mt_closest_key(const char *key, const void *table, size_t n, size_t stride)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1, len = key ? strlen(key) : 0;
    if (!key)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *name = *(const char *const *)((const char *)table + i * stride);
        size_t d = edit_distance(key, name);
        if (d < best_d) {
            best_d = d;
            best = name;
        }
    }
    /* Suggest only what looks like a typo, not any key at all. */
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    return best_d <= limit ? best : NULL;
}
