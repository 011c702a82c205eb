/*
 * advice.h - what the instance offers for advice: the per-arena view
 * (GET /memory/arenas), the doctor's findings (GET /memory/doctor) and the
 * exit summary. Any thread may call these while the instance runs; each
 * takes the locks it needs (see advice.c).
 */
#ifndef MEMTRIM_ADVICE_H
#define MEMTRIM_ADVICE_H

#include <stdint.h>
#include "arenas.h"
#include "doctor.h"

struct memtrim;

/*
 * The per-arena view: the cached reading when it is at most max_age_ms old
 * (< 0: StatsMaxAgeMs), else a new malloc_info call if the probe budget allows. Returns 0
 * with *out (caller calls arenas_free; out->timestamp_ms says its age),
 * -EAGAIN when the budget says no (*retry_after_ms), -ENOTSUP when the
 * allocator serving malloc has no per-arena view (*err names it), or another
 * negative errno with *err (caller frees).
 */
int mt_arenas_get(struct memtrim *mt, int64_t max_age_ms, struct mt_arenas *out,
                  int64_t *retry_after_ms, char **err);

/* The doctor's findings now, most severe first; returns how many (<= max). */
int mt_doctor_run(struct memtrim *mt, struct doctor_finding *out, int max);

#endif /* MEMTRIM_ADVICE_H */
