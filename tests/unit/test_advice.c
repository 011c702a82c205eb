/*
 * test_advice.c - advice inside a running instance: the per-arena view and
 * the doctor called from several threads at once while the housekeeper runs
 * (for TSan), the cache and the budget (a second reading in a row is refused
 * under a tiny budget), and the exit summary logged once at stop.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "arenas.h"
#include "doctor.h"
#include "api.h"
#include "core.h"
#include "harness.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char summary[2048];
static int summaries;

static void sink(int level, const char *msg, void *arg)
{
    (void)level, (void)arg;
    pthread_mutex_lock(&log_lock);
    if (strstr(msg, "exit summary")) {
        snprintf(summary, sizeof(summary), "%s", msg);
        summaries++;
    }
    pthread_mutex_unlock(&log_lock);
}

static void *reader(void *arg)
{
    struct memtrim *mt = arg;
    struct doctor_finding f[DOCTOR_MAX_FINDINGS];
    for (int i = 0; i < 50; i++) {
        struct mt_arenas a;
        int64_t retry = 0;
        char *err = NULL;
        int rc = mt_arenas_get(mt, -1, &a, &retry, &err);
        if (rc == 0)
            arenas_free(&a);
        else if (rc != -EAGAIN && rc != -ENOTSUP)
            fprintf(stderr, "arenas: %d %s\n", rc, err ? err : "");
        free(err);
        mt_doctor_run(mt, f, DOCTOR_MAX_FINDINGS);
    }
    return NULL;
}

static void test_concurrent_readers(void)
{
    struct memtrim *mt = NULL;
    char *err = NULL;
    pthread_t t[4];
    int rc = mt_create("{\"HttpPort\": 0, \"Database\": null, \"StatsMaxAgeMs\": 0, "
                       "\"ProbeBudgetPercent\": 10}",
                       &api_routes, &mt, &err);
    CHECK_EQ_INT(rc, 0);
    free(err);
    if (rc)
        return;
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, reader, mt);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    mt_destroy(mt);
}

static void test_budget_and_cache(void)
{
    struct memtrim *mt = NULL;
    char *err = NULL;
    struct mt_arenas a, b;
    int64_t retry = 0;
    SKIP_IF_SANITIZER_ALLOCATOR();
    /* A cache an hour long: the second call shares the first reading. */
    int rc = mt_create("{\"HttpPort\": 0, \"Database\": null, \"StatsMaxAgeMs\": 3600000}",
                       &api_routes, &mt, &err);
    CHECK_EQ_INT(rc, 0);
    free(err);
    if (rc)
        return;
    double until = harness_now_s() + 30; /* the housekeeper's first probe may hold the budget */
    while ((rc = mt_arenas_get(mt, -1, &a, &retry, &err)) == -EAGAIN && harness_now_s() < until)
        usleep(20000);
    CHECK_EQ_INT(rc, 0);
    free(err);
    CHECK_EQ_INT(mt_arenas_get(mt, -1, &b, &retry, &err), 0);
    CHECK(a.count >= 1 && a.timestamp_ms == b.timestamp_ms); /* the same reading */
    CHECK(a.arena != b.arena);                               /* each its own copy */
    arenas_free(&a);
    arenas_free(&b);
    mt_destroy(mt);

    /* No cache, a tiny budget: a reading, then refusals that say when to come back. */
    rc = mt_create("{\"HttpPort\": 0, \"Database\": null, \"StatsMaxAgeMs\": 0, "
                   "\"ProbeBudgetPercent\": 0.001}",
                   &api_routes, &mt, &err);
    CHECK_EQ_INT(rc, 0);
    if (rc)
        return;
    int refused = 0;
    for (int i = 0; i < 3; i++) {
        rc = mt_arenas_get(mt, -1, &a, &retry, &err);
        if (rc == 0)
            arenas_free(&a);
        if (rc == -EAGAIN) {
            refused++;
            CHECK(retry > 0);
        }
        free(err);
        err = NULL;
    }
    CHECK(refused >= 2);
    mt_destroy(mt);
}

static void test_exit_summary(void)
{
    struct memtrim *mt = NULL;
    char *err = NULL;
    struct mt_trim_result r;
    int64_t retry = 0;
    mt_set_log_sink(sink, NULL);
    int rc = mt_create("{\"HttpPort\": 0, \"Database\": null}", &api_routes, &mt, &err);
    CHECK_EQ_INT(rc, 0);
    free(err);
    if (rc)
        return;
    CHECK_EQ_INT(mt_trim_manual(mt, -1, &r, &retry), 0);
    CHECK_EQ_INT(summaries, 0);
    mt_destroy(mt);
    mt_set_log_sink(NULL, NULL);
    CHECK_EQ_INT(summaries, 1);
    CHECK_CONTAINS(summary, "trims 1 (manual 1, periodic 0, pressure 0, burst 0)");
    CHECK_CONTAINS(summary, "peak RSS");
    CHECK_CONTAINS(summary, "trimming");
    CHECK_CONTAINS(summary, "probing");
    CHECK_CONTAINS(summary, "top finding: ");
}

int main(void)
{
    RUN(test_concurrent_readers);
    RUN(test_budget_and_cache);
    RUN(test_exit_summary);
    return harness_end();
}
