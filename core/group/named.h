/*
 * named.h - named groups (named.c; docs/groups.md): the rendezvous core/group/'s
 * host side elects on (group_host_int.h, group_elect.c); private to the room.
 * Processes started separately with one GroupName: the first to take
 * <dir>/<name>.lock leads (and holds the lock for its life) and listens on
 * <dir>/<name>.sock; the others connect and run as members on that channel.
 * A struct mt_named is its caller's (no lock of its own).
 */
#ifndef MEMTRIM_NAMED_H
#define MEMTRIM_NAMED_H

#include "fdid.h"
#include <stddef.h>
#include <stdint.h>
#include "config.h"

struct mt_named {
    int dirfd;                 /* the checked private directory, -1 none */
    int lock_fd;               /* the leader's lock, held for its life; -1 */
    int listen_fd;             /* the leader's socket; -1 */
    uint64_t sock_dev, sock_ino; /* the socket file it bound (withdrawn only if still it) */
    struct mt_fdid dir_id, lock_id, listen_id; /* closed only while still those (fdid.h) */
    char dir[MT_CONFIG_STR_MAX];
    char name[MT_GROUP_NAME_MAX + 1];
};
#define MT_NAMED_MEMBER 0
#define MT_NAMED_LEADER 1
/* Pure: the directory: GroupDir, else $XDG_RUNTIME_DIR/memtrim, else /run/memtrim (root),
 * else /tmp/memtrim-<uid>. 0, or -ENAMETOOLONG. */
int mt_named_dir_choose(const char *group_dir, const char *xdg_runtime_dir, unsigned euid,
                        char *out, size_t size);
/* Pure: whether a process of peer_uid may join a leader of leader_uid (same uid, or root). */
int mt_named_peer_allowed(unsigned peer_uid, unsigned leader_uid);
/* Create (0700) or check the directory: a directory (no symbolic link), owned by euid (root
 * too: another user's directory would let that user plant the socket), no group or other bits. Its descriptor, or -errno with *err (what: the
 * key or the role that named the path, for the message). */
int mt_named_dir_open(const char *path, unsigned euid, const char *what, char **err);
void mt_named_init(struct mt_named *n);
/* Choose and check the directory of cfg's GroupName. 0, or -errno with *err. */
int mt_named_open(struct mt_named *n, const struct mt_config *cfg, char **err);
/* One non-blocking election: MT_NAMED_LEADER (n->lock_fd, n->listen_fd set),
 * MT_NAMED_MEMBER (*member_fd connected to the leader, its uid checked), -EAGAIN
 * (the role is being taken, or the socket's backlog is full: try again soon), -EPERM (another uid leads) or another
 * -errno, with *err. */
int mt_named_elect(struct mt_named *n, int *member_fd, char **err);
/* Remove the socket file this leader bound (new joiners then wait for the next one). */
void mt_named_unpublish(struct mt_named *n);
/* Unpublish, close the socket, drop the lock: the next leader may take over. */
void mt_named_resign(struct mt_named *n);
/* In a forked child: close the parent's lock and socket (copies), keep the directory. */
void mt_named_fork_child(struct mt_named *n);
void mt_named_close(struct mt_named *n);
#endif /* MEMTRIM_NAMED_H */
