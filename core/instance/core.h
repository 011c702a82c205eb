/*
 * core.h - what the instance offers to the HTTP handlers (api/) and the host
 * adapters (Orthanc, LD_PRELOAD, the C ABI). Every function here is safe to
 * call from any thread while the instance runs; each takes the lock it needs.
 */
#ifndef MEMTRIM_CORE_H
#define MEMTRIM_CORE_H

#include <stddef.h>
#include <stdint.h>
#include "common.h"
#include "config.h"

struct memtrim;
struct cJSON;
struct server_routes;
struct server_store;
struct group_host_ops;

/* Lifecycle (the C ABI wraps these). */
/* routes: what the HTTP server serves (the adapters give api/'s table, api_routes). */
int mt_create(const char *config_json, const struct server_routes *routes, struct memtrim **out,
              char **err);
void mt_destroy(struct memtrim *mt);
int mt_suspend(struct memtrim *mt);
int mt_resume(struct memtrim *mt);
int mt_http_port(const struct memtrim *mt);
/* The address the server bound, "host:port" (server_address); -ENOENT without one. */
int mt_http_address(const struct memtrim *mt, char *buf, size_t size);

/*
 * The shared snapshot for readers (/memory/stats, /metrics): refreshed at most
 * every StatsMaxAgeMs however many readers ask (one refreshes, the others wait
 * for it and share the result); the mallinfo2 part only as the probe budget
 * allows.
 */
void mt_snapshot_get(struct memtrim *mt, struct mt_snapshot *out);
/* The same without asking for a heap reading (the allocator's stats call): /healthz, the
 * start log, whose liveness probes must not cost the host mallinfo2. */
void mt_snapshot_get_cheap(struct memtrim *mt, struct mt_snapshot *out);

/*
 * A manual trim. pad < 0 means TrimPadBytes. Returns 0 with *out filled
 * (out->coalesced set when another trim was running and its result is
 * shared), or -EAGAIN when closer than ManualTrimMinIntervalMs to the last
 * manual request that ran or shared a trim, checked first (*retry_after_ms
 * says how long to wait).
 */
int mt_trim_manual(struct memtrim *mt, int64_t pad, struct mt_trim_result *out,
                   int64_t *retry_after_ms);

/*
 * What wakes the pressure path: "cgroup-v1-threshold", "psi", "memory-events",
 * "poll" or "none" (no limit known); *zone is 1 when RSS was inside the
 * pressure zone at its last reading. A static string.
 */
const char *mt_pressure_source(struct memtrim *mt, int *zone);

/* The memory cgroup as found at start (cgroup.c) and, for a reading, what set
 * the limit in force: "MemoryLimitBytes", a cgroup file ("/sys/fs/cgroup/
 * system.slice/x.service/memory.max"), or "" when there is none. */
struct mt_cgroup_desc {
    int version;   /* 0 none, 1, 2 */
    int hybrid;    /* v1 memory controller beside a v2 hierarchy (or the other way round) */
    int read_only; /* its hierarchy is mounted read-only */
    int fallback;  /* its own directory was not visible: the mount's root stood for it */
    char path[1024];       /* as /proc/self/cgroup names it */
    char dir[4096];        /* its directory */
    char limit_source[4160];
    char events_file[4160]; /* the memory.events read (v1: memory.failcnt), "" none */
};
void mt_cgroup_describe(struct memtrim *mt, const struct mt_snapshot *s, struct mt_cgroup_desc *out);
/* One line for the start log and /healthz: "cgroup v2 /a/b: limit 314572800 bytes (... memory.max)". */
void mt_cgroup_summary(struct memtrim *mt, const struct mt_snapshot *s, char *buf, size_t size);

/* Which allocator serves malloc ("glibc", ...), for the replies. */
const char *mt_allocator_name(struct memtrim *mt);

/* Counters since start. */
void mt_counters_get(struct memtrim *mt, struct mt_counters *out);

/* A copy of the effective configuration. */
void mt_config_get(struct memtrim *mt, struct mt_config *out);

/* PATCH /config: runtime keys only. 0 or -EINVAL with *err (free()). */
int mt_config_patch(struct memtrim *mt, const char *json, char **err);

/* Health: the store's state and the last error, for /healthz. */
struct mt_health {
    int degraded;           /* 1 when something is not working */
    char reason[256];       /* why, "" when healthy */
    char db_state[32];      /* "ok", "disabled", "unavailable", "retrying" */
    int64_t started_ms;     /* wall clock at start */
    int suspended;          /* nesting depth */
};
void mt_health_get(struct memtrim *mt, struct mt_health *out);

/*
 * Advice (advice.c). The per-arena view: the cached reading when it is at most
 * max_age_ms old (< 0: StatsMaxAgeMs), else a new malloc_info call if the probe
 * budget allows. Returns 0 with *out (caller calls mt_arenas_free;
 * out->timestamp_ms says its age), -EAGAIN when the budget says no
 * (*retry_after_ms), -ENOTSUP when the allocator serving malloc has no
 * per-arena view (*err names it), or another negative errno with *err (caller frees).
 */
int mt_arenas_get(struct memtrim *mt, int64_t max_age_ms, struct mt_arenas *out,
                  int64_t *retry_after_ms, char **err);
void mt_arenas_free(struct mt_arenas *a);
/* The last per-arena reading's totals of free, releasable and pinned memory (by reason),
 * without a malloc_info of its own (/metrics): 0, or -ENOENT before the first reading. */
int mt_arenas_pinned_get(struct memtrim *mt, struct mt_arenas_pinned *out);
/* The same without waiting (-EBUSY while a malloc_info holds the cache): the trim
 * service's pinned callback (arg: the instance). */
int mt_arenas_pinned_peek(void *mt, struct mt_arenas_pinned *out);

/* The doctor's findings now, most severe first; returns how many (<= max,
 * DOCTOR_MAX_FINDINGS at most). */
int mt_doctor_run(struct memtrim *mt, struct doctor_finding *out, int max);
/* "info", "warning", "critical" */
const char *mt_doctor_severity_name(int severity);
/* The findings as plain text for a terminal (caller frees); NULL on OOM. */
char *mt_doctor_text(const struct doctor_finding *f, int n);

/* glibc's malloc tunables in force through memtrim (-1: not set), and each one's
 * /memory/stats name ("arena_max", ...). */
void mt_tunables_get(struct mt_tunables *out);
const char *mt_tunable_field(int t);

/* How a request served outside the embedded server (Orthanc's REST API)
 * reaches the store's readers; owned by the instance. */
const struct server_store *mt_store_readers(struct memtrim *mt);

/*
 * ---- worker groups (core/group/; docs/groups.md) ----
 * The value types (struct mt_group_info, mt_member, mt_member_trim) are in
 * common/types.h; the instance's group calls are core/instance/group_calls.c.
 * A preforking server's processes: the leader serves the API and owns the
 * store, the members report to it over a channel made at fork and trim
 * themselves when asked. A single process is in no group and none of this
 * changes its replies.
 */
/* The group and up to cap members (leader first); 0, or -ENOTCONN in no group. */
int mt_group_info(struct memtrim *mt, struct mt_group_info *info, struct mt_member *members,
                  int cap, int *n);

/*
 * The one manual trim of the face: of a target, which core resolves. pid 0: this
 * process, and in a worker group every member (this process first, then the others
 * one at a time, so that they never stall the node together); a pid: that member
 * (this process's own pid: this process). pad < 0 means TrimPadBytes.
 * 0 with *n results in out (out[0]: this process's own trim when it is among them;
 * another member's rc -EINPROGRESS: asked, its result to come to the store) and
 * *members set when this process leads a group (the reply lists the members);
 * -EAGAIN inside ManualTrimMinIntervalMs (*retry_after_ms); -ENOENT when pid is
 * neither this process nor a member; another negative errno when this process's
 * trim failed.
 */
int mt_trim(struct memtrim *mt, int pid, int64_t pad, struct mt_member_trim *out, int cap,
            int *n, int *members, int64_t *retry_after_ms);

/* What a host adapter whose process forks hands core/group/'s host side (group_host.h,
 * plugin/host_preload.c): the instance's calls, filled into ops (the adapter adds its own). */
void mt_group_host_calls(struct group_host_ops *ops);

/* This process's pid (getpid), for replies that name it. */
int mt_pid(void);

#endif /* MEMTRIM_CORE_H */
