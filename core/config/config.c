/*
 * config.c - the "MemoryTrim" configuration keys, as one table read by
 * generic code: parse and validate at start, patch at run time, print.
 * Pure functions on a caller-owned struct mt_config: no locks, no threads.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "alloc_table.h"
#include "mt_alloc.h"
#include "common.h"
#include "config.h"
#include "control.h"

/* KEY_GLOBS: a string or a list of strings, stored '\n'-separated in a string buffer. */
enum key_type { KEY_BOOL, KEY_INT, KEY_INT64, KEY_DOUBLE, KEY_STRING, KEY_GLOBS };

struct config_key {
    const char *name;
    enum key_type type;
    size_t offset;
    size_t size; /* KEY_STRING: buffer size */
    double min, max;
    double def_num;
    const char *def_str;
    int runtime; /* may change with PATCH /config */
    int secret;  /* redacted when printed */
    int nullable; /* JSON null means the default ("none"/"auto") */
    const char *choices; /* KEY_STRING: the accepted values, "|"-separated; NULL = any */
    /* Bounds for PATCH /config only (0 = none): an HTTP client may not set a value that
     * would hurt the host (a nonzero value below patch_floor, one above patch_max); the
     * configuration file, the operator's, may. 0 stays allowed where it means "off". */
    double patch_floor, patch_max;
    int zero_off; /* 0 turns the feature off (rather than meaning "no limit") */
    int auto_ok;  /* KEY_INT64: the string "auto" is accepted too, stored as MT_CONFIG_AUTO */
};

#define OFF(f) offsetof(struct mt_config, f)
#define SZ(f) sizeof(((struct mt_config *)0)->f)
#define MIB (1024.0 * 1024.0)
#define GLIBC_DEFAULT_THRESHOLD (128 * 1024) /* M_TRIM_THRESHOLD's and M_TOP_PAD's default */
#define RAISED_TRIM_INTERVAL_MAX 300
#define MAXB 9007199254740992.0 /* 2^53: the largest integer a JSON double holds exactly */

static const struct config_key keys[] = {
    {.name = "Enabled", .type = KEY_BOOL, .offset = OFF(enabled), .min = 0, .max = 1, .def_num = 1},
    {.name = "HttpBind", .type = KEY_STRING, .offset = OFF(http_bind), .size = SZ(http_bind),
     .def_str = "127.0.0.1"},
    {.name = "HttpPort", .type = KEY_INT, .offset = OFF(http_port), .min = 0, .max = 65535,
     .def_num = 8043},
    {.name = "HttpThreads", .type = KEY_INT, .offset = OFF(http_threads), .min = 1, .max = 64,
     .def_num = 2},
    {.name = "AuthToken", .type = KEY_STRING, .offset = OFF(auth_token), .size = SZ(auth_token),
     .def_str = "", .secret = 1, .nullable = 1},
    {.name = "ReadRequiresAuth", .type = KEY_BOOL, .offset = OFF(read_requires_auth), .min = 0,
     .max = 1, .def_num = 0},
    /* PATCH floors of 5 s: a heap that is mostly free is trimmed at the base interval and
     * gap whatever the cost gate says (policy.c); at 1 s the demo lost 10-20 % of its
     * throughput beside a control host, at 5 s none measurable. */
    {.name = "TrimIntervalSeconds", .type = KEY_DOUBLE, .offset = OFF(trim_interval_seconds),
     .min = 0, .max = 86400 * 7, .def_num = 30, .runtime = 1, .patch_floor = 5, .zero_off = 1},
    {.name = "TrimPadBytes", .type = KEY_INT64, .offset = OFF(trim_pad_bytes), .min = 0,
     .max = MAXB, .def_num = 0, .runtime = 1, .patch_max = 64 * MIB},
    {.name = "TrimMinReleasableBytes", .type = KEY_INT64,
     .offset = OFF(trim_min_releasable_bytes), .min = 0, .max = MAXB, .def_num = 8 * MIB,
     .runtime = 1, .patch_floor = 1 * MIB}, /* 0: every trim counts as useful (no back-off) */
    {.name = "TrimReleasableTriggerBytes", .type = KEY_INT64,
     .offset = OFF(trim_releasable_trigger_bytes), .min = 0, .max = MAXB, .def_num = 64 * MIB,
     .runtime = 1, .patch_floor = 1 * MIB, .zero_off = 1},
    {.name = "TrimMinGapSeconds", .type = KEY_DOUBLE, .offset = OFF(trim_min_gap_seconds),
     .min = 0, .max = 86400, .def_num = 5, .runtime = 1, .patch_floor = 5},
    /* PATCH: also no lower than twice the process's peak RSS (instance.c): the host's own
     * peak stays below the pressure zone, which starts at half the limit. 0 = the cgroup's. */
    {.name = "MemoryLimitBytes", .type = KEY_INT64, .offset = OFF(memory_limit_bytes), .min = 0,
     .max = MAXB, .def_num = 0, .runtime = 1, .nullable = 1, .patch_floor = 16 * MIB,
     .zero_off = 1},
    /* PATCH: from 0.5 up the zone starts at half the limit whatever the ratio; below, the
     * line is the zone's floor and every reading above it a trim. */
    {.name = "PressureRatio", .type = KEY_DOUBLE, .offset = OFF(pressure_ratio), .min = 0,
     .max = 1, .def_num = 0.9, .runtime = 1, .patch_floor = 0.5, .zero_off = 1},
    {.name = "SampleIntervalSeconds", .type = KEY_DOUBLE, .offset = OFF(sample_interval_seconds),
     .min = 0, .max = 86400, .def_num = 10, .runtime = 1, .patch_floor = 1, .zero_off = 1},
    {.name = "ProbeBudgetPercent", .type = KEY_DOUBLE, .offset = OFF(probe_budget_percent),
     .min = 0.001, .max = 10, .def_num = 0.1, .runtime = 1, .patch_max = 1},
    {.name = "StatsMaxAgeMs", .type = KEY_INT, .offset = OFF(stats_max_age_ms), .min = 0,
     .max = 3600000, .def_num = 1000, .runtime = 1, .patch_floor = 100},
    {.name = "ManualTrimMinIntervalMs", .type = KEY_INT,
     .offset = OFF(manual_trim_min_interval_ms), .min = 0, .max = 3600000, .def_num = 1000,
     .runtime = 1, .patch_floor = 250},
    {.name = "Database", .type = KEY_STRING, .offset = OFF(database), .size = SZ(database),
     .def_str = "memtrim.sqlite", .nullable = 1},
    {.name = "RetentionHours", .type = KEY_DOUBLE, .offset = OFF(retention_hours), .min = 0.01,
     .max = 24 * 3650, .def_num = 168, .runtime = 1, .patch_floor = 1, .patch_max = 24 * 366},
    {.name = "FollowFork", .type = KEY_BOOL, .offset = OFF(follow_fork), .min = 0, .max = 1,
     .def_num = 0},
    {.name = "Group", .type = KEY_BOOL, .offset = OFF(group), .min = 0, .max = 1, .def_num = 1},
    {.name = "GroupName", .type = KEY_STRING, .offset = OFF(group_name), .size = SZ(group_name),
     .def_str = "", .nullable = 1},
    {.name = "GroupDir", .type = KEY_STRING, .offset = OFF(group_dir), .size = SZ(group_dir),
     .def_str = "", .nullable = 1},
    /* A leader's: each member in the zone trims what it freed in its own slot of this
     * width (an 80 MB study's trim takes 7-10 ms here); 0: only when the leader asks. */
    {.name = "GroupTrimSlotMs", .type = KEY_INT, .offset = OFF(group_trim_slot_ms), .min = 0,
     .max = 1000, .def_num = 10, .runtime = 1},
    /* 0 = auto: a small share of the process's descriptors (server.c, server_limits). */
    {.name = "MaxConnections", .type = KEY_INT, .offset = OFF(max_connections), .min = 0,
     .max = 100000, .def_num = 0},
    {.name = "MaxConnectionsPerIp", .type = KEY_INT, .offset = OFF(max_connections_per_ip),
     .min = 0, .max = 100000, .def_num = 0},
    {.name = "ConnectionTimeoutSeconds", .type = KEY_INT,
     .offset = OFF(connection_timeout_seconds), .min = 1, .max = 3600, .def_num = 30},
    {.name = "Allocator", .type = KEY_STRING, .offset = OFF(allocator), .size = SZ(allocator),
     .def_str = "auto", .choices = "auto" MT_ALLOC_CHOICES},
    {.name = "TrimBusyCpuPercent", .type = KEY_DOUBLE, .offset = OFF(trim_busy_cpu_percent),
     .min = 0, .max = 100, .def_num = 90, .runtime = 1},
    {.name = "TrimMaxDeferSeconds", .type = KEY_DOUBLE, .offset = OFF(trim_max_defer_seconds),
     .min = 0, .max = 86400, .def_num = 30, .runtime = 1},
    {.name = "TrimBudgetPercent", .type = KEY_DOUBLE, .offset = OFF(trim_budget_percent),
     .min = 0.001, .max = 100, .def_num = 0.5, .runtime = 1, .patch_max = 2},
    {.name = "TrimGapMaxFactor", .type = KEY_DOUBLE, .offset = OFF(trim_gap_max_factor), .min = 1,
     .max = 1024, .def_num = 32, .runtime = 1},
    {.name = "RefaultWindowSeconds", .type = KEY_DOUBLE, .offset = OFF(refault_window_seconds),
     .min = 0.1, .max = 3600, .def_num = 10, .runtime = 1},
    /* glibc tunables: null/absent = unset (-1), glibc's own behaviour. mallopt takes an int. */
    /* "auto": from the container's CPU quota at start (core/measure/cpuquota.c, applied by core/alloc/tunables.c) */
    {.name = "MallocArenaMax", .type = KEY_INT64, .offset = OFF(malloc_arena_max), .min = 1,
     .max = 1024, .def_num = -1, .nullable = 1, .auto_ok = 1},
    /* Ceilings, at start too: glibc's own bounds. mallopt refuses an mmap threshold above
     * 32 MiB (HEAP_MAX_SIZE / 2), and its dynamic trim threshold never passes twice that;
     * above 32 MiB of trim threshold or top pad a thread arena's 64 MiB heap is never given
     * back by free() at all. Raising either above glibc's default needs periodic trims
     * (check_relations): memtrim then gives back what glibc keeps. */
    {.name = "MallocMmapThresholdBytes", .type = KEY_INT64,
     .offset = OFF(malloc_mmap_threshold_bytes), .min = 0, .max = 32 * MIB, .def_num = -1,
     .runtime = 1, .nullable = 1, .patch_floor = 65536}, /* 0: every malloc an mmap */
    {.name = "MallocTrimThresholdBytes", .type = KEY_INT64,
     .offset = OFF(malloc_trim_threshold_bytes), .min = 0, .max = 32 * MIB, .def_num = -1,
     .runtime = 1, .nullable = 1, .patch_floor = 65536}, /* 0: a trim at almost every free */
    {.name = "MallocTopPadBytes", .type = KEY_INT64, .offset = OFF(malloc_top_pad_bytes),
     .min = 0, .max = 32 * MIB, .def_num = -1, .runtime = 1, .nullable = 1},
    {.name = "RequestTimeoutSeconds", .type = KEY_INT, .offset = OFF(request_timeout_seconds),
     .min = 1, .max = 3600, .def_num = 10},
    {.name = "AllowUnauthenticatedRemote", .type = KEY_BOOL,
     .offset = OFF(allow_unauthenticated_remote), .min = 0, .max = 1, .def_num = 0},
    {.name = "AuthTokenFile", .type = KEY_STRING, .offset = OFF(auth_token_file),
     .size = SZ(auth_token_file), .def_str = "", .nullable = 1},
    {.name = "Program", .type = KEY_GLOBS, .offset = OFF(program), .size = SZ(program),
     .def_str = "", .nullable = 1},
    {.name = "PortFile", .type = KEY_STRING, .offset = OFF(port_file), .size = SZ(port_file),
     .def_str = "", .nullable = 1},
    /* Transport (docs/security.md): the read scope, TLS, the unix socket. */
    {.name = "ReadToken", .type = KEY_STRING, .offset = OFF(read_token), .size = SZ(read_token),
     .def_str = "", .secret = 1, .nullable = 1},
    {.name = "ReadTokenFile", .type = KEY_STRING, .offset = OFF(read_token_file),
     .size = SZ(read_token_file), .def_str = "", .nullable = 1},
    {.name = "HttpsCertificate", .type = KEY_STRING, .offset = OFF(https_certificate),
     .size = SZ(https_certificate), .def_str = "", .nullable = 1},
    {.name = "HttpsPrivateKey", .type = KEY_STRING, .offset = OFF(https_private_key),
     .size = SZ(https_private_key), .def_str = "", .nullable = 1},
    {.name = "HttpsClientCA", .type = KEY_STRING, .offset = OFF(https_client_ca),
     .size = SZ(https_client_ca), .def_str = "", .nullable = 1},
    {.name = "HttpSocketMode", .type = KEY_STRING, .offset = OFF(http_socket_mode),
     .size = SZ(http_socket_mode), .def_str = "0660"},
    {.name = "HttpSocketGroup", .type = KEY_STRING, .offset = OFF(http_socket_group),
     .size = SZ(http_socket_group), .def_str = "", .nullable = 1},
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

/* Whether value is one of the "|"-separated choices. */
static int is_choice(const char *choices, const char *value)
{
    size_t n = strlen(value);
    for (const char *c = choices; c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, value, n) == 0)
            return 1;
        c = bar ? bar + 1 : NULL;
    }
    return 0;
}

static const struct config_key *find_key(const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

int config_key_info(size_t i, const char **name, char *type, double *min, double *max,
                    int *runtime)
{
    static const char types[] = {[KEY_BOOL] = 'b', [KEY_INT] = 'i', [KEY_INT64] = 'i',
                                 [KEY_DOUBLE] = 'd', [KEY_STRING] = 's', [KEY_GLOBS] = 'l'};
    if (i >= NKEYS)
        return -1;
    *name = keys[i].name;
    *type = types[keys[i].type];
    *min = keys[i].min;
    *max = keys[i].max;
    *runtime = keys[i].runtime;
    return 0;
}

int config_key_patch_range(size_t i, double *lo, double *hi, int *zero_allowed)
{
    if (i >= NKEYS || !keys[i].runtime)
        return -1;
    const struct config_key *k = &keys[i];
    *lo = k->patch_floor > k->min ? k->patch_floor : k->min;
    *hi = k->patch_max > 0 && k->patch_max < k->max ? k->patch_max : k->max;
    *zero_allowed = k->zero_off && k->min <= 0;
    return 0;
}

int config_key_exists(const char *key)
{
    return key && find_key(key) != NULL;
}

int config_key_is_runtime(const char *key)
{
    const struct config_key *k = key ? find_key(key) : NULL;
    return k && k->runtime;
}

const char *config_closest_key(const char *key)
{
    return mt_closest_key(key, keys, NKEYS, sizeof keys[0]);
}

static char *errf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *errf(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return mt_strdup(buf);
}

void config_defaults(struct mt_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < NKEYS; i++) {
        const struct config_key *k = &keys[i];
        char *p = (char *)cfg + k->offset;
        switch (k->type) {
        case KEY_BOOL:
        case KEY_INT:
            *(int *)p = (int)k->def_num;
            break;
        case KEY_INT64:
            *(int64_t *)p = (int64_t)k->def_num;
            break;
        case KEY_DOUBLE:
            *(double *)p = k->def_num;
            break;
        case KEY_STRING:
        case KEY_GLOBS:
            snprintf(p, k->size, "%s", k->def_str ? k->def_str : "");
            break;
        }
    }
}

static const char *type_name(enum key_type t)
{
    switch (t) {
    case KEY_BOOL:
        return "a boolean";
    case KEY_INT:
    case KEY_INT64:
        return "an integer";
    case KEY_DOUBLE:
        return "a number";
    case KEY_STRING:
        return "a string";
    case KEY_GLOBS:
        return "a string or a list of strings";
    }
    return "?";
}

/* A KEY_GLOBS value: one non-empty string, or a non-empty list of them, without newlines. */
static int apply_globs(const struct config_key *k, const cJSON *v, char *p, char **err)
{
    char buf[MT_CONFIG_STR_MAX];
    const cJSON *item;
    size_t used = 0, count = 0;

    if (!cJSON_IsString(v) && !cJSON_IsArray(v)) {
        *err = errf("configuration key %s: expected %s%s", k->name, type_name(k->type),
                    k->nullable ? " or null" : "");
        return -EINVAL;
    }
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0) {
        *err = errf("configuration key %s: the list is empty (give at least one glob, or null "
                    "for any program)", k->name);
        return -EINVAL;
    }
    buf[0] = '\0';
    int list = cJSON_IsArray(v);
    for (item = list ? v->child : v; item; item = list ? item->next : NULL) {
        const char *s = cJSON_IsString(item) ? item->valuestring : NULL;
        if (!s) {
            *err = errf("configuration key %s: item %zu is not a string", k->name, count + 1);
            return -EINVAL;
        }
        if (!s[0] || strchr(s, '\n')) {
            *err = errf("configuration key %s: item %zu (\"%.80s\") is empty or holds a newline",
                        k->name, count + 1, s);
            return -EINVAL;
        }
        size_t len = strlen(s);
        if (used + (used > 0) + len >= k->size || used + (used > 0) + len >= sizeof(buf)) {
            *err = errf("configuration key %s: too long (at most %zu characters in all)", k->name,
                        k->size - 1);
            return -EINVAL;
        }
        if (used > 0)
            buf[used++] = '\n';
        memcpy(buf + used, s, len + 1);
        used += len;
        count++;
    }
    snprintf(p, k->size, "%s", buf);
    return 0;
}

/* Check one value against its key; store it into cfg when store is set. */
static int apply_value(const struct config_key *k, const cJSON *v, struct mt_config *cfg,
                       int patch, char **err)
{
    char *p = (char *)cfg + k->offset;

    if (cJSON_IsNull(v) && k->nullable) {
        if (k->type == KEY_STRING || k->type == KEY_GLOBS)
            p[0] = '\0';
        else if (k->type == KEY_INT64)
            *(int64_t *)p = k->def_num < 0 ? (int64_t)k->def_num : 0; /* "unset" or "auto" */
        return 0;
    }
    if (k->type == KEY_BOOL) {
        if (!cJSON_IsBool(v))
            goto wrong_type;
        *(int *)p = cJSON_IsTrue(v);
        return 0;
    }
    if (k->type == KEY_GLOBS)
        return apply_globs(k, v, p, err);
    if (k->auto_ok && cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "auto") != 0) {
            *err = errf("configuration key %s: expected an integer or \"auto\", got \"%s\"",
                        k->name, v->valuestring);
            return -EINVAL;
        }
        *(int64_t *)p = MT_CONFIG_AUTO;
        return 0;
    }
    if (k->type == KEY_STRING) {
        if (!cJSON_IsString(v))
            goto wrong_type;
        if (strlen(v->valuestring) >= k->size) {
            *err = errf("configuration key %s: value is too long (at most %zu characters)",
                        k->name, k->size - 1);
            return -EINVAL;
        }
        if (k->choices && !is_choice(k->choices, v->valuestring)) {
            *err = errf("configuration key %s: \"%s\" is not one of %s", k->name,
                        v->valuestring, k->choices);
            return -EINVAL;
        }
        snprintf(p, k->size, "%s", v->valuestring);
        return 0;
    }
    if (!cJSON_IsNumber(v))
        goto wrong_type;
    double d = v->valuedouble;
    if (!isfinite(d) || ((k->type == KEY_INT || k->type == KEY_INT64) && d != floor(d))) {
        *err = errf("configuration key %s: expected %s, got %g", k->name, type_name(k->type), d);
        return -EINVAL;
    }
    if (d < k->min || d > k->max) {
        *err = errf("configuration key %s: %.17g is out of range [%.17g, %.17g]", k->name, d,
                    k->min, k->max);
        return -EINVAL;
    }
    double cur = k->type == KEY_INT      ? *(int *)p
                 : k->type == KEY_INT64 ? (double)*(int64_t *)p
                                        : *(double *)p;
    if (patch && d == cur)
        patch = 0; /* what is in effect already (perhaps from the file): no change to refuse */
    if (patch && k->patch_floor > 0 && d < k->patch_floor && !(d == 0 && k->zero_off)) {
        *err = errf("configuration key %s: %.17g is below %.17g, the least PATCH /config may "
                    "set (it protects the host)%s",
                    k->name, d, k->patch_floor, k->zero_off ? "; 0 turns it off" : "");
        return -EINVAL;
    }
    if (patch && k->patch_max > 0 && d > k->patch_max) {
        *err = errf("configuration key %s: %.17g is above %.17g, the most PATCH /config may set "
                    "(it protects the host)",
                    k->name, d, k->patch_max);
        return -EINVAL;
    }
    if (k->type == KEY_INT)
        *(int *)p = (int)d;
    else if (k->type == KEY_INT64)
        *(int64_t *)p = (int64_t)d;
    else
        *(double *)p = d;
    return 0;

wrong_type:
    *err = errf("configuration key %s: expected %s%s", k->name, type_name(k->type),
                k->nullable ? " or null" : "");
    return -EINVAL;
}

/* Relations between keys that no single bound expresses. The start-only ones are not checked
 * again at run time (PATCH): by then the token files have filled the tokens beside them. */
static int check_start_relations(const struct mt_config *cfg, char **err);

static int check_relations(const struct mt_config *cfg, int runtime_only, char **err)
{
    if (cfg->enabled && cfg->http_bind[0] == '\0') {
        *err = errf("configuration key HttpBind: must not be empty");
        return -EINVAL;
    }
    if (!runtime_only && check_start_relations(cfg, err) != 0)
        return -EINVAL;
    for (const char *pc = strchr(cfg->port_file, '%'); pc; pc = strchr(pc + 2, '%')) {
        if (pc[1] != 'p' && pc[1] != '%') {
            *err = errf("configuration key PortFile: \"%%%.1s\" is not known (%%p is the "
                        "process id, %%%% a %%)", pc + 1);
            return -EINVAL;
        }
    }
    /* What glibc keeps at the top of its heaps above its defaults (128 KiB), memtrim's
     * periodic trims must give back: without them the host would hold its peak. */
    if ((cfg->malloc_trim_threshold_bytes > GLIBC_DEFAULT_THRESHOLD ||
         cfg->malloc_top_pad_bytes > GLIBC_DEFAULT_THRESHOLD) &&
        (cfg->trim_interval_seconds <= 0 || cfg->trim_interval_seconds > RAISED_TRIM_INTERVAL_MAX)) {
        *err = errf("configuration keys MallocTrimThresholdBytes / MallocTopPadBytes: above "
                    "glibc's default (%d bytes) they keep freed memory that glibc would give "
                    "back; they need periodic trims in its place, TrimIntervalSeconds between "
                    "1 and %d (it is %g)",
                    GLIBC_DEFAULT_THRESHOLD, RAISED_TRIM_INTERVAL_MAX,
                    cfg->trim_interval_seconds);
        return -EINVAL;
    }
    if (cfg->pressure_ratio > 0 && cfg->pressure_ratio < 0.1) {
        *err = errf("configuration key PressureRatio: %.3g is too low to be useful (use 0 to "
                    "disable pressure trims, or a value in [0.1, 1])",
                    cfg->pressure_ratio);
        return -EINVAL;
    }
    return 0;
}

/* ASCII only: the host's locale must not widen what a file name in the group's directory may hold. */
static int ascii_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

int config_group_name_check(const char *name, char **err)
{
    size_t n = strlen(name);
    *err = NULL;
    if (n == 0 || n > MT_GROUP_NAME_MAX) {
        *err = errf("configuration key GroupName: %s (1 to %d bytes)",
                    n ? "too long" : "must not be empty", MT_GROUP_NAME_MAX);
        return -EINVAL;
    }
    if (!ascii_alnum((unsigned char)name[0])) {
        *err = errf("configuration key GroupName: \"%.*s\" must start with a letter or a digit",
                    MT_GROUP_NAME_MAX, name);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!ascii_alnum(c) && c != '.' && c != '_' && c != '-') {
            *err = errf("configuration key GroupName: \"%.*s\": byte %zu (0x%02x) is not a "
                        "letter, a digit, '.', '_' or '-'", MT_GROUP_NAME_MAX, name, i + 1, c);
            return -EINVAL;
        }
    }
    return 0;
}

size_t config_group_sock_len(const char *dir, const char *name)
{
    size_t d = strlen(dir);
    while (d > 1 && dir[d - 1] == '/')
        d--;
    return d + 1 + strlen(name) + sizeof(".sock") - 1;
}

/* The tokens, TLS, the unix socket and the named group. */
static int check_start_relations(const struct mt_config *cfg, char **err)
{
    if (cfg->group_name[0] && config_group_name_check(cfg->group_name, err) != 0)
        return -EINVAL;
    if (cfg->group_dir[0] && cfg->group_dir[0] != '/') {
        *err = errf("configuration key GroupDir: \"%s\": needs an absolute path", cfg->group_dir);
        return -EINVAL;
    }
    if (cfg->group_dir[0] && !cfg->group_name[0]) {
        *err = errf("configuration key GroupDir: needs a GroupName beside it (the group whose "
                    "socket it holds)");
        return -EINVAL;
    }
    size_t sock = cfg->group_dir[0] ? config_group_sock_len(cfg->group_dir, cfg->group_name) : 0;
    if (sock > MT_GROUP_SOCK_PATH_MAX) {
        *err = errf("configuration keys GroupDir and GroupName: the group's socket %s/%s.sock "
                    "would be %zu bytes long; a unix socket's path holds %d at most "
                    "(sun_path): choose a shorter GroupDir or GroupName",
                    cfg->group_dir, cfg->group_name, sock, MT_GROUP_SOCK_PATH_MAX);
        return -EINVAL;
    }
    if (config_token_check("AuthToken", cfg->auth_token, err) != 0 ||
        config_token_check("ReadToken", cfg->read_token, err) != 0)
        return -EINVAL;
    if (cfg->auth_token[0] && cfg->auth_token_file[0]) {
        *err = errf("configuration keys AuthToken and AuthTokenFile: give one, not both");
        return -EINVAL;
    }
    if (cfg->read_token[0] && cfg->read_token_file[0]) {
        *err = errf("configuration keys ReadToken and ReadTokenFile: give one, not both");
        return -EINVAL;
    }
    if ((cfg->read_token[0] || cfg->read_token_file[0]) && !cfg->auth_token[0] &&
        !cfg->auth_token_file[0]) {
        *err = errf("configuration key ReadToken: needs an AuthToken (or AuthTokenFile) beside "
                    "it, else reads would need a token and trims would not");
        return -EINVAL;
    }
    if ((cfg->https_certificate[0] != '\0') != (cfg->https_private_key[0] != '\0')) {
        *err = errf("configuration keys HttpsCertificate and HttpsPrivateKey: give both or "
                    "neither");
        return -EINVAL;
    }
    if (cfg->https_client_ca[0] && !cfg->https_certificate[0]) {
        *err = errf("configuration key HttpsClientCA: needs HttpsCertificate and "
                    "HttpsPrivateKey (client certificates are a part of TLS)");
        return -EINVAL;
    }
    if (strncmp(cfg->http_bind, "unix:", 5) == 0) {
        const char *path = cfg->http_bind + 5;
        if (path[0] != '/') {
            *err = errf("configuration key HttpBind: \"%s\": a unix socket needs an absolute "
                        "path (\"unix:/run/memtrim/host.sock\")", cfg->http_bind);
            return -EINVAL;
        }
        if (strlen(path) >= 108) {
            *err = errf("configuration key HttpBind: the unix socket path is %zu bytes long; "
                        "at most 107 fit a socket address", strlen(path));
            return -EINVAL;
        }
        if (cfg->https_certificate[0]) {
            *err = errf("configuration key HttpsCertificate: not with a unix socket HttpBind "
                        "(file permissions guard it; TLS serves TCP binds)");
            return -EINVAL;
        }
    }
    {
        const char *m = cfg->http_socket_mode;
        char *end = NULL;
        long mode = strtol(m, &end, 8);
        if (m[0] == '\0' || *end != '\0' || mode < 0 || mode > 0777 || m[0] == '-' ||
            m[0] == '+' || m[0] == ' ') {
            *err = errf("configuration key HttpSocketMode: \"%s\" is not an octal file mode "
                        "such as \"0660\" (at most 0777)", m);
            return -EINVAL;
        }
        if ((mode & 0600) != 0600) {
            *err = errf("configuration key HttpSocketMode: \"%s\" leaves the host's own user "
                        "without read and write on its socket (use 0600, 0660 or 0666)", m);
            return -EINVAL;
        }
    }
    return 0;
}

int config_apply(const cJSON *section, struct mt_config *cfg, int runtime_only, char **err)
{
    struct mt_config tmp = *cfg;
    const cJSON *item;

    *err = NULL;
    if (!cJSON_IsObject(section)) {
        *err = errf("configuration: the MemoryTrim section must be a JSON object");
        return -EINVAL;
    }
    unsigned char seen[NKEYS] = {0};
    cJSON_ArrayForEach(item, section)
    {
        const char *name = item->string ? item->string : "";
        const struct config_key *k = find_key(name);
        if (!k) {
            const char *near = config_closest_key(name);
            if (near)
                *err = errf("configuration key %s is unknown: did you mean %s?", name, near);
            else
                *err = errf("configuration key %s is unknown", name);
            return -EINVAL;
        }
        if (runtime_only && !k->runtime) {
            *err = errf("configuration key %s cannot be changed at run time (restart the host "
                        "with the new value)",
                        name);
            return -EINVAL;
        }
        if (seen[k - keys]++) {
            *err = errf("configuration key %s is given more than once", name);
            return -EINVAL;
        }
        int rc = apply_value(k, item, &tmp, runtime_only, err);
        if (rc)
            return rc;
    }
    int rc = check_relations(&tmp, runtime_only, err);
    if (rc)
        return rc;
    *cfg = tmp;
    return 0;
}

int config_nul_check(const char *json, int section_only, char **err)
{
    char key[64], top[64];
    long at = mt_json_find_nul(json, strlen(json), key, sizeof(key), top, sizeof(top));
    if (at < 0 || (section_only && strcmp(top, "MemoryTrim") != 0))
        return 0;
    *err = errf("configuration key %s: its value holds \\u0000 (a NUL character, at byte %ld), "
                "which would cut it short (\"\\u0000secret\" would read as \"\"); no value "
                "takes one",
                key[0] ? key : "(none)", at);
    return -EINVAL;
}

static int parse_doc(const char *json, cJSON **out, char **err)
{
    const char *end = NULL;
    char why[160];
    *out = NULL;
    if (mt_json_prescan(json, strlen(json), MT_JSON_DOC_MAX, MT_JSON_DEPTH_MAX, why,
                        sizeof(why)) != 0) {
        *err = errf("configuration: %s", why);
        return -EINVAL;
    }
    if (config_nul_check(json, 0, err) != 0)
        return -EINVAL;
    int rc = mt_json_parse(json, strlen(json), 1, out, &end);
    if (rc == -ENOMEM) {
        *err = errf("configuration: out of memory while parsing its JSON");
        return -ENOMEM;
    }
    if (rc != 0) {
        size_t at = end ? (size_t)(end - json) : 0;
        *err = errf("configuration: invalid JSON near byte %zu", at);
        return -EINVAL;
    }
    return 0;
}

int config_parse(const char *json, struct mt_config *cfg, char **err)
{
    cJSON *doc = NULL;
    const cJSON *section;
    int rc;

    *err = NULL;
    config_defaults(cfg);
    if (!json || !*json)
        return 0;
    if ((rc = parse_doc(json, &doc, err)))
        return rc;
    if (!cJSON_IsObject(doc)) {
        *err = errf("configuration: expected a JSON object");
        cJSON_Delete(doc);
        return -EINVAL;
    }
    section = cJSON_GetObjectItemCaseSensitive(doc, "MemoryTrim");
    if (!section)
        section = doc; /* the root is the section itself */
    rc = config_apply(section, cfg, 0, err);
    cJSON_Delete(doc);
    return rc;
}

/*
 * A patch takes the shapes the configuration file does: the keys themselves,
 * or {"MemoryTrim": {...}}. In a patch nothing may stand beside the wrapper
 * (there is no host configuration around it: another key would be ignored).
 * NULL (with *err) when the wrapper has company.
 */
static const cJSON *patch_section(const cJSON *doc, char **err)
{
    const cJSON *section = cJSON_GetObjectItemCaseSensitive(doc, "MemoryTrim");
    const cJSON *item;

    if (!cJSON_IsObject(doc) || section == NULL)
        return doc;
    cJSON_ArrayForEach(item, doc)
    {
        if (item != section) {
            *err = errf("configuration: key %s stands beside MemoryTrim: send either "
                        "{\"MemoryTrim\": {...}} alone or the keys themselves",
                        item->string ? item->string : "?");
            return NULL;
        }
    }
    return section;
}

int config_patch(struct mt_config *cfg, const char *json, char **err)
{
    cJSON *doc = NULL;
    int rc;

    *err = NULL;
    if (!json || !*json) {
        *err = errf("configuration: empty body, expected a JSON object");
        return -EINVAL;
    }
    if ((rc = parse_doc(json, &doc, err)))
        return rc;
    const cJSON *section = patch_section(doc, err);
    if (section && cJSON_IsObject(section) && section->child == NULL &&
        !mt_control("rt-patch-empty")) {
        /* the spec's minProperties: 1; an empty patch is a client that sent the wrong thing */
        *err = errf("configuration: nothing to change (an empty object); send at least one "
                    "runtime key, e.g. {\"TrimIntervalSeconds\": 60}");
        section = NULL;
    }
    rc = section ? config_apply(section, cfg, 1, err) : -EINVAL;
    cJSON_Delete(doc);
    return rc;
}

int config_patch_limit_check(const struct mt_config *old, const struct mt_config *next,
                             uint64_t peak_rss, int group, char **err)
{
    *err = NULL;
    int64_t limit = next->memory_limit_bytes;
    if (limit <= 0 || limit == old->memory_limit_bytes || peak_rss == 0)
        return 0;
    if ((uint64_t)limit / 2 < peak_rss) {
        *err = errf("configuration key MemoryLimitBytes: %lld is below %llu, twice %s "
                    "peak RSS (%llu bytes): pressure trims start at half the limit, "
                    "and PATCH /config may not put the host's own peak inside that zone (the "
                    "configuration file or the cgroup may set a lower limit)",
                    (long long)limit, (unsigned long long)peak_rss * 2,
                    group ? "the worker group's (its members' peaks summed)" : "this process's",
                    (unsigned long long)peak_rss);
        return -EINVAL;
    }
    return 0;
}

/* A '\n'-separated list as a JSON array of strings. */
static cJSON *globs_to_json(const char *list)
{
    cJSON *a = cJSON_CreateArray();
    char one[MT_CONFIG_STR_MAX];

    for (const char *g = list; a && *g;) {
        size_t len = strcspn(g, "\n");
        snprintf(one, sizeof(one), "%.*s", (int)len, g);
        cJSON *s = cJSON_CreateString(one);
        if (!s || !cJSON_AddItemToArray(a, s)) {
            cJSON_Delete(s);
            cJSON_Delete(a);
            return NULL;
        }
        g += len + (g[len] == '\n');
    }
    return a;
}

cJSON *config_to_json(const struct mt_config *cfg)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    for (size_t i = 0; i < NKEYS; i++) {
        const struct config_key *k = &keys[i];
        const char *p = (const char *)cfg + k->offset;
        cJSON *v = NULL;
        switch (k->type) {
        case KEY_BOOL:
            v = cJSON_CreateBool(*(const int *)p);
            break;
        case KEY_INT:
            v = cJSON_CreateNumber(*(const int *)p);
            break;
        case KEY_INT64: { /* a negative nullable value is "unset": null; the rest exact
                           * (cJSON would print 2^53 as 9.00719925474099e+15) */
            char num[24];
            snprintf(num, sizeof(num), "%lld", (long long)*(const int64_t *)p);
            v = k->auto_ok && *(const int64_t *)p == MT_CONFIG_AUTO ? cJSON_CreateString("auto")
                : k->nullable && *(const int64_t *)p < 0 ? cJSON_CreateNull()
                                                          : cJSON_CreateRaw(num);
            break;
        }
        case KEY_DOUBLE:
            v = cJSON_CreateNumber(*(const double *)p);
            break;
        case KEY_GLOBS:
            v = p[0] ? globs_to_json(p) : cJSON_CreateNull();
            break;
        case KEY_STRING:
            if (k->secret)
                v = p[0] ? cJSON_CreateString("<redacted>") : cJSON_CreateNull();
            else
                v = cJSON_CreateString(p);
            break;
        }
        if (!v || !cJSON_AddItemToObject(o, k->name, v)) {
            cJSON_Delete(v);
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}
