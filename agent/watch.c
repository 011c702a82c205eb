/*
 * watch.c - the kernel wakes the agent per cgroup (docs/agent.md, "Woken by the kernel"):
 *  - v1: an eventfd registered through cgroup.event_control on memory.usage_in_bytes at two
 *    lines, the zone's floor (core/pressure's: the PressureRatio line, or half the aim if
 *    lower) and 95 % of the limit; the kernel signals
 *    each crossing, either way. The registration holds no descriptor but the eventfd, which
 *    ends it when closed (one descriptor per cgroup).
 *  - v2: a PSI trigger on memory.pressure ("some 100 ms in 1 s", written: a root agent, or
 *    a writable cgroupfs) and memory.events (POLLPRI on a change, readable read-only);
 *    v2 has no usage lines, so a cgroup past half its aim is also polled (agent.c).
 * The descriptors are the agent's own (it is no plugin: no host closes them), in a->epfd
 * with the cgroup as data. The loop thread, under a->lock.
 */
#include "agent_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common.h"
#include "decision.h"

static int add(struct agent *a, struct agent_cgroup *cg, int fd, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = cg};
    return epoll_ctl(a->epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

static int arm_v1(struct agent *a, struct agent_cgroup *cg, int64_t aim)
{
    char path[AGENT_PATH + 128], line[96];
    snprintf(path, sizeof path, "%s/memory.usage_in_bytes", cg->dir);
    int ufd = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof path, "%s/cgroup.event_control", cg->dir);
    int cfd = ufd < 0 ? -1 : open(path, O_WRONLY | O_CLOEXEC);
    int efd = cfd < 0 ? -1 : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int rc = efd < 0 ? -errno : 0;
    int64_t lines[2] = {(int64_t)pressure_zone_floor(aim, a->cfg.pressure_ratio), aim - aim / 20};
    for (int i = 0; i < 2 && rc == 0; i++) {
        int n = snprintf(line, sizeof line, "%d %d %lld", efd, ufd, (long long)lines[i]);
        if (write(cfd, line, (size_t)n) != n)
            rc = -errno;
    }
    if (ufd >= 0)
        close(ufd);
    if (cfd >= 0)
        close(cfd);
    if (rc == 0)
        rc = add(a, cg, efd, EPOLLIN);
    if (rc != 0) {
        if (efd >= 0)
            close(efd);
        return rc;
    }
    cg->event_fd = efd;
    cg->threshold = lines[0];
    return 0;
}

static int arm_v2(struct agent *a, struct agent_cgroup *cg)
{
    char path[AGENT_PATH + 128];
    static const char trigger[] = "some 100000 1000000";
    snprintf(path, sizeof path, "%s/memory.pressure", cg->dir);
    int pfd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (pfd >= 0 && (write(pfd, trigger, sizeof trigger) < 0 || add(a, cg, pfd, EPOLLPRI) != 0)) {
        close(pfd);
        pfd = -1;
    }
    snprintf(path, sizeof path, "%s/memory.events", cg->dir);
    int efd = open(path, O_RDONLY | O_CLOEXEC);
    if (efd >= 0 && add(a, cg, efd, EPOLLPRI) != 0) {
        close(efd);
        efd = -1;
    }
    cg->event_fd = pfd;
    cg->events_fd = efd;
    return pfd >= 0 || efd >= 0 ? 0 : -ENOENT;
}

int agent_watch_arm(struct agent *a, struct agent_cgroup *cg)
{
    int64_t aim = agent_aim(cg);
    if (aim <= 0 || !cg->allowed)
        return -ENOENT;
    return cg->version == 1 ? arm_v1(a, cg, aim) : arm_v2(a, cg);
}

void agent_watch_disarm(struct agent *a, struct agent_cgroup *cg)
{
    int *fds[2] = {&cg->event_fd, &cg->events_fd};
    for (int i = 0; i < 2; i++)
        if (*fds[i] >= 0) {
            epoll_ctl(a->epfd, EPOLL_CTL_DEL, *fds[i], NULL);
            close(*fds[i]);
            *fds[i] = -1;
        }
}

void agent_watch_drain(struct agent_cgroup *cg, int fd)
{
    (void)fd;
    uint64_t n;
    char buf[512];
    if (cg->version == 1 && cg->event_fd >= 0)
        while (read(cg->event_fd, &n, sizeof n) == (ssize_t)sizeof n)
            ;
    if (cg->events_fd >= 0)
        (void)!pread(cg->events_fd, buf, sizeof buf, 0);
}
