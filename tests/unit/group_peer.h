/*
 * group_peer.h - the tests' side of a worker group's channel: a message as a
 * member of pid `pid` sends it (a hello names the program "test"), and a named
 * group's listening socket in the abstract namespace (no file). Include after
 * group.h.
 */
#ifndef MEMTRIM_TEST_GROUP_PEER_H
#define MEMTRIM_TEST_GROUP_PEER_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static inline void peer_msg(struct group_msg *msg, int kind, int pid)
{
    memset(msg, 0, sizeof(*msg));
    msg->magic = GROUP_MAGIC;
    msg->version = GROUP_VERSION;
    msg->kind = (uint16_t)kind;
    msg->pid = pid;
    if (kind == MSG_HELLO)
        snprintf(msg->u.program, sizeof(msg->u.program), "test");
}

/* A listening SOCK_SEQPACKET socket at the abstract address "memtrim-test-<tag>-<pid>"
 * (as named.c's but for the path), non-blocking, its address in *a and *alen; -1 if it
 * cannot be made. */
static inline int peer_listener(const char *tag, struct sockaddr_un *a, socklen_t *alen)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "memtrim-test-%s-%ld", tag, (long)getpid());
    *alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(a->sun_path + 1));
    int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l >= 0 && (bind(l, (struct sockaddr *)a, *alen) != 0 || listen(l, 8) != 0)) {
        close(l);
        l = -1;
    }
    return l;
}

#endif /* MEMTRIM_TEST_GROUP_PEER_H */
