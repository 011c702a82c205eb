/*
 * feed.c - a thread's copy of the running configuration (struct mt_config_feed,
 * config.h): re-read when PATCH /config changed it. Any thread; the feed's lock
 * is held only to compare and copy.
 */
#include "config.h"

int config_feed_read(const struct mt_config_feed *f, struct mt_config *out, uint64_t *generation,
                     int first)
{
    pthread_mutex_lock(f->lock);
    int changed = first || *generation != *f->generation;
    if (changed) {
        *out = *f->cfg;
        *generation = *f->generation;
    }
    pthread_mutex_unlock(f->lock);
    return changed;
}
