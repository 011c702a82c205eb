/*
 * agent.h - `memtrim agent`, the node daemon (docs/agent.md), as the command sees it: one
 * call that cli/main.c dispatches the verb to. Everything else of agent/ is private to it.
 */
#ifndef MEMTRIM_AGENT_H
#define MEMTRIM_AGENT_H

/* Runs the agent with the command line after the verb (argv[0] is "agent"); its exit code.
 * Returns when SIGTERM or SIGINT arrives (0), or at once on a bad configuration (1). */
int agent_main(int argc, char **argv);

#endif
