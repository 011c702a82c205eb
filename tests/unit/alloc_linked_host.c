/*
 * alloc_linked_host.c - a host linked against libjemalloc.so.2 at build time
 * (no preload): test_alloc runs it and reads the allocator that detection
 * found, so "linked in" is checked as well as "preloaded".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

int main(void)
{
    struct alloc_found found;
    const struct alloc_ops *a = NULL;
    char *err = NULL;
    void *p = malloc(1 << 20); /* the host uses its allocator */
    memset(p, 1, 1 << 20);
    alloc_detect(&found);
    if (alloc_select("auto", &a, &err) != 0) {
        printf("error %s\n", err ? err : "?");
        return 1;
    }
    printf("serving %s selected %s object %s\n", found.serving ? found.serving : "none", alloc_name(a),
           found.malloc_object);
    free(p);
    return 0;
}
