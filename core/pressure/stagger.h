/*
 * stagger.h - the stagger of a set's members' own trims (stagger.c): pure, no locks, no
 * threads; a member's thread (core/group/group_member.c) maps its leader's grant onto it.
 */
#ifndef MEMTRIM_STAGGER_H
#define MEMTRIM_STAGGER_H

#include <stdint.h>


/*
 * The members' own trims inside the zone take turns: slots of width_ns from epoch_ns,
 * slot k of every `slots` for member k, granted until until_ns (the leader's grant).
 * A member's window around now: the slot it is in, or its next one; closed at the
 * grant's end. The caller checked the grant (slots >= 1, 0 <= slot < slots, width_ns > 0,
 * epoch_ns >= 0: core/group/group_member.c's grant_ok).
 */
struct pressure_slots {
    int64_t epoch_ns, width_ns, until_ns;
    int slot, slots;
};
void pressure_slot_window(const struct pressure_slots *sl, int64_t now, int64_t *open,
                          int64_t *close);
/*
 * The window a member's own trim may start in: its slot (pressure_slot_window), or now
 * until the grant ends when the set is at its line (surviving the limit comes before not
 * stalling the node together) or when it missed the slot it waited for (waited_at, 0
 * none: only a whole slot's width after it was that slot surely missed; a new grant that
 * moved its slot meanwhile is no missed slot). moved_is_missed: a control's old rule.
 */
void pressure_slot_take(const struct pressure_slots *sl, int64_t now, int at_line,
                        int64_t waited_at, int moved_is_missed, int64_t *open, int64_t *close);

#endif /* MEMTRIM_STAGGER_H */
