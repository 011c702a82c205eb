/* test_config.c - the configuration table: every key valid and invalid, typos, types, bounds. */
#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "harness.h"

static int parse(const char *json, struct mt_config *cfg, char **err)
{
    *err = NULL;
    return config_parse(json, cfg, err);
}

static void test_defaults(void)
{
    struct mt_config cfg;
    char *err;
    CHECK_EQ_INT(parse(NULL, &cfg, &err), 0);
    CHECK_EQ_INT(cfg.enabled, 1);
    CHECK(strcmp(cfg.http_bind, "127.0.0.1") == 0);
    CHECK_EQ_INT(cfg.http_port, 8043);
    CHECK_EQ_INT(cfg.http_threads, 2);
    CHECK(cfg.auth_token[0] == '\0');
    CHECK(cfg.trim_interval_seconds == 30);
    CHECK_EQ_INT(cfg.trim_min_releasable_bytes, 8 << 20);
    CHECK_EQ_INT(cfg.trim_releasable_trigger_bytes, 64 << 20);
    CHECK(cfg.trim_min_gap_seconds == 5);
    CHECK_EQ_INT(cfg.memory_limit_bytes, 0);
    CHECK(cfg.pressure_ratio == 0.9);
    CHECK(cfg.sample_interval_seconds == 10);
    CHECK(cfg.probe_budget_percent == 0.1);
    CHECK_EQ_INT(cfg.stats_max_age_ms, 1000);
    CHECK_EQ_INT(cfg.manual_trim_min_interval_ms, 1000);
    CHECK(strcmp(cfg.database, "memtrim.sqlite") == 0);
    CHECK(cfg.retention_hours == 168);
    CHECK_EQ_INT(parse("", &cfg, &err), 0);
    CHECK_EQ_INT(parse("{}", &cfg, &err), 0);
    CHECK_EQ_INT(parse("{\"MemoryTrim\": {}}", &cfg, &err), 0);
}

static void test_section_or_root(void)
{
    struct mt_config cfg;
    char *err;
    CHECK_EQ_INT(parse("{\"MemoryTrim\": {\"HttpPort\": 9000}}", &cfg, &err), 0);
    CHECK_EQ_INT(cfg.http_port, 9000);
    CHECK_EQ_INT(parse("{\"HttpPort\": 9001, \"Database\": \":memory:\"}", &cfg, &err), 0);
    CHECK_EQ_INT(cfg.http_port, 9001);
    CHECK(strcmp(cfg.database, ":memory:") == 0);
    CHECK_EQ_INT(parse("{\"MemoryTrim\": 5}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "must be a JSON object");
    free(err);
    CHECK_EQ_INT(parse("[1, 2]", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "expected a JSON object");
    free(err);
    CHECK_EQ_INT(parse("{\"HttpPort\": 80", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "invalid JSON");
    free(err);
    CHECK_EQ_INT(parse("{\"HttpPort\": 80} trailing", &cfg, &err), -EINVAL);
    free(err);
}

/* A JSON value of the right type and in range for a key, as text. */
static void valid_value(char type, double min, double max, char *buf, size_t size)
{
    switch (type) {
    case 'b': snprintf(buf, size, "false"); break;
    case 's': snprintf(buf, size, "\"x\""); break;
    case 'l': snprintf(buf, size, "[\"x\", \"y*\"]"); break;
    case 'i': snprintf(buf, size, "%.0f", floor((min + (max < 1e6 ? max : 1e6)) / 2)); break;
    default: snprintf(buf, size, "%.6g", (min + (max < 1e6 ? max : 1e6)) / 2); break;
    }
}

static void test_every_key(void)
{
    const char *name;
    char type, json[512], value[64];
    double min, max;
    int runtime, nkeys = 0;
    struct mt_config cfg;
    char *err;

    for (size_t i = 0; config_key_info(i, &name, &type, &min, &max, &runtime) == 0; i++) {
        nkeys++;
        /* valid */
        valid_value(type, min, max, value, sizeof(value));
        snprintf(json, sizeof(json), "{\"%s\": %s}", name, value);
        if (strcmp(name, "HttpBind") == 0)
            snprintf(json, sizeof(json), "{\"HttpBind\": \"127.0.0.2\"}");
        if (strcmp(name, "Allocator") == 0)
            snprintf(json, sizeof(json), "{\"Allocator\": \"jemalloc\"}");
        /* keys that only make sense beside another one */
        static const char *const pairs[][2] = {
            {"ReadToken", "{\"ReadToken\": \"x\", \"AuthToken\": \"y\"}"},
            {"ReadTokenFile", "{\"ReadTokenFile\": \"x\", \"AuthToken\": \"y\"}"},
            {"HttpsCertificate", "{\"HttpsCertificate\": \"x\", \"HttpsPrivateKey\": \"y\"}"},
            {"HttpsPrivateKey", "{\"HttpsCertificate\": \"x\", \"HttpsPrivateKey\": \"y\"}"},
            {"HttpsClientCA", "{\"HttpsClientCA\": \"z\", \"HttpsCertificate\": \"x\", "
                              "\"HttpsPrivateKey\": \"y\"}"},
            {"HttpSocketMode", "{\"HttpSocketMode\": \"0600\"}"},
            {"GroupDir", "{\"GroupDir\": \"/run/g\", \"GroupName\": \"web\"}"},
        };
        for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++)
            if (strcmp(name, pairs[p][0]) == 0)
                snprintf(json, sizeof(json), "%s", pairs[p][1]);
        CHECK_MSG(parse(json, &cfg, &err) == 0, "%s: %s", json, err ? err : "");
        free(err);
        /* wrong type: a string for others, a number for strings */
        snprintf(json, sizeof(json), "{\"%s\": %s}", name,
                 type == 's' || type == 'l' ? "12" : "\"12\"");
        CHECK_MSG(parse(json, &cfg, &err) == -EINVAL, "%s accepted", json);
        CHECK_CONTAINS(err, name);
        CHECK_CONTAINS(err, "expected");
        free(err);
        /* out of range, below and above */
        if (type == 'i' || type == 'd') {
            snprintf(json, sizeof(json), "{\"%s\": %.17g}", name, min - 1);
            CHECK_MSG(parse(json, &cfg, &err) == -EINVAL, "%s accepted", json);
            CHECK_CONTAINS(err, name);
            CHECK_CONTAINS(err, "out of range");
            free(err);
            snprintf(json, sizeof(json), "{\"%s\": %.17g}", name, max * 2 + 1);
            CHECK_MSG(parse(json, &cfg, &err) == -EINVAL, "%s accepted", json);
            CHECK_CONTAINS(err, "out of range");
            free(err);
        }
        if (type == 'i') {
            snprintf(json, sizeof(json), "{\"%s\": %.17g}", name, min + 0.5);
            CHECK_MSG(parse(json, &cfg, &err) == -EINVAL, "%s accepted", json);
            CHECK_CONTAINS(err, "expected an integer");
            free(err);
        }
    }
    CHECK_EQ_INT(nkeys, 49);
    /* a key with a list of values names them when given another */
    CHECK_EQ_INT(parse("{\"Allocator\": \"tcmaloc\"}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "Allocator");
    CHECK_CONTAINS(err, "auto|glibc|jemalloc|tcmalloc|mimalloc");
    free(err);
}

static void test_typos(void)
{
    struct mt_config cfg;
    char *err;
    CHECK_EQ_INT(parse("{\"TrimIntervalSecond\": 5}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "TrimIntervalSecond is unknown");
    CHECK_CONTAINS(err, "did you mean TrimIntervalSeconds?");
    free(err);
    CHECK_EQ_INT(parse("{\"MemoryTrim\": {\"httpport\": 5}}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "did you mean HttpPort?");
    free(err);
    CHECK_EQ_INT(parse("{\"Databse\": \"x\"}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "did you mean Database?");
    free(err);
    CHECK_EQ_INT(parse("{\"CompletelyDifferent\": 1}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "CompletelyDifferent is unknown");
    CHECK(strstr(err, "did you mean") == NULL);
    free(err);
}

static void test_special_values(void)
{
    struct mt_config cfg;
    char *err;
    CHECK_EQ_INT(parse("{\"AuthToken\": null, \"MemoryLimitBytes\": null}", &cfg, &err), 0);
    CHECK_EQ_INT(parse("{\"HttpPort\": null}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "HttpPort");
    free(err);
    CHECK_EQ_INT(parse("{\"PressureRatio\": 0.05}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "PressureRatio");
    free(err);
    CHECK_EQ_INT(parse("{\"PressureRatio\": 0}", &cfg, &err), 0);
    CHECK_EQ_INT(parse("{\"HttpBind\": \"\"}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "HttpBind");
    free(err);
    char longtok[400];
    memset(longtok, 'a', sizeof(longtok));
    longtok[sizeof(longtok) - 1] = 0;
    char json[512];
    snprintf(json, sizeof(json), "{\"AuthToken\": \"%s\"}", longtok);
    CHECK_EQ_INT(parse(json, &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "too long");
    free(err);
    /* 2^53 is the largest exact byte count; beyond is out of range */
    CHECK_EQ_INT(parse("{\"TrimPadBytes\": 9007199254740992}", &cfg, &err), 0);
    CHECK_EQ_INT(parse("{\"TrimPadBytes\": 1e300}", &cfg, &err), -EINVAL);
    free(err);
}

/* Program: one glob or a list of them; kept one per line; printed back as a list. */
static void test_program(void)
{
    struct mt_config cfg;
    char *err;
    CHECK_EQ_INT(parse("{}", &cfg, &err), 0);
    CHECK(cfg.program[0] == '\0');
    CHECK_EQ_INT(parse("{\"Program\": \"memtrim-demo\"}", &cfg, &err), 0);
    CHECK(strcmp(cfg.program, "memtrim-demo") == 0);
    CHECK_EQ_INT(
        parse("{\"Program\": [\"*/bin/orthanc\", \"Orthanc\", \"srv-[0-9]\"]}", &cfg, &err), 0);
    CHECK(strcmp(cfg.program, "*/bin/orthanc\nOrthanc\nsrv-[0-9]") == 0);
    CHECK_EQ_INT(parse("{\"Program\": null}", &cfg, &err), 0);
    CHECK(cfg.program[0] == '\0');
    /* printed back as a list that parses to the same */
    CHECK_EQ_INT(parse("{\"Program\": [\"a\", \"b*\"]}", &cfg, &err), 0);
    cJSON *o = config_to_json(&cfg);
    char *text = cJSON_PrintUnformatted(o);
    CHECK_CONTAINS(text, "\"Program\":[\"a\",\"b*\"]");
    struct mt_config back;
    CHECK_EQ_INT(parse(text, &back, &err), 0);
    CHECK(strcmp(back.program, cfg.program) == 0);
    free(text);
    cJSON_Delete(o);
    CHECK_EQ_INT(parse("{}", &cfg, &err), 0);
    o = config_to_json(&cfg);
    text = cJSON_PrintUnformatted(o);
    CHECK_CONTAINS(text, "\"Program\":null");
    free(text);
    cJSON_Delete(o);
    /* what is refused, and why */
    static const struct { const char *json, *says; } bad[] = {
        {"{\"Program\": []}", "the list is empty"},
        {"{\"Program\": \"\"}", "item 1 (\"\") is empty"},
        {"{\"Program\": [\"a\", 3]}", "item 2 is not a string"},
        {"{\"Program\": [\"a\", \"b\\nc\"]}", "holds a newline"},
        {"{\"Program\": {\"a\": 1}}", "expected a string or a list of strings or null"},
        {"{\"Program\": true}", "expected a string or a list of strings"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_MSG(parse(bad[i].json, &cfg, &err) == -EINVAL, "%s accepted", bad[i].json);
        CHECK_CONTAINS(err, "Program");
        CHECK_CONTAINS(err, bad[i].says);
        free(err);
    }
    /* too long in all: 600 characters of globs in a 512-byte key */
    char json[1024];
    int n = snprintf(json, sizeof(json), "{\"Program\": [");
    for (int i = 0; i < 60; i++)
        n += snprintf(json + n, sizeof(json) - (size_t)n, "%s\"glob-%03d\"", i ? "," : "", i);
    snprintf(json + n, sizeof(json) - (size_t)n, "]}");
    CHECK_EQ_INT(parse(json, &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "too long");
    free(err);
    /* PortFile: %p is the pid, %% a percent sign; nothing else after % */
    CHECK_EQ_INT(parse("{\"PortFile\": \"/run/x/memtrim.%p.port\"}", &cfg, &err), 0);
    CHECK(strcmp(cfg.port_file, "/run/x/memtrim.%p.port") == 0);
    CHECK_EQ_INT(parse("{\"PortFile\": \"/run/100%%.port\"}", &cfg, &err), 0);
    CHECK_EQ_INT(parse("{\"PortFile\": null}", &cfg, &err), 0);
    CHECK(cfg.port_file[0] == '\0');
    static const char *const bad_files[] = {"{\"PortFile\": \"/run/%d.port\"}",
                                            "{\"PortFile\": \"/run/x%\"}",
                                            "{\"PortFile\": \"/run/%p%s\"}"};
    for (size_t i = 0; i < sizeof(bad_files) / sizeof(bad_files[0]); i++) {
        CHECK_MSG(parse(bad_files[i], &cfg, &err) == -EINVAL, "%s accepted", bad_files[i]);
        CHECK_CONTAINS(err, "PortFile");
        CHECK_CONTAINS(err, "is not known (%p is the process id");
        free(err);
    }
    /* not at run time: which process memtrim is in is decided at its start */
    CHECK_EQ_INT(config_patch(&cfg, "{\"Program\": \"x\"}", &err), -EINVAL);
    CHECK_CONTAINS(err, "Program cannot be changed at run time");
    free(err);
}

static void test_patch(void)
{
    struct mt_config cfg, before;
    char *err;
    CHECK_EQ_INT(parse("{\"AuthToken\": \"s3cret\"}", &cfg, &err), 0);
    before = cfg;
    CHECK_EQ_INT(config_patch(&cfg, "{\"TrimIntervalSeconds\": 5, \"PressureRatio\": 0.8}", &err),
                 0);
    CHECK(cfg.trim_interval_seconds == 5);
    CHECK(cfg.pressure_ratio == 0.8);
    /* a bad value anywhere in the body changes nothing */
    struct mt_config mid = cfg;
    CHECK_EQ_INT(config_patch(&cfg, "{\"TrimIntervalSeconds\": 7, \"PressureRatio\": 3}", &err),
                 -EINVAL);
    CHECK_CONTAINS(err, "PressureRatio");
    free(err);
    CHECK(memcmp(&cfg, &mid, sizeof(cfg)) == 0);
    /* start-up keys are refused at run time */
    CHECK_EQ_INT(config_patch(&cfg, "{\"HttpPort\": 1234}", &err), -EINVAL);
    CHECK_CONTAINS(err, "cannot be changed at run time");
    free(err);
    CHECK_EQ_INT(config_patch(&cfg, "", &err), -EINVAL);
    free(err);
    CHECK_EQ_INT(config_patch(&cfg, "{\"TrimIntervalSecnds\": 1}", &err), -EINVAL);
    CHECK_CONTAINS(err, "did you mean TrimIntervalSeconds?");
    free(err);
    /* the configuration file's wrapper is accepted too, alone */
    CHECK_EQ_INT(config_patch(&cfg, "{\"MemoryTrim\": {\"TrimIntervalSeconds\": 9}}", &err), 0);
    CHECK(cfg.trim_interval_seconds == 9);
    CHECK_EQ_INT(config_patch(&cfg, "{\"MemoryTrim\": {\"HttpPort\": 1}}", &err), -EINVAL);
    CHECK_CONTAINS(err, "HttpPort cannot be changed at run time");
    free(err);
    CHECK_EQ_INT(config_patch(&cfg, "{\"MemoryTrim\": {}, \"TrimIntervalSeconds\": 3}", &err),
                 -EINVAL);
    CHECK_CONTAINS(err, "TrimIntervalSeconds stands beside MemoryTrim");
    free(err);
    CHECK_EQ_INT(config_patch(&cfg, "{\"MemoryTrim\": 5}", &err), -EINVAL);
    CHECK_CONTAINS(err, "must be a JSON object");
    free(err);
    CHECK(cfg.trim_interval_seconds == 9);
    CHECK(config_key_is_runtime("TrimIntervalSeconds"));
    CHECK(!config_key_is_runtime("Database"));
    (void)before;
}

static void test_to_json_redacts(void)
{
    struct mt_config cfg;
    char *err;
    CHECK_EQ_INT(parse("{\"AuthToken\": \"s3cret-token\"}", &cfg, &err), 0);
    cJSON *o = config_to_json(&cfg);
    char *text = cJSON_PrintUnformatted(o);
    CHECK(text && strstr(text, "s3cret") == NULL);
    CHECK_CONTAINS(text, "\"AuthToken\":\"<redacted>\"");
    CHECK_CONTAINS(text, "\"TrimIntervalSeconds\":30");
    /* what it prints parses back to the same configuration (less the token) */
    cJSON_DeleteItemFromObject(o, "AuthToken");
    char *again = cJSON_PrintUnformatted(o);
    struct mt_config back;
    CHECK_EQ_INT(parse(again, &back, &err), 0);
    CHECK(back.trim_interval_seconds == cfg.trim_interval_seconds);
    CHECK_EQ_INT(back.http_port, cfg.http_port);
    free(text);
    free(again);
    cJSON_Delete(o);
}

/* Tokens refuse NUL, whitespace and control characters wherever they come from (#31 F10):
 * "\u0000secret" once read as "" (no token at all), " " and "tok\n" never matched. */
static void test_tokens_printable(void)
{
    static const struct {
        const char *json, *key;
    } bad[] = {
        {"{\"AuthToken\": \"\\u0000supersecret\"}", "AuthToken"},
        {"{\"MemoryTrim\": {\"AuthToken\": \"\\u0000supersecret\"}}", "AuthToken"},
        {"{\"AuthToken\": \"tok\\u0000en\"}", "AuthToken"},
        {"{\"AuthToken\": \" \"}", "AuthToken"},
        {"{\"AuthToken\": \"tok\\n\"}", "AuthToken"},
        {"{\"AuthToken\": \"to ken\"}", "AuthToken"},
        {"{\"AuthToken\": \"tok\\u0007\"}", "AuthToken"},
        {"{\"AuthToken\": \"tok\\u00e9\"}", "AuthToken"},
        {"{\"AuthToken\": \"admin-token\", \"ReadToken\": \"\\u0000r\"}", "ReadToken"},
        {"{\"AuthToken\": \"admin-token\", \"ReadToken\": \"read\\t\"}", "ReadToken"},
        {"{\"Database\": \"a\\u0000b\"}", "Database"},
    };
    struct mt_config cfg;
    char *err;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ_INT(parse(bad[i].json, &cfg, &err), -EINVAL);
        char want[64];
        snprintf(want, sizeof(want), "configuration key %s:", bad[i].key);
        CHECK_CONTAINS(err, want);
        free(err);
    }
    /* an escaped backslash before u0000 is text, not a NUL */
    CHECK_EQ_INT(parse("{\"AuthToken\": \"a\\\\u0000\"}", &cfg, &err), 0);
    CHECK(strcmp(cfg.auth_token, "a\\u0000") == 0);
    CHECK_EQ_INT(parse("{\"AuthToken\": \"Tok-3n_~!\"}", &cfg, &err), 0);
    CHECK(strcmp(cfg.auth_token, "Tok-3n_~!") == 0);
    /* the NUL check of a host's whole configuration looks inside MemoryTrim only */
    CHECK_EQ_INT(config_nul_check("{\"Name\": \"a\\u0000\", \"MemoryTrim\": {}}", 1, &err), 0);
    CHECK_EQ_INT(config_nul_check("{\"Name\": \"a\\u0000\"}", 0, &err), -EINVAL);
    CHECK_CONTAINS(err, "configuration key Name:");
    free(err);
}

/* A file of the source tree, or NULL (a failed check). */
static FILE *open_source(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", MEMTRIM_SOURCE_DIR, name);
    FILE *f = fopen(path, "re");
    CHECK_MSG(f != NULL, "cannot open %s", name);
    return f;
}

/* seen: "|A|B|": the keys a table named. */
static void seen_add(char *seen, size_t size, const char *key)
{
    if (strlen(seen) + strlen(key) + 2 < size) {
        strcat(seen, key);
        strcat(seen, "|");
    }
}

static int seen_has(const char *seen, const char *key)
{
    char want[96];
    snprintf(want, sizeof(want), "|%s|", key);
    return strstr(seen, want) != NULL;
}

/* The house rule "each file's top comment states its locking rule and owning thread":
 * the first comment of every .c file of memtrim's folders names a lock (or mutex, or
 * atomic: "no locks" counts) and a thread (or the HTTP workers). */
static void test_top_comments_state_threads_and_locks(void)
{
    static const char *const folders[] = {"common", "core/*", "server", "db", "api", "plugin"};
    int files = 0;
    for (size_t i = 0; i < sizeof(folders) / sizeof(folders[0]); i++) {
        char pattern[512];
        glob_t g;
        snprintf(pattern, sizeof(pattern), "%s/%s/*.c", MEMTRIM_SOURCE_DIR, folders[i]);
        if (glob(pattern, 0, NULL, &g) != 0)
            continue;
        for (size_t k = 0; k < g.gl_pathc; k++) {
            char head[4096] = "";
            FILE *f = fopen(g.gl_pathv[k], "re");
            size_t n = f ? fread(head, 1, sizeof(head) - 1, f) : 0;
            if (f)
                fclose(f);
            head[n] = '\0';
            char *open = strstr(head, "/*"), *close = open ? strstr(open, "*/") : NULL;
            if (close)
                *close = '\0';
            for (char *c = head; *c; c++)
                *c = (char)tolower((unsigned char)*c);
            const char *name = g.gl_pathv[k] + strlen(MEMTRIM_SOURCE_DIR) + 1;
            CHECK_MSG(open && close, "%s: no top comment", name);
            if (!open || !close)
                continue;
            CHECK_MSG(strstr(open, "lock") || strstr(open, "mutex") || strstr(open, "atomic"),
                      "%s: its top comment states no locking rule", name);
            CHECK_MSG(strstr(open, "thread") || strstr(open, "worker"),
                      "%s: its top comment names no owning thread", name);
            files++;
        }
        globfree(&g);
    }
    CHECK_MSG(files > 50, "only %d source files found", files);
}

/* The README's configuration table and the key table move together: every key has a
 * row (a row may name several keys, "A / B"), every row names only keys, and the row's
 * PATCH column (the third) says "yes" exactly for the keys PATCH /config may change. */
static void test_readme_table(void)
{
    FILE *f = open_source("README.md");
    if (!f)
        return;
    char line[2048], names[8192] = "|";
    int in_table = 0, rows = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "## ", 3) == 0) {
            in_table = strncmp(line, "## Configuration", 16) == 0;
            continue;
        }
        if (strncmp(line, "| PATCH key |", 13) == 0)
            in_table = 0; /* the PATCH bounds' table (test_readme_patch_bounds) */
        if (!in_table || strncmp(line, "| ", 2) != 0 || strncmp(line, "| key |", 7) == 0)
            continue;
        char *end = strchr(line + 2, '|');
        char *def_end = end ? strchr(end + 1, '|') : NULL;
        char *patch_end = def_end ? strchr(def_end + 1, '|') : NULL;
        CHECK_MSG(patch_end != NULL, "README's configuration row \"%.60s\" has no PATCH column",
                  line);
        if (!patch_end)
            continue;
        *end = *patch_end = '\0';
        char *patch = def_end + 1;
        while (*patch == ' ')
            patch++;
        int want_runtime = strncmp(patch, "yes", 3) == 0;
        CHECK_MSG(want_runtime || strncmp(patch, "no", 2) == 0,
                  "README's PATCH column says \"%s\", not yes or no", patch);
        char *save = NULL;
        for (char *k = strtok_r(line + 2, "/", &save); k; k = strtok_r(NULL, "/", &save)) {
            while (*k == ' ')
                k++;
            size_t n = strlen(k);
            while (n && k[n - 1] == ' ')
                k[--n] = '\0';
            CHECK_MSG(config_key_exists(k), "README's configuration table names \"%s\", "
                      "which is no key", k);
            CHECK_MSG(!config_key_exists(k) || config_key_is_runtime(k) == want_runtime,
                      "README says %s %s be changed by PATCH /config; the key table says "
                      "otherwise", k, want_runtime ? "can" : "cannot");
            seen_add(names, sizeof(names), k);
        }
        rows++;
    }
    fclose(f);
    CHECK_MSG(rows > 0, "no configuration table found in README.md");
    const char *name;
    char type;
    double min, max;
    int runtime;
    for (size_t i = 0; config_key_info(i, &name, &type, &min, &max, &runtime) == 0; i++)
        CHECK_MSG(seen_has(names, name), "key %s has no row in README's configuration table",
                  name);
}

/* "16 MiB", "2^53", "0.5", "604800": a number of README's PATCH table; 0 when it is none. */
static int readme_number(const char *s, double *out)
{
    char *end;
    if (strncmp(s, "2^53", 4) == 0) {
        *out = 9007199254740992.0;
        return 1;
    }
    *out = strtod(s, &end);
    if (end == s)
        return 0;
    while (*end == ' ')
        end++;
    if (strncmp(end, "KiB", 3) == 0)
        *out *= 1024;
    else if (strncmp(end, "MiB", 3) == 0)
        *out *= 1024 * 1024;
    else if (strncmp(end, "GiB", 3) == 0)
        *out *= 1024.0 * 1024 * 1024;
    return 1;
}

/* README's "PATCH key | may be set to" table says what the key table lets PATCH set:
 * every runtime key has a row, "[0, or ]LO to HI" with the same bounds. */
static void test_readme_patch_bounds(void)
{
    FILE *f = open_source("README.md");
    if (!f)
        return;
    char line[2048], seen[4096] = "|";
    int in_table = 0, rows = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "| PATCH key |", 13) == 0) {
            in_table = 1;
            continue;
        }
        if (!in_table || strncmp(line, "|---", 4) == 0)
            continue;
        if (strncmp(line, "| ", 2) != 0)
            break;
        char *key = line + 2, *end = strchr(key, '|');
        char *cell = end ? end + 1 : NULL, *cell_end = cell ? strchr(cell, '|') : NULL;
        if (!cell_end)
            continue;
        *end = *cell_end = '\0';
        for (size_t n = strlen(key); n && key[n - 1] == ' ';)
            key[--n] = '\0';
        while (*cell == ' ')
            cell++;
        int zero = strncmp(cell, "0, or ", 6) == 0;
        const char *lo_s = zero ? cell + 6 : cell, *to = strstr(lo_s, " to ");
        double lo = -1, hi = -1;
        CHECK_MSG(to && readme_number(lo_s, &lo) && readme_number(to + 4, &hi),
                  "README's PATCH row %s: \"%s\" is not [0, or ]LO to HI", key, cell);
        const char *name;
        char type;
        double min, max, want_lo, want_hi;
        int runtime, want_zero, found = 0;
        for (size_t i = 0; config_key_info(i, &name, &type, &min, &max, &runtime) == 0; i++) {
            if (strcmp(name, key) != 0)
                continue;
            found = 1;
            CHECK_MSG(config_key_patch_range(i, &want_lo, &want_hi, &want_zero) == 0,
                      "README's PATCH table names %s, which PATCH cannot change", key);
            CHECK_MSG(lo == want_lo && hi == want_hi && zero == want_zero,
                      "README: %s may be set to %s%g to %g; the key table says %s%.17g to %.17g",
                      key, zero ? "0, or " : "", lo, hi, want_zero ? "0, or " : "", want_lo,
                      want_hi);
        }
        CHECK_MSG(found, "README's PATCH table names %s, which is no key", key);
        seen_add(seen, sizeof(seen), key);
        rows++;
    }
    fclose(f);
    CHECK_MSG(rows > 0, "no PATCH table in README.md");
    const char *name;
    char type;
    double min, max, lo, hi;
    int runtime, zero;
    for (size_t i = 0; config_key_info(i, &name, &type, &min, &max, &runtime) == 0; i++)
        if (config_key_patch_range(i, &lo, &hi, &zero) == 0)
            CHECK_MSG(seen_has(seen, name), "runtime key %s has no row in README's PATCH table",
                      name);
}

/* openapi.yaml's ConfigPatchKeys give each runtime key the bounds PATCH enforces:
 * minimum (0 when 0 is allowed too) and maximum, and for "0, or LO to HI" an anyOf of
 * `enum: [0]` and `minimum: LO` (what JSON Schema can say of it). */
static void test_openapi_patch_bounds(void)
{
    FILE *f = open_source("openapi.yaml");
    if (!f)
        return;
    char line[512], key[96] = "";
    int in = 0, checked = 0;
    double mins[128], maxs[128], anyof_mins[128];
    int zeros[128];
    char names[128][64];
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "    ConfigPatchKeys:", 20) == 0) {
            in = 1;
            continue;
        }
        if (!in)
            continue;
        if (strncmp(line, "    ", 4) == 0 && line[4] != ' ')
            break; /* the next schema */
        if (strncmp(line, "        ", 8) == 0 && line[8] != ' ' && strchr(line, ':') && n < 128) {
            snprintf(key, sizeof(key), "%.*s", (int)(strchr(line, ':') - line - 8), line + 8);
            int w = snprintf(names[n], sizeof(names[n]), "%s", key);
            CHECK_MSG(w >= 0 && w < (int)sizeof(names[n]), "openapi.yaml: key %s is too long", key);
            mins[n] = maxs[n] = anyof_mins[n] = NAN;
            zeros[n] = 0;
            n++;
        } else if (n > 0 && strncmp(line, "          minimum: ", 19) == 0) {
            mins[n - 1] = strtod(line + 19, NULL);
        } else if (n > 0 && strncmp(line, "          maximum: ", 19) == 0) {
            maxs[n - 1] = strtod(line + 19, NULL);
        } else if (n > 0 && strncmp(line, "            - enum: [0]", 23) == 0) {
            zeros[n - 1] = 1;
        } else if (n > 0 && strncmp(line, "            - minimum: ", 23) == 0) {
            anyof_mins[n - 1] = strtod(line + 23, NULL);
        }
    }
    fclose(f);
    const char *name;
    char type;
    double min, max, lo, hi;
    int runtime, zero;
    for (size_t i = 0; config_key_info(i, &name, &type, &min, &max, &runtime) == 0; i++) {
        if (config_key_patch_range(i, &lo, &hi, &zero) != 0)
            continue;
        int j = 0;
        while (j < n && strcmp(names[j], name) != 0)
            j++;
        CHECK_MSG(j < n, "openapi.yaml's ConfigPatchKeys has no %s", name);
        if (j == n)
            continue;
        double want_min = zero ? 0 : lo;
        CHECK_MSG(mins[j] == want_min, "openapi.yaml: %s minimum %g, PATCH allows from %.17g",
                  name, mins[j], want_min);
        CHECK_MSG(maxs[j] == hi, "openapi.yaml: %s maximum %g, PATCH allows up to %.17g", name,
                  maxs[j], hi);
        CHECK_MSG(zeros[j] == (zero && lo > 0), "openapi.yaml: %s %s an anyOf of 0 or from %g",
                  name, zeros[j] ? "has" : "lacks", lo);
        if (zero && lo > 0)
            CHECK_MSG(anyof_mins[j] == lo, "openapi.yaml: %s anyOf minimum %g, PATCH allows "
                      "0 or from %.17g", name, anyof_mins[j], lo);
        checked++;
    }
    CHECK(checked >= 20);
}

/* Floors and ceilings PATCH enforces (issue 24): the values of the audit are refused. */
static void test_patch_cannot_hurt(void)
{
    struct mt_config cfg, next;
    char *err = NULL;
    config_defaults(&cfg);
    CHECK_EQ_INT(config_patch(&cfg, "{\"MemoryLimitBytes\": 1}", &err), -EINVAL);
    CHECK_CONTAINS(err, "MemoryLimitBytes");
    CHECK_CONTAINS(err, "16777216");
    free(err);
    CHECK_EQ_INT(config_patch(&cfg, "{\"MemoryLimitBytes\": 0}", &err), 0); /* auto */
    CHECK_EQ_INT(config_patch(&cfg, "{\"MemoryLimitBytes\": null}", &err), 0);
    CHECK_EQ_INT(config_patch(&cfg, "{\"PressureRatio\": 0.2}", &err), -EINVAL);
    free(err);
    CHECK_EQ_INT(config_patch(&cfg, "{\"TrimBudgetPercent\": 100}", &err), -EINVAL);
    free(err);
    CHECK_EQ_INT(config_patch(&cfg, "{\"TrimMinReleasableBytes\": 0}", &err), -EINVAL);
    free(err);
    /* the audit's 2 GiB tunables: above glibc's own bounds, at start too */
    CHECK_EQ_INT(config_patch(&cfg, "{\"MallocTrimThresholdBytes\": 2147483647}", &err),
                 -EINVAL);
    CHECK_CONTAINS(err, "out of range");
    free(err);
    CHECK_EQ_INT(config_parse("{\"MallocTopPadBytes\": 2147483647}", &cfg, &err), -EINVAL);
    free(err);
    /* raised thresholds need periodic trims, at start and through PATCH */
    CHECK_EQ_INT(config_parse("{\"MallocTrimThresholdBytes\": 33554432, "
                              "\"TrimIntervalSeconds\": 0}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "TrimIntervalSeconds between 1 and 300");
    free(err);
    CHECK_EQ_INT(config_parse("{\"MallocTopPadBytes\": 33554432}", &cfg, &err), 0);
    CHECK_EQ_INT(config_patch(&cfg, "{\"TrimIntervalSeconds\": 0}", &err), -EINVAL);
    CHECK_CONTAINS(err, "MallocTopPadBytes");
    free(err);
    CHECK_EQ_INT(config_patch(&cfg, "{\"TrimIntervalSeconds\": 3600}", &err), -EINVAL);
    free(err);
    config_defaults(&cfg);
    CHECK_EQ_INT(config_patch(&cfg, "{\"TrimIntervalSeconds\": 0, "
                              "\"MallocTrimThresholdBytes\": 131072}", &err), 0);
    /* the process-dependent floor: twice the peak RSS */
    config_defaults(&cfg);
    next = cfg;
    next.memory_limit_bytes = 300 << 20;
    CHECK_EQ_INT(config_patch_limit_check(&cfg, &next, 200 << 20, 0, &err), -EINVAL);
    CHECK_CONTAINS(err, "twice this process's peak RSS");
    free(err);
    CHECK_EQ_INT(config_patch_limit_check(&cfg, &next, 150 << 20, 0, &err), 0);
    next.memory_limit_bytes = 0; /* auto: the cgroup's */
    CHECK_EQ_INT(config_patch_limit_check(&cfg, &next, 200 << 20, 0, &err), 0);
}

int main(void)
{
    RUN(test_readme_table);
    RUN(test_readme_patch_bounds);
    RUN(test_openapi_patch_bounds);
    RUN(test_patch_cannot_hurt);
    RUN(test_defaults);
    RUN(test_section_or_root);
    RUN(test_every_key);
    RUN(test_typos);
    RUN(test_special_values);
    RUN(test_program);
    RUN(test_patch);
    RUN(test_to_json_redacts);
    RUN(test_tokens_printable);
    RUN(test_top_comments_state_threads_and_locks);
    return harness_end();
}
