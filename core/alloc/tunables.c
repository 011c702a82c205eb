/*
 * tunables.c - glibc malloc tunables applied with mallopt(3). Unset keys are
 * never passed to mallopt: glibc's own behaviour (notably its dynamic mmap
 * threshold, which any of M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_TOP_PAD
 * switches off) stays untouched. MallocArenaMax is start-only: glibc fixes
 * its arena limit the first time it needs more arenas than arena_test and
 * never frees an arena, so a later change is not honoured (docs/advice.md, measured).
 * Locking: tun_lock guards `in_force` and serialises the mallopt calls;
 * it is a leaf lock, taken by the starting thread and by PATCH /config (the
 * log limiter's lock and the log's are taken under it). PATCH calls it under
 * the instance's patch_lock, never under its cfg_lock: mallopt waits for
 * glibc's main arena lock, and no reader of the configuration may wait too.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "mt_alloc.h"
#include "common.h"
#include "tunables.h"

struct tunable {
    const char *key, *field, *env;
    int param;
    size_t offset;
};

#define OFF(f) offsetof(struct mt_config, f)

static const struct tunable table[MT_TUNABLE_COUNT] = {
    [MT_TUNABLE_MMAP_THRESHOLD] = {"MallocMmapThresholdBytes", "mmap_threshold_bytes",
                                   "MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD,
                                   OFF(malloc_mmap_threshold_bytes)},
    [MT_TUNABLE_ARENA_MAX] = {"MallocArenaMax", "arena_max", "MALLOC_ARENA_MAX", M_ARENA_MAX,
                              OFF(malloc_arena_max)},
    [MT_TUNABLE_TRIM_THRESHOLD] = {"MallocTrimThresholdBytes", "trim_threshold_bytes",
                                   "MALLOC_TRIM_THRESHOLD_", M_TRIM_THRESHOLD,
                                   OFF(malloc_trim_threshold_bytes)},
    [MT_TUNABLE_TOP_PAD] = {"MallocTopPadBytes", "top_pad_bytes", "MALLOC_TOP_PAD_", M_TOP_PAD,
                            OFF(malloc_top_pad_bytes)},
};

static pthread_mutex_t tun_lock = PTHREAD_MUTEX_INITIALIZER;
/* The lines PATCH /config causes: one per 10 s, the rest counted (process-wide, as the
 * tunables are; its own lock, taken under tun_lock). */
static struct mt_log_limit tun_log = MT_LOG_LIMIT_INIT(10 * MT_SEC, 1);
static struct mt_tunables in_force = {{-1, -1, -1, -1}, 1, 0, 0, ""}; /* guarded by tun_lock */

const char *tunables_key(int t)
{
    return t >= 0 && t < MT_TUNABLE_COUNT ? table[t].key : "?";
}

const char *tunables_field(int t)
{
    return t >= 0 && t < MT_TUNABLE_COUNT ? table[t].field : "?";
}

const char *tunables_env(int t)
{
    return t >= 0 && t < MT_TUNABLE_COUNT ? table[t].env : "?";
}

int64_t tunables_value(const struct mt_config *cfg, int t)
{
    if (t < 0 || t >= MT_TUNABLE_COUNT)
        return -1;
    return *(const int64_t *)((const char *)cfg + table[t].offset);
}

static char *errf(const char *key, const char *why, long long v)
{
    char buf[400];
    snprintf(buf, sizeof(buf), "configuration key %s: %s (%lld)", key, why, v);
    return mt_strdup(buf);
}

int tunables_apply(const struct mt_config *old, const struct mt_config *cfg, int glibc, char **err)
{
    int rc = 0;

    *err = NULL;
    pthread_mutex_lock(&tun_lock);
    in_force.glibc = glibc;
    for (int t = 0; old && t < MT_TUNABLE_COUNT && rc == 0; t++) /* validate first */
        if (tunables_value(cfg, t) < 0 && tunables_value(old, t) >= 0) {
            *err = errf(table[t].key,
                        "cannot be unset at run time: glibc's own (dynamic) "
                        "behaviour does not come back; restart without it or "
                        "give a value; in force",
                        (long long)tunables_value(old, t));
            rc = -EINVAL;
        }
    for (int t = 0; t < MT_TUNABLE_COUNT && rc == 0; t++) {
        int64_t v = tunables_value(cfg, t), was = old ? tunables_value(old, t) : -1;
        if (v < 0 || (old && v == was))
            continue;
        if (!glibc) {
            if (old)
                mt_log_limited(&tun_log, MT_LOG_WARNING, "tunables",
                               "%s is set but glibc does not serve malloc in this process: not "
                               "applied", table[t].key);
            else
                mt_log(MT_LOG_WARNING, "tunables",
                       "%s is set but glibc does not serve malloc in this process: not applied",
                       table[t].key);
            continue;
        }
        if (v > 2147483647 || mallopt(table[t].param, (int)v) != 1) {
            *err = errf(table[t].key, "glibc's mallopt refused this value", (long long)v);
            rc = -EINVAL;
            break;
        }
        in_force.value[t] = v;
        if (old) /* PATCH /config: a client's loop must not flood the log */
            mt_log_limited(&tun_log, MT_LOG_INFO, "tunables", "%s = %lld applied with mallopt",
                           table[t].key, (long long)v);
        else
            mt_log(MT_LOG_INFO, "tunables", "%s = %lld applied with mallopt", table[t].key,
                   (long long)v);
    }
    pthread_mutex_unlock(&tun_lock);
    return rc;
}

void tunables_set_auto(double cpus, const char *source)
{
    pthread_mutex_lock(&tun_lock);
    in_force.arena_auto = 1;
    in_force.arena_auto_cpus = cpus;
    snprintf(in_force.arena_auto_source, sizeof(in_force.arena_auto_source), "%.255s", source);
    pthread_mutex_unlock(&tun_lock);
}

void tunables_get(struct mt_tunables *out)
{
    pthread_mutex_lock(&tun_lock);
    *out = in_force;
    pthread_mutex_unlock(&tun_lock);
}
