/*
 * mem.h - reading and writing a target's memory (process_vm_readv/writev, under the kernel's
 * ptrace access rules): all or nothing, 0 or -1. inject.c and pick.c.
 */
#ifndef MEMTRIM_CLI_MEM_H
#define MEMTRIM_CLI_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

static inline int mem_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
    struct iovec local = {buf, len}, remote = {(void *)(uintptr_t)addr, len};
    return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

static inline int mem_write(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
    struct iovec local = {(void *)buf, len}, remote = {(void *)(uintptr_t)addr, len};
    return process_vm_writev(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

#endif
