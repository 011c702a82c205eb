/*
 * test_alloc_table.c - the allocator table (common/alloc_table) is the one list of allocators:
 * every row has its back end (core/alloc) and its fields; the Allocator setting's choices, and
 * openapi.yaml's two enums of allocator names, are the table's names in its order; the
 * dashboard keeps no list of its own (it shows /memory/stats' allocator.stats_call).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "alloc_table.h"
#include "config.h"
#include "harness.h"

/* A file of the source tree read whole (caller frees), or NULL (a failed check). */
static char *read_source(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", MEMTRIM_SOURCE_DIR, name);
    FILE *f = fopen(path, "re");
    CHECK_MSG(f != NULL, "cannot open %s", name);
    if (!f)
        return NULL;
    size_t cap = 1 << 20, n;
    char *buf = malloc(cap + 1);
    n = buf ? fread(buf, 1, cap, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

static void test_every_row_has_its_back_end(void)
{
    int libc = 0;
    for (int i = 0; i < MT_ALLOC_COUNT; i++) {
        const struct mt_alloc_row *r = &mt_alloc_table[i];
        const struct alloc_ops *a = alloc_by_name(r->name);
        CHECK_MSG(a != NULL, "row %s has no back end", r->name);
        if (!a)
            continue;
        CHECK_MSG((int)a->id == i, "%s's back end names row %d", r->name, (int)a->id);
        CHECK(strcmp(alloc_name(a), r->name) == 0 && mt_alloc_row(r->name) == r);
        CHECK_MSG(r->maps_prefix && r->maps_prefix[0] && r->release_sym && r->release_call &&
                  r->release_result && r->stats_call, "row %s lacks a field", r->name);
        CHECK_MSG(r->release_arg != MT_ALLOC_ARG_STRING || (r->release_str && r->release_str[0]),
                  "row %s: a string argument without its string", r->name);
        libc += r->libc;
    }
    CHECK_EQ_INT(libc, 1); /* the command needs the one C library whatever serves malloc */
    CHECK(mt_alloc_row("nope") == NULL && mt_alloc_row(NULL) == NULL);
}

/* "auto|glibc|...": the table's names in its order, as the configuration key takes them. */
static void test_the_setting_takes_the_table_names(void)
{
    char want[256] = "auto";
    for (int i = 0; i < MT_ALLOC_COUNT; i++) {
        strcat(want, "|");
        strcat(want, mt_alloc_table[i].name);
    }
    struct mt_config cfg;
    char *err = NULL;
    CHECK_EQ_INT(config_parse("{\"Allocator\": \"nope\"}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, want);
    free(err);
    for (int i = 0; i < MT_ALLOC_COUNT; i++) {
        char json[128];
        snprintf(json, sizeof(json), "{\"Allocator\": \"%s\"}", mt_alloc_table[i].name);
        err = NULL;
        CHECK_MSG(config_parse(json, &cfg, &err) == 0, "Allocator %s refused: %s",
                  mt_alloc_table[i].name, err ? err : "");
        free(err);
    }
}

/* Each "enum: [...]" line of openapi.yaml that names glibc lists exactly the table's names
 * (after "auto" for the setting), in its order; there are two (allocator.name, Allocator). */
static void test_openapi_enums_are_the_table(void)
{
    char *yaml = read_source("openapi.yaml");
    if (!yaml)
        return;
    /* Control eng-alloc-enum-drift (tests/controls.txt): a hand-kept enum one row behind,
     * as openapi.yaml's would be after a row is added without it. */
    const char *control = getenv("MEMTRIM_CONTROL");
    char *drop = control && strcmp(control, "eng-alloc-enum-drift") == 0 ? strstr(yaml, ", mimalloc]")
                                                                         : NULL;
    if (drop)
        memmove(drop, drop + strlen(", mimalloc"), strlen(drop + strlen(", mimalloc")) + 1);
    char want[256] = "", want_auto[256] = "auto";
    for (int i = 0; i < MT_ALLOC_COUNT; i++) {
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%s", i ? ", " : "",
                 mt_alloc_table[i].name);
        snprintf(want_auto + strlen(want_auto), sizeof(want_auto) - strlen(want_auto), ", %s",
                 mt_alloc_table[i].name);
    }
    int enums = 0;
    for (char *line = strtok(yaml, "\n"); line; line = strtok(NULL, "\n")) {
        char *e = strstr(line, "enum: [");
        if (!e || !strstr(e, "glibc"))
            continue;
        e += strlen("enum: [");
        char *end = strchr(e, ']');
        CHECK_MSG(end != NULL, "an enum of allocators on more than one line: %s", line);
        if (!end)
            continue;
        *end = '\0';
        CHECK_MSG(strcmp(e, want) == 0 || strcmp(e, want_auto) == 0,
                  "openapi.yaml's enum [%s] is not the allocator table's [%s]", e, want);
        enums++;
    }
    CHECK_EQ_INT(enums, 2);
    free(yaml);
}

/* The dashboard names no allocator: its stats call comes from the API (the table's row). */
static void test_the_dashboard_keeps_no_list(void)
{
    char *html = read_source("api/dashboard.html");
    if (!html)
        return;
    CHECK(strstr(html, "allocator.stats_call") != NULL);
    for (int i = 0; i < MT_ALLOC_COUNT; i++) {
        char key[64];
        snprintf(key, sizeof(key), "%s:", mt_alloc_table[i].name);
        CHECK_MSG(strstr(html, key) == NULL, "dashboard.html maps %s itself", key);
        snprintf(key, sizeof(key), "'%s'", mt_alloc_table[i].stats_call);
        CHECK_MSG(strstr(html, key) == NULL, "dashboard.html names %s's stats call itself",
                  mt_alloc_table[i].name);
    }
    free(html);
}

int main(void)
{
    RUN(test_every_row_has_its_back_end);
    RUN(test_the_setting_takes_the_table_names);
    RUN(test_openapi_enums_are_the_table);
    RUN(test_the_dashboard_keeps_no_list);
    return harness_end();
}
