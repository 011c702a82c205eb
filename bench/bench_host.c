/*
 * bench_host.c - what memtrim does for and to a host, measured in-process:
 *   bench_host burst [none]      seconds from a burst of frees (4 x 128 MB churned in
 *                                4 arenas) until RSS is back near its baseline; "none"
 *                                runs without memtrim (to compare with another allocator
 *                                preloaded, e.g. jemalloc with its background thread)
 *   bench_host idle              CPU an idle host pays in 10 s: Orthanc 1.11.3's
 *                                unconditional malloc_trim every 100 ms vs memtrim with
 *                                TrimIntervalSeconds 0.1, on the same fragmented heap
 *   bench_host throughput [cfg]  studies per second of the churn workload, without
 *                                memtrim ("none") or with the configuration JSON given
 * Prints one result line per run; bench/run-core.sh takes medians.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "../tests/unit/churn.h"
#include "api.h"
#include "core.h"
#include "probe.h"

static double now_s(void)
{
    return (double)mt_mono_ns() / 1e9;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct memtrim *start(const char *json)
{
    struct memtrim *mt = NULL;
    char *err = NULL;
    if (mt_create(json, &api_routes, &mt, &err)) {
        fprintf(stderr, "bench_host: memtrim did not start: %s\n", err);
        exit(1);
    }
    return mt;
}

static int burst(int with_memtrim)
{
    struct churn c[4];
    struct memtrim *mt = with_memtrim ? start("{\"HttpPort\": 0, \"Database\": \"\"}") : NULL;
    sleep(1);
    uint64_t base = probe_rss();
    churn_run(c, 4, 128, 20);
    double t0 = now_s();
    uint64_t peak = probe_rss(), goal = base + (peak - base) / 4;
    double took = -1;
    while (now_s() - t0 < 60) {
        if (probe_rss() <= goal) {
            took = now_s() - t0;
            break;
        }
        usleep(10000);
    }
    printf("burst %s: RSS %.0f MB -> %.0f MB after the frees; back under %.0f MB in %.2f s\n",
           with_memtrim ? "memtrim" : "none", base / 1048576.0, peak / 1048576.0,
           goal / 1048576.0, took);
    churn_release(c, 4);
    mt_destroy(mt);
    return took < 0;
}

static int idle(void)
{
    struct churn c[4];
    churn_run(c, 4, 64, 20); /* an idle host with a fragmented heap (kept blocks) */
    malloc_trim(0);
    double cpu0 = thread_cpu_s(), t0 = now_s();
    int n = 0;
    while (now_s() - t0 < 10) {
        malloc_trim(0);
        n++;
        usleep(100000);
    }
    double naive = thread_cpu_s() - cpu0;

    struct memtrim *mt = start("{\"HttpPort\": 0, \"Database\": \"\", \"TrimIntervalSeconds\": 0.1}");
    struct mt_counters k0, k1;
    mt_counters_get(mt, &k0);
    sleep(10);
    mt_counters_get(mt, &k1);
    printf("idle 10 s: malloc_trim every 100 ms: %d calls, %.1f ms CPU | memtrim at 0.1 s: "
           "%.1f ms housekeeper CPU, %llu mallinfo2 (%.2f ms), %llu trims, %llu skips\n",
           n, naive * 1e3, (k1.housekeeper_cpu_seconds - k0.housekeeper_cpu_seconds) * 1e3,
           (unsigned long long)(k1.heap_probes - k0.heap_probes),
           (k1.heap_probe_seconds - k0.heap_probe_seconds) * 1e3,
           (unsigned long long)(k1.trims[MT_TRIGGER_PERIODIC] - k0.trims[MT_TRIGGER_PERIODIC]),
           (unsigned long long)(k1.skips[MT_SKIP_BELOW_MIN_RELEASABLE] -
                                k0.skips[MT_SKIP_BELOW_MIN_RELEASABLE]));
    mt_destroy(mt);
    churn_release(c, 4);
    return 0;
}

static int throughput(const char *cfg)
{
    struct memtrim *mt = strcmp(cfg, "none") ? start(cfg) : NULL;
    struct churn c[2];
    int studies = 0;
    double t0 = now_s();
    while (now_s() - t0 < 8) {
        churn_run(c, 2, 64, 20);
        churn_release(c, 2);
        studies += 2;
    }
    double rate = studies / (now_s() - t0);
    struct mt_counters k;
    struct rusage ru;
    memset(&k, 0, sizeof(k));
    if (mt)
        mt_counters_get(mt, &k);
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
                 ru.ru_stime.tv_usec / 1e6;
    printf("throughput %s: %.1f studies/s (64 MB each), %.1f ms CPU per study, %llu trims\n",
           mt ? "memtrim" : "none", rate, cpu * 1e3 / studies,
           (unsigned long long)(k.trims[MT_TRIGGER_PERIODIC] + k.trims[MT_TRIGGER_BURST] +
                                k.trims[MT_TRIGGER_PRESSURE]));
    mt_destroy(mt);
    return 0;
}

int main(int argc, char **argv)
{
    mt_set_log_sink(NULL, NULL);
    if (argc >= 2 && strcmp(argv[1], "burst") == 0)
        return burst(!(argc >= 3 && strcmp(argv[2], "none") == 0));
    if (argc >= 2 && strcmp(argv[1], "idle") == 0)
        return idle();
    if (argc >= 2 && strcmp(argv[1], "throughput") == 0)
        return throughput(argc >= 3 ? argv[2] : "{\"HttpPort\": 0, \"Database\": \"\"}");
    fprintf(stderr, "usage: bench_host burst [none] | idle | throughput [none|JSON]\n");
    return 2;
}
