/*
 * cgroup.h - which memory cgroup this process is in, where its files are,
 * and what limits it, on cgroup v1, v2 and hybrid hosts.
 *
 * cgroup_lookup() is a pure function of three things: the text of
 * /proc/self/cgroup, the text of /proc/self/mountinfo and a filesystem root
 * prefixed to every mount point ("" on a real host; the tests build a fake
 * tree in a temporary directory). cgroup_read() then reads the limit files
 * up the path (v2: the lowest memory.max and the lowest memory.high from the
 * process's cgroup up to the root of the mount; v1: memory.limit_in_bytes up
 * the path and memory.stat's hierarchical_memory_limit), memory.current,
 * memory.stat (anon, file, shmem) and memory.events (high, max, oom,
 * oom_kill) of the cgroup that carries the limit.
 *
 * Threads: the lookup runs once at start; cgroup_read may run on any thread
 * (the descriptors it keeps are atomics, each opened once, so a host at its
 * descriptor limit still has its cgroup read). No locks, no allocation.
 * Every kept descriptor is checked to be still its file (device and inode)
 * before it is read or closed; one the host took is forgotten and reopened.
 */
#ifndef MEMTRIM_CGROUP_H
#define MEMTRIM_CGROUP_H

#include <limits.h>
#include <stdint.h>
#include "types.h"

#define CGROUP_LEVELS 16 /* the own cgroup and up to 15 ancestors below the mount */

enum cgroup_file { CG_FILE_MAX, CG_FILE_HIGH, CG_FILE_CURRENT, CG_FILE_STAT, CG_FILE_EVENTS,
                   CG_FILE_OOMCTL, CG_FILES };

struct cgroup_info {
    int version;   /* 0 none found, 1, 2 */
    int hybrid;    /* a v2 hierarchy beside the v1 memory controller */
    int read_only; /* the hierarchy is mounted read-only */
    int fallback;  /* the own cgroup's directory was not found: the mount's root stands for it */
    char path[1024];      /* the cgroup as /proc/self/cgroup names it ("/" in a namespace) */
    char mount[PATH_MAX]; /* where its hierarchy is mounted (with the filesystem root) */
    char dir[PATH_MAX];   /* its directory */
    int levels;           /* dir and its ancestors up to the mount's root: 1 or more */
    int lens[CGROUP_LEVELS]; /* level i's directory is dir[0 .. lens[i]) (0 own, 1 parent) */
    _Atomic int fd[CGROUP_LEVELS][CG_FILES]; /* kept descriptors: -1 not yet, -2 missing */
    /* ...and each one's identity (device, inode), set before fd is published and checked
     * before every read or close: a number the host closed and reused is left alone */
    _Atomic uint64_t fd_dev[CGROUP_LEVELS][CG_FILES], fd_ino[CGROUP_LEVELS][CG_FILES];
};

/* Find the cgroup. 0 (info filled) or -ENOENT (info->version 0). */
int cgroup_lookup(const char *proc_cgroup, const char *mountinfo, const char *fsroot,
                  struct cgroup_info *info);
/* Where another controller's cgroup of this process is (the CPU quota's, cpuquota.c): v1's
 * hierarchy with that controller, else v2's; same inputs as cgroup_lookup. 0 or -ENOENT. */
struct cgroup_place {
    int version;          /* 1 or 2 */
    char mount[PATH_MAX]; /* the hierarchy's mount point (with the filesystem root) */
    char dir[PATH_MAX];   /* the process's cgroup in it (the mount point when not found) */
};
int cgroup_controller_dir(const char *proc_cgroup, const char *mountinfo, const char *fsroot,
                          const char *controller, struct cgroup_place *out);

/* Close the kept descriptors (harmless twice, or on a zeroed info). */
void cgroup_close(struct cgroup_info *info);

/* Read the limits, usage, split and events into out's cgroup_* fields. */
void cgroup_read(struct cgroup_info *info, struct mt_cheap *out);

/* The usage alone (memory.current / memory.usage_in_bytes) of level's cgroup, one read
 * of a kept descriptor (the group's pressure poll); -1 unknown. */
int64_t cgroup_usage(struct cgroup_info *info, int level);

/* Level i's directory into buf ("" when there is no such level); returns buf. */
char *cgroup_level_dir(const struct cgroup_info *info, int level, char *buf, size_t size);
/* The file that set the limit, "/sys/fs/cgroup/a/memory.max"; "" none. Returns buf. */
char *cgroup_limit_source(const struct cgroup_info *info, const struct mt_cheap *c, char *buf,
                          size_t size);
/* A file's name for this version ("memory.max" or "memory.limit_in_bytes", ...); NULL none. */
const char *cgroup_file_name(int version, int file);

/* memory.events "high 3\nmax 0\n..." into events[MT_CG_EVENTS] (-1 where absent). 0 or -EINVAL. */
int cgroup_parse_events(const char *text, int64_t *events);
/* A flat-keyed file's value for key ("anon" in memory.stat); -1 absent. */
int64_t cgroup_key(const char *text, const char *key);

#endif /* MEMTRIM_CGROUP_H */
