/*
 * jsonscan.c - the check every JSON document memtrim parses passes first
 * (request bodies, the configuration string, file and MEMTRIM_CONFIG, the
 * host's own configuration): its size, and how deep its arrays and objects
 * nest, counted in one loop without recursion. cJSON recurses once per
 * level; a body of 999 nested '[' overflowed an Orthanc HTTP thread's stack
 * in it. mt_json_find_nul: the \u0000 that would cut a string short. mt_json_parse: cJSON's parser, once, telling a failed allocation from a
 * document that is not JSON (see common.h). No state, no locks: any thread.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

int mt_json_parse(const char *text, size_t len, int require_end, cJSON **out, const char **end)
{
    /* One parse. cJSON returns NULL alike for a document that is not JSON and for an
     * allocation that failed; the allocation says which: malloc (and fault.c's mt_malloc,
     * cJSON's hook in the fault build) sets errno to ENOMEM when it fails, and nothing
     * else cJSON calls does (free keeps errno; strtod sets ERANGE at most). */
    int saved = errno;
    errno = 0;
    /* cJSON checks the end against the NUL after the text: count it in */
    *out = cJSON_ParseWithLengthOpts(text, require_end ? len + 1 : len, end, require_end);
    int nomem = *out == NULL && errno == ENOMEM;
    errno = saved;
    if (*out != NULL)
        return 0;
    return nomem ? -ENOMEM : -EINVAL;
}

int mt_json_prescan(const char *text, size_t len, size_t max_bytes, int max_depth, char *why,
                    size_t whylen)
{
    int depth = 0, in_string = 0, escaped = 0;

    if (why && whylen)
        why[0] = '\0';
    if (len > max_bytes) {
        if (why)
            snprintf(why, whylen, "the JSON document is %zu bytes, over the limit of %zu bytes",
                     len, max_bytes);
        return -E2BIG;
    }
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (escaped)
                escaped = 0;
            else if (c == '\\')
                escaped = 1;
            else if (c == '"')
                in_string = 0;
            continue;
        }
        if (c == '"') {
            in_string = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) {
                if (why)
                    snprintf(why, whylen, "the JSON document nests deeper than %d levels of "
                             "arrays and objects (at byte %zu)", max_depth, i);
                return -ELOOP;
            }
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return 0;
}

static void json_copy_name(char *dst, size_t size, const char *src, size_t len)
{
    if (size == 0)
        return;
    if (len >= size)
        len = size - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

long mt_json_find_nul(const char *text, size_t len, char *key, size_t keysize, char *top,
                      size_t topsize)
{
    /* The last string closed (a member's name once a ':' follows it), the member it names,
     * and the member of depth 1 (the outermost object's). */
    size_t last = 0, last_len = 0, cur = 0, cur_len = 0, top_at = 0, top_len = 0, start = 0;
    int depth = 0, in_string = 0;

    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\') {
                if (i + 5 < len && text[i + 1] == 'u' && memcmp(text + i + 2, "0000", 4) == 0) {
                    json_copy_name(key, keysize, text + cur, cur_len);
                    json_copy_name(top, topsize, text + top_at, top_len);
                    return (long)i;
                }
                i++; /* the escaped character */
            } else if (c == '"') {
                in_string = 0;
                last = start;
                last_len = i - start;
            }
            continue;
        }
        if (c == '"') {
            in_string = 1;
            start = i + 1;
        } else if (c == ':') {
            cur = last;
            cur_len = last_len;
            if (depth == 1) {
                top_at = last;
                top_len = last_len;
            }
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && depth > 0) {
            depth--;
        }
    }
    return -1;
}
