/*
 * tunables.h - glibc's malloc tunables from the configuration
 * (MallocArenaMax, MallocMmapThresholdBytes, MallocTrimThresholdBytes,
 * MallocTopPadBytes), applied with mallopt at start and, for the three that
 * glibc honours once threads exist, on PATCH /config. Process-wide state (the
 * allocator is), guarded by one mutex in tunables.c; any thread may call.
 */
#ifndef MEMTRIM_TUNABLES_H
#define MEMTRIM_TUNABLES_H

#include <stdint.h>
#include "config.h"
#include "types.h" /* enum mt_tunable, struct mt_tunables */

/* The configuration key ("MallocArenaMax"), the /memory/stats name
 * ("arena_max"), and glibc's environment variable for the same setting. */
const char *tunables_key(int t);
const char *tunables_field(int t);
const char *tunables_env(int t);
/* The value of tunable t in a configuration (-1 unset). */
int64_t tunables_value(const struct mt_config *cfg, int t);

/*
 * Apply what cfg sets and old (NULL at start) did not set to the same value.
 * glibc = 0 (another allocator serves malloc): nothing is applied, a warning
 * says so. A value glibc refuses, or unsetting at run time what was set,
 * returns -EINVAL with *err (caller frees) naming the key; tunables applied
 * before it stay in force (the one glibc can refuse is applied first).
 */
int tunables_apply(const struct mt_config *old, const struct mt_config *cfg, int glibc, char **err);

/* What is in force now. */
void tunables_get(struct mt_tunables *out);

/* MallocArenaMax "auto" was resolved from cpus CPUs, as source says (the start). */
void tunables_set_auto(double cpus, const char *source);

#endif /* MEMTRIM_TUNABLES_H */
