/*
 * types.h - the plain data that crosses module boundaries: probe readings,
 * trim results and the counters. No locks: whoever holds one of these owns a
 * copy. In common/ so that every folder may use them (db/ stores them, core/
 * fills them, api/ prints them) without depending on the engine.
 */
#ifndef MEMTRIM_TYPES_H
#define MEMTRIM_TYPES_H

#include <stdint.h>
#include <stddef.h>

/* What set a cgroup limit (mt_cheap.cgroup_limit_kind). */
enum mt_cg_limit {
    MT_CG_LIMIT_NONE = 0,
    MT_CG_LIMIT_MAX,      /* v2 memory.max */
    MT_CG_LIMIT_HIGH,     /* v2 memory.high (the kernel throttles above it) */
    MT_CG_LIMIT_V1,       /* v1 memory.limit_in_bytes */
    MT_CG_LIMIT_V1_HIER,  /* v1 memory.stat hierarchical_memory_limit (set above the mount) */
};
/* memory.events counters (v1: max is memory.failcnt, oom_kill memory.oom_control's). */
enum mt_cg_event { MT_CG_EV_HIGH = 0, MT_CG_EV_MAX, MT_CG_EV_OOM, MT_CG_EV_OOM_KILL, MT_CG_EVENTS };

/* The cheap part of a probe: /proc/self/{statm,status,stat} and the cgroup files. */
struct mt_cheap {
    int64_t timestamp_ms; /* wall clock, ms since the epoch; 0 = never taken */
    uint64_t rss_bytes;
    uint64_t rss_anon_bytes;
    uint64_t rss_file_bytes;
    uint64_t rss_shmem_bytes;
    uint64_t swap_bytes;
    uint64_t vm_size_bytes;
    uint64_t rss_peak_bytes; /* VmHWM: the kernel's high-water mark of RSS */
    uint64_t minor_faults;
    uint64_t major_faults;
    int64_t cgroup_usage_bytes; /* -1 unknown */
    int64_t cgroup_limit_bytes; /* -1 no limit or unknown */
    int cgroup_version;         /* 0 none found, 1 or 2 */
    /* The cgroup in detail (cgroup.c). Levels count up from the process's own
     * cgroup (0) to its ancestors (1 the parent, ...); -1 none. */
    int64_t cgroup_max_bytes;   /* lowest memory.max (v1 memory.limit_in_bytes); -1 none */
    int64_t cgroup_high_bytes;  /* lowest memory.high (v2); -1 none */
    int cgroup_max_level, cgroup_high_level;
    int cgroup_limit_kind;      /* enum mt_cg_limit: what set cgroup_limit_bytes */
    int cgroup_limit_level;     /* whose file; cgroup_usage_bytes is that cgroup's */
    int64_t cgroup_anon_bytes;  /* memory.stat anon (v1 total_rss); -1 unknown */
    int64_t cgroup_file_bytes;  /* memory.stat file, page cache with shmem (v1 total_cache) */
    int64_t cgroup_shmem_bytes; /* memory.stat shmem (v1 total_shmem) */
    int64_t cgroup_events[4];   /* enum mt_cg_event: memory.events counters; -1 unknown */
    int cgroup_events_level;
    int64_t duration_ns;        /* what this reading cost */
    int read_errno;             /* 0, or why /proc could not be read (negative errno):
                                 * the fields above are then not to be believed */
};

#define MT_ALLOC_FIGURES 16
/* Which common heap fields mean something under the allocator that took the reading. */
#define MT_HEAP_HAS_IN_USE 0x01    /* heap_in_use_bytes */
#define MT_HEAP_HAS_FREE 0x02      /* heap_free_bytes: free memory held (what a release works on) */
#define MT_HEAP_HAS_MAPPED 0x04    /* heap_mapped_bytes */
#define MT_HEAP_HAS_RESIDENT 0x08  /* heap_resident_bytes */
#define MT_HEAP_HAS_RETAINED 0x10  /* heap_retained_bytes */
#define MT_HEAP_HAS_MALLINFO 0x20  /* the raw mallinfo2 fields (glibc) */
#define MT_HEAP_HAS_DECAY 0x40     /* decay_ms: the allocator returns free pages by itself */

/* The costly part: the allocator's stats (glibc: mallinfo2(), which locks every
 * arena and walks its free lists; jemalloc: an epoch refresh, which walks arenas). */
struct mt_heap {
    int64_t timestamp_ms; /* 0 = never taken */
    uint64_t arena_bytes;    /* mallinfo2.arena: non-mmapped space from the system */
    uint64_t ordblks;        /* free chunks */
    uint64_t smblks;         /* free fastbin chunks */
    uint64_t hblks;          /* mmapped regions */
    uint64_t hblkhd;         /* bytes in mmapped regions */
    uint64_t fsmblks;        /* bytes in free fastbin chunks */
    uint64_t uordblks;       /* bytes in use (non-mmapped) */
    uint64_t fordblks;       /* bytes free (non-mmapped) */
    uint64_t keepcost;       /* top-most releasable chunk of the main arena */
    uint64_t heap_in_use_bytes; /* uordblks + hblkhd */
    uint64_t heap_free_bytes;   /* fordblks */
    uint64_t heap_mmapped_bytes; /* hblkhd */
    int arena_count;             /* -1 unknown */
    int64_t duration_ns;         /* how long the stats call took (wall clock) */
    int64_t cpu_ns;              /* its cost: this thread's CPU time inside it; lock waits
                                  * (other threads in malloc) are not cost to the host */
    int64_t process_cpu_ns;      /* the process's CPU time when taken (-1 unknown) */
    /* Allocator back ends (core/alloc/alloc.h): which one took the reading, which of
     * the common fields mean something under it, and its own figures. */
    const char *allocator;          /* static name, "glibc", ...; NULL before a reading */
    unsigned known;                 /* MT_HEAP_HAS_* */
    uint64_t heap_mapped_bytes;     /* what the allocator holds from the system */
    uint64_t heap_resident_bytes;   /* of which resident, when the allocator knows */
    uint64_t heap_retained_bytes;   /* address space kept but given back (not resident) */
    uint64_t decay_ms;              /* MT_HEAP_HAS_DECAY: it returns free pages within this by
                                     * itself, whether the host allocates or not (jemalloc's
                                     * background threads: dirty_decay_ms + muzzy_decay_ms) */
    int nfigures;
    struct mt_alloc_figure {
        const char *name; /* static */
        uint64_t value;
    } figures[MT_ALLOC_FIGURES];
};

/* What memtrim saved (core/measure/saved.c): the RSS the host would have without it. */
struct mt_saved {
    uint64_t rss_without_memtrim_bytes;      /* RSS + saved_bytes: never below RSS */
    uint64_t saved_bytes;                    /* released by trims and not come back */
    uint64_t rss_peak_bytes;                 /* the highest RSS (VmHWM) */
    uint64_t rss_without_memtrim_peak_bytes; /* the highest counterfactual */
    double saved_byte_seconds_total;         /* saved_bytes integrated over time */
};

/* What /memory/stats shows and what a stored sample holds. */
struct mt_snapshot {
    struct mt_cheap cheap;
    struct mt_heap heap;
    double fragmentation_ratio;       /* rss / heap in use; 0 when unknown */
    uint64_t releasable_estimate_bytes; /* free heap that a trim could return */
    int64_t memory_limit_bytes;       /* effective limit: config or cgroup; -1 none */
    int64_t heap_age_ms;              /* age of the heap part when read */
    int64_t cheap_age_ms;             /* age of the cheap part when read */
    int64_t rss_age_ms;               /* of its RSS figures (rss_now: 0, read at the call) */
    int64_t arena_count_age_ms;       /* of heap.arena_count (counted every few probes); -1 */
    struct mt_saved saved;            /* the counterfactual at this reading */
    const char *allocator;            /* the back end in use (static name) */
    const char *allocator_release;    /* its release call (static text) */
    char allocator_version[48];
    int pid;                          /* worker groups: the member this sample is of; 0 = this
                                       * process, or the whole group in the leader's store */
};

enum mt_trigger {
    MT_TRIGGER_MANUAL = 0,
    MT_TRIGGER_PERIODIC,
    MT_TRIGGER_PRESSURE,
    MT_TRIGGER_BURST, /* releasable estimate passed TrimReleasableTriggerBytes */
    MT_TRIGGER_COUNT
};

enum mt_skip_reason {
    MT_SKIP_BELOW_MIN_RELEASABLE = 0, /* periodic: estimate < TrimMinReleasableBytes */
    MT_SKIP_SUSPENDED,                /* periodic/pressure while suspended */
    MT_SKIP_BUSY,                     /* another trim was running */
    MT_SKIP_NO_HEAP_STATS,            /* estimate unavailable (probe budget) */
    MT_SKIP_HOST_BUSY,                /* periodic/burst deferred: the host's CPU share was high */
    MT_SKIP_BUDGET,                   /* periodic/burst: TrimBudgetPercent used up */
    MT_SKIP_STAGGER,                  /* a group member's own trim outside its slot (trim.c) */
    MT_SKIP_COUNT
};

/* One measured malloc_trim. */
/* Trim ids are in [1, MT_TRIM_ID_MAX]: 2^53 - 1, the largest a JSON client reads exactly,
 * and far from int64_t's end, so the next id never overflows (ids from the clock in ms
 * reach it in 285,000 years). A member's or a stored id past it is not believed. */
#define MT_TRIM_ID_MAX ((INT64_C(1) << 53) - 1)

struct mt_trim_result {
    int64_t id;          /* unique for the life of the store: counts up from the wall
                          * clock in ms at start, and above the store's largest id
                          * (trim_ids_above), so a restart never reuses one; at most
                          * MT_TRIM_ID_MAX */
    int trigger;         /* enum mt_trigger */
    int64_t start_ms;    /* wall clock when malloc_trim was called */
    int64_t duration_ns; /* malloc_trim alone */
    uint64_t rss_before_bytes;
    uint64_t rss_after_bytes;
    uint64_t heap_free_before_bytes;
    uint64_t heap_free_after_bytes;
    int64_t released_bytes; /* rss_before - rss_after (may be negative on a busy host) */
    int malloc_trim_ret;     /* the release call's result: glibc's malloc_trim 1 if it
                              * released something; other allocators 1 when it ran */
    uint64_t pad_bytes;
    int coalesced;           /* this caller received another caller's trim */
    int64_t reaction_ns;     /* pressure trims: from the crossing to malloc_trim's start; -1 */
    int arena_count;         /* arenas when it ran (-1 unknown): malloc_trim locks each in turn */
    int64_t refaulted_bytes; /* upper bound of released bytes that came back; -1 not yet known */
    uint64_t minflt_after;   /* the process's minor faults right after it (re-fault baseline) */
    int heap_skipped;        /* no free-heap figures: the readings were skipped (ProbeBudgetPercent
                              * was spent), or the allocator reports no free heap (mimalloc) */
    int pid;                 /* worker groups: the member that ran it; 0 = this process */
    int nothing_reason;      /* enum mt_nothing: why it released under a page (0: it did not) */
    int host_stall_measured; /* the stall canary took a sample while it ran (stall.h) */
    int64_t host_stall_ns;   /* the longest of those samples; 0 when not measured */
};

/* Why a trim released less than a page (trim_nothing_reason, docs/policy.md). */
enum mt_nothing {
    MT_NOTHING_NONE = 0,     /* it released a page or more */
    MT_NOTHING_NOT_MEASURED, /* no heap reading around it (budget spent, or no free-heap figure) */
    MT_NOTHING_FREE,         /* the heap's free memory was under a page before it */
    MT_NOTHING_PINNED_SMALL, /* the last per-arena reading: free only in chunks under a page */
    MT_NOTHING_PINNED_EDGE,  /* ... only in the page ends of larger chunks */
    MT_NOTHING_PINNED_TOP,   /* ... only in a thread arena's top, which glibc never madvises */
    MT_NOTHING_NOT_RESIDENT, /* releasable pages were free, yet RSS did not fall: they were
                              * not resident (an earlier trim, or glibc's own, released them) */
    MT_NOTHING_UNEXPLAINED,  /* free memory, no per-arena reading to say whether it is pinned */
    MT_NOTHING_COUNT
};
const char *mt_nothing_name(int reason); /* NULL for MT_NOTHING_NONE and unknown codes */
int mt_nothing_parse(const char *name);  /* MT_NOTHING_UNEXPLAINED for an unknown name */

/* The last per-arena reading's totals of free, releasable and pinned memory (by reason). */
struct mt_arenas_pinned {
    uint64_t free_bytes, releasable_bytes, small_bytes, edge_bytes, top_bytes;
    int64_t timestamp_ms;
};

/* A trim's re-fault figure, known once its window closed (queued for the store). */
struct mt_refault {
    int64_t id;       /* the trim's sequence number */
    int pid;          /* worker groups: the member whose trim it is; 0 = this process */
    int64_t start_ms; /* and start: together they name its row */
    int trigger;
    int64_t refaulted_bytes;
};

/* Trim-duration histogram bucket upper bounds, seconds (plus +Inf). */
#define MT_HIST_BUCKETS 12
extern const double mt_hist_bounds[MT_HIST_BUCKETS];

/* Pressure-trim reaction-time histogram bucket upper bounds, seconds (plus +Inf). */
#define MT_REACTION_BUCKETS 12
extern const double mt_reaction_bounds[MT_REACTION_BUCKETS];

/* Monotonic counters since start. mt_counters_get gathers them part by part (trim
 * service, snapshot cache, housekeeper, pressure path, store), each under its own lock;
 * there is no lock over the whole. */
struct mt_counters {
    uint64_t trims[MT_TRIGGER_COUNT];
    uint64_t released_bytes[MT_TRIGGER_COUNT]; /* sum of positive released_bytes */
    uint64_t skips[MT_SKIP_COUNT];
    uint64_t manual_coalesced;
    uint64_t manual_rate_limited;
    uint64_t trim_hist[MT_HIST_BUCKETS + 1]; /* non-cumulative; last = +Inf */
    double trim_seconds_sum;
    uint64_t heap_probes;          /* mallinfo2 calls */
    double heap_probe_seconds;     /* their total duration */
    double heap_probe_last_seconds;
    uint64_t cheap_probes;
    double cheap_probe_seconds;
    double housekeeper_cpu_seconds; /* CLOCK_THREAD_CPUTIME_ID of the housekeeper */
    uint64_t housekeeper_ticks;
    uint64_t samples_stored;
    uint64_t samples_dropped; /* the store could not keep up (or hung) */
    uint64_t store_errors;
    uint64_t trims_dropped; /* results that could not be queued for the store */
    /* the pressure thread (core/pressure/engine.c) */
    const char *pressure_source;     /* "cgroup-v1-threshold", "psi", "poll", ... (static) */
    int pressure_zone;               /* RSS inside the zone at the last reading */
    uint64_t pressure_checks[2];     /* readings [0] outside, [1] inside the zone */
    uint64_t pressure_kernel_wakeups;
    uint64_t pressure_last_chance_trims; /* trims at a new memory.events max/oom */
    uint64_t pressure_judged_released_bytes; /* releases judged at the next pressure trim */
    uint64_t pressure_returned_bytes; /* of those, what came back before it */
    uint64_t pressure_returned_trims; /* trims more than half of whose release came back */
    double pressure_backoff_seconds; /* the growth rule's gap now (0 none) */
    uint64_t pressure_reaction_hist[MT_REACTION_BUCKETS + 1]; /* non-cumulative; last = +Inf */
    double pressure_reaction_seconds_sum;
    double pressure_reaction_last_seconds; /* -1 none yet */
    double pressure_cpu_seconds;     /* CLOCK_THREAD_CPUTIME_ID of the pressure thread */
    double cpu_seconds;              /* all of memtrim's threads, live and ended (thread.c) */
    /* what trimming cost the host (cost.c, housekeeper.c) */
    double trim_seconds[MT_TRIGGER_COUNT];      /* wall time in trims, by trigger */
    uint64_t host_stall_trims[MT_TRIGGER_COUNT];  /* trims the stall canary measured */
    double host_stall_seconds[MT_TRIGGER_COUNT];  /* sum of their longest waits */
    double host_stall_max_seconds[MT_TRIGGER_COUNT]; /* the longest of them */
    uint64_t refaulted_bytes[MT_TRIGGER_COUNT]; /* upper bound of released bytes that came back */
    uint64_t refault_windows[MT_TRIGGER_COUNT]; /* trims whose re-fault window closed */
    double gap_factor;            /* the adaptive gap's multiplier now (1 = none) */
    int release_back_at_once;     /* the last periodic/burst release came back within ~0.5 s */
    double host_cpu_share;        /* the host's CPU share over the last ticks, 0..1; -1 unknown */
    double deferred_seconds;      /* time periodic/burst trims waited for a busy host */
    int deferring;                /* a trim waits for the host now */
};

const char *mt_trigger_name(int trigger);    /* "manual", ...; "unknown" */
int mt_trigger_parse(const char *name);      /* -1 if unknown */
const char *mt_skip_reason_name(int reason);

/* The per-arena view of glibc's heap, malloc_info(3) parsed (core/measure/arenas.c). */
struct mt_arena {
    int nr;                    /* glibc's arena number; 0 is the main arena */
    uint64_t system_bytes;     /* <system type="current">: memory it holds from the system */
    uint64_t system_max_bytes; /* <system type="max"> */
    uint64_t in_use_bytes;     /* system - fastbins - bins - top */
    uint64_t fastbin_bytes, fastbin_chunks; /* <total type="fast"> */
    uint64_t bins_bytes, bins_chunks;       /* free chunks in the bins (rest less top,
                                             * less the flag bits glibc sums in) */
    uint64_t top_bytes;                     /* the top chunk (rest less what <sizes> lists) */
    uint64_t free_bytes;                    /* fastbins + bins + top */
    uint64_t subheaps;                      /* <aspace type="subheaps">; 0 for the main arena */
    /* What malloc_trim can give back of it (glibc's mtrim: madvise of the whole pages inside
     * each bin chunk larger than a page + its header, sbrk of the main arena's top), and
     * what it cannot, by reason (docs/advice.md, "Pinned memory"): */
    uint64_t releasable_bytes;   /* bins less the two below, plus the main arena's top */
    uint64_t pinned_small_bytes; /* bin chunks too small to hold a whole page */
    uint64_t pinned_edge_bytes;  /* at most a page + header per larger chunk: its ends */
    uint64_t pinned_top_bytes;   /* a thread arena's top chunk: mtrim never madvises it */
};

struct mt_arenas {
    int count;
    struct mt_arena *arena; /* count entries, malloc'd; arenas_free releases it */
    /* process totals (the elements after the last </heap>) */
    uint64_t system_bytes, system_max_bytes;
    uint64_t fastbin_bytes, rest_bytes; /* rest = bins + top chunks */
    uint64_t mmapped_bytes, mmapped_count;
    uint64_t in_use_bytes, free_bytes, bins_bytes, top_bytes; /* sums over the arenas */
    /* the reading */
    int64_t timestamp_ms;
    int64_t duration_ns, cpu_ns;
};

/* A finding of the doctor (core/decide/doctor.c): what to change, with its evidence. */
enum doctor_severity { DOCTOR_INFO = 0, DOCTOR_WARNING, DOCTOR_CRITICAL };

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

/* glibc's malloc tunables that memtrim sets with mallopt (core/alloc/tunables.c). */
enum mt_tunable {
    MT_TUNABLE_MMAP_THRESHOLD = 0, /* first: the one glibc may refuse */
    MT_TUNABLE_ARENA_MAX,
    MT_TUNABLE_TRIM_THRESHOLD,
    MT_TUNABLE_TOP_PAD,
    MT_TUNABLE_COUNT
};

struct mt_tunables {
    int64_t value[MT_TUNABLE_COUNT]; /* in force through memtrim's mallopt; -1 = not set */
    int glibc;                       /* 0: another allocator serves malloc, nothing applied */
    /* MallocArenaMax "auto": the CPUs it was derived from and the file that said (or the
     * affinity mask); arena_auto 0 when not asked for */
    int arena_auto;
    double arena_auto_cpus;
    char arena_auto_source[256];
};

/* ---- worker groups (core/group/; the API prints these) ---- */
#define MT_GROUP_NAME_MAX 64 /* GroupName's length at most */
#define MT_GROUP_MAX 64 /* members in a group, the leader included */

struct mt_member {
    int pid;
    int self;                   /* the process that serves the API */
    char program[64];           /* its comm */
    int64_t joined_ms;          /* wall clock */
    int64_t report_age_ms;      /* age of its last report */
    struct mt_snapshot snap;    /* its last report (the leader's: its own snapshot) */
    uint64_t trims;             /* trims it reported since it joined */
    uint64_t released_bytes;    /* their positive releases */
    uint64_t pressure_trims;    /* of which the group's pressure asked for */
    uint64_t own_trims;         /* ...of those, run on its own in the zone (GroupTrimSlotMs) */
};

struct mt_group_info {
    int role;                   /* 0 no group, 1 leader, 2 member */
    int members;                /* live members, the leader included */
    uint64_t joined, left, refused; /* since start; refused: the registry was full */
    uint64_t pressure_trims;    /* trims the group's pressure decision asked for */
    uint64_t pressure_released_bytes;
    uint64_t own_trims;         /* ...of which members ran on their own in the zone */
    uint64_t own_released_bytes;
    uint64_t kernel_looks;      /* the decision's looks run at the engine's kernel wake-up */
    uint64_t kernel_picks;      /* ...of which picked a member to trim */
    int64_t usage_bytes;        /* what the decision reads: the cgroup's usage, or the sum of RSS */
    int64_t limit_bytes;        /* -1 none */
    int zone;                   /* usage inside the pressure zone at the last reading */
    const char *usage_source;   /* "cgroup", "members" or "none" (static) */
    int trim_running;           /* a manual group trim is asking its members */
    uint64_t rows_dropped;      /* members' trims and re-fault figures over their rate, not stored */
    uint64_t flooded;           /* members dropped for sending more than a memtrim would */
    char name[MT_GROUP_NAME_MAX + 1]; /* GroupName, "" for a FollowFork group */
};

struct mt_member_trim {
    int pid;
    int rc;                     /* 0, or why it has no result (negative errno) */
    char error[96];             /* with rc: what happened */
    struct mt_trim_result r;
};

#endif /* MEMTRIM_TYPES_H */
