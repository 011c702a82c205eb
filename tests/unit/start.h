/*
 * start.h - the tests' way to start an instance: mt_create with a JSON
 * configuration, the failure reported as a failed check (NULL returned).
 * with memtrim's routes. Include after harness.h, api.h and core.h.
 */
#ifndef MEMTRIM_TEST_START_H
#define MEMTRIM_TEST_START_H

#include <stdlib.h>

static struct memtrim *start(const char *json)
{
    struct memtrim *mt = NULL;
    char *err = NULL;
    int rc = mt_create(json, &api_routes, &mt, &err);
    CHECK_MSG(rc == 0 && mt, "start failed: %d %s", rc, err ? err : "");
    free(err);
    return mt;
}

#endif /* MEMTRIM_TEST_START_H */
