/*
 * fault.c - allocation-failure injection (mt_alloc.h): compiled to nothing unless the
 * build sets MEMTRIM_FAULT_INJECT. Once armed with N, the N-th counted allocation
 * fails (returns NULL with errno ENOMEM) and later ones succeed again (one failure per
 * run), or, persistent, every one from the N-th on fails (memory gone for good): a test
 * sweeps N = 1, 2, ... until a run makes fewer than N calls.
 * With MEMTRIM_FAULT_TRACE=1 in the environment the failing call prints its stack (the
 * sanitizer's, when there is one).
 *
 * Threads: any thread may allocate; the counter and the target are atomics. Arming and
 * disarming are the test's, from one thread.
 */
#ifdef MEMTRIM_FAULT_INJECT
#include "mt_alloc.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <unistd.h>

static atomic_long fault_target; /* 0: disarmed */
static atomic_long fault_count;
static atomic_int fault_fired;
static atomic_int fault_persistent; /* every call from the target on fails */

void __sanitizer_print_stack_trace(void) __attribute__((weak));

static void fault_trace(void)
{
    const char *t = getenv("MEMTRIM_FAULT_TRACE");
    if (!t || t[0] != '1')
        return;
    fprintf(stderr, "fault: allocation %ld fails here:\n", atomic_load(&fault_count));
    if (__sanitizer_print_stack_trace) {
        __sanitizer_print_stack_trace();
    } else {
        void *frames[32];
        backtrace_symbols_fd(frames, backtrace(frames, 32), STDERR_FILENO);
    }
}

/* Whether this call is the one to fail. */
static int fault_now(void)
{
    long target = atomic_load(&fault_target);
    if (target <= 0)
        return 0;
    long c = atomic_fetch_add(&fault_count, 1) + 1;
    if (c < target || (c > target && !atomic_load(&fault_persistent)))
        return 0;
    atomic_store(&fault_fired, 1);
    fault_trace();
    errno = ENOMEM;
    return 1;
}

void *mt_malloc(size_t n)
{
    return fault_now() ? NULL : malloc(n);
}

void *mt_calloc(size_t count, size_t size)
{
    return fault_now() ? NULL : calloc(count, size);
}

void *mt_realloc(void *p, size_t n)
{
    return fault_now() ? NULL : realloc(p, n);
}

char *mt_strdup(const char *s)
{
    return fault_now() ? NULL : strdup(s);
}

int mt_vasprintf(char **out, const char *fmt, va_list ap)
{
    if (fault_now())
        return -1;
    return vasprintf(out, fmt, ap);
}

int mt_asprintf(char **out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = mt_vasprintf(out, fmt, ap);
    va_end(ap);
    return rc;
}

FILE *mt_open_memstream(char **buf, size_t *len)
{
    return fault_now() ? NULL : open_memstream(buf, len);
}

void mt_fault_arm(long n, int persistent)
{
    atomic_store(&fault_target, 0);
    atomic_store(&fault_count, 0);
    atomic_store(&fault_fired, 0);
    atomic_store(&fault_persistent, persistent != 0);
    atomic_store(&fault_target, n > 0 ? n : 0);
}

int mt_fault_disarm(void)
{
    atomic_store(&fault_target, 0);
    return atomic_load(&fault_fired);
}

long mt_fault_calls(void)
{
    return atomic_load(&fault_count);
}

void mt_fault_cjson_hooks(void)
{
    cJSON_Hooks hooks = {.malloc_fn = mt_malloc, .free_fn = free};
    cJSON_InitHooks(&hooks);
}
#else
typedef int mt_fault_unused; /* ISO C wants a translation unit to declare something */
#endif
