/*
 * group_pressure.c - the leader's pressure (group_int.h): every tick it reads
 * the cgroup's usage (or sums the members' RSS) into the group's zone (struct
 * pressure_zone, core/pressure/group_policy.c: the zone and its decisions are the
 * pressure room's; here, the members' records and the channel), tells members when the zone
 * starts and ends (they probe their heap at the zone's pace) and, inside it or
 * ahead of it, grants each a slot of the stagger in which it trims what it
 * freed on its own (GroupTrimSlotMs; group_act_threshold says how much it must
 * hold), asks the member the decision (core/pressure/group_policy.c) picks to
 * trim, one request in flight (staggered), and stores the group's totals as
 * one sample.
 * Threads: the leader's "memtrim-group". Locks: g->lock (group_int.h), never
 * across a trim or a store push.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "mt_alloc.h"
#include "group_int.h"
#include "coop.h"
#include "pressure_policy.h"
#include "probe.h"
#include "snapshot.h"
#include "store.h"
#include "trim.h"

/* The group's totals as one sample for `samples` (the host's view). */
void leader_total_sample(struct group *g, int64_t now, double sample_s)
{
    if (sample_s <= 0 || !store_enabled(g->d.store) || now < g->next_total_ns)
        return;
    g->next_total_ns = now + (int64_t)(sample_s * MT_SEC);
    struct mt_snapshot t;
    int heap_all = 1;
    pthread_mutex_lock(&g->lock);
    t = g->m[0].snap;
    t.pid = 0;
    for (int i = 1; i < GROUP_MAX_MEMBERS; i++) {
        const struct mt_snapshot *s = &g->m[i].snap;
        if (!g->m[i].used || g->m[i].pid <= 0 || g->m[i].report_ns == 0)
            continue;
        t.cheap.rss_bytes += s->cheap.rss_bytes;
        t.cheap.rss_anon_bytes += s->cheap.rss_anon_bytes;
        t.cheap.rss_file_bytes += s->cheap.rss_file_bytes;
        t.cheap.swap_bytes += s->cheap.swap_bytes;
        if (s->heap.timestamp_ms == 0) {
            heap_all = 0;
            continue;
        }
        t.heap.heap_in_use_bytes += s->heap.heap_in_use_bytes;
        t.heap.heap_free_bytes += s->heap.heap_free_bytes;
        t.heap.heap_mmapped_bytes += s->heap.heap_mmapped_bytes;
        t.heap.arena_bytes += s->heap.arena_bytes;
        t.releasable_estimate_bytes += s->releasable_estimate_bytes;
        if (t.heap.arena_count >= 0 && s->heap.arena_count >= 0)
            t.heap.arena_count += s->heap.arena_count;
    }
    pthread_mutex_unlock(&g->lock);
    if (!heap_all)
        t.heap.timestamp_ms = 0; /* a total of some members' heaps is no total */
    t.fragmentation_ratio = t.heap.timestamp_ms && t.heap.heap_in_use_bytes
                                ? (double)t.cheap.rss_bytes / (double)t.heap.heap_in_use_bytes
                                : 0;
    store_push_sample(g->d.store, &t);
}

/*
 * Tell every member the zone's state: its pace (ZONE_ON: they watch their heap), and
 * with a threshold, the grant to trim what each freed on its own (ZONE_ACT): the
 * stagger, one slot of width_ns each in turn, so that members acting alone never start
 * their trims together; the grant lasts ACT_LEASE_NS unless sent again. At the line
 * (ZONE_LINE), and wherever a member's own reading of the cgroup says the usage reached
 * line_bytes (0: this usage is no cgroup's), a member trims at once, out of its slot.
 */
static void leader_zone(struct group *g, int zone, uint64_t threshold, int64_t width_ns,
                        int at_line, int64_t line_bytes, int64_t now)
{
    struct group_msg msg;
    msg_init(&msg, MSG_ZONE);
    int act = zone && threshold > 0, slots = 0, slot = 0;
    at_line = act && at_line;
    msg.arg = zone ? ZONE_ON | (act ? ZONE_ACT : 0) | (at_line ? ZONE_LINE : 0) : 0;
    atomic_store(g->d.zone, zone);
    pthread_mutex_lock(&g->lock);
    for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
        slots += g->m[i].used && g->m[i].pid > 0;
    msg.u.grant = (struct group_grant){.epoch_ns = g->slot_epoch_ns, .width_ns = width_ns,
                                       .until_ns = now + ACT_LEASE_NS, .threshold = threshold,
                                       .slots = slots, .line_bytes = act ? line_bytes : 0};
    pressure_zone_told(&g->pz, zone, act, at_line, threshold, width_ns, now, g->members_gen);
    for (int i = 1; i < GROUP_MAX_MEMBERS; i++)
        if (g->m[i].used && g->m[i].pid > 0) {
            msg.u.grant.slot = slot++;
            chan_send(g, g->m[i].fd, g->m[i].chan, &msg);
        }
    pthread_mutex_unlock(&g->lock);
}

/* Pressure requests past their time forgotten; 1 when one is still within its stagger
 * (staggered: one request at a time, but a member slow to answer, a loaded node, holds
 * the next one back PRESSURE_STAGGER_NS at most, itself 2 s at most). Locked. */
static int pressure_waiting(struct group *g, int64_t now)
{
    int waiting = 0;
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++) {
        struct group_member *m = &g->m[i];
        if (m->press_req && now - m->press_sent_ns > PRESSURE_TIMEOUT_NS)
            m->press_req = 0;
        if (m->press_req && now - m->press_sent_ns < PRESSURE_STAGGER_NS)
            waiting = 1;
    }
    return waiting;
}

/* Each live member as the decision sees it (c[], its entry's index in idx[]: a cooperative
 * member, core/pressure/coop.h), and the sums; how many. Locked. */
static int pressure_candidates(struct group *g, int64_t now, int64_t now_ms,
                               struct group_candidate *c, int *idx, struct pressure_sums *sum)
{
    int n = 0, waiting = pressure_waiting(g, now);
    for (int i = 0; i < GROUP_MAX_MEMBERS; i++) {
        const struct group_member *m = &g->m[i];
        if (!m->used || m->pid <= 0 || m->report_ns == 0)
            continue;
        struct coop_reading r = {
            .rss = m->snap.cheap.rss_bytes, .peak_rss = m->peak_rss, .peak_ns = m->peak_ns,
            .report_ns = m->report_ns, .heap_ms = m->snap.heap.timestamp_ms,
            .releasable = m->snap.releasable_estimate_bytes, .rss_at_heap = m->rss_at_heap,
            .rss_after = m->rss_after, .last_trim_ns = m->last_trim_ns,
            .last_trim_ms = m->last_trim_ms, .busy = m->press_req != 0 || waiting};
        coop_candidate(&c[n], sum, &r, now, now_ms);
        idx[n++] = i;
    }
    return n;
}

/*
 * The leader picked itself on a guess (its RSS grew since its heap reading, or since its
 * last trim: what it grew by may be free), not on a fresh estimate. A member's guess costs
 * a round trip; the leader can look: a heap reading now (on the watch's budget). 1 when
 * that reading was taken and shows less free than TrimMinReleasableBytes: no trim, and the
 * entry takes the reading (the same growth is no guess any more). A named group's leader
 * is a worker: climbing through a study it was picked every 50 ms and trimmed a heap with
 * nothing free, 11-14 times a run in the v2 cell (issue 32 item 4), each trim holding its
 * allocator's locks for up to 170 ms under TCG while the study waited.
 */
static int self_holds_nothing(struct group *g, int64_t now)
{
    struct mt_snapshot s;
    int64_t asked_ms = mt_now_ms();
    uint64_t min = own_snapshot(&g->d, 0, WATCH_BUDGET_FACTOR, &s);
    if (s.heap.timestamp_ms < asked_ms) /* not taken now (the budget): trim as guessed */
        return 0;
    if (s.releasable_estimate_bytes >= (min ? min : 1))
        return 0;
    s.pid = g->d.pid;
    pthread_mutex_lock(&g->lock);
    g->m[0].snap = s;
    g->m[0].report_ns = now;
    note_heap(&g->m[0]);
    pthread_mutex_unlock(&g->lock);
    return 1;
}

/* The picked member trims: another is sent the request (id), the leader trims here, by
 * the group's pressure row (trim.c: it obeys the host's suspend, shares a running trim;
 * its sink stores the result with its pid and the store is woken); guess: picked on no
 * fresh estimate (self_holds_nothing). */
static void pressure_ask(struct group *g, struct group_member *m, int fd, uint64_t id,
                         int64_t now, const struct mt_config *cfg, int guess)
{
    if (id) {
        struct group_msg req;
        msg_init(&req, MSG_TRIM_REQ);
        req.req_id = id;
        req.arg = MT_TRIGGER_PRESSURE;
        req.pad = cfg->trim_pad_bytes;
        pthread_mutex_lock(&g->lock);
        if (m->press_req == id && chan_send(g, fd, m->chan, &req) != 0)
            m->press_req = 0;
        pthread_mutex_unlock(&g->lock);
        return;
    }
    if (guess && !mt_control("suite-self-trims-on-a-guess") && self_holds_nothing(g, now)) {
        pthread_mutex_lock(&g->lock);
        sat_add(&g->self_verified, 1);
        pthread_mutex_unlock(&g->lock);
        return;
    }
    struct mt_trim_result r;
    struct trim_ask ask = {.trigger = MT_TRIGGER_PRESSURE, .pad = (uint64_t)cfg->trim_pad_bytes,
                           .min_interval_ms = -1, .crossing_ns = now, .group = 1};
    if (trim_request(g->d.trims, g->d.cache, &ask, &r, NULL) == 0) {
        pthread_mutex_lock(&g->lock);
        sat_add(&g->m[0].pressure_trims, 1);
        sat_add(&g->pressure_trims, 1);
        if (r.released_bytes > 0)
            sat_add(&g->pressure_released, (uint64_t)r.released_bytes);
        pthread_mutex_unlock(&g->lock);
    }
}

/* The group's pressure: one member at a time, the largest estimate first. */
void leader_pressure(struct group *g, int64_t now, const struct mt_config *cfg)
{
    struct group_candidate c[GROUP_MAX_MEMBERS];
    struct pressure_sums sum = {0, 0, 0};
    int idx[GROUP_MAX_MEMBERS], rule;
    int64_t now_ms = mt_now_ms();
    struct group_pressure_in in = {.now_ns = now, .ratio = cfg->pressure_ratio,
                                   .min_releasable = (uint64_t)cfg->trim_min_releasable_bytes,
                                   .burst_bytes = (uint64_t)cfg->trim_releasable_trigger_bytes};

    pthread_mutex_lock(&g->lock);
    int level = g->m[0].snap.cheap.cgroup_limit_level;
    pthread_mutex_unlock(&g->lock);
    int64_t usage = probe_cgroup_usage(&g->d.cache->cg, level); /* the limit's, as the kernel */
    pthread_mutex_lock(&g->lock);
    int n = pressure_candidates(g, now, now_ms, c, idx, &sum);
    pressure_zone_inputs(&g->pz, now,
                         cfg->memory_limit_bytes > 0 ? cfg->memory_limit_bytes
                                                     : g->m[0].snap.memory_limit_bytes,
                         usage, &sum, &in);
    int zone = pressure_zone_inside(&g->pz, now, cfg->pressure_ratio, &in);
    int64_t width_ns = (int64_t)cfg->group_trim_slot_ms * MT_MS;
    uint64_t threshold = zone && width_ns > 0 ? group_act_threshold(&in) : 0;
    /* The zone's hold (below it, not ahead, within PZ_ZONE_HOLD_NS of it): a member's own
     * burst rule skips its cost rules there and trims TrimReleasableTriggerBytes; the grant
     * lets it do that at once, in its slot, and while its leader cannot answer. */
    if (zone && width_ns > 0 && threshold == 0)
        threshold = in.burst_bytes;
    /* The line (the decision's, group_policy.c): the usage that a member's own reading of
     * the cgroup compares (line_bytes; none when the usage is the members' sum). */
    int64_t line = in.limit > 0 && in.ratio > 0 ? (int64_t)((double)in.limit * in.ratio) : 0;
    int at_line = line > 0 && in.usage >= line;
    int64_t line_bytes = usage >= 0 ? line : 0;
    int news = pressure_zone_news(&g->pz, zone, threshold, width_ns, at_line, now,
                                  in.min_releasable, g->members_gen);
    int pick = group_pressure_pick(&in, c, n, &rule);
    struct group_member *m = pick >= 0 ? &g->m[idx[pick]] : NULL;
    int fd = -1, guess = pick >= 0 && !(c[pick].estimate_fresh &&
                                         c[pick].releasable >= in.min_releasable);
    uint64_t id = 0;
    if (m) {
        m->last_trim_ns = now;
        m->last_trim_ms = now_ms;
        pressure_zone_trimmed(&g->pz); /* growth counts again from the low after this trim */
        if (!m->self) {
            id = ++g->next_req;
            fd = m->fd;
            m->press_req = id;
            m->press_sent_ns = now;
            g->press_sent_ns = now;
        }
    }
    pthread_mutex_unlock(&g->lock);
    if (news)
        leader_zone(g, zone, threshold, width_ns, at_line, line_bytes, now);
    if (m)
        pressure_ask(g, m, fd, id, now, cfg, guess);
}
