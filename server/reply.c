/*
 * reply.c - building replies: JSON bodies (cJSON, printed once), the JSON
 * error shape {"error": {"code", "message"}}, text and static bodies, extra
 * headers. Every body it is handed is valid UTF-8 when it leaves (a byte that is
 * not becomes U+FFFD: a quoted client's bytes, a path from the configuration).
 * Runs on the HTTP worker thread of the request; no locks.
 */
#include "http.h"
#include "control.h"
#include "utf8.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Printing buffer: most replies fit, so cJSON allocates once. */
#define REPLY_PREBUFFER 2048

void server_reply_clear(struct server_reply *rep)
{
    free(rep->body);
    memset(rep, 0, sizeof(*rep));
}

/* The last resort when even the error body cannot be allocated. */
static int server_reply_oom(struct server_reply *rep)
{
    static const char body[] = "{\"error\":{\"code\":\"out_of_memory\","
                               "\"message\":\"memtrim could not allocate the reply\"}}";
    server_reply_clear(rep);
    server_reply_static(rep, 500, "application/json", body, sizeof(body) - 1);
    return -ENOMEM;
}

int server_reply_json(struct server_reply *rep, unsigned status, struct cJSON *json)
{
    if (json == NULL)
        return server_reply_oom(rep);
    char *text = cJSON_PrintBuffered(json, REPLY_PREBUFFER, 0);
    cJSON_Delete(json);
    if (text == NULL)
        return server_reply_oom(rep);
    return server_reply_text(rep, status, "application/json", text, strlen(text));
}

int server_reply_text(struct server_reply *rep, unsigned status, const char *content_type,
                      char *body, size_t len)
{
    if (mt_utf8_invalid_at(body, len) < len && !mt_control("rt-utf8-raw")) {
        size_t fixed_len = 0;
        char *fixed = mt_utf8_fix(body, len, &fixed_len);
        free(body);
        if (!fixed)
            return server_reply_oom(rep);
        body = fixed;
        len = fixed_len;
    }
    free(rep->body);
    rep->status = status;
    rep->content_type = content_type;
    rep->body = body;
    rep->static_body = NULL;
    rep->len = len;
    return 0;
}

void server_reply_static(struct server_reply *rep, unsigned status, const char *content_type,
                         const void *body, size_t len)
{
    free(rep->body);
    rep->body = NULL;
    rep->status = status;
    rep->content_type = content_type;
    rep->static_body = body;
    rep->len = len;
}

void server_reply_header(struct server_reply *rep, const char *name, const char *fmt, ...)
{
    if (rep->nheaders >= SERVER_REPLY_MAX_HEADERS)
        return;
    struct server_header *h = &rep->headers[rep->nheaders++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->value, sizeof(h->value), fmt, ap);
    va_end(ap);
    h->name = name;
}

int server_reply_error(struct server_reply *rep, unsigned status, const char *code, const char *fmt,
                       ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);

    cJSON *root = cJSON_CreateObject();
    cJSON *error = cJSON_AddObjectToObject(root, "error");
    if (error == NULL || cJSON_AddStringToObject(error, "code", code) == NULL ||
        cJSON_AddStringToObject(error, "message", message) == NULL) {
        cJSON_Delete(root);
        return server_reply_oom(rep);
    }
    return server_reply_json(rep, status, root);
}

int server_reply_bad_param(struct server_reply *rep, const char *why)
{
    server_reply_error(rep, 400, "bad_parameter", "%s", why);
    return -EINVAL;
}
