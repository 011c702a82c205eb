/*
 * arenas.c - glibc's malloc_info(3) XML as numbers: a small scanner over the
 * few elements glibc writes (<heap nr>, <sizes>/<size>/<unsorted>, <total>,
 * <system>, <aspace>), tolerant of elements it does not know, strict about
 * structure and numbers (malformed input is an error that says where). The
 * parser is pure; arenas_read is the glibc-only caller (malloc_info locks
 * every arena: only arenas_cache_get_locked calls it, on the budget).
 * Threads: HTTP workers (/memory/arenas, the doctor) and the housekeeper read
 * the cache; the cache's lock is described in arenas.h.
 */
#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mt_alloc.h"
#include "arenas.h"
#include "common.h"
#include "snapshot.h"

#define NAME_MAX_LEN 16
#define ATTRS_MAX 6

struct tag {
    char name[NAME_MAX_LEN]; /* "/heap" for a closing tag */
    int nattrs;
    struct {
        char key[NAME_MAX_LEN];
        char value[32];
    } attr[ATTRS_MAX];
};

struct parser {
    const char *p, *end, *start;
    char **err;
};

static int fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *ps, const char *fmt, ...)
{
    char msg[256], buf[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(buf, sizeof(buf), "malloc_info: %s (at byte %zu)", msg, (size_t)(ps->p - ps->start));
    *ps->err = mt_strdup(buf);
    return -EINVAL;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void skip_space(struct parser *ps)
{
    while (ps->p < ps->end && is_space(*ps->p))
        ps->p++;
}

/* A word of [A-Za-z/?_-] into buf; 0, or -EINVAL when empty or too long. */
static int read_word(struct parser *ps, char *buf, const char *what)
{
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != '=' && *ps->p != '>' && !is_space(*ps->p) &&
           !(*ps->p == '/' && n > 0)) {
        if (n + 1 >= NAME_MAX_LEN)
            return fail(ps, "%s too long", what);
        buf[n++] = *ps->p++;
    }
    buf[n] = '\0';
    return n ? 0 : fail(ps, "expected %s", what);
}

/* The next tag, skipping text between tags. 1 = a tag, 0 = end of input. */
static int next_tag(struct parser *ps, struct tag *t)
{
    while (ps->p < ps->end && *ps->p != '<') {
        if (!is_space(*ps->p))
            return fail(ps, "unexpected text outside a tag");
        ps->p++;
    }
    if (ps->p >= ps->end)
        return 0;
    ps->p++;
    memset(t, 0, sizeof(*t));
    if (read_word(ps, t->name, "an element name"))
        return -EINVAL;
    for (;;) {
        skip_space(ps);
        if (ps->p >= ps->end)
            return fail(ps, "unterminated <%s>", t->name);
        if (*ps->p == '/' && ps->p + 1 < ps->end && ps->p[1] == '>') {
            ps->p += 2;
            return 1;
        }
        if (*ps->p == '>') {
            ps->p++;
            return 1;
        }
        if (t->nattrs == ATTRS_MAX)
            return fail(ps, "too many attributes in <%s>", t->name);
        char *key = t->attr[t->nattrs].key, *val = t->attr[t->nattrs].value;
        if (read_word(ps, key, "an attribute name"))
            return -EINVAL;
        if (ps->p + 1 >= ps->end || ps->p[0] != '=' || ps->p[1] != '"')
            return fail(ps, "attribute %s of <%s> has no quoted value", key, t->name);
        ps->p += 2;
        size_t n = 0;
        while (ps->p < ps->end && *ps->p != '"') {
            if (n + 1 >= sizeof(t->attr[0].value))
                return fail(ps, "attribute %s of <%s> is too long", key, t->name);
            val[n++] = *ps->p++;
        }
        if (ps->p >= ps->end)
            return fail(ps, "unterminated value of %s in <%s>", key, t->name);
        val[n] = '\0';
        ps->p++;
        t->nattrs++;
    }
}

static const char *attr(const struct tag *t, const char *key)
{
    for (int i = 0; i < t->nattrs; i++)
        if (strcmp(t->attr[i].key, key) == 0)
            return t->attr[i].value;
    return NULL;
}

/* A decimal attribute that fits uint64_t; 0 or -EINVAL. */
static int num(struct parser *ps, const struct tag *t, const char *key, uint64_t *out)
{
    const char *v = attr(t, key);
    uint64_t x = 0;
    if (!v || !*v)
        return fail(ps, "<%s> lacks %s", t->name, key);
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9')
            return fail(ps, "<%s %s=\"%s\"> is not a number", t->name, key, v);
        if (x > (UINT64_MAX - (uint64_t)(*c - '0')) / 10)
            return fail(ps, "<%s %s=\"%s\"> overflows", t->name, key, v);
        x = x * 10 + (uint64_t)(*c - '0');
    }
    *out = x;
    return 0;
}

static int is(const struct tag *t, const char *name, const char *type)
{
    const char *ty = attr(t, "type");
    return strcmp(t->name, name) == 0 && (!type || (ty && strcmp(ty, type) == 0));
}

/* Per-arena accumulation while inside <heap>. */
struct heap_acc {
    struct mt_arena a;
    uint64_t sizes_total, rest_bytes, rest_count;
    uint64_t flags; /* flag bits glibc summed into the bins' sizes */
    uint64_t small, edges; /* bin chunks under MTRIM_MIN; MTRIM_MIN per larger chunk */
    int have_fast, have_rest, have_system;
};

/* mtrim (glibc 2.36 malloc.c) madvises a bin chunk only when it is larger than a page plus
 * its header (sizeof(struct malloc_chunk), 32 on 64-bit), and then only its whole pages. */
#define MTRIM_MIN (4096 + 32)

/*
 * glibc sums a bin chunk's size field with its flag bits (PREV_INUSE, always
 * set on a free chunk in a bin, and NON_MAIN_ARENA on some chunks of other
 * arenas: 1 or 5 each, 1 in the main arena); fastbin entries are exact (their
 * "to" is a multiple of 16). Chunk sizes are multiples of 16, so: one size class -> exact; a range
 * (large bins, unsorted) -> the flag sum is congruent to total mod 16 and lies
 * in [count, 5 count]; take the candidate nearest 3 count (off by a few bytes
 * per chunk at most).
 */
static uint64_t entry_flags(uint64_t from, uint64_t to, uint64_t total, uint64_t count, int main)
{
    if (to % 16 == 0 || count == 0 || count > total / 16) /* exact, or not chunks at all */
        return 0;
    if (main) /* the main arena never sets NON_MAIN_ARENA: PREV_INUSE alone */
        return count;
    uint64_t size = to & ~(uint64_t)15;
    if ((from & ~(uint64_t)15) == size) /* one size class */
        return size && count <= total / size ? total - count * size : 0;
    uint64_t r = total % 16, mid = 3 * count;         /* count <= total / 16: no overflow */
    uint64_t f = mid >= r ? mid - (mid - r) % 16 : r; /* the largest <= mid that fits */
    if (f < count || (f + 16 <= 5 * count && f + 16 - mid < mid - f))
        f += 16;
    return f <= total ? f : 0;
}

static int heap_element(struct parser *ps, const struct tag *t, struct heap_acc *h)
{
    uint64_t v, c;
    if (strcmp(t->name, "size") == 0 || strcmp(t->name, "unsorted") == 0) {
        uint64_t from, to;
        if (num(ps, t, "total", &v) || num(ps, t, "count", &c) || num(ps, t, "from", &from) ||
            num(ps, t, "to", &to))
            return -EINVAL;
        if (h->sizes_total > UINT64_MAX - v)
            return fail(ps, "sizes overflow");
        h->sizes_total += v;
        uint64_t fl = entry_flags(from, to, v, c, h->a.nr == 0);
        h->flags += fl;
        if (to % 16 != 0 || strcmp(t->name, "unsorted") == 0) { /* a bin's, not a fastbin's */
            if ((to & ~(uint64_t)15) < MTRIM_MIN) /* all (or some) under a page: pinned */
                h->small += v - fl;
            else /* the ends of each chunk: at most MTRIM_MIN, never more than it holds */
                h->edges += c <= (v - fl) / MTRIM_MIN ? c * MTRIM_MIN : v - fl;
        }
    } else if (is(t, "total", "fast")) {
        if (num(ps, t, "size", &v) || num(ps, t, "count", &c))
            return -EINVAL;
        h->a.fastbin_bytes = v, h->a.fastbin_chunks = c, h->have_fast = 1;
    } else if (is(t, "total", "rest")) {
        if (num(ps, t, "size", &v) || num(ps, t, "count", &c))
            return -EINVAL;
        h->rest_bytes = v, h->rest_count = c, h->have_rest = 1;
    } else if (is(t, "system", "current")) {
        if (num(ps, t, "size", &h->a.system_bytes))
            return -EINVAL;
        h->have_system = 1;
    } else if (is(t, "system", "max")) {
        if (num(ps, t, "size", &h->a.system_max_bytes))
            return -EINVAL;
    } else if (is(t, "aspace", "subheaps")) {
        if (num(ps, t, "size", &h->a.subheaps))
            return -EINVAL;
    }
    return 0; /* sizes, /sizes, other aspace types and unknown elements */
}

/* </heap>: derive bins, top, free and in-use from what the arena listed. */
static int heap_close(struct parser *ps, struct heap_acc *h, struct mt_arenas *out)
{
    struct mt_arena *a = &h->a;
    if (!h->have_fast || !h->have_rest || !h->have_system)
        return fail(ps, "arena %d lacks its fast, rest or system totals", a->nr);
    /* <sizes> lists the fastbins too; rest = the bins plus the top chunk (count 1).
     * Both sum the bins' flag bits (entry_flags): take them out. */
    uint64_t raw = h->sizes_total > a->fastbin_bytes ? h->sizes_total - a->fastbin_bytes : 0;
    if (raw > h->rest_bytes)
        raw = h->rest_bytes;
    a->bins_chunks = h->rest_count > 0 ? h->rest_count - 1 : 0;
    a->bins_bytes = raw > h->flags ? raw - h->flags : 0;
    a->top_bytes = h->rest_bytes - raw;
    a->free_bytes = a->fastbin_bytes + a->bins_bytes + a->top_bytes;
    a->in_use_bytes = a->system_bytes > a->free_bytes ? a->system_bytes - a->free_bytes : 0;
    a->pinned_small_bytes = h->small < a->bins_bytes ? h->small : a->bins_bytes;
    a->pinned_edge_bytes = h->edges < a->bins_bytes - a->pinned_small_bytes
                               ? h->edges
                               : a->bins_bytes - a->pinned_small_bytes;
    a->pinned_top_bytes = a->nr != 0 ? a->top_bytes : 0;
    a->releasable_bytes = a->bins_bytes - a->pinned_small_bytes - a->pinned_edge_bytes +
                          (a->nr == 0 ? a->top_bytes : 0);
    if (out->count == ARENAS_MAX)
        return fail(ps, "more than %d arenas", ARENAS_MAX);
    if (out->count % 16 == 0) {
        struct mt_arena *n = mt_realloc(out->arena, (size_t)(out->count + 16) * sizeof(*n));
        if (!n)
            return -ENOMEM;
        out->arena = n;
    }
    out->arena[out->count++] = *a;
    out->in_use_bytes += a->in_use_bytes;
    out->free_bytes += a->free_bytes;
    out->bins_bytes += a->bins_bytes;
    out->top_bytes += a->top_bytes;
    return 0;
}

static int top_element(struct parser *ps, const struct tag *t, struct mt_arenas *out)
{
    if (is(t, "total", "fast"))
        return num(ps, t, "size", &out->fastbin_bytes);
    if (is(t, "total", "rest"))
        return num(ps, t, "size", &out->rest_bytes);
    if (is(t, "total", "mmap")) {
        if (num(ps, t, "count", &out->mmapped_count))
            return -EINVAL;
        return num(ps, t, "size", &out->mmapped_bytes);
    }
    if (is(t, "system", "current"))
        return num(ps, t, "size", &out->system_bytes);
    if (is(t, "system", "max"))
        return num(ps, t, "size", &out->system_max_bytes);
    return 0;
}

static int parse_body(struct parser *ps, struct mt_arenas *out)
{
    struct tag t;
    struct heap_acc h;
    int rc, in_heap = 0, closed = 0;

    if ((rc = next_tag(ps, &t)) <= 0 || strcmp(t.name, "malloc") != 0)
        return rc < 0 ? rc : fail(ps, "expected <malloc>");
    while ((rc = next_tag(ps, &t)) > 0) {
        if (closed)
            return fail(ps, "<%s> after </malloc>", t.name);
        if (strcmp(t.name, "heap") == 0) {
            uint64_t nr;
            if (in_heap)
                return fail(ps, "<heap> inside <heap>");
            if (num(ps, &t, "nr", &nr))
                return -EINVAL;
            if (nr > ARENAS_MAX)
                return fail(ps, "arena number %llu out of range", (unsigned long long)nr);
            memset(&h, 0, sizeof(h));
            h.a.nr = (int)nr;
            in_heap = 1;
        } else if (strcmp(t.name, "/heap") == 0) {
            if (!in_heap)
                return fail(ps, "</heap> without <heap>");
            if ((rc = heap_close(ps, &h, out)))
                return rc;
            in_heap = 0;
        } else if (strcmp(t.name, "/malloc") == 0) {
            if (in_heap)
                return fail(ps, "</malloc> inside <heap>");
            closed = 1;
        } else if ((rc = in_heap ? heap_element(ps, &t, &h) : top_element(ps, &t, out))) {
            return rc;
        }
    }
    if (rc < 0)
        return rc;
    if (!closed)
        return fail(ps, "truncated: no </malloc>");
    if (out->count == 0)
        return fail(ps, "no arena listed");
    return 0;
}

int arenas_parse(const char *xml, size_t len, struct mt_arenas *out, char **err)
{
    struct parser ps = {.p = xml, .end = xml + len, .start = xml, .err = err};
    *err = NULL;
    memset(out, 0, sizeof(*out));
    if (!xml)
        return fail(&ps, "no input");
    int rc = parse_body(&ps, out);
    if (rc) {
        arenas_free(out);
        if (rc == -ENOMEM && !*err)
            *err = mt_strdup("malloc_info: out of memory");
    }
    return rc;
}

void arenas_free(struct mt_arenas *a)
{
    if (!a)
        return;
    free(a->arena);
    a->arena = NULL;
    a->count = 0;
}

int arenas_copy(struct mt_arenas *dst, const struct mt_arenas *src)
{
    *dst = *src;
    dst->arena = NULL;
    if (src->count == 0)
        return 0;
    dst->arena = mt_malloc((size_t)src->count * sizeof(*dst->arena));
    if (!dst->arena) {
        dst->count = 0;
        return -ENOMEM;
    }
    memcpy(dst->arena, src->arena, (size_t)src->count * sizeof(*dst->arena));
    return 0;
}

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int arenas_read(struct mt_arenas *out, char **err)
{
    char *xml = NULL;
    size_t len = 0;
    *err = NULL;
    memset(out, 0, sizeof(*out));
    FILE *f = mt_open_memstream(&xml, &len);
    if (!f) {
        *err = mt_strdup("malloc_info: cannot open a memory stream");
        return -ENOMEM;
    }
    int64_t c0 = thread_cpu_ns(), t0 = mt_mono_ns();
    int rc = malloc_info(0, f);
    int64_t t1 = mt_mono_ns(), c1 = thread_cpu_ns();
    if (fclose(f) != 0 || rc != 0) {
        free(xml);
        *err = mt_strdup("malloc_info failed");
        return -EIO;
    }
    rc = arenas_parse(xml, len, out, err);
    free(xml);
    out->timestamp_ms = mt_now_ms();
    out->duration_ns = t1 - t0;
    out->cpu_ns = c1 - c0;
    return rc;
}

int arenas_cache_init(struct arenas_cache *c)
{
    memset(c, 0, sizeof(*c));
    return pthread_mutex_init(&c->lock, NULL) ? -ENOMEM : 0;
}

void arenas_cache_destroy(struct arenas_cache *c)
{
    arenas_free(&c->last);
    pthread_mutex_destroy(&c->lock);
}

/* Cached within max_age_ms, else refreshed on the probe budget. Called with c->lock held. */
int arenas_cache_get_locked(struct arenas_cache *c, struct snapshot_cache *sc,
                            double budget_percent, int64_t max_age_ms, struct mt_arenas *out,
                            int64_t *retry_after_ms, char **err)
{
    struct mt_arenas fresh;
    int64_t now = mt_mono_ns(), wait;
    const char *allocator = snapshot_alloc_name(sc);

    *err = NULL;
    if (c->mono_ns && now - c->mono_ns <= max_age_ms * 1000000)
        return arenas_copy(out, &c->last);
    if (strcmp(allocator, "glibc") != 0) {
        char buf[160];
        snprintf(buf, sizeof(buf),
                 "%s serves malloc in this process: it has no per-arena view "
                 "that memtrim reads",
                 allocator);
        *err = mt_strdup(buf);
        return -ENOTSUP;
    }
    if (snapshot_budget_check(sc, &wait)) {
        c->refused++;
        snapshot_count_refused(sc);
        if (retry_after_ms)
            *retry_after_ms = (wait + 999999) / 1000000;
        return -EAGAIN;
    }
    int rc = arenas_read(&fresh, err);
    snapshot_budget_charge(sc, fresh.cpu_ns > 0 ? fresh.cpu_ns : fresh.duration_ns,
                           budget_percent);
    c->reads++;
    c->seconds += (double)fresh.duration_ns / 1e9;
    if (rc)
        return rc;
    arenas_free(&c->last);
    c->last = fresh;
    c->mono_ns = mt_mono_ns();
    return arenas_copy(out, &c->last);
}

#define ARENAS_EVERY_MS 30000 /* the housekeeper's arena view, at most this often */

void arenas_cache_tick(struct arenas_cache *c, struct snapshot_cache *sc, double budget_percent,
                       int64_t heap_timestamp_ms)
{
    struct mt_arenas a;
    char *err = NULL;
    if (strcmp(snapshot_alloc_name(sc), "glibc") != 0 || pthread_mutex_trylock(&c->lock) != 0)
        return; /* an HTTP reader is refreshing it now */
    int64_t age_ms = c->mono_ns ? (mt_mono_ns() - c->mono_ns) / 1000000 : -1;
    int64_t wait;
    /* The budget is asked first: a refusal here is not a reader's (the doctor counts those). */
    if ((age_ms < 0 || age_ms >= ARENAS_EVERY_MS) && heap_timestamp_ms > c->last.timestamp_ms &&
        snapshot_budget_check(sc, &wait) == 0 &&
        arenas_cache_get_locked(c, sc, budget_percent, ARENAS_EVERY_MS, &a, NULL, &err) == 0)
        arenas_free(&a);
    pthread_mutex_unlock(&c->lock);
    free(err);
}
