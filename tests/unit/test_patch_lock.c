/*
 * test_patch_lock.c - PATCH /config calls mallopt without the configuration's
 * lock held: mallopt waits for glibc's main arena lock (a host thread in
 * malloc holds it), and every reader of the configuration (/memory/stats,
 * /metrics, the threads' re-reads) takes cfg_lock. This binary's own mallopt
 * (it takes the call from memtrim's static libraries) stands for a mallopt
 * that waits: it holds the PATCH inside the call until the test lets it go,
 * and meanwhile the test must be able to take cfg_lock and read the
 * configuration. Threads: the test's main thread and one PATCH thread.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#include "harness.h"
#include "api.h"
#include "core.h"
#include "instance.h"
#include "start.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int entered, released, calls;

/* mallopt as glibc's with a host thread in malloc: it returns when the test says so. */
int mallopt(int param, int value)
{
    (void)param;
    (void)value;
    pthread_mutex_lock(&lock);
    calls++;
    entered = 1;
    pthread_cond_broadcast(&cond);
    while (!released)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return 1;
}

static int entered_now(void)
{
    pthread_mutex_lock(&lock);
    int e = entered;
    pthread_mutex_unlock(&lock);
    return e;
}

struct patch {
    struct memtrim *mt;
    int rc;
};

static void *patch_main(void *arg)
{
    struct patch *p = arg;
    char *err = NULL;
    p->rc = mt_config_patch(p->mt, "{\"MallocTopPadBytes\": 1048576, \"SampleIntervalSeconds\": 7}",
                            &err);
    free(err);
    return NULL;
}

/* cfg_lock free now (the housekeeper's and HTTP threads' holds are copies: short). */
static int cfg_lock_free(struct memtrim *mt)
{
    if (pthread_mutex_trylock(&mt->cfg_lock) != 0)
        return 0;
    pthread_mutex_unlock(&mt->cfg_lock);
    return 1;
}

static void test_readers_do_not_wait_for_mallopt(void)
{
    struct memtrim *mt = start("{\"MemoryTrim\": {\"HttpPort\": 0, \"Database\": \"\", "
                               "\"Allocator\": \"glibc\"}}");
    struct patch p = {.mt = mt, .rc = -1};
    pthread_t t;
    struct mt_config cfg;
    if (!mt)
        return;
    CHECK_EQ_INT(calls, 0); /* nothing set at start: no mallopt */
    CHECK_EQ_INT(pthread_create(&t, NULL, patch_main, &p), 0);
    WAIT_FOR(entered_now(), 60);
    CHECK(entered_now());
    /* The PATCH is inside mallopt: the configuration's lock is free, a reader reads. */
    WAIT_FOR(cfg_lock_free(mt), 30);
    int free_now = cfg_lock_free(mt);
    CHECK_MSG(free_now, "cfg_lock is held across mallopt");
    if (free_now) { /* else reading would wait for the release below: the old hang */
        mt_config_get(mt, &cfg);
        CHECK_EQ_INT(cfg.malloc_top_pad_bytes, -1); /* not yet: the PATCH has not finished */
    }
    pthread_mutex_lock(&lock);
    released = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    pthread_join(t, NULL);
    CHECK_EQ_INT(p.rc, 0);
    CHECK_EQ_INT(calls, 1);
    mt_config_get(mt, &cfg);
    CHECK_EQ_INT(cfg.malloc_top_pad_bytes, 1048576);
    CHECK_EQ_INT(cfg.sample_interval_seconds, 7);
    struct mt_tunables tun;
    mt_tunables_get(&tun);
    CHECK_EQ_INT(tun.value[MT_TUNABLE_TOP_PAD], 1048576);
    mt_destroy(mt);
}

int main(void)
{
    RUN(test_readers_do_not_wait_for_mallopt);
    return harness_end();
}
