/*
 * common.h - what every folder may use (common/ depends on nothing of ours):
 * the plain data types (types.h), logging, clocks and their units, and the
 * one way memtrim starts a thread. Any thread may call these; the log sink
 * has its own lock (util.c), the rest keeps no state.
 */
#ifndef MEMTRIM_COMMON_H
#define MEMTRIM_COMMON_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "types.h"

/* Time units, in nanoseconds (monotonic clock readings and intervals are ns). */
#define MT_MS (1000000LL)
#define MT_SEC (1000000000LL)

/* Log sink: adapters (Orthanc) replace it; default writes to stderr. Lines read
 * "memtrim/<module>: <message>". Debug lines are dropped unless the environment
 * has MEMTRIM_DEBUG=1 (set and not "0"). */
enum mt_log_level { MT_LOG_ERROR = 0, MT_LOG_WARNING, MT_LOG_INFO, MT_LOG_DEBUG };
typedef void (*mt_log_fn)(int level, const char *msg, void *arg);
void mt_set_log_sink(mt_log_fn fn, void *arg);
void mt_log(int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether MEMTRIM_DEBUG asks for debug lines. */
int mt_log_debug_enabled(void);

/* fork(): the log lock across a fork (core/instance/memtrim.c's atfork handlers call these). */
void mt_log_fork_prepare(void);
void mt_log_fork_parent(void);
void mt_log_fork_child(void);

/*
 * Rate-limited logging (loglimit.c), for every line a client can cause: at
 * most `burst` lines in each window of `interval_ns`; the lines past it are
 * dropped and counted, and the next line written ends with how many were.
 * mt_log_limit_take is the rule alone (1: write, with *dropped the count
 * before it; 0: dropped and counted), with the time given. A limit owned by
 * an instance is set up with mt_log_limit_init; a static one with
 * MT_LOG_LIMIT_INIT. Any thread; the lock is held only for the arithmetic.
 */
struct mt_log_limit {
    pthread_mutex_t lock;
    int64_t interval_ns;
    unsigned burst;
    int started;
    int64_t window_start_ns;
    unsigned used;    /* lines written in this window */
    uint64_t dropped; /* lines dropped since the last one written */
};
#define MT_LOG_LIMIT_INIT(interval_ns, burst)                                                          {PTHREAD_MUTEX_INITIALIZER, (interval_ns), (burst), 0, 0, 0, 0}
void mt_log_limit_init(struct mt_log_limit *l, int64_t interval_ns, unsigned burst);
int mt_log_limit_take(struct mt_log_limit *l, int64_t now_ns, uint64_t *dropped);
/* The lines dropped and not yet reported (the count starts again at 0). */
uint64_t mt_log_limit_flush(struct mt_log_limit *l);
void mt_log_limited(struct mt_log_limit *l, int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * The rules of a configuration key that every parser follows (keys.c): the offset of the
 * first byte a bearer token may not hold (a space, a control character, a non-ASCII byte),
 * or -1; mt_token_check: 0, or -EINVAL with err naming key and the byte. mt_closest_key: the
 * known key nearest a mistyped one ("did you mean"), or NULL; table holds n entries of
 * stride bytes, each starting with its name (const char *).
 */
long mt_token_bad_byte(const char *tok, size_t len);
int mt_token_check(const char *key, const char *tok, char *err, size_t errlen);
const char *mt_closest_key(const char *key, const void *table, size_t n, size_t stride);
/* A bearer token read from its file (AuthTokenFile, ReadTokenFile; key names it in err) into
 * dest[size]: refused unless a regular file of the process's user (or root) that its group
 * and others cannot read, of at most 4 KiB, holding one token (trailing blanks cut) that
 * mt_token_bad_byte accepts. path "" reads nothing. 0, or a negative errno with err set. */
int mt_token_file_read(const char *key, const char *path, char *dest, size_t size, char *err,
                       size_t errlen);

/*
 * Every JSON document is checked by mt_json_prescan (jsonscan.c) before cJSON
 * parses it: no larger than max_bytes, arrays and objects nested no deeper
 * than max_depth, counted without recursion (strings skipped). 0, or -E2BIG /
 * -ELOOP with why naming the limit. memtrim's own documents nest 3 deep
 * ({"MemoryTrim": {"Program": [...]}}); a host's configuration a few more.
 */
#define MT_JSON_DEPTH_MAX 32
#define MT_JSON_DOC_MAX (1024 * 1024) /* a configuration document (string, file, env) */
#define MT_JSON_HOST_DOC_MAX (16 * 1024 * 1024) /* a host's whole configuration (Orthanc's) */
int mt_json_prescan(const char *text, size_t len, size_t max_bytes, int max_depth, char *why,
                    size_t whylen);

/*
 * The first \u0000 escape inside a string of text (cJSON decodes it into a NUL that cuts the
 * value short: "\u0000secret" would read as ""): its byte offset, or -1. *key gets the name
 * of the object member whose value holds it, *top the member of the outermost
 * object it is under ("" for none), each cut to its size. No allocation: any thread.
 */
long mt_json_find_nul(const char *text, size_t len, char *key, size_t keysize, char *top,
                      size_t topsize);

/*
 * cJSON_ParseWithLengthOpts, once (require_end: nothing but space may follow the value,
 * and text[len] must be its NUL; *end, when not NULL, where parsing stopped). 0 with
 * *out; -EINVAL, the text is not JSON (*end says where); -ENOMEM, an allocation failed
 * while parsing (the text may be fine). *out is NULL on failure.
 */
struct cJSON;
int mt_json_parse(const char *text, size_t len, int require_end, struct cJSON **out,
                  const char **end);

/* Whether a secret file (a token, a TLS private key) of owner uid may be used: it belongs to
 * the user running the host or to root, as ssh asks of a private key. */
int mt_secret_owner_ok(unsigned uid);

/* Wall clock in ms since the epoch; monotonic clock in ns. */
int64_t mt_now_ms(void);
int64_t mt_mono_ns(void);

/* strerror(err) that is safe on any thread (the text in buf, or glibc's own). */
const char *mt_strerror(int err, char *buf, size_t len);

/* Read a kept descriptor's file whole into buf from offset 0 (pread, so threads may share the
 * descriptor), at most size - 1 bytes, NUL-terminated: the length, or a negative errno. */
ssize_t mt_pread_all(int fd, char *buf, size_t size);
/* Read a small file by its path into buf (at most size - 1 bytes, NUL-terminated) with plain
 * syscalls, no allocation: the length, or a negative errno when it cannot be opened. */
ssize_t mt_read_small(const char *path, char *buf, size_t size);

/* A CLOCK_MONOTONIC deadline after_ns from now, for pthread_cond_timedwait. */
struct timespec;
void mt_deadline(struct timespec *ts, int64_t after_ns);

/*
 * Start one of memtrim's threads: with every signal blocked (the host's
 * signals reach only the host's threads) and named `name` (at most 15
 * characters, as ps and top show it). Returns 0 or a positive errno value.
 */
int mt_thread_start(pthread_t *thread, const char *name, void *(*fn)(void *), void *arg);

/*
 * The allocator's hook for memtrim's own threads (thread.c): called once per thread, first thing, on
 * every thread mt_thread_start starts, and by mt_thread_enter on threads memtrim did not
 * start itself (libmicrohttpd's, at their first callback). Set at start, before any of
 * memtrim's threads runs (jemalloc: alloc_jemalloc.c puts them in an arena of their own);
 * NULL = none. mt_thread_enter is cheap after the first call on a thread (a flag).
 */
typedef void (*mt_thread_enter_fn)(void);
void mt_thread_set_enter(mt_thread_enter_fn fn);
void mt_thread_enter(void);
/* CPU seconds of memtrim's own threads in this process: those listed by mt_thread_enter
 * (every thread of mt_thread_start, MHD's from their first callback), live or ended. */
double mt_threads_cpu_seconds(void);

#endif /* MEMTRIM_COMMON_H */
