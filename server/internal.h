/*
 * internal.h - struct server, shared by the files of server/ only.
 * Written once by server_start before the daemon runs; afterwards the worker
 * threads only read it, except the reader pool, which has its own mutex.
 */
#ifndef MEMTRIM_SERVER_INTERNAL_H
#define MEMTRIM_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

struct MHD_Daemon;
struct db_reader;

#define SERVER_READERS_MAX 16

struct server_readers {
    pthread_mutex_t lock;
    struct db_reader *idle[SERVER_READERS_MAX];
    int nidle;
    uint64_t generation; /* the store opening the idle readers belong to */
};

struct server {
    struct MHD_Daemon *daemon;
    struct memtrim *mt;
    int port;
    char token[256]; /* "" = no token; never logged, never sent */
    int read_requires_auth;
    int loopback;   /* bound to a loopback address: only local names may be the Host */
    struct server_readers readers;
};

void server_readers_init(struct server_readers *p);
void server_readers_free(struct server_readers *p); /* closes the idle readers */

#endif /* MEMTRIM_SERVER_INTERNAL_H */
