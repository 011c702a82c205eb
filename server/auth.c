/*
 * auth.c - the bearer-token check. The token is compared in constant time
 * (the time depends on the token's length only, never on where a guess goes
 * wrong) and is never logged or echoed. Runs on HTTP worker threads; no state.
 */
#include "http.h"

#include <string.h>
#include <strings.h>

int server_auth_ok(const char *authorization, const char *token)
{
    if (authorization == NULL || token == NULL || token[0] == '\0')
        return 0;
    if (strncasecmp(authorization, "Bearer ", 7) != 0)
        return 0;
    const char *given = authorization + 7;
    while (*given == ' ')
        given++;

    size_t token_len = strlen(token);
    size_t given_len = strnlen(given, 4096);
    /* Walk the token's length whatever was given; fold every difference in. */
    volatile unsigned char diff = (unsigned char)(given_len != token_len);
    for (size_t i = 0; i < token_len; i++) {
        unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)token[i]);
    }
    return diff == 0;
}
