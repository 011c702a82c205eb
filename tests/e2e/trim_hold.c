/*
 * trim_hold.c - libmemtrim-test-trim-hold.so: a test's hold on a host's malloc_trim
 * (tests/e2e/test_trim.py), LD_PRELOADed into a memtrim-demo host so that its malloc_trim
 * comes before glibc's, as test_server_quiesce's epoll_ctl comes before libc's. While the
 * file that MEMTRIM_TEST_TRIM_HOLD names exists, a call appends a line to <that>.entered and
 * waits (2 ms naps, 60 s at most: a hang guard) until the test removes the file, then runs
 * glibc's malloc_trim. The race of requests arriving during a trim is then no race: the test
 * holds the trim for as long as it needs. Any thread; no state but the files (a test that
 * needs no hold sets no variable and nothing changes). Never in a product build.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((visibility("default"))) int malloc_trim(size_t pad)
{
    int (*real)(size_t) = (int (*)(size_t))dlsym(RTLD_NEXT, "malloc_trim");
    const char *hold = getenv("MEMTRIM_TEST_TRIM_HOLD");
    if (hold != NULL && access(hold, F_OK) == 0) {
        char entered[4096];
        snprintf(entered, sizeof(entered), "%s.entered", hold);
        int fd = open(entered, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            (void)!write(fd, "trim\n", 5);
            close(fd);
        }
        for (int i = 0; i < 30000 && access(hold, F_OK) == 0; i++)
            usleep(2000);
    }
    return real != NULL ? real(pad) : 0;
}
