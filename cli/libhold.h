/*
 * libhold.h - the library handed to a target for load without a file anywhere: a memfd held
 * by a helper process of the target's uid, in its pid namespace, that the target opens as
 * /proc/<helper>/fd/<n>; the helper dies with the tool (libhold.c). The tool's one thread.
 */
#ifndef MEMTRIM_CLI_LIBHOLD_H
#define MEMTRIM_CLI_LIBHOLD_H

#include "target.h"

#include <stddef.h>
#include <sys/types.h>

struct lib_hold {
    pid_t helper;   /* the tool's child; -1 if none */
    int stay;       /* its lifeline: the helper exits when this end closes */
    char path[64];  /* what the target opens */
};

/* 1 when the helper can serve this target (the tool is root, in the target's user
 * namespace, and the target has a procfs at /proc); else the caller copies the library. */
int lib_hold_possible(const struct target *t);
/* Starts the helper with the library's contents: 0 and h->path; -2 when the target's /proc
 * would not lead to it (the caller copies instead); -1 with err. */
int lib_hold_start(const struct target *t, const char *lib, struct lib_hold *h, char *err,
                   size_t errlen);
/* The helper's own image: main() hands it argv when argv[1] is LIB_HOLD_VERB (lib_hold_start
 * execs this program so); never returns but on bad arguments (1). */
#define LIB_HOLD_VERB "--lib-holder"
int lib_hold_main(int argc, char **argv);
/* Ends the helper (and with it the memfd, once the target has mapped it) and reaps it. */
void lib_hold_stop(struct lib_hold *h);

#endif
