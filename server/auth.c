/*
 * auth.c - the bearer-token check, and when reads need one. The token is
 * compared in constant time (the time depends on the token's length only,
 * never on where a guess goes wrong) and is never logged or echoed. Runs on
 * HTTP worker threads (either host's); no state, no locks.
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

int server_reads_need_auth(const struct server_caller *who)
{
    int has_token = who->token != NULL && who->token[0] != '\0';
    int has_read = who->read_token != NULL && who->read_token[0] != '\0';
    return has_read || (has_token && who->read_requires_auth);
}
