/*
 * elfsym.h - symbols of a target's shared object, read from the file it mapped (never from
 * the tool's own libraries: a container's libc is not ours). One thread, no state.
 */
#ifndef MEMTRIM_CLI_ELFSYM_H
#define MEMTRIM_CLI_ELFSYM_H

#include <stddef.h>
#include <stdint.h>

struct elf_file {
    const unsigned char *map;
    size_t size;
    uint64_t first_vaddr; /* the lowest PT_LOAD's p_vaddr, page aligned down */
    int has_interp;       /* a PT_INTERP: dynamically linked */
    int is_dyn;           /* ET_DYN */
};

/* Opens and checks an x86_64 ELF file; 0, or -errno with *err set. */
int elf_open(const char *path, struct elf_file *f, char *err, size_t errlen);
void elf_close(struct elf_file *f);
/* The defined dynamic symbol's value (its default version when there are several); 0 if absent. */
uint64_t elf_dynsym(const struct elf_file *f, const char *name);
/* The defined dynamic data object's value and its size (ld.so's _rtld_global); 0 if absent. */
uint64_t elf_dynobj(const struct elf_file *f, const char *name, uint64_t *size);

/* The virtual address (before the load bias) of the first occurrence of bytes in an
 * executable segment; 0 if none. */
uint64_t elf_find_code(const struct elf_file *f, const void *bytes, size_t len);
/* len bytes of the file's loaded image at virtual address vaddr (before the load bias): 0, or
 * -1 if they are not all in one PT_LOAD's file contents. */
int elf_read(const struct elf_file *f, uint64_t vaddr, void *buf, size_t len);
/* The addresses (r_offset) of the R_X86_64_TPOFF64 relocations: the GOT slots that hold, once
 * loaded, a thread-local variable's offset from the thread pointer. Their count (at most max). */
int elf_tpoff_slots(const struct elf_file *f, uint64_t *out, int max);

#endif
