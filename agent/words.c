/*
 * words.c - the words the agent's answers share, below the files that give them: each
 * refusal reason's name and whether it makes a process unreleasable (act.c reads the
 * command's answer into a reason; api.c's /metrics and /agent/cgroups and history.c's trim
 * rows name it), and a byte count in JSON, null when unknown (api.c's and history.c's
 * answers). Calls nothing of agent/'s other files. Pure functions of their arguments; any
 * thread, no lock.
 */
#include "agent_int.h"

#include <cjson/cJSON.h>

static const char *const reason_names[AR_COUNT] = {
    "none", "musl", "static", "runtime_allocator", "seccomp", "kernel_refused", "no_safe_thread",
    "timeout", "failed", "gives_nothing", "denied", "memtrim_loaded", "api_unreachable",
    "api_refused", "no_room"};

const char *agent_reason_name(enum agent_reason r)
{
    return r >= 0 && r < AR_COUNT ? reason_names[r] : "none";
}

int agent_reason_unreleasable(enum agent_reason r)
{
    return r == AR_MUSL || r == AR_STATIC || r == AR_RUNTIME || r == AR_SECCOMP ||
           r == AR_GIVES_NOTHING;
}

void agent_json_bytes(cJSON *o, const char *k, int64_t v)
{
    if (v < 0)
        cJSON_AddNullToObject(o, k);
    else
        cJSON_AddNumberToObject(o, k, (double)v);
}
