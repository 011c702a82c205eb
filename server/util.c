/*
 * util.c - small helpers the server's files share (error strings, file
 * identity). Any thread (HTTP workers, the server's own); no state, no locks.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "mt_alloc.h"
#include "common.h"
#include "internal.h"

char *server_strdupf(const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (mt_vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

void server_file_id_of(const struct stat *st, struct server_file_id *id)
{
    id->ino = (uint64_t)st->st_ino;
    id->dev = (uint64_t)st->st_dev;
    id->size = (int64_t)st->st_size;
    id->mtime_ns = (int64_t)st->st_mtim.tv_sec * MT_SEC + st->st_mtim.tv_nsec;
    id->ctime_ns = (int64_t)st->st_ctim.tv_sec * MT_SEC + st->st_ctim.tv_nsec;
}
