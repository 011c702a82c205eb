/*
 * api.h - the handlers, one file per resource (healthz.c, stats.c, trim.c,
 * trims.c, series.c, metrics.c, config.c, arenas.c, doctor.c, assets.c, and
 * a worker group's members in group.c), the route table (routes.c), the small
 * JSON helpers they share (json.c) and a trim's JSON form (trim_json.c).
 * Handlers run on HTTP worker threads; of the engine they see core.h and
 * config.h only (the core takes its own locks), and the store through a
 * reader from the server's pool.
 */
#ifndef MEMTRIM_API_H
#define MEMTRIM_API_H

#include <stdint.h>
#include "http.h"

struct cJSON;
struct mt_trim_result;
struct mt_snapshot;

/* memtrim's route table (routes.c), for server_start and for a host's own HTTP server. */
extern const struct server_routes api_routes;

int api_dashboard_get(const struct server_request *req, struct server_reply *rep);
int api_openapi_get(const struct server_request *req, struct server_reply *rep);
int api_healthz_get(const struct server_request *req, struct server_reply *rep);
int api_stats_get(const struct server_request *req, struct server_reply *rep);
int api_trim_run(const struct server_request *req, struct server_reply *rep);
int api_trims_get(const struct server_request *req, struct server_reply *rep);
int api_series_get(const struct server_request *req, struct server_reply *rep);
int api_metrics_get(const struct server_request *req, struct server_reply *rep);
int api_config_get(const struct server_request *req, struct server_reply *rep);
int api_config_patch(const struct server_request *req, struct server_reply *rep);
int api_arenas_get(const struct server_request *req, struct server_reply *rep);
int api_doctor_get(const struct server_request *req, struct server_reply *rep);

/*
 * JSON helpers: keys must be string literals (added without copying). A
 * failed allocation sets *failed, so a handler checks once at the end.
 */
void api_json_num(struct cJSON *obj, const char *key, double v, int *failed);
void api_json_int(struct cJSON *obj, const char *key, int64_t v, int *failed);
/* A count or a byte sum that may pass INT64_MAX (a member's figures added up): saturated
 * there, never printed negative. */
void api_json_u64(struct cJSON *obj, const char *key, uint64_t v, int *failed);
void api_json_int_or_null(struct cJSON *obj, const char *key, int64_t v, int present, int *failed);
void api_json_str(struct cJSON *obj, const char *key, const char *v, int *failed);
/* The length of the valid UTF-8 character at text (1-4), or 0 when the bytes there are not
 * one (a stray or missing continuation byte, an overlong form, a surrogate, past U+10FFFF). */
size_t api_utf8_len(const char *text);
/* v into out[size] as valid UTF-8: each byte that is not part of a character becomes U+FFFD;
 * escape: \\, " and newline escaped as a Prometheus label value needs. Cut at a whole
 * character or escape; the length written. */
size_t api_utf8_clean(char *out, size_t size, const char *v, int escape);
void api_json_bool(struct cJSON *obj, const char *key, int v, int *failed);
void api_json_null(struct cJSON *obj, const char *key, int *failed);
/* Attach item under key (key NULL: append to an array); frees item on failure. */
void api_json_item(struct cJSON *obj, const char *key, struct cJSON *item, int *failed);
/* root, or NULL (root freed) when anything failed. */
struct cJSON *api_json_done(struct cJSON *root, int failed);

/* 500 for a failed store query: "reading <what> failed: <err>"; frees err; returns rc. */
int api_store_failed(struct server_reply *rep, const char *what, int rc, char *err);

/* A trim result as JSON (trim_json.c: /memory/trim, /memory/trims, the group's); NULL on OOM. */
struct cJSON *api_trim_to_json(const struct mt_trim_result *t, int with_coalesced);

/* Worker groups (group.c): the `pid` parameter (0 when absent; -EINVAL after a 400). */
int api_pid_param(const struct server_request *req, int *pid, struct server_reply *rep);
/* pid names this process: the wall-clock time it started (its own rows without a pid, those of a
 * process in no group, are the ones stored since then), else 0. alone: set to 1 when it is in
 * no group (its samples are then the store's own, not a member's). */
int64_t api_pid_self_since(const struct server_request *req, int pid, int *alone);
struct memtrim;
/* The "group" object of /memory/stats; NULL in no group (or OOM: *failed). */
struct cJSON *api_group_stats(struct memtrim *mt, int *failed);

/* The /memory/stats object for a snapshot; NULL on OOM. */
struct cJSON *api_stats_to_json(const struct mt_snapshot *s);

#endif /* MEMTRIM_API_H */
