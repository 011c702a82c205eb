/*
 * test_cli_shstk.c - the memtrim command never takes a thread that runs with the x86 user
 * shadow stack (CET, Linux 6.6+): both of the page's self-restores would fault there
 * (rt_sigreturn finds no restore token on the shadow stack; the old restore's ret does not
 * match its top), killing the target when the tool and its tracer both die. The kernel shows
 * the thread's features in its status file (arch_proc_pid_thread_features: "x86_Thread_features:\t"
 * then "shstk " and/or "wrss ", then "x86_Thread_features_locked:\t..."). This machine's CPU
 * has no user shadow stack, so the texts are the kernel's format written by hand, and a live
 * thread here must read as without one. Control cmd-shstk-taken (the line never read): the
 * enabled texts read as without a shadow stack.
 */
#include "harness.h"

#include "target.h"

#include <sys/syscall.h>
#include <unistd.h>

static const char *const head = "Name:\tserver\nUmask:\t0022\nState:\tS (sleeping)\n"
                                "Tgid:\t4242\nPid:\t4243\nSeccomp:\t0\n";

static int parse(const char *tail)
{
    char text[1024];
    snprintf(text, sizeof text, "%s%s", head, tail);
    return target_parse_shstk(text);
}

static void test_enabled_is_seen(void)
{
    CHECK_EQ_INT(parse("x86_Thread_features:\tshstk \nx86_Thread_features_locked:\t\n"), 1);
    CHECK_EQ_INT(parse("x86_Thread_features:\tshstk wrss \nx86_Thread_features_locked:\tshstk "
                       "wrss \n"), 1);
    CHECK_EQ_INT(parse("x86_Thread_features:\tshstk"), 1); /* the last line, no newline */
}

static void test_disabled_is_not(void)
{
    CHECK_EQ_INT(parse(""), 0); /* a kernel or CPU without it: no line */
    CHECK_EQ_INT(parse("x86_Thread_features:\t\nx86_Thread_features_locked:\t\n"), 0);
    CHECK_EQ_INT(parse("x86_Thread_features:\twrss \n"), 0);
    /* locked off, not enabled: only the features line counts */
    CHECK_EQ_INT(parse("x86_Thread_features:\t\nx86_Thread_features_locked:\tshstk \n"), 0);
    CHECK_EQ_INT(parse("x86_Thread_features:\tnoshstk shstkx \n"), 0);
    CHECK_EQ_INT(parse("Name:\tx86_Thread_features: shstk\n"), 0); /* a program's name */
}

static void test_live_thread(void)
{
    /* this CPU has no user shadow stack: a live thread reads as without one */
    CHECK_EQ_INT(target_thread_shstk(getpid(), (pid_t)syscall(SYS_gettid)), 0);
    CHECK_EQ_INT(target_thread_shstk(getpid(), 0), 0); /* unreadable: 0, no crash */
}

int main(void)
{
    RUN(test_enabled_is_seen);
    RUN(test_disabled_is_not);
    RUN(test_live_thread);
    return harness_end();
}
