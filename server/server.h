/*
 * server.h - the embedded HTTP server (libmicrohttpd): started and stopped by
 * the instance's lifecycle (core/memtrim.c), serving the route table in
 * server/routes.c with the handlers in api/.
 */
#ifndef MEMTRIM_SERVER_H
#define MEMTRIM_SERVER_H

#include <stddef.h>

struct memtrim;
struct mt_config;
struct server;

/*
 * Start serving on cfg->http_bind:cfg->http_port (0 = ephemeral). Returns 0,
 * or a negative errno value (-EADDRINUSE, -EINVAL for a bad address, ...)
 * with *err (caller frees with free()).
 */
int server_start(struct memtrim *mt, const struct mt_config *cfg, struct server **out, char **err);

/* The bound port. */
int server_port(const struct server *s);

/* The bound address, numeric, with its port ("127.0.0.1:8043", "[::1]:8043"),
 * read from the listening socket. 0, -ENOENT (no server or socket), -ENAMETOOLONG. */
int server_address(const struct server *s, char *buf, size_t size);

/* Stop the daemon (waits for running handlers) and free; accepts NULL. */
void server_stop(struct server *s);

#endif /* MEMTRIM_SERVER_H */
