/*
 * group_peer.h - the tests' side of a worker group's channel: a message as a
 * member of pid `pid` sends it (a hello names the program "test"). Include
 * after group.h.
 */
#ifndef MEMTRIM_TEST_GROUP_PEER_H
#define MEMTRIM_TEST_GROUP_PEER_H

#include <stdio.h>
#include <string.h>

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

#endif /* MEMTRIM_TEST_GROUP_PEER_H */
