/*
 * mt_alloc.h - the allocations memtrim's own code makes: mt_malloc, mt_calloc,
 * mt_realloc, mt_strdup, mt_vasprintf/mt_asprintf and mt_open_memstream. In a normal
 * build they are the libc calls themselves (macros, no cost). A build with
 * -DMEMTRIM_FAULT_INJECT=ON sends them through common/fault.c, where a test can make the
 * N-th call fail (SQLite's test_malloc is the model): tests/unit/fault_inject.c runs
 * memtrim's start and stop, its configuration parsing and each route over every N, so
 * that every -ENOMEM unwind runs. cJSON's allocations join them through cJSON_InitHooks
 * (mt_fault_cjson_hooks), set by that test only.
 *
 * Threads: any. The fault counter is one atomic for the process; it counts only while a
 * test has armed it.
 */
#ifndef MEMTRIM_MT_ALLOC_H
#define MEMTRIM_MT_ALLOC_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MEMTRIM_FAULT_INJECT
void *mt_malloc(size_t n);
void *mt_calloc(size_t count, size_t size);
void *mt_realloc(void *p, size_t n);
char *mt_strdup(const char *s);
int mt_vasprintf(char **out, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
int mt_asprintf(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
FILE *mt_open_memstream(char **buf, size_t *len);

/* The N-th counted call from now fails (n >= 1): once, or with persistent every call
 * from the N-th on; mt_fault_arm(0, 0) disarms. */
void mt_fault_arm(long n, int persistent);
/* Disarm; returns 1 when the armed call failed, 0 when fewer than N calls came. */
int mt_fault_disarm(void);
/* Calls counted since the last arm. */
long mt_fault_calls(void);
/* cJSON's allocations through mt_malloc from now on (cJSON_InitHooks; process-wide). */
void mt_fault_cjson_hooks(void);
#else
#define mt_malloc malloc
#define mt_calloc calloc
#define mt_realloc realloc
#define mt_strdup strdup
#define mt_vasprintf vasprintf
#define mt_asprintf asprintf
#define mt_open_memstream open_memstream
#endif

#endif /* MEMTRIM_MT_ALLOC_H */
