/*
 * test_cli_elf.c - what the memtrim command's ELF reader (cli/elfsym.c) opens: a target may
 * plant anything at a library's path inside its root. A FIFO there must not hold the tool
 * (open without O_NONBLOCK waits for a writer), a link at its last component is not followed,
 * and only a regular file is read. Each case in a child under alarm(): a hang is a failure.
 * Control cmd-elf-open (the old flags): the FIFO's open never returns.
 */
#include "harness.h"

#include "elfsym.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

/* elf_open(path) in a child killed after 5 s: its return (0 or -errno), or 1000 for a hang. */
static int open_in_child(const char *path)
{
    pid_t c = fork();
    if (c == 0) {
        alarm(5);
        struct elf_file f;
        char err[256];
        int r = elf_open(path, &f, err, sizeof err);
        printf("elf_open(%s): %d %s\n", path, r, r ? err : "");
        fflush(stdout);
        _exit(r == 0 ? 0 : r < 0 && -r < 255 ? -r : 255);
    }
    int st;
    waitpid(c, &st, 0);
    if (WIFSIGNALED(st))
        return 1000;
    return -WEXITSTATUS(st);
}

static void test_a_fifo_is_refused_at_once(void)
{
    char dir[] = "/tmp/memtrim-elf-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/libc.so.6", dir);
    CHECK(mkfifo(path, 0600) == 0);
    int r = open_in_child(path);
    CHECK_MSG(r != 1000, "elf_open of a FIFO did not return within 5 s");
    CHECK_MSG(r == -ENOEXEC, "elf_open of a FIFO: %d", r);
    unlink(path);
    rmdir(dir);
}

static void test_a_link_is_not_followed(void)
{
    char dir[] = "/tmp/memtrim-elf-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/libc.so.6", dir);
    CHECK(symlink("/proc/self/exe", path) == 0); /* a real ELF file behind it */
    CHECK_EQ_INT(open_in_child(path), -ELOOP);
    CHECK_EQ_INT(open_in_child("/proc/self/exe"), 0); /* /proc's own link is */
    CHECK_EQ_INT(open_in_child("/dev/null"), -ENOEXEC);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    RUN(test_a_fifo_is_refused_at_once);
    RUN(test_a_link_is_not_followed);
    return harness_end();
}
