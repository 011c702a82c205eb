/*
 * panic.c - libmicrohttpd's panic handler, which is process-wide
 * (MHD_set_panic_func has no getter and no per-daemon form). Its default
 * calls abort(); a plugin must not end its host, so memtrim installs one that
 * logs and returns ("MHD will then try to continue") - but only when nothing
 * else in the process uses libmicrohttpd: a host (or another library) that
 * links it may have set its own handler, which memtrim must not replace.
 * Runs once per process (pthread_once), on whichever thread starts the first
 * server. server_quiesce (below) survives one known panic of MHD_quiesce_daemon on the
 * thread that calls it (a thread-local jump target); a counter of those, atomic. No locks
 * but pthread_once's.
 */
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <sched.h>
#include <link.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>

#include "common.h"
#include "control.h"
#include "internal.h"

static pthread_once_t panic_once = PTHREAD_ONCE_INIT;
static atomic_uint panics_survived;

unsigned server_mhd_panics_survived(void)
{
    return atomic_load(&panics_survived);
}

/* Set (on its own thread) while server_quiesce runs MHD_quiesce_daemon. */
static _Thread_local jmp_buf *quiesce_jump;

static void server_mhd_panic(void *cls, const char *file, unsigned int line, const char *reason)
{
    int e = errno; /* epoll_ctl's: MHD_PANIC follows the failed call at once */
    (void)cls;
    if (!mt_control("suite-quiesce-no-jump") && /* dbcd536's defect: the handler returns */
        quiesce_jump != NULL && e == ENOENT && reason != NULL &&
        strstr(reason, "remove listen FD from epoll") != NULL) {
        jmp_buf *back = quiesce_jump;
        quiesce_jump = NULL;
        atomic_fetch_add(&panics_survived, 1);
        longjmp(*back, 1); /* out of MHD_quiesce_daemon, which holds no lock there */
    }
    mt_log(MT_LOG_ERROR, "server", "libmicrohttpd panic at %s:%u: %s; trying to continue",
           file ? file : "?", line, reason ? reason : "no reason given");
}

struct mhd_users {
    ElfW(Addr) self;   /* load address of the object memtrim's code is in */
    const char *found; /* the first other object that needs libmicrohttpd */
};

/* Whether a loaded object lists libmicrohttpd among its DT_NEEDED. */
static int needs_mhd(const struct dl_phdr_info *info)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
            continue;
        const ElfW(Dyn) *dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        ElfW(Addr) strtab = 0;
        for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_STRTAB)
                strtab = d->d_un.d_ptr;
        if (strtab == 0)
            return 0;
        if (strtab < info->dlpi_addr) /* not relocated in place (the vDSO) */
            strtab += info->dlpi_addr;
        for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_NEEDED &&
                strncmp((const char *)strtab + d->d_un.d_val, "libmicrohttpd.", 14) == 0)
                return 1;
    }
    return 0;
}

static int find_other_user(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct mhd_users *u = arg;
    (void)size;
    if (info->dlpi_addr == u->self || !needs_mhd(info))
        return 0;
    u->found = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "the program";
    return 1;
}

const char *server_mhd_other_user(void)
{
    struct mhd_users u = {0, NULL};
    Dl_info self;
    /* The object memtrim's code is in (a library, or a program that links it statically). */
    if (dladdr((void *)server_mhd_panic, &self) && self.dli_fbase)
        u.self = (ElfW(Addr))self.dli_fbase;
    dl_iterate_phdr(find_other_user, &u);
    return u.found;
}

static void panic_install(void)
{
    const char *other = server_mhd_other_user();
    if (other) {
        mt_log(MT_LOG_INFO, "server",
               "%s uses libmicrohttpd too: its panic handler is left as it is", other);
        return;
    }
    MHD_set_panic_func(server_mhd_panic, NULL);
}

void server_panic_install(void)
{
    pthread_once(&panic_once, panic_install);
}

/*
 * libmicrohttpd 0.9.75's MHD_quiesce_daemon, with a pool of threads on epoll, marks each
 * worker quiesced and then removes the listening socket from that worker's epoll set,
 * panicking on any failure (daemon.c:5531). A worker that runs its loop in between (just
 * started, or woken by a connection) sees the mark and removes the socket itself first
 * (daemon.c:4940, which allows ENOENT): the quiesce then fails with ENOENT and panics,
 * and MHD_PANIC is followed by __builtin_unreachable, so a handler that returns runs
 * into undefined code (a host crashed with SIGSEGV, test_start_steps under load). Our
 * handler jumps back here instead for that one panic on this thread, and the quiesce
 * runs again: the workers done are marked and skipped, the one that won the race has
 * cleared its flag by then (it does right after its removal), the rest are done in turn.
 * A host whose own handler is kept (panic_install) keeps libmicrohttpd's behaviour.
 */
#define QUIESCE_RACE_NS (1 * MT_SEC) /* a worker clears its flag microseconds after its removal */

int server_quiesce(struct MHD_Daemon *d)
{
    jmp_buf here;
    const int64_t until = mt_mono_ns() + QUIESCE_RACE_NS;
    if (setjmp(here) != 0) {
        if (mt_mono_ns() >= until)
            return -EBUSY;
        sched_yield(); /* the worker that won: to its flag */
    }
    quiesce_jump = &here;
    MHD_quiesce_daemon(d);
    quiesce_jump = NULL;
    return 0;
}
