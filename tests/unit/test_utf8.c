/* test_utf8.c - common/utf8.c: which bytes are valid UTF-8 (RFC 3629's table), a quote cut
 * on a character boundary with invalid bytes as U+FFFD, and a whole body repaired. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "utf8.h"

#define FFFD "\xEF\xBF\xBD"

static size_t valid_len(const char *s)
{
    return mt_utf8_char((const unsigned char *)s, strlen(s));
}

static void test_char_table(void)
{
    CHECK_EQ_INT((int)valid_len("a"), 1);
    CHECK_EQ_INT((int)valid_len("\xC3\xA9"), 2);         /* é */
    CHECK_EQ_INT((int)valid_len("\xE2\x82\xAC"), 3);     /* € */
    CHECK_EQ_INT((int)valid_len("\xF0\x9F\x98\x80"), 4); /* U+1F600 */
    CHECK_EQ_INT((int)valid_len("\xF4\x8F\xBF\xBF"), 4); /* U+10FFFF */
    CHECK_EQ_INT((int)valid_len("\xC3"), 0);              /* cut */
    CHECK_EQ_INT((int)valid_len("\xE2\x82"), 0);          /* cut */
    CHECK_EQ_INT((int)valid_len("\x80"), 0);              /* a continuation alone */
    CHECK_EQ_INT((int)valid_len("\xC0\xAF"), 0);          /* overlong '/' */
    CHECK_EQ_INT((int)valid_len("\xE0\x80\xAF"), 0);      /* overlong */
    CHECK_EQ_INT((int)valid_len("\xED\xA0\x80"), 0);      /* surrogate U+D800 */
    CHECK_EQ_INT((int)valid_len("\xF4\x90\x80\x80"), 0);  /* past U+10FFFF */
    CHECK_EQ_INT((int)valid_len("\xFF"), 0);
    CHECK_EQ_INT((int)mt_utf8_invalid_at("ab\xC3\xA9" "c\xFF" "d", 7), 5);
    CHECK_EQ_INT((int)mt_utf8_invalid_at("ab\xC3\xA9", 4), 4);
}

static void test_quote(void)
{
    char buf[128];
    /* 39 ASCII bytes then é (2 bytes): byte 40 is inside it, so the cut comes before it */
    const char *s = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xC3\xA9tail";
    mt_utf8_quote(buf, sizeof(buf), s, 40);
    CHECK_MSG(strcmp(buf, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...") == 0, "%s", buf);
    mt_utf8_quote(buf, sizeof(buf), "short \xC3\xA9", 40);
    CHECK_MSG(strcmp(buf, "short \xC3\xA9") == 0, "%s", buf);
    mt_utf8_quote(buf, sizeof(buf), "x\xFF\xFEy", 40);
    CHECK_MSG(strcmp(buf, "x" FFFD FFFD "y") == 0, "%s", buf);
    /* a small buffer: whole characters only, always terminated, valid */
    mt_utf8_quote(buf, 9, "\xE2\x82\xAC\xE2\x82\xAC\xE2\x82\xAC", 40);
    CHECK_MSG(strcmp(buf, "\xE2\x82\xAC...") == 0, "%s", buf);
    CHECK_EQ_INT((int)mt_utf8_invalid_at(buf, strlen(buf)), (int)strlen(buf));
    mt_utf8_quote(buf, 1, "abc", 40);
    CHECK_EQ_INT(buf[0], '\0');
}

static void test_fix(void)
{
    size_t len = 0;
    const char in[] = "{\"m\":\"a\xFF\xC3\"}";
    char *out = mt_utf8_fix(in, sizeof(in) - 1, &len);
    CHECK(out != NULL);
    CHECK_MSG(out && strcmp(out, "{\"m\":\"a" FFFD FFFD "\"}") == 0, "%s", out ? out : "");
    CHECK_EQ_INT((int)len, (int)strlen("{\"m\":\"a" FFFD FFFD "\"}"));
    free(out);
    out = mt_utf8_fix("ok \xE2\x82\xAC", 6, &len);
    CHECK(out && strcmp(out, "ok \xE2\x82\xAC") == 0 && len == 6);
    free(out);
}

int main(void)
{
    RUN(test_char_table);
    RUN(test_quote);
    RUN(test_fix);
    return harness_end();
}
