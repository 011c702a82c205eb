/*
 * churn.h - the tests' allocation workload: threads (each with its own
 * arena) allocate many 1-64 KB blocks, keep a small fraction and free the
 * rest, which leaves freed memory resident in several arenas.
 */
#ifndef MEMTRIM_CHURN_H
#define MEMTRIM_CHURN_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct churn {
    size_t mb_per_thread;
    int keep_permille;
    void **kept;
    size_t nkept, cap;
    unsigned seed;
};

static void *churn_thread(void *arg)
{
    struct churn *c = arg;
    size_t target = c->mb_per_thread << 20, total = 0, n = 0, cap = target / 512 + 16;
    void **blocks = malloc(cap * sizeof(void *));
    c->cap = cap / 10 + 16;
    c->kept = malloc(c->cap * sizeof(void *));
    c->nkept = 0;
    while (total < target && n < cap) {
        size_t size = 1024 + (size_t)(rand_r(&c->seed) % (63 * 1024));
        char *p = malloc(size);
        memset(p, 1, size);
        blocks[n++] = p;
        total += size;
    }
    for (size_t i = 0; i < n; i++) {
        if ((int)(rand_r(&c->seed) % 1000) < c->keep_permille && c->nkept < c->cap)
            c->kept[c->nkept++] = blocks[i];
        else
            free(blocks[i]);
    }
    free(blocks);
    return NULL;
}

/* Run the workload in nthreads threads; the kept blocks stay live in c[]. */
static void churn_run(struct churn *c, int nthreads, size_t mb_per_thread, int keep_permille)
{
    pthread_t t[16];
    for (int i = 0; i < nthreads && i < 16; i++) {
        c[i].mb_per_thread = mb_per_thread;
        c[i].keep_permille = keep_permille;
        c[i].seed = (unsigned)i + 1;
        pthread_create(&t[i], NULL, churn_thread, &c[i]);
    }
    for (int i = 0; i < nthreads && i < 16; i++)
        pthread_join(t[i], NULL);
}

static void churn_release(struct churn *c, int nthreads)
{
    for (int i = 0; i < nthreads && i < 16; i++) {
        for (size_t j = 0; j < c[i].nkept; j++)
            free(c[i].kept[j]);
        free(c[i].kept);
        c[i].kept = NULL;
        c[i].nkept = 0;
    }
}

#endif /* MEMTRIM_CHURN_H */
