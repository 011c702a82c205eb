/*
 * host_preload.c - starts memtrim inside an unmodified program:
 * LD_PRELOAD=libmemtrim.so MEMTRIM_CONFIG=<file or inline JSON> ./server.
 * The constructor runs on the program's main thread before main(); the
 * destructor at exit. The instance pointer is the one global the design
 * allows; it is written only by the constructor, destructor and fork hook.
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define CONFIG_FILE_MAX (1024 * 1024)

static struct memtrim *preload_instance;

/* MEMTRIM_CONFIG holds inline JSON (starts with '{') or a file path. */
static char *load_config(const char *value, char **err)
{
    const char *p = value;
    while (*p == ' ' || *p == '\t' || *p == '\n')
        p++;
    if (*p == '{')
        return strdup(p);
    FILE *f = fopen(value, "re");
    if (!f) {
        char buf[600];
        snprintf(buf, sizeof(buf), "MEMTRIM_CONFIG: cannot read %.500s: %s", value,
                 strerror(errno));
        *err = strdup(buf);
        return NULL;
    }
    char *text = malloc(CONFIG_FILE_MAX + 1);
    size_t n = text ? fread(text, 1, CONFIG_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (!text || n > CONFIG_FILE_MAX) {
        free(text);
        *err = strdup("MEMTRIM_CONFIG: file too large (over 1 MiB) or out of memory");
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* Only when this library was preloaded: a host that dlopens it starts it itself. */
static int preloaded(void)
{
    const char *lp = getenv("LD_PRELOAD");
    return lp && strstr(lp, "libmemtrim") != NULL;
}

static void preload_child_after_fork(void)
{
    /* The child has none of the parent's threads: forget the instance, don't touch it. */
    preload_instance = NULL;
}

__attribute__((constructor)) static void preload_init(void)
{
    const char *value = getenv("MEMTRIM_CONFIG");
    char *err = NULL, *json;

    if (!value || !*value || !preloaded())
        return;
    json = load_config(value, &err);
    if (json && mt_create(json, &preload_instance, &err) == 0) {
        pthread_atfork(NULL, NULL, preload_child_after_fork);
    } else {
        fprintf(stderr, "memtrim: not started: %s\n", err ? err : "unknown error");
        preload_instance = NULL;
    }
    free(json);
    free(err);
}

__attribute__((destructor)) static void preload_fini(void)
{
    struct memtrim *mt = preload_instance;
    preload_instance = NULL;
    mt_destroy(mt);
}
