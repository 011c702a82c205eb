/*
 * elfsym.c - reads the dynamic symbol table of an ELF file mapped read-only: enough to find
 * malloc_trim, mallinfo2 or dlopen in a target's own libc. Used by the tool's one thread.
 */
#include "elfsym.h"

#include "../common/control.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ELF_MAX_SIZE (1LL << 30) /* libc.so.6 is 2 MiB; a larger one is not read */

static int in_file(const struct elf_file *f, uint64_t off, uint64_t len)
{
    return off <= f->size && len <= f->size - off;
}

/* A table of the file read in place: inside it, and at an offset aligned for its entries
 * (the map is page-aligned; a file that puts one elsewhere is not one the tool reads). */
static int table_in_file(const struct elf_file *f, uint64_t off, uint64_t len, uint64_t align)
{
    return in_file(f, off, len) && off % align == 0;
}

/* /proc's own links (map_files, exe) are followed; any other path is the target's to plant
 * (inside its root): its last component is never a link the tool follows. */
static int proc_link(const char *path)
{
    if (strncmp(path, "/proc/", 6) != 0)
        return 0;
    size_t n = strlen(path);
    return strstr(path, "/map_files/") != NULL || (n > 4 && !strcmp(path + n - 4, "/exe"));
}

int elf_open(const char *path, struct elf_file *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    /* O_NONBLOCK: a FIFO planted at a library's path would hold open() until a writer came */
    int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY;
    if (!mt_control("cmd-elf-open")) {
        flags |= O_NONBLOCK;
        if (!proc_link(path))
            flags |= O_NOFOLLOW;
    }
    int fd = open(path, flags);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (!S_ISREG(st.st_mode) && !mt_control("cmd-elf-open")) ||
        st.st_size < (off_t)sizeof(Elf64_Ehdr) || st.st_size > ELF_MAX_SIZE) {
        close(fd);
        snprintf(err, errlen, "%s is not an ELF file (a regular file of at most 1 GiB)", path);
        return -ENOEXEC;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "cannot map %s: %s", path, strerror(e));
        return -e;
    }
    f->map = m;
    f->size = (size_t)st.st_size;
    const Elf64_Ehdr *eh = m;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_machine != EM_X86_64 || eh->e_phentsize != sizeof(Elf64_Phdr) ||
        !table_in_file(f, eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr), 8)) {
        snprintf(err, errlen, "%s is not an x86_64 ELF file", path);
        elf_close(f);
        return -ENOEXEC;
    }
    f->is_dyn = eh->e_type == ET_DYN;
    const Elf64_Phdr *ph = (const void *)(f->map + eh->e_phoff);
    int seen = 0;
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type == PT_INTERP)
            f->has_interp = 1;
        if (ph[i].p_type == PT_LOAD && (!seen || ph[i].p_vaddr < f->first_vaddr)) {
            f->first_vaddr = ph[i].p_vaddr & ~(uint64_t)0xfff;
            seen = 1;
        }
    }
    return 0;
}

void elf_close(struct elf_file *f)
{
    if (f && f->map)
        munmap((void *)f->map, f->size);
    if (f)
        f->map = NULL;
}

/* want_object: STT_OBJECT (its st_size in *size), else a function. */
static uint64_t dynsym_of(const struct elf_file *f, const char *name, int want_object,
                          uint64_t *size)
{
    const Elf64_Ehdr *eh = (const void *)f->map;
    if (eh->e_shentsize != sizeof(Elf64_Shdr) ||
        !table_in_file(f, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr), 8))
        return 0;
    const Elf64_Shdr *sh = (const void *)(f->map + eh->e_shoff);
    const Elf64_Shdr *dynsym = NULL, *versym = NULL;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type == SHT_DYNSYM)
            dynsym = &sh[i];
        else if (sh[i].sh_type == SHT_GNU_versym)
            versym = &sh[i];
    }
    if (!dynsym || dynsym->sh_link >= eh->e_shnum || dynsym->sh_entsize != sizeof(Elf64_Sym) ||
        !table_in_file(f, dynsym->sh_offset, dynsym->sh_size, 8))
        return 0;
    const Elf64_Shdr *strs = &sh[dynsym->sh_link];
    if (!in_file(f, strs->sh_offset, strs->sh_size))
        return 0;
    size_t n = dynsym->sh_size / sizeof(Elf64_Sym);
    if (versym && (!table_in_file(f, versym->sh_offset, versym->sh_size, 2) ||
                   versym->sh_size < n * 2))
        versym = NULL;
    const Elf64_Sym *syms = (const void *)(f->map + dynsym->sh_offset);
    const char *str = (const char *)f->map + strs->sh_offset;
    const uint16_t *vs = versym ? (const void *)(f->map + versym->sh_offset) : NULL;
    uint64_t found = 0;
    size_t len = strlen(name);
    for (size_t i = 1; i < n; i++) {
        if (syms[i].st_shndx == SHN_UNDEF || syms[i].st_name >= strs->sh_size ||
            strs->sh_size - syms[i].st_name <= len)
            continue;
        int type = ELF64_ST_TYPE(syms[i].st_info);
        if ((want_object ? type != STT_OBJECT : type != STT_FUNC && type != STT_GNU_IFUNC) ||
            memcmp(str + syms[i].st_name, name, len + 1))
            continue;
        if (type == STT_GNU_IFUNC)
            continue; /* a resolver, not the function: none of ours are */
        if (size)
            *size = syms[i].st_size;
        if (!vs || !(vs[i] & 0x8000))
            return syms[i].st_value; /* the default version */
        found = syms[i].st_value;
    }
    return found;
}

uint64_t elf_dynsym(const struct elf_file *f, const char *name)
{
    return dynsym_of(f, name, 0, NULL);
}

uint64_t elf_dynobj(const struct elf_file *f, const char *name, uint64_t *size)
{
    *size = 0;
    return dynsym_of(f, name, 1, size);
}

uint64_t elf_find_code(const struct elf_file *f, const void *bytes, size_t len)
{
    const Elf64_Ehdr *eh = (const void *)f->map;
    const Elf64_Phdr *ph = (const void *)(f->map + eh->e_phoff);
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type != PT_LOAD || !(ph[i].p_flags & PF_X) ||
            !in_file(f, ph[i].p_offset, ph[i].p_filesz))
            continue;
        const unsigned char *seg = f->map + ph[i].p_offset;
        const unsigned char *hit = memmem(seg, ph[i].p_filesz, bytes, len);
        if (hit)
            return ph[i].p_vaddr + (uint64_t)(hit - seg);
    }
    return 0;
}

int elf_read(const struct elf_file *f, uint64_t vaddr, void *buf, size_t len)
{
    const Elf64_Ehdr *eh = (const void *)f->map;
    const Elf64_Phdr *ph = (const void *)(f->map + eh->e_phoff);
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type != PT_LOAD || vaddr < ph[i].p_vaddr ||
            vaddr - ph[i].p_vaddr >= ph[i].p_filesz || len > ph[i].p_filesz - (vaddr - ph[i].p_vaddr))
            continue;
        uint64_t off = ph[i].p_offset + (vaddr - ph[i].p_vaddr);
        if (!in_file(f, off, len))
            return -1;
        memcpy(buf, f->map + off, len);
        return 0;
    }
    return -1;
}

int elf_tpoff_slots(const struct elf_file *f, uint64_t *out, int max)
{
    const Elf64_Ehdr *eh = (const void *)f->map;
    if (eh->e_shentsize != sizeof(Elf64_Shdr) ||
        !in_file(f, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)))
        return 0;
    const Elf64_Shdr *sh = (const void *)(f->map + eh->e_shoff);
    int n = 0;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_RELA || sh[i].sh_entsize != sizeof(Elf64_Rela) ||
            !in_file(f, sh[i].sh_offset, sh[i].sh_size))
            continue;
        const Elf64_Rela *r = (const void *)(f->map + sh[i].sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof *r && n < max; k++)
            if (ELF64_R_TYPE(r[k].r_info) == R_X86_64_TPOFF64)
                out[n++] = r[k].r_offset;
    }
    return n;
}
