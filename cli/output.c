/*
 * output.c - what the memtrim command's verbs share (cli.h): the clock, an error as one JSON
 * object and a line, a result's output, the call with the options' deadlines, and the fields
 * every call's answer carries. main.c's trim and stats and load.c's load use them; this file
 * calls neither. The tool's one thread.
 */
#include "cli.h"

#include "../common/control.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cli_fail(const struct opts *o, int code, const char *msg)
{
    static const char *const codes[] = {"ok", "usage", "refused", "unsupported", "no_safe_thread",
                                        "timeout", "failed", "already_loaded"};
    if (o->tree && !o->json)
        printf("memtrim: process %d: %s\n", (int)o->pid, msg); /* its line among the others' */
    else
        fprintf(stderr, "memtrim: %s\n", msg);
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "pid", o->pid);
        cJSON *e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "code", codes[code]);
        cJSON_AddStringToObject(e, "message", msg);
        char *s = cJSON_PrintUnformatted(j);
        if (s)
            puts(s);
        free(s);
        cJSON_Delete(j);
    }
    return code;
}

void cli_emit(const struct opts *o, cJSON *j, const char *human)
{
    if (o->json) {
        char *s = cJSON_PrintUnformatted(j);
        if (s)
            puts(s);
        free(s);
    } else {
        puts(human);
    }
    cJSON_Delete(j);
}

int cli_call(const struct opts *o, struct target *t, struct inject_call *c)
{
    char err[2048];
    c->thread_wait_s = o->thread_wait_s;
    c->call_wait_s = o->call_wait_s;
    int rc = inject_run(t, c, err, sizeof err);
    switch (rc) {
    case INJECT_OK:
        return 0;
    case INJECT_REFUSED:
        return cli_fail(o, EXIT_REFUSED, err);
    case INJECT_NO_THREAD:
        return cli_fail(o, EXIT_NO_THREAD, err);
    case INJECT_TIMEOUT:
        return cli_fail(o, EXIT_TIMEOUT, err);
    case INJECT_UNSUPPORTED:
        return cli_fail(o, EXIT_UNSUPPORTED, err);
    default:
        return cli_fail(o, EXIT_FAILED, err);
    }
}

void cli_add_common(cJSON *j, const struct target *t, const struct inject_call *c)
{
    cJSON_AddNumberToObject(j, "pid", t->pid);
    cJSON_AddStringToObject(j, "allocator", target_alloc_name(t->alloc));
    cJSON_AddNumberToObject(j, "thread", c->tid);
    cJSON_AddStringToObject(j, "thread_syscall", c->syscall);
    cJSON_AddNumberToObject(j, "thread_stopped_seconds", c->stopped_s);
    cJSON_AddNumberToObject(j, "call_seconds", c->call_s);
    cJSON_AddNumberToObject(j, "raw_thread", c->raw_tid);
    cJSON_AddNumberToObject(j, "call_thread", c->call_tid);
    cJSON_AddNumberToObject(j, "call_threads_seconds", c->threads_s);
    cJSON_AddBoolToObject(j, "call_threads_ended", c->threads_ended);
    /* the glibc thread's weight for its call (prio.h): the nice it ran at, from which */
    cJSON_AddNumberToObject(j, "taken_thread_nice", c->prio.taken_nice);
    cJSON_AddNumberToObject(j, "call_thread_nice", c->prio.nice);
    cJSON_AddBoolToObject(j, "call_thread_raised", c->prio.raised);
    if (!c->prio.raised)
        cJSON_AddStringToObject(j, "call_thread_not_raised", c->prio.why);
    if (c->prio.lowered) /* it outlived the tool's wait: set back */
        cJSON_AddBoolToObject(j, "call_thread_lowered", 1);
    if (c->self_restored) /* the tool was late (stopped, descheduled): docs/command.md */
        cJSON_AddBoolToObject(j, "thread_restored_itself", 1);
}

const char *cli_cgroup_refusal(const struct target *t, int64_t need, const char *what, char *buf,
                               size_t len)
{
    char where[1200];
    int64_t room = target_cgroup_room(t->pid, where, sizeof where);
    if (room < 0 || room >= need || mt_control("cmd-cgroup-room"))
        return NULL;
    snprintf(buf, len, "process %d" TARGET_NO_ROOM_WORDS "%lld KiB left (%s) and %s may charge it up "
             "to %lld KiB: it could be OOM-killed; refused, nothing was changed", (int)t->pid,
             (long long)(room >> 10), where, what, (long long)(need >> 10));
    return buf;
}

const char *cli_pids_refusal(const struct target *t, int threads, const char *what, char *buf,
                             size_t len)
{
    char where[1200], nproc[200];
    int64_t room = target_pids_room(t->pid, where, sizeof where),
            room2 = target_nproc_room(t->pid, t->st.ruid, nproc, sizeof nproc);
    if (room2 >= 0 && (room < 0 || room2 < room) && !mt_control("cmd-nproc-room")) {
        room = room2;
        snprintf(where, sizeof where, "%s", nproc);
    }
    if (room < 0 || room >= 2 * (int64_t)threads || mt_control("cmd-pids-room"))
        return NULL;
    snprintf(buf, len, "process %d" TARGET_NO_PIDS_WORDS "%lld more tasks (%s) and %s starts %d "
             "threads there, leaving it at least as many: its own thread or fork could fail; "
             "refused, nothing was changed", (int)t->pid, (long long)room, where, what,
             threads);
    return buf;
}
