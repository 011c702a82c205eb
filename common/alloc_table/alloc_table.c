/*
 * alloc_table.c - the allocator table's rows (alloc_table.h) as an array, and the look-up by
 * name. Constants only; any thread, no locks.
 */
#include "alloc_table.h"

#include <string.h>

#define MT_ALLOC_ROW_(id, ...) [MT_ALLOC_##id] = {.name = #id, __VA_ARGS__},
const struct mt_alloc_row mt_alloc_table[MT_ALLOC_COUNT] = {MT_ALLOC_ROWS(MT_ALLOC_ROW_)};

const struct mt_alloc_row *mt_alloc_row(const char *name)
{
    for (size_t i = 0; name && i < MT_ALLOC_COUNT; i++)
        if (strcmp(mt_alloc_table[i].name, name) == 0)
            return &mt_alloc_table[i];
    return NULL;
}
