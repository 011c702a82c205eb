/*
 * host_orthanc.c - libOrthancMemTrim.so: memtrim as an Orthanc plugin. Reads
 * the "MemoryTrim" section of Orthanc's merged configuration, starts one
 * instance, logs through Orthanc's logger, publishes memtrim's figures into
 * Orthanc's metrics (/tools/metrics-prometheus) and serves the memtrim API
 * inside Orthanc's REST API under /memtrim/... with the same route table and
 * handlers as the embedded server (which stays the main interface).
 *
 * Threads: Initialize and Finalize run on Orthanc's main thread; the REST and
 * metrics callbacks on Orthanc's HTTP threads, concurrently. Locks:
 * host_lock (a rwlock) guards host_mt: callbacks hold it for reading while
 * they use the instance, Finalize takes it for writing to stop it;
 * metrics_lock guards the last counters seen by the metrics callback. Never
 * both at once.
 *
 * SPDX-License-Identifier: GPL-3.0-or-later (Orthanc's plugin SDK header is)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <orthanc/OrthancCPlugin.h>

#include "mt_alloc.h"
#include "config.h"
#include "api.h"
#include "core.h"
#include "http.h"
#include "memtrim.h"

#define ORTHANC_EXPORT __attribute__((visibility("default")))
#define HOST_NAME "memtrim"
#define HOST_URI "/memtrim(/.*)?"
#define MB (1024.0 * 1024.0)

static OrthancPluginContext *host_ctx;
static pthread_rwlock_t host_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct memtrim *host_mt; /* guarded by host_lock */
static char host_token[256];    /* written before the callbacks are registered */
static int host_read_requires_auth;
static char host_read_token[256]; /* ReadToken; as host_token */

static pthread_mutex_t metrics_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t metrics_trims;   /* trims counted at the last refresh */
static double metrics_trim_sum;  /* their total duration, seconds */
static float metrics_last_ms;    /* mean duration of the trims seen at the last refresh */

/* ---- logging ------------------------------------------------------------ */

/* Runs under util.c's log lock, on whatever thread logs. */
static void host_log(int level, const char *msg, void *arg)
{
    OrthancPluginContext *ctx = arg;
    if (level == MT_LOG_ERROR)
        OrthancPluginLogError(ctx, msg);
    else if (level == MT_LOG_WARNING)
        OrthancPluginLogWarning(ctx, msg);
    else
        OrthancPluginLogInfo(ctx, msg);
}

/* ---- configuration ------------------------------------------------------ */

/* mkdir -p: Orthanc creates its index directory only after the plugins start. */
static void host_mkdirs(const char *dir)
{
    char path[MT_CONFIG_STR_MAX];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    mkdir(path, 0755);
}

/*
 * Where the store goes when the section names none: beside Orthanc's index
 * (IndexDirectory, else StorageDirectory, else Orthanc's default
 * "OrthancStorage"), not in whatever directory Orthanc was started from.
 */
static int host_default_database(const cJSON *root, cJSON *section)
{
    const char *keys[] = {"IndexDirectory", "StorageDirectory"};
    const char *dir = "OrthancStorage";
    char path[MT_CONFIG_STR_MAX];

    if (cJSON_GetObjectItemCaseSensitive(section, "Database"))
        return 0;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
        if (cJSON_IsString(d) && d->valuestring[0]) {
            dir = d->valuestring;
            break;
        }
    }
    if ((size_t)snprintf(path, sizeof(path), "%s/memtrim.sqlite", dir) >= sizeof(path))
        return -ENAMETOOLONG;
    host_mkdirs(dir);
    return cJSON_AddStringToObject(section, "Database", path) ? 0 : -ENOMEM;
}

/*
 * Orthanc's merged configuration -> a validated configuration and the
 * document to start memtrim with ({"MemoryTrim": {...}}, malloc'd). A
 * missing section means the defaults. Returns 0, or -EINVAL with *err
 * naming the key (free()).
 */
static int host_read_config(const char *orthanc_json, struct mt_config *cfg, char **doc,
                            char **err)
{
    cJSON *root = NULL, *wrapper = NULL, *section = NULL;
    int rc = -ENOMEM;

    *doc = NULL;
    *err = NULL;
    config_defaults(cfg);
    const char *text = orthanc_json ? orthanc_json : "{}";
    char why[160];
    if (mt_json_prescan(text, strlen(text), MT_JSON_HOST_DOC_MAX, MT_JSON_DEPTH_MAX, why,
                        sizeof(why)) != 0) {
        char msg[256];
        snprintf(msg, sizeof(msg), "Orthanc's configuration is refused: %s", why);
        *err = mt_strdup(msg);
        return -EINVAL;
    }
    if ((rc = config_nul_check(text, 1, err)) != 0)
        return rc;
    rc = mt_json_parse(text, strlen(text), 0, &root, NULL);
    if (rc != 0) {
        *err = mt_strdup(rc == -ENOMEM ? "out of memory while parsing Orthanc's configuration"
                                       : "Orthanc's configuration is not valid JSON");
        return rc;
    }
    section = cJSON_DetachItemFromObjectCaseSensitive(root, "MemoryTrim");
    if (!section && !(section = cJSON_CreateObject()))
        goto fail;
    if ((rc = config_apply(section, cfg, 0, err)))
        goto fail;
    if ((rc = host_default_database(root, section)))
        goto fail;
    rc = -ENOMEM;
    if (!(wrapper = cJSON_CreateObject()) || !cJSON_AddItemToObject(wrapper, "MemoryTrim", section))
        goto fail;
    section = NULL;
    if (!(*doc = cJSON_PrintUnformatted(wrapper)))
        goto fail;
    rc = 0;
fail:
    if (rc && !*err && rc != -EINVAL) {
        char buf[128];
        snprintf(buf, sizeof(buf), "reading the configuration failed: %s", strerror(-rc));
        *err = mt_strdup(buf);
    }
    cJSON_Delete(section);
    cJSON_Delete(wrapper);
    cJSON_Delete(root);
    return rc;
}

/* ---- the REST API under /memtrim/ --------------------------------------- */

static const char *host_method(OrthancPluginHttpMethod m, const char *path)
{
    switch (m) {
    case OrthancPluginHttpMethod_Get: return "GET";
    case OrthancPluginHttpMethod_Post: return "POST";
    case OrthancPluginHttpMethod_Delete: return "DELETE";
    case OrthancPluginHttpMethod_Put:
        /* Orthanc's SDK knows no PATCH: PUT /memtrim/config stands for it. */
        return strcmp(path, "/config") == 0 ? "PATCH" : "PUT";
    default: return "UNKNOWN";
    }
}

static const char *host_header(const OrthancPluginHttpRequest *r, const char *name)
{
    for (uint32_t i = 0; i < r->headersCount; i++)
        if (strcasecmp(r->headersKeys[i], name) == 0)
            return r->headersValues[i];
    return NULL;
}

/*
 * Whether Orthanc 1.10's HttpOutput can send this status with
 * OrthancPluginSendHttpStatus: its EnumerationToString(HttpStatus) knows these
 * (anything else throws ParameterOutOfRange and the client gets an empty
 * reply), and it refuses 301 and 405 there (they have calls of their own).
 * 429 is not among them, in 1.10 nor since.
 */
static int host_status_sendable(unsigned status)
{
    static const unsigned known[] = {400, 401, 402, 403, 404, 406, 407, 408, 409, 410, 411, 412,
                                     413, 414, 415, 416, 417, 422, 423, 424, 426, 500, 501, 502,
                                     503, 504, 505, 506, 507, 509, 510};
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (known[i] == status)
            return 1;
    return 0;
}

/*
 * The reply the embedded server would send, through Orthanc's output: the same
 * status, headers (Content-Type on errors too, Cache-Control, Retry-After,
 * WWW-Authenticate) and body, with two exceptions Orthanc 1.10's SDK imposes:
 * - 405: only OrthancPluginSendMethodNotAllowed sends it, and it clears the
 *   headers and sends no body; the status and Allow are kept.
 * - 429: Orthanc cannot send it at all; it becomes 503 with the same
 *   Retry-After and body (RFC 9110 gives Retry-After the same meaning there).
 * 401 goes through OrthancPluginSendHttpStatus too (1.10 allows it there), so that
 * the client gets memtrim's Bearer challenge and body, not Orthanc's Basic one.
 */
static unsigned host_orthanc_status(unsigned status)
{
    if (status >= 200 && status < 300)
        return 200; /* OrthancPluginAnswerBuffer: the handlers only answer 200 */
    if (status == 405)
        return 405;
    if (status == 429)
        return 503;
    return host_status_sendable(status) ? status : 500;
}

static void host_answer(OrthancPluginRestOutput *out, const struct server_reply *rep)
{
    const char *body = rep->body ? rep->body : (const char *)rep->static_body;
    const char *ctype = rep->content_type ? rep->content_type : "application/octet-stream";
    const char *allow = NULL;
    unsigned status = host_orthanc_status(rep->status);

    for (int i = 0; i < rep->nheaders; i++)
        if (strcmp(rep->headers[i].name, "Allow") == 0)
            allow = rep->headers[i].value;
    if (status == 405) {
        OrthancPluginSendMethodNotAllowed(host_ctx, out, allow ? allow : "");
        return;
    }
    for (int i = 0; i < rep->nheaders; i++)
        OrthancPluginSetHttpHeader(host_ctx, out, rep->headers[i].name, rep->headers[i].value);
    OrthancPluginSetHttpHeader(host_ctx, out, "Cache-Control", "no-store");
    if (status == 200) {
        OrthancPluginAnswerBuffer(host_ctx, out, body ? body : "", (uint32_t)rep->len, ctype);
        return;
    }
    if (rep->content_type)
        OrthancPluginSetHttpHeader(host_ctx, out, "Content-Type", rep->content_type);
    if (body && rep->len > 0)
        OrthancPluginSendHttpStatus(host_ctx, out, (uint16_t)status, body, (uint32_t)rep->len);
    else
        OrthancPluginSendHttpStatusCode(host_ctx, out, (uint16_t)status);
}

/*
 * Build the same struct server_request as the embedded server and dispatch
 * it over the same route table. There is no struct server here: the store
 * handlers then open a read connection per request (readers.c accepts a
 * NULL server and closes it after use).
 */
static OrthancPluginErrorCode host_rest(OrthancPluginRestOutput *out, const char *url,
                                        const OrthancPluginHttpRequest *r)
{
    /* Orthanc drops a trailing slash: /memtrim/ and /memtrim both arrive as "". */
    const char *path = r->groupsCount > 0 && r->groups[0] && r->groups[0][0] ? r->groups[0] : "/";
    struct server_reply rep;
    struct query q;
    char *body;

    memset(&rep, 0, sizeof(rep));
    query_init(&q);
    for (uint32_t i = 0; i < r->getCount; i++)
        query_add(&q, r->getKeys[i], r->getValues[i]);
    if (r->bodySize > SERVER_BODY_MAX) {
        server_reply_error(&rep, 413, "body_too_large", "request bodies are limited to %d bytes",
                           SERVER_BODY_MAX);
        host_answer(out, &rep);
        server_reply_clear(&rep);
        return OrthancPluginErrorCode_Success;
    }
    body = mt_malloc((size_t)r->bodySize + 1);
    if (!body)
        return OrthancPluginErrorCode_NotEnoughMemory;
    if (r->bodySize)
        memcpy(body, r->body, r->bodySize);
    body[r->bodySize] = '\0';

    pthread_rwlock_rdlock(&host_lock);
    if (!host_mt) {
        server_reply_error(&rep, 503, "not_running",
                           "memtrim is not running in this Orthanc (see Orthanc's log)");
    } else {
        /* A page the user visits must not trim through Orthanc with the user's Orthanc
         * credentials (a browser sends those on its own): cross-site writes are a 403. */
        char cross[256];
        struct server_request req = {
            .app = host_mt,
            .srv = NULL,
            .store = mt_store_readers(host_mt),
            .method = host_method(r->method, path),
            .path = path,
            .query = &q,
            .body = body,
            .body_len = r->bodySize,
            .accept = host_header(r, "accept"),
            .cross_site = server_cross_site(host_header(r, "host"), host_header(r, "origin"),
                                            host_header(r, "sec-fetch-site"), cross,
                                            sizeof(cross)),
        };
        struct server_caller who = {
            .authorization = host_header(r, "authorization"),
            .token = host_token,
            .read_token = host_read_token,
            .read_requires_auth = host_read_requires_auth, /* server_reads_need_auth adds ReadToken */
        };
        server_dispatch_as(api_routes.table, api_routes.count, &req, &who, &rep);
    }
    pthread_rwlock_unlock(&host_lock);
    host_answer(out, &rep);
    server_reply_clear(&rep);
    free(body);
    return OrthancPluginErrorCode_Success;
}

/* ---- metrics ------------------------------------------------------------ */

static void host_set(const char *name, double value)
{
    OrthancPluginSetMetricsValue(host_ctx, name, (float)value, OrthancPluginMetricsType_Default);
}

/*
 * Orthanc calls this before it renders /tools/metrics-prometheus. Values are
 * floats in 1.10.1, so bytes are published in MB. orthanc_memory_trimming_
 * duration_ms is the name Orthanc 1.12.1+ uses for its own trims.
 */
static void host_refresh_metrics(void)
{
    struct mt_snapshot s;
    struct mt_counters c;
    uint64_t trims = 0, released = 0;

    pthread_rwlock_rdlock(&host_lock);
    if (!host_mt) {
        pthread_rwlock_unlock(&host_lock);
        return;
    }
    mt_snapshot_get(host_mt, &s);
    mt_counters_get(host_mt, &c);
    pthread_rwlock_unlock(&host_lock);

    for (int i = 0; i < MT_TRIGGER_COUNT; i++) {
        trims += c.trims[i];
        released += c.released_bytes[i];
    }
    pthread_mutex_lock(&metrics_lock);
    if (trims > metrics_trims)
        metrics_last_ms = (float)((c.trim_seconds_sum - metrics_trim_sum) * 1000.0 /
                                  (double)(trims - metrics_trims));
    metrics_trims = trims;
    metrics_trim_sum = c.trim_seconds_sum;
    float last_ms = metrics_last_ms;
    pthread_mutex_unlock(&metrics_lock);

    OrthancPluginSetMetricsValue(host_ctx, "orthanc_memory_trimming_duration_ms", last_ms,
                                 OrthancPluginMetricsType_Timer);
    host_set("memtrim_rss_mb", (double)s.cheap.rss_bytes / MB);
    host_set("memtrim_heap_in_use_mb", (double)s.heap.heap_in_use_bytes / MB);
    host_set("memtrim_heap_free_mb", (double)s.heap.heap_free_bytes / MB);
    host_set("memtrim_releasable_estimate_mb", (double)s.releasable_estimate_bytes / MB);
    host_set("memtrim_memory_limit_mb",
             s.memory_limit_bytes > 0 ? (double)s.memory_limit_bytes / MB : 0.0);
    host_set("memtrim_arena_count", s.heap.arena_count);
    host_set("memtrim_trims_total", (double)trims);
    host_set("memtrim_trims_manual_total", (double)c.trims[MT_TRIGGER_MANUAL]);
    host_set("memtrim_trims_periodic_total", (double)c.trims[MT_TRIGGER_PERIODIC]);
    host_set("memtrim_trims_burst_total", (double)c.trims[MT_TRIGGER_BURST]);
    host_set("memtrim_trims_pressure_total", (double)c.trims[MT_TRIGGER_PRESSURE]);
    host_set("memtrim_released_mb_total", (double)released / MB);
    host_set("memtrim_heap_probe_last_ms", c.heap_probe_last_seconds * 1000.0);
    host_set("memtrim_housekeeper_cpu_seconds", c.housekeeper_cpu_seconds);
    host_set("memtrim_cpu_seconds", c.cpu_seconds);
}

/* ---- the four exports --------------------------------------------------- */

ORTHANC_EXPORT int32_t OrthancPluginInitialize(OrthancPluginContext *context)
{
    struct mt_config cfg;
    struct memtrim *mt = NULL;
    char *orthanc_json, *doc = NULL, *err = NULL;
    int rc;

    host_ctx = context;
    if (!OrthancPluginCheckVersion(context)) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "memtrim/orthanc: this plugin needs Orthanc %d.%d.%d or later, this is %s",
                 ORTHANC_PLUGINS_MINIMAL_MAJOR_NUMBER, ORTHANC_PLUGINS_MINIMAL_MINOR_NUMBER,
                 ORTHANC_PLUGINS_MINIMAL_REVISION_NUMBER, context->orthancVersion);
        OrthancPluginLogError(context, msg);
        return -1;
    }
    mt_set_log_sink(host_log, context);
    OrthancPluginSetDescription(context, "Gives freed heap memory back to the system with "
                                         "malloc_trim, measures it and serves it under /memtrim/");

    orthanc_json = OrthancPluginGetConfiguration(context);
    rc = host_read_config(orthanc_json, &cfg, &doc, &err);
    OrthancPluginFreeString(context, orthanc_json);
    if (rc == 0 && (rc = config_read_token_file(&cfg, &err)) != 0) {
        free(doc);
        doc = NULL;
    }
    if (rc) {
        /* An invalid section stops Orthanc's start, as Orthanc plugins do. */
        mt_log(MT_LOG_ERROR, "orthanc", "invalid \"MemoryTrim\" section: %s",
               err ? err : "unknown error");
        free(err);
        mt_set_log_sink(NULL, NULL);
        return -1;
    }
    snprintf(host_token, sizeof(host_token), "%s", cfg.auth_token);
    host_read_requires_auth = cfg.read_requires_auth;
    snprintf(host_read_token, sizeof(host_read_token), "%s", cfg.read_token);

    /* Anything else that fails (a port in use, ...) is memtrim's problem, not Orthanc's. */
    rc = mt_create(doc, &api_routes, &mt, &err);
    free(doc);
    if (rc) {
        mt_log(MT_LOG_ERROR, "orthanc", "memtrim is off, Orthanc runs on without it: %s",
               err ? err : strerror(-rc));
        free(err);
    } else if (!mt) {
        mt_log(MT_LOG_INFO, "orthanc", "disabled by configuration");
    }
    pthread_rwlock_wrlock(&host_lock);
    host_mt = mt;
    pthread_rwlock_unlock(&host_lock);

    OrthancPluginRegisterRestCallbackNoLock(context, HOST_URI, host_rest);
    OrthancPluginRegisterRefreshMetricsCallback(context, host_refresh_metrics);
    if (mt)
        mt_log(MT_LOG_INFO, "orthanc", "initialized; the API is also under /memtrim/ on Orthanc's "
                                       "port");
    return 0;
}

ORTHANC_EXPORT void OrthancPluginFinalize(void)
{
    struct memtrim *mt;

    mt_log(MT_LOG_INFO, "orthanc", "finalize: stopping memtrim");
    pthread_rwlock_wrlock(&host_lock);
    mt = host_mt;
    host_mt = NULL;
    pthread_rwlock_unlock(&host_lock);
    mt_destroy(mt);
    mt_log(MT_LOG_INFO, "orthanc", "finalize: done");
    /* Orthanc unloads the library next: no log line may reach the old context. */
    mt_set_log_sink(NULL, NULL);
}

ORTHANC_EXPORT const char *OrthancPluginGetName(void)
{
    return HOST_NAME;
}

ORTHANC_EXPORT const char *OrthancPluginGetVersion(void)
{
    return MEMTRIM_VERSION;
}
