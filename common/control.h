/*
 * control.h - the suite's controls (tests/controls.txt): in a build with
 * MEMTRIM_CONTROLS, mt_control("name") is true when the environment's
 * MEMTRIM_CONTROL names it (a comma-separated list, read once), and the code
 * that asks takes the old, defective path the named test must catch. In every
 * other build it is the constant 0 and the old path is dead code the compiler
 * drops. Any thread may call it; the list is read once, under pthread_once.
 */
#ifndef MEMTRIM_CONTROL_H
#define MEMTRIM_CONTROL_H

#ifdef MEMTRIM_CONTROLS
int mt_control(const char *name);
#else
#define mt_control(name) ((void)(name), 0)
#endif

#endif
