/*
 * healthz.c - GET /healthz: ok or degraded, version, uptime, the store's
 * state and, when degraded, why; the pid and comm of the process memtrim runs
 * in (LD_PRELOAD into a process tree). Open without a token (liveness probes).
 * Runs on HTTP worker threads; mt_health_get takes the instance's lock.
 */
#include "api.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <unistd.h>

#include "core.h"
#include "memtrim.h"
#include "proctree.h"

int api_healthz_get(const struct server_request *req, struct server_reply *rep)
{
    struct mt_health h;
    mt_health_get(req->app, &h);
    int64_t now = mt_now_ms();

    int failed = 0;
    cJSON *root = cJSON_CreateObject();
    api_json_str(root, "status", h.degraded ? "degraded" : "ok", &failed);
    api_json_str(root, "version", MEMTRIM_VERSION, &failed);
    api_json_num(root, "uptime_seconds", (double)(now - h.started_ms) / 1e3, &failed);
    api_json_int(root, "started_ms", h.started_ms, &failed);
    api_json_str(root, "database", h.db_state, &failed);
    api_json_str(root, "reason", h.reason, &failed);
    api_json_int(root, "suspended", h.suspended, &failed);
    char comm[64];
    proctree_comm(getpid(), comm, sizeof(comm));
    api_json_int(root, "pid", getpid(), &failed);
    api_json_str(root, "program", comm, &failed);
    /* Which cgroup and limit apply (as the start log said), and what wakes the pressure path. */
    struct mt_snapshot snap;
    char line[1400];
    int zone = 0;
    mt_snapshot_get_cheap(req->app, &snap);
    mt_cgroup_summary(req->app, &snap, line, sizeof(line));
    api_json_str(root, "cgroup", line, &failed);
    api_json_int_or_null(root, "memory_limit_bytes", snap.memory_limit_bytes,
                         snap.memory_limit_bytes > 0, &failed);
    api_json_str(root, "pressure_source", mt_pressure_source(req->app, &zone), &failed);
    if (failed) {
        cJSON_Delete(root);
        root = NULL;
    }
    return server_reply_json(rep, 200, root);
}
