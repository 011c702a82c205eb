/*
 * target.h - what the tool reads of a target process in /proc before it touches it: its
 * status and the kernel's rules that may refuse a ptrace, its maps and allocator, its
 * threads' system calls, its RSS and cgroup. Plain reads; the tool's one thread.
 */
#ifndef MEMTRIM_CLI_TARGET_H
#define MEMTRIM_CLI_TARGET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "alloc_table.h"

struct target_status {
    uid_t ruid, euid, suid;
    gid_t rgid, egid, sgid;
    uint64_t cap_prm; /* CapPrm: a tool without CAP_SYS_PTRACE may trace a subset of its own */
    uid_t proc_uid;   /* /proc/PID/stat's owner: root for a process that is not dumpable */
    pid_t tracer;   /* TracerPid */
    int seccomp;    /* 0 none, 1 strict, 2 filter */
    int seccomp_filters; /* Seccomp_filters: the process's main thread's, -1 if absent */
    int no_new_privs;
    int threads;
    int shstk;      /* x86_Thread_features lists shstk: the x86 user shadow stack (CET) */
    char state;     /* R, S, T, t, Z, ... */
    char name[64];
};

/* The allocator serving a target: a row of the allocator table (MT_ALLOC_glibc, ...; its
 * release call and statistics call there), or one of these, which the tool cannot act on. */
enum { ALLOC_MUSL = MT_ALLOC_COUNT, ALLOC_STATIC, ALLOC_SANITIZER, ALLOC_UNKNOWN };

struct target_lib {
    char path[512];      /* as the target names it */
    char file[600];      /* where the tool reads it (/proc/PID/map_files/... or root/...) */
    uint64_t base;       /* load bias */
    uint64_t start;      /* where its first mapping starts */
};

struct target {
    pid_t pid;
    struct target_status st;
    int alloc;                /* MT_ALLOC_<id> or ALLOC_MUSL, ... */
    struct target_lib libc;   /* glibc's, whichever malloc serves */
    struct target_lib alloc_lib; /* a row that is not libc: its library */
    uint64_t page;            /* our page, 0 if none yet */
    unsigned long long start_time; /* when first read (target_start_time): its identity */
};

const char *target_alloc_name(int alloc);
/* The target's row of the allocator table; NULL for musl, static and unknown. */
const struct mt_alloc_row *target_alloc_row(const struct target *t);
/* A small /proc file read whole into buf (NUL-terminated): its length, or -errno. */
int target_read_file(const char *path, char *buf, size_t len);
/* pid is in the same namespace of kind ns ("pid", "user", ...) as the tool. */
int target_same_ns(pid_t pid, const char *ns);
/* A /proc/PID/status text's fields (any text: the unknown and the malformed are skipped). */
void target_parse_status(const char *text, struct target_status *st);
/* 0, or -errno with err set (no such process, unreadable status). */
int target_read_status(pid_t pid, struct target_status *st, char *err, size_t errlen);
/* One line of /proc/PID/maps: 0, or -1 when it is not one. */
struct target_mapping {
    uint64_t start, end, offset, inode;
    unsigned dev_major, dev_minor;
    char perms[8], path[512];
};
int target_parse_map_line(const char *line, struct target_mapping *m);
/* Why this tool may not ptrace pid, as the kernel's rules say (NULL if nothing refuses):
 * another uid or gid, capabilities the tool lacks, or a process that is not dumpable, without
 * CAP_SYS_PTRACE; ptrace_scope 1/2/3; a tracer already there. */
const char *target_refusal(pid_t pid, const struct target_status *st, char *buf, size_t len);
/* The allocator serving the target, its libc and (a row that is not libc) its library; a
 * refusal text otherwise. */
int target_find_alloc(struct target *t, char *err, size_t errlen);
/* Whether this tool may read the target's memory (process_vm_readv of its libc's first
 * page): NULL, or why not with the rule that refused it (a seccomp filter of the tool's own,
 * as Docker's default profile without CAP_SYS_PTRACE is; a Landlock sandbox of its own,
 * which wants no_new_privs). */
const char *target_memory_refusal(const struct target *t, char *buf, size_t len);
/* The first library the target maps whose file name starts with prefix; -1 if none. */
int target_find_lib(pid_t pid, const char *prefix, struct target_lib *lib);
/* The address of a dynamic symbol of lib in the target (0 if absent). */
uint64_t target_sym(const struct target_lib *lib, const char *name);
/* The address of a dynamic data object of lib in the target and its size (0 if absent). */
uint64_t target_obj(const struct target_lib *lib, const char *name, uint64_t *size);
/* The address in the target of the first such bytes in lib's code (0 if none). */
uint64_t target_code(const struct target_lib *lib, const void *bytes, size_t len);
/* Our page in the target's maps ("[anon:memtrim-inject]"), 0 if none. */
uint64_t target_find_page(pid_t pid);
/* The mapping holding addr: its start and end; -1 if none. */
int target_mapping(pid_t pid, uint64_t addr, uint64_t *start, uint64_t *end);
int64_t target_rss(pid_t pid);
/* The cgroup's usage and limit as /memory/stats names them (-1 where unknown). */
void target_cgroup(pid_t pid, int *version, int64_t *usage, int64_t *max);
/* The room left under the process's memory cgroup limits, the tightest of every level up
 * to the root (v1: limit_in_bytes and memsw's; v2: memory.max and memory.high) in bytes,
 * the clean page cache the kernel reclaims before it OOM-kills counted as room
 * (target_stat_reclaimable; docs/command-rules.md), with the file that binds in where; -1
 * when no limit is set. */
int64_t target_cgroup_room(pid_t pid, char *where, size_t len);
/* A memory.stat text's clean page cache in bytes: its inactive file pages less its dirty,
 * writeback and mapped file pages (v1's total_* figures, else its own; v2's), 0 when any
 * is missing or no byte count; 0 under control cmd-room-cache-unseen (the old room). */
int64_t target_stat_reclaimable(const char *stat, int v2);
/* The room under a limit of which usage is charged and reclaimable may be reclaimed (counted
 * up to usage): limit - (usage - reclaimable), 0 at least; -1 when limit is none ("max", past
 * 2^62) or usage unknown (< 0). */
int64_t target_room_of(int64_t limit, int64_t usage, int64_t reclaimable);
/* The words of the refusal when that room is short of what a call may charge (cli/output.c:
 * "process PID" then these): the node agent reads them as a refusal that passes. */
#define TARGET_NO_ROOM_WORDS "'s memory cgroup has "
/* The tasks the process's pids cgroups may still start (pids.max less pids.current), the
 * tightest of every level, v1 or v2, with the file that binds in where; -1 when none is set.
 * memtrim's two threads count there as the target's own. */
int64_t target_pids_room(pid_t pid, char *where, size_t len);
/* The tasks the process's real uid may still start under its RLIMIT_NPROC (every task of that
 * uid counts, as the kernel counts them at each clone), with the limit and the count in
 * where; -1 when it does not bind (the real uid root, CAP_SYS_RESOURCE or CAP_SYS_ADMIN,
 * unlimited, another user namespace: not read). */
int64_t target_nproc_room(pid_t pid, uid_t ruid, char *where, size_t len);
/* A /proc/PID/limits text's soft RLIMIT_NPROC ("Max processes"): -1 when unlimited, absent,
 * or at or past INT64_MAX (a limit no count of tasks reaches). */
int64_t target_nproc_limit(const char *limits);
/* The words of the refusal when either room is short of the call's threads (cli/output.c). */
#define TARGET_NO_PIDS_WORDS " may start only "
/* The words of a room that cannot be read: the process's cgroup shown by no mount of the
 * command's (another cgroup namespace; target_proc.c): no reading to come changes it. */
#define TARGET_UNSEEN_WORDS ", which no cgroup mount of this command shows"
/* A thread's system call state from /proc/PID/task/TID/syscall: its number (-1 when not in
 * one, -2 when running or unreadable), six arguments, then its stack pointer (args[6]). */
long target_thread_syscall(pid_t pid, pid_t tid, uint64_t args[7]);
/* The text of a syscall file: as target_thread_syscall. */
long target_parse_syscall(const char *buf, uint64_t args[7]);
/* 1 when a /proc/PID/task/TID/status text's "x86_Thread_features:" line lists "shstk": the
 * thread runs with the x86 user shadow stack (CET, Linux 6.6+), where both of the page's
 * self-restores fault (rt_sigreturn finds no restore token; the old restore's ret does not
 * match the shadow stack's top): such a thread is never taken. 0 otherwise. */
int target_parse_shstk(const char *status);
/* target_parse_shstk of the thread's status file; 0 when it cannot be read. */
int target_thread_shstk(pid_t pid, pid_t tid);
/* A /proc/PID/stat text's ppid and start time (after the name's last ')'): 0, or -1. */
int target_parse_stat(const char *buf, pid_t *ppid, unsigned long long *start);
/* pid and its descendants (children's children too, from each /proc/N/stat's ppid), pid
 * first and each parent before its children, up to max, each with its start time as read
 * (start[i]); their count (0 if pid is gone). */
int target_tree(pid_t pid, pid_t *out, unsigned long long *start, int max);
/* The process's start time (/proc/PID/stat's 22nd field), which with its pid names it: a
 * pid reused by another process has another; 0 if there is no such process. */
unsigned long long target_start_time(pid_t pid);
/* The threads, up to max; their count. */
int target_threads(pid_t pid, pid_t *tids, int max);
/* Threads: in /proc/PID/status; -1 if unreadable. */
int target_thread_count(pid_t pid);
/* 1 if syscall nr with these arguments is a wait the kernel restarts exactly (pick.h). */
int target_syscall_safe(long nr, const uint64_t args[6]);
const char *target_syscall_name(long nr);
int target_ptrace_scope(void); /* -1 without Yama */

#endif
