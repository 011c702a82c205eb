/*
 * alloc_table.h - the one table of the allocators memtrim acts on, as data: read by the
 * engine (core/alloc: which back end file serves each row, the Allocator setting's choices,
 * /memory/stats) and by the memtrim command (cli/: how to find the allocator in another
 * process's maps, which call releases its memory and with what argument). Plain constants,
 * no code of either side; any thread.
 *
 * A new allocator is one row below and one back end file, core/alloc/alloc_<id>.c, defining
 * `const struct alloc_ops alloc_<id>`. The rows' order is the order in which lists name them
 * (glibc first). A row marked libc serves malloc only when no other row's library does (its
 * symbols are always there): detection looks at the others first.
 * openapi.yaml's enums of allocator names are checked against this table (test_alloc_table).
 */
#ifndef MEMTRIM_ALLOC_TABLE_H
#define MEMTRIM_ALLOC_TABLE_H

#include <stddef.h>

/* How the release call's one argument is made. */
enum mt_alloc_arg {
    MT_ALLOC_ARG_PAD,    /* the pad in bytes the trim was asked for (malloc_trim) */
    MT_ALLOC_ARG_INT,    /* the constant release_int */
    MT_ALLOC_ARG_STRING, /* a pointer to release_str (the command copies it into the target) */
};

struct mt_alloc_row {
    const char *name;        /* as the Allocator setting, /memory/stats and the command name it */
    /* In another process's /proc/PID/maps: the file name prefix of the library that holds it;
     * it serves malloc when that library exports malloc. libc: the C library itself, which
     * serves when no other row's library does. */
    const char *maps_prefix;
    int libc;
    const char *release_sym;  /* the release call's symbol */
    enum mt_alloc_arg release_arg;
    long release_int;         /* MT_ALLOC_ARG_INT */
    const char *release_str;  /* MT_ALLOC_ARG_STRING */
    const char *release_call; /* the call as logs, /memory/stats and the command name it */
    /* 1: the release call releases only the calling thread's heap (mimalloc's mi_collect), so
     * the command, which calls from a thread of its own (docs/command.md), refuses it */
    int release_own_thread;
    const char *release_result; /* the JSON key of the call's return value ("" when it has none) */
    const char *stats_call;   /* its statistics call, as the dashboard names it */
    /* The statistics call the command makes from outside (mallinfo's ten fields), NULL if
     * none; stats_sym_old: the same before glibc 2.33 (ints), NULL if none. */
    const char *stats_sym, *stats_sym_old;
};

/* The rows, X(id, fields...): id names the row (MT_ALLOC_<id>) and its back end (alloc_<id>).
 * jemalloc's arena 4096 is MALLCTL_ARENAS_ALL (every arena) in jemalloc 5; mimalloc's 1 is
 * mi_collect's force. */
#define MT_ALLOC_ROWS(X)                                                                           \
    X(glibc, .maps_prefix = "libc.so.6", .libc = 1, .release_sym = "malloc_trim",                  \
      .release_arg = MT_ALLOC_ARG_PAD, .release_call = "malloc_trim",                              \
      .release_result = "malloc_trim_return", .stats_call = "mallinfo2",                           \
      .stats_sym = "mallinfo2", .stats_sym_old = "mallinfo")                                       \
    X(jemalloc, .maps_prefix = "libjemalloc", .release_sym = "mallctl",                            \
      .release_arg = MT_ALLOC_ARG_STRING, .release_str = "arena.4096.purge",                       \
      .release_call = "mallctl(\"arena.4096.purge\")",                                             \
      .release_result = "mallctl_return", .stats_call = "jemalloc stats")                          \
    X(tcmalloc, .maps_prefix = "libtcmalloc", .release_sym = "MallocExtension_ReleaseFreeMemory",  \
      .release_arg = MT_ALLOC_ARG_INT, .release_int = 0,                                           \
      .release_call = "MallocExtension_ReleaseFreeMemory", .release_result = "",                   \
      .stats_call = "tcmalloc stats")                                                              \
    X(mimalloc, .maps_prefix = "libmimalloc", .release_sym = "mi_collect",                         \
      .release_arg = MT_ALLOC_ARG_INT, .release_int = 1, .release_own_thread = 1,                  \
      .release_call = "mi_collect(true)", .release_result = "", .stats_call = "mi_process_info")

#define MT_ALLOC_ENUM_(id, ...) MT_ALLOC_##id,
enum mt_alloc_id { MT_ALLOC_ROWS(MT_ALLOC_ENUM_) MT_ALLOC_COUNT };

/* The names as one string in the rows' order: "|glibc|jemalloc|...", ", glibc, jemalloc, ...". */
#define MT_ALLOC_CHOICE_(id, ...) "|" #id
#define MT_ALLOC_CHOICES MT_ALLOC_ROWS(MT_ALLOC_CHOICE_)
#define MT_ALLOC_LIST_(id, ...) ", " #id
#define MT_ALLOC_LIST MT_ALLOC_ROWS(MT_ALLOC_LIST_)

extern const struct mt_alloc_row mt_alloc_table[MT_ALLOC_COUNT];

/* The row named name, or NULL. */
const struct mt_alloc_row *mt_alloc_row(const char *name);

#endif
