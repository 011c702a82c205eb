/*
 * group_calls.c - core.h's worker-group calls (mt_group_*) on the instance's
 * group (core/group/, its face group.h): each hands the call to the group the
 * instance keeps (mt->group); the store's fork hold is the instance's own atfork
 * handlers' (memtrim.c), for every host.
 * Threads: as each call's caller (HTTP workers, the host's forking thread, the
 * LD_PRELOAD adapter's). No lock of its own: mt->group is set and cleared by
 * the start steps (memtrim.c) and the adapter's lead, under its preload_lock;
 * each group call takes g->lock (core/group/group_int.h).
 */
#include <errno.h>
#include <unistd.h>

#include "core.h"
#include "group.h"
#include "instance.h"

int mt_group_info(struct memtrim *mt, struct mt_group_info *info, struct mt_member *out, int cap,
                  int *n)
{
    return group_info(mt ? mt->group : NULL, info, out, cap, n);
}

int mt_group_trim(struct memtrim *mt, int pid, int64_t pad, struct mt_member_trim *out, int cap,
                  int *n, int64_t *retry_after_ms)
{
    return group_trim(mt ? mt->group : NULL, pid, pad, out, cap, n, retry_after_ms);
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

void mt_group_fork_prepare(struct memtrim *mt)
{
    group_fork_prepare(mt ? mt->group : NULL);
}

void mt_group_fork_parent(struct memtrim *mt)
{
    group_fork_parent(mt ? mt->group : NULL);
}

int mt_group_fork_child(struct memtrim *mt, int *waits)
{
    return group_fork_child(mt ? mt->group : NULL, waits);
}

int mt_group_take_pending(struct memtrim *mt, int *fds, int cap)
{
    return group_take_pending(mt ? mt->group : NULL, fds, cap);
}

int mt_group_hold_pending(struct memtrim *mt, const int *fds, int n)
{
    return group_hold_pending(mt ? mt->group : NULL, fds, n);
}

int mt_group_adopt(struct memtrim *mt, int fd)
{
    return group_adopt(mt ? mt->group : NULL, fd);
}

int mt_group_join_index(struct memtrim *mt)
{
    return group_join_index(mt ? mt->group : NULL);
}

int mt_pid(void)
{
    return (int)getpid();
}
