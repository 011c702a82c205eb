/*
 * target.c - reads a target process's /proc: status, the kernel's ptrace rules, maps,
 * allocator and libraries with their symbols (target_proc.c: threads and their system calls,
 * the tree, start time, RSS and cgroup). Nothing here stops or changes the target. Run by the
 * tool's one thread.
 */
#include "target.h"

#include "../common/control.h"

#include "elfsym.h"
#include "tramp.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

const char *target_alloc_name(int alloc)
{
    static const char *const others[] = {"musl", "static", "sanitizer", "unknown"};
    if (alloc >= 0 && alloc < MT_ALLOC_COUNT)
        return mt_alloc_table[alloc].name;
    return alloc >= ALLOC_MUSL && alloc <= ALLOC_UNKNOWN ? others[alloc - ALLOC_MUSL] : "unknown";
}

const struct mt_alloc_row *target_alloc_row(const struct target *t)
{
    return t->alloc >= 0 && t->alloc < MT_ALLOC_COUNT ? &mt_alloc_table[t->alloc] : NULL;
}

int target_read_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, len - 1);
    int e = errno;
    close(fd);
    if (n < 0)
        return -e;
    buf[n] = 0;
    return (int)n;
}

void target_parse_status(const char *text, struct target_status *st)
{
    char line[256];
    memset(st, 0, sizeof *st);
    st->seccomp = -1;
    st->seccomp_filters = -1;
    for (const char *l = text; *l;) {
        size_t n = strcspn(l, "\n");
        size_t k = n < sizeof line - 1 ? n : sizeof line - 1; /* a longer line: its head */
        memcpy(line, l, k);
        line[k] = 0;
        l += n + (l[n] == '\n');
        unsigned a, b, c;
        if (sscanf(line, "Uid: %u %u %u", &a, &b, &c) == 3) {
            st->ruid = a;
            st->euid = b;
            st->suid = c;
        } else if (sscanf(line, "Gid: %u %u %u", &a, &b, &c) == 3) {
            st->rgid = a;
            st->egid = b;
            st->sgid = c;
        } else if (sscanf(line, "CapPrm: %" SCNx64, &st->cap_prm) == 1) {
        } else if (sscanf(line, "TracerPid: %u", &a) == 1) {
            st->tracer = (pid_t)a;
        } else if (sscanf(line, "Seccomp: %u", &a) == 1) {
            st->seccomp = (int)a;
        } else if (sscanf(line, "Seccomp_filters: %u", &a) == 1) {
            st->seccomp_filters = (int)a;
        } else if (sscanf(line, "NoNewPrivs: %u", &a) == 1) {
            st->no_new_privs = (int)a;
        } else if (sscanf(line, "Threads: %u", &a) == 1) {
            st->threads = (int)a;
        } else if (strncmp(line, "State:", 6) == 0) {
            const char *p = line + 6;
            while (*p == ' ' || *p == '\t')
                p++;
            st->state = *p;
        } else if (strncmp(line, "Name:", 5) == 0) {
            sscanf(line + 5, " %63[^\n]", st->name);
        } else if (strncmp(line, "x86_Thread_features:", 20) == 0) {
            char w[16];
            for (const char *p = line + 20; sscanf(p, "%15s", w) == 1; p = strstr(p, w) + strlen(w))
                st->shstk |= strcmp(w, "shstk") == 0;
        }
    }
}

int target_read_status(pid_t pid, struct target_status *st, char *err, size_t errlen)
{
    char path[64], text[16384];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    int n = target_read_file(path, text, sizeof text);
    if (n < 0) {
        memset(st, 0, sizeof *st);
        snprintf(err, errlen, "no process %d (%s)", (int)pid, strerror(-n));
        return n;
    }
    target_parse_status(text, st);
    struct stat sb;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid); /* a file: the directory keeps euid */
    st->proc_uid = stat(path, &sb) == 0 ? sb.st_uid : st->euid;
    return 0;
}

int target_ptrace_scope(void)
{
    char buf[16];
    if (target_read_file("/proc/sys/kernel/yama/ptrace_scope", buf, sizeof buf) <= 0)
        return -1;
    return atoi(buf);
}

/* This tool's effective and permitted capabilities (0 where unreadable). */
static void own_caps(uint64_t *eff, uint64_t *prm)
{
    char line[256];
    FILE *f = fopen("/proc/self/status", "re");
    *eff = *prm = 0;
    if (!f)
        return;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %" SCNx64, eff) != 1)
            sscanf(line, "CapPrm: %" SCNx64, prm);
    fclose(f);
}

/* Is pid a descendant of this process (Yama's scope 1 allows those)? */
static int is_descendant(pid_t pid)
{
    pid_t me = getpid();
    for (int depth = 0; depth < 64 && pid > 1; depth++) {
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        if (target_read_file(path, buf, sizeof buf) <= 0)
            return 0;
        const char *p = strrchr(buf, ')');
        int ppid;
        if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
            return 0;
        if (ppid == me)
            return 1;
        pid = ppid;
    }
    return 0;
}

const char *target_refusal(pid_t pid, const struct target_status *st, char *buf, size_t len)
{
    uint64_t eff, prm;
    own_caps(&eff, &prm);
    int cap = (eff >> 19) & 1, scope = target_ptrace_scope(); /* CAP_SYS_PTRACE */
    uid_t me = getuid();
    gid_t gme = getgid();
    if (st->tracer) {
        snprintf(buf, len, "process %d is already traced by pid %d (TracerPid): the kernel allows one "
                 "tracer", (int)pid, (int)st->tracer);
        return buf;
    }
    if (scope == 3) {
        snprintf(buf, len, "kernel.yama.ptrace_scope is 3: no process may be traced on this system "
                 "until a reboot");
        return buf;
    }
    if (scope == 2 && !cap) {
        snprintf(buf, len, "kernel.yama.ptrace_scope is 2: only a process with CAP_SYS_PTRACE may "
                 "trace; run memtrim as root");
        return buf;
    }
    if (!cap && (st->ruid != me || st->euid != me || st->suid != me)) {
        snprintf(buf, len, "process %d runs as uid %u, this tool as uid %u without CAP_SYS_PTRACE: "
                 "run memtrim as that user or as root", (int)pid, (unsigned)st->euid, (unsigned)me);
        return buf;
    }
    if (!cap && (st->rgid != gme || st->egid != gme || st->sgid != gme)) {
        snprintf(buf, len, "process %d runs as gid %u, this tool as gid %u without CAP_SYS_PTRACE: "
                 "run memtrim as root", (int)pid, (unsigned)st->egid, (unsigned)gme);
        return buf;
    }
    /* the kernel's cap_ptrace_access_check: the target's permitted set within the tracer's
     * (its permitted set for the attach, its effective one for /proc's files) */
    uint64_t extra = st->cap_prm & ~(prm & eff);
    if (!cap && extra) {
        snprintf(buf, len, "process %d holds capabilities this tool lacks (CapPrm %016" PRIx64
                 ", the tool's %016" PRIx64 "), and the tool has no CAP_SYS_PTRACE: the kernel "
                 "lets it trace only a process whose capabilities are a subset of its own; give "
                 "memtrim CAP_SYS_PTRACE (a container: --cap-add SYS_PTRACE)", (int)pid,
                 st->cap_prm, prm & eff);
        return buf;
    }
    /* the kernel's __ptrace_may_access: a process that is not dumpable (PR_SET_DUMPABLE 0, or
     * one that changed its credentials) wants CAP_SYS_PTRACE; /proc shows it owned by root */
    if (!cap && st->euid != 0 && st->proc_uid == 0) {
        snprintf(buf, len, "process %d is not dumpable (prctl PR_SET_DUMPABLE 0, or it changed "
                 "its uid or gid): only a tracer with CAP_SYS_PTRACE may trace it; run memtrim as "
                 "root", (int)pid);
        return buf;
    }
    if (scope == 1 && !cap && !is_descendant(pid)) {
        snprintf(buf, len, "kernel.yama.ptrace_scope is 1: only a parent may trace without "
                 "CAP_SYS_PTRACE (process %d is not a child of this tool); run memtrim as root or set "
                 "kernel.yama.ptrace_scope=0", (int)pid);
        return buf;
    }
    return NULL;
}

int target_parse_map_line(const char *line, struct target_mapping *m)
{
    int n = 0;
    m->path[0] = 0;
    if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &m->start,
               &m->end, m->perms, &m->offset, &m->dev_major, &m->dev_minor, &m->inode, &n) < 7)
        return -1;
    const char *p = line + n;
    size_t l = strcspn(p, "\n");
    if (l >= sizeof m->path)
        l = sizeof m->path - 1;
    memcpy(m->path, p, l);
    m->path[l] = 0;
    return 0;
}

static FILE *open_maps(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    return fopen(path, "re");
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* "/memfd:libmemtrim.so.0 (deleted)" is load's memfd (libhold.c): named by its name */
static int name_starts(const char *path, const char *prefix)
{
    const char *b = base_name(path);
    if (!strncmp(path, "/memfd:", 7))
        b = path + 7;
    return strncmp(b, prefix, strlen(prefix)) == 0;
}

static int is_mapped_file(const char *path, const struct target_mapping *m)
{
    struct stat sb;
    return stat(path, &sb) == 0 && sb.st_ino == m->inode && major(sb.st_dev) == m->dev_major &&
           minor(sb.st_dev) == m->dev_minor;
}

/* Where the tool reads a file the target mapped: map_files is the very file (a container's,
 * or one deleted by an upgrade), open to CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE. Otherwise
 * its path, which the maps give relative to the reader's root: inside the target's root
 * (another mount namespace, a container) or as it is (the tool's own namespace, a target in a
 * chroot): whichever is the mapped file (its device and inode). The first if none is. */
static void lib_file(pid_t pid, const struct target_mapping *m, char *out, size_t len)
{
    snprintf(out, len, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)pid, m->start, m->end);
    if (access(out, R_OK) == 0)
        return;
    if (is_mapped_file(m->path, m) && strlen(m->path) < len) {
        snprintf(out, len, "%s", m->path);
        return;
    }
    snprintf(out, len, "/proc/%d/root%s", (int)pid, m->path);
}

/* The library mapped at m: its name, where the tool reads it and its load bias. */
static int lib_at(pid_t pid, const struct target_mapping *m, struct target_lib *lib, char *err,
                  size_t errlen)
{
    struct elf_file ef;
    snprintf(lib->path, sizeof lib->path, "%s", m->path);
    lib_file(pid, m, lib->file, sizeof lib->file);
    if (elf_open(lib->file, &ef, err, errlen) != 0)
        return -1;
    lib->base = m->start - ef.first_vaddr;
    lib->start = m->start;
    elf_close(&ef);
    return 0;
}

/* What the maps say of the allocators: musl, and the first mapping of each row's library
 * (the allocator table's maps_prefix; the libc row's is glibc's libc.so.6). */
struct alloc_maps {
    struct target_mapping lib[MT_ALLOC_COUNT];
    int musl, have[MT_ALLOC_COUNT];
    char sanitizer[64]; /* a sanitizer runtime's library, as mapped */
};

/* The sanitizers whose runtime replaces malloc and intercepts pthread_create (AddressSanitizer,
 * ThreadSanitizer, LeakSanitizer, HWASan, MemorySanitizer): gcc's shared runtimes, clang's
 * shared ones, and the symbol each one's runtime exports from an executable it is linked into
 * (clang links them statically). UBSan's alone replaces neither: not one of them. */
static const char *const sanitizer_libs[] = {"libasan.", "libtsan.", "liblsan.", "libhwasan.",
                                             "libclang_rt.asan", "libclang_rt.tsan",
                                             "libclang_rt.lsan", "libclang_rt.hwasan",
                                             "libclang_rt.msan"};
static const char *const sanitizer_syms[] = {"__asan_init", "__tsan_init", "__lsan_init",
                                             "__hwasan_init", "__msan_init"};

/* The sanitizer runtime in pid (its library, or its symbol in the executable), or NULL. */
static const char *sanitizer_of(pid_t pid, const struct alloc_maps *am)
{
    if (am->sanitizer[0])
        return am->sanitizer;
    char exe[64], e[256];
    struct elf_file ef;
    const char *found = NULL;
    snprintf(exe, sizeof exe, "/proc/%d/exe", (int)pid);
    if (elf_open(exe, &ef, e, sizeof e) != 0)
        return NULL;
    for (size_t i = 0; i < sizeof sanitizer_syms / sizeof sanitizer_syms[0] && !found; i++)
        if (elf_dynsym(&ef, sanitizer_syms[i]))
            found = sanitizer_syms[i];
    elf_close(&ef);
    return found;
}

/* The libc row (glibc), whose libc the tool needs whichever malloc serves. */
static int libc_row(void)
{
    for (int i = 0; i < MT_ALLOC_COUNT; i++)
        if (mt_alloc_table[i].libc)
            return i;
    return -1;
}

static int read_alloc_maps(pid_t pid, struct alloc_maps *am, char *err, size_t errlen)
{
    FILE *f = open_maps(pid);
    char line[1024];
    struct target_mapping m;
    memset(am, 0, sizeof *am);
    if (!f) {
        snprintf(err, errlen, "cannot read /proc/%d/maps: %s", (int)pid, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        if (target_parse_map_line(line, &m) != 0 || m.path[0] != '/' || m.offset != 0)
            continue;
        am->musl |= name_starts(m.path, "ld-musl-") || name_starts(m.path, "libc.musl-");
        for (size_t i = 0; i < sizeof sanitizer_libs / sizeof sanitizer_libs[0]; i++)
            if (name_starts(m.path, sanitizer_libs[i]) && !am->sanitizer[0])
                snprintf(am->sanitizer, sizeof am->sanitizer, "%.60s", base_name(m.path));
        for (int i = 0; i < MT_ALLOC_COUNT; i++)
            if (name_starts(m.path, mt_alloc_table[i].maps_prefix) && !am->have[i]) {
                am->lib[i] = m;
                am->have[i] = 1;
            }
    }
    fclose(f);
    return 0;
}

/* The rows that are not libc (jemalloc, ...): the first mapped one that exports malloc (a
 * prefixed build loaded beside glibc's malloc does not serve it), as the library's dladdr of
 * malloc. 1 if one serves, 0 if none, -1 on an error. */
static int other_alloc(struct target *t, const struct alloc_maps *am, char *err, size_t errlen)
{
    for (int i = 0; i < MT_ALLOC_COUNT; i++) {
        if (!am->have[i] || mt_alloc_table[i].libc)
            continue;
        struct elf_file ef;
        if (lib_at(t->pid, &am->lib[i], &t->alloc_lib, err, errlen) != 0 ||
            elf_open(t->alloc_lib.file, &ef, err, errlen) != 0)
            return -1;
        int serves = elf_dynsym(&ef, "malloc") != 0;
        elf_close(&ef);
        if (serves) {
            t->alloc = i;
            return 1;
        }
    }
    return 0;
}

int target_find_alloc(struct target *t, char *err, size_t errlen)
{
    struct alloc_maps am;
    int libc = libc_row();
    if (read_alloc_maps(t->pid, &am, err, errlen) != 0)
        return -1;
    if (am.musl) {
        t->alloc = ALLOC_MUSL;
        snprintf(err, errlen, "process %d runs on musl libc, whose malloc has no trim call: nothing to "
                 "do", (int)t->pid);
        return -1;
    }
    const char *san = mt_control("cmd-sanitizer") ? NULL : sanitizer_of(t->pid, &am);
    if (san) {
        t->alloc = ALLOC_SANITIZER;
        snprintf(err, errlen, "process %d runs on a sanitizer allocator (%s): its runtime "
                 "replaces malloc and keeps its own registry of threads, which memtrim's thread "
                 "would bypass: nothing is called", (int)t->pid, san);
        return -1;
    }
    /* glibc's libc whichever malloc serves: its dlopen and signal restorer are the process's */
    int have_libc = libc >= 0 && am.have[libc];
    if (have_libc && lib_at(t->pid, &am.lib[libc], &t->libc, err, errlen) != 0)
        return -1;
    int other = other_alloc(t, &am, err, errlen);
    if (other != 0)
        return other > 0 ? 0 : -1;
    if (!have_libc) {
        char exe[64], e2[256];
        struct elf_file ef;
        snprintf(exe, sizeof exe, "/proc/%d/exe", (int)t->pid);
        int is_static = elf_open(exe, &ef, e2, sizeof e2) == 0 && !ef.has_interp;
        elf_close(&ef);
        t->alloc = is_static ? ALLOC_STATIC : ALLOC_UNKNOWN;
        snprintf(err, errlen, is_static ? "process %d is a static binary: its allocator cannot be "
                 "found from outside, nothing is called" : "process %d maps no glibc (libc.so.6) and "
                 "no known allocator: nothing is called", (int)t->pid);
        return -1;
    }
    t->alloc = libc;
    return 0;
}

/* A number field of this tool's own /proc/self/status ("Seccomp", "NoNewPrivs"); -1. */
static int own_status(const char *field)
{
    char line[256];
    int v = -1;
    size_t n = strlen(field);
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':' && sscanf(line + n + 1, "%d", &v) == 1)
            break;
    fclose(f);
    return v;
}

const char *target_memory_refusal(const struct target *t, char *buf, size_t len)
{
    uint64_t at = t->libc.start ? t->libc.start : t->alloc_lib.start, word;
    struct iovec local = {&word, sizeof word}, remote = {(void *)(uintptr_t)at, sizeof word};
    if (!at || process_vm_readv(t->pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof word)
        return NULL;
    int e = errno, mode = own_status("Seccomp");
    if (e == EPERM && mode == 2)
        snprintf(buf, len, "this tool runs under a seccomp filter that refuses process_vm_readv "
                 "(Docker's default profile allows it only with CAP_SYS_PTRACE: --cap-add "
                 "SYS_PTRACE); process %d not touched", (int)t->pid);
    else if (e == EPERM && own_status("NoNewPrivs") == 1)
        snprintf(buf, len, "the kernel refused this tool process %d's memory (process_vm_readv: "
                 "%s); the tool runs with no_new_privs (NoNewPrivs: 1), as a Landlock sandbox "
                 "has it, and a sandboxed process may trace only processes inside its sandbox: "
                 "run memtrim outside it; not touched", (int)t->pid, strerror(e));
    else
        snprintf(buf, len, "the kernel refused reading process %d's memory (process_vm_readv: "
                 "%s), where no rule memtrim checks forbids it (a security module?): not "
                 "touched", (int)t->pid, strerror(e));
    return buf;
}

int target_find_lib(pid_t pid, const char *prefix, struct target_lib *lib)
{
    FILE *f = open_maps(pid);
    char line[1024], err[256];
    struct target_mapping m;
    int found = 0;
    if (!f)
        return -1;
    while (!found && fgets(line, sizeof line, f))
        found = target_parse_map_line(line, &m) == 0 && m.path[0] == '/' && m.offset == 0 &&
                name_starts(m.path, prefix);
    fclose(f);
    return found ? lib_at(pid, &m, lib, err, sizeof err) : -1;
}

/* A dynamic symbol of lib in the target: a function, or a data object with its size. */
static uint64_t lib_symbol(const struct target_lib *lib, const char *name, uint64_t *obj_size)
{
    struct elf_file ef;
    char err[256];
    if (elf_open(lib->file, &ef, err, sizeof err) != 0)
        return 0;
    uint64_t v = obj_size ? elf_dynobj(&ef, name, obj_size) : elf_dynsym(&ef, name);
    elf_close(&ef);
    return v ? lib->base + v : 0;
}

uint64_t target_sym(const struct target_lib *lib, const char *name)
{
    return lib_symbol(lib, name, NULL);
}

uint64_t target_obj(const struct target_lib *lib, const char *name, uint64_t *size)
{
    *size = 0;
    return lib_symbol(lib, name, size);
}

uint64_t target_code(const struct target_lib *lib, const void *bytes, size_t len)
{
    struct elf_file ef;
    char err[256];
    if (elf_open(lib->file, &ef, err, sizeof err) != 0)
        return 0;
    uint64_t v = elf_find_code(&ef, bytes, len);
    elf_close(&ef);
    return v ? lib->base + v : 0;
}

/* Our page: the magic and its own address at TR_MAGIC_OFF, at a page boundary of a private
 * anonymous rwx mapping (where a kernel without CONFIG_ANON_VMA_NAME cannot name it, where
 * the kernel may have merged it with a neighbour, and where its guard pages split it: only
 * its head is looked for). */
uint64_t target_find_page(pid_t pid)
{
    FILE *f = open_maps(pid);
    char line[1024];
    struct target_mapping m;
    uint64_t page = 0;
    if (!f)
        return 0;
    while (!page && fgets(line, sizeof line, f)) {
        if (target_parse_map_line(line, &m) != 0 || strcmp(m.perms, "rwxp") != 0 ||
            (m.path[0] && strcmp(m.path, "[anon:memtrim-inject]") != 0))
            continue;
        for (uint64_t at = m.start; at + TR_GUARD1 <= m.end && at - m.start < (64u << 20);
             at += 4096) {
            uint64_t head[(TR_SELF - TR_MAGIC_OFF) / 8 + 1];
            struct iovec local = {head, sizeof head};
            struct iovec remote = {(void *)(uintptr_t)(at + TR_MAGIC_OFF), sizeof head};
            if (process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof head &&
                memcmp(&head[0], TR_MAGIC, 8) == 0 && head[(TR_SELF - TR_MAGIC_OFF) / 8] == at) {
                page = at;
                break;
            }
        }
    }
    fclose(f);
    return page;
}

int target_mapping(pid_t pid, uint64_t addr, uint64_t *start, uint64_t *end)
{
    FILE *f = open_maps(pid);
    char line[1024];
    struct target_mapping m;
    int rc = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (target_parse_map_line(line, &m) == 0 && addr >= m.start && addr < m.end) {
            *start = m.start;
            *end = m.end;
            rc = 0;
            break;
        }
    fclose(f);
    return rc;
}
