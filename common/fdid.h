/*
 * fdid.h - a kept descriptor's identity. memtrim lives in someone else's
 * process: a host that runs closefrom(3) (daemons do, after their fork) frees
 * memtrim's numbers, and its next open() takes them. A number memtrim kept is
 * therefore checked, just before every close, read, write or poll of it, to be
 * still the file memtrim opened; when it is not, memtrim leaves it alone (it is
 * the host's now) and opens its own again where it needs one.
 *
 * The identity is the file's device, inode and type (fstat), and a stamp memtrim
 * puts on its own open of it, the open file description, when it takes the
 * identity (F_SETSIG to MT_FDID_STAMP: it does nothing without O_ASYNC, which
 * memtrim never sets). A host that closed memtrim's number and opened the very
 * same file there (a /proc or cgroup file, a PSI file, a lock file, a directory,
 * a pipe by its /proc link) has a description of its own, without the stamp: not
 * memtrim's. A forked child shares its parent's descriptions, the stamp with
 * them: memtrim's there too (the atfork child handler closes them). Sockets and
 * eventfds cannot be opened again by path (ENXIO): a host's is another inode, or
 * for eventfds (every one shares one anonymous inode) one without the stamp and
 * with another eventfd-id (/proc/self/fdinfo, 6.3 on). An identity is taken only
 * with mt_fdid_take (mt_fdid_file rebuilds one of a file so taken).
 *
 * What remains is the window between the check (fstat, fcntl) and the call that
 * follows it: no system call takes an identity, so a host thread can still close
 * and reopen the number in between. That window is a few hundred nanoseconds on
 * a thread of memtrim's, against a host whose closefrom would otherwise meet every
 * kept number for the rest of the run. And a host's own description that carries
 * the stamp: one it got from memtrim's (dup, SCM_RIGHTS), or its own F_SETSIG of
 * MT_FDID_STAMP on the same file.
 *
 * Threads: no state; any thread. A struct mt_fdid is written once, before the
 * number is published to other threads, and only read after.
 */
#ifndef MEMTRIM_FDID_H
#define MEMTRIM_FDID_H

#include <stdint.h>

struct mt_fdid {
    uint64_t dev, ino;
    uint32_t type;     /* st_mode & S_IFMT (0 for anonymous inodes) */
    uint32_t anon;     /* an anonymous inode: the stamp and eventfd_id say which */
    int64_t eventfd_id; /* the kernel's eventfd-id, -1 where it has none */
};

#define MT_FDID_STAMP 37 /* F_SETSIG's value on each open file description memtrim keeps */

/* The stamp alone, for a descriptor whose identity is kept another way (the group's wake
 * pipe): put it on fd's open file description (0, or -errno); 1 when fd carries it. */
int mt_fdid_stamp(int fd);
int mt_fdid_stamped(int fd);
/* Record fd's identity and stamp its open file description (fd: one memtrim just opened
 * or was handed). 0, or -errno (id zeroed: nothing passes mt_fdid_is). */
int mt_fdid_take(int fd, struct mt_fdid *id);
/* 1 when fd is still the file id recorded, 0 otherwise (closed, or someone else's). */
int mt_fdid_is(int fd, const struct mt_fdid *id);
/* close(fd) when it is still id's file: 0; -EBADF when it was not (left alone). */
int mt_fdid_close(int fd, const struct mt_fdid *id);
/* A regular file's identity from the device and inode mt_fdid_take gave (cgroup.c and
 * probe.c keep those two in atomics): passes only on the stamped open mt_fdid_take saw. */
void mt_fdid_file(uint64_t dev, uint64_t ino, struct mt_fdid *id);

/*
 * The kept numbers of the process, for a forked child: memtrim lists each descriptor it
 * keeps (its number and a copy of its identity) once it is published, and takes it off
 * before it closes or forgets it. In the atfork child handler (mt_fdid_fork_child, before
 * any host code runs there) each listed number that is still its file, checked then, after
 * the fork, is closed; the rest are forgotten, never closed. A child thus keeps none of its
 * parent's cgroup, /proc and pressure descriptors. At most MT_FDID_LISTED at once (past
 * that a number is not listed: a child keeps it, as before). Lock-free (a fork may come at
 * any moment: a lock held then would stay held in the child); any thread.
 */
#define MT_FDID_LISTED 64
void mt_fdid_list(int fd, const struct mt_fdid *id);
void mt_fdid_unlist(int fd, const struct mt_fdid *id);
/* The child's side: how many it closed. */
int mt_fdid_fork_child(void);

/*
 * A kept descriptor: its number and identity, owned by one thread (or published
 * once before other threads read it). mt_kept_fd() is the only way to the number:
 * it checks the identity each time and forgets a number that is no longer
 * memtrim's (never closing it), logging once that the host took it.
 */
struct mt_kept {
    int fd;           /* -1: none, or forgotten */
    const char *what; /* for the log line: "/proc/self/statm", "the PSI trigger" */
    struct mt_fdid id;
};
#define MT_KEPT_NONE(what) {-1, (what), {0, 0, 0, 0, -1}}

/* k takes fd (just opened by the caller). fd, or -1 (fd < 0 given, or its identity
 * could not be read: then it was closed, being certainly the caller's). */
int mt_kept_set(struct mt_kept *k, int fd, const char *what);
/* The number while it is still k's file, else -1 (k forgets it). */
int mt_kept_fd(struct mt_kept *k);
/* Close it while it is still k's file; k holds none after. */
void mt_kept_close(struct mt_kept *k);

/*
 * The canary: one descriptor memtrim opens before any other of an instance's and
 * never uses, so that a host that closes descriptors it does not own in its own
 * process (closefrom(3), or a loop up to the limit, as some daemons do at start)
 * is seen: once the canary is no longer memtrim's, memtrim's store and HTTP
 * server, whose descriptors live inside SQLite and libmicrohttpd where memtrim
 * cannot check each call, are abandoned as they stand: nothing of theirs is
 * closed, read or written again (mt_fds_lost). Descriptors memtrim reaches
 * itself (cgroup files, /proc, the pressure thread's, the group's channels) are
 * checked one by one and need no canary. Process-wide; any thread. A forked
 * child closes its parent's canary in the atfork handler (mt_canary_fork_child,
 * before any host code runs there) and opens its own with its instance.
 */
void mt_canary_open(void);
/* Whether the host closed memtrim's descriptors since the canary was opened: 1 lost
 * (and from then on for the life of the process), 0 not. One fstat. */
int mt_fds_lost(void);
/* Close the canary (at the instance's stop) while it is still memtrim's. */
void mt_canary_close(void);
void mt_canary_fork_child(void);

#endif /* MEMTRIM_FDID_H */
