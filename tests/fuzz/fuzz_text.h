/*
 * fuzz_text.h - the command's /proc parsers read text: a harness's bytes as a NUL-terminated
 * copy (NULL when out of memory; the caller frees it). One thread, no state.
 */
#ifndef MEMTRIM_FUZZ_TEXT_H
#define MEMTRIM_FUZZ_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text) {
        memcpy(text, data, size);
        text[size] = 0;
    }
    return text;
}

#endif
