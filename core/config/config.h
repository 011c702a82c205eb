/*
 * config.h - the "MemoryTrim" configuration: one table of keys read by
 * generic code (parse, validate, patch, print). A struct mt_config is a plain
 * value; the instance keeps its copy under its own lock (see memtrim.c).
 */
#ifndef MEMTRIM_CONFIG_H
#define MEMTRIM_CONFIG_H

/* MallocArenaMax "auto" (the start resolves it: core/measure/cpuquota.c, core/alloc/tunables.c). */
#define MT_CONFIG_AUTO (-2)

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "types.h" /* MT_GROUP_NAME_MAX */

struct cJSON;

#define MT_CONFIG_STR_MAX 512

struct mt_config {
    int enabled;
    char http_bind[128]; /* an address, a name, or "unix:/absolute/path" */
    int http_port;     /* 0 = ephemeral */
    int http_threads;
    char auth_token[256]; /* "" = none */
    int read_requires_auth;
    double trim_interval_seconds; /* 0 = no periodic trims */
    int64_t trim_pad_bytes;
    int64_t trim_min_releasable_bytes;
    int64_t trim_releasable_trigger_bytes; /* 0 = no burst trims */
    double trim_min_gap_seconds;
    int64_t memory_limit_bytes; /* 0 = auto (cgroup) */
    double pressure_ratio;      /* 0 = no pressure trims */
    double sample_interval_seconds; /* 0 = no samples stored */
    double probe_budget_percent;
    int stats_max_age_ms;
    int manual_trim_min_interval_ms;
    char database[MT_CONFIG_STR_MAX]; /* "" = no store */
    double retention_hours;
    int follow_fork;       /* LD_PRELOAD: restart in a forked child */
    int group;             /* LD_PRELOAD, FollowFork with a fixed HttpPort: forked children
                            * join the serving process's worker group (core/group/) */
    /* LD_PRELOAD: processes started separately with one GroupName form a group (named.c) */
    char group_name[MT_GROUP_NAME_MAX + 1]; /* "" = none */
    char group_dir[MT_CONFIG_STR_MAX];      /* "" = $XDG_RUNTIME_DIR/memtrim, /run/memtrim, ... */
    int group_trim_slot_ms; /* a leader's stagger of its members' own trims in the zone
                             * (group_leader.c); 0 = members trim only when asked */
    int max_connections;        /* 0 = auto (server.c) */
    int max_connections_per_ip; /* 0 = auto */
    int connection_timeout_seconds; /* idle time */
    int request_timeout_seconds;    /* a whole request must arrive within this */
    int allow_unauthenticated_remote;
    char auth_token_file[MT_CONFIG_STR_MAX]; /* "" = none; read at start (token.c) */
    char allocator[32]; /* "auto", "glibc", "jemalloc", "tcmalloc", "mimalloc" */
    /* what trimming may cost the host (cost.c) */
    double trim_busy_cpu_percent;  /* periodic/burst trims wait while the host's CPU share is above; 0 = never */
    double trim_max_defer_seconds; /* ...but no longer than this; 0 = never wait */
    double trim_budget_percent;    /* share of wall time periodic + burst trims may take */
    double trim_gap_max_factor;    /* the adaptive gap's bound (1 = fixed gaps) */
    double refault_window_seconds; /* re-faults are counted this long after a trim */
    /* glibc malloc tunables (tunables.c applies them with mallopt); -1 = unset,
     * glibc's own behaviour untouched */
    int64_t malloc_arena_max;     /* or MT_CONFIG_AUTO: from the CPU quota at start */
    int64_t malloc_mmap_threshold_bytes;
    int64_t malloc_trim_threshold_bytes;
    int64_t malloc_top_pad_bytes;
    /* LD_PRELOAD: the programs memtrim starts in; fnmatch globs, '\n'-separated; "" = any */
    char program[MT_CONFIG_STR_MAX];
    /* LD_PRELOAD: where to publish the port bound ("%p" = the pid); "" = nowhere */
    char port_file[MT_CONFIG_STR_MAX];
    /* transport (docs/security.md) */
    char read_token[256];                    /* "" = none: the read scope (server/auth.c) */
    char read_token_file[MT_CONFIG_STR_MAX]; /* "" = none; read at start (token.c) */
    char https_certificate[MT_CONFIG_STR_MAX]; /* PEM; "" = plain HTTP */
    char https_private_key[MT_CONFIG_STR_MAX];
    char https_client_ca[MT_CONFIG_STR_MAX]; /* "" = no client certificates asked */
    char http_socket_mode[8];                /* octal, for a unix socket HttpBind */
    char http_socket_group[64];              /* "" = the host's own group */
};

/*
 * A GroupName: 1 to MT_GROUP_NAME_MAX bytes of letters, digits, '.', '_' and
 * '-', starting with a letter or digit (it names files in the group's
 * directory). 0, or -EINVAL with *err naming the key. Pure.
 */
int config_group_name_check(const char *name, char **err);

/* A unix socket's path holds this many bytes at most (sun_path, its NUL aside). */
#define MT_GROUP_SOCK_PATH_MAX 107
/* The length of the group's socket's path, <dir>/<name>.sock (dir's trailing '/'
 * dropped, as the group does). Pure. */
size_t config_group_sock_len(const char *dir, const char *name);

/* Fill *cfg with the defaults. */
void config_defaults(struct mt_config *cfg);

/*
 * Parse a configuration document (the section itself, or an object holding a
 * "MemoryTrim" section; NULL or "" = defaults) into *cfg. Returns 0, or
 * -EINVAL with *err (caller frees with free()) naming the key and the problem.
 */
int config_parse(const char *json, struct mt_config *cfg, char **err);

/* The same for an already parsed section object. */
int config_apply(const struct cJSON *section, struct mt_config *cfg, int runtime_only,
                 char **err);

/*
 * Runtime change (PATCH /config): only keys marked runtime-changeable;
 * validated whole before anything changes. Returns 0 or -EINVAL with *err.
 */
int config_patch(struct mt_config *cfg, const char *json, char **err);

/*
 * PATCH's floor for MemoryLimitBytes that depends on the process: a new
 * nonzero limit must be at least twice peak_rss (VmHWM), so that the host's
 * own peak stays below the pressure zone (which starts at half the limit).
 * 0, or -EINVAL with *err. Pure: the caller reads peak_rss (0 = unknown, no check);
 * group: it is a worker group's (its members' peaks summed: the message says so).
 */
int config_patch_limit_check(const struct mt_config *old, const struct mt_config *next,
                             uint64_t peak_rss, int group, char **err);

/* The effective configuration as a JSON object (CamelCase keys); the token is redacted. */
struct cJSON *config_to_json(const struct mt_config *cfg);

/*
 * AuthTokenFile and ReadTokenFile (token.c): when set, read each token from
 * its file into cfg->auth_token / cfg->read_token. Refuses a file its group or others may use (as ssh does),
 * one of another user, an empty or malformed token. 0, or a negative errno
 * with *err (caller frees).
 */
int config_read_token_file(struct mt_config *cfg, char **err);

/* A \u0000 escape in a configuration document's strings is refused, naming its key: cJSON
 * would cut the value short there (an AuthToken "\u0000secret" would mean no token).
 * section_only: only under a top-level "MemoryTrim" (a host's whole configuration, Orthanc's).
 * 0, or -EINVAL with *err (caller frees). */
int config_nul_check(const char *json, int section_only, char **err);

/* The rule every token follows, wherever it comes from (token.c): printable ASCII, no space,
 * no control character. 0, or -EINVAL with *err naming key (caller frees). */
int config_token_check(const char *key, const char *tok, char **err);

/* The closest known key to `key` (for "did you mean"), or NULL. */
const char *config_closest_key(const char *key);

/* The i-th key of the table (for tests and documentation): 0, or -1 past the end.
 * type is 'b' boolean, 'i' integer, 'd' number, 's' string, 'l' a string or a list of them. */
int config_key_info(size_t i, const char **name, char *type, double *min, double *max,
                    int *runtime);

/* What PATCH /config may set for the i-th key (a runtime key): [*lo, *hi], and 0 too when
 * *zero_allowed (0 turns it off, or means "auto"). -1 for a key PATCH cannot change.
 * MemoryLimitBytes has a floor that depends on the process besides (mt_config_patch). */
int config_key_patch_range(size_t i, double *lo, double *hi, int *zero_allowed);

/* Whether a key exists / may be changed at run time. */
int config_key_exists(const char *key);
int config_key_is_runtime(const char *key);

/*
 * The running configuration as the instance hands it to its threads (feed.c): the
 * instance owns the three; PATCH /config changes *cfg and bumps *generation under *lock.
 */
struct mt_config_feed {
    pthread_mutex_t *lock;
    const struct mt_config *cfg;
    const uint64_t *generation;
};

/* Copy the configuration into *out when its generation is not *generation (which then
 * follows it), or when first: 1 when it was copied. Takes the lock only to copy. */
int config_feed_read(const struct mt_config_feed *f, struct mt_config *out, uint64_t *generation,
                     int first);

#endif /* MEMTRIM_CONFIG_H */
