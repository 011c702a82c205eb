/*
 * seccomp.c - the kernel's seccomp rules of a target thread, read before it is touched
 * (seccomp.h): its mode from /proc/PID/task/TID/status (strict: refused), its filters from
 * PTRACE_SECCOMP_GET_FILTER (CAP_SYS_ADMIN, the thread in our ptrace stop), each evaluated by
 * bpfeval.c for every system call the injection and the call make, with the arguments they
 * make them with. Anything but SECCOMP_RET_ALLOW from any filter, or filters that cannot
 * be read, is a refusal: a filter must never kill the target because of memtrim. No state,
 * no locks; the tool's one thread.
 */
#include "seccomp.h"

#include "bpfeval.h"
#include "target.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>

#define NR_MAX 512 /* "any": every x86_64 system call number below this */

/* Seccomp: and Seccomp_filters: of one thread's status; -1 where unreadable. */
static int thread_seccomp(pid_t pid, pid_t tid, int *filters)
{
    char path[96], buf[16384];
    struct target_status st;
    snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pid, (int)tid);
    *filters = -1;
    if (target_read_file(path, buf, sizeof buf) <= 0)
        return -1;
    target_parse_status(buf, &st);
    *filters = st.seccomp_filters;
    return st.seccomp;
}

int seccomp_count(pid_t pid, pid_t tid)
{
    int count, mode = thread_seccomp(pid, tid, &count);
    if (mode <= 0)
        return mode;
    if (mode != 2)
        return -1;
    if (count >= 0)
        return count;
    for (count = 0;; count++) { /* before Linux 5.9: the chain walked (the tool traces tid) */
        long n = ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)(long)count, NULL);
        if (n < 0)
            return errno == ENOENT && count > 0 ? count : -1;
    }
}

static void call_words(const struct inject_syscall *s, long nr, struct bpf_call *c)
{
    memset(c, 0, sizeof *c);
    c->word[0] = (uint32_t)nr;
    c->word[1] = AUDIT_ARCH_X86_64;
    c->unknown = 0xc; /* the instruction pointer: the page's or the thread's */
    for (int i = 0; i < 6; i++) {
        if (s && (s->known >> i) & 1) {
            c->word[4 + 2 * i] = (uint32_t)s->args[i];
            c->word[5 + 2 * i] = (uint32_t)(s->args[i] >> 32);
        } else {
            c->unknown |= (uint16_t)(3u << (4 + 2 * i));
        }
    }
}

/* One filter against one call: 0 allowed, else -1 with err. */
static int judge(const struct sock_filter *f, unsigned len, int index, int count,
                 const struct inject_syscall *s, long nr, char *err, size_t errlen)
{
    struct bpf_call c;
    uint32_t action;
    call_words(s, nr, &c);
    c.lenient = s == NULL || (s->known & SECCOMP_CALL_FAILS_OK);
    int v = bpf_eval(f, len, &c, &action);
    if (v == BPF_ALLOW)
        return 0;
    char name[128], of[16] = "?"; /* ?: a kernel before Seccomp_filters */
    if (count > 0)
        snprintf(of, sizeof of, "%d", count);
    if (s)
        snprintf(name, sizeof name, "%s", s->name);
    else
        snprintf(name, sizeof name, "system call %ld", nr);
    if (v == BPF_DENY)
        snprintf(err, errlen, "its seccomp filter (%d of %s) answers %s%s with %s%s", index + 1,
                 of, name, s ? " as memtrim makes it" : "", bpf_action_name(action),
                 s ? "" : " (load runs memtrim's whole engine there: no system call may kill, "
                 "trap or wait for a supervisor)");
    else if (v == BPF_UNKNOWN)
        snprintf(err, errlen, "its seccomp filter (%d of %s) returns an action computed from "
                 "arguments of %s that memtrim cannot know beforehand", index + 1, of, name);
    else
        snprintf(err, errlen, "its seccomp filter (%d of %s) could not be evaluated for %s "
                 "(an instruction seccomp does not run, or too many paths)", index + 1, of, name);
    return -1;
}

static int judge_all(const struct sock_filter *f, unsigned len, int index, int count,
                     const struct seccomp_calls *calls, char *err, size_t errlen)
{
    for (size_t i = 0; i < calls->n_mech; i++)
        if (judge(f, len, index, count, &calls->mech[i], calls->mech[i].nr, err, errlen))
            return -1;
    for (size_t i = 0; i < calls->n_call; i++)
        if (judge(f, len, index, count, &calls->call[i], calls->call[i].nr, err, errlen))
            return -1;
    for (long nr = 0; calls->any && nr < NR_MAX; nr++)
        if (judge(f, len, index, count, NULL, nr, err, errlen))
            return -1;
    return 0;
}

int seccomp_check(pid_t pid, pid_t tid, const struct seccomp_calls *calls, char *err,
                  size_t errlen)
{
    char why[768];
    int count, mode = thread_seccomp(pid, tid, &count);
    if (mode == 0)
        return 0;
    if (mode == 1) {
        snprintf(err, errlen, "thread %d of process %d runs in seccomp strict mode (Seccomp: 1): "
                 "any call memtrim makes there would kill it; nothing was changed", (int)tid,
                 (int)pid);
        return -1;
    }
    /* Seccomp_filters is Linux 5.9's: before it the count is unknown (-1), and the chain is
     * read to its end */
    if (mode != 2 || count == 0) {
        snprintf(err, errlen, "thread %d of process %d: its seccomp state cannot be read "
                 "(Seccomp: %d, Seccomp_filters: %d); nothing was changed", (int)tid, (int)pid,
                 mode, count);
        return -1;
    }
    struct sock_filter *f = malloc(BPF_MAXINSNS * sizeof *f);
    int index, rc = 0;
    for (index = 0; rc == 0 && f; index++) {
        long n = ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)(long)index, NULL);
        if (n < 0 && errno == ENOENT && index > 0)
            break; /* past the oldest */
        if (n < 0 || n > BPF_MAXINSNS) {
            snprintf(why, sizeof why, "its seccomp filters cannot be read (PTRACE_SECCOMP_GET_"
                     "FILTER: %s%s)", n < 0 ? strerror(errno) : "too long",
                     n < 0 && errno == EACCES ? "; it needs CAP_SYS_ADMIN and a tool not under "
                     "seccomp itself" : "");
            rc = -1;
        } else if (ptrace(PTRACE_SECCOMP_GET_FILTER, tid, (void *)(long)index, f) != n) {
            snprintf(why, sizeof why, "its seccomp filter %d changed while read", index + 1);
            rc = -1;
        } else {
            rc = judge_all(f, (unsigned)n, index, count, calls, why, sizeof why);
        }
    }
    free(f);
    if (rc == 0 && (!f || (count > 0 && index != count))) {
        snprintf(why, sizeof why, f ? "its seccomp filters changed while read (%d, then %d)"
                 : "out of memory", count, index);
        rc = -1;
    }
    if (rc)
        snprintf(err, errlen, "thread %d of process %d: %s: refused, nothing was changed",
                 (int)tid, (int)pid, why);
    return rc;
}
