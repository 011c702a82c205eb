/*
 * fuzz_arenas.c - libFuzzer harness for the malloc_info parser
 * (core/measure/arenas.c): any bytes go through arenas_parse; a success must be
 * self-consistent (free = fastbins + bins + top per arena, sums match), a
 * failure must say why. Build and run with tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "arenas.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mt_arenas a;
    char *err = NULL;
    if (arenas_parse((const char *)data, size, &a, &err) == 0) {
        uint64_t free_sum = 0;
        if (err != NULL || a.count < 1 || a.arena == NULL)
            abort();
        for (int i = 0; i < a.count; i++) {
            const struct mt_arena *r = &a.arena[i];
            if (r->free_bytes != r->fastbin_bytes + r->bins_bytes + r->top_bytes)
                abort();
            free_sum += r->free_bytes;
        }
        if (free_sum != a.free_bytes)
            abort();
        arenas_free(&a);
    } else if (err == NULL) {
        abort();
    }
    free(err);
    return 0;
}
