/*
 * control.c - mt_control (control.h): whether MEMTRIM_CONTROL names a switch.
 * Built in test builds with MEMTRIM_CONTROLS only. The variable is copied once
 * (pthread_once) so a host that changes its environment later changes nothing.
 * Any thread; no lock beyond that once.
 */
#include "control.h"

#ifdef MEMTRIM_CONTROLS
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static char controls[512];
static pthread_once_t controls_once = PTHREAD_ONCE_INIT;

static void controls_read(void)
{
    const char *v = getenv("MEMTRIM_CONTROL");
    if (v != NULL && strlen(v) < sizeof(controls) - 2)
        (void)snprintf(controls, sizeof(controls), ",%s,", v);
}

int mt_control(const char *name)
{
    char want[128];
    pthread_once(&controls_once, controls_read);
    if (controls[0] == '\0' || name == NULL || strlen(name) + 3 > sizeof(want))
        return 0;
    (void)snprintf(want, sizeof(want), ",%s,", name);
    return strstr(controls, want) != NULL;
}
#else
typedef int mt_control_unused; /* ISO C wants a translation unit to declare something */
#endif
