/*
 * memcount.c - what memtrim's own threads hold on the heap, measured in a
 * host built with ASan (tests/soak/run.sh preloads it after libasan). ASan
 * calls our hooks on every allocation and free; an allocation made by one of
 * memtrim's threads (named "memtrim-*" but not the demo's own "memtrim-demo",
 * or libmicrohttpd's "MHD-*") is remembered in a lock-free table with its
 * size until it is freed, by whichever thread. A thread of ours writes the
 * live total to $MEMCOUNT_FILE every 200 ms ("<live bytes> <live blocks>
 * <untracked>"; untracked counts what did not fit the table).
 *
 * Threads: any (the hooks), plus the writer. State: atomics only.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

void __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                               void (*free_hook)(const volatile void *));

#define SLOTS (1u << 20) /* power of two; memtrim holds far fewer live blocks */
#define TOMB ((uintptr_t)1)

static _Atomic uintptr_t keys[SLOTS];
static size_t sizes[SLOTS];
static _Atomic int64_t live_bytes, live_blocks, untracked;
static __thread int thread_kind = -1; /* -1 unknown, 0 not memtrim's, 1 memtrim's */
static __thread int in_hook;

static int memtrim_thread(void)
{
    if (thread_kind >= 0)
        return thread_kind;
    char name[17] = "";
    prctl(PR_GET_NAME, name);
    int mine = (strncmp(name, "memtrim-", 8) == 0 && strcmp(name, "memtrim-demo") != 0) ||
               strncmp(name, "MHD-", 4) == 0;
    if (strcmp(name, "memtrim-demo") != 0) /* the default name: a thread may not be named yet */
        thread_kind = mine;
    return mine;
}

static uint32_t slot_of(uintptr_t p)
{
    return (uint32_t)((p >> 4) * 0x9E3779B97F4A7C15ull >> 44) & (SLOTS - 1);
}

static void on_malloc(const volatile void *ptr, size_t size)
{
    if (ptr == NULL || in_hook || !memtrim_thread())
        return;
    uintptr_t p = (uintptr_t)ptr;
    for (uint32_t i = slot_of(p), n = 0; n < 64; i = (i + 1) & (SLOTS - 1), n++) {
        uintptr_t k = atomic_load(&keys[i]);
        if ((k == 0 || k == TOMB) && atomic_compare_exchange_strong(&keys[i], &k, p)) {
            sizes[i] = size;
            atomic_fetch_add(&live_bytes, (int64_t)size);
            atomic_fetch_add(&live_blocks, 1);
            return;
        }
    }
    atomic_fetch_add(&untracked, 1);
}

static void on_free(const volatile void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    if (p == 0 || atomic_load(&live_blocks) == 0)
        return;
    for (uint32_t i = slot_of(p), n = 0; n < 64; i = (i + 1) & (SLOTS - 1), n++) {
        uintptr_t k = atomic_load(&keys[i]);
        if (k == 0)
            return;
        if (k == p) {
            size_t size = sizes[i];
            if (atomic_compare_exchange_strong(&keys[i], &k, TOMB)) {
                atomic_fetch_sub(&live_bytes, (int64_t)size);
                atomic_fetch_sub(&live_blocks, 1);
            }
            return;
        }
    }
}

static void *writer(void *arg)
{
    const char *path = arg;
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    prctl(PR_SET_NAME, "memcount");
    for (;;) {
        in_hook = 1; /* our own stdio is not memtrim's */
        FILE *f = fopen(tmp, "w");
        if (f != NULL) {
            fprintf(f, "%lld %lld %lld\n", (long long)atomic_load(&live_bytes),
                    (long long)atomic_load(&live_blocks), (long long)atomic_load(&untracked));
            fclose(f);
            rename(tmp, path);
        }
        in_hook = 0;
        struct timespec ts = {0, 200000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

__attribute__((constructor)) static void memcount_start(void)
{
    const char *path = getenv("MEMCOUNT_FILE");
    pthread_t t;
    if (path == NULL)
        return;
    __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
    pthread_create(&t, NULL, writer, (void *)path);
    pthread_detach(t);
}
