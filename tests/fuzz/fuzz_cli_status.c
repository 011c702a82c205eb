/*
 * fuzz_cli_status.c - libFuzzer harness for the memtrim command's readers of a target's
 * /proc/PID/status (cli/target.c, target_parse_status: uids, capabilities, seccomp mode and
 * filters, the name the target chose) and /proc/PID/stat (cli/target_proc.c,
 * target_parse_stat: a name may hold ')' and spaces), which run as root; and a memory
 * cgroup's memory.stat (target_stat_reclaimable, both versions' names: a hostile cgroup's
 * figures), whose clean cache is the room's. Any bytes: the name stays NUL-terminated within
 * its buffer, and the cache is a count under 2^62 (a figure's digits never overflow).
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
    struct target_status st;
    target_parse_status(text, &st);
    if (memchr(st.name, 0, sizeof st.name) == NULL)
        __builtin_trap();
    pid_t ppid;
    unsigned long long start;
    (void)target_parse_stat(text, &ppid, &start);
    for (int v2 = 0; v2 < 2; v2++) {
        int64_t clean = target_stat_reclaimable(text, v2);
        if (clean < 0 || clean >= (INT64_C(1) << 62))
            __builtin_trap();
    }
    free(text);
    return 0;
}
