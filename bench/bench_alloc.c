/*
 * bench_alloc.c - a burst under whatever allocator is preloaded, with or
 * without memtrim (on its defaults):
 *   bench_alloc [none|memtrim] [seconds]
 * Four pool threads, which stay alive and idle afterwards as a server's
 * workers do, each allocate 128 MB in 1-64 KB blocks, keep 10 % and free the
 * rest. Prints RSS before, after the frees, the floor (RSS before + the live
 * bytes kept, by malloc_usable_size) and how long until RSS is within 1.1 x
 * and 1.25 x the floor (-1: not within `seconds`, default 30), and RSS at the
 * end. bench/run-alloc.sh runs it under each allocator.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "core.h"
#include "probe.h"

#define THREADS 4
#define MB_PER_THREAD 128
#define KEEP_PERMILLE 100

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int done_count, finish;

struct worker {
    unsigned seed;
    void **kept;
    size_t nkept;
    size_t kept_bytes;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    size_t target = (size_t)MB_PER_THREAD << 20, total = 0, n = 0, cap = target / 512 + 16;
    void **blocks = malloc(cap * sizeof(void *));
    w->kept = malloc((cap / 10 + 16) * sizeof(void *));
    while (blocks && w->kept && total < target && n < cap) {
        size_t size = 1024 + (size_t)(rand_r(&w->seed) % (63 * 1024));
        char *p = malloc(size);
        if (!p)
            break;
        memset(p, 1, size);
        blocks[n++] = p;
        total += size;
    }
    for (size_t i = 0; i < n; i++) {
        if ((int)(rand_r(&w->seed) % 1000) < KEEP_PERMILLE && w->nkept < cap / 10 + 16) {
            w->kept[w->nkept++] = blocks[i];
            w->kept_bytes += malloc_usable_size(blocks[i]);
        } else {
            free(blocks[i]);
        }
    }
    free(blocks);
    /* Idle, as a pool thread between requests, until the end. */
    pthread_mutex_lock(&lock);
    done_count++;
    pthread_cond_broadcast(&cond);
    while (!finish)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; i < w->nkept; i++)
        free(w->kept[i]);
    free(w->kept);
    return NULL;
}

int main(int argc, char **argv)
{
    int with = argc > 1 && strcmp(argv[1], "memtrim") == 0;
    double seconds = argc > 2 ? atof(argv[2]) : 30;
    struct memtrim *mt = NULL;
    struct worker w[THREADS];
    pthread_t t[THREADS];
    char *err = NULL;

    if (with && mt_create("{\"HttpPort\": 0, \"Database\": \"\"}", &api_routes, &mt, &err)) {
        fprintf(stderr, "bench_alloc: memtrim did not start: %s\n", err);
        return 1;
    }
    sleep(1);
    uint64_t base = probe_rss();
    memset(w, 0, sizeof(w));
    for (int i = 0; i < THREADS; i++) {
        w[i].seed = (unsigned)i + 1;
        pthread_create(&t[i], NULL, worker_main, &w[i]);
    }
    pthread_mutex_lock(&lock);
    while (done_count < THREADS)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    int64_t t0 = mt_mono_ns();
    uint64_t after = probe_rss(), kept = 0, rss = after;
    for (int i = 0; i < THREADS; i++)
        kept += w[i].kept_bytes;
    uint64_t floor = base + kept;
    double took11 = -1, took125 = -1, now;
    while ((now = (double)(mt_mono_ns() - t0) / 1e9) < seconds && took11 < 0) {
        rss = probe_rss();
        if (took125 < 0 && (double)rss <= 1.25 * (double)floor)
            took125 = now;
        if ((double)rss <= 1.1 * (double)floor)
            took11 = now;
        usleep(10000);
    }
    printf("bench_alloc %s: RSS before %.0f MB, after the frees %.0f MB, floor %.0f MB "
           "(live %.0f MB), within 1.1x floor in %.2f s, within 1.25x in %.2f s, RSS at the end "
           "%.0f MB (%.2fx floor)\n",
           with ? "memtrim" : "none", base / 1048576.0, after / 1048576.0, floor / 1048576.0,
           kept / 1048576.0, took11, took125, rss / 1048576.0, (double)rss / (double)floor);
    pthread_mutex_lock(&lock);
    finish = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    mt_destroy(mt);
    return 0;
}
