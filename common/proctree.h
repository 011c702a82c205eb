/*
 * proctree.h - which process memtrim is in, and who holds its port: the
 * Program globs (LD_PRELOAD starts memtrim only in the process they name) and
 * the ancestor that already serves memtrim's port (a child that inherited
 * LD_PRELOAD stays off quietly). Reads /proc only; no state, no locks.
 */
#ifndef MEMTRIM_PROCTREE_H
#define MEMTRIM_PROCTREE_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Whether a process is one the globs name. globs: fnmatch(3) patterns, one
 * per line ('\n'-separated, as config.c stores Program), each tried against
 * the executable's path, its basename and comm; "" names every process.
 */
int proctree_match(const char *globs, const char *exe, const char *comm);

/* This process's executable (/proc/self/exe, without " (deleted)") and comm;
 * "" for what cannot be read. */
void proctree_self(char *exe, size_t exe_size, char *comm, size_t comm_size);

/* A process's comm ("?" when it cannot be read). */
void proctree_comm(pid_t pid, char *comm, size_t size);

/*
 * The ancestor of this process (parent, grandparent, ... up to pid 1) that
 * holds a listening TCP socket (IPv4 or IPv6) on port and runs memtrim (it
 * has a thread named "memtrim-..."). 1 with *pid and comm filled; 0 when the
 * port is held by no ancestor, or by one without memtrim (a genuine clash).
 */
int proctree_port_holder(int port, pid_t *pid, char *comm, size_t comm_size);

/* Tests: find the listening sockets in /proc/net/tcp{,6}, as where netlink is
 * refused, rather than through sock_diag. */
extern int proctree_no_netlink;

#endif /* MEMTRIM_PROCTREE_H */
