/*
 * fuzz_cli_syscall.c - libFuzzer harness for the memtrim command's reader of a thread's
 * /proc/PID/task/TID/syscall (cli/target_proc.c, target_parse_syscall), on which the choice
 * of a safe thread rests, and of the safe-call table that judges its result
 * (target_syscall_safe, target_syscall_name). Any bytes: a number, -1 or -2, never more.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_text.h"
#include "target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    uint64_t args[7];
    long nr = target_parse_syscall(text, args);
    if (nr < -2)
        __builtin_trap();
    if (nr >= 0) {
        (void)target_syscall_safe(nr, args);
        (void)target_syscall_name(nr);
    }
    free(text);
    return 0;
}
