/*
 * outside.h - the third kind of member of the one pressure decision (docs/agent.md): a
 * process reached from outside, the node agent's (agent/). The agent reads of it only what
 * /proc shows without entering it: its anonymous memory now and right after its last trim.
 * outside_candidate makes that a candidate of group_pressure_pick (decision.h), so a
 * node's cgroup is decided by the same rules as a worker group under its limit: the line
 * and the growth rules pick it, biggest growth since its last trim first; it holds no heap
 * estimate, so the estimate and ahead rules never do. Pure; any thread.
 */
#ifndef MEMTRIM_OUTSIDE_H
#define MEMTRIM_OUTSIDE_H

#include <stdint.h>

#include "decision.h"

struct outside_reading {
    uint64_t anon;            /* RssAnon now */
    uint64_t anon_after_trim; /* RssAnon right after its last trim, 0 before its first */
    int64_t last_trim_ns;     /* monotonic start of its last trim, 0 none */
    int busy;                 /* a trim of it in flight */
};

/* c as group_pressure_pick reads a process reached from outside. */
void outside_candidate(struct group_candidate *c, const struct outside_reading *r);

/* How long after a trim's start the decision may ask the same outside member again (the
 * group's retrim gap for a member that said nothing). An outside member never says what it
 * holds, so this gap alone paces its trims; each is bounded by the agent's CPU budget and
 * runs one at a time in its cgroup. 25 ms, about one trim's own length from outside (10-30
 * ms): the next may start as the last answers. At the group's 50 ms, puma in its burst in 300
 * MiB (1.5 MB more each millisecond) peaked at 222-300 MiB and was OOM-killed in 3 runs of 30;
 * at 25 ms, 228-271 MiB. */
int64_t outside_retrim_ns(void);

/* The cgroup's decision input: its usage against its aim (the lower of its limit and
 * memory.high), its low-water mark since its last trim, PressureRatio and the least a trim
 * must be expected to give back. */
void outside_input(struct group_pressure_in *in, int64_t now_ns, int64_t usage, int64_t base_usage,
                   int64_t aim, double ratio, uint64_t min_releasable);

/* Whether the cgroup is in the zone where the decision may pick (decision.h's floor:
 * the line, or half the aim if lower). */
int outside_in_zone(int64_t usage, int64_t aim, double ratio);

#endif /* MEMTRIM_OUTSIDE_H */
