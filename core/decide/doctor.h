/*
 * doctor.h - memtrim's advice: rules that read what memtrim measured (the
 * snapshot, the counters, recent trims, the per-arena view) and say what an
 * operator should change, each finding with its evidence, a severity and a
 * concrete recommendation. doctor_run is a pure function of its input (the
 * unit tests feed it synthetic histories); advice.c gathers the real input.
 * No state, no locks.
 */
#ifndef MEMTRIM_DOCTOR_H
#define MEMTRIM_DOCTOR_H

#include <stdint.h>
#include "config.h"
#include "types.h"

enum doctor_severity { DOCTOR_INFO = 0, DOCTOR_WARNING, DOCTOR_CRITICAL };

/* One trim as the rules see it (oldest first in doctor_input.trims). */
struct doctor_trim {
    int trigger; /* enum mt_trigger */
    int64_t start_ms;
    int64_t duration_ns;
    int64_t released_bytes;
    uint64_t rss_before_bytes, rss_after_bytes;
};

struct doctor_input {
    int64_t now_ms;
    int64_t uptime_ms;
    int ncpu;
    int glibc;                       /* glibc serves malloc (tunables and arenas apply) */
    struct mt_config cfg;            /* in force */
    struct mt_snapshot snap;         /* the latest shared snapshot */
    struct mt_counters counters;     /* since start */
    const struct mt_arenas *arenas;  /* NULL when no per-arena view could be read */
    const struct doctor_trim *trims; /* recent trims, oldest first */
    int ntrims;
    uint64_t peak_rss_bytes;      /* VmHWM; 0 unknown */
    uint64_t reader_heap_wanted;  /* readers that wanted a fresher heap reading... */
    uint64_t reader_heap_refused; /* ...and were refused by the budget (incl. /memory/arenas) */
};

#define DOCTOR_EVIDENCE_MAX 8
#define DOCTOR_MAX_FINDINGS 8

struct doctor_finding {
    const char *id; /* "many_arenas", ... (static) */
    int severity;   /* enum doctor_severity */
    char title[160];
    char detail[512]; /* what it means, with the expected effect */
    int nevidence;
    struct {
        const char *name; /* static, with its unit ("arena_count", "free_bytes") */
        double value;
    } evidence[DOCTOR_EVIDENCE_MAX];
    /* The recommendation: kind "config" (a MemoryTrim key), "env" (an
     * environment variable), "host" (outside memtrim, e.g. the cgroup's
     * memory.max) or "none" (nothing to change). */
    const char *kind;
    char key[48]; /* "" for none */
    double value; /* meaningful when has_value */
    int has_value;
    char action[320]; /* the recommendation as a sentence */
};

/*
 * Run every rule. Fills up to max findings, most severe first (rule order
 * breaks ties), and returns how many. Never fails.
 */
int doctor_run(const struct doctor_input *in, struct doctor_finding *out, int max);

const char *doctor_severity_name(int severity); /* "info", "warning", "critical" */

/* The findings as plain text for a terminal (caller frees); NULL on OOM. */
char *doctor_text(const struct doctor_finding *f, int n);

#endif /* MEMTRIM_DOCTOR_H */
