/*
 * test_arenas.c - the malloc_info parser: glibc's real output with one arena
 * and with many (checked against mallinfo2, which counts the same chunks),
 * a recorded document with known figures, and malformed XML of every kind
 * (each refused with a message, never a crash: every prefix of a real
 * document is tried).
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "arenas.h"
#include "harness.h"

/* Recorded from glibc 2.36 (Debian 12): a main arena and one thread arena. */
static const char recorded[] =
    "<malloc version=\"1\">\n"
    "<heap nr=\"0\">\n<sizes>\n</sizes>\n"
    "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
    "<total type=\"rest\" count=\"1\" size=\"129536\"/>\n"
    "<system type=\"current\" size=\"135168\"/>\n"
    "<system type=\"max\" size=\"135168\"/>\n"
    "<aspace type=\"total\" size=\"135168\"/>\n"
    "<aspace type=\"mprotect\" size=\"135168\"/>\n"
    "</heap>\n"
    "<heap nr=\"1\">\n<sizes>\n"
    "  <size from=\"17\" to=\"32\" total=\"1280\" count=\"40\"/>\n"
    "  <size from=\"97\" to=\"112\" total=\"4480\" count=\"40\"/>\n"
    "  <unsorted from=\"193\" to=\"1953\" total=\"987817\" count=\"921\"/>\n"
    "</sizes>\n"
    "<total type=\"fast\" count=\"80\" size=\"5760\"/>\n"
    "<total type=\"rest\" count=\"922\" size=\"988233\"/>\n"
    "<system type=\"current\" size=\"2019328\"/>\n"
    "<system type=\"max\" size=\"2019328\"/>\n"
    "<aspace type=\"total\" size=\"2019328\"/>\n"
    "<aspace type=\"mprotect\" size=\"2019328\"/>\n"
    "<aspace type=\"subheaps\" size=\"1\"/>\n"
    "</heap>\n"
    "<total type=\"fast\" count=\"80\" size=\"5760\"/>\n"
    "<total type=\"rest\" count=\"923\" size=\"1117769\"/>\n"
    "<total type=\"mmap\" count=\"2\" size=\"401408\"/>\n"
    "<system type=\"current\" size=\"2154496\"/>\n"
    "<system type=\"max\" size=\"2154496\"/>\n"
    "<aspace type=\"total\" size=\"2154496\"/>\n"
    "<aspace type=\"mprotect\" size=\"2154496\"/>\n"
    "</malloc>\n";

static void test_recorded(void)
{
    struct mt_arenas a;
    char *err = NULL;
    CHECK_EQ_INT(arenas_parse(recorded, sizeof(recorded) - 1, &a, &err), 0);
    CHECK(err == NULL);
    CHECK_EQ_INT(a.count, 2);
    if (a.count != 2)
        return;
    CHECK_EQ_INT(a.arena[0].nr, 0);
    CHECK_EQ_INT(a.arena[0].top_bytes, 129536);
    CHECK_EQ_INT(a.arena[0].bins_bytes, 0);
    CHECK_EQ_INT(a.arena[0].in_use_bytes, 135168 - 129536);
    CHECK_EQ_INT(a.arena[0].subheaps, 0);
    CHECK_EQ_INT(a.arena[1].nr, 1);
    CHECK_EQ_INT(a.arena[1].fastbin_bytes, 5760);
    CHECK_EQ_INT(a.arena[1].fastbin_chunks, 80);
    /* glibc sums a bin chunk's size with its flags (1 or 5 each): for a range of sizes
     * the sum is the value = 987817 (mod 16) in [921, 5 x 921] nearest 3 x 921: 2761. */
    CHECK_EQ_INT(a.arena[1].bins_bytes, 987817 - 2761);
    CHECK_EQ_INT(a.arena[1].bins_chunks, 921);
    CHECK_EQ_INT(a.arena[1].top_bytes, 988233 - 987817);
    CHECK_EQ_INT(a.arena[1].free_bytes, 5760 + 988233 - 2761);
    CHECK_EQ_INT(a.arena[1].in_use_bytes, 2019328 - 5760 - 988233 + 2761);
    CHECK_EQ_INT(a.arena[1].subheaps, 1);
    /* What a trim can give back: the main arena's top (sbrk); of the thread arena nothing:
     * its bin chunks are all under a page (pinned: small chunks), its top never madvised. */
    CHECK_EQ_INT(a.arena[0].releasable_bytes, 129536);
    CHECK_EQ_INT(a.arena[0].pinned_top_bytes, 0);
    CHECK_EQ_INT(a.arena[1].releasable_bytes, 0);
    CHECK_EQ_INT(a.arena[1].pinned_small_bytes, 987817 - 2761);
    CHECK_EQ_INT(a.arena[1].pinned_edge_bytes, 0);
    CHECK_EQ_INT(a.arena[1].pinned_top_bytes, 988233 - 987817);
    CHECK_EQ_INT(a.mmapped_bytes, 401408);
    CHECK_EQ_INT(a.mmapped_count, 2);
    CHECK_EQ_INT(a.system_bytes, 2154496);
    CHECK_EQ_INT(a.rest_bytes, 1117769);
    CHECK_EQ_INT(a.free_bytes, a.arena[0].free_bytes + a.arena[1].free_bytes);
    arenas_free(&a);
    arenas_free(&a); /* twice is harmless */
}

/* A thread arena whose free memory is in chunks of 64 KiB: all but their ends releasable. */
static void test_pinned_large_chunks(void)
{
    static const char doc[] =
        "<malloc version=\"1\">\n<heap nr=\"1\">\n<sizes>\n"
        "  <size from=\"65541\" to=\"65541\" total=\"655410\" count=\"10\"/>\n"
        "  <size from=\"49\" to=\"49\" total=\"4900\" count=\"100\"/>\n"
        "</sizes>\n<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
        "<total type=\"rest\" count=\"111\" size=\"664406\"/>\n"
        "<system type=\"current\" size=\"1048576\"/>\n"
        "</heap>\n</malloc>\n";
    struct mt_arenas a;
    char *err = NULL;
    CHECK_EQ_INT(arenas_parse(doc, sizeof(doc) - 1, &a, &err), 0);
    if (a.count == 1) {
        const struct mt_arena *x = &a.arena[0];
        /* 10 chunks of 65536 (flags 5 each) and 100 of 48 (flags 1 each), a top of 4096 */
        CHECK_EQ_INT(x->bins_bytes, 655360 + 4800);
        CHECK_EQ_INT(x->pinned_small_bytes, 4800);
        CHECK_EQ_INT(x->pinned_edge_bytes, 10 * (4096 + 32));
        CHECK_EQ_INT(x->pinned_top_bytes, 4096);
        CHECK_EQ_INT(x->releasable_bytes, 655360 - 10 * (4096 + 32));
    } else {
        CHECK_MSG(0, "%d arenas: %s", a.count, h_str(err));
    }
    free(err);
    arenas_free(&a);
}

/* Every strict prefix of a real document is refused cleanly; so is the rest. */
static void test_malformed(void)
{
    static const struct {
        const char *xml, *why;
    } bad[] = {
        {"", "expected <malloc>"},
        {"garbage", "unexpected text"},
        {"<heap nr=\"0\">", "expected <malloc>"},
        {"<malloc version=\"1\"></malloc>", "no arena"},
        {"<malloc version=\"1\"><heap nr=\"0\"></heap></malloc>", "lacks its fast"},
        {"<malloc version=\"1\"><heap nr=\"x\"></heap></malloc>", "not a number"},
        {"<malloc version=\"1\"><heap nr=\"-1\"></heap></malloc>", "not a number"},
        {"<malloc version=\"1\"><heap></heap></malloc>", "lacks nr"},
        {"<malloc version=\"1\"><heap nr=\"0\"><heap nr=\"1\">", "inside <heap>"},
        {"<malloc version=\"1\"></heap></malloc>", "without <heap>"},
        {"<malloc version=\"1\"><heap nr=\"0\"><total type=\"fast\" count=\"0\" "
         "size=\"99999999999999999999999\"/>",
         "overflows"},
        {"<malloc version=\"1\"><heap nr=\"0\"><total type=\"fast\" count=\"0\" size=1/>",
         "no quoted value"},
        {"<malloc version=\"1\"><heap nr=\"0\"><total type=\"fast\" count=\"0\" size=\"1",
         "unterminated value"},
        {"<malloc version=\"1\"><heap nr=\"0\"><total", "unterminated"},
        {"<malloc version=\"1\"><heap nr=\"99999\"></heap></malloc>", "out of range"},
        {"<malloc version=\"1\"></malloc><heap nr=\"0\">", "after </malloc>"},
        {"<malloc version=\"1\"><averyveryverylongelementname/></malloc>", "too long"},
        {"<malloc version=\"1\"><heap nr=\"0\"></malloc>", "inside <heap>"},
    };
    struct mt_arenas a;
    char *err = NULL;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ_INT(arenas_parse(bad[i].xml, strlen(bad[i].xml), &a, &err), -EINVAL);
        CHECK_CONTAINS(err, bad[i].why);
        CHECK(a.arena == NULL && a.count == 0);
        free(err);
        err = NULL;
    }
    CHECK_EQ_INT(arenas_parse(NULL, 0, &a, &err), -EINVAL);
    free(err);
    int refused = 0;
    size_t n = sizeof(recorded) - 1;
    for (size_t len = 0; len < n - 1; len++) { /* all but the closing newline is needed */
        int rc = arenas_parse(recorded, len, &a, &err);
        refused += rc == -EINVAL && err != NULL;
        if (rc == 0)
            arenas_free(&a);
        free(err);
        err = NULL;
    }
    CHECK_EQ_INT(refused, n - 1);
    /* Unknown elements are skipped: a later glibc may add some. */
    const char *extra = "<malloc version=\"2\"><heap nr=\"0\"><sizes></sizes><future x=\"1\"/>"
                        "<total type=\"fast\" count=\"0\" size=\"0\"/>"
                        "<total type=\"rest\" count=\"1\" size=\"100\"/>"
                        "<system type=\"current\" size=\"4096\"/></heap></malloc>";
    CHECK_EQ_INT(arenas_parse(extra, strlen(extra), &a, &err), 0);
    CHECK_EQ_INT(a.count, 1);
    arenas_free(&a);
}

static pthread_barrier_t barrier;

static void *thread_main(void *arg)
{
    void *p[200];
    (void)arg;
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < 200; i++)
        p[i] = malloc(24 + (size_t)(i % 40) * 48);
    for (int i = 0; i < 200; i += 2)
        free(p[i]);
    pthread_barrier_wait(&barrier); /* all allocated at once: an arena each */
    return NULL;
}

/* In a child: n threads, then malloc_info parsed and compared with mallinfo2.
 * vals: [rc, count, system == arena, free == fordblks, fast == fsmblks, top0 == keepcost] */
static void child_real(int nthreads, int64_t *vals)
{
    pthread_t t[8];
    struct mt_arenas a;
    char *err = NULL;
    if (nthreads) {
        pthread_barrier_init(&barrier, NULL, (unsigned)nthreads);
        for (int i = 0; i < nthreads; i++)
            pthread_create(&t[i], NULL, thread_main, NULL);
        for (int i = 0; i < nthreads; i++)
            pthread_join(t[i], NULL);
    }
    /* No allocation between malloc_info and mallinfo2: a static, unbuffered stream. */
    static char xml[1 << 20];
    FILE *f = fmemopen(xml, sizeof(xml), "w");
    if (!f)
        return;
    setvbuf(f, NULL, _IONBF, 0);
    int rc = malloc_info(0, f);
    struct mallinfo2 mi = mallinfo2();
    long len = ftell(f);
    fclose(f);
    vals[0] = rc == 0 && len > 0 ? arenas_parse(xml, (size_t)len, &a, &err) : -1;
    if (vals[0] != 0) {
        fprintf(stderr, "child: %s\n", err ? err : "?");
        return;
    }
    vals[1] = a.count;
    vals[2] = a.system_bytes == mi.arena && a.system_bytes > 0;
    /* exact in the main arena; other arenas' range bins may be off by a few bytes a chunk */
    uint64_t chunks = 0;
    for (int i = 0; i < a.count; i++)
        chunks += a.arena[i].nr ? a.arena[i].bins_chunks : 0;
    vals[3] = a.free_bytes <= mi.fordblks + 2 * chunks && a.free_bytes + 2 * chunks >= mi.fordblks;
    if (!vals[3])
        fprintf(stderr, "child: free %llu fordblks %zu\n", (unsigned long long)a.free_bytes,
                mi.fordblks);
    uint64_t fast = 0, sys = 0;
    for (int i = 0; i < a.count; i++) {
        fast += a.arena[i].fastbin_bytes;
        sys += a.arena[i].system_bytes;
    }
    vals[4] = fast == mi.fsmblks && sys == a.system_bytes;
    vals[5] = a.arena[0].nr == 0 && a.arena[0].top_bytes == mi.keepcost;
    arenas_free(&a);
}

static void run_real(int nthreads, int64_t *vals)
{
    int fds[2];
    memset(vals, 0, 6 * sizeof(*vals));
    if (pipe(fds) != 0)
        return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int64_t v[6] = {-1};
        close(fds[0]);
        child_real(nthreads, v);
        _exit(write(fds[1], v, sizeof(v)) == (ssize_t)sizeof(v) ? 0 : 1);
    }
    close(fds[1]);
    if (read(fds[0], vals, 6 * sizeof(*vals)) != (ssize_t)(6 * sizeof(*vals)))
        vals[0] = -999;
    close(fds[0]);
    waitpid(pid, NULL, 0);
}

static void test_real_output(void)
{
    int64_t v[6];
    SKIP_IF_SANITIZER_ALLOCATOR();
    run_real(0, v); /* a child of a single-threaded test: the main arena only */
    CHECK_EQ_INT(v[0], 0);
    CHECK_EQ_INT(v[1], 1);
    CHECK_EQ_INT(v[2], 1);
    CHECK_EQ_INT(v[3], 1);
    CHECK_EQ_INT(v[4], 1);
    CHECK_EQ_INT(v[5], 1);
    run_real(6, v); /* six threads allocating at once: an arena each */
    CHECK_EQ_INT(v[0], 0);
    CHECK_MSG(v[1] == 7, "%lld arenas", (long long)v[1]);
    CHECK_EQ_INT(v[2], 1);
    CHECK_EQ_INT(v[3], 1);
    CHECK_EQ_INT(v[4], 1);
    CHECK_EQ_INT(v[5], 1);
}

static void test_copy(void)
{
    struct mt_arenas a, b;
    char *err = NULL;
    CHECK_EQ_INT(arenas_parse(recorded, sizeof(recorded) - 1, &a, &err), 0);
    CHECK_EQ_INT(arenas_copy(&b, &a), 0);
    arenas_free(&a);
    CHECK_EQ_INT(b.count, 2);
    CHECK_EQ_INT(b.arena[1].bins_bytes, 987817 - 2761);
    arenas_free(&b);
}

int main(void)
{
    RUN(test_recorded);
    RUN(test_malformed);
    RUN(test_copy);
    RUN(test_real_output);
    RUN(test_pinned_large_chunks);
    return harness_end();
}
