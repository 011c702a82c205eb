/*
 * test_alloc.c - allocator detection and the back ends, with the real
 * libraries: this binary re-executes itself with Debian's jemalloc, tcmalloc
 * and mimalloc in LD_PRELOAD (the child checks detection, stats and release
 * and exits 0), and once with tcmalloc loaded by dlopen (present, but not the
 * malloc in use: auto must stay on glibc; jemalloc cannot be dlopen'ed, its
 * TLS is initial-exec), and runs a host linked against libjemalloc.so.2
 * (alloc_linked_host.c). A forced allocator that is not in the process stops
 * the start with a message naming what was found.
 */
#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <libgen.h>
#include <stdint.h>
#include <sys/wait.h>

#include "alloc.h"
#include "api.h"
#include "core.h"
#include "harness.h"
#include "probe.h"
#include "snapshot.h"

struct lib {
    const char *name;
    const char *file;
};
static const struct lib libs[] = {
    {"jemalloc", "libjemalloc.so.2"},
    {"tcmalloc", "libtcmalloc_minimal.so.4"},
    {"mimalloc", "libmimalloc.so.2"},
};

/* The library's path in libc's own directory (Debian's multiarch directory); 0 if it is there. */
static int lib_path(const char *file, char *out, size_t size)
{
    Dl_info info;
    char dir[512];
    if (!dladdr((void *)gnu_get_libc_version, &info) || !info.dli_fname)
        return -1;
    snprintf(dir, sizeof(dir), "%s", info.dli_fname);
    snprintf(out, size, "%s/%s", dirname(dir), file);
    if (access(out, R_OK) == 0)
        return 0;
    snprintf(out, size, "/usr/lib/%s/%s", basename(dir), file);
    return access(out, R_OK);
}

/* In the child: the allocator in LD_PRELOAD (or dlopen'ed) is what detection says. */
static int child(const char *expect, const char *dlopen_path)
{
    const struct alloc_ops *a = NULL;
    struct alloc_found found;
    struct mt_heap h0, h1;
    char *err = NULL, version[64] = "";
    enum { BIG = 64 << 20 };

    if (dlopen_path && !dlopen(dlopen_path, RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "dlopen %s: %s\n", dlopen_path, dlerror());
        return 2;
    }
    alloc_detect(&found);
    CHECK_MSG(found.serving && strcmp(found.serving, expect) == 0, "serving %s, expected %s (%s)",
              h_str(found.serving), expect, found.malloc_object);
    CHECK_CONTAINS(found.present, "glibc");
    CHECK_EQ_INT(alloc_select("auto", &a, &err), 0);
    CHECK(a && strcmp(alloc_name(a), expect) == 0);
    if (!a)
        return harness_end();
    a->version(version, sizeof(version));
    CHECK_MSG(version[0] != '\0', "%s has no version", alloc_name(a));

    /* Stats are non-zero and follow a 64 MB allocation. */
    probe_heap(a, &h0, 1);
    char *big = malloc(BIG);
    memset(big, 1, BIG);
    probe_heap(a, &h1, 0);
    CHECK(h1.allocator && strcmp(h1.allocator, expect) == 0);
    CHECK(h1.known & MT_HEAP_HAS_MAPPED);
    CHECK_MSG(h1.heap_mapped_bytes >= h0.heap_mapped_bytes + BIG / 2, "%s mapped %llu -> %llu",
              expect, (unsigned long long)h0.heap_mapped_bytes,
              (unsigned long long)h1.heap_mapped_bytes);
    if (h1.known & MT_HEAP_HAS_IN_USE)
        CHECK_MSG(h1.heap_in_use_bytes >= h0.heap_in_use_bytes + BIG, "%s in use %llu -> %llu",
                  expect, (unsigned long long)h0.heap_in_use_bytes,
                  (unsigned long long)h1.heap_in_use_bytes);
    CHECK(h1.nfigures > 0);
    CHECK(h1.duration_ns > 0);
    if (strcmp(expect, "jemalloc") == 0) {
        CHECK(h1.known & MT_HEAP_HAS_RESIDENT);
        CHECK(h0.arena_count >= 1);
    }
    CHECK(!(h1.known & MT_HEAP_HAS_MALLINFO));
    free(big);
    CHECK_EQ_INT(a->release(0), 1);

    /* The probe budget rations this allocator's stats call as it does mallinfo2's: at
     * 0.001 % of wall time, a call of a few µs allows the next one seconds later. */
    struct snapshot_cache sc;
    struct mt_snapshot snap;
    struct mt_counters c0, c1;
    const struct snapshot_want want = {.cheap_max_age_ns = 0, .heap_max_age_ns = 0,
                                       .budget_percent = 0.001};
    CHECK_EQ_INT(snapshot_init(&sc), 0);
    snapshot_set_alloc(&sc, a);
    snapshot_get(&sc, &want, &snap);
    CHECK(snap.heap.allocator && strcmp(snap.heap.allocator, expect) == 0);
    CHECK(snap.allocator && strcmp(snap.allocator, expect) == 0);
    memset(&c0, 0, sizeof(c0));
    snapshot_counters(&sc, &c0);
    CHECK_EQ_INT(c0.heap_probes, 1);
    snapshot_get(&sc, &want, &snap);
    memset(&c1, 0, sizeof(c1));
    snapshot_counters(&sc, &c1);
    CHECK_EQ_INT(c1.heap_probes, 1);
    snapshot_destroy(&sc);

    /* glibc is always present; another allocator that is not here is refused by name. */
    const char *missing = strcmp(expect, "tcmalloc") == 0 ? "mimalloc" : "tcmalloc";
    CHECK_EQ_INT(alloc_select(missing, &a, &err), -ENOENT);
    CHECK_CONTAINS(err, missing);
    CHECK_CONTAINS(err, expect);
    free(err);
    return harness_end();
}

/* In the child: tcmalloc loaded with dlopen is present, but glibc's malloc serves. */
static int child_dlopen(const char *path)
{
    const struct alloc_ops *a = NULL;
    struct alloc_found found;
    char *err = NULL;
    if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 2;
    }
    alloc_detect(&found);
    CHECK_MSG(found.serving && strcmp(found.serving, "glibc") == 0, "serving %s",
              h_str(found.serving));
    CHECK_CONTAINS(found.present, "tcmalloc");
    CHECK_EQ_INT(alloc_select("auto", &a, &err), 0);
    CHECK(a == &alloc_glibc);
    /* Forcing it is allowed (it is present), with a warning in the log. */
    CHECK_EQ_INT(alloc_select("tcmalloc", &a, &err), 0);
    CHECK(a == &alloc_tcmalloc);
    return harness_end();
}

static int run_child(const char *self, const char *preload, const char *arg1, const char *arg2)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (preload)
            setenv("LD_PRELOAD", preload, 1);
        else
            unsetenv("LD_PRELOAD");
        execl(self, self, arg1, arg2, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_each_preloaded(const char *self)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    char path[600];
    for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
        if (lib_path(libs[i].file, path, sizeof(path)) != 0) {
            char why[300];
            snprintf(why, sizeof(why), "%s is not installed (tests/install-deps.sh all installs it)",
                     libs[i].file);
            SKIP_PART(libs[i].name, why);
            continue;
        }
        int rc = run_child(self, path, "--child", libs[i].name);
        CHECK_MSG(rc == 0, "LD_PRELOAD=%s: child exited %d", path, rc);
    }
}

static void test_dlopen_is_not_serving(const char *self)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    char path[600];
    if (lib_path("libtcmalloc_minimal.so.4", path, sizeof(path)) != 0)
        SKIP("libtcmalloc_minimal.so.4 is not installed (tests/install-deps.sh all installs it)");
    int rc = run_child(self, NULL, "--child-dlopen", path);
    CHECK_MSG(rc == 0, "dlopen child exited %d", rc);
}

static void test_glibc_here(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
    const struct alloc_ops *a = NULL;
    char *err = NULL;
    CHECK_EQ_INT(alloc_select("auto", &a, &err), 0);
    CHECK(a == &alloc_glibc);
    CHECK_EQ_INT(alloc_select("glibc", &a, &err), 0);
    CHECK(alloc_by_name("jemalloc") == &alloc_jemalloc);
    CHECK(alloc_by_name("nope") == NULL);
}

/* A forced allocator that is absent: the start fails, naming it and what was found. */
static void test_forced_missing(void)
{
    struct memtrim *mt = NULL;
    char *err = NULL;
    int rc = mt_create("{\"Allocator\": \"tcmalloc\", \"HttpPort\": 0, \"Database\": \"\"}",
                       &api_routes, &mt, &err);
    CHECK_EQ_INT(rc, -ENOENT);
    CHECK(mt == NULL);
    CHECK_CONTAINS(err, "Allocator: tcmalloc was asked for but is not in this process");
    CHECK_CONTAINS(err, "malloc is served by");
    CHECK_CONTAINS(err, "allocator APIs found: glibc");
    free(err);
    err = NULL;
    rc = mt_create("{\"Allocator\": \"hoard\"}", &api_routes, &mt, &err);
    CHECK_EQ_INT(rc, -EINVAL);
    CHECK_CONTAINS(err, "Allocator");
    CHECK_CONTAINS(err, "auto|glibc|jemalloc|tcmalloc|mimalloc");
    free(err);
    /* after a refused start, a normal one works */
    err = NULL;
    rc = mt_create("{\"HttpPort\": 0, \"Database\": \"\"}", &api_routes, &mt, &err);
    CHECK_MSG(rc == 0, "%s", h_str(err));
    mt_destroy(mt);
}

/* A host linked against libjemalloc.so.2 (built by CMake when the library is there). */
static void test_linked(void)
{
    SKIP_IF_SANITIZER_ALLOCATOR();
#ifdef ALLOC_LINKED_HOST
    char line[512] = "";
    FILE *f = popen(ALLOC_LINKED_HOST, "r");
    CHECK(f != NULL);
    if (!f)
        return;
    if (!fgets(line, sizeof(line), f))
        line[0] = '\0';
    CHECK_EQ_INT(pclose(f), 0);
    CHECK_CONTAINS(line, "serving jemalloc selected jemalloc");
#else
    SKIP("libjemalloc.so.2 was not found at build time: no linked host was built");
#endif
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child") == 0)
        return child(argv[2], NULL);
    if (argc == 3 && strcmp(argv[1], "--child-dlopen") == 0)
        return child_dlopen(argv[2]);
    RUN(test_glibc_here);
    RUN(test_forced_missing);
    test_each_preloaded(argv[0]);
    test_dlopen_is_not_serving(argv[0]);
    RUN(test_linked);
    return harness_end();
}
