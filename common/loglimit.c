/*
 * loglimit.c - log lines that a client can cause, at most `burst` of them in
 * each `interval` (a fixed window from the first line); the lines past that
 * are counted, and the next line written says how many were dropped since
 * the last one. Deciding takes the time as an argument (mt_log_limit_take),
 * so the rule is tested without a clock.
 *
 * Threads: any. l->lock guards the window and the counts, held only for the
 * arithmetic (never while a line is written).
 */
#include <stdarg.h>
#include <stdio.h>

#include "common.h"

void mt_log_limit_init(struct mt_log_limit *l, int64_t interval_ns, unsigned burst)
{
    struct mt_log_limit init = MT_LOG_LIMIT_INIT(interval_ns, burst);
    *l = init;
}

int mt_log_limit_take(struct mt_log_limit *l, int64_t now_ns, uint64_t *dropped)
{
    int ok;
    pthread_mutex_lock(&l->lock);
    if (!l->started || now_ns - l->window_start_ns >= l->interval_ns || now_ns < l->window_start_ns) {
        l->started = 1;
        l->window_start_ns = now_ns;
        l->used = 0;
    }
    ok = l->used < l->burst;
    if (ok) {
        l->used++;
        *dropped = l->dropped;
        l->dropped = 0;
    } else {
        l->dropped++;
        *dropped = 0;
    }
    pthread_mutex_unlock(&l->lock);
    return ok;
}

uint64_t mt_log_limit_flush(struct mt_log_limit *l)
{
    pthread_mutex_lock(&l->lock);
    uint64_t n = l->dropped;
    l->dropped = 0;
    pthread_mutex_unlock(&l->lock);
    return n;
}

void mt_log_limited(struct mt_log_limit *l, int level, const char *module, const char *fmt, ...)
{
    char msg[900];
    uint64_t dropped;
    if (!mt_log_limit_take(l, mt_mono_ns(), &dropped))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (dropped > 0)
        mt_log(level, module, "%s (and %llu more such line(s) dropped before it: at most %u "
                              "every %lld s)",
               msg, (unsigned long long)dropped, l->burst, (long long)(l->interval_ns / MT_SEC));
    else
        mt_log(level, module, "%s", msg);
}
