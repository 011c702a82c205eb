/*
 * group_calls.c - the instance's worker-group calls on the group it keeps
 * (mt->group; core/group/, its face group.h): core.h's mt_group_info and
 * mt_trim (the one manual trim, which resolves its target: this process, the
 * group, or one member), the leads (instance.h), and the calls core/group/'s host side
 * is handed (mt_group_host_calls, group_host.h), the instance as an opaque
 * handle there. The store's fork hold is the instance's own atfork handlers'
 * (memtrim.c), for every host.
 * Threads: as each call's caller (HTTP workers, the host's forking thread, the
 * host side's threads). No lock of its own: mt->group is set by a lead before
 * the host side publishes the instance (host.instance, under host.lock:
 * core/group/group_host_int.h), and cleared by the stop after the host side
 * took it off (the start steps, memtrim.c); each group call takes g->lock
 * (core/group/group_int.h).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "group.h"
#include "group_host.h"
#include "instance.h"

int mt_group_info(struct memtrim *mt, struct mt_group_info *info, struct mt_member *out, int cap,
                  int *n)
{
    return group_info(mt ? mt->group : NULL, info, out, cap, n);
}

int mt_trim(struct memtrim *mt, int pid, int64_t pad, struct mt_member_trim *out, int cap,
            int *n, int *members, int64_t *retry_after_ms)
{
    *n = 0;
    *members = group_role(mt->group) == GROUP_LEADER;
    if (*members) /* the group decides: every member, or the one named */
        return group_trim(mt->group, pid, pad, out, cap, n, retry_after_ms);
    if (pid > 0 && pid != mt_pid())
        return -ENOENT;
    if (cap < 1)
        return -EINVAL;
    struct mt_member_trim *o = &out[0];
    memset(o, 0, sizeof(*o));
    o->pid = mt_pid();
    o->rc = mt_trim_manual(mt, pad, &o->r, retry_after_ms);
    if (o->rc)
        return o->rc;
    *n = 1;
    return 0;
}

int mt_group_lead_named(struct memtrim *mt, int listen_fd, const char *name, int forks_join,
                        char **err)
{
    if (!mt || mt->group || listen_fd < 0)
        return -EINVAL;
    struct group_deps d = mt_group_deps(mt);
    return group_lead(&mt->group, &d, listen_fd, name, forks_join, err);
}

int mt_group_lead(struct memtrim *mt, char **err)
{
    if (!mt || mt->group)
        return -EINVAL;
    struct group_deps d = mt_group_deps(mt);
    return group_lead(&mt->group, &d, -1, NULL, 1, err);
}

/* ---- the host side's calls (group_host.h): the instance as an opaque handle ---- */

static int host_create_member(const char *json, int fd, void (*leader_gone)(void *), void *arg,
                              void **out, char **err)
{
    struct memtrim *mt = NULL;
    int rc = mt_create_member(json, fd, leader_gone, arg, &mt, err);
    *out = mt;
    return rc;
}

static void host_destroy(void *mt)
{
    mt_destroy(mt);
}

static int host_http_port(void *mt)
{
    return mt_http_port(mt);
}

static int host_http_address(void *mt, char *buf, size_t size)
{
    return mt_http_address(mt, buf, size);
}

/* name NULL: a forked group's lead; a named one without its socket is refused (-EINVAL),
 * never turned into a forked group's. */
static int host_lead(void *mt, int listen_fd, const char *name, int forks_join, char **err)
{
    if (!name)
        return mt_group_lead(mt, err);
    return mt_group_lead_named(mt, listen_fd, name, forks_join, err);
}

static struct group *host_group(void *mt)
{
    return mt ? ((struct memtrim *)mt)->group : NULL;
}

void mt_group_host_calls(struct group_host_ops *ops)
{
    ops->create_member = host_create_member;
    ops->destroy = host_destroy;
    ops->http_port = host_http_port;
    ops->http_address = host_http_address;
    ops->lead = host_lead;
    ops->group = host_group;
    ops->fork_hooks_install = mt_fork_hooks_install;
    ops->after_fork_child = mt_after_fork_child;
}

int mt_pid(void)
{
    return (int)getpid();
}
