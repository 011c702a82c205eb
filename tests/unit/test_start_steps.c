/*
 * test_start_steps.c - mt_create is a table of start steps undone in reverse
 * (core/instance/memtrim.c): a start that fails at any one step returns its
 * error, undoes every step before it (no thread left, no memory left: the ASan
 * build's leak check runs at exit) and leaves the process able to start again.
 * Before the table, a failure of the arenas cache left the pressure path's
 * object allocated: step "arenas" is one of those checked here.
 *
 * Threads: the test's, and the instance's while one runs. Ports: ephemeral.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "core.h"
#include "harness.h"
#include "instance.h"
#include "start.h"

static const char *const config = "{\"HttpPort\": 0, \"HttpBind\": \"127.0.0.1\"}";

/* The open descriptors of this process. */
static int fds_now(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) != NULL) {
        /* not the process-wide descriptor canary: a stop that left a part running keeps it
         * for that part (core/instance/memtrim.c), the next clean stop closes it */
        char path[320], link[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, link, sizeof(link) - 1);
        if (len > 0) {
            link[len] = '\0';
            if (strstr(link, "memtrim-canary"))
                continue;
        }
        n++;
    }
    if (d)
        closedir(d);
    return n;
}

/* The thread count of this process, from /proc/self/status. */
static int threads_now(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "Threads:", 8) == 0)
            n = atoi(line + 8);
    if (f)
        fclose(f);
    return n;
}

static void test_every_step_unwinds(void)
{
    int nsteps = mt_test_fail_start_step(-1);
    /* A first start opens what the process keeps once for all (the probe's files). */
    mt_destroy(start(config));
    /* A stop may leave the store behind (its thread not done within 2 s: valgrind at load
     * 23, 2026-12-07): it ends when its disk answers, with its descriptors. */
    WAIT_FOR(!harness_thread_named("memtrim-store"), 120);
    CHECK_MSG(!harness_thread_named("memtrim-store"), "the first stop's store never ended");
    int threads0 = threads_now(), fds0 = fds_now();
    CHECK(nsteps > 8);
    for (int i = 0; i < nsteps; i++) {
        struct memtrim *mt = NULL;
        char *err = NULL;
        mt_test_fail_start_step(i);
        int rc = mt_create(config, &api_routes, &mt, &err);
        CHECK_MSG(rc == -ENOMEM && mt == NULL, "step %d: rc %d", i, rc);
        CHECK_CONTAINS(err, "a test asked for it");
        free(err);
        /* A joined thread may still be counted for a moment: pthread_join returns once the
         * kernel cleared its tid, before the task is gone from /proc (ci: "step 10: 2
         * threads, 1 before"). A thread left running never leaves: the wait's guard fails it. */
        WAIT_FOR(threads_now() == threads0, 20);
        CHECK_MSG(threads_now() == threads0, "step %d: %d threads, %d before", i, threads_now(),
                  threads0);
        /* The pressure path's object holds two (eventfd, statm): a leak of it shows here. */
        CHECK_MSG(fds_now() == fds0, "step %d: %d descriptors, %d before", i, fds_now(), fds0);
        /* Nothing left running: the next start succeeds, and its stop is clean. */
        mt = start(config);
        CHECK(mt != NULL);
        mt_destroy(mt);
    }
    WAIT_FOR(threads_now() == threads0, 20);
    CHECK_EQ_INT(threads_now(), threads0);
}

/* The step the review found leaking is among those test_every_step_unwinds fails. */
static void test_arenas_is_a_step(void)
{
    int nsteps = mt_test_fail_start_step(-1), found = 0;
    for (int i = 0; i < nsteps && !found; i++) {
        char *err = NULL;
        struct memtrim *mt = NULL;
        mt_test_fail_start_step(i);
        mt_create(config, &api_routes, &mt, &err);
        found = err && strstr(err, "'arenas'") != NULL;
        free(err);
    }
    CHECK_MSG(found, "no start step is named arenas");
}

/* A worker group's member is a configuration of the same steps (memtrim.c's struct role:
 * which steps it runs, its sinks, its log level), not a branch inside them (issue 38): no
 * step, and nothing else in memtrim.c, asks whether the instance is a member. */
static void test_a_member_is_a_configuration(void)
{
    char path[512], line[512];
    snprintf(path, sizeof(path), "%s/core/instance/memtrim.c", MEMTRIM_SOURCE_DIR);
    FILE *f = fopen(path, "re");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f)
        return;
    int n = 0, roles = 0;
    while (fgets(line, sizeof(line), f)) {
        n++;
        CHECK_MSG(!strstr(line, "mt->member") && !strstr(line, "->member ?"),
                  "memtrim.c:%d asks whether the instance is a member: %s", n, line);
        roles += strstr(line, "ROLE_") != NULL;
    }
    fclose(f);
    CHECK_MSG(roles >= 15, "the step table names the roles of its steps (%d lines)", roles);
}

int main(void)
{
    RUN(test_a_member_is_a_configuration);
    RUN(test_every_step_unwinds);
    RUN(test_arenas_is_a_step);
    mt_test_fail_start_step(-1);
    return harness_end();
}
