/*
 * test_hardening.c - the defences against a hostile HTTP client and a
 * hostile file system, each at its own level: PATCH floors, duplicate keys
 * and exact int64 printing (config.c); AuthTokenFile permissions
 * (token.c); strict path decoding and the cross-site rules (query.c,
 * request.c, dispatch.c); the request deadline cutting a connection
 * (watchdog.c); the manual gap counted from the end of a trim and the
 * trim's heap readings charged to the budget (trim.c, snapshot.c); the
 * store refusing what is not a regular file and noticing a deleted one
 * (db); /proc readings that keep working at the descriptor limit (probe.c).
 *
 * Threads: the test's, the watchdog's and a trim's. Files: a temporary directory.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "churn.h"
#include "config.h"
#include "core.h"
#include "db.h"
#include "harness.h"
#include "http.h"
#include "internal.h"
#include "probe.h"
#include "snapshot.h"
#include "trim.h"

static char dir[64];

static void test_patch_floors(void)
{
    struct mt_config cfg;
    char *err = NULL;
    config_defaults(&cfg);
    static const char *const refused[] = {"{\"ManualTrimMinIntervalMs\": 0}",
                                          "{\"ManualTrimMinIntervalMs\": 249}",
                                          "{\"TrimIntervalSeconds\": 0.01}",
                                          "{\"TrimMinGapSeconds\": 0}",
                                          "{\"SampleIntervalSeconds\": 0.5}",
                                          "{\"StatsMaxAgeMs\": 0}",
                                          "{\"ProbeBudgetPercent\": 5}",
                                          "{\"RetentionHours\": 0.5}",
                                          "{\"MallocMmapThresholdBytes\": 0}",
                                          "{\"MallocTrimThresholdBytes\": 4096}",
                                          NULL};
    for (int i = 0; refused[i]; i++) {
        CHECK_MSG(config_patch(&cfg, refused[i], &err) == -EINVAL, "%s accepted", refused[i]);
        CHECK_CONTAINS(err, "PATCH /config");
        free(err);
        err = NULL;
    }
    CHECK_EQ_INT(cfg.manual_trim_min_interval_ms, 1000); /* nothing changed */
    static const char *const accepted[] = {
        "{\"ManualTrimMinIntervalMs\": 250}", "{\"TrimIntervalSeconds\": 0}",
        "{\"SampleIntervalSeconds\": 0}", "{\"ProbeBudgetPercent\": 1}", NULL};
    for (int i = 0; accepted[i]; i++) {
        CHECK_MSG(config_patch(&cfg, accepted[i], &err) == 0, "%s: %s", accepted[i], h_str(err));
        free(err);
        err = NULL;
    }
    /* The operator's file may go lower; PATCH may repeat what is in effect. */
    CHECK_EQ_INT(config_parse("{\"ManualTrimMinIntervalMs\": 0}", &cfg, &err), 0);
    CHECK_EQ_INT(config_patch(&cfg, "{\"ManualTrimMinIntervalMs\": 0}", &err), 0);
}

static void test_patch_duplicates_and_int64(void)
{
    struct mt_config cfg;
    char *err = NULL;
    config_defaults(&cfg);
    CHECK_EQ_INT(config_patch(&cfg, "{\"TrimPadBytes\": 1, \"TrimPadBytes\": 2}", &err), -EINVAL);
    CHECK_CONTAINS(err, "more than once");
    free(err);
    CHECK_EQ_INT(config_parse("{\"HttpPort\": 1, \"HttpPort\": 1}", &cfg, &err), -EINVAL);
    free(err);
    CHECK_EQ_INT(config_parse("{\"TrimPadBytes\": 9007199254740992}", &cfg, &err), 0);
    cJSON *j = config_to_json(&cfg);
    char *text = cJSON_PrintUnformatted(j);
    CHECK_CONTAINS(text, "\"TrimPadBytes\":9007199254740992");
    CHECK_CONTAINS(text, "\"TrimMinReleasableBytes\":8388608");
    free(text);
    cJSON_Delete(j);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    chmod(path, mode);
}

static void test_token_file(void)
{
    struct mt_config cfg;
    char *err = NULL;
    const char *path = harness_path(dir, "token");
    config_defaults(&cfg);
    snprintf(cfg.auth_token_file, sizeof(cfg.auth_token_file), "%s", path);
    write_file(path, "s3cret-token\n", 0600);
    CHECK_EQ_INT(config_read_token_file(&cfg, &err), 0);
    CHECK(strcmp(cfg.auth_token, "s3cret-token") == 0);
    static const mode_t loose[] = {0640, 0604, 0644, 0660};
    for (size_t i = 0; i < sizeof(loose) / sizeof(loose[0]); i++) {
        cfg.auth_token[0] = '\0';
        chmod(path, loose[i]);
        CHECK_EQ_INT(config_read_token_file(&cfg, &err), -EACCES);
        CHECK_CONTAINS(err, "chmod 600");
        CHECK(cfg.auth_token[0] == '\0');
        free(err);
    }
    write_file(path, "\n", 0600);
    CHECK_EQ_INT(config_read_token_file(&cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "empty");
    free(err);
    write_file(path, "two words", 0600);
    CHECK_EQ_INT(config_read_token_file(&cfg, &err), -EINVAL);
    free(err);
    CHECK_EQ_INT(config_parse("{\"AuthToken\": \"a\", \"AuthTokenFile\": \"/x\"}", &cfg, &err),
                 -EINVAL);
    free(err);
}

/* ReadTokenFile follows AuthTokenFile's rules; the read token needs an admin token and differs. */
static void test_read_token_file(void)
{
    struct mt_config cfg;
    char *err = NULL;
    const char *path = harness_path(dir, "read-token");
    write_file(path, "read-only-token\n", 0600);
    char json[1024];
    snprintf(json, sizeof(json), "{\"AuthToken\": \"admin\", \"ReadTokenFile\": \"%s\"}", path);
    CHECK_EQ_INT(config_parse(json, &cfg, &err), 0);
    CHECK_EQ_INT(config_read_token_file(&cfg, &err), 0);
    CHECK(strcmp(cfg.read_token, "read-only-token") == 0);
    chmod(path, 0644);
    cfg.read_token[0] = '\0';
    CHECK_EQ_INT(config_read_token_file(&cfg, &err), -EACCES);
    CHECK_CONTAINS(err, "ReadTokenFile");
    CHECK_CONTAINS(err, "chmod 600");
    free(err);
    snprintf(json, sizeof(json), "{\"ReadTokenFile\": \"%s\"}", path);
    CHECK_EQ_INT(config_parse(json, &cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "needs an AuthToken");
    free(err);
    CHECK_EQ_INT(config_parse("{\"AuthToken\": \"same\", \"ReadToken\": \"same\"}", &cfg, &err), 0);
    CHECK_EQ_INT(config_read_token_file(&cfg, &err), -EINVAL);
    CHECK_CONTAINS(err, "the same");
    free(err);
    CHECK_EQ_INT(config_parse("{\"AuthToken\": \"a\", \"ReadToken\": \"b\", \"ReadTokenFile\": \"/x\"}",
                              &cfg, &err), -EINVAL);
    free(err);
}

static void test_path_decoding(void)
{
    char out[64];
    CHECK_EQ_INT(query_decode_path("/memory/trim", 12, out, sizeof(out)), 0);
    CHECK(strcmp(out, "/memory/trim") == 0);
    CHECK_EQ_INT(query_decode_path("/memory%2Ftrim", 14, out, sizeof(out)), 0);
    CHECK(strcmp(out, "/memory/trim") == 0);
    CHECK_EQ_INT(query_decode_path("/memory/trim%00", 15, out, sizeof(out)), -EINVAL);
    CHECK_EQ_INT(query_decode_path("/a%zz", 5, out, sizeof(out)), -EINVAL);
    CHECK_EQ_INT(query_decode_path("/a%2", 4, out, sizeof(out)), -EINVAL);
    CHECK_EQ_INT(query_decode_path("/a%", 3, out, sizeof(out)), -EINVAL);
    CHECK_EQ_INT(query_decode_path("/aaaaaaaa", 9, out, 8), -E2BIG);
    struct query q;
    query_init(&q);
    CHECK_EQ_INT(query_parse(&q, "trigger=manual%00x", 18), -EINVAL);
}

static void test_cross_site(void)
{
    static const struct {
        const char *host, *origin, *site;
        int foreign;
    } cases[] = {
        {"127.0.0.1:8043", NULL, NULL, 0},                    /* curl */
        {"127.0.0.1:8043", "http://127.0.0.1:8043", NULL, 0}, /* the dashboard */
        {"localhost:8043", "http://127.0.0.1:8043", NULL, 0}, /* two local names, one port */
        {"127.0.0.1:8043", NULL, "same-origin", 0},
        {"127.0.0.1:8043", NULL, "none", 0},                  /* typed in the address bar */
        {"127.0.0.1:8043", "http://127.0.0.1:3000", NULL, 1}, /* another local port */
        {"127.0.0.1:8043", "http://localhost:3000", NULL, 1},
        {"127.0.0.1:8043", "http://127.0.0.1", NULL, 1},
        {"127.0.0.1:8043", "http://evil.example", NULL, 1},
        {"127.0.0.1:8043", "http://127.0.0.1.evil.example:8043", NULL, 1},
        {"127.0.0.1:8043", "null", NULL, 1},
        {"127.0.0.1:8043", "file://", NULL, 1},
        {"127.0.0.1:8043", NULL, "cross-site", 1},
        {"127.0.0.1:8043", NULL, "same-site", 1}, /* another port of localhost */
        {"memtrim.example:8043", "http://memtrim.example:8043", NULL, 0},
        {"memtrim.example", "https://memtrim.example", NULL, 1}, /* 443 is not 80 */
        {NULL, "http://127.0.0.1:8043", NULL, 1},
    };
    char why[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *r =
            server_cross_site(cases[i].host, cases[i].origin, cases[i].site, why, sizeof(why));
        CHECK_MSG((r != NULL) == cases[i].foreign, "case %zu: Host %s Origin %s Sec-Fetch-Site %s",
                  i, h_str(cases[i].host), h_str(cases[i].origin), h_str(cases[i].site));
    }
}

static int h_ok(const struct server_request *req, struct server_reply *rep)
{
    return server_reply_json(rep, 200, cJSON_CreateObject());
}

static void test_dispatch_cross_site(void)
{
    static const struct server_route routes[] = {
        {"GET", "/write", SERVER_AUTH_WRITE, NULL, h_ok},
        {"GET", "/read", SERVER_AUTH_READ, NULL, h_ok},
    };
    struct query q;
    struct server_reply rep;
    query_init(&q);
    memset(&rep, 0, sizeof(rep));
    struct server_request req = {.method = "GET",
                                 .path = "/write",
                                 .query = &q,
                                 .body = "",
                                 .cross_site = "it comes from the web page at 'x'"};
    server_dispatch(routes, 2, &req, NULL, "", 0, &rep);
    CHECK_EQ_INT(rep.status, 403);
    CHECK_CONTAINS(rep.body, "forbidden_origin");
    server_reply_clear(&rep);
    server_dispatch(routes, 2, &req, "Bearer tok", "tok", 0, &rep); /* a token was given */
    CHECK_EQ_INT(rep.status, 200);
    server_reply_clear(&rep);
    req.path = "/read";
    server_dispatch(routes, 2, &req, NULL, "", 0, &rep);
    CHECK_EQ_INT(rep.status, 200);
    server_reply_clear(&rep);
}

static int peer_closed(int fd)
{
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

static void test_watchdog_cuts(void)
{
    struct server_watchdog w;
    int slow[2], busy[2];
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, slow), 0);
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, busy), 0);
    CHECK_EQ_INT(server_watchdog_start(&w, 1), 0);
    /* The configured floor is 1 s; the rule is the same at 100 ms (before anything is armed). */
    pthread_mutex_lock(&w.lock);
    w.timeout_ns = 100 * 1000000LL;
    pthread_mutex_unlock(&w.lock);
    struct server_conn *a = server_watchdog_add(&w, slow[0], NULL);
    struct server_conn *b = server_watchdog_add(&w, busy[0], NULL);
    server_watchdog_arm(&w, b, 0); /* its request arrived: a handler runs */
    WAIT_FOR(peer_closed(slow[1]), 10);
    CHECK(peer_closed(slow[1]));
    CHECK_EQ_INT(server_watchdog_cut(&w), 1);
    CHECK(!peer_closed(busy[1]));
    server_watchdog_remove(&w, a);
    server_watchdog_remove(&w, b);
    server_watchdog_stop(&w);
    for (int i = 0; i < 2; i++) {
        close(slow[i]);
        close(busy[i]);
    }
}

static void test_trim_gap_and_budget(void)
{
    struct snapshot_cache cache;
    struct trim_service ts;
    struct mt_trim_result r;
    int64_t retry = 0;
    CHECK_EQ_INT(snapshot_init(&cache), 0);
    CHECK_EQ_INT(trim_service_init(&ts), 0);
    cache.budget_percent = 0.001; /* a reading costs 100000 times itself */
    struct churn c[2];
    churn_run(c, 2, 16, 20); /* something for malloc_trim to do */
    churn_release(c, 2);

    int64_t t0 = mt_mono_ns();
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, 0, 0, &r, &retry), 0);
    /* The gap counts from the end: after the whole trim, not its start. */
    CHECK_MSG(ts.last_manual_mono_ns >= t0 + r.duration_ns, "last %lld, start %lld + %lld",
              (long long)ts.last_manual_mono_ns, (long long)t0, (long long)r.duration_ns);
    CHECK(!r.heap_skipped);
    /* Its two readings spent the budget: the next trim skips them, and says so. */
    int64_t wait_ns = 0;
    CHECK_EQ_INT(snapshot_budget_check(&cache, &wait_ns), -EAGAIN);
    CHECK_EQ_INT(trim_run(&ts, &cache, MT_TRIGGER_MANUAL, 0, 0, 0, &r, &retry), 0);
    CHECK(r.heap_skipped);
    CHECK_EQ_INT(r.heap_free_before_bytes, 0);
    trim_service_destroy(&ts);
    snapshot_destroy(&cache);
}

static void test_store_paths(void)
{
    struct db_writer *w = NULL;
    char *err = NULL;
    const char *fifo = harness_path(dir, "fifo.sqlite");
    const char *link = harness_path(dir, "link.sqlite");
    const char *target = harness_path(dir, "target.sqlite");
    CHECK_EQ_INT(mkfifo(fifo, 0600), 0);
    CHECK_EQ_INT(db_writer_open(fifo, &w, &err), -EINVAL);
    CHECK_CONTAINS(err, "not a regular file");
    free(err);
    CHECK(access(harness_path(dir, "fifo.sqlite-journal"), F_OK) != 0);
    CHECK_EQ_INT(symlink(target, link), 0);
    CHECK(db_writer_open(link, &w, &err) < 0);
    free(err);
    CHECK(access(target, F_OK) != 0); /* the link was not followed */
    CHECK(db_writer_open("/dev/null", &w, &err) < 0);
    CHECK_CONTAINS(err, "a device");
    free(err);

    const char *db = harness_path(dir, "deleted.sqlite");
    CHECK_EQ_INT(db_writer_open(db, &w, &err), 0);
    CHECK_EQ_INT(db_writer_check_file(w, &err), 0);
    CHECK_EQ_INT(unlink(db), 0);
    CHECK_EQ_INT(db_writer_check_file(w, &err), -ENOENT);
    CHECK_CONTAINS(err, "deleted");
    free(err);
    db_writer_close(w);
}

/* A fake cgroup tree (MEMTRIM_CGROUP_ROOT) with a 1 GiB limit, v1 and v2 files both. */
static void fake_cgroup(const char *root)
{
    char path[256];
    const char *files[][2] = {{"memory/memory.limit_in_bytes", "1073741824\n"},
                              {"memory/memory.usage_in_bytes", "123456789\n"},
                              {"memory.max", "1073741824\n"},
                              {"memory.current", "123456789\n"}};
    mkdir(root, 0700);
    snprintf(path, sizeof(path), "%s/memory", root);
    mkdir(path, 0700);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", root, files[i][0]);
        write_file(path, files[i][1], 0600);
    }
}

static void test_proc_at_fd_limit(void)
{
    struct rlimit saved, low;
    struct mt_cheap cheap;
    struct probe_cgroup cg;
    char root[160];
    probe_proc_open();
    /* The cgroup files are opened once too (here a fake tree: the test needs none). */
    snprintf(root, sizeof(root), "%s/cgroup", dir);
    fake_cgroup(root);
    setenv("MEMTRIM_CGROUP_ROOT", root, 1);
    int cg_rc = probe_cgroup_init(&cg);
    unsetenv("MEMTRIM_CGROUP_ROOT");
    CHECK_MSG(cg_rc == 0 && cg.version > 0, "the fake cgroup under %s was not found", root);
    CHECK_EQ_INT(getrlimit(RLIMIT_NOFILE, &saved), 0);
    /* No descriptor left to open: the kept /proc files still read. */
    int fd = open("/dev/null", O_RDONLY);
    low = saved;
    low.rlim_cur = (rlim_t)fd;
    close(fd);
    CHECK_EQ_INT(setrlimit(RLIMIT_NOFILE, &low), 0);
    CHECK(open("/dev/null", O_RDONLY) < 0 && errno == EMFILE);
    int rc = probe_cheap(&cg, &cheap);
    setrlimit(RLIMIT_NOFILE, &saved);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(cheap.read_errno, 0);
    CHECK(cheap.rss_bytes > 0 && cheap.rss_anon_bytes > 0 && cheap.minor_faults > 0);
    /* ...and so did the cgroup's limit and usage (not -1, "unknown"). */
    CHECK_EQ_INT(cheap.cgroup_limit_bytes, 1073741824);
    CHECK_EQ_INT(cheap.cgroup_usage_bytes, 123456789);
    probe_cgroup_close(&cg);
}

int main(void)
{
    if (harness_tmpdir(dir, sizeof(dir), "hardening") != 0)
        return 1;
    RUN(test_patch_floors);
    RUN(test_patch_duplicates_and_int64);
    RUN(test_token_file);
    RUN(test_read_token_file);
    RUN(test_path_decoding);
    RUN(test_cross_site);
    RUN(test_dispatch_cross_site);
    RUN(test_watchdog_cuts);
    RUN(test_trim_gap_and_budget);
    RUN(test_store_paths);
    RUN(test_proc_at_fd_limit);
    harness_rmtree(dir);
    return harness_end();
}
