/*
 * lock.h - one memtrim at a time per target process, by a lock that only a user who may act
 * on that process can take (lock.c says how). The tool's one thread.
 */
#ifndef MEMTRIM_CLI_LOCK_H
#define MEMTRIM_CLI_LOCK_H

#include "target.h"

struct target_lock {
    int dir, run, mem, sock;
    char name[64];
};

/* Takes the target's lock, waiting until deadline (CLOCK_MONOTONIC seconds): 0 held; 1 held
 * by another memtrim; -1 an error (err says which). */
int target_lock_take(struct target_lock *l, const struct target *t, double deadline,
                     char *err, size_t errlen);
void target_lock_drop(struct target_lock *l);

#endif
