/*
 * stagger.c - the stagger of a set's members' own trims (stagger.h): pure, no locks, no
 * threads (a member's thread calls it with its leader's grant).
 */
#include "stagger.h"

void pressure_slot_window(const struct pressure_slots *sl, int64_t now, int64_t *open,
                          int64_t *close)
{
    int64_t w = sl->width_ns, since = now > sl->epoch_ns ? now - sl->epoch_ns : 0;
    int64_t k = since / w, pos = k % sl->slots;
    int64_t ahead = (sl->slot - pos + sl->slots) % sl->slots;
    *open = sl->epoch_ns + (k + ahead) * w;
    *close = *open + w < sl->until_ns ? *open + w : sl->until_ns;
}

void pressure_slot_take(const struct pressure_slots *sl, int64_t now, int at_line,
                        int64_t waited_at, int moved_is_missed, int64_t *open, int64_t *close)
{
    pressure_slot_window(sl, now, open, close);
    /* missed: the slot it waited for closed (not a slot a new grant moved: a member joined
     * or left, and the one it waited for may not have opened yet) */
    int missed = waited_at && now >= waited_at + sl->width_ns && *open > now;
    if (moved_is_missed) /* 1feda56's defect: a moved slot "missed" */
        missed = waited_at && now >= waited_at && *open > now;
    if (at_line || missed) {
        *open = now;
        *close = sl->until_ns;
    }
}
