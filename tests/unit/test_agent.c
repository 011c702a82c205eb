/*
 * test_agent.c - the node agent's pure parts (agent/): what a cgroup is from its path (both
 * Kubernetes drivers, Docker, Podman, containerd, systemd units), its configuration (the
 * table, its errors, the allow and deny globs), and the decision (the aim under memory.high,
 * the zone, which member goes first, the command's errors as reasons).
 */
#include "harness.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent_int.h"
#include "target.h"
#include "common.h"
#include "decision.h"
#include "outside.h"
#include "target.h"

static struct agent_kind_info kind(const char *path)
{
    struct agent_kind_info k;
    agent_kind_parse(path, &k);
    return k;
}

static void test_kinds(void)
{
    struct agent_kind_info k = kind("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
                                    "pod6f1c2a3b_4d5e_6f70_8192_a3b4c5d6e7f8.slice/cri-containerd-"
                                    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope");
    CHECK_EQ_INT(k.kind, AK_POD_CONTAINER);
    CHECK(!strcmp(k.pod_uid, "6f1c2a3b-4d5e-6f70-8192-a3b4c5d6e7f8"));
    CHECK(!strcmp(k.container_id, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
    CHECK(!strcmp(k.runtime, "containerd"));
    CHECK(!strcmp(k.qos, "burstable"));
    /* the pod itself, guaranteed (no class slice), systemd driver */
    k = kind("/kubepods.slice/kubepods-pod6f1c2a3b_4d5e_6f70_8192_a3b4c5d6e7f8.slice");
    CHECK_EQ_INT(k.kind, AK_POD);
    CHECK(!strcmp(k.pod_uid, "6f1c2a3b-4d5e-6f70-8192-a3b4c5d6e7f8"));
    CHECK(!strcmp(k.qos, "guaranteed"));
    CHECK(!k.container_id[0]);
    /* cgroupfs driver: /kubepods/besteffort/pod<UID>/<ID> */
    k = kind("/kubepods/besteffort/pod6f1c2a3b-4d5e-6f70-8192-a3b4c5d6e7f8/"
             "abcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcd");
    CHECK_EQ_INT(k.kind, AK_POD_CONTAINER);
    CHECK(!strcmp(k.pod_uid, "6f1c2a3b-4d5e-6f70-8192-a3b4c5d6e7f8"));
    CHECK(!strcmp(k.qos, "besteffort"));
    CHECK(!strcmp(k.container_id, "abcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcd"));
    k = kind("/kubepods/pod6f1c2a3b-4d5e-6f70-8192-a3b4c5d6e7f8");
    CHECK_EQ_INT(k.kind, AK_POD);
    /* CRI-O under the systemd driver */
    k = kind("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod6f1c2a3b_4d5e_6f70_"
             "8192_a3b4c5d6e7f8.slice/crio-00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff.scope");
    CHECK_EQ_INT(k.kind, AK_POD_CONTAINER);
    CHECK(!strcmp(k.runtime, "cri-o"));
    /* Docker, both drivers; Podman, both */
    k = kind("/system.slice/docker-1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef.scope");
    CHECK_EQ_INT(k.kind, AK_DOCKER);
    CHECK(!strcmp(k.container_id, "1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef"));
    k = kind("/docker/1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef");
    CHECK_EQ_INT(k.kind, AK_DOCKER);
    k = kind("/machine.slice/libpod-aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999.scope");
    CHECK_EQ_INT(k.kind, AK_PODMAN);
    k = kind("/libpod_parent/libpod-aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999");
    CHECK_EQ_INT(k.kind, AK_PODMAN);
    k = kind("/default/aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999");
    CHECK_EQ_INT(k.kind, AK_CONTAINERD);
    /* systemd units */
    k = kind("/system.slice/mariadb.service");
    CHECK_EQ_INT(k.kind, AK_UNIT);
    CHECK(!strcmp(k.unit, "mariadb.service"));
    k = kind("/user.slice/user-1000.slice");
    CHECK_EQ_INT(k.kind, AK_OTHER);
    CHECK(!strcmp(k.unit, "user-1000.slice"));
    /* nothing known; hostile shapes do not match */
    CHECK_EQ_INT(kind("/").kind, AK_OTHER);
    CHECK_EQ_INT(kind("").kind, AK_OTHER);
    CHECK_EQ_INT(kind("/memtrim-test-1/x").kind, AK_OTHER);
    CHECK_EQ_INT(kind("/kubepods/podnot-a-uid/abc").kind, AK_OTHER);
    CHECK_EQ_INT(kind("/docker/xyz").kind, AK_OTHER);
    CHECK_EQ_INT(kind("/kubepods.slice/kubepods-pod.slice").kind, AK_OTHER);
    CHECK_EQ_INT(kind("/a/docker-0123.scope").kind, AK_UNIT); /* too short an id: a unit */
    CHECK(!strcmp(agent_kind_name(AK_POD_CONTAINER), "pod-container"));
}

static void test_config(void)
{
    struct agent_config c;
    char err[512];
    CHECK_EQ_INT(agent_config_load(NULL, &c, err, sizeof err), 0);
    CHECK_EQ_INT(c.http.port, 8044);
    CHECK(!strcmp(c.http.bind, "127.0.0.1"));
    CHECK(c.pressure_ratio > 0.79 && c.pressure_ratio < 0.81);
    CHECK_EQ_INT(c.max_cgroups, 2048); /* 200 pods and their containers, twice over */
    CHECK_EQ_INT(agent_config_load("{\"MaxCgroups\": 0}", &c, err, sizeof err), -1);
    CHECK_CONTAINS(err, "MaxCgroups");
    CHECK_EQ_INT(agent_config_load("{\"MaxCgroups\": 100001}", &c, err, sizeof err), -1);
    CHECK_EQ_INT(agent_config_load("{\"MaxCgroups\": 4}", &c, err, sizeof err), 0);
    CHECK_EQ_INT(c.max_cgroups, 4);
    CHECK_EQ_INT(agent_config_load("{\"MemoryTrimAgent\": {\"HttpPort\": 0, \"DryRun\": true, "
                                   "\"AllowCgroups\": [\"/kubepods*\"], \"DenyCgroups\": "
                                   "[\"*besteffort*\"], \"DenyPrograms\": [\"postgres*\"]}}",
                                   &c, err, sizeof err), 0);
    CHECK_EQ_INT(c.http.port, 0);
    CHECK_EQ_INT(c.dry_run, 1);
    CHECK(agent_cgroup_allowed(&c, "/kubepods.slice/kubepods-burstable.slice/x"));
    CHECK(!agent_cgroup_allowed(&c, "/kubepods/besteffort/pod1"));
    CHECK(!agent_cgroup_allowed(&c, "/system.slice/a.service"));
    CHECK(!agent_program_allowed(&c, "postgres"));
    CHECK(agent_program_allowed(&c, "ruby"));
    /* the section's root form, and its errors, each naming the key */
    CHECK_EQ_INT(agent_config_load("{\"HttpPort\": 9000}", &c, err, sizeof err), 0);
    CHECK_EQ_INT(c.http.port, 9000);
    CHECK_EQ_INT(agent_config_load("{\"HttpPortt\": 1}", &c, err, sizeof err), -1);
    CHECK_CONTAINS(err, "HttpPortt");
    CHECK_CONTAINS(err, "did you mean HttpPort?"); /* the plugin's hint, its helper */
    CHECK_EQ_INT(agent_config_load("{\"DenyCgroup\": []}", &c, err, sizeof err), -1);
    CHECK_CONTAINS(err, "did you mean DenyCgroups?");
    CHECK_EQ_INT(agent_config_load("{\"Zzzzzzzz\": 1}", &c, err, sizeof err), -1);
    CHECK(strstr(err, "did you mean") == NULL);
    /* a token follows the plugin's rule: one read with its newline never matches */
    CHECK_EQ_INT(agent_config_load("{\"AuthToken\": \"s3cret\\n\"}", &c, err, sizeof err), -1);
    CHECK_CONTAINS(err, "AuthToken");
    CHECK_CONTAINS(err, "0x0a");
    CHECK_EQ_INT(agent_config_load("{\"ReadToken\": \"a b\"}", &c, err, sizeof err), -1);
    CHECK_CONTAINS(err, "ReadToken");
    CHECK_EQ_INT(agent_config_load("{\"AuthToken\": \"s3cret\"}", &c, err, sizeof err), 0);
    CHECK(!strcmp(c.http.token, "s3cret"));
    CHECK_EQ_INT(agent_config_load("{\"HttpPort\": 70000}", &c, err, sizeof err), -1);
    CHECK_CONTAINS(err, "HttpPort");
    CHECK_EQ_INT(agent_config_load("{\"HttpPort\": 1.5}", &c, err, sizeof err), -1);
    CHECK_EQ_INT(agent_config_load("{\"PressureRatio\": \"x\"}", &c, err, sizeof err), -1);
    CHECK_CONTAINS(err, "PressureRatio");
    CHECK_EQ_INT(agent_config_load("{\"PressureRatio\": 1e308}", &c, err, sizeof err), -1);
    CHECK_EQ_INT(agent_config_load("{\"AllowCgroups\": [1]}", &c, err, sizeof err), -1);
    CHECK_CONTAINS(err, "AllowCgroups");
    char many[4096] = "{\"DenyPrograms\": [";
    for (int i = 0; i < AGENT_GLOBS + 1; i++)
        strcat(many, i ? ",\"a\"" : "\"a\"");
    strcat(many, "]}");
    CHECK_EQ_INT(agent_config_load(many, &c, err, sizeof err), -1);
    CHECK_EQ_INT(agent_config_load("[1]", &c, err, sizeof err), -1);
    CHECK_EQ_INT(agent_config_load("{\"MemoryTrimAgent\": 3}", &c, err, sizeof err), -1);
    CHECK_EQ_INT(agent_config_load("/nonexistent/agent.json", &c, err, sizeof err), -1);
    CHECK_CONTAINS(err, "/nonexistent/agent.json");
}

static void test_decide(void)
{
    struct agent_cgroup cg = {.limit = 1000, .high = -1};
    CHECK_EQ_INT(agent_aim(&cg), 1000);
    cg.high = 800; /* MemoryQoS's memory.high below the limit: aim under it */
    CHECK_EQ_INT(agent_aim(&cg), 800);
    cg.limit = -1;
    CHECK_EQ_INT(agent_aim(&cg), 800);
    cg.high = -1;
    CHECK_EQ_INT(agent_aim(&cg), -1);
    CHECK(agent_in_zone(800, 1000, 0.8));
    CHECK(!agent_in_zone(5000, -1, 0.8));
    CHECK(!agent_in_zone(-1, 1000, 0.8));

    CHECK(agent_in_zone(500, 1000, 0.8)); /* the engine's floor: half the aim below the line */
    CHECK(!agent_in_zone(499, 1000, 0.8));
    CHECK(agent_in_zone(300, 1000, 0.3));

    /* The one decision (core/pressure's group_pressure_pick) over outside members. */
    int64_t now = 10 * MT_SEC, mib = 1 << 20;
    struct agent_proc p[4] = {
        {.pid = 1, .anon = 300 * mib, .anon_after_trim = -1},           /* never trimmed: 300 */
        {.pid = 2, .anon = 900 * mib, .anon_after_trim = 100 * mib},    /* grew 800 since */
        {.pid = 3, .anon = 5000 * mib, .anon_after_trim = -1, .reason = AR_MUSL}, /* left alone */
        {.pid = 4, .anon = 2000 * mib, .anon_after_trim = 0, .in_flight = 1}, /* a trim runs */
    };
    struct agent_cgroup g = {.limit = 4096 * mib, .high = -1, .procs = p, .nprocs = 4,
                             .usage = 3500 * mib, .base_usage = 3500 * mib};
    int rule;
    CHECK_EQ_INT(agent_expected(&p[0]), 300 * mib);
    CHECK_EQ_INT(agent_expected(&p[1]), 800 * mib);
    CHECK_EQ_INT(agent_decide(&g, now, 0.8, 8 * mib, &rule), 1); /* at the line: most growth */
    CHECK_EQ_INT(rule, GROUP_RULE_LINE);
    p[3].in_flight = 0; /* its trim is over, long ago: the most growth goes first */
    p[3].last_trim_ns = now - MT_SEC;
    CHECK_EQ_INT(agent_decide(&g, now, 0.8, 8 * mib, &rule), 3);
    g.usage = 1000 * mib; /* below the zone's floor (half the aim): nothing */
    CHECK_EQ_INT(agent_decide(&g, now, 0.8, 8 * mib, &rule), -1);
    g.usage = 2500 * mib; /* inside the zone, below the line, no growth: nothing */
    g.base_usage = 2500 * mib;
    CHECK_EQ_INT(agent_decide(&g, now, 0.8, 8 * mib, &rule), -1);
    g.base_usage = 2000 * mib; /* ...grown by a step since the last trim: the growth rule */
    CHECK_EQ_INT(agent_decide(&g, now, 0.8, 8 * mib, &rule), 3);
    CHECK_EQ_INT(rule, GROUP_RULE_GROWTH);
    g.high = 2400 * mib; /* MemoryQoS's memory.high below the usage: at its line */
    g.base_usage = 2500 * mib;
    CHECK_EQ_INT(agent_decide(&g, now, 0.8, 8 * mib, &rule), 3);
    CHECK_EQ_INT(rule, GROUP_RULE_LINE);
    p[1].reason = AR_NO_THREAD; /* a passing refusal: still a member */
    p[3].reason = AR_GIVES_NOTHING;
    CHECK_EQ_INT(agent_decide(&g, now, 0.8, 8 * mib, &rule), 1);
    p[1].anon = 50 * mib; /* shrank below its last trim: nothing expected */
    CHECK_EQ_INT(agent_expected(&p[1]), 0);
    CHECK_EQ_INT(agent_decide(&g, now, 0.8, 8 * mib, &rule), 0);
    /* IdleTrims' own pick, outside the zone: the gap and the least it must give */
    CHECK_EQ_INT(agent_pick_idle(p, 4, now, MT_SEC, 8 * mib), 0);
    p[0].last_trim_ns = now - MT_SEC / 2;
    CHECK_EQ_INT(agent_pick_idle(p, 4, now, MT_SEC, 8 * mib), -1);
    p[0].last_trim_ns = now - 2 * MT_SEC; /* past the gap, but its trims' time inside it spent */
    agent_inside_charge(&p[0], now - MT_SEC, 3 * MT_SEC);
    CHECK_EQ_INT(agent_pick_idle(p, 4, now, MT_SEC, 8 * mib), -1);
    CHECK_EQ_INT(agent_pick_idle(p, 4, now + 4 * MT_SEC + 1, MT_SEC, 8 * mib), 0);

    CHECK_EQ_INT(agent_reason_of("unsupported", "process 5 runs on musl libc"), AR_MUSL);
    CHECK_EQ_INT(agent_reason_of("unsupported", "process 5 is a static binary"), AR_STATIC);
    CHECK_EQ_INT(agent_reason_of("unsupported", "maps no glibc and no known allocator"), AR_RUNTIME);
    CHECK_EQ_INT(agent_reason_of("refused", "runs in seccomp strict mode"), AR_SECCOMP);
    CHECK_EQ_INT(agent_reason_of("refused", "runs as uid 5"), AR_KERNEL);
    CHECK_EQ_INT(agent_reason_of("no_safe_thread", "x"), AR_NO_THREAD);
    /* the command's refusal for want of room in the cgroup (cli/output.c's words) passes */
    CHECK_EQ_INT(agent_reason_of("refused", "process 9's memory cgroup has 0 KiB left (/sys/fs/"
                                 "cgroup/memory/x/memory.limit_in_bytes) and trim may charge it "
                                 "up to 384 KiB: it could be OOM-killed; refused, nothing was "
                                 "changed"), AR_NO_ROOM);
    /* and in its pids cgroup (the words as cli/output.c writes them) */
    char pids[512];
    snprintf(pids, sizeof pids, "process 9" TARGET_NO_PIDS_WORDS "1 more tasks (/sys/fs/cgroup/"
             "pids/x/pids.max) and trim starts 2 threads there, leaving it at least as many: its "
             "own thread or fork could fail; refused, nothing was changed");
    CHECK_EQ_INT(agent_reason_of("refused", pids), AR_NO_ROOM);
    /* a room the command cannot read from its cgroup namespace: final, the kernel's kind
     * (control agent-unseen-room-retried: held for room, asked again) */
    char unseen[512];
    snprintf(unseen, sizeof unseen, "process 9" TARGET_NO_ROOM_WORDS "0 KiB left (its memory "
             "cgroup /../../kubepods/x" TARGET_UNSEEN_WORDS ": it runs in another cgroup "
             "namespace; run it in the host's) and trim may charge it up to 384 KiB: it could be "
             "OOM-killed; refused, nothing was changed");
    CHECK_EQ_INT(agent_reason_of("refused", unseen), AR_KERNEL);
    snprintf(unseen, sizeof unseen, "process 9" TARGET_NO_PIDS_WORDS "0 more tasks (its pids "
             "cgroup /../x" TARGET_UNSEEN_WORDS ": it runs in another cgroup namespace; run it "
             "in the host's) and trim starts 2 threads there, leaving it at least as many: its "
             "own thread or fork could fail; refused, nothing was changed");
    CHECK_EQ_INT(agent_reason_of("refused", unseen), AR_KERNEL);
    CHECK_EQ_INT(agent_reason_of(NULL, "x"), AR_FAILED);
    CHECK(agent_reason_unreleasable(AR_STATIC) && !agent_reason_unreleasable(AR_NO_THREAD));
    CHECK(!agent_reason_unreleasable(AR_NO_ROOM));
    CHECK(!strcmp(agent_reason_name(AR_NO_ROOM), "no_room"));
}

/* A member that always wants a trim (it grows again after each), asked every step over span
 * from t0, each trim answered 20 ms after its start and inside_each inside it: the trims
 * made, and their time inside it in *inside. */
static int always_wanted(struct agent_cgroup *z, int64_t t0, int64_t span, int64_t step,
                         int64_t inside_each, int64_t *inside)
{
    struct agent_proc fresh = {.pid = 8, .anon = 200 << 20, .anon_after_trim = -1};
    int rule, made = 0;
    z->procs[0] = fresh;
    *inside = 0;
    for (int64_t now = t0; now < t0 + span; now += step) {
        if (agent_decide(z, now, 0.8, 6 << 20, &rule) != 0)
            continue;
        agent_trimmed(&z->procs[0], now, now + 20 * MT_MS);
        agent_inside_charge(&z->procs[0], now + 20 * MT_MS, inside_each);
        z->procs[0].anon_after_trim = 120 << 20;
        *inside += inside_each;
        made++;
    }
    return made;
}

/* Puma's burst in 300 MiB (tests/e2e/test_agent_runtimes.py) grows 1.5 MB a millisecond: the
 * agent keeps it alive only by trimming it again as soon as the decision allows, its retrim
 * gap counted from the last trim's start (outside.h), and the loop awake at that moment. A
 * refusal for want of room in the cgroup passes: it is trimmed again once there is room. */
static void test_retrim(void)
{
    int64_t mib = 1 << 20, t0 = 20 * MT_SEC, answered = t0 + 20 * MT_MS;
    int64_t gap = 25 * MT_MS; /* about one trim's length from outside: the next as it answers */
    CHECK_EQ_INT(outside_retrim_ns(), gap);
    int rule;
    struct agent_proc q[1] = {{.pid = 7, .anon = 200 * mib, .anon_after_trim = -1}};
    struct agent_cgroup z = {.limit = 300 * mib, .high = -1, .procs = q, .nprocs = 1,
                             .usage = 230 * mib, .base_usage = 150 * mib};
    q[0].in_flight = 1;
    CHECK_EQ_INT(agent_next_due(&z, t0), INT64_MAX); /* its trim runs: its answer wakes */
    q[0].in_flight = 0;
    agent_trimmed(&q[0], t0, answered);
    q[0].anon_after_trim = 120 * mib; /* grew 80 MiB since, the cgroup 80 MiB since its low */
    CHECK_EQ_INT(q[0].last_trim_ns, t0);
    CHECK_EQ_INT(agent_next_due(&z, answered), t0 + gap);
    CHECK_EQ_INT(agent_decide(&z, t0 + gap - 1, 0.8, 6 * mib, &rule), -1);
    CHECK_EQ_INT(agent_decide(&z, t0 + gap, 0.8, 6 * mib, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_GROWTH);
    CHECK_EQ_INT(agent_next_due(&z, t0 + gap), INT64_MAX); /* due: no wait */
    q[0].reason = AR_NO_ROOM; /* its last trim refused for want of room: still a member */
    CHECK_EQ_INT(agent_decide(&z, t0 + gap, 0.8, 6 * mib, &rule), 0);
    CHECK_EQ_INT(agent_next_due(&z, answered), t0 + gap);
    /* ...but not while its cgroup has less room than a call's charge: each ask forked the
     * command for one more refusal, every retrim gap (40 a second) */
    z.usage = z.limit - 100 * 1024;
    CHECK(agent_held_no_room(&z, &q[0], t0 + gap));
    CHECK_EQ_INT(agent_decide(&z, t0 + gap, 0.8, 6 * mib, &rule), -1);
    CHECK_EQ_INT(agent_next_due(&z, answered), INT64_MAX); /* the zone's poll reads it again */
    z.usage = z.limit - 384 * 1024; /* room for the call again (cli.h's CLI_CALL_CHARGE) */
    CHECK(!agent_held_no_room(&z, &q[0], t0 + gap));
    CHECK_EQ_INT(agent_decide(&z, t0 + gap, 0.8, 6 * mib, &rule), 0);
    /* At its limit with clean page cache (Orthanc's storage writes, 100 KiB left): that
     * cache is room, as the command counts it (target_stat_reclaimable: 40 MiB inactive less
     * 2 dirty and 6 mapped); the control cmd-room-cache-unseen holds it as before, and the
     * agent waited for room the cache never left. */
    z.usage = z.limit - 100 * 1024;
    z.reclaimable = target_stat_reclaimable("total_inactive_file 41943040\ntotal_dirty 2097152\n"
                                            "total_writeback 0\ntotal_mapped_file 6291456\n", 0);
    CHECK_EQ_INT(agent_room(&z), 100 * 1024 + 32 * mib);
    CHECK(!agent_held_no_room(&z, &q[0], t0 + gap));
    CHECK_EQ_INT(agent_decide(&z, t0 + gap, 0.8, 6 * mib, &rule), 0);
    /* refused all the same where the agent read room (the command reads the process's own
     * cgroup, or the usage grew meanwhile): held a while, not asked every retrim gap */
    q[0].no_room_ns = t0 + gap;
    q[0].no_room_read = agent_room(&z);
    CHECK(agent_held_no_room(&z, &q[0], t0 + gap + AGENT_NO_ROOM_HOLD_NS - 1));
    CHECK(!agent_held_no_room(&z, &q[0], t0 + gap + AGENT_NO_ROOM_HOLD_NS));
    q[0].no_room_read = 100 * 1024; /* the agent read no room either: the room alone decides */
    CHECK(!agent_held_no_room(&z, &q[0], t0 + gap + 1));
    z.reclaimable = 0;
    z.usage = 230 * mib;
    q[0].reason = AR_KERNEL; /* the kernel's rules: left alone, no wake for it */
    CHECK_EQ_INT(agent_decide(&z, t0 + gap, 0.8, 6 * mib, &rule), -1);
    CHECK_EQ_INT(agent_next_due(&z, answered), INT64_MAX);

    /* Each member has its own budget of trims' time inside it (the taken thread's stop and
     * memtrim's threads there, walking its arenas with each one's lock held: 47-85 ms median
     * on the node test): a quarter of its time, holding 2 s, full at first sight. Without
     * it a member whose trims outlast the 25 ms gap was trimmed back to back. */
    q[0].reason = AR_NONE;
    CHECK_EQ_INT(agent_in_target_ns(0.0009, 0.057), 57900 * 1000);
    CHECK_EQ_INT(agent_in_target_ns(NAN, -1), 0); /* the answer's figures checked */
    CHECK_EQ_INT(agent_in_target_ns(1e300, 0.5), 500 * MT_MS);
    /* A call past the command's deadline answers an error object, no figures, and goes on
     * inside the process: the whole trim's time is charged (control agent-timeout-uncharged:
     * 0, the longest calls free, the member asked again at the retrim gap); so is a child
     * that never answered. A refusal's and a success's are their figures. */
    CHECK_EQ_INT(agent_answer_inside_ns("timeout", 1, 0, 0, -1, t0, t0 + 10500 * MT_MS),
                 10500 * MT_MS);
    CHECK_EQ_INT(agent_answer_inside_ns(NULL, 0, 0, 0, -1, t0, t0 + 20 * MT_SEC), 20 * MT_SEC);
    CHECK_EQ_INT(agent_answer_inside_ns("timeout", 1, 0, 0, -1, t0, t0 - 1), 0);
    CHECK_EQ_INT(agent_answer_inside_ns("refused", 1, 0, 0, -1, t0, t0 + 30 * MT_MS), 0);
    CHECK_EQ_INT(agent_answer_inside_ns(NULL, 1, 0.0009, 0.057, 0, t0, t0 + 90 * MT_MS),
                 57900 * 1000);
    /* ...but a trim that gave back a MiB or more paid for its time with it (control
     * agent-inside-charged-when-paid: charged, puma in 300 MiB held after 7 trims whose
     * first spent 863 ms inside it, OOM-killed: the quiet rehearsal of 78a7d06) */
    CHECK_EQ_INT(agent_answer_inside_ns(NULL, 1, 0.0009, 0.862, 97165312, t0, t0 + 871 * MT_MS),
                 0);
    CHECK_EQ_INT(agent_answer_inside_ns(NULL, 1, 0.0009, 0.057, (1 << 20) - 1, t0,
                                        t0 + 90 * MT_MS), 57900 * 1000);
    CHECK_EQ_INT(agent_answer_inside_ns("timeout", 1, 0, 0, 97165312, t0, t0 + 10500 * MT_MS),
                 10500 * MT_MS);
    CHECK(agent_inside_left(&q[0], t0) == AGENT_INSIDE_CAP_NS);
    agent_inside_charge(&q[0], answered, 1900 * MT_MS);
    CHECK(agent_inside_left(&q[0], answered) == 100 * MT_MS);
    CHECK_EQ_INT(agent_decide(&z, t0 + gap, 0.8, 6 * mib, &rule), 0); /* some left: a candidate */
    agent_inside_charge(&q[0], answered, 300 * MT_MS); /* 200 ms overspent: 800 ms to refill */
    CHECK(agent_inside_left(&q[0], answered) == -200 * MT_MS);
    CHECK_EQ_INT(agent_decide(&z, t0 + gap, 0.8, 6 * mib, &rule), -1);
    z.usage = 290 * mib; /* at the line too: its budget holds */
    CHECK_EQ_INT(agent_decide(&z, answered + 800 * MT_MS, 0.8, 6 * mib, &rule), -1);
    CHECK_EQ_INT(agent_next_due(&z, answered), answered + 800 * MT_MS + 1);
    CHECK_EQ_INT(agent_decide(&z, answered + 800 * MT_MS + 1, 0.8, 6 * mib, &rule), 0);
    CHECK_EQ_INT(rule, GROUP_RULE_LINE);
    z.usage = 230 * mib;

    /* A burst as puma's (tests/e2e/test_agent_runtimes.py: 22-54 trims, 27-50 ms median
     * inside it, in 3-8 s) is not slowed: 80 trims of 30 ms, asked every 25 ms, all made... */
    int64_t inside = 0;
    CHECK_EQ_INT(always_wanted(&z, t0, 2 * MT_SEC, gap, 30 * MT_MS, &inside), 80);
    /* ...but under pressure that lasts, memtrim is inside a process a quarter of its time:
     * over 30 s of a member that always wants a trim, each 80 ms inside it, 9.5 s at most
     * (the 2 s it held and 7.5 s earned), where the 25 ms gap alone asks it 1,200 times */
    always_wanted(&z, t0, 30 * MT_SEC, MT_MS, 80 * MT_MS, &inside);
    CHECK(inside <= 2 * MT_SEC + 30 * MT_SEC / 4 + 80 * MT_MS);
    CHECK(inside >= 30 * MT_SEC / 4);
    q[0].reason = AR_NONE;

    /* The trims' budget starts full (a token bucket): an agent started beside a burst trims
     * it at its pace at once, 20 trims of 8 ms of CPU in one second at the default 10 %... */
    double budget = agent_budget_start(10);
    int64_t at = t0;
    int made = 0;
    for (int i = 0; i < 20; i++) {
        if (agent_budget_take(&budget, &at, t0 + i * 50 * MT_MS, 10)) {
            made++;
            budget -= 8e6;
        }
    }
    CHECK_EQ_INT(made, 20);
    /* ...and over time it holds them to their share: trims of 40 ms of CPU asked every 50
     * ms for 13 s (10.4 s of CPU) spend 2.3 s at most: the 1 s it held, the 0.1 s a second it
     * earns, and one trim's overdraft */
    budget = agent_budget_start(10);
    double spent = 0;
    for (int i = 0; i < 260; i++) {
        if (agent_budget_take(&budget, &at, t0 + 2 * MT_SEC + i * 50 * MT_MS, 10)) {
            spent += 40e6;
            budget -= 40e6;
        }
    }
    CHECK(spent <= 1e9 + 0.1 * 13 * 1e9 + 40e6);
    CHECK(spent >= 2e9);
}

/* AuthTokenFile / ReadTokenFile (the DaemonSet's Secret): the token read from a file its user
 * alone may read, never beside the inline key, the two tokens different. */
static void test_token_files(void)
{
    struct agent_config c;
    char err[1024], dir[] = "/tmp/test_agent_tokXXXXXX", path[64], path2[64], json[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/token", dir);
    snprintf(path2, sizeof path2, "%s/read", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("s3cret-from-a-file\n", f);
    fclose(f);
    f = fopen(path2, "w");
    fputs("s3cret-from-a-file\n", f);
    fclose(f);
    CHECK_EQ_INT(chmod(path, 0644), 0);
    snprintf(json, sizeof json, "{\"AuthTokenFile\": \"%s\"}", path);
    CHECK_EQ_INT(agent_config_load(json, &c, err, sizeof err), -1); /* others may read it */
    CHECK_CONTAINS(err, "AuthTokenFile");
    CHECK_CONTAINS(err, "0644");
    CHECK_EQ_INT(chmod(path, 0400), 0);
    CHECK_EQ_INT(agent_config_load(json, &c, err, sizeof err), 0);
    CHECK(!strcmp(c.http.token, "s3cret-from-a-file")); /* its newline cut */
    snprintf(json, sizeof json, "{\"AuthTokenFile\": \"%s\", \"AuthToken\": \"x\"}", path);
    CHECK_EQ_INT(agent_config_load(json, &c, err, sizeof err), -1);
    CHECK_CONTAINS(err, "not with AuthToken");
    CHECK_EQ_INT(chmod(path2, 0600), 0);
    snprintf(json, sizeof json, "{\"AuthTokenFile\": \"%s\", \"ReadTokenFile\": \"%s\"}", path,
             path2);
    CHECK_EQ_INT(agent_config_load(json, &c, err, sizeof err), -1); /* the same token twice */
    CHECK_CONTAINS(err, "the same");
    snprintf(json, sizeof json, "{\"AuthTokenFile\": \"%s/none\"}", dir);
    CHECK_EQ_INT(agent_config_load(json, &c, err, sizeof err), -1);
    CHECK_CONTAINS(err, "cannot open");
    unlink(path);
    unlink(path2);
    rmdir(dir);
}

/* Each member's own budget of trims' time inside it, shown: per process in GET
 * /agent/cgroups (what is left, held, the bucket's size and share, the last trim's time
 * inside it and what of it was charged, every charge in all) and per cgroup in /metrics (the
 * least left, the members held, the time inside its processes spent and charged). */
static void test_inside_budget_shown(void)
{
    struct agent_proc p[2] = {{.pid = 11, .comm = "puma", .alloc = "glibc", .anon = 1 << 20,
                               .anon_after_trim = -1},
                              {.pid = 12, .comm = "ruby", .alloc = "glibc", .anon = 1 << 20,
                               .anon_after_trim = -1}};
    /* p[0]: a trim past the command's deadline charged its whole 3 s (2 s held: 1 s owed),
     * its refill not begun (its charge dated past any now of this test); p[1] never charged */
    agent_inside_charge(&p[0], INT64_MAX / 2, 3 * MT_SEC);
    p[0].last_inside_ns = 3 * MT_SEC;
    struct agent_cgroup cg = {.path = "/c", .version = 1, .limit = 300 << 20, .high = -1,
                              .usage = 200 << 20, .procs = p, .nprocs = 2,
                              .inside_ns = 3 * MT_SEC + 250 * MT_MS,
                              .inside_charged_ns = 3 * MT_SEC};
    struct agent_cgroup *cgs[1] = {&cg};
    struct agent a = {.cgroups = cgs, .ncgroups = 1};
    char *text = agent_cgroups_json(&a);
    cJSON *j = cJSON_Parse(text);
    const cJSON *ps = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "cgroups"), 0),
                                          "processes");
    const cJSON *b0 = cJSON_GetObjectItem(cJSON_GetArrayItem(ps, 0), "inside_budget");
    const cJSON *b1 = cJSON_GetObjectItem(cJSON_GetArrayItem(ps, 1), "inside_budget");
    CHECK(b0 && b1);
    CHECK(cJSON_GetObjectItem(b0, "left_seconds")->valuedouble == -1.0);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(b0, "held")));
    CHECK(cJSON_GetObjectItem(b0, "cap_seconds")->valuedouble == 2.0);
    CHECK(cJSON_GetObjectItem(b0, "share")->valuedouble == 0.25);
    CHECK(cJSON_GetObjectItem(b0, "last_seconds")->valuedouble == 3.0);
    CHECK(cJSON_GetObjectItem(b0, "last_charged_seconds")->valuedouble == 3.0);
    CHECK(cJSON_GetObjectItem(b0, "charged_seconds")->valuedouble == 3.0);
    CHECK(cJSON_GetObjectItem(b1, "left_seconds")->valuedouble == 2.0);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(b1, "held")));
    CHECK(cJSON_GetObjectItem(b1, "charged_seconds")->valuedouble == 0.0);
    cJSON_Delete(j);
    free(text);

    char *m = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&m, &len);
    agent_metrics(&a, f);
    fclose(f);
    CHECK_CONTAINS(m, "\nmemtrim_agent_cgroup_inside_budget_left_seconds{cgroup=\"/c\",kind=\"other\"} -1.000\n");
    CHECK_CONTAINS(m, "\nmemtrim_agent_cgroup_inside_budget_held{cgroup=\"/c\",kind=\"other\"} 1\n");
    CHECK_CONTAINS(m, "\nmemtrim_agent_cgroup_inside_seconds_total{cgroup=\"/c\",kind=\"other\"} 3.250000\n");
    CHECK_CONTAINS(m, "\nmemtrim_agent_cgroup_inside_charged_seconds_total{cgroup=\"/c\",kind=\"other\"} 3.000000\n");
    /* refilled: none held, the least left p[0]'s */
    p[0].inside_ns = 0.5e9;
    free(m);
    m = NULL;
    f = open_memstream(&m, &len);
    agent_metrics(&a, f);
    fclose(f);
    CHECK_CONTAINS(m, "\nmemtrim_agent_cgroup_inside_budget_left_seconds{cgroup=\"/c\",kind=\"other\"} 0.500\n");
    CHECK_CONTAINS(m, "\nmemtrim_agent_cgroup_inside_budget_held{cgroup=\"/c\",kind=\"other\"} 0\n");
    free(m);
}

int main(void)
{
    RUN(test_kinds);
    RUN(test_config);
    RUN(test_token_files);
    RUN(test_decide);
    RUN(test_retrim);
    RUN(test_inside_budget_shown);
    return harness_end();
}
