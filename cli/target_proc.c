/*
 * target_proc.c - what target.h reads of a process besides its rules and maps: its RSS and
 * cgroup, its threads and the system call each waits in (and which of those are safe), its
 * start time, and the tree of its descendants. Plain reads of /proc; the tool's one thread.
 */
#include "target.h"

#include "../common/control.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct proc_entry {
    pid_t pid, ppid;
    unsigned long long start; /* clock ticks after boot: with the pid, the process's identity */
};

int64_t target_rss(pid_t pid)
{
    char path[64], buf[256];
    long long size, res;
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    if (target_read_file(path, buf, sizeof buf) <= 0 || sscanf(buf, "%lld %lld", &size, &res) != 2)
        return -1;
    return (int64_t)res * sysconf(_SC_PAGESIZE);
}

static int64_t read_i64(const char *path)
{
    char buf[64];
    if (target_read_file(path, buf, sizeof buf) <= 0)
        return -1;
    if (strncmp(buf, "max", 3) == 0)
        return -1;
    return strtoll(buf, NULL, 10);
}

void target_cgroup(pid_t pid, int *version, int64_t *usage, int64_t *max)
{
    char path[64], buf[4096], file[4600];
    *version = 0;
    *usage = *max = -1;
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    if (target_read_file(path, buf, sizeof buf) <= 0)
        return;
    const char *v2 = strstr(buf, "0::");
    if (!v2 || (v2 != buf && v2[-1] != '\n'))
        return;
    char cg[2048];
    if (sscanf(v2 + 3, "%2047[^\n]", cg) != 1)
        return;
    *version = 2;
    snprintf(file, sizeof file, "/sys/fs/cgroup%s/memory.current", strcmp(cg, "/") ? cg : "");
    *usage = read_i64(file);
    snprintf(file, sizeof file, "/sys/fs/cgroup%s/memory.max", strcmp(cg, "/") ? cg : "");
    *max = read_i64(file);
}

/* mountinfo's octal escapes (a space is \040) undone in place. */
static void mount_unescape(char *s)
{
    char *w = s;
    for (const char *r = s; *r; w++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w = (char)((r[1] - '0') << 6 | (r[2] - '0') << 3 | (r[3] - '0'));
            r += 4;
        } else {
            *w = *r++;
        }
    }
    *w = 0;
}

/* What cg (a cgroup's path as /proc/PID/cgroup prints it: relative to this command's cgroup
 * namespace, "/../../x" for one outside it) adds below a mount's root (mountinfo's fourth
 * field, relative to that namespace too), or NULL when the mount does not show it. */
static const char *below_root(const char *cg, const char *root)
{
    size_t n = strlen(root);
    if (!strcmp(root, "/")) /* shows ours and below it, never what is above ("/..") */
        return strncmp(cg, "/..", 3) || (cg[3] && cg[3] != '/') ? cg : NULL;
    if (strncmp(cg, root, n) || (cg[n] && cg[n] != '/'))
        return NULL;
    return cg[n] ? cg + n : "/";
}

/* Where the tool sees the cgroup cg of a hierarchy: the mount point of cgroup2, or of the v1
 * one with the controller (its super options name it, a word between commas), whose root
 * shows cg, in out, and what cg adds below that root in rel (the path walked up to the
 * mount's root); cgroup2's only where the controller is enabled at the mount's root. 0; -1
 * when the hierarchy is not mounted here (nothing to read, as before);
 * -2 when it is but no mount shows cg (the tool in a cgroup namespace that does not hold the
 * process's cgroup, as a container's own /sys/fs/cgroup: the mount point joined to
 * "/../../x" was no cgroup, and no limit was read). The control: the first mount of the
 * kind, its point joined to cg as printed. */
static int cgroup_mount(int v2, const char *controller, const char *cg, char *out, size_t len,
                        char *rel, size_t rlen)
{
    char line[4096], root[2048], dir[1024], type[64], opts[512], words[520], want[72];
    FILE *f = fopen("/proc/self/mountinfo", "re");
    int found = -1;
    if (!f)
        return -1;
    snprintf(want, sizeof want, ",%s,", controller);
    while (found && fgets(line, sizeof line, f)) {
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %2047s %1023s", root, dir) != 2 ||
            sscanf(dash + 3, "%63s %*s %511s", type, opts) != 2)
            continue;
        snprintf(words, sizeof words, ",%s,", opts);
        if (v2 ? strcmp(type, "cgroup2") : strcmp(type, "cgroup") || !strstr(words, want))
            continue;
        mount_unescape(root);
        mount_unescape(dir);
        if (v2) { /* the controller enabled there (a hybrid host's unified has none) */
            char file[1100], ctls[512], have[520];
            snprintf(file, sizeof file, "%s/cgroup.controllers", dir);
            if (target_read_file(file, ctls, sizeof ctls) <= 0)
                continue;
            for (char *c = ctls; *c; c++)
                *c = *c == ' ' || *c == '\n' ? ',' : *c;
            snprintf(have, sizeof have, ",%s,", ctls);
            if (!strstr(have, want))
                continue;
        }
        found = -2; /* mounted */
        const char *below = mt_control("cmd-cgroupns-unresolved") ? cg : below_root(cg, root);
        if (!below)
            continue;
        snprintf(out, len, "%s", dir);
        snprintf(rel, rlen, "%s", below);
        found = 0;
    }
    fclose(f);
    return found;
}

/* Every level of the cgroups in file (a process's or a thread's /proc cgroup file) for
 * controller, from its own up to each hierarchy's
 * root as a mount shows it (v2: the unified one; v1: the one mounted with the controller),
 * found through mountinfo's roots from this command's cgroup namespace too: each(dir, v2,
 * arg), each hierarchy begun with each(NULL, v2, arg). The hierarchies mounted here that no
 * mount shows the process's cgroup in, counted (the first one's path in hidden). */
static int cgroup_levels(const char *file, const char *controller,
                         void (*each)(const char *dir, int v2, void *arg), void *arg,
                         char *hidden, size_t hlen)
{
    char buf[4096], mnt[1024], dir[3100], want[72];
    int unseen = 0;
    if (target_read_file(file, buf, sizeof buf) <= 0)
        return 0;
    snprintf(want, sizeof want, ",%s,", controller);
    for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
        /* "ID:CONTROLLERS:PATH", the path to the line's end (a cgroup's name may hold spaces
         * and colons); v2's line is "0::PATH" */
        char ctl[256], cg[2048], rel[2048];
        const char *c1 = strchr(l, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || (size_t)(c2 - c1 - 1) >= sizeof ctl || strlen(c2 + 1) >= sizeof cg ||
            c2[1] != '/')
            continue;
        memcpy(ctl, c1 + 1, (size_t)(c2 - c1 - 1));
        ctl[c2 - c1 - 1] = 0;
        strcpy(cg, c2 + 1);
        int v2 = ctl[0] == 0 && !strncmp(l, "0:", 2);
        char have[272];
        snprintf(have, sizeof have, ",%s,", ctl);
        if (!v2 && !strstr(have, want))
            continue;
        int m = cgroup_mount(v2, controller, cg, mnt, sizeof mnt, rel, sizeof rel);
        if (m == -2 && !unseen++)
            snprintf(hidden, hlen, "%s", cg);
        if (m != 0)
            continue;
        each(NULL, v2, arg);
        for (size_t n = strlen(rel); n > 0 && n < sizeof dir - sizeof mnt; ) {
            rel[n] = 0;
            snprintf(dir, sizeof dir, "%s%s", mnt, strcmp(rel, "/") ? rel : "");
            each(dir, v2, arg);
            char *slash = strrchr(rel, '/');
            if (!slash || slash == rel)
                break;
            n = (size_t)(slash - rel);
        }
    }
    return unseen;
}

/* A hierarchy of the process's that no mount of the tool shows: its room is none (refused,
 * never guessed), where says why. */
static void levels_hidden(const char *hidden, const char *controller, int64_t *room,
                          char *where, size_t len)
{
    *room = 0;
    snprintf(where, len, "its %s cgroup %.1024s" TARGET_UNSEEN_WORDS ": it runs in another "
             "cgroup namespace; run it in the host's", controller, hidden);
}

/* memory.stat's value of key, at a line's start: 0 with *v set; -1 when absent or no byte
 * count (digits alone, under 2^62: a cgroup file no kernel writes otherwise). */
static int stat_key(const char *text, const char *key, int64_t *v)
{
    size_t k = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, k) || p[k] != ' ')
            continue;
        const char *d = p + k + 1;
        int64_t n = 0;
        if (*d < '0' || *d > '9')
            return -1;
        for (; *d >= '0' && *d <= '9'; d++) {
            /* checked before the step: n * 10 + 9 past INT64_MAX wrapped (undefined), and a
             * wrapped count came back under 2^62, a 20-digit figure read as any value, a
             * negative dirty count as more cache than the cgroup holds. The control: the old
             * check after the step (its wrap made explicit) */
            if (mt_control("cmd-stat-wrap")) {
                n = (int64_t)((uint64_t)n * 10u + (uint64_t)(*d - '0'));
                if (n >= (INT64_C(1) << 62))
                    return -1;
                continue;
            }
            if (n > ((INT64_C(1) << 62) - 1 - (*d - '0')) / 10)
                return -1;
            n = n * 10 + (*d - '0');
        }
        if (*d && *d != '\n')
            return -1;
        *v = n;
        return 0;
    }
    return -1;
}

int64_t target_stat_reclaimable(const char *stat, int v2)
{
    /* The clean page cache the kernel reclaims before it OOM-kills (docs/command-rules.md):
     * the inactive file pages less every dirty page, every page under writeback and every
     * mapped file page (on either list: a bound from below). v1 names its hierarchy's totals
     * total_*, its own pages alone without the prefix (a part of them); v2's are the
     * hierarchy's already. All four of one family, or nothing is counted. */
    static const char *const names[3][4] = {
        {"total_inactive_file", "total_dirty", "total_writeback", "total_mapped_file"},
        {"inactive_file", "dirty", "writeback", "mapped_file"},
        {"inactive_file", "file_dirty", "file_writeback", "file_mapped"}};
    if (!stat || mt_control("cmd-room-cache-unseen")) /* the old room: the cache unseen */
        return 0;
    for (int f = v2 ? 2 : 0; f < (v2 ? 3 : 2); f++) {
        int64_t v[4];
        int i = 0;
        while (i < 4 && stat_key(stat, names[f][i], &v[i]) == 0)
            i++;
        if (i < 4)
            continue;
        int64_t r = v[0];
        for (i = 1; i < 4; i++)
            r = r > v[i] ? r - v[i] : 0;
        return r;
    }
    return 0;
}

int64_t target_room_of(int64_t limit, int64_t usage, int64_t reclaimable)
{
    if (limit < 0 || limit >= INT64_MAX / 2 || usage < 0) /* "max", v1's LONG_MAX; unknown */
        return -1;
    /* what the cgroup holds that the kernel cannot reclaim: the cache counted up to the
     * usage, never past it (each figure is read apart; no sum overflows) */
    int64_t held = usage - (reclaimable > 0 ? (reclaimable < usage ? reclaimable : usage) : 0);
    return limit > held ? limit - held : 0;
}

#define CACHE_UNREAD INT64_MIN

/* A memory.stat's clean cache (target_stat_reclaimable), 0 when unreadable. */
static int64_t dir_reclaimable(const char *dir, int v2)
{
    char file[2700], text[8192];
    snprintf(file, sizeof file, "%s/memory.stat", dir);
    return target_read_file(file, text, sizeof text) > 0 ? target_stat_reclaimable(text, v2) : 0;
}

/* One level's room: limit - usage + the clean cache counted (*cache, read from stat_dir's
 * memory.stat the first time a limit needs it), where the limit is set; *room lowered,
 * *where named. */
static void level_room(const char *dir, const char *limit_file, const char *usage_file,
                       int64_t *cache, const char *stat_dir, int v2, int64_t *room, char *where,
                       size_t len)
{
    char file[2700];
    snprintf(file, sizeof file, "%s/%s", dir, limit_file);
    int64_t limit = read_i64(file);
    if (limit < 0 || limit >= INT64_MAX / 2) /* "max", or v1's page-rounded LONG_MAX */
        return;
    snprintf(file, sizeof file, "%s/%s", dir, usage_file);
    int64_t usage = read_i64(file);
    if (*cache == CACHE_UNREAD)
        *cache = dir_reclaimable(stat_dir, v2);
    int64_t r = target_room_of(limit, usage, *cache);
    if (r < 0)
        return;
    if (*room < 0 || r < *room) {
        *room = r;
        snprintf(where, len, "%s/%s", dir, limit_file);
    }
}

/* The memory room's walk: the tightest room so far, and one hierarchy's clean cache. */
struct mem_walk {
    int64_t room, own;
    int protected_below;
    char *where;
    size_t len;
    char leaf[2600];
};

static void mem_level(const char *dir, int v2, void *arg)
{
    struct mem_walk *w = arg;
    /* The clean cache a level's reclaim frees before the kernel OOM-kills (counted as room:
     * docs/command-rules.md). v1: the level's own totals (its whole subtree, which its reclaim
     * walks; v1 protects nothing from it). v2: the process's own cgroup's, a part of every
     * level's above, and none at a level once a cgroup below it on the path sets memory.min
     * (protected from that level's reclaim; memory.low is not: it yields before an OOM
     * kill). */
    if (!dir) { /* a hierarchy begins */
        w->own = CACHE_UNREAD;
        w->protected_below = 0;
        w->leaf[0] = 0;
        return;
    }
    if (v2) {
        if (!w->leaf[0])
            snprintf(w->leaf, sizeof w->leaf, "%s", dir);
        int64_t none = 0, *cache = w->protected_below ? &none : &w->own;
        level_room(dir, "memory.max", "memory.current", cache, w->leaf, 1, &w->room, w->where,
                   w->len);
        level_room(dir, "memory.high", "memory.current", cache, w->leaf, 1, &w->room, w->where,
                   w->len);
        char file[2700], m[64];
        snprintf(file, sizeof file, "%s/memory.min", dir);
        if (target_read_file(file, m, sizeof m) > 0 && strncmp(m, "0\n", 2))
            w->protected_below = 1; /* "max" or a byte count */
    } else {
        int64_t cache = CACHE_UNREAD;
        level_room(dir, "memory.limit_in_bytes", "memory.usage_in_bytes", &cache, dir, 0,
                   &w->room, w->where, w->len);
        level_room(dir, "memory.memsw.limit_in_bytes", "memory.memsw.usage_in_bytes", &cache,
                   dir, 0, &w->room, w->where, w->len);
    }
}

int64_t target_cgroup_room(pid_t pid, char *where, size_t len)
{
    struct mem_walk w = {.room = -1, .where = where, .len = len};
    char hidden[2048];
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    if (cgroup_levels(path, "memory", mem_level, &w, hidden, sizeof hidden))
        levels_hidden(hidden, "memory", &w.room, where, len);
    return w.room;
}

/* The pids room's walk: pids.max less pids.current at each level, v1 and v2 alike. */
struct pids_walk {
    int64_t room;
    char *where;
    size_t len;
};

static void pids_level(const char *dir, int v2, void *arg)
{
    struct pids_walk *w = arg;
    (void)v2;
    if (!dir)
        return;
    char file[2700];
    snprintf(file, sizeof file, "%s/pids.max", dir);
    int64_t limit = read_i64(file); /* "max": -1 */
    snprintf(file, sizeof file, "%s/pids.current", dir);
    int64_t r = target_room_of(limit, read_i64(file), 0);
    if (r >= 0 && (w->room < 0 || r < w->room)) {
        w->room = r;
        snprintf(w->where, w->len, "%s/pids.max", dir);
    }
}

int64_t target_pids_room(pid_t pid, char *where, size_t len)
{
    struct pids_walk w = {-1, where, len};
    char hidden[2048], other[2048], path[96], text[4096];
    /* Every thread's cgroups, each distinct set once: memtrim's threads join the taken
     * thread's, any safe thread may be taken, and v1's pids tasks and v2's threaded cgroups
     * place threads apart from their process (the control: the process's alone) */
    uint64_t seen[32];
    int nseen = 0, unseen = 0;
    static pid_t tids[4096]; /* (the tool's one thread) */
    int n = mt_control("cmd-pids-thread-cgroups") ? 0 : target_threads(pid, tids, 4096);
    if (n <= 0) {
        tids[0] = pid;
        n = 1;
    }
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/proc/%d/task/%d/cgroup", (int)pid, (int)tids[i]);
        if (target_read_file(path, text, sizeof text) <= 0)
            continue;
        uint64_t h = 1469598103934665603ull; /* FNV-1a of the thread's cgroup file */
        for (const char *c = text; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
        int dup = 0;
        for (int j = 0; j < nseen && !dup; j++)
            dup = seen[j] == h;
        if (dup)
            continue;
        if (nseen < (int)(sizeof seen / sizeof seen[0]))
            seen[nseen++] = h;
        if (cgroup_levels(path, "pids", pids_level, &w, unseen ? other : hidden,
                          sizeof hidden))
            unseen++;
    }
    if (unseen)
        levels_hidden(hidden, "pids", &w.room, where, len);
    return w.room;
}

/* A status text's field (key "\nName:", at a line's start: never inside the first line, the
 * process's name, which a process chooses) as a number in base, 0 with *v set; -1 absent. */
static int status_field(const char *text, const char *key, int base, unsigned long long *v)
{
    const char *p = strstr(text, key);
    if (!p)
        return -1;
    char *end;
    errno = 0;
    *v = strtoull(p + strlen(key), &end, base);
    return errno || end == p + strlen(key) ? -1 : 0;
}

int64_t target_nproc_limit(const char *limits)
{
    unsigned long long limit;
    const char *l = limits ? strstr(limits, "\nMax processes") : NULL;
    if (!l || sscanf(l + 14, "%llu", &limit) != 1) /* "unlimited" reads as none */
        return -1;
    /* a soft limit at or past INT64_MAX (2^63: set below RLIM_INFINITY, printed as a number)
     * binds no count of tasks; the control: cast as it is, a negative limit, no room */
    if (limit >= (unsigned long long)INT64_MAX && !mt_control("cmd-nproc-wrap"))
        return -1;
    return (int64_t)limit;
}

int64_t target_nproc_room(pid_t pid, uid_t ruid, char *where, size_t len)
{
    char path[64], buf[8192];
    unsigned long long caps, uid, threads;
    /* the kernel's exemptions: the real uid root, CAP_SYS_RESOURCE or CAP_SYS_ADMIN; and the
     * counts of another user namespace are its own (not read) */
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if (ruid == 0 || !target_same_ns(pid, "user") || target_read_file(path, buf, sizeof buf) <= 0 ||
        status_field(buf, "\nCapEff:", 16, &caps) != 0 || caps & (1ull << 21 | 1ull << 24))
        return -1;
    snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
    int64_t limit = target_read_file(path, buf, sizeof buf) > 0 ? target_nproc_limit(buf) : -1;
    if (limit == -1)
        return -1;
    /* every task of that real uid: each process's threads (from this pid namespace, which
     * sees those of the namespaces below it) */
    DIR *d = opendir("/proc");
    int64_t tasks = 0;
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] >= '1' && e->d_name[0] <= '9') {
            snprintf(path, sizeof path, "/proc/%.20s/status", e->d_name);
            if (target_read_file(path, buf, sizeof buf) > 0 &&
                status_field(buf, "\nUid:", 10, &uid) == 0 && uid == ruid &&
                status_field(buf, "\nThreads:", 10, &threads) == 0)
                tasks += (int64_t)threads;
        }
    closedir(d);
    snprintf(where, len, "RLIMIT_NPROC %lld of /proc/%d/limits, uid %u runs %lld tasks",
             (long long)limit, (int)pid, (unsigned)ruid, (long long)tasks);
    return limit > tasks ? limit - tasks : 0;
}

long target_parse_syscall(const char *buf, uint64_t args[7])
{
    long nr;
    memset(args, 0, 7 * sizeof args[0]);
    if (strncmp(buf, "running", 7) == 0)
        return -2;
    int n = sscanf(buf, "%ld %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64
                   " %" SCNx64, &nr, &args[0], &args[1], &args[2], &args[3], &args[4], &args[5],
                   &args[6]);
    if (n < 1)
        return -2;
    return nr < 0 ? -1 : nr;
}

long target_thread_syscall(pid_t pid, pid_t tid, uint64_t args[7])
{
    char path[96], buf[512];
    snprintf(path, sizeof path, "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
    if (target_read_file(path, buf, sizeof buf) <= 0) {
        memset(args, 0, 7 * sizeof args[0]);
        return -2;
    }
    return target_parse_syscall(buf, args);
}

/* A process's parent and start time (stat's fourth and 22nd fields, after the name's last
 * ')': a name may hold ')' and spaces); -1 if it is gone. */
static int stat_fields(const char *pid, pid_t *ppid, unsigned long long *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    if (target_read_file(path, buf, sizeof buf) <= 0)
        return -1;
    return target_parse_stat(buf, ppid, start);
}

int target_parse_stat(const char *buf, pid_t *ppid, unsigned long long *start)
{
    const char *p = strrchr(buf, ')');
    int pp;
    /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
     * cutime cstime priority nice num_threads itrealvalue starttime */
    if (!p || sscanf(p + 1, " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                     "%*d %*d %llu", &pp, start) != 2)
        return -1;
    *ppid = (pid_t)pp;
    return 0;
}

unsigned long long target_start_time(pid_t pid)
{
    char num[16];
    pid_t pp;
    unsigned long long start;
    snprintf(num, sizeof num, "%d", (int)pid);
    return stat_fields(num, &pp, &start) == 0 ? start : 0;
}

/* Every process's pid, parent and start time, read once from /proc; their count (-1 on an
 * allocation failure). */
static long read_procs(struct proc_entry **all)
{
    size_t len = 0, cap = 1024;
    *all = malloc(cap * sizeof **all);
    DIR *d = opendir("/proc");
    if (!*all || !d) {
        free(*all);
        *all = NULL;
        if (d)
            closedir(d);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        struct proc_entry pe;
        if (e->d_name[0] < '1' || e->d_name[0] > '9' ||
            stat_fields(e->d_name, &pe.ppid, &pe.start) != 0 || pe.ppid <= 0)
            continue;
        if (len == cap) {
            void *n = cap < (SIZE_MAX / sizeof **all) / 2 ? realloc(*all, 2 * cap * sizeof **all)
                                                          : NULL;
            if (!n)
                break;
            *all = n;
            cap *= 2;
        }
        pe.pid = (pid_t)atoi(e->d_name);
        (*all)[len++] = pe;
    }
    closedir(d);
    return (long)len;
}

int target_tree(pid_t pid, pid_t *out, unsigned long long *start, int max)
{
    start[0] = target_start_time(pid);
    if (max < 1 || !start[0])
        return 0;
    out[0] = pid;
    struct proc_entry *all;
    long len = read_procs(&all);
    if (len < 0)
        return 1;
    /* Breadth first: out[0..n) is the queue; a pid is added once (a reused pid cannot make a
     * cycle within one reading, but the check costs nothing). */
    int n = 1;
    for (int head = 0; head < n && n < max; head++)
        for (long i = 0; i < len && n < max; i++) {
            if (all[i].ppid != out[head])
                continue;
            int seen = 0;
            for (int k = 0; k < n && !seen; k++)
                seen = out[k] == all[i].pid;
            if (!seen) {
                start[n] = all[i].start;
                out[n++] = all[i].pid;
            }
        }
    free(all);
    return n;
}

int target_threads(pid_t pid, pid_t *tids, int max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    int n = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max)
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
            tids[n++] = (pid_t)atoi(e->d_name);
    closedir(d);
    return n;
}

/* The system calls a thread may be taken in: blocking waits the kernel restarts exactly once
 * the tool puts the thread's registers back at a ptrace stop (-ERESTART*; or -EINTR for a
 * wait with no timeout, given back as -ERESTARTNOHAND). Not those that swap the signal mask
 * for the wait unless without one (the kernel's saved mask would replace the one set for
 * memtrim's code), not those with a timeout that returns EINTR when interrupted (a restart
 * would wait the whole timeout again): epoll_wait's and sigtimedwait's, recvmmsg's. */
static const struct {
    long nr;
    const char *name;
    int mask_arg;    /* the argument holding a temporary signal mask, -1 for none */
    int timeout_arg; /* the argument holding a timeout that must be infinite, -1 for none */
    int timeout_int; /* 1: an int, infinite when negative; 0: a pointer, infinite when NULL */
} safe_calls[] = {
    {SYS_read, "read", -1, -1, 0},           {SYS_readv, "readv", -1, -1, 0},
    {SYS_recvfrom, "recvfrom", -1, -1, 0},   {SYS_recvmsg, "recvmsg", -1, -1, 0},
    {SYS_recvmmsg, "recvmmsg", -1, 4, 0},    {SYS_accept, "accept", -1, -1, 0},
    {SYS_accept4, "accept4", -1, -1, 0},     {SYS_poll, "poll", -1, -1, 0},
    {SYS_ppoll, "ppoll", 3, -1, 0},          {SYS_select, "select", -1, -1, 0},
    {SYS_pselect6, "pselect6", 5, -1, 0},    {SYS_epoll_wait, "epoll_wait", -1, 3, 1},
    {SYS_epoll_pwait, "epoll_pwait", 4, 3, 1}, {SYS_epoll_pwait2, "epoll_pwait2", 4, 3, 0},
    {SYS_nanosleep, "nanosleep", -1, -1, 0}, {SYS_clock_nanosleep, "clock_nanosleep", -1, -1, 0},
    {SYS_wait4, "wait4", -1, -1, 0},         {SYS_waitid, "waitid", -1, -1, 0},
    {SYS_pause, "pause", -1, -1, 0},         {SYS_rt_sigtimedwait, "rt_sigtimedwait", -1, 2, 0},
    {SYS_msgrcv, "msgrcv", -1, -1, 0},
    /* a wait the kernel already restarts with its restart block (poll, a sleep, a timed futex)
     * after an earlier stop: the same again */
    {SYS_restart_syscall, "restart_syscall", -1, -1, 0},
};

int target_syscall_safe(long nr, const uint64_t args[6])
{
    for (size_t i = 0; i < sizeof safe_calls / sizeof safe_calls[0]; i++) {
        if (safe_calls[i].nr != nr)
            continue;
        int t = safe_calls[i].timeout_arg;
        if (safe_calls[i].mask_arg >= 0 && args[safe_calls[i].mask_arg] != 0)
            return 0;
        if (mt_control("cmd-eintr-passthrough"))
            return 1;
        return t < 0 || (safe_calls[i].timeout_int ? (int32_t)args[t] < 0 : args[t] == 0);
    }
    return 0;
}

int target_thread_count(pid_t pid)
{
    struct target_status st;
    char err[256];
    return target_read_status(pid, &st, err, sizeof err) == 0 ? st.threads : -1;
}

const char *target_syscall_name(long nr)
{
    static const struct {
        long nr;
        const char *name;
    } others[] = {{SYS_futex, "futex"}, {SYS_mmap, "mmap"}, {SYS_munmap, "munmap"},
                  {SYS_madvise, "madvise"}, {SYS_brk, "brk"}, {SYS_mprotect, "mprotect"},
                  {SYS_openat, "openat"}, {SYS_rt_sigsuspend, "rt_sigsuspend"},
                  {SYS_write, "write"}, {SYS_sched_yield, "sched_yield"},
                  {SYS_connect, "connect"}};
    for (size_t i = 0; i < sizeof safe_calls / sizeof safe_calls[0]; i++)
        if (safe_calls[i].nr == nr)
            return safe_calls[i].name;
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (others[i].nr == nr)
            return others[i].name;
    return NULL;
}

int target_parse_shstk(const char *status)
{
    struct target_status st;
    target_parse_status(status, &st);
    return st.shstk && !mt_control("cmd-shstk-taken");
}

int target_thread_shstk(pid_t pid, pid_t tid)
{
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pid, (int)tid);
    return target_read_file(path, buf, sizeof buf) > 0 && target_parse_shstk(buf);
}

int target_same_ns(pid_t pid, const char *ns)
{
    char a[64], b[64];
    struct stat sa, sb;
    snprintf(a, sizeof a, "/proc/self/ns/%s", ns);
    snprintf(b, sizeof b, "/proc/%d/ns/%s", (int)pid, ns);
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_ino == sb.st_ino &&
           sa.st_dev == sb.st_dev;
}
