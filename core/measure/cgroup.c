/*
 * cgroup.c - find this process's memory cgroup and read what limits it (see
 * cgroup.h). Lookup: /proc/self/cgroup says which cgroup ("N:memory:/path"
 * lines on v1, "0::/path" on v2, both on hybrid hosts; "0::/" inside a cgroup
 * namespace; the path is everything after the second ':', spaces and colons
 * included); /proc/self/mountinfo says where each hierarchy is mounted and
 * which cgroup is the mount's root (a container's bind mount or a namespace
 * shows its own cgroup as "/"). The directory is the mount point plus the
 * path below the mount's root; when it does not exist (a container that
 * mounted its own cgroup without a namespace), the mount's root stands for it.
 *
 * Threads: cgroup_lookup at start (snapshot_init); cgroup_read from whichever
 * thread probes (snapshot.c keeps one at a time, tests and benches call it
 * directly): its descriptors are atomics, opened once (compare-exchange), so
 * a race opens twice and closes one. No locks, no allocation.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup.h"
#include "common.h"
#include "fdid.h"

#define NO_LIMIT_V1 ((int64_t)1 << 60) /* v1 reports "unlimited" as ~2^63 rounded to pages */

static const char *const v2_files[CG_FILES] = {"memory.max", "memory.high", "memory.current",
                                               "memory.stat", "memory.events", NULL};
static const char *const v1_files[CG_FILES] = {"memory.limit_in_bytes", NULL,
                                               "memory.usage_in_bytes", "memory.stat",
                                               "memory.failcnt", "memory.oom_control"};

const char *cgroup_file_name(int version, int file)
{
    if (file < 0 || file >= CG_FILES)
        return NULL;
    return version == 2 ? v2_files[file] : version == 1 ? v1_files[file] : NULL;
}

/* ---- parsing ------------------------------------------------------------ */

/* A mountinfo field with its octal escapes (\040 space, \011, \012, \134) undone. */
static void unescape(char *out, size_t size, const char *in, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < size; i++) {
        if (in[i] == '\\' && i + 3 < len && in[i + 1] >= '0' &&
            in[i + 1] <= '3' && in[i + 2] >= '0' && in[i + 2] <= '7' && in[i + 3] >= '0' &&
            in[i + 3] <= '7') {
            out[o++] = (char)((in[i + 1] - '0') * 64 + (in[i + 2] - '0') * 8 + (in[i + 3] - '0'));
            i += 3;
        } else {
            out[o++] = in[i];
        }
    }
    out[o] = '\0';
}

/* Whether the comma-separated list [s, s+len) holds token. */
static int has_token(const char *s, size_t len, const char *token)
{
    size_t t = strlen(token);
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && s[j] != ',')
            j++;
        if (j - i == t && memcmp(s + i, token, t) == 0)
            return 1;
        i = j + 1;
    }
    return 0;
}

/* path lies at or below root ("/" holds everything). */
static int under(const char *path, const char *root)
{
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/')
        return 1;
    return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

struct mount_pick {
    int found;
    int matched;  /* its root holds the process's path */
    size_t root_len;
    int read_only;
    char point[PATH_MAX];
    char root[1024];
};

/*
 * One mountinfo line: "36 35 98:0 /root /point rw,nosuid - cgroup2 cgroup2 rw,...".
 * want 2: a cgroup2 mount; want 1: a v1 cgroup mount with controller ("memory", "cpu").
 * The best is the one whose root holds path, the longest such root; else the first.
 */
static void consider_mount(const char *line, size_t len, int want, const char *controller,
                           const char *path, struct mount_pick *pick)
{
    const char *f[6], *end = line + len;
    size_t flen[6];
    const char *p = line;
    for (int i = 0; i < 6; i++) {
        while (p < end && *p == ' ')
            p++;
        f[i] = p;
        while (p < end && *p != ' ')
            p++;
        flen[i] = (size_t)(p - f[i]);
        if (flen[i] == 0)
            return;
    }
    /* optional fields up to the lone "-" */
    const char *dash = NULL;
    for (const char *q = p; q + 2 < end; q++)
        if (q[0] == ' ' && q[1] == '-' && q[2] == ' ') {
            dash = q + 3;
            break;
        }
    if (!dash)
        return;
    const char *type = dash, *t_end = dash;
    while (t_end < end && *t_end != ' ')
        t_end++;
    const char *src = t_end + (t_end < end), *s_end = src;
    while (s_end < end && *s_end != ' ')
        s_end++;
    const char *opts = s_end + (s_end < end);
    size_t olen = (size_t)(end - opts);
    size_t tlen = (size_t)(t_end - type);
    if (want == 2 && !(tlen == 7 && memcmp(type, "cgroup2", 7) == 0))
        return;
    if (want == 1 && !(tlen == 6 && memcmp(type, "cgroup", 6) == 0 &&
                       has_token(opts, olen, controller)))
        return;
    char root[1024];
    unescape(root, sizeof(root), f[3], flen[3]);
    int matched = under(path, root);
    size_t rl = strlen(root);
    if (pick->found && (!matched || (pick->matched && rl <= pick->root_len)))
        return;
    pick->found = 1;
    pick->matched = matched;
    pick->root_len = rl;
    snprintf(pick->root, sizeof(pick->root), "%s", root);
    unescape(pick->point, sizeof(pick->point), f[4], flen[4]);
    pick->read_only = has_token(f[5], flen[5], "ro") || has_token(opts, olen, "ro");
}

static void find_mount_of(const char *mountinfo, int want, const char *controller,
                          const char *path, struct mount_pick *pick)
{
    memset(pick, 0, sizeof(*pick));
    for (const char *line = mountinfo; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        consider_mount(line, len, want, controller, path, pick);
        line = nl ? nl + 1 : NULL;
    }
}

static void find_mount(const char *mountinfo, int want, const char *path, struct mount_pick *pick)
{
    find_mount_of(mountinfo, want, "memory", path, pick);
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists_in(const char *dir, const char *file)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    return access(path, F_OK) == 0;
}

/* The mount point (with fsroot) and the directory of path below it: dir is the mount point
 * (*fallback set) when the path is not below the mount's root, does not fit or is not there.
 * 0, or -ENOENT. */
static int dir_below(const struct mount_pick *m, const char *fsroot, const char *path,
                     char *point, size_t psize, char *dir, size_t dsize, int *fallback)
{
    snprintf(point, psize, "%.1000s%.3000s", fsroot, m->point);
    size_t pl = strlen(point);
    while (pl > 1 && point[pl - 1] == '/')
        point[--pl] = '\0';
    const char *below = "";
    *fallback = !m->matched || strstr(path, "/..") != NULL;
    if (!*fallback) {
        below = path + (strcmp(m->root, "/") == 0 ? 0 : strlen(m->root));
        if (strcmp(below, "/") == 0)
            below = "";
    }
    /* A path that does not fit is not this process's cgroup cut short: the mount point. */
    int n = snprintf(dir, dsize, "%s%s", point, below);
    if (n < 0 || (size_t)n >= dsize || !is_dir(dir)) {
        *fallback = 1;
        snprintf(dir, dsize, "%s", point);
    }
    return is_dir(dir) ? 0 : -ENOENT;
}

/* /proc/self/cgroup's paths ("id:controllers:path", the path all that follows the second
 * ':'): the v1 hierarchy's with controller, and v2's ("0::"); 1024 bytes each. */
static void cgroup_paths(const char *proc_cgroup, const char *controller, char *v1path,
                         int *have_v1, char *v2path, int *have_v2)
{
    for (const char *line = proc_cgroup; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (c2) {
            size_t plen = len - (size_t)(c2 + 1 - line), clen = (size_t)(c2 - c1 - 1);
            char *to = NULL;
            if (c1 - line == 1 && line[0] == '0' && clen == 0)
                to = v2path, *have_v2 = 1;
            else if (has_token(c1 + 1, clen, controller))
                to = v1path, *have_v1 = 1;
            if (to)
                snprintf(to, 1024, "%.*s", (int)(plen < 1023 ? plen : 1023), c2 + 1);
        }
        line = nl ? nl + 1 : NULL;
    }
}

int cgroup_controller_dir(const char *proc_cgroup, const char *mountinfo, const char *fsroot,
                          const char *controller, struct cgroup_place *out)
{
    memset(out, 0, sizeof(*out));
    char v1path[1024] = "", v2path[1024] = "";
    int have_v1 = 0, have_v2 = 0;
    cgroup_paths(proc_cgroup, controller, v1path, &have_v1, v2path, &have_v2);
    struct mount_pick m;
    for (int version = 1; version <= 2; version++) {
        const char *path = version == 1 ? v1path : v2path;
        if (!(version == 1 ? have_v1 : have_v2))
            continue;
        find_mount_of(mountinfo ? mountinfo : "", version, controller, path[0] ? path : "/", &m);
        int fallback;
        if (m.found && dir_below(&m, fsroot ? fsroot : "", path[0] ? path : "/", out->mount,
                                 sizeof(out->mount), out->dir, sizeof(out->dir), &fallback) == 0) {
            out->version = version;
            return 0;
        }
    }
    return -ENOENT;
}

/* The directory for the process's path under a mount; 0 or -ENOENT. */
static int place(struct cgroup_info *info, const struct mount_pick *m, const char *fsroot,
                 int version)
{
    char point[PATH_MAX];
    int fallback;
    if (dir_below(m, fsroot, info->path, point, sizeof(point), info->dir, sizeof(info->dir),
                  &fallback) != 0)
        return -ENOENT;
    size_t pl = strlen(point);
    snprintf(info->mount, sizeof(info->mount), "%s", point);
    info->fallback = fallback;
    info->read_only = m->read_only;
    /* The levels: the directory, then each parent down to the mount point. */
    size_t len = strlen(info->dir);
    info->levels = 0;
    for (;;) {
        info->lens[info->levels++] = (int)len;
        if (len <= pl || info->levels == CGROUP_LEVELS)
            break;
        while (len > pl && info->dir[len - 1] != '/')
            len--;
        if (len > pl)
            len--; /* the slash */
        if (len < pl)
            len = pl;
    }
    /* A memory cgroup: v1's controller mount is one; on v2 some level has the
     * memory files (the real root has none), or the root enables the controller. */
    if (version == 1)
        return 0;
    char lvl[PATH_MAX], ctl[512];
    for (int i = 0; i < info->levels; i++) {
        cgroup_level_dir(info, i, lvl, sizeof(lvl));
        if (exists_in(lvl, "memory.max") || exists_in(lvl, "memory.current"))
            return 0;
    }
    snprintf(lvl, sizeof(lvl), "%.4000s/cgroup.controllers", point);
    if (mt_read_small(lvl, ctl, sizeof(ctl)) > 0) {
        for (char *save = NULL, *t = strtok_r(ctl, " \n", &save); t; t = strtok_r(NULL, " \n", &save))
            if (strcmp(t, "memory") == 0)
                return 0;
    }
    return -ENOENT;
}

static void warm(struct cgroup_info *info);

int cgroup_lookup(const char *proc_cgroup, const char *mountinfo, const char *fsroot,
                  struct cgroup_info *info)
{
    char v1path[1024] = "", v2path[1024] = "";
    int have_v1 = 0, have_v2 = 0;

    memset(info, 0, sizeof(*info));
    for (int i = 0; i < CGROUP_LEVELS; i++)
        for (int f = 0; f < CG_FILES; f++)
            atomic_init(&info->fd[i][f], -1);
    if (!fsroot)
        fsroot = "";
    cgroup_paths(proc_cgroup, "memory", v1path, &have_v1, v2path, &have_v2);
    struct mount_pick m;
    if (have_v1) {
        snprintf(info->path, sizeof(info->path), "%s", v1path[0] ? v1path : "/");
        find_mount(mountinfo ? mountinfo : "", 1, info->path, &m);
        if (m.found && place(info, &m, fsroot, 1) == 0) {
            struct mount_pick v2m;
            find_mount(mountinfo ? mountinfo : "", 2, "/", &v2m);
            info->version = 1;
            info->hybrid = have_v2 && v2m.found; /* a 0:: line alone is no v2 hierarchy */
            warm(info);
            return 0;
        }
    }
    if (have_v2) {
        snprintf(info->path, sizeof(info->path), "%s", v2path[0] ? v2path : "/");
        find_mount(mountinfo ? mountinfo : "", 2, info->path, &m);
        if (m.found && place(info, &m, fsroot, 2) == 0) {
            info->version = 2;
            info->hybrid = have_v1;
            warm(info);
            return 0;
        }
    }
    memset(info, 0, sizeof(*info));
    for (int i = 0; i < CGROUP_LEVELS; i++)
        for (int f = 0; f < CG_FILES; f++)
            atomic_init(&info->fd[i][f], -1);
    return -ENOENT;
}

/* Slot (level, file)'s identity, as fdid.h's list has it. */
static void slot_id(struct cgroup_info *info, int level, int file, struct mt_fdid *id)
{
    mt_fdid_file(atomic_load(&info->fd_dev[level][file]), atomic_load(&info->fd_ino[level][file]),
                 id);
}

/* fd is still the file kept in slot (level, file), and memtrim's open of it: same device
 * and inode, a regular file, and the stamp (fdid.h): a host's own open of that very file at
 * the number is not. */
static int still(struct cgroup_info *info, int level, int file, int fd)
{
    struct mt_fdid id;
    slot_id(info, level, file, &id);
    return mt_fdid_is(fd, &id);
}

void cgroup_close(struct cgroup_info *info)
{
    if (!info->version)
        return;
    for (int i = 0; i < CGROUP_LEVELS; i++)
        for (int f = 0; f < CG_FILES; f++) {
            int fd = atomic_exchange(&info->fd[i][f], -1);
            struct mt_fdid id;
            slot_id(info, i, f, &id);
            mt_fdid_unlist(fd, &id); /* before the close (fdid.h) */
            if (fd >= 0 && still(info, i, f, fd))
                close(fd); /* else the host's file now: left alone */
        }
}

char *cgroup_level_dir(const struct cgroup_info *info, int level, char *buf, size_t size)
{
    if (level < 0 || level >= info->levels) {
        if (size)
            buf[0] = '\0';
        return buf;
    }
    snprintf(buf, size, "%.*s", info->lens[level], info->dir);
    return buf;
}

char *cgroup_limit_source(const struct cgroup_info *info, const struct mt_cheap *c, char *buf,
                          size_t size)
{
    char dir[PATH_MAX];
    const char *file = NULL;
    switch (c->cgroup_limit_kind) {
    case MT_CG_LIMIT_MAX:
        file = "memory.max";
        break;
    case MT_CG_LIMIT_HIGH:
        file = "memory.high";
        break;
    case MT_CG_LIMIT_V1:
        file = "memory.limit_in_bytes";
        break;
    case MT_CG_LIMIT_V1_HIER:
        file = "memory.stat hierarchical_memory_limit";
        break;
    default:
        break;
    }
    if (!file || c->cgroup_limit_level < 0) {
        if (size)
            buf[0] = '\0';
        return buf;
    }
    cgroup_level_dir(info, c->cgroup_limit_level, dir, sizeof(dir));
    snprintf(buf, size, "%.3000s/%s", dir, file);
    return buf;
}

/* ---- reading ------------------------------------------------------------ */

/* The kept descriptor of a level's file; opened on first use; <0 when it cannot be. */
static int kept(struct cgroup_info *info, int level, int file)
{
    int fd = atomic_load(&info->fd[level][file]);
    if (fd == -2 || (fd >= 0 && still(info, level, file, fd)))
        return fd;
    if (fd >= 0) { /* closed and reused by someone else: forget the number, open ours again */
        int was = fd;
        struct mt_fdid id;
        slot_id(info, level, file, &id);
        if (atomic_compare_exchange_strong(&info->fd[level][file], &was, -1) &&
            (mt_fdid_unlist(fd, &id), 1))
            mt_log(MT_LOG_WARNING, "fd", "descriptor %d (a cgroup file) was closed by someone "
                                         "else in pid %ld (the host?): left alone, reopened",
                   fd, (long)getpid());
    }
    const char *name = cgroup_file_name(info->version, file);
    if (!name) {
        atomic_store(&info->fd[level][file], -2);
        return -2;
    }
    char dir[PATH_MAX], path[PATH_MAX + 64];
    cgroup_level_dir(info, level, dir, sizeof(dir));
    snprintf(path, sizeof(path), "%.4000s/%s", dir, name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) /* missing stays missing; out of descriptors is tried again */
        return errno == ENOENT ? (atomic_store(&info->fd[level][file], -2), -2) : -1;
    struct mt_fdid id;
    if (mt_fdid_take(fd, &id) != 0 || id.type != S_IFREG) { /* take stamps this open */
        close(fd);
        return -1;
    }
    /* The same file for every opener: whoever loses the race below stored the same. */
    atomic_store(&info->fd_dev[level][file], id.dev);
    atomic_store(&info->fd_ino[level][file], id.ino);
    int expected = -1;
    if (!atomic_compare_exchange_strong(&info->fd[level][file], &expected, fd)) {
        close(fd);
        return expected;
    }
    mt_fdid_list(fd, &id); /* a forked child closes it (fdid.h) */
    return fd;
}

static ssize_t read_file(struct cgroup_info *info, int level, int file, char *buf, size_t size)
{
    int fd = kept(info, level, file);
    if (fd < 0)
        return -ENOENT;
    return mt_pread_all(fd, buf, size);
}

/* A file holding one number ("max" and v1's near-2^63 read as none): the value, or -1. */
static int64_t read_value(struct cgroup_info *info, int level, int file)
{
    char buf[64];
    if (read_file(info, level, file, buf, sizeof(buf)) <= 0 || strncmp(buf, "max", 3) == 0)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (end == buf || errno || v < 0 || v >= NO_LIMIT_V1)
        return -1;
    return v;
}

int64_t cgroup_key(const char *text, const char *key)
{
    size_t k = strlen(key);
    for (const char *line = text; line && *line;) {
        if (strncmp(line, key, k) == 0 && line[k] == ' ') {
            char *end;
            errno = 0;
            long long v = strtoll(line + k + 1, &end, 10);
            return end == line + k + 1 || errno || v < 0 ? -1 : v;
        }
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    return -1;
}

int cgroup_parse_events(const char *text, int64_t *events)
{
    static const char *const keys[MT_CG_EVENTS] = {"high", "max", "oom", "oom_kill"};
    int any = 0;
    for (int i = 0; i < MT_CG_EVENTS; i++) {
        events[i] = cgroup_key(text, keys[i]);
        any |= events[i] >= 0;
    }
    return any ? 0 : -EINVAL;
}

int64_t cgroup_usage(struct cgroup_info *info, int level)
{
    return info->version && level >= 0 && level < info->levels
               ? read_value(info, level, CG_FILE_CURRENT)
               : -1;
}

void cgroup_read(struct cgroup_info *info, struct mt_cheap *out)
{
    char buf[8192];

    out->cgroup_version = info->version;
    out->cgroup_limit_bytes = out->cgroup_usage_bytes = -1;
    out->cgroup_max_bytes = out->cgroup_high_bytes = -1;
    out->cgroup_max_level = out->cgroup_high_level = out->cgroup_limit_level = -1;
    out->cgroup_events_level = -1;
    out->cgroup_limit_kind = MT_CG_LIMIT_NONE;
    out->cgroup_anon_bytes = out->cgroup_file_bytes = out->cgroup_shmem_bytes = -1;
    for (int i = 0; i < MT_CG_EVENTS; i++)
        out->cgroup_events[i] = -1;
    if (!info->version)
        return;
    /* The lowest limit on the path; on a tie the innermost (the kernel stops there first). */
    for (int l = 0; l < info->levels; l++) {
        int64_t v = read_value(info, l, CG_FILE_MAX);
        if (v >= 0 && (out->cgroup_max_bytes < 0 || v < out->cgroup_max_bytes)) {
            out->cgroup_max_bytes = v;
            out->cgroup_max_level = l;
        }
        if (info->version != 2)
            continue;
        v = read_value(info, l, CG_FILE_HIGH);
        if (v >= 0 && (out->cgroup_high_bytes < 0 || v < out->cgroup_high_bytes)) {
            out->cgroup_high_bytes = v;
            out->cgroup_high_level = l;
        }
    }
    int stat_ok = read_file(info, 0, CG_FILE_STAT, buf, sizeof(buf)) > 0;
    if (info->version == 1) {
        /* A limit above the mount (a container's bind of its own cgroup) shows only here. */
        int64_t hier = stat_ok ? cgroup_key(buf, "hierarchical_memory_limit") : -1;
        if (out->cgroup_max_bytes >= 0) {
            out->cgroup_limit_kind = MT_CG_LIMIT_V1;
            out->cgroup_limit_bytes = out->cgroup_max_bytes;
            out->cgroup_limit_level = out->cgroup_max_level;
        }
        if (hier >= 0 && hier < NO_LIMIT_V1 &&
            (out->cgroup_limit_bytes < 0 || hier < out->cgroup_limit_bytes)) {
            out->cgroup_limit_kind = MT_CG_LIMIT_V1_HIER;
            out->cgroup_limit_bytes = out->cgroup_max_bytes = hier;
            out->cgroup_limit_level = out->cgroup_max_level = 0;
        }
    } else if (out->cgroup_high_bytes >= 0 &&
               (out->cgroup_max_bytes < 0 || out->cgroup_high_bytes < out->cgroup_max_bytes)) {
        out->cgroup_limit_kind = MT_CG_LIMIT_HIGH;
        out->cgroup_limit_bytes = out->cgroup_high_bytes;
        out->cgroup_limit_level = out->cgroup_high_level;
    } else if (out->cgroup_max_bytes >= 0) {
        out->cgroup_limit_kind = MT_CG_LIMIT_MAX;
        out->cgroup_limit_bytes = out->cgroup_max_bytes;
        out->cgroup_limit_level = out->cgroup_max_level;
    }
    /* Usage and its split: of the cgroup the limit is on (what the kernel compares). */
    int at = out->cgroup_limit_level >= 0 ? out->cgroup_limit_level : 0;
    out->cgroup_usage_bytes = read_value(info, at, CG_FILE_CURRENT);
    if (at != 0)
        stat_ok = read_file(info, at, CG_FILE_STAT, buf, sizeof(buf)) > 0;
    if (stat_ok) {
        int v1 = info->version == 1;
        out->cgroup_anon_bytes = cgroup_key(buf, v1 ? "total_rss" : "anon");
        out->cgroup_file_bytes = cgroup_key(buf, v1 ? "total_cache" : "file");
        out->cgroup_shmem_bytes = cgroup_key(buf, v1 ? "total_shmem" : "shmem");
        if (v1 && out->cgroup_anon_bytes < 0) { /* use_hierarchy off: no total_ lines */
            out->cgroup_anon_bytes = cgroup_key(buf, "rss");
            out->cgroup_file_bytes = cgroup_key(buf, "cache");
            out->cgroup_shmem_bytes = cgroup_key(buf, "shmem");
        }
    }
    /* Events: hierarchical on v2, so the outermost limit's file sees every limit's. */
    int ev = out->cgroup_max_level > out->cgroup_high_level ? out->cgroup_max_level
                                                            : out->cgroup_high_level;
    if (ev < 0)
        ev = 0;
    if (info->version == 2) {
        if (read_file(info, ev, CG_FILE_EVENTS, buf, sizeof(buf)) > 0 &&
            cgroup_parse_events(buf, out->cgroup_events) == 0)
            out->cgroup_events_level = ev;
    } else {
        ev = at;
        out->cgroup_events[MT_CG_EV_MAX] = read_value(info, ev, CG_FILE_EVENTS);
        if (read_file(info, ev, CG_FILE_OOMCTL, buf, sizeof(buf)) > 0)
            out->cgroup_events[MT_CG_EV_OOM_KILL] = cgroup_key(buf, "oom_kill");
        if (out->cgroup_events[MT_CG_EV_MAX] >= 0 || out->cgroup_events[MT_CG_EV_OOM_KILL] >= 0)
            out->cgroup_events_level = ev;
    }
}

/* One reading at the lookup opens the descriptors it keeps, while there are some to be had. */
static void warm(struct cgroup_info *info)
{
    struct mt_cheap scratch;
    cgroup_read(info, &scratch);
}
