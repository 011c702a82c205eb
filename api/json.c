/*
 * json.c - small cJSON helpers shared by the handlers: literal keys added
 * without copying (half the allocations of cJSON_Add*ToObject), null for
 * unknown values, one failure flag per object, strings made valid UTF-8. Runs on HTTP worker threads;
 * no state, no locks.
 */
#include "api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

void api_json_item(cJSON *obj, const char *key, cJSON *item, int *failed)
{
    int ok = item != NULL && obj != NULL &&
             (key ? cJSON_AddItemToObjectCS(obj, key, item) : cJSON_AddItemToArray(obj, item));
    if (!ok) {
        cJSON_Delete(item);
        *failed = 1;
    }
}

cJSON *api_json_done(cJSON *root, int failed)
{
    if (!failed)
        return root;
    cJSON_Delete(root);
    return NULL;
}

int api_store_failed(struct server_reply *rep, const char *what, int rc, char *err)
{
    server_reply_error(rep, 500, "store_query_failed", "reading %s failed: %s", what,
                       err ? err : strerror(rc < 0 ? -rc : EIO));
    free(err);
    return rc < 0 ? rc : -EIO;
}


/*
 * An integer as JSON. Debian's cJSON (1.7.15) prints every number with
 * "%1.15g" and parses it back with sscanf to check it (ints too), and reads
 * localeconv() each time: that round trip was a third of the CPU of
 * /memory/stats (perf under wrk -c64). Integers are exact: written once, by
 * hand, as they are.
 */
static cJSON *api_json_int_item(int64_t v)
{
    char buf[24], *p = buf + sizeof(buf) - 1;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    *p = '\0';
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        *--p = '-';
    return cJSON_CreateRaw(p);
}

void api_json_int(cJSON *obj, const char *key, int64_t v, int *failed)
{
    api_json_item(obj, key, api_json_int_item(v), failed);
}

void api_json_u64(cJSON *obj, const char *key, uint64_t v, int *failed)
{
    api_json_item(obj, key, api_json_int_item(v > INT64_MAX ? INT64_MAX : (int64_t)v), failed);
}

void api_json_int_or_null(cJSON *obj, const char *key, int64_t v, int present, int *failed)
{
    api_json_item(obj, key, present ? api_json_int_item(v) : cJSON_CreateNull(), failed);
}

void api_json_num(cJSON *obj, const char *key, double v, int *failed)
{
    api_json_item(obj, key, cJSON_CreateNumber(v), failed);
}

size_t api_utf8_len(const char *text)
{
    /* common/utf8.c's table (RFC 3629); a NUL ends the character as any other stray byte */
    return mt_utf8_char((const unsigned char *)text, strnlen(text, 4));
}

size_t api_utf8_clean(char *out, size_t size, const char *v, int escape)
{
    static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */
    size_t n = 0;
    if (size == 0)
        return 0;
    while (v && *v) {
        size_t len = api_utf8_len(v);
        const char *put = len ? v : replacement;
        size_t put_len = len ? len : 3;
        char esc[2];
        if (escape && (*v == '\\' || *v == '"' || *v == '\n')) {
            esc[0] = '\\';
            esc[1] = *v == '\n' ? 'n' : *v;
            put = esc;
            put_len = 2;
        }
        if (n + put_len >= size)
            break; /* cut at a whole character */
        memcpy(out + n, put, put_len);
        n += put_len;
        v += len ? len : 1;
    }
    out[n] = '\0';
    return n;
}

void api_json_str(cJSON *obj, const char *key, const char *v, int *failed)
{
    if (v == NULL) {
        api_json_item(obj, key, cJSON_CreateNull(), failed);
        return;
    }
    /* JSON is UTF-8: a string that is not (a member's program name) has its bad bytes
     * replaced, each by U+FFFD. */
    size_t n = strlen(v);
    if (mt_utf8_invalid_at(v, n) == n) {
        api_json_item(obj, key, cJSON_CreateString(v), failed);
        return;
    }
    size_t size = 3 * strlen(v) + 1;
    char *clean = malloc(size);
    if (clean != NULL)
        api_utf8_clean(clean, size, v, 0);
    api_json_item(obj, key, clean ? cJSON_CreateString(clean) : NULL, failed);
    free(clean);
}

void api_json_bool(cJSON *obj, const char *key, int v, int *failed)
{
    api_json_item(obj, key, cJSON_CreateBool(v), failed);
}

void api_json_null(cJSON *obj, const char *key, int *failed)
{
    api_json_item(obj, key, cJSON_CreateNull(), failed);
}
