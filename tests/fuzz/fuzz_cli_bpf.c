/*
 * fuzz_cli_bpf.c - libFuzzer harness for the memtrim command's classic-BPF interpreter
 * (cli/bpfeval.c), which runs as root on the seccomp filters a target installed: the first
 * 66 bytes are the system call (16 words of seccomp_data and the mask of unknown ones), the
 * rest the program (8 bytes an instruction); an odd length asks for the lenient verdict. Whatever the program, it ends (bounded), and a
 * verdict is one of the four.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bpfeval.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct bpf_call c;
    static struct sock_filter prog[BPF_MAXINSNS];
    if (size < sizeof c.word + 2)
        return 0;
    memcpy(c.word, data, sizeof c.word);
    memcpy(&c.unknown, data + sizeof c.word, 2);
    c.lenient = (int)(size & 1);
    size_t n = (size - sizeof c.word - 2) / sizeof prog[0];
    if (n > BPF_MAXINSNS)
        n = BPF_MAXINSNS;
    memcpy(prog, data + sizeof c.word + 2, n * sizeof prog[0]);
    uint32_t action;
    int v = bpf_eval(prog, (unsigned)n, &c, &action);
    if (v != BPF_ALLOW && v != BPF_DENY && v != BPF_UNKNOWN && v != BPF_INVALID)
        __builtin_trap();
    (void)bpf_action_name(action);
    return 0;
}
