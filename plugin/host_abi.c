/*
 * host_abi.c - the exported C ABI of libmemtrim.so (include/memtrim.h): thin
 * wrappers over the core that check their arguments. Runs on whichever of
 * the host's threads calls (every function is thread-safe, memtrim.h). No
 * state and no locks of its own: the core takes its own (instance_lock for
 * start and stop, each part's lock for the rest).
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stdlib.h>

#include "api.h"
#include "core.h"
#include "memtrim.h"

MEMTRIM_API int memtrim_start(const char *config_json, memtrim_t **out, char **errmsg)
{
    if (errmsg)
        *errmsg = NULL;
    if (!out)
        return -EINVAL;
    return mt_create(config_json, &api_routes, out, errmsg);
}

MEMTRIM_API void memtrim_stop(memtrim_t *mt)
{
    mt_destroy(mt);
}

MEMTRIM_API int memtrim_suspend(memtrim_t *mt)
{
    return mt_suspend(mt);
}

MEMTRIM_API int memtrim_resume(memtrim_t *mt)
{
    return mt_resume(mt);
}

MEMTRIM_API int memtrim_http_port(const memtrim_t *mt)
{
    return mt_http_port(mt);
}

MEMTRIM_API int memtrim_http_address(const memtrim_t *mt, char *buf, size_t size)
{
    if (!mt || !buf || size == 0)
        return -EINVAL;
    buf[0] = '\0';
    return mt_http_address(mt, buf, size);
}

MEMTRIM_API const char *memtrim_version(void)
{
    return MEMTRIM_VERSION;
}

MEMTRIM_API void memtrim_free(void *p)
{
    free(p);
}
