/*
 * scan.c - what the agent finds on the node: every cgroup with a memory limit on the v1
 * memory hierarchy and on v2 (a directory whose memory.limit_in_bytes / memory.max is set),
 * the processes in it and in its descendants without a limit of their own (the limit that
 * applies to them is the nearest one up the path), each process's allocator and whether
 * memtrim is loaded in it, read with the command's own code (cli/target.h: the same maps
 * reading and refusals the command applies); cgroups and processes that come and go are
 * added and dropped at each scan, at most MaxCgroups of them (those past it are counted, not
 * watched). Runs on the agent's loop thread, which holds a->lock
 * (agent.c) around every call here: HTTP readers see a scan whole or not at all.
 */
#include "agent_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common.h"
#include "control.h"
#include "target.h"

#define CGROUP2_SUPER_MAGIC 0x63677270
#define NO_LIMIT (1LL << 62) /* v1's "unlimited" is PAGE_COUNTER_MAX pages: above this */
#define SCAN_DEPTH 16

static int64_t read_num(const char *dir, const char *file)
{
    char path[AGENT_PATH + 128], buf[64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (mt_read_small(path, buf, sizeof buf) <= 0)
        return -1;
    if (!strncmp(buf, "max", 3))
        return -1;
    char *end;
    long long v = strtoll(buf, &end, 10);
    return end == buf || v < 0 || v >= NO_LIMIT ? -1 : v;
}

/* A "key value" file's value of key (memory.stat, memory.events, memory.oom_control). */
static int64_t read_key(const char *text, const char *key)
{
    size_t k = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, key, k) && p[k] == ' ')
            return strtoll(p + k + 1, NULL, 10);
    return -1;
}

void agent_cgroup_read(struct agent_cgroup *cg, int full)
{
    char path[AGENT_PATH + 128], text[8192];
    int v1 = cg->version == 1;
    cg->usage = read_num(cg->dir, v1 ? "memory.usage_in_bytes" : "memory.current");
    if (!full)
        return;
    cg->limit = read_num(cg->dir, v1 ? "memory.limit_in_bytes" : "memory.max");
    cg->high = v1 ? -1 : read_num(cg->dir, "memory.high");
    snprintf(path, sizeof path, "%s/memory.stat", cg->dir);
    if (mt_read_small(path, text, sizeof text) > 0) {
        cg->anon = read_key(text, v1 ? "total_rss" : "anon");
        cg->file = read_key(text, v1 ? "total_cache" : "file");
        cg->inactive_file = read_key(text, v1 ? "total_inactive_file" : "inactive_file");
        cg->reclaimable = target_stat_reclaimable(text, !v1);
    } else {
        cg->reclaimable = 0; /* the room as it was read without it */
    }
    cg->working_set = cg->usage < 0 ? -1 : cg->usage - (cg->inactive_file > 0 && cg->inactive_file <
                                                        cg->usage ? cg->inactive_file : 0);
    snprintf(path, sizeof path, "%s/%s", cg->dir, v1 ? "memory.oom_control" : "memory.events");
    if (mt_read_small(path, text, sizeof text) > 0) {
        int64_t k = read_key(text, "oom_kill");
        if (k >= 0)
            cg->oom_kills = (uint64_t)k;
    }
}

int agent_proc_read(pid_t pid, const char *file, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
    return mt_read_small(path, buf, size) > 0 ? 0 : -1;
}

/* RssAnon from /proc/PID/status (-1 unknown); name (when not NULL): its Name field. */
static int64_t proc_anon(pid_t pid, char *name, size_t namelen)
{
    char path[64], text[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if (name)
        name[0] = 0;
    if (mt_read_small(path, text, sizeof text) <= 0)
        return -1;
    if (name && !strncmp(text, "Name:\t", 6)) {
        size_t n = strcspn(text + 6, "\n");
        snprintf(name, namelen, "%.*s", (int)(n < namelen ? n : namelen - 1), text + 6);
    }
    const char *p = strstr(text, "\nRssAnon:");
    return p ? strtoll(p + 9, NULL, 10) * 1024 : -1;
}

static void identify(const struct agent_config *cfg, struct agent_proc *p);

int agent_memtrim_loaded(pid_t pid)
{
    struct target_lib lib;
    return target_find_lib(pid, "libmemtrim.so", &lib) == 0 ||
           target_find_lib(pid, "libOrthancMemTrim.so", &lib) == 0;
}

/* The file /proc/PID/exe names (the program it runs since its last execve): 0, or -1. */
static int exe_identity(pid_t pid, dev_t *dev, ino_t *ino)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    if (stat(path, &st) != 0)
        return -1;
    *dev = st.st_dev;
    *ino = st.st_ino;
    return 0;
}

/* Its image's mark: the start of its stack, of its arguments and of its environment
 * (/proc/PID/stat's startstack, arg_start, env_start), which each execve places anew, at
 * random (ASLR): a process that runs its own file again (a server's re-exec on upgrade or
 * reload) keeps its pid, start time and /proc/PID/exe, and is another image with another heap.
 * 0 unknown (a process without ASLR re-executing the same file with the same arguments and
 * environment keeps it: it is then taken for the same one). */
static uint64_t exec_mark(pid_t pid)
{
    char text[2048];
    if (agent_proc_read(pid, "stat", text, sizeof text) != 0)
        return 0;
    const char *p = strrchr(text, ')');
    if (!p || !p[1])
        return 0;
    uint64_t mark = 1469598103934665603ULL; /* FNV-1a over the three fields */
    p += 2;                                 /* ") " */
    p += strcspn(p, " ");                   /* field 3 (the state, a letter) */
    int field = 4;
    for (; *p && field <= 50; field++) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10); /* the fields after it are numbers */
        if (end == p)
            return 0;
        if (field == 28 || field == 48 || field == 50) /* startstack, arg_start, env_start */
            for (int b = 0; b < 8; b++)
                mark = (mark ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ULL;
        p = end;
    }
    return field > 50 ? mark : 0;
}

void agent_procs_refresh(struct agent *a, struct agent_cgroup *cg)
{
    for (size_t i = 0; i < cg->nprocs; i++) {
        struct agent_proc *p = &cg->procs[i];
        char name[64];
        p->anon = proc_anon(p->pid, name, sizeof name);
        if (!a || mt_control("agent-names-once")) /* the defect: read once, at first sight */
            continue;
        int ran_another;
        if (mt_control("agent-reread-on-rename")) { /* the defect: any prctl rename forces it */
            ran_another = name[0] && strcmp(name, p->comm);
        } else {
            dev_t dev;
            ino_t ino;
            ran_another = exe_identity(p->pid, &dev, &ino) == 0 && (p->exe_dev || p->exe_ino) &&
                          (dev != p->exe_dev || ino != p->exe_ino);
            uint64_t image = mt_control("agent-exec-same-file") ? 0 /* the defect: exe alone */
                                                                 : exec_mark(p->pid);
            ran_another |= image && p->image && image != p->image; /* the same file again */
        }
        if (ran_another) {
            /* it ran a program again (execve: same pid, same start time, a new image, heap
             * and maps; another file or the same): what it is is read again, what was learnt
             * of the old image (its refusals, what its trims gave back) dropped, its trim
             * counts kept */
            p->reason = AR_NONE;
            p->why[0] = 0;
            p->zero_trims = 0;
            p->last_released = 0;
            identify(&a->cfg, p);
        }
    }
}

/* A process first seen: what it is, read as the command reads it. */
static void identify(const struct agent_config *cfg, struct agent_proc *p)
{
    struct target t = {.pid = p->pid};
    char err[512], buf[512];
    p->reads++;
    if (exe_identity(p->pid, &p->exe_dev, &p->exe_ino) != 0)
        p->exe_dev = 0, p->exe_ino = 0;
    p->image = exec_mark(p->pid);
    p->anon = proc_anon(p->pid, NULL, 0);
    p->anon_after_trim = -1;
    if (target_read_status(p->pid, &t.st, err, sizeof err) != 0) {
        p->reason = AR_FAILED;
        snprintf(p->why, sizeof p->why, "%s", err);
        return;
    }
    snprintf(p->comm, sizeof p->comm, "%s", t.st.name);
    p->memtrim_loaded = agent_memtrim_loaded(p->pid);
    int found = target_find_alloc(&t, err, sizeof err);
    snprintf(p->alloc, sizeof p->alloc, "%s", target_alloc_name(t.alloc));
    const char *why;
    if (!agent_program_allowed(cfg, p->comm)) {
        p->reason = AR_DENIED;
        snprintf(p->why, sizeof p->why, "program '%s' is denied by the configuration", p->comm);
    } else if (p->memtrim_loaded) {
        /* a member like any other, asked through its own API (act.c, ask.c), never trimmed
         * from outside; its allocator is its memtrim's business */
    } else if (found != 0) {
        p->reason = t.alloc == ALLOC_MUSL ? AR_MUSL : t.alloc == ALLOC_STATIC ? AR_STATIC
                  : t.alloc == MT_ALLOC_glibc ? AR_FAILED : AR_RUNTIME;
        snprintf(p->why, sizeof p->why, "%s", err);
    } else if (t.st.seccomp == 1) {
        p->reason = AR_SECCOMP;
        snprintf(p->why, sizeof p->why, "process %d runs in seccomp strict mode", (int)p->pid);
    } else if ((why = target_refusal(p->pid, &t.st, buf, sizeof buf))) {
        p->reason = AR_KERNEL;
        snprintf(p->why, sizeof p->why, "%s", why);
    }
}

static struct agent_cgroup *find_cgroup(struct agent *a, int version, const char *path)
{
    for (size_t i = 0; i < a->ncgroups; i++)
        if (a->cgroups[i]->version == version && !strcmp(a->cgroups[i]->path, path))
            return a->cgroups[i];
    return NULL;
}

static struct agent_proc *find_pid(struct agent_cgroup *cg, pid_t pid)
{
    for (size_t i = 0; i < cg->nprocs; i++)
        if (cg->procs[i].pid == pid)
            return &cg->procs[i];
    return NULL;
}

/* The pids of dir's cgroup.procs, added to (or marked in) cg. */
static void read_procs(struct agent *a, struct agent_cgroup *cg, const char *dir)
{
    char path[AGENT_PATH + 128];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    long pid;
    pid_t self = getpid();
    while (fscanf(f, "%ld", &pid) == 1) {
        if (pid <= 0 || pid == self)
            continue;
        /* A pid already known here is that process (its start time is read when it is first
         * seen, and checked again by the command before anything is done to it); only a new
         * one costs a read of its stat. */
        struct agent_proc *p = find_pid(cg, (pid_t)pid);
        unsigned long long start = p ? p->start : target_start_time((pid_t)pid);
        if (!start)
            continue; /* gone already */
        if (!p) {
            if (cg->nprocs == cg->cap) {
                size_t cap = cg->cap ? cg->cap * 2 : 8;
                struct agent_proc *n = realloc(cg->procs, cap * sizeof *n);
                if (!n)
                    break;
                cg->procs = n;
                cg->cap = cap;
            }
            struct agent_proc np = {.pid = (pid_t)pid, .start = start};
            identify(&a->cfg, &np);
            p = &cg->procs[cg->nprocs++];
            *p = np;
        }
        p->seen = 1;
    }
    fclose(f);
}

static struct agent_cgroup *add_cgroup(struct agent *a, int version, const char *path,
                                       const char *dir)
{
    struct agent_cgroup *cg = calloc(1, sizeof *cg);
    if (!cg)
        return NULL;
    if (a->ncgroups == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        struct agent_cgroup **n = realloc(a->cgroups, cap * sizeof *n);
        if (!n) {
            free(cg);
            return NULL;
        }
        a->cgroups = n;
        a->cap = cap;
    }
    cg->ev_kind = AGENT_EV_CGROUP;
    cg->version = version;
    snprintf(cg->path, sizeof cg->path, "%s", path);
    snprintf(cg->dir, sizeof cg->dir, "%s", dir);
    agent_kind_parse(path, &cg->kind);
    cg->allowed = agent_cgroup_allowed(&a->cfg, path);
    cg->event_fd = cg->events_fd = -1;
    cg->usage = cg->anon = cg->file = cg->inactive_file = cg->working_set = cg->base_usage = -1;
    cg->reclaimable = 0;
    agent_cgroup_read(cg, 1);
    cg->oom_kills_at_near = cg->oom_kills;
    a->cgroups[a->ncgroups++] = cg;
    a->ndenied += !cg->allowed;
    if (agent_watch_arm(a, cg) != 0)
        mt_log(MT_LOG_INFO, "agent", "cgroup %s: no kernel wake-up, polled", path);
    mt_log(MT_LOG_INFO, "agent", "watching cgroup %s (v%d, %s, limit %lld)%s", path, version,
           agent_kind_name(cg->kind.kind), (long long)cg->limit, cg->allowed ? "" : " (denied)");
    return cg;
}

/* dir (path in its hierarchy): a cgroup with a limit is watched, and gets the processes of
 * its descendants that have none; owner is the nearest watched ancestor. */
static void walk(struct agent *a, int version, const char *root, const char *path,
                 struct agent_cgroup *owner, int depth)
{
    char dir[AGENT_PATH + 64];
    snprintf(dir, sizeof dir, "%s%s", root, path);
    int64_t limit = depth ? read_num(dir, version == 1 ? "memory.limit_in_bytes" : "memory.max") : -1;
    int64_t high = depth && version == 2 ? read_num(dir, "memory.high") : -1;
    if (limit > 0 || high > 0) {
        struct agent_cgroup *cg = find_cgroup(a, version, path);
        /* A cgroup the lists deny is only listed: it takes half of the room at most, so that
         * one a user makes outside AllowCgroups never keeps an allowed one out. */
        int denied = !cg && !agent_cgroup_allowed(&a->cfg, path) &&
                     !mt_control("agent-denied-fill") && /* the defect: denied ones fill it */
                     a->ndenied >= (size_t)a->cfg.max_cgroups / 2;
        if (!cg && (a->ncgroups >= (size_t)a->cfg.max_cgroups || denied) &&
            !mt_control("agent-cgroups-uncapped")) { /* the defect: no bound */
            /* Past MaxCgroups: not watched (no record, descriptor or series), counted and
             * reported by agent_scan. Its processes are nobody's: the limit that applies to
             * them is its own, not a watched ancestor's. */
            if (!a->unwatched++)
                snprintf(a->first_unwatched, sizeof a->first_unwatched, "%s", path);
            owner = NULL;
        } else {
            if (!cg)
                cg = add_cgroup(a, version, path, dir);
            if (cg) {
                cg->seen = 1;
                owner = cg;
            }
        }
    }
    if (owner && owner->allowed) /* a denied cgroup is listed, its processes never read */
        read_procs(a, owner, dir);
    if (depth >= SCAN_DEPTH)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_type != DT_DIR || e->d_name[0] == '.')
            continue;
        char sub[AGENT_PATH];
        int n = snprintf(sub, sizeof sub, "%s/%s", depth ? path : "", e->d_name);
        if (n > 0 && (size_t)n < sizeof sub)
            walk(a, version, root, sub, owner, depth + 1);
    }
    closedir(d);
}

void agent_rescan(struct agent *a, struct agent_cgroup *cg)
{
    walk(a, cg->version, cg->version == 1 ? a->cfg.v1_root : a->cfg.v2_root, cg->path, NULL, 1);
}

void agent_cgroup_free(struct agent_cgroup *cg)
{
    if (!cg)
        return;
    free(cg->procs);
    free(cg);
}

static int is_cgroup2(const char *root)
{
    struct statfs s;
    return root[0] && statfs(root, &s) == 0 && s.f_type == CGROUP2_SUPER_MAGIC;
}

/* The cgroups past MaxCgroups, a line at most every 10 minutes (their count is a metric). */
static struct mt_log_limit unwatched_log = MT_LOG_LIMIT_INIT(600 * MT_SEC, 1);

void agent_scan(struct agent *a)
{
    int64_t t0 = mt_mono_ns();
    a->unwatched = 0;
    a->ndenied = 0;
    for (size_t i = 0; i < a->ncgroups; i++) {
        a->ndenied += !a->cgroups[i]->allowed;
        a->cgroups[i]->seen = 0;
        for (size_t j = 0; j < a->cgroups[i]->nprocs; j++)
            a->cgroups[i]->procs[j].seen = 0;
    }
    if (a->cfg.v1_root[0] && access(a->cfg.v1_root, R_OK) == 0 && !is_cgroup2(a->cfg.v1_root))
        walk(a, 1, a->cfg.v1_root, "/", NULL, 0);
    if (is_cgroup2(a->cfg.v2_root))
        walk(a, 2, a->cfg.v2_root, "/", NULL, 0);
    /* Drop what is gone: cgroups removed, processes exited or moved away. */
    size_t k = 0;
    for (size_t i = 0; i < a->ncgroups; i++) {
        struct agent_cgroup *cg = a->cgroups[i];
        if (!cg->seen && !cg->busy) { /* one with a trim in flight goes once it is over */
            mt_log(MT_LOG_INFO, "agent", "cgroup %s is gone", cg->path);
            agent_watch_disarm(a, cg);
            agent_cgroup_free(cg);
            continue;
        }
        size_t m = 0;
        for (size_t j = 0; j < cg->nprocs; j++)
            if (cg->procs[j].seen || mt_control("agent-keeps-the-dead")) /* the defect: never dropped */
                cg->procs[m++] = cg->procs[j];
        cg->nprocs = m;
        a->cgroups[k++] = cg;
    }
    a->ncgroups = k;
    a->stats.cgroups_unwatched = a->unwatched;
    if (a->unwatched)
        mt_log_limited(&unwatched_log, MT_LOG_WARNING, "agent",
                       "%llu cgroups with a memory limit are not watched: the agent watches "
                       "MaxCgroups (%d) already (the first: %s)", (unsigned long long)a->unwatched, a->cfg.max_cgroups,
                       a->first_unwatched);
    a->stats.scans++;
    a->stats.scan_ms_last = (double)(mt_mono_ns() - t0) / 1e6;
}
