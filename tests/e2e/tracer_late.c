/*
 * tracer_late.c - libmemtrim-test-tracer-late.so: a late tracer, on demand
 * (tests/e2e/test_cli_hazards.py), LD_PRELOADed into the memtrim command so that its
 * tracer (a fork of it, no exec) calls this ptrace before glibc's. With
 * MEMTRIM_TEST_TRACER_LATE=REQUEST:SECONDS (REQUEST "interrupt": PTRACE_INTERRUPT), the
 * process's first such request sleeps SECONDS first: the tracer seized a thread and then was
 * late (stopped, starved of CPU) before it asked the thread to stop. The window the test's
 * stop of the tool and tracer rarely lands in (a few microseconds between the seize and the
 * interrupt: 1 of 8 in CI on 5116935) is then there each time. One thread per process (the
 * tracer's); no state but a flag. Never in a product build.
 */

#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <time.h>

static int done;

__attribute__((visibility("default"))) long ptrace(enum __ptrace_request req, ...)
{
    va_list ap;
    va_start(ap, req);
    pid_t pid = va_arg(ap, pid_t);
    void *addr = va_arg(ap, void *);
    void *data = va_arg(ap, void *);
    va_end(ap);
    long (*real)(enum __ptrace_request, ...) =
        (long (*)(enum __ptrace_request, ...))dlsym(RTLD_NEXT, "ptrace");
    const char *late = getenv("MEMTRIM_TEST_TRACER_LATE");
    if (late && !done && req == PTRACE_INTERRUPT && strncmp(late, "interrupt:", 10) == 0) {
        done = 1;
        double s = atof(late + 10);
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
    return real(req, pid, addr, data);
}
