/*
 * config.c - GET /config (the effective configuration, CamelCase keys as in
 * the configuration file, the token redacted) and PATCH /config (a JSON
 * object of runtime-changeable keys, validated whole by the same key table
 * as start-up before anything changes). Runs on HTTP worker threads; the
 * core takes the configuration lock.
 */
#include "api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "core.h"

int api_config_get(const struct server_request *req, struct server_reply *rep)
{
    struct mt_config cfg;
    mt_config_get(req->app, &cfg);
    return server_reply_json(rep, 200, config_to_json(&cfg));
}

int api_config_patch(const struct server_request *req, struct server_reply *rep)
{
    /* The parser stops at a NUL: what follows one would be ignored, not checked. */
    const char *nul = memchr(req->body, '\0', req->body_len);
    if (nul != NULL)
        return server_reply_error(rep, 400, "bad_body",
                                  "PATCH /config: the body holds a NUL byte at offset %zu; "
                                  "send a JSON object and nothing else",
                                  (size_t)(nul - req->body));
    char why[160];
    int scan = mt_json_prescan(req->body, req->body_len, SERVER_BODY_MAX, MT_JSON_DEPTH_MAX, why,
                               sizeof(why));
    if (scan != 0)
        return server_reply_error(rep, scan == -E2BIG ? 413 : 400,
                                  scan == -E2BIG ? "body_too_large" : "bad_body",
                                  "PATCH /config: %s", why);
    cJSON *doc = NULL;
    if (mt_json_parse(req->body, req->body_len, 0, &doc, NULL) == -ENOMEM)
        return server_reply_error(rep, 500, "out_of_memory",
                                  "PATCH /config: out of memory while parsing the body");
    if (doc == NULL || !cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        return server_reply_error(rep, 400, "bad_body",
                                  "PATCH /config needs a JSON object of runtime keys, "
                                  "e.g. {\"TrimIntervalSeconds\": 60}");
    }
    cJSON_Delete(doc);
    char *err = NULL;
    int rc = mt_config_patch(req->app, req->body, &err);
    if (rc != 0) {
        server_reply_error(rep, rc == -EINVAL ? 400 : 500,
                           rc == -EINVAL ? "bad_config" : "internal_error", "%s",
                           err ? err : "the configuration was not changed");
        free(err);
        return rc;
    }
    return api_config_get(req, rep);
}
