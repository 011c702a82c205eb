/*
 * config.c - the agent's configuration (docs/agent.md, "Configuration"): JSON inline or in a
 * file (`memtrim agent --config JSON|FILE`), a "MemoryTrimAgent" object or the object itself,
 * CamelCase keys from one table (the server's keys named as the plugin names them: HttpBind,
 * HttpPort, AuthToken, ReadToken, HttpsCertificate, ...). Unknown keys and wrong types or
 * ranges are errors that name the key (an unknown one with the closest known key, as the
 * plugin's parser does: common/keys.c); a token follows the plugin's rule (printable ASCII,
 * mt_token_check), inline or read from AuthTokenFile / ReadTokenFile (mt_token_file_read). The allow and deny lists are fnmatch globs. Pure but
 * for reading the file; the loop thread, at start.
 */
#include "agent_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "control.h"

enum key_type { K_BOOL, K_INT, K_DOUBLE, K_STRING, K_GLOBS };

#define OFF(f) offsetof(struct agent_config, f)
#define SZ(f) sizeof(((struct agent_config *)0)->f)

static const struct key {
    const char *name;
    enum key_type type;
    size_t offset, size;
    double min, max;
    size_t count_offset; /* K_GLOBS: where the count is */
} keys[] = {
    {"HttpEnabled", K_BOOL, OFF(http_enabled), 0, 0, 1, 0},
    {"HttpBind", K_STRING, OFF(http.bind), SZ(http.bind), 0, 0, 0},
    {"HttpPort", K_INT, OFF(http.port), 0, 0, 65535, 0},
    {"HttpThreads", K_INT, OFF(http.threads), 0, 1, 16, 0},
    {"AuthToken", K_STRING, OFF(http.token), SZ(http.token), 0, 0, 0},
    {"ReadToken", K_STRING, OFF(http.read_token), SZ(http.read_token), 0, 0, 0},
    {"AuthTokenFile", K_STRING, OFF(auth_token_file), SZ(auth_token_file), 0, 0, 0},
    {"ReadTokenFile", K_STRING, OFF(read_token_file), SZ(read_token_file), 0, 0, 0},
    {"ReadRequiresAuth", K_BOOL, OFF(http.read_requires_auth), 0, 0, 1, 0},
    {"AllowUnauthenticatedRemote", K_BOOL, OFF(http.allow_unauthenticated_remote), 0, 0, 1, 0},
    {"HttpsCertificate", K_STRING, OFF(http.tls_cert), SZ(http.tls_cert), 0, 0, 0},
    {"HttpsPrivateKey", K_STRING, OFF(http.tls_key), SZ(http.tls_key), 0, 0, 0},
    {"HttpsClientCA", K_STRING, OFF(http.tls_ca), SZ(http.tls_ca), 0, 0, 0},
    {"HttpSocketGroup", K_STRING, OFF(http.socket_group), SZ(http.socket_group), 0, 0, 0},
    {"AllowCgroups", K_GLOBS, OFF(allow), SZ(allow[0]), 0, 0, OFF(nallow)},
    {"DenyCgroups", K_GLOBS, OFF(deny), SZ(deny[0]), 0, 0, OFF(ndeny)},
    {"AllowPrograms", K_GLOBS, OFF(allow_programs), SZ(allow_programs[0]), 0, 0, OFF(nallow_programs)},
    {"DenyPrograms", K_GLOBS, OFF(deny_programs), SZ(deny_programs[0]), 0, 0, OFF(ndeny_programs)},
    {"DryRun", K_BOOL, OFF(dry_run), 0, 0, 1, 0},
    {"IdleTrims", K_BOOL, OFF(idle_trims), 0, 0, 1, 0},
    {"IdleIntervalSeconds", K_INT, OFF(idle_interval_s), 0, 1, 86400, 0},
    {"PressureRatio", K_DOUBLE, OFF(pressure_ratio), 0, 0.1, 1.0, 0},
    {"ScanIntervalMs", K_INT, OFF(scan_interval_ms), 0, 50, 600000, 0},
    {"ZonePollMs", K_INT, OFF(zone_poll_ms), 0, 1, 10000, 0},
    {"CpuBudgetPercent", K_DOUBLE, OFF(cpu_budget_percent), 0, 0.01, 100, 0},
    {"MaxParallelTrims", K_INT, OFF(max_parallel_trims), 0, 1, 64, 0},
    {"MaxCgroups", K_INT, OFF(max_cgroups), 0, 1, 100000, 0},
    {"ThreadWaitSeconds", K_DOUBLE, OFF(thread_wait_s), 0, 0.001, 60, 0},
    {"CallTimeoutSeconds", K_DOUBLE, OFF(call_wait_s), 0, 0.01, 600, 0},
    {"CgroupV1Root", K_STRING, OFF(v1_root), SZ(v1_root), 0, 0, 0},
    {"CgroupV2Root", K_STRING, OFF(v2_root), SZ(v2_root), 0, 0, 0},
    {"Command", K_STRING, OFF(command), SZ(command), 0, 0, 0},
    {"Database", K_STRING, OFF(database), SZ(database), 0, 0, 0},
    {"RetentionHours", K_INT, OFF(retention_hours), 0, 1, 87600, 0},
    {"SampleIntervalSeconds", K_INT, OFF(sample_interval_s), 0, 1, 86400, 0},
};

static void defaults(struct agent_config *c)
{
    memset(c, 0, sizeof *c);
    c->http_enabled = 1;
    snprintf(c->http.bind, sizeof c->http.bind, "127.0.0.1");
    c->http.port = 8044;
    c->http.threads = 2;
    c->idle_interval_s = 300;
    c->pressure_ratio = 0.8;
    c->scan_interval_ms = 2000;
    c->zone_poll_ms = 20;
    c->cpu_budget_percent = 10;
    c->max_parallel_trims = 4;
    c->max_cgroups = 2048;
    c->retention_hours = 168;
    c->sample_interval_s = 10;
    c->thread_wait_s = 0.5;
    c->call_wait_s = 10;
    snprintf(c->v1_root, sizeof c->v1_root, "/sys/fs/cgroup/memory");
    snprintf(c->v2_root, sizeof c->v2_root, "/sys/fs/cgroup");
}

static int set_key(const struct key *k, const cJSON *v, struct agent_config *c, char *err,
                   size_t errlen)
{
    char *at = (char *)c + k->offset;
    switch (k->type) {
    case K_BOOL:
        if (!cJSON_IsBool(v))
            goto type;
        *(int *)at = cJSON_IsTrue(v);
        return 0;
    case K_INT:
    case K_DOUBLE:
        if (!cJSON_IsNumber(v))
            goto type;
        if (!(v->valuedouble >= k->min && v->valuedouble <= k->max) ||
            (k->type == K_INT && v->valuedouble != (double)(long)v->valuedouble)) {
            snprintf(err, errlen, "configuration key %s: %g is not %s between %g and %g", k->name,
                     v->valuedouble, k->type == K_INT ? "an integer" : "a number", k->min, k->max);
            return -1;
        }
        if (k->type == K_INT)
            *(int *)at = (int)v->valuedouble;
        else
            *(double *)at = v->valuedouble;
        return 0;
    case K_STRING:
        if (!cJSON_IsString(v))
            goto type;
        if (strlen(v->valuestring) >= k->size) {
            snprintf(err, errlen, "configuration key %s: longer than %zu bytes", k->name, k->size - 1);
            return -1;
        }
        snprintf(at, k->size, "%s", v->valuestring);
        return 0;
    case K_GLOBS: {
        if (!cJSON_IsArray(v))
            goto type;
        int n = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (!cJSON_IsString(e) || n >= AGENT_GLOBS || strlen(e->valuestring) >= k->size) {
                snprintf(err, errlen, "configuration key %s: at most %d strings of under %zu bytes",
                         k->name, AGENT_GLOBS, k->size);
                return -1;
            }
            snprintf(at + (size_t)n * k->size, k->size, "%s", e->valuestring);
            n++;
        }
        *(int *)((char *)c + k->count_offset) = n;
        return 0;
    }
    }
type:
    snprintf(err, errlen, "configuration key %s: wrong type (%s wanted)", k->name,
             k->type == K_BOOL ? "true or false" : k->type == K_STRING ? "a string"
             : k->type == K_GLOBS ? "an array of strings" : "a number");
    return -1;
}

static char *read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "--config: '%s' is neither JSON nor a readable file: %s", path,
                 strerror(errno));
        return NULL;
    }
    char *buf = malloc(MT_JSON_DOC_MAX + 1);
    size_t n = buf ? fread(buf, 1, MT_JSON_DOC_MAX + 1, f) : 0;
    fclose(f);
    if (!buf || n > MT_JSON_DOC_MAX) {
        snprintf(err, errlen, "--config: %s is larger than %d bytes", path, MT_JSON_DOC_MAX);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

/* AuthTokenFile and ReadTokenFile (the plugin's keys and rules, common/keys.c): a token from a
 * file its user alone may read (a Kubernetes Secret mounted with defaultMode 0400), never on a
 * command line or in a ConfigMap. Not beside the inline key; the two tokens differ. */
static int read_token_files(struct agent_config *c, char *err, size_t errlen)
{
    if ((c->auth_token_file[0] && c->http.token[0]) || (c->read_token_file[0] && c->http.read_token[0])) {
        snprintf(err, errlen, "configuration key %s: not with %s (one or the other)",
                 c->auth_token_file[0] && c->http.token[0] ? "AuthTokenFile" : "ReadTokenFile",
                 c->auth_token_file[0] && c->http.token[0] ? "AuthToken" : "ReadToken");
        return -1;
    }
    if (mt_token_file_read("AuthTokenFile", c->auth_token_file, c->http.token,
                           sizeof c->http.token, err, errlen) != 0 ||
        mt_token_file_read("ReadTokenFile", c->read_token_file, c->http.read_token,
                           sizeof c->http.read_token, err, errlen) != 0)
        return -1;
    if (c->http.read_token[0] && !strcmp(c->http.read_token, c->http.token)) {
        snprintf(err, errlen, "configuration keys ReadToken and AuthToken: the two tokens are the "
                 "same; give them different values");
        return -1;
    }
    return 0;
}

int agent_config_load(const char *text, struct agent_config *cfg, char *err, size_t errlen)
{
    defaults(cfg);
    if (!text)
        return 0;
    char *owned = NULL;
    const char *json = text;
    while (*json == ' ' || *json == '\n' || *json == '\t')
        json++;
    if (*json != '{') {
        owned = read_file(text, err, errlen);
        if (!owned)
            return -1;
        json = owned;
    }
    size_t len = strlen(json);
    cJSON *root = NULL;
    char why[256];
    int rc = -1;
    if (mt_json_prescan(json, len, MT_JSON_DOC_MAX, MT_JSON_DEPTH_MAX, why, sizeof why) != 0) {
        snprintf(err, errlen, "--config: %s", why);
        goto done;
    }
    if (mt_json_parse(json, len, 1, &root, NULL) != 0 || !cJSON_IsObject(root)) {
        snprintf(err, errlen, "--config: not a JSON object");
        goto done;
    }
    const cJSON *section = cJSON_GetObjectItemCaseSensitive(root, "MemoryTrimAgent");
    if (!section)
        section = root;
    else if (!cJSON_IsObject(section)) {
        snprintf(err, errlen, "--config: MemoryTrimAgent is not an object");
        goto done;
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, section) {
        const struct key *k = NULL;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !k; i++)
            if (!strcmp(keys[i].name, v->string))
                k = &keys[i];
        if (!k) {
            const char *near = mt_closest_key(v->string, keys, sizeof keys / sizeof keys[0],
                                              sizeof keys[0]);
            if (near && !mt_control("agent-config-no-hint"))
                snprintf(err, errlen, "configuration key %s is unknown: did you mean %s?",
                         v->string, near);
            else
                snprintf(err, errlen, "configuration key %s: unknown", v->string);
            goto done;
        }
        if (set_key(k, v, cfg, err, errlen) != 0)
            goto done;
        /* a token follows the plugin's rule (an AuthToken read with its newline would be
         * accepted and never match a request's) */
        if ((!strcmp(k->name, "AuthToken") || !strcmp(k->name, "ReadToken")) &&
            !mt_control("agent-token-unchecked") && /* the defect: any bytes taken */
            mt_token_check(k->name, (const char *)cfg + k->offset, err, errlen) != 0)
            goto done;
    }
    rc = read_token_files(cfg, err, errlen);
done:
    cJSON_Delete(root);
    free(owned);
    return rc;
}

static int any_match(const char (*globs)[AGENT_PATH], int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (fnmatch(globs[i], s, 0) == 0)
            return 1;
    return 0;
}

static int any_match_short(const char (*globs)[64], int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (fnmatch(globs[i], s, 0) == 0)
            return 1;
    return 0;
}

int agent_cgroup_allowed(const struct agent_config *cfg, const char *path)
{
    if (cfg->nallow && !any_match(cfg->allow, cfg->nallow, path))
        return 0;
    return !any_match(cfg->deny, cfg->ndeny, path);
}

int agent_program_allowed(const struct agent_config *cfg, const char *comm)
{
    if (cfg->nallow_programs && !any_match_short(cfg->allow_programs, cfg->nallow_programs, comm))
        return 0;
    return !any_match_short(cfg->deny_programs, cfg->ndeny_programs, comm);
}
