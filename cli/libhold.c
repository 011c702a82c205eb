/*
 * libhold.c - load's library without a file (libhold.h). The tool copies libmemtrim.so into
 * a sealed memfd and forks a helper that holds it: the helper joins the target's pid
 * namespace (a second fork), takes the target's uid, gid and at most its capabilities, makes
 * itself dumpable, and waits on a pipe from the tool. The target's dlopen opens
 * /proc/<helper's pid as the target sees it>/fd/<n> (the kernel lets a process of the same
 * credentials read it). Nothing is written to any file system, so a tool killed at any
 * instant leaves nothing behind: the helper dies with it (PR_SET_PDEATHSIG, set again after
 * each change of credentials; the pipe's end) and the memfd with the helper, or with the
 * target's mapping. Readable by the target, the helper is writable by it too: it confines
 * itself with a seccomp filter first (helper_confine). The tool's one thread; the helper is
 * single-threaded and only makes system calls (no locks: forked from a single-threaded tool).
 */
#include "libhold.h"

#include "../common/control.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Root, in the target's user namespace (its credentials are ours to take), and a procfs at
 * the target's /proc (a chroot may have none: then the copy). */
int lib_hold_possible(const struct target *t)
{
    char proc[64];
    struct statfs sf;
    snprintf(proc, sizeof proc, "/proc/%d/root/proc", (int)t->pid);
    return geteuid() == 0 && target_same_ns(t->pid, "user") && statfs(proc, &sf) == 0 &&
           sf.f_type == PROC_SUPER_MAGIC;
}

/* A sealed memfd holding the file's bytes; -1 with errno. */
static int lib_memfd(const char *lib)
{
    int in = open(lib, O_RDONLY | O_CLOEXEC);
    int fd = in < 0 ? -1 : memfd_create("libmemtrim.so.0", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    char buf[65536];
    ssize_t n = 0;
    while (fd >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        for (ssize_t off = 0; off < n && fd >= 0;) {
            ssize_t w = write(fd, buf + off, (size_t)(n - off));
            if (w <= 0) {
                close(fd);
                fd = -1;
            }
            off += w;
        }
    int e = errno;
    if (fd >= 0 && (n < 0 || fchmod(fd, 0444) != 0 ||
                    fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK |
                                           F_SEAL_SEAL) != 0)) {
        e = errno;
        close(fd);
        fd = -1;
    }
    if (in >= 0)
        close(in);
    errno = e;
    return fd;
}

/* Once the helper is the target's to read, it is also the target's to write
 * (process_vm_writev: the same credentials rule): taken over, it must be able to do nothing
 * the target cannot. So before its credentials change it confines itself to the system calls
 * it makes from then on; it never opens a file, maps memory or creates a process again. */
static int helper_confine(void)
{
#define ALLOW_NR(n) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (n), 0, 1), \
                    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        ALLOW_NR(SYS_read), ALLOW_NR(SYS_write), ALLOW_NR(SYS_close), ALLOW_NR(SYS_exit),
        ALLOW_NR(SYS_exit_group), ALLOW_NR(SYS_getpid), ALLOW_NR(SYS_getppid),
        ALLOW_NR(SYS_setgroups), ALLOW_NR(SYS_setresgid), ALLOW_NR(SYS_setresuid),
        ALLOW_NR(SYS_capset), ALLOW_NR(SYS_prctl), ALLOW_NR(SYS_rt_sigreturn),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
#undef ALLOW_NR
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* What the helper is handed across its exec: the target's credentials and its descriptors. */
struct hold_args {
    pid_t tool;
    uid_t uid;
    gid_t gid;
    uint64_t caps;
    int lib, stay, report, pidns; /* pidns -1: the tool's own */
};

/* The helper's last steps: confined, the target's credentials, at most its capabilities,
 * dumpable, killed with its parent; then it reports its pid and waits for the pipe's end. */
static void helper_hold(const struct hold_args *a, pid_t parent)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct caps[2] = {
        {(uint32_t)a->caps, (uint32_t)a->caps, 0},
        {(uint32_t)(a->caps >> 32), (uint32_t)(a->caps >> 32), 0}};
    if (helper_confine() != 0 || setgroups(0, NULL) != 0 ||
        setresgid(a->gid, a->gid, a->gid) != 0 || setresuid(a->uid, a->uid, a->uid) != 0 ||
        (a->uid == 0 && syscall(SYS_capset, &hdr, caps) != 0) ||
        prctl(PR_SET_DUMPABLE, 1) != 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 ||
        getppid() != parent)
        _exit(1);
    int me[2] = {(int)getpid(), a->lib};
    if (write(a->report, me, sizeof me) != (ssize_t)sizeof me)
        _exit(1);
    close(a->report);
    char c;
    while (read(a->stay, &c, 1) != 0 && (errno == EINTR || errno == EAGAIN))
        ;
    _exit(0);
}

/* The helper, a fresh image of this program (lib_hold_main): into the target's pid namespace
 * if it has its own (a grandchild is in it), then helper_hold. Never returns. */
static void helper_main(const struct hold_args *a)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != a->tool)
        _exit(1);
    if (a->pidns < 0)
        helper_hold(a, a->tool);
    if (setns(a->pidns, CLONE_NEWPID) != 0)
        _exit(1);
    close(a->pidns);
    pid_t g = fork();
    if (g == 0) /* its parent is outside its namespace: getppid() says 0 while it lives */
        helper_hold(a, 0);
    close(a->report);
    char c;
    while (g > 0 && read(a->stay, &c, 1) != 0 && (errno == EINTR || errno == EAGAIN))
        ;
    if (g > 0)
        kill(g, SIGKILL);
    _exit(g > 0 ? 0 : 1);
}

/* The tool's child: a fresh image of this program, so that nothing of the tool's memory (its
 * environment, the configuration, the token) is in a process the target may read; only its
 * descriptors go across, standard input and outputs on /dev/null. Never returns. */
static void helper_exec(const struct hold_args *a)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != a->tool)
        _exit(1);
    int null = open("/dev/null", O_RDWR);
    if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
        _exit(1);
    for (int fd = 3; fd < 4096; fd++) /* the tool's descriptors (its lock) are not the helper's */
        if (fd != a->lib && fd != a->stay && fd != a->report && fd != a->pidns)
            close(fd);
    const int keep[4] = {a->lib, a->stay, a->report, a->pidns};
    for (int i = 0; i < 4; i++)
        if (keep[i] >= 0 && fcntl(keep[i], F_SETFD, 0) != 0)
            _exit(1);
    char nums[8][24];
    snprintf(nums[0], sizeof nums[0], "%d", (int)a->tool);
    snprintf(nums[1], sizeof nums[1], "%u", (unsigned)a->uid);
    snprintf(nums[2], sizeof nums[2], "%u", (unsigned)a->gid);
    snprintf(nums[3], sizeof nums[3], "%llx", (unsigned long long)a->caps);
    snprintf(nums[4], sizeof nums[4], "%d", a->lib);
    snprintf(nums[5], sizeof nums[5], "%d", a->stay);
    snprintf(nums[6], sizeof nums[6], "%d", a->report);
    snprintf(nums[7], sizeof nums[7], "%d", a->pidns);
    char *argv[] = {"memtrim", LIB_HOLD_VERB, nums[0], nums[1], nums[2], nums[3], nums[4],
                    nums[5], nums[6], nums[7], NULL};
    char *envp[] = {NULL};
    execve("/proc/self/exe", argv, envp);
    _exit(127);
}

int lib_hold_main(int argc, char **argv)
{
    unsigned long long v[7];
    if (argc != 10)
        return 1;
    for (int i = 0; i < 7; i++) {
        char *end;
        errno = 0;
        v[i] = strtoull(argv[2 + i], &end, i == 3 ? 16 : 10);
        if (errno || end == argv[2 + i] || *end)
            return 1;
    }
    char *end;
    long pidns = strtol(argv[9], &end, 10);
    if (end == argv[9] || *end || pidns < -1 || pidns > 4095)
        return 1;
    struct hold_args a = {.tool = (pid_t)v[0], .uid = (uid_t)v[1], .gid = (gid_t)v[2],
                          .caps = v[3], .lib = (int)v[4], .stay = (int)v[5],
                          .report = (int)v[6], .pidns = (int)pidns};
    helper_main(&a);
    return 1;
}

int lib_hold_start(const struct target *t, const char *lib, struct lib_hold *h, char *err,
                   size_t errlen)
{
    int stay[2] = {-1, -1}, report[2] = {-1, -1}, pidns = -1, got[2] = {0, 0}, rc = -1;
    h->helper = -1;
    h->stay = -1;
    int fd = lib_memfd(lib);
    if (fd < 0) {
        snprintf(err, errlen, "cannot copy %.400s into a memfd: %s", lib, strerror(errno));
        return -1;
    }
    char ns[64];
    snprintf(ns, sizeof ns, "/proc/%d/ns/pid", (int)t->pid);
    if (!target_same_ns(t->pid, "pid"))
        pidns = open(ns, O_RDONLY | O_CLOEXEC);
    if ((!target_same_ns(t->pid, "pid") && pidns < 0) || pipe2(stay, O_CLOEXEC) != 0 ||
        pipe2(report, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot prepare the library's helper: %s", strerror(errno));
        goto fail;
    }
    struct hold_args a = {.tool = getpid(), .uid = t->st.euid, .gid = t->st.egid,
                          .caps = t->st.cap_prm, .lib = fd, .stay = stay[0],
                          .report = report[1], .pidns = pidns};
    h->helper = fork();
    if (h->helper == 0) {
        close(stay[1]);
        close(report[0]);
        if (mt_control("cmd-load-helper-fork")) /* the tool's memory and descriptors kept */
            helper_main(&a);
        helper_exec(&a);
    }
    close(report[1]);
    report[1] = -1;
    struct pollfd p = {report[0], POLLIN, 0};
    if (h->helper < 0 || poll(&p, 1, 5000) != 1 ||
        read(report[0], got, sizeof got) != (ssize_t)sizeof got || got[0] <= 0) {
        snprintf(err, errlen, "the library's helper did not start (it takes process %d's "
                 "credentials%s)", (int)t->pid, pidns >= 0 ? " and pid namespace" : "");
        goto fail;
    }
    snprintf(h->path, sizeof h->path, "/proc/%d/fd/%d", got[0], got[1]);
    h->stay = stay[1];
    stay[1] = -1;
    /* the path, resolved as the target will (its root, its /proc), must be our memfd: a
     * /proc of another pid namespace (an unshare without its own proc mount) would name
     * another process's descriptor */
    char seen[128];
    struct stat want, there;
    snprintf(seen, sizeof seen, "/proc/%d/root%s", (int)t->pid, h->path);
    if (!mt_control("cmd-load-proc-check") &&
        (fstat(fd, &want) != 0 || stat(seen, &there) != 0 || want.st_ino != there.st_ino ||
         want.st_dev != there.st_dev)) {
        snprintf(err, errlen, "process %d's /proc does not show memtrim's helper as %s (a /proc "
                 "of another pid namespace?)", (int)t->pid, h->path);
        rc = -2;
        goto fail;
    }
    close(stay[0]);
    close(report[0]);
    close(fd);
    if (pidns >= 0)
        close(pidns);
    return 0;
fail:
    lib_hold_stop(h);
    for (int i = 0; i < 2; i++) {
        if (stay[i] >= 0)
            close(stay[i]);
        if (report[i] >= 0)
            close(report[i]);
    }
    close(fd);
    if (pidns >= 0)
        close(pidns);
    return rc;
}

void lib_hold_stop(struct lib_hold *h)
{
    if (h->stay >= 0)
        close(h->stay);
    h->stay = -1;
    if (h->helper > 0) {
        kill(h->helper, SIGKILL); /* its grandchild follows it (PR_SET_PDEATHSIG) */
        while (waitpid(h->helper, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    h->helper = -1;
}
