/*
 * test_server_conns.c - the connection limits (server/conns.c): how client
 * addresses are counted (every loopback alias one address, v4-mapped as
 * IPv4, IPv6 by /64), which new connection is taken and which waiting one
 * gives way for it (server_admit_decide on hand-made lists: 64 kept-alive
 * clients behind one address fit, busy connections are never evicted, the
 * longest-waiting one goes first, a full server of busy connections refuses),
 * and the eviction itself on real sockets (the victim's peer sees its end).
 *
 * Threads: one (and the watchdog's). Files: none.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "internal.h"

static struct server_addr_key v4(const char *text)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, text, &a.sin_addr);
    struct server_addr_key k;
    server_addr_key_of((struct sockaddr *)&a, &k);
    return k;
}

static struct server_addr_key v6(const char *text)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, text, &a.sin6_addr);
    struct server_addr_key k;
    server_addr_key_of((struct sockaddr *)&a, &k);
    return k;
}

static void test_addresses(void)
{
    struct server_addr_key lo = v4("127.0.0.1");
    CHECK_EQ_INT(lo.kind, SERVER_ADDR_LOOPBACK);
    const char *aliases4[] = {"127.0.0.2", "127.1.2.3", "127.255.255.254"};
    for (int i = 0; i < 3; i++) {
        struct server_addr_key k = v4(aliases4[i]);
        CHECK_MSG(server_addr_key_eq(&k, &lo), "%s", aliases4[i]);
    }
    const char *aliases6[] = {"::1", "::ffff:127.0.0.1", "::ffff:127.9.9.9"};
    for (int i = 0; i < 3; i++) {
        struct server_addr_key k = v6(aliases6[i]);
        CHECK_MSG(server_addr_key_eq(&k, &lo), "%s", aliases6[i]);
    }
    struct server_addr_key a = v4("10.0.0.1"), b = v4("10.0.0.2"), m = v6("::ffff:10.0.0.1");
    CHECK(!server_addr_key_eq(&a, &b));
    CHECK(!server_addr_key_eq(&a, &lo));
    CHECK(server_addr_key_eq(&a, &m));
    struct server_addr_key p = v6("2001:db8::1"), q = v6("2001:db8::ffff:2"),
                           r = v6("2001:db8:0:1::1");
    CHECK(server_addr_key_eq(&p, &q)); /* one /64: one host's addresses */
    CHECK(!server_addr_key_eq(&p, &r));
    struct sockaddr_un un = {.sun_family = AF_UNIX, .sun_path = "/x"};
    struct server_addr_key u;
    server_addr_key_of((struct sockaddr *)&un, &u);
    CHECK_EQ_INT(u.kind, SERVER_ADDR_UNIX);
    /* On the unix socket a connection's key is its peer's uid (#31 F12: every peer was one
     * address, and nobody's flood evicted the host user's requests). */
    int sp[2];
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
    struct server_addr_key mine, again, theirs;
    server_addr_key_of_peer(sp[0], &mine);
    server_addr_key_of_peer(sp[1], &again);
    CHECK_EQ_INT(mine.kind, SERVER_ADDR_UNIX);
    CHECK(server_addr_key_eq(&mine, &again));
    theirs = mine;
    uint32_t other = (uint32_t)getuid() + 1;
    memcpy(theirs.bytes, &other, sizeof(other));
    CHECK(!server_addr_key_eq(&mine, &theirs));
    CHECK(!server_addr_key_eq(&mine, &u));
    char text[64], want[64];
    server_addr_key_text(&mine, text, sizeof(text));
    snprintf(want, sizeof(want), "uid %u on the unix socket", (unsigned)getuid());
    CHECK_MSG(strcmp(text, want) == 0, "%s", text);
    close(sp[0]);
    close(sp[1]);
    server_addr_key_text(&lo, text, sizeof(text));
    CHECK(strcmp(text, "loopback") == 0);
    server_addr_key_text(&a, text, sizeof(text));
    CHECK(strcmp(text, "10.0.0.1") == 0);
    server_addr_key_text(&p, text, sizeof(text));
    CHECK(strcmp(text, "2001:db8::/64") == 0);
}

/* A hand-made list of connections: deadline 0 = busy, else the order they began waiting. */
#define MAXC 200
struct list {
    struct server_conn head;
    struct server_conn c[MAXC];
    int n;
};

static void list_init(struct list *l)
{
    memset(l, 0, sizeof(*l));
    l->head.next = l->head.prev = &l->head;
}

static struct server_conn *list_add(struct list *l, struct server_addr_key key, int64_t deadline)
{
    struct server_conn *c = &l->c[l->n++];
    c->key = key;
    c->deadline_ns = deadline;
    c->fd = -1;
    c->next = &l->head;
    c->prev = l->head.prev;
    l->head.prev->next = c;
    l->head.prev = c;
    return c;
}

static void test_one_address_of_honest_clients(void)
{
    struct server_limits lim = {.cap = 128, .per_addr = 96, .hard = 144}; /* the defaults at 1024 */
    struct server_addr_key lo = v4("127.0.0.1");
    struct server_admit a;
    struct list *l = malloc(sizeof(*l));
    list_init(l);
    /* wrk -c64 opening its connections: none has sent its request yet, all are taken. */
    for (int i = 0; i < 64; i++) {
        server_admit_decide(&l->head, &lo, &lim, &a);
        CHECK_MSG(!a.refuse && a.victim == NULL, "connection %d", i + 1);
        list_add(l, lo, 1000 + i);
    }
    /* Running: most are busy at any moment; 64 busy and a 65th from the same address fit. */
    for (int i = 0; i < 64; i++) {
        l->c[i].deadline_ns = 0;
        l->c[i].served = 1;
    }
    server_admit_decide(&l->head, &lo, &lim, &a);
    CHECK(!a.refuse && a.victim == NULL);
    CHECK_EQ_INT(a.open, 64);
    CHECK_EQ_INT(a.waiting_here, 0);
    /* All 64 idle between requests, and a flood from the same address beside them: the flood
     * is taken up to the address's share, then displaces its own, never the 64. */
    for (int i = 0; i < 64; i++)
        l->c[i].deadline_ns = 100 + i; /* idle longer than any of the flood waited */
    int evicted = 0;
    for (int i = 0; i < 100; i++) {
        server_admit_decide(&l->head, &lo, &lim, &a);
        CHECK(!a.refuse);
        if (i < 32) {
            CHECK_MSG(a.victim == NULL, "flood connection %d", i + 1);
        } else {
            CHECK_MSG(a.victim != NULL && !a.victim->served, "flood connection %d", i + 1);
            if (a.victim != NULL) {
                CHECK(a.victim->deadline_ns == 2000 + evicted); /* its longest-waiting */
                a.victim->prev->next = a.victim->next; /* closed by MHD's next round */
                a.victim->next->prev = a.victim->prev;
                a.victim->gone = 1;
                evicted++;
            }
        }
        list_add(l, lo, 2000 + i);
    }
    CHECK_EQ_INT(evicted, 68);
    for (int i = 0; i < 64; i++)
        CHECK(!l->c[i].gone);
    /* With a share of 64 and only idle kept-alive ones waiting, the one idle longest goes. */
    struct server_limits tight = {.cap = 128, .per_addr = 64, .hard = 144};
    struct list *k = malloc(sizeof(*k));
    list_init(k);
    for (int i = 0; i < 64; i++)
        list_add(k, lo, 5000 - i)->served = 1;
    server_admit_decide(&k->head, &lo, &tight, &a);
    CHECK(!a.refuse && a.victim == &k->c[63]);
    free(k);
    free(l);
}

static void test_flood_gives_way(void)
{
    struct server_limits lim = {.cap = 16, .per_addr = 8, .hard = 24};
    struct server_addr_key lo = v4("127.0.0.1"), alias = v4("127.0.0.2"), far = v4("192.0.2.7");
    struct server_admit a;
    struct list *l = malloc(sizeof(*l));
    list_init(l);
    /* 200 half-sent requests from loopback: past 8 waiting, each evicts the oldest of them. */
    int evicted = 0;
    for (int i = 0; i < 200; i++) {
        server_admit_decide(&l->head, &lo, &lim, &a);
        CHECK(!a.refuse);
        if (a.victim != NULL) {
            CHECK(a.victim->deadline_ns == 1000 + evicted); /* the longest-waiting */
            a.victim->gone = 1;
            a.victim->deadline_ns = 0;
            evicted++;
        }
        if (l->n == MAXC)
            break;
        list_add(l, lo, 1000 + i);
        /* MHD closes the evicted ones in its next round: drop them from the list. */
        for (struct server_conn *c = l->head.next; c != &l->head; c = c->next)
            if (c->gone) {
                c->prev->next = c->next;
                c->next->prev = c->prev;
            }
    }
    CHECK_EQ_INT(evicted, 192);
    /* /healthz from 127.0.0.2 is the same address: it too takes the oldest one's place. */
    server_admit_decide(&l->head, &alias, &lim, &a);
    CHECK(!a.refuse && a.victim != NULL && a.victim->deadline_ns == 1192);
    CHECK_EQ_INT(a.waiting_here, 8);
    /* Another address is taken without evicting anyone: its share is its own. */
    server_admit_decide(&l->head, &far, &lim, &a);
    CHECK(!a.refuse && a.victim == NULL);
    CHECK_EQ_INT(a.waiting_here, 0);
    free(l);
}

static void test_cap_and_busy(void)
{
    struct server_limits lim = {.cap = 4, .per_addr = 4, .hard = 6};
    struct server_addr_key x = v4("192.0.2.1"), y = v4("192.0.2.2"), z = v4("192.0.2.3");
    struct server_admit a;
    struct list *l = malloc(sizeof(*l));
    list_init(l);
    struct server_conn *c[4];
    c[0] = list_add(l, x, 0);
    c[1] = list_add(l, x, 0);
    c[2] = list_add(l, y, 300);
    c[3] = list_add(l, y, 200);
    /* Full: a waiting connection of any address gives way, never a busy one; one waiting on
     * its first request before one idle after a request, even when that one waited longer. */
    c[3]->served = 1;
    server_admit_decide(&l->head, &z, &lim, &a);
    CHECK(!a.refuse && a.victim == c[2]);
    c[3]->served = 0;
    server_admit_decide(&l->head, &z, &lim, &a);
    CHECK(!a.refuse && a.victim == c[3]);
    c[2]->deadline_ns = c[3]->deadline_ns = 0;
    /* Full of busy connections: the new one is refused (nothing to give up). */
    server_admit_decide(&l->head, &z, &lim, &a);
    CHECK(a.refuse && a.victim == NULL && a.gone == 0);
    CHECK_EQ_INT(a.open, 4);
    /* Evicted ones still closing count towards `hard` only. */
    c[3]->gone = 1;
    server_admit_decide(&l->head, &z, &lim, &a);
    CHECK(!a.refuse && a.victim == NULL);
    CHECK_EQ_INT(a.open, 3);
    list_add(l, z, 0);
    list_add(l, z, 0)->gone = 1;
    server_admit_decide(&l->head, &z, &lim, &a); /* 4 open + 2 gone = hard */
    CHECK(a.refuse);
    CHECK_EQ_INT(a.gone, 2); /* the log line names the hard limit, not "none waiting" */
    /* Past hard, an address none of whose connections are being closed is still taken: the
     * flood's evictions refuse the flood, not another client (#31 F12). */
    c[2]->deadline_ns = 300; /* waiting again: room can be made */
    server_admit_decide(&l->head, &z, &lim, &a);
    CHECK(a.refuse && a.gone == 2);
    server_admit_decide(&l->head, &x, &lim, &a);
    CHECK(!a.refuse && a.victim == c[2]);
    free(l);
}

static int peer_closed(int fd)
{
    char ch;
    return recv(fd, &ch, 1, MSG_DONTWAIT) == 0;
}

/* The policy acting on real sockets through the watchdog's list. */
static void test_admit_evicts(void)
{
    struct server_watchdog w;
    int p[3][2];
    CHECK_EQ_INT(server_watchdog_start(&w, 3600), 0);
    w.limits = (struct server_limits){.cap = 8, .per_addr = 2, .hard = 16};
    struct server_addr_key lo = v4("127.0.0.1");
    struct server_conn *c[3];
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, p[i]), 0);
        CHECK_EQ_INT(server_conns_admit(&w, &lo), 1);
        c[i] = server_watchdog_add(&w, p[i][0], &lo);
    }
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, p[2]), 0);
    struct server_addr_key alias = v6("::ffff:127.0.0.3");
    CHECK_EQ_INT(server_conns_admit(&w, &alias), 1);
    c[2] = server_watchdog_add(&w, p[2][0], &alias);
    CHECK(peer_closed(p[0][1])); /* the first, waiting longest, was shut down */
    CHECK(!peer_closed(p[1][1]));
    uint64_t evicted, refused;
    server_conns_counts(&w, &evicted, &refused);
    CHECK_EQ_INT(evicted, 1);
    CHECK_EQ_INT(refused, 0);
    /* A gone connection is neither re-armed nor evicted again. */
    server_watchdog_arm(&w, c[0], 1);
    CHECK(c[0]->gone && c[0]->deadline_ns == 0);
    for (int i = 0; i < 3; i++) {
        server_watchdog_remove(&w, c[i]);
        close(p[i][0]);
        close(p[i][1]);
    }
    server_watchdog_stop(&w);
}

int main(void)
{
    RUN(test_addresses);
    RUN(test_one_address_of_honest_clients);
    RUN(test_flood_gives_way);
    RUN(test_cap_and_busy);
    RUN(test_admit_evicts);
    return harness_end();
}
