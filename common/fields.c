/*
 * fields.c - the field table of fields.h as data, and the one reading of a
 * field's value and null rule that the store, /memory/stats and /metrics
 * share. Constant tables; any thread, no locks.
 */
#include "fields.h"

#include <string.h>

#define MT_FIELD_ROW(name, type, member, known, column, metric, sample, help)                    \
    {#name, type, offsetof(struct mt_snapshot, member), known, column, metric, sample, help},
const struct mt_field mt_fields[MT_FIELD_COUNT] = {MT_SNAPSHOT_FIELDS(MT_FIELD_ROW)};
#undef MT_FIELD_ROW

int mt_field_get(const struct mt_field *f, const struct mt_snapshot *s, struct mt_field_value *v)
{
    const char *p = (const char *)s + f->offset;
    uint64_t u = 0;
    int iv = 0;

    memset(v, 0, sizeof(*v));
    switch (f->type) {
    case MT_FIELD_U64:
        memcpy(&u, p, sizeof(u));
        v->i = (int64_t)u;
        break;
    case MT_FIELD_I64:
    case MT_FIELD_MS:
        memcpy(&v->i, p, sizeof(v->i));
        break;
    case MT_FIELD_INT:
        memcpy(&iv, p, sizeof(iv));
        v->i = iv;
        break;
    case MT_FIELD_NS:
        memcpy(&v->i, p, sizeof(v->i));
        v->real = 1;
        v->d = (double)v->i / 1e9;
        v->i = 0;
        break;
    case MT_FIELD_F64:
        memcpy(&v->d, p, sizeof(v->d));
        v->real = 1;
        break;
    }
    unsigned bit = f->known >> 8;
    int known = !(f->known & MT_KNOWN_HEAP) ||
                (s->heap.timestamp_ms != 0 && (!bit || (s->heap.known & bit) != 0));
    if (f->known & MT_KNOWN_NONNEG)
        known = known && (v->real ? v->d >= 0 : v->i >= 0);
    if (f->known & MT_KNOWN_POSITIVE)
        known = known && (v->real ? v->d > 0 : v->i > 0);
    if (!known)
        memset(v, 0, sizeof(*v));
    return known;
}

const struct mt_field *mt_field_find(const char *name)
{
    for (int i = 0; name && i < MT_FIELD_COUNT; i++)
        if (strcmp(mt_fields[i].name, name) == 0)
            return &mt_fields[i];
    return NULL;
}
