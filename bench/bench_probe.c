/*
 * bench_probe.c - what memtrim's own calls cost the host: the cheap probe
 * (/proc/self), mallinfo2 with a few hundred and with ~16 thousand free
 * chunks, malloc_info (arena count), and malloc_trim returning ~1 GB spread
 * over 4 arenas. Prints medians of several runs. Run: build/bench_probe
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "probe.h"

#define RUNS 9

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double median_us(int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_i64);
    return (double)v[n / 2] / 1e3;
}

/* Fragment the heap: n blocks allocated, every other one freed (n/2 free chunks). */
static void **fragment(size_t n, size_t size)
{
    void **b = malloc(n * sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        b[i] = malloc(size);
        memset(b[i], 1, size);
    }
    for (size_t i = 0; i < n; i += 2) {
        free(b[i]);
        b[i] = NULL;
    }
    return b;
}

static void unfragment(void **b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(b[i]);
    free(b);
    malloc_trim(0);
}

static void bench_mallinfo(const char *label, size_t nblocks)
{
    int64_t t[RUNS], ti[RUNS];
    void **b = fragment(nblocks, 4096);
    struct mt_heap h;
    for (int i = 0; i < RUNS; i++) {
        probe_heap(NULL, &h, 0);
        t[i] = h.duration_ns;
        probe_heap(NULL, &h, 1);
        ti[i] = h.duration_ns;
    }
    probe_heap(NULL, &h, 0);
    printf("| mallinfo2, %s | %llu | %.1f |\n", label, (unsigned long long)h.ordblks,
           median_us(t, RUNS));
    printf("| mallinfo2 + malloc_info (arena count), %s | %llu | %.1f |\n", label,
           (unsigned long long)h.ordblks, median_us(ti, RUNS));
    unfragment(b, nblocks);
}

struct churn_arg {
    size_t mb;
    void **kept;
    size_t nkept;
};

static void *churn(void *p)
{
    struct churn_arg *a = p;
    size_t n = (a->mb << 20) / 16384;
    void **b = malloc(n * sizeof(void *));
    a->kept = malloc(n / 50 * sizeof(void *) + 8);
    a->nkept = 0;
    for (size_t i = 0; i < n; i++) {
        b[i] = malloc(16384);
        memset(b[i], 1, 16384);
    }
    for (size_t i = 0; i < n; i++) {
        if (i % 50 == 0)
            a->kept[a->nkept++] = b[i];
        else
            free(b[i]);
    }
    free(b);
    return NULL;
}

static void bench_trim(void)
{
    int64_t t[5];
    uint64_t released[5];
    for (int r = 0; r < 5; r++) {
        pthread_t th[4];
        struct churn_arg a[4];
        for (int i = 0; i < 4; i++) {
            a[i].mb = 256;
            pthread_create(&th[i], NULL, churn, &a[i]);
        }
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
        uint64_t before = probe_rss();
        int64_t t0 = mt_mono_ns();
        malloc_trim(0);
        t[r] = mt_mono_ns() - t0;
        released[r] = before - probe_rss();
        for (int i = 0; i < 4; i++) {
            for (size_t j = 0; j < a[i].nkept; j++)
                free(a[i].kept[j]);
            free(a[i].kept);
        }
        malloc_trim(0);
    }
    qsort(released, 5, sizeof(uint64_t), cmp_i64);
    printf("| malloc_trim(0) returning ~1 GB from 4 arenas (released %.0f MB) | - | %.1f |\n",
           (double)released[2] / 1048576.0, median_us(t, 5));
}

int main(void)
{
    int64_t t[RUNS];
    struct probe_cgroup cg;
    struct mt_cheap c;
    probe_cgroup_init(&cg);
    printf("| call | free chunks | median µs |\n|---|---|---|\n");
    for (int i = 0; i < RUNS; i++) {
        probe_cheap(&cg, &c);
        t[i] = c.duration_ns;
    }
    printf("| cheap probe (statm + status + stat + cgroup) | - | %.1f |\n", median_us(t, RUNS));
    for (int i = 0; i < RUNS; i++) {
        int64_t t0 = mt_mono_ns();
        probe_rss();
        t[i] = mt_mono_ns() - t0;
    }
    printf("| RSS alone (statm, the pressure check) | - | %.1f |\n", median_us(t, RUNS));
    bench_mallinfo("small heap", 600);
    bench_mallinfo("fragmented heap", 32000);
    bench_trim();
    return 0;
}
