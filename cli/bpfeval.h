/*
 * bpfeval.h - a bounded interpreter of classic BPF as seccomp runs it (struct seccomp_data:
 * nr, arch, instruction pointer, six arguments), for a system call some of whose words are
 * not known beforehand: every path those words could take is followed. No state; any thread.
 */
#ifndef MEMTRIM_CLI_BPFEVAL_H
#define MEMTRIM_CLI_BPFEVAL_H

#include <linux/filter.h>
#include <stdint.h>

/* seccomp_data as 16 words: nr, arch, ip (low, high), args[0..5] (low, high each). */
struct bpf_call {
    uint32_t word[16];
    uint16_t unknown; /* bit i: word[i] may hold any value */
    int lenient;      /* ERRNO, LOG and TRACE pass too: a failed call, never a death or a stop */
};

enum bpf_verdict {
    BPF_ALLOW = 0,    /* every path returns SECCOMP_RET_ALLOW (or, lenient, a passing action) */
    BPF_DENY = 1,     /* a path returns another action (*action) */
    BPF_UNKNOWN = 2,  /* the action itself depends on an unknown word (RET A) */
    BPF_INVALID = -1, /* an instruction seccomp would not run, a jump out, too many paths */
};

/* Runs prog (len instructions, at most BPF_MAXINSNS) on c; the first non-allowing action
 * found in *action (SECCOMP_RET_* with its data). At most 1<<16 instructions in all. */
int bpf_eval(const struct sock_filter *prog, unsigned len, const struct bpf_call *c,
             uint32_t *action);
/* The action's name: "KILL_PROCESS", "ERRNO", ... */
const char *bpf_action_name(uint32_t action);

#endif
