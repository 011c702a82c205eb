/*
 * conns.c - DESIGN. The connection limits: which new connection to take and
 * which open one to give up for it. Every connection holds one of the host's
 * descriptors, so their number is capped (MaxConnections); but refusing at
 * the cap lets one client that opens connections and sends nothing keep
 * everyone else out, and a limit on all connections of one address refuses
 * honest clients behind one address (wrk, a reverse proxy, NAT, kube-proxy,
 * and every loopback client: 127.0.0.0/8 is one address here). So only
 * connections the server waits on count against a client, and they are
 * evicted rather than new ones refused:
 *   - a connection "waits" while its request has not arrived whole (none
 *     yet, headers or body under way, or idle between kept-alive requests);
 *     a busy one (handler or reply running) is never evicted;
 *   - of the waiting ones, a connection that never completed a request gives
 *     way before an idle kept-alive one, and the longest-waiting first: a
 *     client that opens connections and sends nothing (or half a request)
 *     displaces its own connections, not those of clients being served;
 *   - a new connection from an address that already has per_addr waiting
 *     ones evicts one of that address's;
 *   - a new connection past the cap evicts one of any address, and is
 *     refused only when none waits (every one busy);
 *   - evicted connections are shut down at once and MHD closes them in its
 *     next round; past `hard` (open plus not yet closed) new ones are refused
 *     from an address that has connections of its own being closed (a flood
 *     that outruns MHD's closing), and still taken from any other (within
 *     libmicrohttpd's own limit, above `hard`).
 * "Address" is the client's IP address (loopback one, IPv6 by /64), and on the
 * unix socket the peer's uid (SO_PEERCRED, read when MHD announces the
 * connection: the accept policy sees no descriptor), so one user's flood
 * displaces its own connections, not another user's.
 * An honest client's new connection is served as long as its request
 * arrives before per_addr newer ones of its address; kept-alive clients
 * lose an idle connection only to a new one when their address has no
 * connection waiting on its first request (or the server none at the cap).
 * Refusals and evictions are counted and logged rate-limited, never one
 * line each.
 *
 * Threads: MHD's workers call server_conns_admit from the accept policy (from
 * the connection notification for the unix socket, server.c);
 * the decision is pure (server_admit_decide, tested on hand-made lists).
 * Locks: the watchdog's lock (w->lock) guards the list, the limits and the
 * counters; a victim is shut down under it, so its descriptor is still the
 * connection's (MHD's close notification removes it under the same lock
 * before MHD closes it). Lines are logged after the lock is released.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <stdint.h>

#include "internal.h"

void server_addr_key_of(const struct sockaddr *sa, struct server_addr_key *key)
{
    memset(key, 0, sizeof(*key));
    if (sa == NULL)
        return;
    const uint8_t *v4 = NULL;
    if (sa->sa_family == AF_INET) {
        v4 = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr.s_addr;
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a6)) {
            key->kind = SERVER_ADDR_LOOPBACK;
            return;
        }
        if (IN6_IS_ADDR_V4MAPPED(a6)) {
            v4 = a6->s6_addr + 12;
        } else {
            key->kind = SERVER_ADDR_V6_64;
            memcpy(key->bytes, a6->s6_addr, 8);
            return;
        }
    } else if (sa->sa_family == AF_UNIX) {
        key->kind = SERVER_ADDR_UNIX; /* a unix address says no uid: server_addr_key_of_peer */
        memset(key->bytes, 0xff, sizeof(uint32_t));
        return;
    } else {
        return; /* SERVER_ADDR_OTHER: one key for whatever else */
    }
    if (v4[0] == 127) {
        key->kind = SERVER_ADDR_LOOPBACK;
        return;
    }
    key->kind = SERVER_ADDR_V4;
    memcpy(key->bytes, v4, 4);
}

void server_addr_key_of_peer(int fd, struct server_addr_key *key)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    memset(key, 0, sizeof(*key));
    key->kind = SERVER_ADDR_UNIX;
    uint32_t uid = UINT32_MAX; /* the credentials cannot be read: one key for all such */
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
        uid = (uint32_t)cred.uid;
    memcpy(key->bytes, &uid, sizeof(uid));
}

int server_addr_key_eq(const struct server_addr_key *a, const struct server_addr_key *b)
{
    return a->kind == b->kind && memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

void server_addr_key_text(const struct server_addr_key *key, char *buf, size_t size)
{
    char a[INET6_ADDRSTRLEN];
    uint8_t full[16] = {0};
    switch (key->kind) {
    case SERVER_ADDR_LOOPBACK:
        snprintf(buf, size, "loopback");
        break;
    case SERVER_ADDR_V4:
        inet_ntop(AF_INET, key->bytes, a, sizeof(a));
        snprintf(buf, size, "%s", a);
        break;
    case SERVER_ADDR_V6_64:
        memcpy(full, key->bytes, 8);
        inet_ntop(AF_INET6, full, a, sizeof(a));
        snprintf(buf, size, "%s/64", a);
        break;
    case SERVER_ADDR_UNIX: {
        uint32_t uid;
        memcpy(&uid, key->bytes, sizeof(uid));
        if (uid == UINT32_MAX)
            snprintf(buf, size, "a unix socket peer of unknown uid");
        else
            snprintf(buf, size, "uid %u on the unix socket", (unsigned)uid);
        break;
    }
    default:
        snprintf(buf, size, "an unknown address");
        break;
    }
}

/*
 * Whether c gives way before best: one that never completed a request before
 * an idle kept-alive one, then the one waiting longer (the earlier deadline:
 * all are armed with the same timeout); ties keep the older connection.
 */
static int before(const struct server_conn *c, const struct server_conn *best)
{
    if (best == NULL)
        return 1;
    if (c->served != best->served)
        return !c->served;
    return c->deadline_ns < best->deadline_ns;
}

void server_admit_decide(const struct server_conn *head, const struct server_addr_key *key,
                         const struct server_limits *lim, struct server_admit *out)
{
    const struct server_conn *oldest = NULL, *oldest_here = NULL;
    unsigned open = 0, gone = 0, here = 0, gone_here = 0;
    for (const struct server_conn *c = head->next; c != head; c = c->next) {
        if (c->gone) {
            gone++;
            gone_here += server_addr_key_eq(&c->key, key);
            continue;
        }
        open++;
        if (c->deadline_ns == 0)
            continue; /* busy */
        if (before(c, oldest))
            oldest = c;
        if (server_addr_key_eq(&c->key, key)) {
            here++;
            if (before(c, oldest_here))
                oldest_here = c;
        }
    }
    memset(out, 0, sizeof(*out));
    out->open = open;
    out->waiting_here = here;
    /* Past hard, the address whose connections are being closed (the flood's own evictions)
     * is refused; another address is still taken, within libmicrohttpd's own limit above
     * hard: a flood that outruns MHD's closing must not refuse everyone else. */
    if (open + gone >= lim->hard && gone_here > 0) {
        out->refuse = 1;
        out->gone = gone;
    } else if (here >= lim->per_addr && oldest_here != NULL) {
        out->victim = (struct server_conn *)oldest_here;
    } else if (open >= lim->cap) {
        if (oldest != NULL)
            out->victim = (struct server_conn *)oldest;
        else
            out->refuse = 1;
    }
}

int server_conns_admit(struct server_watchdog *w, const struct server_addr_key *key)
{
    struct server_admit a;
    struct server_addr_key victim_key;
    int victim_served = 0;
    pthread_mutex_lock(&w->lock);
    server_admit_decide(&w->head, key, &w->limits, &a);
    struct server_limits lim = w->limits;
    if (a.victim != NULL) {
        server_conn_shutdown(a.victim); /* MHD sees it closed and closes it */
        a.victim->deadline_ns = 0;
        a.victim->gone = 1;
        victim_key = a.victim->key;
        victim_served = a.victim->served;
        w->evicted++;
    } else if (a.refuse) {
        w->refused++;
    }
    pthread_mutex_unlock(&w->lock);

    char from[64], whose[64];
    if (a.refuse || a.victim != NULL)
        server_addr_key_text(key, from, sizeof(from));
    if (a.refuse && a.gone > 0) {
        mt_log_limited(&w->refuse_log, MT_LOG_WARNING, "server",
                       "refused a connection from %s: %u connections open and %u given up but "
                       "not yet closed reach the hard limit %u (MaxConnections %u and room for "
                       "evictions in progress)",
                       from, a.open, a.gone, lim.hard, lim.cap);
        return 0;
    }
    if (a.refuse) {
        mt_log_limited(&w->refuse_log, MT_LOG_WARNING, "server",
                       "refused a connection from %s: %u connections open, none waiting to be "
                       "given up (MaxConnections %u)",
                       from, a.open, lim.cap);
        return 0;
    }
    if (a.victim != NULL) {
        server_addr_key_text(&victim_key, whose, sizeof(whose));
        mt_log_limited(&w->evict_log, MT_LOG_WARNING, "server",
                       "a connection from %s took the place of one waiting %s (from %s): %u "
                       "open of MaxConnections %u, %u waiting from %s of MaxConnectionsPerIp %u",
                       from, victim_served ? "idle after a request" : "on its first request",
                       whose, a.open, lim.cap, a.waiting_here, from, lim.per_addr);
    }
    return 1;
}

void server_conns_counts(struct server_watchdog *w, uint64_t *evicted, uint64_t *refused)
{
    pthread_mutex_lock(&w->lock);
    *evicted = w->evicted;
    *refused = w->refused;
    pthread_mutex_unlock(&w->lock);
}
