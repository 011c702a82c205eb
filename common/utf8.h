/*
 * utf8.h - what a response body may hold: valid UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF). A client's bytes quoted in a message are cut on a
 * character boundary and every byte that is not part of a valid character becomes U+FFFD,
 * so that raw input is never echoed. Pure functions, any thread, no state.
 */
#ifndef MEMTRIM_UTF8_H
#define MEMTRIM_UTF8_H

#include <stddef.h>

/* The length of the valid character at s[0..n), or 0 when s[0] starts none. */
size_t mt_utf8_char(const unsigned char *s, size_t n);

/* The offset of the first byte of s[0..n) that is not part of a valid character, or n. */
size_t mt_utf8_invalid_at(const char *s, size_t n);

/* s[0..n) with every invalid byte replaced by U+FFFD, NUL-terminated, malloc'd (the caller
 * frees it), its length in *len; NULL when out of memory. */
char *mt_utf8_fix(const char *s, size_t n, size_t *len);

/* At most max bytes of the string s, for a message: cut on a character boundary, each
 * invalid byte as U+FFFD, "..." after it when cut; always NUL-terminated in dst[size]
 * (what does not fit is cut as well, on a boundary). */
void mt_utf8_quote(char *dst, size_t size, const char *s, size_t max);

#endif /* MEMTRIM_UTF8_H */
