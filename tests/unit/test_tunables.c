/*
 * test_tunables.c - each glibc tunable of the configuration reaches mallopt,
 * observed by its effect (arena count, where a block is placed, how much the
 * heap keeps or grows by), each in a forked child so that this binary's own
 * allocator keeps glibc's defaults; refused values name their key; runtime
 * changes are honoured for the three that PATCH /config may change.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "arenas.h"
#include "config.h"
#include "api.h"
#include "core.h"
#include "harness.h"
#include "tunables.h"

#define NVALS 4
typedef void (*child_fn)(const char *json, int64_t *vals);

/* Run fn in a child with the configuration json; its NVALS results come back through a pipe. */
static int in_child(child_fn fn, const char *json, int64_t *vals)
{
    int fds[2];
    memset(vals, 0, sizeof(int64_t) * NVALS);
    if (pipe(fds) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int64_t v[NVALS] = {0};
        close(fds[0]);
        fn(json, v);
        ssize_t w = write(fds[1], v, sizeof(v));
        _exit(w == (ssize_t)sizeof(v) ? 0 : 1);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], vals, sizeof(int64_t) * NVALS);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return n == (ssize_t)(sizeof(int64_t) * NVALS) && WIFEXITED(status) && WEXITSTATUS(status) == 0
               ? 0
               : -1;
}

/* Parse json and apply its tunables as at start; vals[0] = the result. */
static int apply(const char *json, int64_t *vals)
{
    struct mt_config cfg;
    char *err = NULL;
    if (config_parse(json, &cfg, &err) != 0) {
        fprintf(stderr, "child: %s\n", err);
        free(err);
        return -1;
    }
    int rc = tunables_apply(NULL, &cfg, 1, &err);
    free(err);
    vals[0] = rc;
    return rc;
}

static pthread_barrier_t barrier;

/* Each thread allocates while all the others are alive (so none reuses a freed arena). */
static void *allocator_thread(void *arg)
{
    (void)arg;
    void *p[64];
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < 64; i++)
        p[i] = malloc(1000 + (size_t)i * 100);
    pthread_barrier_wait(&barrier); /* all have allocated */
    for (int i = 0; i < 64; i++)
        free(p[i]);
    return NULL;
}

/* vals: [rc, arena count after 8 threads allocated at once] */
static void child_arenas(const char *json, int64_t *vals)
{
    pthread_t t[8];
    struct mt_arenas a;
    char *err = NULL;
    if (apply(json, vals))
        return;
    pthread_barrier_init(&barrier, NULL, 8);
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, allocator_thread, NULL);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    if (arenas_read(&a, &err) == 0)
        vals[1] = a.count;
    arenas_free(&a);
    free(err);
}

static void test_arena_max(void)
{
    int64_t v[NVALS];
    SKIP_IF_SANITIZER_ALLOCATOR();
    CHECK_EQ_INT(in_child(child_arenas, "{\"MallocArenaMax\": 2}", v), 0);
    CHECK_EQ_INT(v[0], 0);
    CHECK_MSG(v[1] >= 1 && v[1] <= 2, "%lld arenas with MallocArenaMax 2", (long long)v[1]);
    CHECK_EQ_INT(in_child(child_arenas, "{\"MallocArenaMax\": 4}", v), 0);
    CHECK_MSG(v[1] >= 1 && v[1] <= 4, "%lld arenas with MallocArenaMax 4", (long long)v[1]);
    /* Without it, glibc gives each of the 8 threads an arena of its own (its
     * limit is 8 x cores): the control that shows the limit did something. */
    CHECK_EQ_INT(in_child(child_arenas, "{}", v), 0);
    CHECK_MSG(v[1] > 4, "only %lld arenas without MallocArenaMax", (long long)v[1]);
}

/* vals: [rc, mmapped blocks added by one 512 KiB malloc] */
static void child_mmap(const char *json, int64_t *vals)
{
    if (apply(json, vals))
        return;
    size_t before = mallinfo2().hblks;
    void *volatile p = malloc(512 * 1024);
    vals[1] = (int64_t)(mallinfo2().hblks - before);
    free(p);
}

static void test_mmap_threshold(void)
{
    int64_t v[NVALS];
    SKIP_IF_SANITIZER_ALLOCATOR();
    CHECK_EQ_INT(in_child(child_mmap, "{}", v), 0);
    CHECK_EQ_INT(v[1], 1); /* glibc's 128 KiB threshold: mmapped */
    CHECK_EQ_INT(in_child(child_mmap, "{\"MallocMmapThresholdBytes\": 1048576}", v), 0);
    CHECK_EQ_INT(v[0], 0);
    CHECK_EQ_INT(v[1], 0); /* below 1 MiB: from the heap */
}

/* vals: [rc, main arena bytes kept after freeing 8 MiB of small blocks at the top] */
static void child_trim_threshold(const char *json, int64_t *vals)
{
    enum { N = 4096 };
    static void *p[N];
    if (apply(json, vals))
        return;
    for (int i = 0; i < N; i++)
        p[i] = malloc(2000);
    for (int i = N - 1; i >= 0; i--)
        free(p[i]);
    vals[1] = (int64_t)mallinfo2().arena;
}

static void test_trim_threshold(void)
{
    int64_t v[NVALS];
    SKIP_IF_SANITIZER_ALLOCATOR();
    CHECK_EQ_INT(in_child(child_trim_threshold, "{\"MallocTrimThresholdBytes\": 33554432}", v),
                 0);
    CHECK_EQ_INT(v[0], 0);
    CHECK_MSG(v[1] >= 8 * 1000 * 1000, "a 32 MiB trim threshold kept only %lld bytes",
              (long long)v[1]);
    CHECK_EQ_INT(in_child(child_trim_threshold, "{\"MallocTrimThresholdBytes\": 65536}", v), 0);
    CHECK_MSG(v[1] < 1024 * 1024, "a 64 KiB trim threshold kept %lld bytes", (long long)v[1]);
}

/* vals: [rc, main arena growth when small blocks outgrow its top chunk] */
static void *volatile pad_blocks[4096];
static void child_top_pad(const char *json, int64_t *vals)
{
    if (apply(json, vals))
        return;
    struct mallinfo2 mi = mallinfo2();
    size_t n = (mi.keepcost + 65536) / 1000 + 1;
    for (size_t i = 0; i < n && i < 4096; i++)
        pad_blocks[i] = malloc(1000);
    vals[1] = (int64_t)(mallinfo2().arena - mi.arena);
}

static void test_top_pad(void)
{
    int64_t v[NVALS];
    SKIP_IF_SANITIZER_ALLOCATOR();
    CHECK_EQ_INT(in_child(child_top_pad, "{\"MallocTopPadBytes\": 33554432}", v), 0);
    CHECK_EQ_INT(v[0], 0);
    CHECK_MSG(v[1] >= 32 * 1024 * 1024, "the heap grew %lld bytes with a 32 MiB top pad",
              (long long)v[1]);
    CHECK_EQ_INT(in_child(child_top_pad, "{}", v), 0);
    CHECK_MSG(v[1] > 0 && v[1] < 4 * 1024 * 1024, "the heap grew %lld bytes with glibc's pad",
              (long long)v[1]);
}

/* vals: [rc, main arena growth when a 4 MiB block needs more heap] (after threads exist) */
static void *idle_thread(void *arg)
{
    pthread_barrier_wait(arg);
    return NULL;
}

static void child_runtime(const char *json, int64_t *vals)
{
    pthread_t t;
    pthread_barrier_t b;
    struct mt_config old, cfg;
    char *err = NULL;
    pthread_barrier_init(&b, NULL, 2);
    pthread_create(&t, NULL, idle_thread, &b); /* threads exist before the change */
    config_defaults(&old);
    cfg = old;
    if (config_patch(&cfg, json, &err) != 0) {
        vals[0] = -1;
        free(err);
        return;
    }
    vals[0] = tunables_apply(&old, &cfg, 1, &err);
    free(err);
    size_t before = mallinfo2().arena, mmapped = mallinfo2().hblks;
    void *volatile p = malloc(4 * 1024 * 1024);
    vals[1] = (int64_t)(mallinfo2().arena - before);
    vals[2] = (int64_t)(mallinfo2().hblks - mmapped);
    free(p);
    pthread_barrier_wait(&b);
    pthread_join(t, NULL);
}

static void test_runtime_change(void)
{
    int64_t v[NVALS];
    SKIP_IF_SANITIZER_ALLOCATOR();
    /* A 4 MiB block: mmapped by default, from the heap with an 8 MiB threshold set after a
     * thread exists, and then the heap grows by the block plus a 16 MiB top pad. */
    CHECK_EQ_INT(in_child(child_runtime, "{\"TrimPadBytes\": 0}", v), 0);
    CHECK_EQ_INT(v[2], 1);
    CHECK_EQ_INT(
        in_child(child_runtime,
                 "{\"MallocMmapThresholdBytes\": 8388608, \"MallocTopPadBytes\": 16777216}", v),
        0);
    CHECK_EQ_INT(v[0], 0);
    CHECK_EQ_INT(v[2], 0);
    CHECK_MSG(v[1] >= 18 * 1024 * 1024, "heap grew %lld bytes", (long long)v[1]);
    /* The control: the same threshold without the pad grows the heap by about the block. */
    CHECK_EQ_INT(in_child(child_runtime, "{\"MallocMmapThresholdBytes\": 8388608}", v), 0);
    CHECK_EQ_INT(v[2], 0);
    CHECK_MSG(v[1] < 8 * 1024 * 1024, "heap grew %lld bytes", (long long)v[1]);
}

static void test_refused(void)
{
    struct mt_config old, cfg;
    char *err = NULL;
    struct memtrim *mt = NULL;

    /* A value out of bounds is a start error that names the key (mallopt takes an int;
     * glibc 2.36's mallopt itself accepts any int for these four, its result is checked). */
    int rc = mt_create("{\"MallocTopPadBytes\": 4294967296, \"HttpPort\": 0, "
                       "\"Database\": null}",
                       &api_routes, &mt, &err);
    CHECK_EQ_INT(rc, -EINVAL);
    CHECK(mt == NULL);
    CHECK_CONTAINS(err, "MallocTopPadBytes");
    free(err);
    /* mallopt takes an int: the configuration bounds say so first. */
    CHECK_EQ_INT(config_parse("{\"MallocTopPadBytes\": 4294967296}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "MallocTopPadBytes");
    free(err);
    CHECK_EQ_INT(config_parse("{\"MallocArenaMax\": 0}", &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "MallocArenaMax");
    free(err);
    /* ArenaMax cannot change at run time. */
    config_defaults(&cfg);
    CHECK_EQ_INT(config_patch(&cfg, "{\"MallocArenaMax\": 2}", &err), -EINVAL);
    CHECK_CONTAINS(err, "cannot be changed at run time");
    free(err);
    /* Unsetting at run time what is set: refused, naming the key; nothing applied. */
    config_defaults(&old);
    old.malloc_top_pad_bytes = 4096;
    cfg = old;
    CHECK_EQ_INT(config_patch(&cfg, "{\"MallocTopPadBytes\": null}", &err), 0);
    CHECK_EQ_INT(cfg.malloc_top_pad_bytes, -1);
    CHECK_EQ_INT(tunables_apply(&old, &cfg, 1, &err), -EINVAL);
    CHECK_CONTAINS(err, "MallocTopPadBytes");
    free(err);
}

static void test_config_rows(void)
{
    struct mt_config cfg;
    char *err = NULL;
    CHECK_EQ_INT(config_parse(NULL, &cfg, &err), 0);
    for (int t = 0; t < MT_TUNABLE_COUNT; t++)
        CHECK_EQ_INT(tunables_value(&cfg, t), -1); /* unset by default */
    CHECK_EQ_INT(
        config_parse("{\"MallocArenaMax\": 3, \"MallocTrimThresholdBytes\": null}", &cfg, &err), 0);
    CHECK_EQ_INT(cfg.malloc_arena_max, 3);
    CHECK_EQ_INT(cfg.malloc_trim_threshold_bytes, -1);
    struct cJSON *j = config_to_json(&cfg);
    char *text = cJSON_PrintUnformatted(j);
    CHECK_CONTAINS(text, "\"MallocArenaMax\":3");
    CHECK_CONTAINS(text, "\"MallocTrimThresholdBytes\":null");
    free(text);
    cJSON_Delete(j);
    /* Another allocator: nothing is applied, nothing is claimed in force. */
    struct mt_tunables in;
    CHECK_EQ_INT(tunables_apply(NULL, &cfg, 0, &err), 0);
    tunables_get(&in);
    CHECK_EQ_INT(in.glibc, 0);
    CHECK_EQ_INT(in.value[MT_TUNABLE_ARENA_MAX], -1);
}

int main(void)
{
    RUN(test_config_rows);
    RUN(test_arena_max);
    RUN(test_mmap_threshold);
    RUN(test_trim_threshold);
    RUN(test_top_pad);
    RUN(test_runtime_change);
    RUN(test_refused);
    return harness_end();
}
