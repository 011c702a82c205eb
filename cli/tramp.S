/*
 * tramp.S - the code memtrim writes into a target's page (x86_64). It runs on the one
 * thread the tool interrupted, after the tool has detached: it blocks every signal,
 * calls the function named in its data block, stores the result, restores the thread's
 * extended state, signal mask and registers itself, and jumps back to where the thread
 * was (its system call restarted as the kernel would). Nothing here depends on the tool
 * staying alive. The layout (offsets from the page's start) is shared with inject.c
 * through tramp.h; the blob is position independent (rip-relative only).
 */
#include "tramp.h"

    .section .rodata.mt_tramp, "a"
    .p2align 12
    .globl mt_tramp_start
    .globl mt_tramp_end
mt_tramp_start:
    /* rt_sigprocmask(SIG_SETMASK, &all, NULL, 8): the tool asked for it too (PTRACE_SETSIGMASK) */
    mov $14, %eax
    mov $2, %edi
    lea (mt_tramp_start + TR_ALL_MASK)(%rip), %rsi
    xor %edx, %edx
    mov $8, %r10d
    syscall
    /* prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, page, length, name): 1,000 calls, one page */
    cmpq $0, (mt_tramp_start + TR_NAME_VMA)(%rip)
    je 1f
    mov $157, %eax
    mov $0x53564d41, %edi
    xor %esi, %esi
    lea mt_tramp_start(%rip), %rdx
    mov (mt_tramp_start + TR_MAP_LEN)(%rip), %r10
    lea (mt_tramp_start + TR_VMA_NAME)(%rip), %r8
    syscall
1:
    mov (mt_tramp_start + TR_ARG0)(%rip), %rdi
    mov (mt_tramp_start + TR_ARG1)(%rip), %rsi
    mov (mt_tramp_start + TR_ARG2)(%rip), %rdx
    mov (mt_tramp_start + TR_ARG3)(%rip), %rcx
    mov (mt_tramp_start + TR_ARG4)(%rip), %r8
    xor %eax, %eax
    call *(mt_tramp_start + TR_FUNC)(%rip)
    mov %rax, (mt_tramp_start + TR_RESULT)(%rip)
    movq $1, (mt_tramp_start + TR_DONE_CALL)(%rip)
    /* the extended state (SSE, AVX, ...) as the thread had it */
    cmpq $0, (mt_tramp_start + TR_USE_FXSR)(%rip)
    jne 2f
    mov (mt_tramp_start + TR_XMASK)(%rip), %eax
    mov (mt_tramp_start + TR_XMASK + 4)(%rip), %edx
    xrstor64 (mt_tramp_start + TR_XSAVE)(%rip)
    jmp 3f
2:
    fxrstor64 (mt_tramp_start + TR_XSAVE)(%rip)
3:
    /* the thread's own signal mask: what arrived meanwhile is delivered now */
    mov $14, %eax
    mov $2, %edi
    lea (mt_tramp_start + TR_ORIG_MASK)(%rip), %rsi
    xor %edx, %edx
    mov $8, %r10d
    syscall
    /* the general registers, rsp last; flags and rip come from the thread's own stack */
    mov (mt_tramp_start + TR_REGS + 8 * 0)(%rip), %rax
    mov (mt_tramp_start + TR_REGS + 8 * 1)(%rip), %rbx
    mov (mt_tramp_start + TR_REGS + 8 * 2)(%rip), %rcx
    mov (mt_tramp_start + TR_REGS + 8 * 3)(%rip), %rdx
    mov (mt_tramp_start + TR_REGS + 8 * 4)(%rip), %rsi
    mov (mt_tramp_start + TR_REGS + 8 * 5)(%rip), %rdi
    mov (mt_tramp_start + TR_REGS + 8 * 6)(%rip), %rbp
    mov (mt_tramp_start + TR_REGS + 8 * 7)(%rip), %r8
    mov (mt_tramp_start + TR_REGS + 8 * 8)(%rip), %r9
    mov (mt_tramp_start + TR_REGS + 8 * 9)(%rip), %r10
    mov (mt_tramp_start + TR_REGS + 8 * 10)(%rip), %r11
    mov (mt_tramp_start + TR_REGS + 8 * 11)(%rip), %r12
    mov (mt_tramp_start + TR_REGS + 8 * 12)(%rip), %r13
    mov (mt_tramp_start + TR_REGS + 8 * 13)(%rip), %r14
    mov (mt_tramp_start + TR_REGS + 8 * 14)(%rip), %r15
    mov (mt_tramp_start + TR_LOW_RSP)(%rip), %rsp
    /* from here on only the thread's stack is read: the page may be reused */
    movq $1, (mt_tramp_start + TR_DONE_ALL)(%rip)
    popfq
    ret $TR_RED_ZONE
mt_tramp_end:
    .section .note.GNU-stack, "", @progbits
