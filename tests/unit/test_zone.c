/*
 * test_zone.c - one zone per instance, the pressure engine's (issue 38: there were three,
 * the pressure thread's, the instance's atomic group_zone, and the group's pz): its
 * thread's reading of this process and the set's (a leader's look at its members, or what
 * a member's leader told it), which the group's view and the housekeeper read.
 * Threads: the test's and the instance's; no lock of the test's own.
 */
#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "api.h"
#include "core.h"
#include "instance.h"
#include "pressure.h"
#include "start.h"

#define JSON "{\"MemoryTrim\": {\"HttpPort\": 0, \"Database\": \"\"}}"

static struct pressure_zone_view view(struct memtrim *mt)
{
    struct pressure_zone_view v;
    pressure_zone_view(mt->pressure, &v);
    return v;
}

/* The engine's zone: what the set's leader told, what a member heard, forgotten anew; the
 * process's own reading is the stats' zone. Every call takes NULL (no pressure path). */
static void test_the_engine_holds_the_zone(void)
{
    struct memtrim *mt = start(JSON);
    if (!mt)
        return;
    struct pressure_zone_view v = view(mt);
    CHECK(v.set == 0 && v.usage == -1 && v.limit == -1 && strcmp(v.usage_source, "none") == 0);
    pressure_told(mt->pressure, 1, 1, 0, 1 << 20, 10 * MT_MS, mt_mono_ns(), 1);
    CHECK_EQ_INT(pressure_set_zone(mt->pressure), 1);
    CHECK_EQ_INT(pressure_zone_heard(mt->pressure, 0), 1); /* a member's word: it was inside */
    CHECK_EQ_INT(pressure_set_zone(mt->pressure), 0);
    CHECK_EQ_INT(pressure_zone_heard(mt->pressure, 1), 0);
    pressure_zone_forget(mt->pressure);
    CHECK_EQ_INT(view(mt).set, 0);
    struct pressure_stats st;
    pressure_stats_get(mt->pressure, &st);
    CHECK_EQ_INT(st.zone, view(mt).own);

    struct pressure_zone_view none;
    pressure_zone_view(NULL, &none);
    CHECK(none.set == 0 && none.own == 0 && none.usage == -1);
    struct pressure_look lk;
    struct pressure_look_in li = {.now = mt_mono_ns(), .limit = 1 << 30, .usage = 1 << 29};
    pressure_look(NULL, &li, NULL, 0, NULL, &lk);
    CHECK_EQ_INT(lk.pick, -1);
    CHECK_EQ_INT(pressure_zone_heard(NULL, 1), 1);
    mt_destroy(mt);
}

/* A leader's group reads the engine's zone: its look writes the usage there, the group's
 * view (mt_group_info, /memory/stats, /metrics) shows the same, and a zone set in the
 * engine is the group's. */
static void test_a_group_reads_the_engines_zone(void)
{
    struct memtrim *mt = start(JSON);
    if (!mt)
        return;
    char *err = NULL;
    CHECK_EQ_INT(mt_group_lead(mt, &err), 0);
    free(err);
    WAIT_FOR(strcmp(view(mt).usage_source, "none") != 0, 10); /* the leader's first look */
    struct mt_group_info gi;
    struct mt_member m[MT_GROUP_MAX];
    int n = 0;
    CHECK_EQ_INT(mt_group_info(mt, &gi, m, MT_GROUP_MAX, &n), 0);
    struct pressure_zone_view v = view(mt);
    CHECK_MSG(strcmp(gi.usage_source, v.usage_source) == 0 && gi.limit_bytes == v.limit &&
                  gi.zone == v.set,
              "group %s %lld %d, engine %s %lld %d", gi.usage_source, (long long)gi.limit_bytes,
              gi.zone, v.usage_source, (long long)v.limit, v.set);
    pressure_told(mt->pressure, 1, 0, 0, 0, 0, mt_mono_ns(), 0);
    CHECK_EQ_INT(mt_group_info(mt, &gi, m, MT_GROUP_MAX, &n), 0);
    CHECK_EQ_INT(gi.zone, 1);
    mt_destroy(mt);
    /* a new instance's engine starts outside the zone */
}

/* No other room keeps a zone of its own: outside core/pressure no file declares a struct
 * pressure_zone (its view aside) or an atomic zone flag (main before this test held
 * group_int.h's pz and instance.h's group_zone). */
static void test_no_zone_outside_the_engine(void)
{
    static const char *const globs[] = {"core/*/*.[ch]", "api/*.[ch]", "plugin/*.[ch]",
                                        "agent/*.[ch]", "common/*.[ch]"};
    int files = 0;
    for (size_t i = 0; i < sizeof(globs) / sizeof(globs[0]); i++) {
        char pattern[512], line[1024];
        glob_t g;
        snprintf(pattern, sizeof(pattern), "%s/%s", MEMTRIM_SOURCE_DIR, globs[i]);
        if (glob(pattern, 0, NULL, &g) != 0)
            continue;
        for (size_t k = 0; k < g.gl_pathc; k++) {
            const char *name = g.gl_pathv[k] + strlen(MEMTRIM_SOURCE_DIR) + 1;
            if (strncmp(name, "core/pressure/", 14) == 0)
                continue;
            FILE *f = fopen(g.gl_pathv[k], "re");
            if (!f)
                continue;
            files++;
            for (int ln = 1; fgets(line, sizeof(line), f); ln++) {
                char *s = strstr(line, "struct pressure_zone");
                int other = s && strncmp(s, "struct pressure_zone_", 20) == 0;
                int decl = s && !other && !strchr(line, '(') && !strstr(line, "/*");
                CHECK_MSG(!decl, "%s:%d keeps a zone of its own: %s", name, ln, line);
                CHECK_MSG(!(strstr(line, "atomic_int") && strstr(line, "zone")),
                          "%s:%d keeps a zone flag of its own: %s", name, ln, line);
            }
            fclose(f);
        }
        globfree(&g);
    }
    CHECK_MSG(files > 50, "only %d files read", files);
}

int main(void)
{
    RUN(test_no_zone_outside_the_engine);
    RUN(test_the_engine_holds_the_zone);
    RUN(test_a_group_reads_the_engines_zone);
    return harness_end();
}
