/*
 * agent_int.h - the node agent's inside (docs/agent.md): its configuration, the cgroups it
 * watches and the processes in them, and the calls its files make of each other, one way
 * only (no circle: test_rooms; words.c and kind.c call none of the others). Private to
 * agent/. Threads: the agent's loop thread owns every cgroup and process record and changes
 * them under agent.lock; the HTTP workers take agent.lock to read (render) them. Nothing here
 * is held across a trim (a trim runs the command in a child, with the lock released).
 */
#ifndef MEMTRIM_AGENT_INT_H
#define MEMTRIM_AGENT_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "server.h"

#define AGENT_GLOBS 32
#define AGENT_PATH 512

/* ---- what a cgroup is, from its path (kind.c: pure) ---------------------------------- */
enum agent_kind { AK_OTHER, AK_UNIT, AK_DOCKER, AK_PODMAN, AK_CONTAINERD, AK_CRIO, AK_POD,
                  AK_POD_CONTAINER, AK_KINDS };

struct agent_kind_info {
    enum agent_kind kind;
    char runtime[16];       /* docker, podman, containerd, cri-o, "" */
    char qos[16];           /* Kubernetes: guaranteed, burstable, besteffort */
    char pod_uid[40];       /* 8-4-4-4-12, dashes (the systemd driver's underscores undone) */
    char container_id[80];  /* the runtime's id (hex) */
    char unit[128];         /* the last systemd unit on the path (.service, .scope, .slice) */
};
/* What path (as /proc/PID/cgroup names it, "/kubepods.slice/...") says it is. 0 (out filled,
 * AK_OTHER when nothing is known). */
int agent_kind_parse(const char *path, struct agent_kind_info *out);
const char *agent_kind_name(enum agent_kind k);

/* ---- why a process is not trimmed (refusals by reason; words.c: pure) ----------------- */
enum agent_reason { AR_NONE, AR_MUSL, AR_STATIC, AR_RUNTIME, AR_SECCOMP, AR_KERNEL, AR_NO_THREAD,
                    AR_TIMEOUT, AR_FAILED, AR_GIVES_NOTHING, AR_DENIED, AR_MEMTRIM_LOADED,
                    AR_API_UNREACHABLE, AR_API_REFUSED, AR_NO_ROOM, AR_COUNT };
const char *agent_reason_name(enum agent_reason r);
/* 1 for the reasons that make a process "unreleasable" (the agent leaves it alone). */
int agent_reason_unreleasable(enum agent_reason r);

/* ---- configuration (config.c) ---------------------------------------------------------- */
struct agent_config {
    struct server_options http;
    int http_enabled;
    char auth_token_file[AGENT_PATH]; /* AuthTokenFile / ReadTokenFile: read into http at load */
    char read_token_file[AGENT_PATH];
    char allow[AGENT_GLOBS][AGENT_PATH]; /* cgroup globs (fnmatch on the path); none = all */
    int nallow;
    char deny[AGENT_GLOBS][AGENT_PATH];
    int ndeny;
    char allow_programs[AGENT_GLOBS][64]; /* program (comm) globs; none = all */
    int nallow_programs;
    char deny_programs[AGENT_GLOBS][64];
    int ndeny_programs;
    int dry_run;              /* say what would be trimmed, trim nothing */
    int idle_trims;           /* trim what grew in cgroups not near their limit, too */
    int idle_interval_s;      /* ... at most this often per process */
    double pressure_ratio;    /* the zone: usage at this share of the aim (limit, or memory.high) */
    int scan_interval_ms;     /* cgroups and processes re-read */
    int zone_poll_ms;         /* in the zone, between decisions */
    double cpu_budget_percent; /* the trims' CPU (the commands') as a share of one core */
    int max_parallel_trims;    /* commands in flight on the node, one per cgroup at most */
    int max_cgroups;           /* cgroups watched at most (each costs its records, one or two
                                * descriptors and its series); those past it are counted */
    double thread_wait_s, call_wait_s; /* the command's --thread-wait and --timeout */
    char v1_root[AGENT_PATH]; /* the v1 memory hierarchy ("" none) */
    char v2_root[AGENT_PATH]; /* the v2 hierarchy ("" none) */
    char command[AGENT_PATH]; /* the memtrim command ("" = this executable) */
    char database[AGENT_PATH]; /* the history's SQLite file ("" = none) */
    int retention_hours, sample_interval_s;
};
/* text: inline JSON or a file's path; NULL: the defaults. 0, or -1 with err set. */
int agent_config_load(const char *text, struct agent_config *cfg, char *err, size_t errlen);
/* 1 when the cgroup path / program is allowed by the lists. */
int agent_cgroup_allowed(const struct agent_config *cfg, const char *path);
int agent_program_allowed(const struct agent_config *cfg, const char *comm);

/* ---- the watched things ---------------------------------------------------------------- */
struct agent_proc {
    pid_t pid;
    unsigned long long start;  /* its start time: with pid, its identity */
    char comm[64];             /* its Name when what it is was read (a later prctl rename
                                * changes nothing here: it is not another program) */
    dev_t exe_dev;             /* /proc/PID/exe's file when what it is was read: an exec */
    ino_t exe_ino;             /* changes it, a rename does not (0, 0 unknown) */
    uint64_t image;            /* its image's stack addresses then (exec_mark): an exec of the
                                * same file changes them too (0 unknown) */
    uint64_t reads;            /* times what it is was read (its maps) */
    char alloc[16];            /* the command's name for its allocator */
    int memtrim_loaded;        /* libmemtrim.so / the Orthanc plugin in its maps */
    enum agent_reason reason;  /* why it is left alone (AR_NONE: a candidate) */
    char why[512];             /* the command's own words for the reason */
    int64_t anon;              /* RssAnon, bytes (-1 unknown) */
    int64_t anon_after_trim;   /* RssAnon right after its last trim (-1 never trimmed) */
    int64_t last_released;     /* what its last trim gave back */
    int64_t last_trim_ns;      /* monotonic */
    int64_t last_in_target_ns; /* its last trim's time inside it charged to its budget */
    int64_t last_inside_ns;    /* ...and spent there (the command's figures; a call past its
                                * deadline or no answer: the whole trim's time) */
    int64_t inside_charged_ns; /* every charge to its budget, in all */
    double inside_ns;          /* its own budget of trims' time inside it (decide.c's bucket): */
    int64_t inside_at_ns;      /* what is left at inside_at_ns; inside_at_ns 0: full */
    int zero_trims;            /* trims in a row that gave back under 1 MiB */
    int64_t no_room_ns;        /* its last refusal for want of room (monotonic), and the room */
    int64_t no_room_read;      /* its cgroup had then as the agent read it (agent_room) */
    int in_flight;             /* a trim of it runs now */
    uint64_t trims, released;
    int seen;                  /* scan mark */
};

/* What an epoll event's data.ptr points at: the first member of both (NULL: the signalfd). */
enum agent_ev { AGENT_EV_CGROUP = 1, AGENT_EV_TRIM };

struct agent_trim; /* one command in flight (act.c) */

struct agent_cgroup {
    enum agent_ev ev_kind;     /* AGENT_EV_CGROUP */
    struct agent_trim *busy;   /* its trim in flight, NULL none: one at a time per cgroup */
    char path[AGENT_PATH];     /* in its hierarchy ("/kubepods.slice/...") */
    char dir[AGENT_PATH + 64]; /* its directory */
    int version;               /* 1 or 2 */
    struct agent_kind_info kind;
    int allowed;
    int64_t limit, high;       /* bytes; -1 none */
    int64_t usage, anon, file, inactive_file, working_set; /* -1 unknown */
    int64_t reclaimable;       /* its clean page cache (target_stat_reclaimable), 0 unknown */
    uint64_t oom_kills, oom_kills_at_near;
    int near;                  /* within 5 % of its limit now */
    uint64_t near_episodes, kills_avoided;
    uint64_t trims, released, wakes, dry_run_picks;
    uint64_t inside_ns, inside_charged_ns; /* its members' trims' time inside them, spent and
                                            * charged to their budgets, in all */
    uint64_t refusals[AR_COUNT];
    int64_t base_usage;        /* its low-water mark since its last trim (the growth rule) */
    int64_t threshold;         /* v1: the registered usage threshold (bytes) */
    int event_fd;              /* v1 eventfd / v2 PSI trigger (memory.pressure) */
    int events_fd;             /* v2 memory.events (POLLPRI) */
    int64_t woke_ns;           /* the kernel's last wake not yet acted on (0 none) */
    int64_t next_full_ns;      /* its limits, stat and OOM kills read again then */
    int64_t next_idle_ns;
    int in_zone;
    int seen;
    struct agent_proc *procs;
    size_t nprocs, cap;
};

struct agent_trim {
    enum agent_ev ev_kind;     /* AGENT_EV_TRIM */
    struct agent_cgroup *cg;
    pid_t child;               /* the command */
    int out_fd;                /* its stdout, in the loop's epoll */
    pid_t pid;                 /* the target, with its start time */
    unsigned long long start;
    int64_t t0, deadline;
    size_t n;
    char buf[8192];            /* its JSON answer */
};

struct agent_stats {
    uint64_t scans, wakes, trims, released, dry_run_picks, budget_waits;
    int64_t trims_cpu_ns;          /* CPU the commands used */
    double last_reaction_ms;       /* kernel event to trim start, last */
    double reaction_ms_sum, reaction_ms_max;
    uint64_t reactions;
    double scan_ms_last;
    uint64_t cgroups_unwatched;    /* limited cgroups past MaxCgroups at the last scan */
};

struct agent {
    struct agent_config cfg;
    pthread_mutex_t lock; /* guards cgroups, ncgroups and every record in them, and stats */
    struct agent_cgroup **cgroups;
    size_t ncgroups, cap;
    struct agent_stats stats;
    int epfd;
    int64_t started_ms;
    double budget_ns;     /* CPU the trims may still spend (token bucket) */
    int trims_in_flight;
    int64_t budget_at_ns;
    char self_exe[AGENT_PATH];
    struct db_agent *store; /* the history (history.c), NULL without one */
    int64_t next_sample_ns, next_retention_ns;
    uint64_t store_errors;
    uint64_t unwatched;                  /* this scan's cgroups past MaxCgroups (scan.c) */
    size_t ndenied;                      /* watched cgroups the lists deny (scan.c; counted
                                          * again at each scan) */
    char first_unwatched[AGENT_PATH];    /* the first of them */
};

/* scan.c: walk the hierarchies; add, update and drop cgroups and their processes (takes
 * a->lock itself for the changes). */
void agent_scan(struct agent *a);
/* One cgroup's processes (its own and its descendants' without a limit) read again now: the
 * processes that joined since the scan, before a decision. */
void agent_rescan(struct agent *a, struct agent_cgroup *cg);
/* Re-read one cgroup's usage; full: its limits, stat and OOM kills too. */
void agent_cgroup_read(struct agent_cgroup *cg, int full);
/* Re-read one cgroup's processes' RssAnon; a (NULL: not) reads again what a process is when
 * it ran another program (its /proc/PID/exe is another file; a new Name alone, which any
 * process sets with prctl(PR_SET_NAME), is not). */
void agent_procs_refresh(struct agent *a, struct agent_cgroup *cg);
void agent_cgroup_free(struct agent_cgroup *cg);
/* libmemtrim.so or the Orthanc plugin in pid's maps: 1 (read at first sight, and again before
 * each trim of a process it was not in: `memtrim load PID` puts it into a running one). */
int agent_memtrim_loaded(pid_t pid);
/* /proc/PID/file's text into buf[size] (cut, NUL-terminated): 0, or -1. */
int agent_proc_read(pid_t pid, const char *file, char *buf, size_t size);

/* watch.c: the kernel's wake-ups for one cgroup (v1 threshold, v2 PSI and memory.events),
 * registered in a->epfd with the cgroup as the event's data; 0, or -errno (then polled). */
int agent_watch_arm(struct agent *a, struct agent_cgroup *cg);
void agent_watch_disarm(struct agent *a, struct agent_cgroup *cg);
/* The fd of ev woke: drain it. */
void agent_watch_drain(struct agent_cgroup *cg, int fd);

/* act.c: a trim of one process through the memtrim command, beside the loop: started (0, or
 * -errno with the failure learnt), its answer read when its pipe is ready (then learnt: what
 * the process gave back, or why it is left alone), ended past its deadline, or left to run on
 * alone when the agent stops. */
int agent_trim_start(struct agent *a, struct agent_cgroup *cg, struct agent_proc *p);
void agent_trim_ready(struct agent *a, struct agent_trim *t);
void agent_trim_expire(struct agent *a, struct agent_cgroup *cg, int64_t now);
void agent_trim_abandon(struct agent *a, struct agent_cgroup *cg);
/* The command's error code and message into a reason. */
enum agent_reason agent_reason_of(const char *code, const char *message);

/* ask.c: `memtrim agent --ask PID --start-time T`, the child that asks a process where memtrim
 * is loaded to trim through its own API (found from its listening sockets); prints one JSON
 * answer in the command's shape; its exit code. */
int agent_ask(pid_t pid, unsigned long long start, double timeout_s);

/* decide.c (pure): the agent's side of the one pressure decision over a cgroup's members. */
/* The bytes the cgroup aims under: the lower of limit and memory.high (-1 none). */
int64_t agent_aim(const struct agent_cgroup *cg);
/* 1 when usage is inside the zone where the decision may pick (core/pressure's floor: the
 * PressureRatio line, or half the aim if lower). */
int agent_in_zone(int64_t usage, int64_t aim, double ratio);
/* What a trim of p may give back now (its anonymous memory's growth since its last trim). */
int64_t agent_expected(const struct agent_proc *p);
/* The member to trim next, by the one decision (core/pressure/: group_pressure_pick over
 * outside members, outside.h): an index into cg->procs or -1; *rule says why (group_rule). */
long agent_decide(const struct agent_cgroup *cg, int64_t now_ns, double ratio,
                  uint64_t min_releasable, int *rule);
/* A trim of p that started at started_ns was answered at answered_ns: its time, as the
 * decision reads it (the start: its retrim gap runs from there). */
void agent_trimmed(struct agent_proc *p, int64_t started_ns, int64_t answered_ns);
/* A trim's time inside its process from the command's answer (thread_stopped_seconds and
 * call_threads_seconds): each a NaN, a negative or one past an hour (no call lasts that: the
 * command's deadlines) counts 0. */
int64_t agent_in_target_ns(double stopped_s, double threads_s);
/* A trim's time inside its process as the command's answer tells it (code: its error code,
 * NULL with none; answered true when the child answered at all; released: what it gave back,
 * -1 none said): 0 for one that gave back AGENT_INSIDE_PAID_BYTES or more, else its figures
 * (agent_in_target_ns), or, for a call that ran past the command's deadline (code "timeout":
 * an error object, no figures, and the call goes on there) or a child that never answered
 * (ended at the agent's deadline), the whole time from the trim's start to its end. */
int64_t agent_answer_inside_ns(const char *code, int answered, double stopped_s,
                               double threads_s, int64_t released, int64_t started_ns,
                               int64_t ended_ns);
/* A trim that gave back at least this is not charged (paid by what it gave back; the line
 * under which act.c counts a trim as giving nothing): the budget binds trims that buy nothing,
 * and calls past their deadline. */
#define AGENT_INSIDE_PAID_BYTES ((int64_t)1 << 20)
/* Each member's own budget of trims' time inside it (a token bucket: AGENT_INSIDE_SHARE of
 * its time, holding AGENT_INSIDE_CAP_NS, full at first sight): what is left at now_ns (a
 * member with nothing left is no candidate), and a trim's time inside it charged at now_ns. */
#define AGENT_INSIDE_SHARE 0.25
#define AGENT_INSIDE_CAP_NS (2.0 * 1e9)
double agent_inside_left(const struct agent_proc *p, int64_t now_ns);
void agent_inside_charge(struct agent_proc *p, int64_t now_ns, int64_t in_target_ns);
/* When a member trimmed lately may be picked again (the decision's retrim gap from its
 * last trim's start ends, and its budget of time inside it is no longer spent): the earliest
 * such time after now_ns, INT64_MAX none. The loop wakes then in the zone, not at its next
 * poll. */
int64_t agent_next_due(const struct agent_cgroup *cg, int64_t now_ns);
/* The trims' CPU budget, a token bucket of percent of one core holding what 10 s earn: its
 * content at the agent's start (full), and a take at now_ns (refilled since *at_ns): 1 when
 * a trim may start (its CPU is taken off afterwards), else 0. */
double agent_budget_start(double percent);
int agent_budget_take(double *budget_ns, int64_t *at_ns, int64_t now_ns, double percent);
/* The room below the cgroup's aim as last read, its clean page cache counted as the
 * command counts it (target_room_of); -1 unknown. */
int64_t agent_room(const struct agent_cgroup *cg);
/* 1 while p's last trim was refused for want of room (AR_NO_ROOM) and its cgroup, as last
 * read, still has less than a call's charge (cli.h's CLI_CALL_CHARGE) below its aim, or,
 * refused where the agent read room for it, for AGENT_NO_ROOM_HOLD_NS after the refusal:
 * not asked again until then. */
int agent_held_no_room(const struct agent_cgroup *cg, const struct agent_proc *p,
                       int64_t now_ns);
#define AGENT_NO_ROOM_HOLD_NS (100 * 1000 * 1000LL)
/* IdleTrims, outside the zone (the agent's own opt-in): the member whose anonymous memory
 * grew most since its last trim, by min_bytes at least, not trimmed within gap; -1 none. */
long agent_pick_idle(const struct agent_proc *procs, size_t n, int64_t now_ns, int64_t gap_ns,
                     int64_t min_bytes);

/* api.c: GET /agent/cgroups' answer (malloc'd; NULL out of memory) and GET /metrics' text,
 * a->lock held by the caller. */
char *agent_cgroups_json(struct agent *a);
void agent_metrics(struct agent *a, FILE *f);

/* history.c: the store (db/'s db_agent): opened at start (a failure is logged, the agent
 * goes on without it), the cgroups' samples every SampleIntervalSeconds and the retention
 * hourly (agent_history_tick), each trim's row (agent_history_trim); GET /agent/history. */
void agent_history_open(struct agent *a);
void agent_history_close(struct agent *a);
void agent_history_tick(struct agent *a, int64_t now_ns);
void agent_history_trim(struct agent *a, const struct agent_cgroup *cg, const struct agent_proc *p,
                        int64_t released, int64_t wall_ns, int64_t cpu_ns);
struct server_request;
struct server_reply;
int agent_history_get(const struct server_request *req, struct server_reply *rep);

/* words.c: a byte count, or null when unknown (< 0). */
struct cJSON;
void agent_json_bytes(struct cJSON *o, const char *k, int64_t v);

/* api.c: the routes (/metrics, /agent/cgroups, /healthz, /). */
int agent_http_start(struct agent *a, struct server **out, char **err);

#endif
