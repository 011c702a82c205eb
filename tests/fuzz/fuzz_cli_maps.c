/*
 * fuzz_cli_maps.c - libFuzzer harness for the memtrim command's /proc/PID/maps line parser
 * (cli/target.c, target_parse_map_line), which runs as root on a target's maps (its paths are
 * the target's to choose: a file name may hold anything but a newline). Any bytes, line by
 * line: a parsed line has a NUL-terminated path and permissions within their buffers.
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
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        struct target_mapping m;
        if (target_parse_map_line(line, &m) == 0 &&
            (memchr(m.path, 0, sizeof m.path) == NULL || memchr(m.perms, 0, sizeof m.perms) == NULL))
            __builtin_trap();
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    return 0;
}
