/*
 * panic.c - libmicrohttpd's panic handler, which is process-wide
 * (MHD_set_panic_func has no getter and no per-daemon form). Its default
 * calls abort(); a plugin must not end its host, so memtrim installs one that
 * logs and returns ("MHD will then try to continue") - but only when nothing
 * else in the process uses libmicrohttpd: a host (or another library) that
 * links it may have set its own handler, which memtrim must not replace.
 * Runs once per process (pthread_once), on whichever thread starts the first
 * server; no other state, no locks but pthread_once's.
 */
#include <dlfcn.h>
#include <link.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "internal.h"

static pthread_once_t panic_once = PTHREAD_ONCE_INIT;

static void server_mhd_panic(void *cls, const char *file, unsigned int line, const char *reason)
{
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
