/*
 * cli.h - what the memtrim command's verbs share: their options, exit codes (docs/memtrim.1,
 * EXIT STATUS) and output (output.c); the load verb (load.c). The tool's one thread.
 */
#ifndef MEMTRIM_CLI_CLI_H
#define MEMTRIM_CLI_CLI_H

#include "inject.h"
#include "target.h"
#include "tramp.h"

#include <cjson/cJSON.h>
#include <sys/types.h>

enum exit_code {
    EXIT_OK = 0,
    EXIT_USAGE = 1,       /* the command line, --config, or memtrim's own pid */
    EXIT_REFUSED = 2,     /* the kernel's rules or the target's state: untouched */
    EXIT_UNSUPPORTED = 3, /* static, musl, another allocator, another architecture */
    EXIT_NO_THREAD = 4,   /* no safe thread in time, or another memtrim there: untouched */
    EXIT_TIMEOUT = 5,     /* the call goes on past the deadline, or an earlier one still does */
    EXIT_FAILED = 6,
    EXIT_ALREADY = 7,     /* load: memtrim already runs there */
};

struct opts {
    const char *verb;
    pid_t pid;
    unsigned long long start_time; /* --tree: pid's start time when the tree was read */
    int json;
    int tree;  /* --tree: pid and its descendants, one line each */
    double thread_wait_s, call_wait_s;
    long pad;
    int raise; /* --raise: nice levels for the call's thread (trim, stats; prio.h) */
    int raise_given; /* --raise was on the command line (load refuses it) */
    const char *config, *library; /* load */
};

double cli_now(void);
/* The error as one JSON object on stdout (for scripts) and a line on stderr; returns code. */
int cli_fail(const struct opts *o, int code, const char *msg);
/* j as one JSON line, or the human line on a terminal; frees j. */
void cli_emit(const struct opts *o, cJSON *j, const char *human);
/* inject_run with the options' deadlines: 0, or the exit code (its error printed). */
int cli_call(const struct opts *o, struct target *t, struct inject_call *c);
/* pid, allocator, thread and timings of a call done. */
void cli_add_common(cJSON *j, const struct target *t, const struct inject_call *c);

/* What a call may charge to the process's memory cgroup beyond its own function's needs:
 * what it touches of our page (it is mapped whole, 1 MiB, but only touched pages are charged:
 * 32 KiB measured for trim and stats, its code, data and the two threads' stacks and thread
 * blocks; 128 KiB bounds it) and a margin (the glibc thread's DTV and cache, the kernel's). */
#define CLI_CALL_CHARGE ((128 << 10) + (256 << 10))
/* NULL when the process's memory cgroup has room for need bytes; else why not, in buf. */
const char *cli_cgroup_refusal(const struct target *t, int64_t need, const char *what, char *buf,
                               size_t len);
/* The threads a call starts in the process at once (the raw thread and the glibc thread):
 * its pids cgroup counts them as the process's own, so a process at its limit would see its
 * own thread or fork fail while they live (Go's runtime dies of it). A call needs room for
 * them and as many again left to the process. */
#define CLI_CALL_THREADS 2
/* NULL when the process's pids cgroups and RLIMIT_NPROC have room for twice the threads a verb
 * starts there (trim, stats: CLI_CALL_THREADS; load: its engine's too, load.c); else why
 * not, in buf. */
const char *cli_pids_refusal(const struct target *t, int threads, const char *what, char *buf,
                             size_t len);

/* load.c: `memtrim load PID`; its exit code. */
int load_run(const struct opts *o, struct target *t);

#endif
