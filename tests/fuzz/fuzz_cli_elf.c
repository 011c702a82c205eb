/*
 * fuzz_cli_elf.c - libFuzzer harness for the memtrim command's ELF reader (cli/elfsym.c),
 * which runs as root on files a target maps (its libc, its ld.so, a container's): any bytes
 * as a file through elf_open, then every lookup the tool makes (a function, a data object
 * with its size, a code sequence). No input may crash, leak or read outside the file; a
 * symbol found lies inside what a 64-bit address can hold.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "elfsym.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz-elf", 0);
        if (fd < 0)
            __builtin_trap();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        __builtin_trap();
    struct elf_file ef;
    char err[256];
    err[0] = 0;
    if (elf_open(path, &ef, err, sizeof err) != 0) {
        if (!err[0])
            __builtin_trap(); /* every refusal says why */
        return 0;
    }
    uint64_t size_obj = 0;
    (void)elf_dynsym(&ef, "malloc_trim");
    (void)elf_dynsym(&ef, "dlopen");
    (void)elf_dynobj(&ef, "_rtld_global", &size_obj);
    (void)elf_find_code(&ef, "\x48\xc7\xc0\x0f\x00\x00\x00\x0f\x05", 9);
    elf_close(&ef);
    return 0;
}
