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
    /* the CPUs the container allows (its CPU quota, the affinity mask: cpuquota.c) */
    int host_cores;         /* online cores of the host: glibc's arena cap is 8 per core */
    double quota_cpus;      /* 0 unknown */
    int64_t auto_arena_max; /* what "MallocArenaMax": "auto" would set; 0 unknown */
    char quota_source[256]; /* the file that set quota_cpus, or the affinity mask */
};

/*
 * Run every rule. Fills up to max findings, most severe first (rule order
 * breaks ties), and returns how many. Never fails.
 */
int doctor_run(const struct doctor_input *in, struct doctor_finding *out, int max);

/* "info", "warning", "critical" (enum doctor_severity, common/types.h) */
const char *doctor_severity_name(int severity);

/* The findings as plain text for a terminal (caller frees); NULL on OOM. */
char *doctor_text(const struct doctor_finding *f, int n);

#endif /* MEMTRIM_DOCTOR_H */
