/*
 * tracer_late.c - libmemtrim-test-tracer-late.so: a late tracer, on demand
 * (tests/e2e/test_cli_hazards.py), LD_PRELOADed into the memtrim command so that its
 * tracer (a fork of it, no exec) calls this ptrace before glibc's. With
 * MEMTRIM_TEST_TRACER_LATE=REQUEST[#N]:WAIT the process's N-th request of that kind (1 when
 * #N is left out) waits before it is made. REQUEST: "interrupt" (PTRACE_INTERRUPT: the tracer
 * seized a thread and is late before it asks it to stop), "syscall" (PTRACE_SYSCALL: the
 * first call's mmap, #1 into its syscall-entry stop, #2 on to its exit), "cont" (PTRACE_CONT:
 * the first is the jump into the page, the thread's registers and mask already ours). WAIT:
 * SECONDS, a sleep; or a path (starting with '/'): PATH.entered is created and the tracer
 * waits while PATH exists (2 ms naps, 60 s at most: a hang guard), as tests/e2e/trim_hold.c
 * holds a trim, so that the test does what it needs inside the window and then lets it go.
 * A window the test's stop or signal rarely lands in (a few microseconds between two
 * requests) is then there each time. One thread per process (the tracer's); no state but a
 * count. Never in a product build.
 */

#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <time.h>
#include <unistd.h>

static int seen;

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Whether req is the one MEMTRIM_TEST_TRACER_LATE names (counted), and its WAIT. */
static const char *late_here(enum __ptrace_request req)
{
    static const struct {
        const char *name;
        enum __ptrace_request req;
    } kinds[] = {{"interrupt", PTRACE_INTERRUPT}, {"syscall", PTRACE_SYSCALL},
                 {"cont", PTRACE_CONT}};
    const char *late = getenv("MEMTRIM_TEST_TRACER_LATE");
    if (!late)
        return NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t n = strlen(kinds[i].name);
        if (kinds[i].req != req || strncmp(late, kinds[i].name, n) != 0)
            continue;
        const char *p = late + n;
        int which = 1;
        if (*p == '#')
            which = (int)strtol(p + 1, (char **)&p, 10);
        if (*p != ':' || ++seen != which)
            return NULL;
        return p + 1;
    }
    return NULL;
}

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
    const char *wait = late_here(req);
    if (wait && wait[0] == '/') {
        char entered[4096];
        snprintf(entered, sizeof entered, "%s.entered", wait);
        int fd = open(entered, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
        for (int i = 0; i < 30000 && access(wait, F_OK) == 0; i++)
            nap(0.002);
    } else if (wait) {
        nap(atof(wait));
    }
    return real(req, pid, addr, data);
}
